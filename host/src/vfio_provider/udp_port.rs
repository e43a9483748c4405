//! The device model's port on a real link: the RoCEv2 frames the model sends leave through a
//! UDP socket, and datagrams that arrive on it come back into the model as frames, so a
//! model-backed process talks to another model-backed process, to the soft provider and to
//! any RoCEv2 endpoint (rdma_rxe, hardware) exactly as a ConnectX port on the wire would.
//!
//! # What crosses the socket
//! The UDP payload of each frame (BTH .. ICRC). The kernel writes the Ethernet, IP and UDP
//! headers; the ICRC covers some of their values, so it is computed again for what the kernel
//! puts on the wire, as the soft provider does ([`crate::soft`]: source address and port of
//! this socket, IPv4 ID 0 with DF from an unconnected socket with `IP_PMTUDISC_DO`). The
//! destination port is the peer's UDP port: 4791, or the one the peer told out of band
//! (rdmesh endpoints on ephemeral ports), learned per (peer address, peer QPN) when a QP
//! moves to RTR ([`UdpPort::learn_peer_port`]).
//!
//! On receive, the ICRC is verified over the datagram's real header values (the UDP path
//! assumes ID 0 as the soft provider does; with `raw_receive` the raw socket shows the real
//! IPv4 header, for peers such as rxe that put a non-zero ID on their packets), then the frame
//! is rebuilt with this port's MAC as destination, the datagram's addresses, its ECN bits and
//! UDP destination port 4791, and handed to the model ([`ModelDevice::inject_frames`]). A bad
//! ICRC is counted and dropped here.
//!
//! A thread per port receives and also runs the model's progress loop every millisecond, so
//! its retransmission and RNR timers fire while nothing else touches the device. It stops
//! when the port is dropped.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdmesh_core::wire::{
    EthernetRepr, IpRepr, Ipv4Repr, Ipv6Repr, RocePacket, RoceRepr, TransportRepr, UdpChecksum,
    UdpRepr,
};
use rdmesh_vfio::model::{FrameSink, ModelDevice};

use crate::error::{Error, Result};
use crate::soft::{headers, ident::IdentSolver, raw_rx, udp_io};

/// How long the receive thread waits for a datagram before running the model's timers.
const TICK: Duration = Duration::from_millis(1);

/// Counters of a port.
#[derive(Debug, Default)]
pub(crate) struct PortCounters {
    pub(crate) tx_datagrams: AtomicU64,
    pub(crate) rx_datagrams: AtomicU64,
    pub(crate) icrc_errors: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) tx_errors: AtomicU64,
}

/// Peer UDP ports by (address, peer QPN), and the last one learnt per address.
type PeerPorts = (HashMap<(IpAddr, u32), u16>, HashMap<IpAddr, u16>);

/// The half of the port the model sends through.
#[derive(Debug)]
struct Shared {
    sock: UdpSocket,
    local: SocketAddr,
    /// Peer UDP ports by (address, peer QPN), and the last one learnt per address.
    ports: Mutex<PeerPorts>,
    counters: Arc<PortCounters>,
    name: String,
}

