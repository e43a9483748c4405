//! `rdmesh fuzz peer`: fuzz a live RoCEv2 receiver over a real RC connection.
//!
//! 1. perftest's out-of-band exchange as an `ib_read_bw` / `ib_write_bw` client
//!    ([`crate::bench::perftest_oob`]): the peer's QPN, R_Key and buffer address, the path
//!    MTU, and the PSN its responder expects (the one this end announces).
//! 2. Frames from the generator built around those live values ([`Target`] with
//!    `whole_frame: false`), sent as UDP payloads from port 4791 through a socket that sends
//!    IPv4 ID 0 with DF (what the ICRC is computed for). The generator's valid frames (about a
//!    third) are interleaved with the violations.
//! 3. Each reply (ACK, NAK, READ response) is matched to the frame it answers and moves this
//!    end's idea of the responder's expected PSN (ACK PSN + 1, a PSN sequence NAK's PSN,
//!    READ response PSN + 1), so later frames stay inside the live window.
//! 4. After every batch a liveness probe: a 1-byte RDMA READ (or WRITE with `--probe write`)
//!    at the expected PSN; when it is not answered, a READ far ahead of the window draws a PSN
//!    sequence NAK that says where the responder is, and the probe is sent once more. A peer
//!    that still does not answer — with no fatal NAK (invalid request, remote access or
//!    operational error, after which IBTA moves its QP to the error state) in the batch — is a
//!    finding: the batch is saved as a pcap with the frame that preceded the silence.
//! 5. With `--console FILE` (a VM's serial console log), new lines matching `BUG:`,
//!    `WARNING:`, `Oops`, `general protection`, `Call Trace` or an rxe warning are a finding
//!    too, saved with the excerpt.

use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdmesh_core::wire::ethernet::{EthernetRepr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use rdmesh_core::wire::gen::{Generated, MrTarget, QpTarget, Target};
use rdmesh_core::wire::ip::IpRepr;
use rdmesh_core::wire::ipv4::Ipv4Repr;
use rdmesh_core::wire::ipv6::Ipv6Repr;
use rdmesh_core::wire::udp::ROCE_V2_PORT;
use rdmesh_core::wire::{
    BthRepr, IbPacket, NakCode, Opcode, Psn, RethRepr, RoceRepr, Syndrome, Transport,
    TransportRepr, UdpChecksum,
};

use super::coverage::{opcode_name, Coverage, Outcome};
use super::{entropy_for, generate, pcapio, udp_payload, SplitMix64};
use crate::bench::perftest::connect_retrying;
use crate::bench::perftest_oob::{mtu_bytes, mtu_enum, BwReport, KeyMsg, PerftestChannel};
use crate::bench::run::route_source;
use crate::capture::to_v6;
use crate::error::{Error, Result};

/// The liveness probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A 1-byte RDMA READ of the peer's buffer (`ib_read_bw` servers).
    Read,
    /// A 1-byte RDMA WRITE with AckReq (`ib_write_bw` servers).
    Write,
}

/// What `rdmesh fuzz peer` does.
#[derive(Debug, Clone)]
pub struct PeerOptions {
    /// The perftest server (host name or address).
    pub addr: String,
    /// Its TCP port (perftest's `-p`).
    pub port: u16,
    /// This end's address (the GID announced); default: the route's source address.
    pub bind: Option<IpAddr>,
    /// Seed of every decision.
    pub seed: u64,
    /// Generated frames to send (probes not counted).
    pub frames: u64,
    /// Frames between liveness probes.
    pub batch: usize,
    /// The server's message size (`-s`): the length of the buffer it advertises.
    pub size: u64,
    /// The server's iterations (`-n`), sent back in the closing report.
    pub server_iters: u64,
    /// Path MTU this end announces (the smaller of both ends is used).
    pub mtu: u32,
    /// How long to wait for a reply to one frame.
    pub reply_wait: Duration,
    /// How long to wait for the probe's answer.
    pub probe_timeout: Duration,
    /// Out-of-band exchange timeout.
    pub timeout: Duration,
    /// Where findings go.
    pub out: PathBuf,
    /// A console log to scan for kernel warnings after every batch.
    pub console: Option<PathBuf>,
    /// Connect again (the peer restarted by a loop) this many times after its QP went to the
    /// error state.
    pub reconnect: u32,
    /// The liveness probe.
    pub probe: Probe,
    /// What the peer's buffer allows: valid frames use only these operations, and
    /// `access-not-granted` frames the others.
    pub access: Access,
}

