//! Peer MACs from the kernel: a peer address this machine owns (the netdev's own MAC; all
//! zeros on loopback), or a complete entry of the IPv4 neighbour table (`/proc/net/arp`).
//!
//! The vfio provider needs the peer's MAC for a QP's address path and has no ARP of its own: a
//! function on vfio-pci has no netdev, so the kernel never resolves addresses on its subnet.
//! rdmesh carries MACs in its own out-of-band exchanges (mesh handshake, `rdmesh bench`); this
//! is the fallback for peers that do not (rdma-core's `ibv_rc_pingpong`, perftest), which works
//! when the kernel reaches the peer's address through a netdev of its own (the out-of-band TCP
//! connection then fills the neighbour entry).

use std::net::IpAddr;

/// The MAC of `ip`: a local address's netdev MAC, else the kernel's neighbour entry.
pub fn peer_mac(ip: IpAddr) -> Option<[u8; 6]> {
    local_mac(ip).or_else(|| {
        let text = std::fs::read_to_string("/proc/net/arp").ok()?;
        arp_lookup(&text, ip)
    })
}

/// The MAC of the netdev that owns `ip` on this machine (loopback: all zeros).
fn local_mac(ip: IpAddr) -> Option<[u8; 6]> {
    let netdevs = super::addrs::from_netlink().ok()?;
    let owner = netdevs
        .iter()
        .find(|n| n.addrs.iter().any(|a| a.ip == ip))
        .or_else(|| {
            netdevs
                .iter()
                .find(|n| n.loopback && n.addrs.iter().any(|a| a.contains(ip)))
        })?;
    if owner.loopback {
        return Some([0; 6]);
    }
    let text = std::fs::read_to_string(format!("/sys/class/net/{}/address", owner.name)).ok()?;
    crate::verbs::parse_mac(text.trim())
}

/// A complete entry (flags `0x2`) for `ip` in the text of `/proc/net/arp`.
pub fn arp_lookup(text: &str, ip: IpAddr) -> Option<[u8; 6]> {
    let IpAddr::V4(v4) = ip else { return None };
    text.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let (addr, flags, mac) = (f.first()?, f.get(2)?, f.get(3)?);
        let flags = u32::from_str_radix(flags.trim_start_matches("0x"), 16).ok()?;
        (addr.parse::<std::net::Ipv4Addr>().ok()? == v4 && flags & 0x2 != 0)
            .then(|| crate::verbs::parse_mac(mac))
            .flatten()
    })
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn arp_table() {
        let t = "IP address       HW type     Flags       HW address            Mask     Device\n\
                 192.0.2.1        0x1         0x2         02:fc:00:00:00:05     *        eth0\n\
                 192.0.2.9        0x1         0x0         00:00:00:00:00:00     *        eth0\n";
        assert_eq!(
            arp_lookup(t, "192.0.2.1".parse().unwrap()),
            Some([2, 0xfc, 0, 0, 0, 5])
        );
        assert_eq!(
            arp_lookup(t, "192.0.2.9".parse().unwrap()),
            None,
            "incomplete"
        );
        assert_eq!(arp_lookup(t, "192.0.2.2".parse().unwrap()), None);
        assert_eq!(peer_mac("127.0.0.1".parse().unwrap()), Some([0; 6]));
    }
}
