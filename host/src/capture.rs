//! pcap output of the packets a soft device sends and receives, as full Ethernet/IP/UDP
//! frames carrying the header values the soft provider actually uses on the wire: IPv4 ID 0
//! with DF, TTL/hop limit 64, the configured TOS, the UDP checksum the kernel computes, and
//! zero MAC addresses (the loopback interface's; UDP sockets never see MACs).
//! Link type Ethernet (1), microsecond timestamps, as tcpdump writes. Every packet is written
//! straight to the file (no user-space buffer), so the capture is complete whenever the process ends.

use std::fs::File;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};
use pcap_file::DataLink;
use rdmesh_core::wire::ethernet::{self, EthernetRepr};
use rdmesh_core::wire::ip::IpRepr;
use rdmesh_core::wire::ipv4::Ipv4Repr;
use rdmesh_core::wire::ipv6::Ipv6Repr;
use rdmesh_core::wire::udp::{self, UdpRepr};

use crate::error::{Error, Result};
use crate::soft::TTL;

/// A pcap file that several devices (threads) may write to.
pub struct Capture {
    path: String,
    writer: Mutex<PcapWriter<File>>,
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture").field("path", &self.path).finish()
    }
}

impl Capture {
    /// Creates (truncates) `path`.
    ///
    /// Errors: [`Error::Pcap`] naming the path.
    pub fn create(path: &Path) -> Result<Arc<Capture>> {
        let shown = path.display().to_string();
        let file = File::create(path).map_err(|e| Error::Pcap {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ..Default::default()
        };
        let writer = PcapWriter::with_header(file, header).map_err(|e| Error::Pcap {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        Ok(Arc::new(Capture {
            path: shown,
            writer: Mutex::new(writer),
        }))
    }

    /// Records one RoCEv2 packet: `udp_payload` (BTH .. ICRC) sent from `src` to `dst` with IP
    /// TOS `tos` and IPv4 Identification `ident` (the value the kernel writes: 0 for a lone
    /// datagram, the segment index within a UDP GSO send; ignored for IPv6).
    pub fn record(
        &self,
        src: SocketAddr,
        dst: SocketAddr,
        tos: u8,
        ident: u16,
        udp_payload: &[u8],
    ) {
        let frame = frame(src, dst, tos, ident, udp_payload);
        let ts = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let pkt = PcapPacket::new(ts, frame.len() as u32, &frame);
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = w.write_packet(&pkt) {
            tracing::warn!(path = %self.path, error = %e, "pcap write failed");
        }
    }
}

/// Builds the Ethernet frame carrying `udp_payload` from `src` to `dst` (IPv4 with DF and
/// Identification `ident`).
pub fn frame(src: SocketAddr, dst: SocketAddr, tos: u8, ident: u16, udp_payload: &[u8]) -> Vec<u8> {
    let udp_len = (udp::HEADER_LEN + udp_payload.len()) as u16;
    let ip = match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src: s,
            dst: d,
            dscp: tos >> 2,
            ecn: tos & 3,
            ident,
            dont_frag: true,
            ttl: TTL,
            protocol: 17,
            payload_len: udp_len,
        }),
        (s, d) => IpRepr::V6(Ipv6Repr {
            src: to_v6(s),
            dst: to_v6(d),
            traffic_class: tos,
            flow_label: 0,
            hop_limit: TTL,
            next_header: 17,
            payload_len: udp_len,
        }),
    };
    let eth = EthernetRepr {
        dst: [0; 6],
        src: [0; 6],
        vlan: None,
        ethertype: if matches!(ip, IpRepr::V4(_)) {
            ethernet::ETHERTYPE_IPV4
        } else {
            ethernet::ETHERTYPE_IPV6
        },
    };
    let eth_len = eth.buffer_len();
    let ip_len = ip.header_len();
    let mut buf = vec![0u8; eth_len + ip_len + usize::from(udp_len)];
    eth.emit(&mut ethernet::Packet::new_unchecked(&mut buf[..]));
    ip.emit(&mut buf[eth_len..])
        .expect("buffer sized for the IP header");
    let udp_buf = &mut buf[eth_len + ip_len..];
    let repr = UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
        payload_len: udp_payload.len() as u16,
        checksum: 0,
    };
    let mut pkt = udp::Packet::new_unchecked(&mut udp_buf[..]);
    repr.emit(&mut pkt);
    pkt.payload_mut()[..udp_payload.len()].copy_from_slice(udp_payload);
    pkt.fill_checksum(&ip);
    buf
}

/// `a` as an IPv6 address (IPv4 as `::ffff:a.b.c.d`).
pub(crate) fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}