/// Remote access rights of the peer's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access {
    /// RDMA READ.
    pub read: bool,
    /// RDMA WRITE.
    pub write: bool,
    /// Atomics.
    pub atomic: bool,
}

/// One saved finding.
#[derive(Debug, Clone)]
pub struct PeerFinding {
    /// `silence` or `console`.
    pub kind: &'static str,
    /// Index of the generated frame that preceded it.
    pub frame: u64,
    /// The batch as a pcap.
    pub pcap: PathBuf,
    /// The last frame's case.
    pub last: Generated,
    /// The console excerpt (console findings).
    pub excerpt: String,
}

/// The result of a run.
#[derive(Debug, Clone, Default)]
pub struct PeerSummary {
    /// Generated frames sent.
    pub frames: u64,
    /// Liveness probes answered.
    pub probes_ok: u64,
    /// Connections made.
    pub connections: u32,
    /// Times the peer's QP went to the error state after a fatal NAK: (frame, NAK code).
    pub qp_errors: Vec<(u64, NakCode)>,
    /// The (opcode, violation) of the frame each fatal NAK answered, counted.
    pub qp_error_cases: std::collections::BTreeMap<(u8, &'static str), u32>,
    /// Findings.
    pub findings: Vec<PeerFinding>,
    /// Per opcode and violation: sent / answered / ACKed / NAKed / silent.
    pub coverage: Coverage,
    /// Wall time.
    pub elapsed: Duration,
    /// Why the run stopped early, if it did.
    pub stopped: Option<String>,
}

/// One reply from the peer.
#[derive(Debug, Clone, Copy)]
struct Reply {
    opcode: Opcode,
    psn: Psn,
    syndrome: Option<Syndrome>,
    msn: Option<u32>,
}

/// A live connection.
struct Conn {
    ch: PerftestChannel,
    my: KeyMsg,
    target: Target,
    sock: UdpSocket,
    peer_addr: SocketAddr,
    /// This end's idea of the responder's expected PSN.
    epsn: Psn,
    fatal: Option<NakCode>,
    /// Replies seen since the last drain, for the caller to match.
    pending: Vec<Reply>,
}

fn io<T>(r: std::io::Result<T>, what: &str) -> Result<T> {
    r.map_err(|e| Error::io(what.to_string(), e))
}

fn udp_socket(local: SocketAddr) -> Result<UdpSocket> {
    let domain = socket2::Domain::for_address(local);
    let s = io(
        socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP)),
        "creating the fuzzer's UDP socket",
    )?;
    if local.is_ipv4() {
        // DF and IP ID 0 on every datagram (unconnected socket): the header the ICRC is
        // computed for (see IcrcContext::for_udp_socket_v4).
        io(
            rustix::net::sockopt::set_ip_mtu_discover(
                &s,
                rustix::net::sockopt::Ipv4PathMtuDiscovery::DO,
            )
            .map_err(std::io::Error::from),
            "setting IP_MTU_DISCOVER=IP_PMTUDISC_DO",
        )?;
    } else {
        let _ = s.set_only_v6(true);
    }
    let _ = s.set_recv_buffer_size(8 << 20);
    s.bind(&local.into()).map_err(|e| {
        Error::io(
            format!("binding UDP {local} (RoCEv2 replies come to port 4791 of the announced GID; is another RoCE endpoint using it?)"),
            e,
        )
    })?;
    Ok(s.into())
}

