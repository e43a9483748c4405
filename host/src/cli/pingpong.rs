//! `rdmesh pingpong`: a peer of rdma-core's `ibv_rc_pingpong`, as client or as server.
//!
//! Out of band (TCP, port `-p`, default 18515), as rdma-core
//! `libibverbs/examples/rc_pingpong.c` does it: the client sends 52 bytes,
//! `"%04x:%06x:%06x:%s"` of LID (0 on RoCE), QPN, PSN and the GID as 32 hex digits of its
//! 16 bytes in network order, plus a NUL; the server moves its QP to RTR/RTS with them, answers
//! with its own 52 bytes, and the client replies `"done\0"`. Both ends then move their QP with
//! rc_pingpong's attributes (path MTU `-m`, `max_dest_rd_atomic` 1, `min_rnr_timer` 12,
//! `timeout` 14, `retry_cnt` 7, `rnr_retry` 7).
//!
//! Data: each side sends `-n` SENDs of `-s` bytes; the client sends first, and each side posts
//! its next SEND only once its previous one completed (was ACKed) and one message arrived.
//! `-r` receives are posted before the exchange, so the peer never meets an RNR NAK.
//!
//! Data check: rc_pingpong sends from and receives into one buffer, so it echoes what it last
//! received. This end sends a pattern (with 0 at every 4096-byte page start, which is what
//! rc_pingpong's `-c` expects) and checks that every message after the peer's first one
//! carries that pattern back; `-c` additionally checks the page-start bytes of every message,
//! as rc_pingpong's `-c` does.
//!
//! The soft device listens on UDP 4791 of `--bind` (default: the route's source address towards
//! the server, or the address the client connected to) and, by default, receives through a raw
//! socket that sees the real IPv4 header (`--no-raw-rx` turns that off): rxe puts a non-zero
//! IPv4 identification on its packets and the ICRC covers it.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use clap::Args;

use crate::bench::perftest::connect_retrying;
use crate::bench::run::route_source;
use crate::error::{Error, Result};
use crate::verbs::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, QpAttr, QpCap, QpState,
    QueuePair, RecvWr, SendWr, Sge, SoftConfig, WcOpcode, WcStatus, WrOpcode,
};

/// Length of rc_pingpong's address message, NUL included
/// (`sizeof "0000:000000:000000:00000000000000000000000000000000"`).
pub const MSG_LEN: usize = 52;
/// rc_pingpong's closing message, NUL included.
pub const DONE: &[u8; 5] = b"done\0";
/// Page size rc_pingpong's `-c` check steps by.
const PAGE: usize = 4096;
/// Pattern number of the messages this end sends.
const PATTERN: u64 = 0x7070_7070;

/// `rdmesh pingpong` arguments (ibv_rc_pingpong's names and defaults).
#[derive(Debug, Args)]
pub struct PingpongArgs {
    /// Server to connect to; without it this process is the server.
    pub server: Option<String>,
    /// Out-of-band TCP port.
    #[arg(short = 'p', long, default_value_t = 18515)]
    pub port: u16,
    /// Message size in bytes.
    #[arg(short = 's', long, default_value_t = 4096, value_parser = crate::cli::parse_size)]
    pub size: u64,
    /// Number of messages each side sends.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u64,
    /// GID index (accepted for ibv_rc_pingpong compatibility: a soft device has one GID, the
    /// IPv4 address it binds, which is what rxe's RoCE v2 IPv4 GID index selects).
    #[arg(short = 'g', long = "gid-idx")]
    pub gid_idx: Option<u32>,
    /// Path MTU in bytes (256, 512, 1024, 2048, 4096).
    #[arg(short = 'm', long, default_value_t = 1024)]
    pub mtu: u32,
    /// Receives posted ahead.
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500)]
    pub rx_depth: u32,
    /// Check the page-start bytes of every received message (ibv_rc_pingpong's -c).
    #[arg(short = 'c', long = "chk")]
    pub chk: bool,
    /// Local address to use as the GID (default: the route's source address towards the peer).
    #[arg(long)]
    pub bind: Option<IpAddr>,
    /// Receive through the UDP socket instead of a raw socket (no root needed, but only peers
    /// that send IPv4 ID 0, such as rdmesh, pass the ICRC check).
    #[arg(long)]
    pub no_raw_rx: bool,
    /// Seconds to wait for the peer (connect, exchange) or for a completion.
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
    /// Test fault: send the N-th packet (1-based) with a corrupted ICRC.
    #[arg(long, hide = true)]
    pub corrupt_icrc_packet: Option<u64>,
    /// Device provider: soft, model (the mlx5 device model on a UDP socket) or vfio:BDF.
    #[arg(long, value_parser = crate::cli::parse_provider, default_value = "soft")]
    pub provider: crate::verbs::ProviderKind,
    /// The peer's MAC (aa:bb:cc:dd:ee:ff), for the vfio provider and the model: rc_pingpong's
    /// exchange carries none, so without this flag the kernel's neighbour entry for the peer
    /// is used, and the run stops when there is none.
    #[arg(long, value_parser = parse_mac_arg)]
    pub peer_mac: Option<[u8; 6]>,
}