/// A model's port on a UDP socket (see the module docs).
#[derive(Debug)]
pub(crate) struct UdpPort {
    shared: Arc<Shared>,
    model: ModelDevice,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Shared {
    fn peer_port(&self, ip: IpAddr, qpn: u32) -> u16 {
        let p = self.ports.lock().unwrap_or_else(|p| p.into_inner());
        p.0.get(&(ip, qpn))
            .or_else(|| p.1.get(&ip))
            .copied()
            .unwrap_or(crate::verbs::ROCE_V2_UDP_PORT)
    }

    fn send_frame(&self, f: &[u8]) -> std::result::Result<(), String> {
        let pkt = RocePacket::parse(f).map_err(|e| format!("model frame does not parse: {e:?}"))?;
        let (dst_ip, ip_len) = match pkt.ip {
            IpRepr::V4(r) => (IpAddr::V4(r.dst), 20),
            IpRepr::V6(r) => (IpAddr::V6(r.dst), 40),
        };
        let eth_len = 14 + if pkt.eth.vlan.is_some() { 4 } else { 0 };
        let udp_at = eth_len + ip_len;
        let ulen = f
            .get(udp_at + 4..udp_at + 6)
            .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
            .ok_or("short frame")?;
        let mut d = f
            .get(udp_at + 8..udp_at + ulen)
            .ok_or("UDP length beyond the frame")?
            .to_vec();
        let dst = SocketAddr::new(dst_ip, self.peer_port(dst_ip, pkt.transport.bth.dest_qp));
        headers::context(self.local, dst)
            .seal(&mut d)
            .map_err(|e| format!("sealing the ICRC: {e:?}"))?;
        self.sock
            .send_to(&d, dst)
            .map_err(|e| format!("sending to {dst}: {e}"))?;
        Ok(())
    }
}

impl FrameSink for Shared {
    fn send(&self, frames: Vec<Vec<u8>>) {
        for f in &frames {
            match self.send_frame(f) {
                Ok(()) => {
                    self.counters.tx_datagrams.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.counters.tx_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(port = %self.name, error = %e, "model port: frame not sent");
                }
            }
        }
    }
}

/// The frame a received datagram becomes (the ICRC already checked): Ethernet to `mac`, the
/// datagram's addresses and ECN, UDP to 4791, a fresh ICRC over those values.
fn frame_of(
    dgram: &[u8],
    src: SocketAddr,
    local: SocketAddr,
    mac: [u8; 6],
    ecn: u8,
) -> std::result::Result<Vec<u8>, String> {
    if dgram.len() < 12 + 4 {
        return Err("datagram shorter than a BTH and an ICRC".into());
    }
    let ib = &dgram[..dgram.len() - 4];
    let (transport, hlen) =
        TransportRepr::parse(ib).map_err(|e| format!("transport headers: {e:?}"))?;
    let pad = usize::from(transport.bth.pad_cnt);
    let payload = ib
        .get(hlen..ib.len().saturating_sub(pad))
        .ok_or("datagram shorter than its headers")?;
    let ip = match (src.ip(), local.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => IpRepr::V4(Ipv4Repr {
            src: s,
            dst: d,
            dscp: 0,
            ecn,
            ident: 0,
            dont_frag: true,
            ttl: headers::TTL,
            protocol: 17,
            payload_len: 0,
        }),
        (s, d) => IpRepr::V6(Ipv6Repr {
            src: to_v6(s),
            dst: to_v6(d),
            traffic_class: ecn,
            flow_label: 0,
            hop_limit: headers::TTL,
            next_header: 17,
            payload_len: 0,
        }),
    };
    let repr = RoceRepr {
        eth: EthernetRepr {
            dst: mac,
            src: [0; 6],
            vlan: None,
            ethertype: match ip {
                IpRepr::V4(_) => 0x0800,
                IpRepr::V6(_) => 0x86dd,
            },
        },
        ip,
        udp: UdpRepr {
            src_port: src.port(),
            dst_port: crate::verbs::ROCE_V2_UDP_PORT,
            payload_len: 0,
            checksum: 0,
        },
        transport,
    };
    let mut out = vec![0u8; repr.frame_len(payload.len())];
    repr.emit(payload, UdpChecksum::Zero, &mut out)
        .map_err(|e| format!("rebuilding the frame: {e:?}"))?;
    Ok(out)
}

fn to_v6(a: IpAddr) -> std::net::Ipv6Addr {
    match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Where the receive thread reads from.
enum Rx {
    Udp,
    Raw(raw_rx::RawReceiver),
}

impl UdpPort {
    /// Binds `addr:udp_port` (4791; 0 = ephemeral), attaches the socket to `model`'s port and
    /// starts the receive thread. `mac` is the port's MAC (the destination of rebuilt frames).
    /// `raw_receive`: receive through a raw socket that shows the real IPv4 header (root or
    /// `CAP_NET_RAW`; IPv4 only).
    ///
    /// Errors: [`Error::Bind`] when the port is taken or the address is not local;
    /// [`Error::Io`] for socket options; [`Error::Config`] when the model's port is in use.
    pub(crate) fn open(
        model: &ModelDevice,
        name: &str,
        addr: IpAddr,
        udp_port: u16,
        mac: [u8; 6],
        raw_receive: bool,
    ) -> Result<UdpPort> {
        let want = SocketAddr::new(addr, udp_port);
        let domain = socket2::Domain::for_address(want);
        let sock = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))
            .map_err(|e| Error::io(format!("model port {name}: creating a UDP socket"), e))?;
        let _ = sock.set_recv_buffer_size(16 << 20);
        let _ = sock.set_send_buffer_size(8 << 20);
        let setopt = |r: std::io::Result<()>, what: &str| {
            r.map_err(|e| Error::io(format!("model port {name}: setting {what}"), e))
        };
        if want.is_ipv4() {
            setopt(
                rustix::net::sockopt::set_ip_mtu_discover(
                    &sock,
                    rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
                )
                .map_err(std::io::Error::from),
                "IP_MTU_DISCOVER=IP_PMTUDISC_DO",
            )?;
            setopt(sock.set_ttl(u32::from(headers::TTL)), "IP_TTL")?;
            // ECT(0), as a ConnectX marks RoCE traffic with ECN on (the default).
            setopt(sock.set_tos(0b10), "IP_TOS")?;
        } else {
            setopt(
                sock.set_unicast_hops_v6(u32::from(headers::TTL)),
                "IPV6_UNICAST_HOPS",
            )?;
            setopt(sock.set_tclass_v6(0b10), "IPV6_TCLASS")?;
            let _ = sock.set_only_v6(true);
        }
        sock.bind(&want.into())
            .map_err(|source| Error::Bind { addr: want, source })?;
        let local = sock
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .ok_or_else(|| {
                Error::Config(format!(
                    "model port {name}: cannot read the bound address of the UDP socket"
                ))
            })?;
        let rx = if raw_receive {
            let raw = raw_rx::RawReceiver::open(name, local, TICK)?;
            setopt(
                raw_rx::drop_all(&sock),
                "SO_ATTACH_FILTER on the UDP socket",
            )?;
            Rx::Raw(raw)
        } else {
            Rx::Udp
        };
        let sock: UdpSocket = sock.into();
        if !raw_receive {
            setopt(udp_io::enable_ecn(&sock, !local.is_ipv4()), "IP_RECVTOS")?;
            setopt(sock.set_read_timeout(Some(TICK)), "SO_RCVTIMEO")?;
        }
        let shared = Arc::new(Shared {
            sock,
            local,
            ports: Mutex::new((HashMap::new(), HashMap::new())),
            counters: Arc::new(PortCounters::default()),
            name: name.to_string(),
        });
        model
            .attach_port(shared.clone())
            .map_err(|e| Error::Config(format!("model port {name}: {e}")))?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (shared, m, stop) = (shared.clone(), model.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("rdmesh-model {local}"))
                .spawn(move || receive_loop(&shared, &m, &stop, rx, mac))
                .map_err(|e| {
                    model.detach_port();
                    Error::io(format!("model port {name}: starting the receive thread"), e)
                })?
        };
        Ok(UdpPort {
            shared,
            model: model.clone(),
            stop,
            thread: Some(thread),
        })
    }

    /// The bound address (the GID and the UDP port peers send to).
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.shared.local
    }

    /// Frames for QP `qpn` at `ip` go to UDP port `port` (and, until another is learnt, any
    /// frame for `ip`).
    pub(crate) fn learn_peer_port(&self, ip: IpAddr, qpn: u32, port: u16) {
        let mut p = self.shared.ports.lock().unwrap_or_else(|p| p.into_inner());
        p.0.insert((ip, qpn), port);
        p.1.insert(ip, port);
    }

    /// The port's counters.
    pub(crate) fn counters(&self) -> Arc<PortCounters> {
        self.shared.counters.clone()
    }
}