impl Conn {
    fn open(opts: &PeerOptions, n: u32, rng: &mut SplitMix64) -> Result<Conn> {
        let addr = (opts.addr.as_str(), opts.port)
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("resolving {}", opts.addr), e))?
            .next()
            .ok_or_else(|| Error::Config(format!("{} has no address", opts.addr)))?;
        let stream = connect_retrying(addr, opts.timeout, "perftest server")?;
        let mut ch = PerftestChannel::new(stream, true, opts.timeout)?;
        ch.exchange_versions()?;
        ch.exchange_sys_data(4096, 64)?;
        let pmtu = mtu_bytes(ch.exchange_mtu(mtu_enum(opts.mtu))?);
        let local = match opts.bind {
            Some(a) => a,
            None => route_source(addr.ip())?,
        };
        let r = rng.next_u64();
        let my = KeyMsg {
            lid: 0,
            out_reads: 16,
            qpn: 0x00f0_0000 | ((r as u32) & 0xffff) | (n & 0xf) << 16,
            psn: ((r >> 24) as u32) & 0xff_ffff,
            rkey: 0,
            vaddr: 0,
            gid: match local {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            },
            srqn: 0,
        };
        let peer = ch.hand_shake(&my, "the key message")?;
        let peer_ip = peer.addr();
        if peer_ip.is_ipv4() != local.is_ipv4() {
            return Err(Error::Config(format!(
                "the peer's GID {peer_ip} and this end's {local} are different IP versions (use --bind)"
            )));
        }
        let sock = udp_socket(SocketAddr::new(local, ROCE_V2_PORT))?;
        ch.hand_shake(&my, "the barrier after connecting")?;
        ch.hand_shake(&my, "the barrier after RTR")?;
        let (eth_type, ip) = match (local, peer_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => (
                ETHERTYPE_IPV4,
                IpRepr::V4(Ipv4Repr {
                    src: s,
                    dst: d,
                    dscp: 0,
                    ecn: 0,
                    ident: 0,
                    dont_frag: true,
                    ttl: 64,
                    protocol: 17,
                    payload_len: 0,
                }),
            ),
            (s, d) => (
                ETHERTYPE_IPV6,
                IpRepr::V6(Ipv6Repr {
                    src: to_v6(s),
                    dst: to_v6(d),
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: 64,
                    next_header: 17,
                    payload_len: 0,
                }),
            ),
        };
        let target = Target {
            eth: EthernetRepr {
                dst: [0; 6],
                src: [0; 6],
                vlan: None,
                ethertype: eth_type,
            },
            ip,
            src_port: ROCE_V2_PORT,
            dst_port: ROCE_V2_PORT,
            udp_checksum: UdpChecksum::Zero,
            qp: QpTarget {
                qpn: peer.qpn,
                service: Transport::Rc,
                epsn: Psn::new(my.psn),
                msn: 0,
                pkey: rdmesh_core::wire::bth::DEFAULT_PKEY,
                qkey: 0,
                src_qpn: my.qpn,
                pmtu,
            },
            mr: Some(MrTarget {
                va: peer.vaddr,
                len: opts.size.max(8),
                rkey: peer.rkey,
                remote_read: opts.access.read,
                remote_write: opts.access.write,
                remote_atomic: opts.access.atomic,
            }),
            whole_frame: false,
        };
        eprintln!(
            "rdmesh fuzz peer: connected to {} (QPN {:#08x}, R_Key {:#010x}, VAddr {:#018x}, MTU {pmtu}); this end {local} QPN {:#08x} PSN {:#08x}",
            peer_ip, peer.qpn, peer.rkey, peer.vaddr, my.qpn, my.psn
        );
        Ok(Conn {
            ch,
            my,
            target,
            sock,
            peer_addr: SocketAddr::new(peer_ip, ROCE_V2_PORT),
            epsn: Psn::new(my.psn),
            fatal: None,
            pending: Vec::new(),
        })
    }

    fn send(&self, frame: &[u8]) -> Result<()> {
        let p = udp_payload(&self.target, frame);
        io(
            self.sock.send_to(p, self.peer_addr),
            "sending a frame to the peer",
        )?;
        Ok(())
    }

    /// Receives replies until `until` returns true for one or `wait` passes; every reply
    /// moves the PSN estimate and is kept in `pending`.
    fn receive(&mut self, wait: Duration, until: &dyn Fn(&Reply) -> bool) -> Result<bool> {
        let deadline = Instant::now() + wait;
        let mut buf = [0u8; 9000];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            io(
                self.sock
                    .set_read_timeout(Some(left.max(Duration::from_micros(100)))),
                "setting the socket timeout",
            )?;
            let (n, src) = match self.sock.recv_from(&mut buf) {
                Ok(x) => x,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(false)
                }
                Err(e) => return Err(Error::io("receiving from the peer", e)),
            };
            if src.ip() != self.peer_addr.ip() {
                continue;
            }
            let Ok(p) = IbPacket::parse(&buf[..n]) else {
                continue;
            };
            let b = p.transport.bth;
            if b.dest_qp != self.my.qpn {
                continue;
            }
            let r = Reply {
                opcode: b.opcode,
                psn: b.psn,
                syndrome: p.transport.aeth.map(|a| a.syndrome),
                msn: p.transport.aeth.map(|a| a.msn),
            };
            self.track(&r);
            self.pending.push(r);
            if until(&r) {
                return Ok(true);
            }
        }
    }

    /// Moves the expected-PSN estimate from one reply.
    fn track(&mut self, r: &Reply) {
        let advance_to = |cur: Psn, p: Psn| if p.diff(cur) > 0 { p } else { cur };
        match r.syndrome {
            Some(Syndrome::Nak(NakCode::PsnSequenceError)) => self.epsn = r.psn,
            Some(Syndrome::Nak(code)) => {
                self.fatal = Some(code);
                self.epsn = advance_to(self.epsn, r.psn);
            }
            Some(Syndrome::RnrNak { .. }) => self.epsn = advance_to(self.epsn, r.psn),
            _ => self.epsn = advance_to(self.epsn, r.psn.add(1)),
        }
        if let Some(m) = r.msn {
            self.target.qp.msn = m;
        }
    }

    /// A valid request frame at `psn`: a 1-byte READ, or a 1-byte WRITE Only with AckReq.
    fn probe_frame(&self, probe: Probe, psn: Psn) -> Vec<u8> {
        let t = &self.target;
        let mr = t.mr.expect("peer targets have an MR");
        let op = match probe {
            Probe::Read => Opcode::RcRdmaReadRequest,
            Probe::Write => Opcode::RcRdmaWriteOnly,
        };
        let mut tr = TransportRepr::new(BthRepr {
            opcode: op,
            solicited: false,
            mig_req: false,
            pad_cnt: 0,
            pkey: t.qp.pkey,
            fecn: false,
            becn: false,
            dest_qp: t.qp.qpn,
            ack_req: true,
            psn,
        });
        tr.reth = Some(RethRepr {
            va: mr.va,
            rkey: mr.rkey,
            dma_len: 1,
        });
        let repr = RoceRepr {
            eth: t.eth,
            ip: t.ip,
            udp: rdmesh_core::wire::UdpRepr {
                src_port: t.src_port,
                dst_port: t.dst_port,
                payload_len: 0,
                checksum: 0,
            },
            transport: tr,
        };
        let payload: &[u8] = if probe == Probe::Write { &[0x5a] } else { &[] };
        let mut buf = vec![0u8; repr.frame_len(payload.len())];
        repr.emit(payload, UdpChecksum::Zero, &mut buf)
            .expect("probe frame fits");
        buf
    }

    /// The liveness probe; `true` when the peer answered it.
    fn probe(&mut self, opts: &PeerOptions, sent: &mut Vec<Vec<u8>>) -> Result<bool> {
        for attempt in 0..2 {
            let psn = self.epsn;
            let f = self.probe_frame(opts.probe, psn);
            self.send(&f)?;
            sent.push(f);
            let probe = opts.probe;
            let answered = self.receive(opts.probe_timeout, &|r: &Reply| match probe {
                Probe::Read => r.opcode.is_read_response() && r.psn == psn,
                Probe::Write => {
                    r.opcode == Opcode::RcAcknowledge
                        && (r.psn == psn || r.psn == psn.sub(1))
                        && r.syndrome.is_some_and(|s| s.is_ack())
                }
            })?;
            if answered {
                return Ok(true);
            }
            if self.fatal.is_some() || attempt == 1 {
                break;
            }
            // Not answered: perhaps this end's PSN estimate fell behind (a frame was accepted
            // without an ACK) and the responder dropped the probe as an old duplicate. A READ
            // far ahead draws a PSN sequence NAK carrying the expected PSN.
            let ahead = self.probe_frame(Probe::Read, psn.add(1 << 22));
            self.send(&ahead)?;
            sent.push(ahead);
            self.receive(opts.probe_timeout, &|r: &Reply| {
                r.syndrome == Some(Syndrome::Nak(NakCode::PsnSequenceError))
            })?;
        }
        Ok(false)
    }

    fn close(mut self, opts: &PeerOptions) {
        let r = (|| -> Result<()> {
            self.ch.hand_shake(&self.my, "the barrier after the data")?;
            self.ch.exchange_bw_report(&BwReport {
                size: opts.size,
                iters: opts.server_iters,
                bw_peak: 0.0,
                bw_avg: 0.0,
                msg_rate_avg: 0.0,
            })?;
            self.ch.close(&self.my)
        })();
        if let Err(e) = r {
            tracing::info!(error = %e, "closing the perftest exchange");
        }
    }
}