fn parse_mac_arg(s: &str) -> std::result::Result<[u8; 6], String> {
    crate::verbs::parse_mac(s.trim())
        .ok_or_else(|| format!("{s:?} is not a MAC (aa:bb:cc:dd:ee:ff)"))
}

/// The connection data rc_pingpong exchanges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    /// LID (0 on RoCE).
    pub lid: u16,
    /// QP number, 24 bits.
    pub qpn: u32,
    /// Initial PSN, 24 bits.
    pub psn: u32,
    /// GID (IPv6; an IPv4 address as `::ffff:a.b.c.d`).
    pub gid: Ipv6Addr,
}

impl Dest {
    /// The 52-byte message: `"%04x:%06x:%06x:%s"` + NUL, the GID as 32 hex digits of its bytes.
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let gid: String = self
            .gid
            .octets()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let s = format!(
            "{:04x}:{:06x}:{:06x}:{gid}",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        let mut m = [0u8; MSG_LEN];
        m[..s.len()].copy_from_slice(s.as_bytes());
        m
    }

    /// Parses the 52-byte message.
    ///
    /// Errors: a message that is not `LID:QPN:PSN:GID` with hex fields, a 24-bit QPN and PSN,
    /// and a 32-digit GID.
    pub fn from_wire(m: &[u8]) -> std::result::Result<Dest, String> {
        let text = m.split(|&b| b == 0).next().unwrap_or(&[]);
        let text = std::str::from_utf8(text).map_err(|_| "not ASCII".to_string())?;
        let bad = || format!("'{text}' is not LID:QPN:PSN:GID");
        let mut f = text.split(':');
        let mut hex = |max: u32| {
            f.next()
                .and_then(|x| u32::from_str_radix(x, 16).ok())
                .filter(|&v| v <= max)
                .ok_or_else(bad)
        };
        let lid = hex(0xffff)? as u16;
        let qpn = hex(0xff_ffff)?;
        let psn = hex(0xff_ffff)?;
        let g = f.next().ok_or_else(bad)?;
        if g.len() != 32 || f.next().is_some() {
            return Err(bad());
        }
        let mut b = [0u8; 16];
        for (i, o) in b.iter_mut().enumerate() {
            *o = u8::from_str_radix(&g[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Ipv6Addr::from(b),
        })
    }

    /// The GID as the IP address a RoCEv2 packet goes to.
    pub fn addr(&self) -> IpAddr {
        match self.gid.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(self.gid),
        }
    }
}

fn gid_of(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn mtu_of(bytes: u32) -> Result<Mtu> {
    Ok(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        m => {
            return Err(Error::Config(format!(
                "-m {m}: the IB path MTU is one of 256, 512, 1024, 2048, 4096"
            )))
        }
    })
}

/// A random 24-bit PSN (rc_pingpong uses `lrand48() & 0xffffff`).
pub fn random_psn(salt: u32) -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let mut x = t ^ (u64::from(salt) << 32) ^ u64::from(std::process::id());
    x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 40) as u32) & 0xff_ffff
}

/// Reads exactly `buf.len()` bytes, naming the peer and the step on failure.
pub fn read_msg(s: &mut TcpStream, buf: &mut [u8], step: &str) -> Result<()> {
    let peer = s
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    s.read_exact(buf).map_err(|e| Error::Exchange {
        peer,
        reason: match e.kind() {
            std::io::ErrorKind::UnexpectedEof => {
                format!("peer closed the connection before {step} (see its output)")
            }
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("timed out waiting for {step}")
            }
            _ => format!("reading {step}: {e}"),
        },
    })
}

/// Writes `buf` in one piece (peers read each message with a single `read`).
pub fn write_msg(s: &mut TcpStream, buf: &[u8], step: &str) -> Result<()> {
    let peer = s
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    s.write_all(buf).map_err(|e| Error::Exchange {
        peer,
        reason: format!("sending {step}: {e}"),
    })
}

struct End {
    device: Device,
    cq: CompletionQueue,
    qp: QueuePair,
    send: MemoryRegion,
    recv: MemoryRegion,
    psn: u32,
}

