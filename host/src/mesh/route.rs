//! Routing: which local NICs reach a peer directly, and which nodes to relay through when none
//! does.
//!
//! - **Direct rails.** For each of the peer's link addresses, the local NIC whose subnet
//!   contains it with the longest prefix is a rail to that address (longest prefix match, as an
//!   IP route lookup). Each local device port and each peer address carries at most one rail.
//!   Several rails to one peer (the two halves of a DGX Spark port, each on its own subnet)
//!   are used together: large messages are striped across them.
//! - **Relay path.** When no local NIC shares a subnet with the peer, the nodes the mesh knows
//!   (from handles, handshakes and topology queries) form a graph in which two nodes are linked
//!   when an address of one lies in the subnet of an address of the other. The path is the
//!   shortest one (breadth-first, fewest links; ties go to the lower node id) through nodes that
//!   relay, with at most `max_hops` links.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::IpAddr;

use crate::mesh::handle::NodeInfo;
use crate::mesh::nic::NicSpec;
use crate::topo::IfAddr;

/// A direct rail: a local NIC and the peer address it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RailChoice {
    /// Index of the local NIC.
    pub nic: usize,
    /// The peer's address on that NIC's subnet.
    pub peer_addr: IpAddr,
}

/// The direct rails from `local` NICs to a node with addresses `peer`, highest ceiling first
/// (ties keep NIC order): the rail small messages use comes first.
///
/// A peer address equal to a local NIC's address does not make a rail, unless no other rail
/// exists: then the peer is another node on this host (two processes, e.g. two NCCL ranks, on
/// the same interfaces), reached over those shared addresses.
pub fn direct_rails(local: &[NicSpec], peer: &[IfAddr]) -> Vec<RailChoice> {
    let out = rails_where(local, peer, false);
    if out.is_empty() {
        rails_where(local, peer, true)
    } else {
        out
    }
}

fn rails_where(local: &[NicSpec], peer: &[IfAddr], same_host: bool) -> Vec<RailChoice> {
    let mut out: Vec<RailChoice> = Vec::new();
    let mut ports_used: HashSet<(String, u32)> = HashSet::new();
    // Longest prefixes first, so a port's most specific match wins.
    let mut candidates: Vec<(u8, usize, IpAddr)> = Vec::new();
    for pa in peer {
        if let Some((i, nic)) = local
            .iter()
            .enumerate()
            .filter(|(_, n)| n.addr.contains(pa.ip) && (same_host || n.addr.ip != pa.ip))
            .max_by(|(ia, a), (ib, b)| a.addr.prefix_len.cmp(&b.addr.prefix_len).then(ib.cmp(ia)))
        {
            candidates.push((nic.addr.prefix_len, i, pa.ip));
        }
    }
    // IPv4 first (unless RDMESH_PREFER_IPV6=1): one port's v4 and v6 addresses make one rail,
    // and the v4 one is what both ends of a RoCE link reliably have; then longest prefixes.
    let v6_first = prefer_ipv6();
    candidates.sort_by(|a, b| {
        (a.2.is_ipv6() != v6_first)
            .cmp(&(b.2.is_ipv6() != v6_first))
            .then(b.0.cmp(&a.0))
            .then(a.1.cmp(&b.1))
    });
    for (_, i, ip) in candidates {
        let key = (local[i].device.clone(), local[i].port);
        if ports_used.contains(&key) || out.iter().any(|r| r.peer_addr == ip) {
            continue;
        }
        ports_used.insert(key);
        out.push(RailChoice {
            nic: i,
            peer_addr: ip,
        });
    }
    out.sort_by(|a, b| {
        local[b.nic]
            .gbps
            .partial_cmp(&local[a.nic].gbps)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.nic.cmp(&b.nic))
    });
    out
}

/// Whether rails prefer IPv6 addresses where a port has both (`RDMESH_PREFER_IPV6=1`); the
/// default is IPv4.
pub fn prefer_ipv6() -> bool {
    std::env::var("RDMESH_PREFER_IPV6").is_ok_and(|v| v == "1")
}