/// How a reply answers `g` (sent when the responder expected `epsn`), if it does.
fn outcome_of(r: &Reply, g: &Generated, epsn: Psn) -> Option<Outcome> {
    match r.syndrome {
        // A PSN sequence NAK carries the expected PSN, not the offending one: it answers a
        // frame that was ahead of it.
        Some(Syndrome::Nak(NakCode::PsnSequenceError)) => {
            (g.psn.diff(epsn) > 0).then_some(Outcome::Naked)
        }
        Some(s) if s.is_nak() && r.psn == g.psn => Some(Outcome::Naked),
        _ if r.opcode.is_read_response() || r.opcode == Opcode::RcAtomicAcknowledge => {
            (r.psn == g.psn).then_some(Outcome::Answered)
        }
        Some(s) if s.is_ack() && (r.psn == g.psn || r.psn == epsn.sub(1)) => Some(Outcome::Acked),
        _ => None,
    }
}

/// Console lines that count as a finding.
pub fn console_alarm(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    [
        "BUG:",
        "WARNING:",
        "Oops",
        "general protection",
        "Call Trace",
    ]
    .iter()
    .any(|p| line.contains(p))
        || (l.contains("rxe") && (l.contains("warn") || l.contains("error")))
}

struct Console {
    path: PathBuf,
    offset: u64,
}