impl End {
    fn open(args: &PingpongArgs, addr: IpAddr) -> Result<End> {
        let mut cfg = SoftConfig::new(addr);
        cfg.raw_receive = !args.no_raw_rx;
        cfg.corrupt_tx_icrc = args.corrupt_icrc_packet;
        if args.corrupt_icrc_packet.is_some() && args.provider != crate::verbs::ProviderKind::Soft {
            return Err(Error::Config(
                "--corrupt-icrc-packet works with the soft provider only".into(),
            ));
        }
        let device = Device::open_provider(&args.provider, cfg)?;
        let pd = device.alloc_pd()?;
        let size = args.size as usize;
        let send = pd.register(size.max(1), AccessFlags::LOCAL_WRITE)?;
        let depth = args.rx_depth.max(1);
        let recv = pd.register(size.max(1) * depth as usize, AccessFlags::LOCAL_WRITE)?;
        send.with(|b| fill_message(&mut b[..size]));
        let cq = device.create_cq(2 * depth as usize + 2)?;
        let qp = pd.create_qp(
            &cq,
            &cq,
            QpCap {
                max_send_wr: 1,
                max_recv_wr: depth,
                max_sge: 1,
            },
        )?;
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(AccessFlags::NONE),
            ..Default::default()
        })?;
        let end = End {
            psn: random_psn(qp.qp_num()),
            device,
            cq,
            qp,
            send,
            recv,
        };
        for slot in 0..depth {
            end.post_recv(slot, args.size)?;
        }
        Ok(end)
    }

    fn dest(&self) -> Dest {
        Dest {
            lid: 0,
            qpn: self.qp.qp_num(),
            psn: self.psn,
            gid: gid_of(self.device.local_addr().ip()),
        }
    }

    fn post_recv(&self, slot: u32, size: u64) -> Result<()> {
        self.qp.post_recv(&[RecvWr {
            wr_id: u64::from(slot),
            sg_list: vec![Sge {
                addr: self.recv.addr() + u64::from(slot) * size.max(1),
                length: size as u32,
                lkey: self.recv.lkey(),
            }],
        }])
    }

    /// vfio provider and model: the peer's MAC for the address path (`--peer-mac`, else the
    /// kernel's neighbour entry).
    fn learn_peer_mac(&self, rem: &Dest, given: Option<[u8; 6]>) -> Result<()> {
        if self.device.provider() == "soft" {
            return Ok(());
        }
        let ip = rem.addr();
        let mac = given
            .or_else(|| crate::topo::neigh::peer_mac(ip))
            .ok_or_else(|| {
                Error::Config(format!(
                    "{} ({} provider) cannot learn the MAC of peer {ip}: ibv_rc_pingpong's                      exchange carries none, and the kernel has no neighbour entry for it (under                      VFIO there is no ARP). Give it with --peer-mac aa:bb:cc:dd:ee:ff",
                    self.device.name(),
                    self.device.provider()
                ))
            })?;
        self.device.set_neighbor(ip, mac);
        Ok(())
    }

    fn connect(&self, rem: &Dest, mtu: Mtu) -> Result<()> {
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            path_mtu: Some(mtu),
            dest_qp_num: Some(rem.qpn),
            rq_psn: Some(rem.psn),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ah_attr: Some(AhAttr::new(rem.addr())),
            ..Default::default()
        })?;
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            sq_psn: Some(self.psn),
            max_rd_atomic: Some(1),
            ..Default::default()
        })
    }

    fn post_send(&self, i: u64, size: u64) -> Result<()> {
        self.qp.post_send(&[SendWr::new(
            i,
            WrOpcode::Send,
            vec![Sge {
                addr: self.send.addr(),
                length: size as u32,
                lkey: self.send.lkey(),
            }],
        )])
    }
}

/// The message this end sends: the pattern, with 0 at every page start (rc_pingpong's `-c`).
fn fill_message(buf: &mut [u8]) {
    crate::bench::pattern::fill(buf, PATTERN);
    for b in buf.iter_mut().step_by(PAGE) {
        *b = 0;
    }
}

/// Where a received message differs from what this end sends (it should be echoed back).
fn echo_mismatch(got: &[u8]) -> Option<usize> {
    let mut want = vec![0u8; got.len()];
    fill_message(&mut want);
    got.iter().zip(&want).position(|(a, b)| a != b)
}

