//! The path MTU towards a peer, from the kernel's route rather than from a netdev: two ranks on
//! one host talking over their eth0 addresses go through `lo` (MTU 65536), not eth0.

use std::net::{IpAddr, SocketAddr, UdpSocket};

use crate::verbs::{active_mtu_for, Mtu};

/// The route's MTU from `local` to `peer` in bytes (IP packet size): a UDP socket bound to
/// `local` and connected to `peer` reads it with `IP_MTU` / `IPV6_MTU` (ip(7), ipv6(7)), which
/// includes any cached path MTU the kernel learnt.
///
/// Errors: the socket calls (no route to `peer`, `local` not an address of this host).
pub fn route_mtu(local: IpAddr, peer: IpAddr) -> std::io::Result<u32> {
    let s = UdpSocket::bind(SocketAddr::new(local, 0))?;
    s.connect(SocketAddr::new(peer, crate::verbs::ROCE_V2_UDP_PORT))?;
    let mtu = if peer.is_ipv4() {
        rustix::net::sockopt::ip_mtu(&s)?
    } else {
        rustix::net::sockopt::ipv6_mtu(&s)?
    };
    Ok(mtu)
}

/// The IB path MTU for RoCEv2 packets on the route from `local` to `peer` (the largest of 256 ..
/// 4096 that fits with the IP, UDP, BTH, extended headers and ICRC, IBTA's cap 4096), and the
/// route MTU it came from; `None` when the route cannot be read.
pub fn ib_path_mtu(local: IpAddr, peer: IpAddr) -> Option<(Mtu, u32)> {
    match route_mtu(local, peer) {
        Ok(m) => Some((active_mtu_for(m), m)),
        Err(e) => {
            tracing::debug!(%local, %peer, error = %e, "cannot read the route MTU");
            None
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn loopback_routes_allow_the_ibta_maximum() {
        let lo = IpAddr::from([127, 0, 0, 1]);
        let (mtu, route) = ib_path_mtu(lo, lo).unwrap();
        assert!(route >= 4096 + 80, "lo MTU {route}");
        assert_eq!(mtu, Mtu::Mtu4096);
    }
}
