//! The raw receive path: a raw `IPPROTO_UDP` socket that delivers every received RoCEv2
//! datagram with its real IPv4 header, so the ICRC can be verified over the header values the
//! peer actually sent.
//!
//! Needed for peers that do not send the way the soft provider does: Linux `rdma_rxe` puts an
//! incrementing IPv4 identification on its packets (and hardware NICs put whatever they like),
//! and the ICRC covers that field (IBTA vol. 1 annex A17.3.3; rocev2.md §2.1), which a UDP
//! socket never shows. The device's UDP socket stays bound to the RoCEv2 port so the kernel
//! does not answer the peer with ICMP port unreachable; a socket filter that accepts nothing
//! keeps the kernel from queueing the second copy there.
//!
//! A raw IPv4 socket receives a copy of every UDP datagram the host receives (`raw_local_deliver`
//! runs before UDP demultiplexing). A classic BPF filter on the raw socket passes only datagrams
//! to the device's address and UDP port; [`parse`] checks them again. IPv6 raw sockets never
//! deliver the IPv6 header, so this path is IPv4 only (an IPv6 peer's packets carry no
//! identification field, and the UDP path verifies them exactly).
//!
//! Needs root or `CAP_NET_RAW`. Sources: Linux `raw(7)`, `socket(7)` `SO_ATTACH_FILTER`,
//! `net/ipv4/raw.c`, `include/uapi/linux/filter.h` (BPF opcodes).

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use nix::libc::sock_filter;
use rdmesh_core::wire::{ipv4, udp};
use socket2::{Domain, Protocol, Socket, Type};

use crate::error::{Error, Result};

/// IPv4 protocol number of UDP.
const PROTOCOL_UDP: u8 = 17;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_LDX_B_MSH: u16 = 0xb1;
const BPF_LD_H_IND: u16 = 0x48;
const BPF_JEQ_K: u16 = 0x15;
const BPF_RET_K: u16 = 0x06;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// A filter that accepts datagrams whose IPv4 destination is `addr` and whose UDP destination
/// port is `port` (the packet starts at the IPv4 header on a raw socket).
fn accept_filter(addr: Ipv4Addr, port: u16) -> [sock_filter; 7] {
    [
        // A = IPv4 destination address
        insn(BPF_LD_W_ABS, 0, 0, 16),
        insn(BPF_JEQ_K, 0, 4, u32::from(addr)),
        // X = IHL * 4; A = UDP destination port
        insn(BPF_LDX_B_MSH, 0, 0, 0),
        insn(BPF_LD_H_IND, 0, 0, 2),
        insn(BPF_JEQ_K, 0, 1, u32::from(port)),
        insn(BPF_RET_K, 0, 0, 0x0004_0000),
        insn(BPF_RET_K, 0, 0, 0),
    ]
}

/// A filter that accepts nothing: attached to the device's UDP socket when the raw socket
/// receives, so the kernel does not queue the same datagrams twice.
pub(crate) fn drop_all(sock: &Socket) -> std::io::Result<()> {
    sock.attach_filter(&[insn(BPF_RET_K, 0, 0, 0)])
}

/// The raw socket of one device.
#[derive(Debug)]
pub(crate) struct RawReceiver {
    socket: Socket,
}

impl RawReceiver {
    /// Opens a raw `IPPROTO_UDP` socket that receives datagrams to `local` (IPv4 only).
    ///
    /// Errors: [`Error::Config`] for an IPv6 address; [`Error::Io`] when the socket cannot be
    /// created — `EPERM` means the process lacks root / `CAP_NET_RAW`, which the message says.
    pub(crate) fn open(device: &str, local: SocketAddr, timeout: Duration) -> Result<RawReceiver> {
        let SocketAddr::V4(v4) = local else {
            return Err(Error::Config(format!(
                "soft device {device}: the raw receive path (--raw-rx) is IPv4 only; {local} is IPv6 (IPv6 has no identification field, so the UDP path verifies its ICRC exactly)"
            )));
        };
        let socket = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::UDP)).map_err(|e| {
            let hint = if e.raw_os_error() == Some(nix::libc::EPERM) {
                "; the raw receive path (--raw-rx) needs root or CAP_NET_RAW"
            } else {
                ""
            };
            Error::io(
                format!("soft device {device}: opening a raw IPPROTO_UDP socket for {local}{hint}"),
                e,
            )
        })?;
        let io = |what: &str, e| Error::io(format!("soft device {device}: {what}"), e);
        socket
            .attach_filter(&accept_filter(*v4.ip(), v4.port()))
            .map_err(|e| io("attaching the raw socket's filter", e))?;
        super::udp_io::size_buffers(&socket, super::udp_io::SOCKET_RCVBUF, 0);
        socket
            .set_read_timeout(Some(timeout))
            .map_err(|e| io("setting the raw socket's read timeout", e))?;
        Ok(RawReceiver { socket })
    }

    /// Receives one IPv4 datagram (header included) into `buf`; returns its length.
    pub(crate) fn recv(&self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&self.socket).read(buf)
    }
}

/// The raw socket, for the progress thread's `poll` (it waits with a precise timeout there).
impl std::os::fd::AsFd for RawReceiver {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.socket)
    }
}

/// A received datagram split into what the ICRC check and the transport need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RawDatagram<'a> {
    /// The sender's address and UDP source port.
    pub(crate) src: SocketAddr,
    /// The IPv4 header as received (20 bytes: options are refused).
    pub(crate) ip_header: &'a [u8],
    /// The 8 UDP header bytes.
    pub(crate) udp_header: &'a [u8],
    /// The UDP payload: BTH .. ICRC.
    pub(crate) payload: &'a [u8],
}