/// Runs `rdmesh pingpong` as the arguments say.
///
/// Errors: exchange, device and completion errors, and data mismatches, each naming the peer,
/// QPN and message.
pub fn run(args: &PingpongArgs) -> Result<()> {
    let mtu = mtu_of(args.mtu)?;
    if args.size > u64::from(u32::MAX) || args.iters == 0 {
        return Err(Error::Config(
            "-s must fit 32 bits and -n must be at least 1".into(),
        ));
    }
    if let Some(g) = args.gid_idx {
        tracing::info!(
            gid_index = g,
            "-g: the soft device's GID is the address it binds (--bind or the route's source)"
        );
    }
    let timeout = Duration::from_secs_f64(args.timeout.max(0.1));
    let (mut stream, end, rem) = match &args.server {
        Some(host) => {
            let addr = (host.as_str(), args.port)
                .to_socket_addrs()
                .map_err(|e| Error::io(format!("resolving {host}"), e))?
                .next()
                .ok_or_else(|| Error::Config(format!("{host} has no address")))?;
            let local = match args.bind {
                Some(a) => a,
                None => route_source(addr.ip())?,
            };
            let end = End::open(args, local)?;
            print_dest("local", &end.dest());
            let mut s = connect_retrying(addr, timeout, "ibv_rc_pingpong server")?;
            set_timeouts(&s, timeout)?;
            write_msg(&mut s, &end.dest().to_wire(), "the local address")?;
            let mut m = [0u8; MSG_LEN];
            read_msg(&mut s, &mut m, "the server's address")?;
            let rem = Dest::from_wire(&m).map_err(|reason| Error::Exchange {
                peer: addr.to_string(),
                reason,
            })?;
            write_msg(&mut s, DONE, "\"done\"")?;
            end.learn_peer_mac(&rem, args.peer_mac)?;
            end.connect(&rem, mtu)?;
            (s, end, rem)
        }
        None => {
            let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, args.port))
                .map_err(|e| Error::io(format!("listening on TCP port {}", args.port), e))?;
            eprintln!(
                " Waiting for an ibv_rc_pingpong client on TCP port {} ...",
                args.port
            );
            let (mut s, peer) = l.accept().map_err(|e| Error::io("accepting a client", e))?;
            set_timeouts(&s, timeout)?;
            let local = match args.bind {
                Some(a) => a,
                None => s
                    .local_addr()
                    .map_err(|e| Error::io("reading the accepted socket's address", e))?
                    .ip(),
            };
            let end = End::open(args, local)?;
            print_dest("local", &end.dest());
            let mut m = [0u8; MSG_LEN];
            read_msg(&mut s, &mut m, "the client's address")?;
            let rem = Dest::from_wire(&m).map_err(|reason| Error::Exchange {
                peer: peer.to_string(),
                reason,
            })?;
            end.learn_peer_mac(&rem, args.peer_mac)?;
            end.connect(&rem, mtu)?;
            write_msg(&mut s, &end.dest().to_wire(), "the local address")?;
            let mut d = [0u8; DONE.len()];
            read_msg(&mut s, &mut d, "\"done\"")?;
            (s, end, rem)
        }
    };
    print_dest("remote", &rem);
    let result = data_phase(args, &end, args.server.is_some(), timeout);
    // Linger so the last ACKs leave and a retransmission from the peer is still answered.
    std::thread::sleep(Duration::from_millis(300));
    drop(stream.flush());
    let counters = end.device.counters();
    tracing::info!(?counters, qp = ?end.qp.counters(), "pingpong counters");
    let (elapsed, checked) = result?;
    let bytes = args.size * args.iters * 2;
    let secs = elapsed.as_secs_f64().max(1e-9);
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        args.iters,
        secs * 1e6 / args.iters as f64
    );
    let qp = end.qp.counters();
    println!(
        "checked {checked} of {} received messages against the echoed pattern: all correct",
        args.iters
    );
    println!(
        "device counters: rx {} tx {} icrc_errors {} tx_icrc_corrupted {}; QP counters: retransmitted_packets {} timeouts {} psn_sequence_naks_received {} duplicate_requests {}",
        counters.rx_packets,
        counters.tx_packets,
        counters.icrc_errors,
        counters.tx_icrc_corrupted,
        qp.retransmitted_packets,
        qp.timeouts,
        qp.naks_received.psn_sequence,
        qp.duplicate_requests
    );
    Ok(())
}

fn set_timeouts(s: &TcpStream, timeout: Duration) -> Result<()> {
    let io = |e| Error::io("configuring the out-of-band socket", e);
    s.set_read_timeout(Some(timeout)).map_err(io)?;
    s.set_write_timeout(Some(timeout)).map_err(io)?;
    s.set_nodelay(true).map_err(io)
}