/// Whether two nodes share a link: an address of one lies in the subnet of an address of the
/// other (under either side's prefix length).
pub fn linked(a: &[IfAddr], b: &[IfAddr]) -> bool {
    a.iter().any(|x| {
        b.iter()
            .any(|y| x.ip != y.ip && (x.contains(y.ip) || y.contains(x.ip)))
    })
}

/// The shortest path from this node (`self_id` with addresses `self_addrs`) to `target` over
/// the known `nodes`: the node ids after this one, ending with `target`, or `None` when no path
/// of at most `max_hops` links exists. Only nodes that relay may be intermediate hops.
pub fn shortest_path(
    self_id: u64,
    self_addrs: &[IfAddr],
    target: &NodeInfo,
    nodes: &[NodeInfo],
    max_hops: usize,
) -> Option<Vec<u64>> {
    let mut by_id: BTreeMap<u64, &NodeInfo> = BTreeMap::new();
    for n in nodes {
        if n.id != self_id {
            by_id.insert(n.id, n);
        }
    }
    by_id.insert(target.id, target);
    let mut prev: BTreeMap<u64, u64> = BTreeMap::new();
    let mut depth: BTreeMap<u64, usize> = BTreeMap::new();
    let mut queue = VecDeque::new();
    depth.insert(self_id, 0);
    queue.push_back(self_id);
    while let Some(u) = queue.pop_front() {
        let d = depth[&u];
        if u == target.id {
            break;
        }
        if d >= max_hops {
            continue;
        }
        if u != self_id && !by_id.get(&u).is_some_and(|n| n.relays) {
            continue;
        }
        let u_addrs: &[IfAddr] = if u == self_id {
            self_addrs
        } else {
            &by_id[&u].addrs
        };
        for (&v, n) in &by_id {
            if depth.contains_key(&v) || !linked(u_addrs, &n.addrs) {
                continue;
            }
            depth.insert(v, d + 1);
            prev.insert(v, u);
            queue.push_back(v);
        }
    }
    if !depth.contains_key(&target.id) {
        return None;
    }
    let mut path = vec![target.id];
    let mut cur = target.id;
    while let Some(&p) = prev.get(&cur) {
        if p == self_id {
            break;
        }
        path.push(p);
        cur = p;
    }
    path.reverse();
    Some(path)
}

#[cfg(test)]
mod test {
    use super::*;

    fn a(s: &str) -> IfAddr {
        let (ip, p) = s.split_once('/').unwrap();
        IfAddr {
            ip: ip.parse().unwrap(),
            prefix_len: p.parse().unwrap(),
        }
    }

    fn nic(dev: &str, addr: &str, gbps: f64) -> NicSpec {
        NicSpec {
            device: dev.into(),
            port: 1,
            netdev: dev.into(),
            addr: a(addr),
            gbps,
            provider: Default::default(),
        }
    }

    fn node(id: u64, addrs: &[&str]) -> NodeInfo {
        NodeInfo {
            id,
            tcp_port: 1,
            relays: true,
            addrs: addrs.iter().map(|s| a(s)).collect(),
        }
    }

    #[test]
    fn triangle_picks_the_nic_on_the_peer_subnet() {
        // Node A of the nccl-mesh-plugin triangle: 100.0/24 to B, 102.0/24 to C.
        let local = [
            nic("ab", "192.168.100.1/24", 100.0),
            nic("ac", "192.168.102.1/24", 100.0),
        ];
        let b = [a("192.168.100.2/24"), a("192.168.101.2/24")];
        let c = [a("192.168.101.3/24"), a("192.168.102.3/24")];
        assert_eq!(
            direct_rails(&local, &b),
            vec![RailChoice {
                nic: 0,
                peer_addr: "192.168.100.2".parse().unwrap()
            }]
        );
        assert_eq!(direct_rails(&local, &c)[0].nic, 1);
        assert!(direct_rails(&local, &[a("10.0.0.1/24")]).is_empty());
    }

