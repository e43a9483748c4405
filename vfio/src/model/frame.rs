//! Wrapping the RC engine's packets (BTH + extended headers + payload + pad) into RoCEv2
//! frames from a QP's address path and its source GID entry: Ethernet (destination MAC =
//! `rmac`, source = the GID entry's MAC), IPv4 or IPv6 per the entry's `roce_l3_type`
//! (source = the GID, destination = `rgid_rip`, DSCP/ECN, TTL = `hop_limit`), UDP from
//! `udp_sport` to 4791, ICRC computed by core's [`RoceRepr::emit`].

use core::net::{Ipv4Addr, Ipv6Addr};

use rdmesh_core::mlx5::cmd::{AddressPath, RoceAddress, ROCE_L3_TYPE_IPV4};
use rdmesh_core::wire::{
    EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, RoceRepr, TransportRepr, UdpChecksum, UdpRepr,
    VlanTag,
};

/// RoCEv2 UDP destination port (IBTA Annex A17.2.1).
pub const ROCE_V2_PORT: u16 = 4791;

fn v4(gid: &[u8; 16]) -> Ipv4Addr {
    Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15])
}

/// The UDP source port of a QP: `udp_sport` from INIT2RTR, or (when 0) a hash of the QPN
/// with the top two bits set, as Linux `rdma_flow_label_to_udp_sport` would give a path
/// without a flow label.
pub fn udp_sport(path: &AddressPath, local_qpn: u32, remote_qpn: u32) -> u16 {
    if path.udp_sport != 0 {
        return path.udp_sport;
    }
    let mut v = u64::from(local_qpn) * u64::from(remote_qpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xfffff) as u32;
    (((fl & 0x3fff) ^ ((fl & 0xfc000) >> 14)) | 0xc000) as u16
}

/// Builds the frame for the IB packet `ib` (no ICRC) into `out`.
///
/// Errors: a description when the engine's packet does not parse or the headers do not fit.
pub fn build(
    ib: &[u8],
    path: &AddressPath,
    gid: &RoceAddress,
    local_qpn: u32,
    remote_qpn: u32,
    out: &mut Vec<u8>,
) -> Result<(), String> {
    let (transport, hlen): (TransportRepr, usize) =
        TransportRepr::parse(ib).map_err(|e| format!("engine packet does not parse: {e:?}"))?;
    let pad = usize::from(transport.bth.pad_cnt);
    let payload = ib
        .get(hlen..ib.len().saturating_sub(pad))
        .ok_or("engine packet shorter than its headers")?;
    let ip = if gid.roce_l3_type == ROCE_L3_TYPE_IPV4 {
        IpRepr::V4(Ipv4Repr {
            src: v4(&gid.source_l3_address),
            dst: v4(&path.rgid_rip),
            dscp: path.dscp,
            ecn: path.ecn,
            ident: 0,
            dont_frag: true,
            ttl: path.hop_limit,
            protocol: 17,
            payload_len: 0,
        })
    } else {
        IpRepr::V6(Ipv6Repr {
            src: Ipv6Addr::from(gid.source_l3_address),
            dst: Ipv6Addr::from(path.rgid_rip),
            traffic_class: path.dscp << 2 | path.ecn,
            flow_label: path.flow_label,
            hop_limit: path.hop_limit,
            next_header: 17,
            payload_len: 0,
        })
    };
    let eth = EthernetRepr {
        dst: path.rmac(),
        src: gid.source_mac(),
        vlan: gid.vlan_valid.then_some(VlanTag {
            pcp: path.eth_prio,
            dei: false,
            vid: gid.vlan_id,
        }),
        ethertype: match ip {
            IpRepr::V4(_) => 0x0800,
            IpRepr::V6(_) => 0x86dd,
        },
    };
    let repr = RoceRepr {
        eth,
        ip,
        udp: UdpRepr {
            src_port: udp_sport(path, local_qpn, remote_qpn),
            dst_port: ROCE_V2_PORT,
            payload_len: 0,
            checksum: 0,
        },
        transport,
    };
    out.resize(repr.frame_len(payload.len()), 0);
    repr.emit(payload, UdpChecksum::Zero, out)
        .map_err(|e| format!("frame does not fit: {e:?}"))?;
    Ok(())
}