fn print_dest(side: &str, d: &Dest) {
    println!(
        "  {side} address:  LID {:#06x}, QPN {:#08x}, PSN {:#08x}, GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

/// The SEND/RECV ping-pong. Returns the elapsed time and how many messages were checked.
fn data_phase(
    args: &PingpongArgs,
    end: &End,
    client: bool,
    timeout: Duration,
) -> Result<(Duration, u64)> {
    let size = args.size;
    let n = size as usize;
    let start = Instant::now();
    let (mut scnt, mut rcnt, mut checked) = (0u64, 0u64, 0u64);
    // rc_pingpong's `pending`: a SEND awaiting completion, a message awaiting arrival.
    let (mut send_pending, mut recv_pending) = (false, true);
    if client {
        end.post_send(0, size)?;
        send_pending = true;
    }
    let mut idle = Instant::now();
    while rcnt < args.iters || scnt < args.iters {
        let Some(wc) = end.cq.poll_one() else {
            if idle.elapsed() > timeout {
                return Err(Error::Bench(format!(
                    "pingpong: nothing completed within {timeout:?} (sent {scnt}, received {rcnt} of {}); QP {:#08x} counters {:?}; device counters {:?}",
                    args.iters,
                    end.qp.qp_num(),
                    end.qp.counters(),
                    end.device.counters()
                )));
            }
            std::thread::sleep(Duration::from_micros(50));
            continue;
        };
        idle = Instant::now();
        if wc.status != WcStatus::Success {
            return Err(Error::Bench(format!(
                "pingpong: {:?} completion wr_id {} failed with {:?} after {scnt} sent, {rcnt} received; QP {:#08x} counters {:?}",
                wc.opcode,
                wc.wr_id,
                wc.status,
                end.qp.qp_num(),
                end.qp.counters()
            )));
        }
        match wc.opcode {
            WcOpcode::Recv => {
                let slot = wc.wr_id as u32;
                if u64::from(wc.byte_len) != size {
                    return Err(Error::Bench(format!(
                        "pingpong: message {rcnt} carried {} bytes, expected -s {size} (do both ends use the same -s?)",
                        wc.byte_len
                    )));
                }
                let off = slot as usize * n.max(1);
                let echo_expected = client || rcnt > 0;
                let bad = end.recv.with(|b| {
                    let msg = &b[off..off + n];
                    if args.chk {
                        if let Some(p) = msg.iter().step_by(PAGE).position(|&x| x != 0) {
                            return Some(format!("invalid data in page {p} (-c)"));
                        }
                    }
                    if echo_expected {
                        return echo_mismatch(msg)
                            .map(|at| format!("byte {at} differs from the pattern this end sent"));
                    }
                    None
                });
                if let Some(why) = bad {
                    return Err(Error::Bench(format!(
                        "pingpong: message {rcnt} ({size} bytes) from the peer: {why}"
                    )));
                }
                if echo_expected {
                    checked += 1;
                }
                rcnt += 1;
                if rcnt + u64::from(args.rx_depth.max(1)) <= args.iters {
                    end.post_recv(slot, size)?;
                }
                recv_pending = false;
            }
            _ => {
                scnt += 1;
                send_pending = false;
            }
        }
        if scnt < args.iters && !send_pending && !recv_pending {
            end.post_send(scnt, size)?;
            send_pending = true;
            recv_pending = true;
        }
    }
    Ok((start.elapsed(), checked))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn wire_message_matches_rc_pingpong() {
        // The example from an rxe capture (qemu-guest.md §5.3).
        let m = b"0000:000012:8f7f88:00000000000000000000ffff0afa000c\0";
        assert_eq!(m.len(), MSG_LEN);
        let d = Dest::from_wire(m).unwrap();
        assert_eq!(d.qpn, 0x12);
        assert_eq!(d.psn, 0x8f7f88);
        assert_eq!(d.addr(), "10.250.0.12".parse::<IpAddr>().unwrap());
        assert_eq!(&d.to_wire(), m);
        assert!(
            Dest::from_wire(b"0000:1000000:000000:00000000000000000000ffff0afa000c\0").is_err()
        );
        assert!(Dest::from_wire(b"0000:000012:8f7f88:0000ffff0afa000c\0").is_err());
        assert!(Dest::from_wire(b"zz").is_err());
    }

    #[test]
    fn echo_check_catches_a_flipped_byte() {
        let mut m = vec![0u8; 3 * PAGE + 5];
        fill_message(&mut m);
        assert_eq!(m[PAGE], 0);
        assert_eq!(echo_mismatch(&m), None);
        m[PAGE + 1] ^= 1;
        assert_eq!(echo_mismatch(&m), Some(PAGE + 1));
    }
}