impl Console {
    fn open(path: &Path) -> Console {
        let offset = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        Console {
            path: path.to_path_buf(),
            offset,
        }
    }

    /// New alarming lines since the last call.
    fn scan(&mut self) -> Vec<String> {
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return Vec::new();
        };
        let mut s = Vec::new();
        if f.seek(SeekFrom::Start(self.offset)).is_err() || f.read_to_end(&mut s).is_err() {
            return Vec::new();
        }
        self.offset += s.len() as u64;
        String::from_utf8_lossy(&s)
            .lines()
            .filter(|l| console_alarm(l))
            .map(str::to_string)
            .collect()
    }
}

fn save_finding(
    opts: &PeerOptions,
    kind: &'static str,
    frame: u64,
    batch: &[(Vec<u8>, Option<Generated>)],
    last: Generated,
    excerpt: &str,
) -> Result<PeerFinding> {
    std::fs::create_dir_all(&opts.out)
        .map_err(|e| Error::io(format!("creating {}", opts.out.display()), e))?;
    let base = opts
        .out
        .join(format!("{kind}-seed{}-frame{frame}", opts.seed));
    let pcap = base.with_extension("pcap");
    let frames: Vec<Vec<u8>> = batch.iter().map(|(f, _)| f.clone()).collect();
    pcapio::write(&pcap, &frames)?;
    let mut s = format!(
        "{kind} of the peer {}:{} after generated frame {frame} (seed {})\nlast frame before it: opcode {:#04x} {} violation {} psn {}\n",
        opts.addr,
        opts.port,
        opts.seed,
        last.opcode,
        opcode_name(last.opcode),
        last.violation.name(),
        last.psn
    );
    if !excerpt.is_empty() {
        s += "console:\n";
        s += excerpt;
        s += "\n";
    }
    s += "frames of the batch (pcap order; probes have no case):\n";
    for (i, (f, g)) in batch.iter().enumerate() {
        let case = g.map_or("probe".to_string(), |g| {
            format!("{} {}", opcode_name(g.opcode), g.violation.name())
        });
        let _ = writeln!(
            s,
            "  {case}: {}",
            crate::cli::pcap::frame_text(i as u64 + 1, f).trim()
        );
    }
    std::fs::write(base.with_extension("txt"), s)
        .map_err(|e| Error::io(format!("writing {}", base.display()), e))?;
    Ok(PeerFinding {
        kind,
        frame,
        pcap,
        last,
        excerpt: excerpt.to_string(),
    })
}

