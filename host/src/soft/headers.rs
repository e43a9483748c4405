//! The IP/UDP header values the soft provider puts on the wire and assumes on receive, and the
//! ICRC context built from them (see the module docs of [`crate::soft`]).

use std::net::{IpAddr, SocketAddr};

use rdmesh_core::wire::icrc::IcrcContext;

/// TTL / hop limit set on every packet (masked out of the ICRC).
pub const TTL: u8 = 64;

/// The ICRC context of datagrams from `src` to `dst` sent the soft provider's way
/// (unconnected socket: IPv4 ID 0 with DF). Mixed families are compared as IPv6 (v4-mapped).
pub(crate) fn context(src: SocketAddr, dst: SocketAddr) -> IcrcContext {
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            IcrcContext::for_udp_socket_v4(s, d, src.port(), dst.port())
        }
        (s, d) => IcrcContext::for_udp_socket_v6(to_v6(s), to_v6(d), src.port(), dst.port()),
    }
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