/// Why a raw datagram is not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Skip {
    /// Not for this device (another address, port or protocol): not counted.
    NotOurs,
    /// For this device but unusable (truncated, IPv4 options, fragment): counted as malformed.
    Malformed,
}

/// Splits a datagram from the raw socket, keeping only UDP to `local` (IPv4 address and port).
pub(crate) fn parse(d: &[u8], local: SocketAddrV4) -> std::result::Result<RawDatagram<'_>, Skip> {
    let ip = ipv4::Packet::new_checked(d).map_err(|_| Skip::NotOurs)?;
    if ip.version() != 4 || ip.protocol() != PROTOCOL_UDP || ip.dst_addr() != *local.ip() {
        return Err(Skip::NotOurs);
    }
    let u = udp::Packet::new_checked(ip.payload()).map_err(|_| Skip::Malformed)?;
    if u.dst_port() != local.port() {
        return Err(Skip::NotOurs);
    }
    if ip.header_len() != ipv4::HEADER_LEN || ip.more_frags() || ip.frag_offset() != 0 {
        return Err(Skip::Malformed);
    }
    Ok(RawDatagram {
        src: SocketAddr::V4(SocketAddrV4::new(ip.src_addr(), u.src_port())),
        ip_header: ip.header(),
        udp_header: u.header(),
        payload: u.payload(),
    })
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::IpAddr;

    /// An IPv4/UDP datagram as rxe sends it: ID 0x1234, DF, UDP checksum 0.
    fn datagram(dst: [u8; 4], dport: u16, payload: &[u8]) -> Vec<u8> {
        let total = 28 + payload.len();
        let mut d = vec![
            0x45,
            0,
            (total >> 8) as u8,
            total as u8,
            0x12,
            0x34,
            0x40,
            0,
            64,
            17,
            0,
            0,
            10,
            250,
            0,
            11,
        ];
        d.extend_from_slice(&dst);
        d.extend_from_slice(&0xc132u16.to_be_bytes());
        d.extend_from_slice(&dport.to_be_bytes());
        d.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
        d.extend_from_slice(&[0, 0]);
        d.extend_from_slice(payload);
        d
    }

    #[test]
    fn keeps_only_our_address_and_port() {
        let local = SocketAddrV4::new(Ipv4Addr::new(10, 250, 0, 1), 4791);
        let d = datagram([10, 250, 0, 1], 4791, &[7; 16]);
        let p = parse(&d, local).unwrap();
        assert_eq!(p.src, "10.250.0.11:49458".parse().unwrap());
        assert_eq!(p.ip_header.len(), 20);
        assert_eq!(p.udp_header.len(), 8);
        assert_eq!(p.payload, &[7; 16]);
        let other_port = datagram([10, 250, 0, 1], 53, &[7; 16]);
        assert_eq!(parse(&other_port, local), Err(Skip::NotOurs));
        let other_addr = datagram([10, 250, 0, 2], 4791, &[7; 16]);
        assert_eq!(parse(&other_addr, local), Err(Skip::NotOurs));
        let mut truncated = d.clone();
        truncated.truncate(30);
        assert!(parse(&truncated, local).is_err());
        let mut fragment = d.clone();
        fragment[6] = 0x20; // MF
        assert_eq!(parse(&fragment, local), Err(Skip::Malformed));
        assert!(parse(&[], local).is_err());
    }

    /// Two soft devices on loopback, both receiving through raw sockets: an RDMA WRITE of
    /// three packets arrives intact; with the first packet's ICRC corrupted the receiver drops
    /// and counts it, and the sender's retransmission still delivers the data. Needs root or
    /// CAP_NET_RAW (CI runs as root); without it the raw socket cannot be opened and the test
    /// ends early.
    #[test]
    fn loopback_write_through_raw_sockets_and_icrc_drop() {
        use crate::verbs::*;
        let open = |last: u8, corrupt: Option<u64>| {
            let mut cfg = SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 9, last)));
            cfg.raw_receive = true;
            cfg.corrupt_tx_icrc = corrupt;
            Device::open_soft(cfg)
        };
        let a = match open(231, Some(1)) {
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(nix::libc::EPERM) => {
                eprintln!("SKIPPED: raw sockets need root or CAP_NET_RAW");
                return;
            }
            r => r.unwrap(),
        };
        let b = open(232, None).unwrap();
        let (ea, eb) = crate::soft::test_pair::connected(&a, &b, 3000, Mtu::Mtu1024, 8);
        let (ma, qa, mb) = (&ea.mr, &ea.qp, &eb.mr);
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 1) as u8).collect();
        ma.write(0, &data).unwrap();
        let wc = ea.write_to(&eb, 3000, 1, Duration::from_secs(10));
        assert_eq!(wc.status, WcStatus::Success);
        let mut got = vec![0u8; 3000];
        mb.read(0, &mut got).unwrap();
        assert_eq!(got, data);
        assert_eq!(a.counters().tx_icrc_corrupted, 1);
        assert_eq!(b.counters().icrc_errors, 1, "{:?}", b.counters());
        assert!(qa.counters().retransmitted_packets >= 1);
        assert_eq!(
            a.counters().icrc_errors,
            0,
            "ACKs verify over the real header"
        );
        assert!(a.counters().rx_packets >= 1);
    }

    #[test]
    fn filter_matches_address_then_port() {
        let f = accept_filter(Ipv4Addr::new(10, 250, 0, 1), 4791);
        assert_eq!(f[1].k, 0x0afa_0001);
        assert_eq!(f[4].k, 4791);
        // Both failed comparisons jump to the final "return 0".
        assert_eq!(1 + 1 + usize::from(f[1].jf), 6);
        assert_eq!(4 + 1 + usize::from(f[4].jf), 6);
    }
}