/// Runs `rdmesh fuzz peer`.
///
/// Errors: the out-of-band exchange, the UDP socket, writing findings.
pub fn run(opts: &PeerOptions) -> Result<PeerSummary> {
    let start = Instant::now();
    let mut rng = SplitMix64::new(opts.seed);
    let mut sum = PeerSummary::default();
    let mut console = opts.console.as_deref().map(Console::open);
    let mut conn = Conn::open(opts, 0, &mut rng)?;
    sum.connections = 1;
    let mut batch: Vec<(Vec<u8>, Option<Generated>)> = Vec::new();
    let mut i = 0u64;
    while i < opts.frames {
        conn.target.qp.epsn = conn.epsn;
        let epsn = conn.epsn;
        let f = generate(
            &conn.target,
            &entropy_for(opts.seed, u64::from(sum.connections), i),
        )?;
        conn.send(&f.bytes)?;
        conn.pending.clear();
        let g = f.info;
        conn.receive(opts.reply_wait, &|r: &Reply| {
            outcome_of(r, &g, epsn).is_some()
        })?;
        let outcome = conn
            .pending
            .iter()
            .find_map(|r| outcome_of(r, &g, epsn))
            .unwrap_or(Outcome::Silent);
        sum.coverage.record(&g, Some(outcome));
        batch.push((f.bytes, Some(g)));
        sum.frames += 1;
        i += 1;
        // A fatal NAK ends the batch: the peer's QP is in the error state (IBTA 9.9.3).
        if batch.len() < opts.batch && i < opts.frames && conn.fatal.is_none() {
            continue;
        }
        let mut sent = Vec::new();
        let alive = conn.fatal.is_none() && conn.probe(opts, &mut sent)?;
        batch.extend(sent.into_iter().map(|f| (f, None)));
        let last = batch
            .iter()
            .rev()
            .find_map(|(_, g)| *g)
            .expect("a batch has generated frames");
        if let Some(c) = console.as_mut() {
            let alarms = c.scan();
            if !alarms.is_empty() {
                let excerpt = alarms.join("\n");
                sum.findings.push(save_finding(
                    opts,
                    "console",
                    i - 1,
                    &batch,
                    last,
                    &excerpt,
                )?);
            }
        }
        if alive {
            sum.probes_ok += 1;
        } else if let Some(code) = conn.fatal {
            sum.qp_errors.push((i - 1, code));
            *sum.qp_error_cases
                .entry((last.opcode, last.violation.name()))
                .or_default() += 1;
            eprintln!(
                "rdmesh fuzz peer: the peer's QP went to the error state after a {code:?} NAK (frame {}); {}",
                i - 1,
                if (sum.connections as usize) <= opts.reconnect as usize {
                    "connecting again"
                } else {
                    "no reconnects left (--reconnect)"
                }
            );
            if sum.connections > opts.reconnect {
                sum.stopped = Some(format!(
                    "the peer's QP went to the error state ({code:?} NAK) and --reconnect {} is used up",
                    opts.reconnect
                ));
                batch.clear();
                break;
            }
            conn.close(opts);
            conn = Conn::open(opts, sum.connections, &mut rng)?;
            sum.connections += 1;
        } else {
            sum.findings
                .push(save_finding(opts, "silence", i - 1, &batch, last, "")?);
            sum.stopped = Some(format!(
                "the peer stopped answering after frame {} ({} {})",
                i - 1,
                opcode_name(last.opcode),
                last.violation.name()
            ));
            batch.clear();
            break;
        }
        batch.clear();
    }
    conn.close(opts);
    sum.elapsed = start.elapsed();
    Ok(sum)
}

/// The summary text `rdmesh fuzz peer` prints.
pub fn summary_text(opts: &PeerOptions, s: &PeerSummary) -> String {
    let mut t = format!(
        "rdmesh fuzz peer: {} frames to {}:{} (seed {}), {} probes answered, {} connections, {} QP errors, {} findings in {:.1} s\n",
        s.frames,
        opts.addr,
        opts.port,
        opts.seed,
        s.probes_ok,
        s.connections,
        s.qp_errors.len(),
        s.findings.len(),
        s.elapsed.as_secs_f64()
    );
    if let Some(why) = &s.stopped {
        let _ = writeln!(t, "stopped: {why}");
    }
    for ((op, v), n) in &s.qp_error_cases {
        let _ = writeln!(t, "qp error x{n}: fatal NAK after {} {v}", opcode_name(*op));
    }
    for f in &s.findings {
        let _ = writeln!(
            t,
            "finding: {} after frame {} ({} {}): {}",
            f.kind,
            f.frame,
            opcode_name(f.last.opcode),
            f.last.violation.name(),
            f.pcap.display()
        );
    }
    t += "coverage (replies per frame):\n";
    t += &s.coverage.table(true);
    t
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn console_patterns() {
        assert!(console_alarm(
            "[  12.3] BUG: kernel NULL pointer dereference"
        ));
        assert!(console_alarm(
            "WARNING: CPU: 0 PID: 1 at drivers/infiniband/sw/rxe/rxe_resp.c"
        ));
        assert!(console_alarm("rdma_rxe: rxe0: qp#17 warn: bad psn"));
        assert!(!console_alarm("[   1.0] rdma_rxe: loaded"));
    }
}