    #[test]
    fn a_peer_on_the_same_addresses_is_another_process_on_this_host() {
        // Two NCCL ranks on one host: both nodes have eth0 192.0.2.2/24.
        let local = [
            nic("eth0", "192.0.2.2/24", 10.0),
            nic("eth1", "10.9.0.1/24", 10.0),
        ];
        let r = direct_rails(&local, &[a("192.0.2.2/24"), a("10.9.0.1/24")]);
        assert_eq!(r.len(), 2, "{r:?}");
        assert_eq!(r[0].peer_addr, "192.0.2.2".parse::<IpAddr>().unwrap());
        // A distinct address on a shared subnet is preferred: the equal one is left out.
        let r = direct_rails(&local, &[a("192.0.2.3/24"), a("10.9.0.1/24")]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].peer_addr, "192.0.2.3".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn longest_prefix_wins_and_rails_are_ordered_by_ceiling() {
        let local = [
            nic("wide", "10.0.0.1/8", 10.0),
            nic("narrow", "10.1.2.1/24", 100.0),
        ];
        let r = direct_rails(&local, &[a("10.1.2.9/24")]);
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].nic, 1);
        // Spark pair: two halves, two subnets, two rails, the faster first.
        let local = [
            nic("half0", "10.10.1.11/24", 30.0),
            nic("half1", "10.10.2.11/24", 90.0),
        ];
        let r = direct_rails(&local, &[a("10.10.1.12/24"), a("10.10.2.12/24")]);
        assert_eq!(r.iter().map(|r| r.nic).collect::<Vec<_>>(), vec![1, 0]);
        // Two addresses of one port (v4 and v6 on one link) give one rail.
        let mut v6 = nic("half0", "fd00::1/64", 30.0);
        v6.port = 1;
        let local = [nic("half0", "10.10.1.11/24", 30.0), v6];
        let r = direct_rails(&local, &[a("10.10.1.12/24"), a("fd00::2/64")]);
        assert_eq!(r.len(), 1);
        // That rail is the IPv4 one, although the IPv6 prefix is longer (the v6 NIC listed
        // first changes nothing).
        assert!(r[0].peer_addr.is_ipv4(), "{r:?}");
        let local = [local[1].clone(), local[0].clone()];
        let r = direct_rails(&local, &[a("fd00::2/64"), a("10.10.1.12/24")]);
        assert_eq!(r.len(), 1);
        assert!(r[0].peer_addr.is_ipv4(), "{r:?}");
    }

    #[test]
    fn ring_of_four_relays_through_a_neighbour() {
        // n0 -l01- n1 -l12- n2 -l23- n3 -l30- n0
        let n = [
            node(10, &["10.0.1.1/24", "10.0.4.1/24"]),
            node(11, &["10.0.1.2/24", "10.0.2.2/24"]),
            node(12, &["10.0.2.3/24", "10.0.3.3/24"]),
            node(13, &["10.0.3.4/24", "10.0.4.4/24"]),
        ];
        let p = shortest_path(10, &n[0].addrs, &n[2], &n, 4).unwrap();
        assert_eq!(p, vec![11, 12], "lower id breaks the tie between 11 and 13");
        assert_eq!(
            shortest_path(10, &n[0].addrs, &n[1], &n, 4).unwrap(),
            vec![11]
        );
        assert!(shortest_path(10, &n[0].addrs, &n[2], &n, 1).is_none());
        let mut no_relay = n.to_vec();
        no_relay[1].relays = false;
        assert_eq!(
            shortest_path(10, &n[0].addrs, &n[2], &no_relay, 4).unwrap(),
            vec![13, 12]
        );
        no_relay[3].relays = false;
        assert!(shortest_path(10, &n[0].addrs, &n[2], &no_relay, 4).is_none());
        // Only the target known: no path.
        assert!(shortest_path(10, &n[0].addrs, &n[2], &[], 4).is_none());
        // A line of five: three links.
        let line = [
            node(1, &["10.1.0.1/24"]),
            node(2, &["10.1.0.2/24", "10.2.0.2/24"]),
            node(3, &["10.2.0.3/24", "10.3.0.3/24"]),
            node(4, &["10.3.0.4/24"]),
        ];
        assert_eq!(
            shortest_path(1, &line[0].addrs, &line[3], &line, 3).unwrap(),
            vec![2, 3, 4]
        );
        assert!(shortest_path(1, &line[0].addrs, &line[3], &line, 2).is_none());
    }
}