impl Drop for UdpPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.model.detach_port();
    }
}

fn receive_loop(shared: &Shared, model: &ModelDevice, stop: &AtomicBool, rx: Rx, mac: [u8; 6]) {
    let mut buf = vec![0u8; 1 << 16];
    let mut solver = IdentSolver::default();
    let mut last_tick = Instant::now();
    let local = shared.local;
    while !stop.load(Ordering::Relaxed) {
        let got = match &rx {
            // A soft-provider peer sends GSO segments with IPv4 IDs 0, 1, …: recover the ID
            // from the ICRC (crate::soft::ident).
            Rx::Udp => udp_io::recv(&shared.sock, &mut buf, true).map(|r| {
                let (n, src, ecn) = (r.bytes, r.src, r.ecn);
                let d = &buf[..n];
                if solver.verify(src, local, d, 0).is_some() {
                    Some(frame_of(d, src, local, mac, ecn))
                } else {
                    shared.counters.icrc_errors.fetch_add(1, Ordering::Relaxed);
                    None
                }
            }),
            Rx::Raw(raw) => raw.recv(&mut buf).map(|n| {
                let std::net::SocketAddr::V4(l4) = local else {
                    return None;
                };
                let d = raw_rx::parse(&buf[..n], l4).ok()?;
                let ok = rdmesh_core::wire::icrc::verify(d.ip_header, d.udp_header, d.payload)
                    .unwrap_or(false);
                if !ok {
                    shared.counters.icrc_errors.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
                let ecn = d.ip_header[1] & 3;
                Some(frame_of(d.payload, d.src, local, mac, ecn))
            }),
        };
        match got {
            Ok(Some(Ok(frame))) => {
                shared.counters.rx_datagrams.fetch_add(1, Ordering::Relaxed);
                model.inject_frames(vec![frame]);
            }
            Ok(Some(Err(e))) => {
                shared.counters.malformed.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(port = %shared.name, error = %e, "model port: datagram dropped");
            }
            Ok(None) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => {
                tracing::warn!(port = %shared.name, error = %e, "model port: receive failed");
                std::thread::sleep(TICK);
            }
        }
        if last_tick.elapsed() >= TICK {
            last_tick = Instant::now();
            model.progress();
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn frame_of_keeps_transport_and_reseals() {
        // A SEND Only of 5 bytes from 127.0.0.2:5000 to 127.0.0.1:4791, sealed the socket way.
        let mut d = vec![0u8; 12 + 8 + 4];
        d[0] = 0x04; // RC SEND Only
        d[1] = 0x40 | 0x30; // MigReq, PadCnt 3
        d[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
        d[5..8].copy_from_slice(&[0, 0, 0x12]);
        d[9..12].copy_from_slice(&[0, 0, 7]);
        d[12..17].copy_from_slice(b"hello");
        let src: SocketAddr = "127.0.0.2:5000".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        headers::context(src, local).seal(&mut d).unwrap();
        assert!(headers::context(src, local).verify(&d));
        let f = frame_of(&d, src, local, [2, 0, 0, 0, 0, 1], 0b11).unwrap();
        let p = RocePacket::parse(&f).unwrap();
        assert!(p.icrc_valid);
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.eth.dst, [2, 0, 0, 0, 0, 1]);
        assert_eq!(p.udp.src_port, 5000);
        assert_eq!(p.transport.bth.dest_qp, 0x12);
        match p.ip {
            IpRepr::V4(r) => assert_eq!(r.ecn, 0b11),
            IpRepr::V6(_) => panic!("IPv4 expected"),
        }
    }
}
