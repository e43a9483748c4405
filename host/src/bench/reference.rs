//! The references a benchmark is compared against in the same run, each between two processes,
//! as a user would measure them: `rdmesh bench` re-executes itself as the peer
//! (`rdmesh reference-peer`, hidden) and is the other end itself, on 127.0.0.1.
//!
//! - `--compare-tcp` (bandwidth): one TCP stream, the client writing messages of the same size
//!   for the same count or duration, the sink reading them (iperf3's shape: default socket
//!   options, no `TCP_NODELAY`); the clock stops when the sink has read every byte.
//! - `--compare-udp` with `--lat`: a UDP ping-pong of the same message size; half the round
//!   trip, like `ib_write_lat`.
//! - `--compare-udp` for bandwidth: plain UDP cut into 4096-byte datagrams with the RC window
//!   (128 datagrams in flight, an acknowledgement every 64 and at each message end).
//!
//! CPU pinning (`--cpus`) is inherited by the peer process, so both ends run where the
//! benchmark runs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::bench::run::{BenchOptions, SizeResult};
use crate::bench::stats::{self, BwResult, LatResult};
use crate::error::{Error, Result};

const DATAGRAM: usize = 4096;
const WINDOW: u64 = 128;
const ACK_EVERY: u64 = 64;
/// Bytes per `write`/`read` of the TCP sink.
const TCP_CHUNK: usize = 1 << 20;

/// What the peer process does (`rdmesh reference-peer KIND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PeerKind {
    /// Echo every UDP datagram back to its sender.
    UdpEcho,
    /// Receive UDP datagrams, acknowledging (cumulative count) every 64 and at message ends.
    UdpSink,
    /// Accept one TCP connection, read it to the end, answer the byte count (8 bytes, LE).
    TcpSink,
}

/// Which reference to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    /// One TCP stream between two processes.
    Tcp,
    /// Plain UDP between two processes.
    Udp,
}

/// The peer side (`rdmesh reference-peer`): binds an ephemeral port on 127.0.0.1, prints it on
/// stdout, serves one run and exits. `per_msg`: datagrams per message (UDP sink).
///
/// Errors: socket errors; a run idle for 10 s.
pub fn serve_peer(kind: PeerKind, per_msg: u64) -> Result<()> {
    let io = |e| Error::io("reference peer", e);
    let idle = Some(Duration::from_secs(10));
    match kind {
        PeerKind::UdpEcho | PeerKind::UdpSink => {
            let s = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
            let _ = socket2::SockRef::from(&s).set_recv_buffer_size(16 << 20);
            s.set_read_timeout(idle).map_err(io)?;
            announce(s.local_addr().map_err(io)?)?;
            let mut buf = vec![0u8; 65536];
            let mut n = 0u64;
            loop {
                let (len, from) = s.recv_from(&mut buf).map_err(io)?;
                if len == 0 {
                    return Ok(());
                }
                match kind {
                    PeerKind::UdpEcho => {
                        s.send_to(&buf[..len], from).map_err(io)?;
                    }
                    _ => {
                        n += 1;
                        if n % ACK_EVERY == 0 || n % per_msg.max(1) == 0 {
                            s.send_to(&n.to_le_bytes(), from).map_err(io)?;
                        }
                    }
                }
            }
        }
        PeerKind::TcpSink => {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
            announce(l.local_addr().map_err(io)?)?;
            let (mut c, _) = l.accept().map_err(io)?;
            c.set_read_timeout(idle).map_err(io)?;
            let mut buf = vec![0u8; TCP_CHUNK];
            let mut total = 0u64;
            loop {
                match c.read(&mut buf).map_err(io)? {
                    0 => break,
                    n => total += n as u64,
                }
            }
            c.write_all(&total.to_le_bytes()).map_err(io)?;
            Ok(())
        }
    }
}

fn announce(a: SocketAddr) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", a.port())
        .and_then(|_| out.flush())
        .map_err(|e| Error::io("reference peer: announcing the port", e))
}

/// A peer process and the port it listens on.
struct Peer {
    child: Child,
    addr: SocketAddr,
}

impl Peer {
    fn start(kind: PeerKind, per_msg: u64) -> Result<Peer> {
        let exe = std::env::current_exe()
            .map_err(|e| Error::io("finding the rdmesh binary to run the reference peer", e))?;
        let name = clap::ValueEnum::to_possible_value(&kind)
            .map(|v| v.get_name().to_string())
            .unwrap_or_default();
        let mut child = Command::new(&exe)
            .args(["reference-peer", &name, "--per-msg", &per_msg.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| Error::io(format!("starting {} reference-peer", exe.display()), e))?;
        let mut line = String::new();
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::Bench("reference peer has no stdout".into()))?;
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|e| Error::io("reading the reference peer's port", e))?;
        let port: u16 = line.trim().parse().map_err(|_| {
            Error::Bench(format!("the reference peer announced {line:?}, not a port"))
        })?;
        Ok(Peer {
            child,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        })
    }

    fn finish(mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) if s.success() => return Ok(()),
                Ok(Some(s)) => return Err(Error::Bench(format!("the reference peer failed: {s}"))),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    return Err(Error::Bench("the reference peer did not exit".into()));
                }
            }
        }
    }
}

/// How many messages and for how long a reference runs: the rdmesh run's count, or its
/// duration when it had one.
fn workload(opts: &BenchOptions) -> (u64, Option<Duration>) {
    (opts.iters.max(1), opts.duration)
}

/// One TCP stream to a sink process: `size`-byte writes, `iters` of them or for `duration`.
pub fn tcp_bw(size: u64, iters: u64, duration: Option<Duration>) -> Result<BwResult> {
    let peer = Peer::start(PeerKind::TcpSink, 1)?;
    let io = |e| Error::io("TCP reference", e);
    let mut s = TcpStream::connect(peer.addr).map_err(io)?;
    let msg = vec![0x5au8; size.max(1) as usize];
    let start = Instant::now();
    let mut sent = 0u64;
    loop {
        let more = match duration {
            Some(d) => start.elapsed() < d,
            None => sent < iters,
        };
        if !more {
            break;
        }
        s.write_all(&msg).map_err(io)?;
        sent += 1;
    }
    s.shutdown(std::net::Shutdown::Write).map_err(io)?;
    let mut total = [0u8; 8];
    s.read_exact(&mut total).map_err(io)?;
    let elapsed = start.elapsed();
    peer.finish()?;
    if u64::from_le_bytes(total) != sent * size.max(1) {
        return Err(Error::Bench(format!(
            "TCP reference: the sink read {} bytes of {}",
            u64::from_le_bytes(total),
            sent * size.max(1)
        )));
    }
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(BwResult {
        bytes: size,
        iters: sent,
        peak_bps: (sent * size) as f64 / secs,
        avg_bps: (sent * size) as f64 / secs,
        msg_rate: sent as f64 / secs,
    })
}

/// Plain UDP to a sink process with the RC window (see the module docs).
pub fn udp_bw(size: u64, iters: u64, duration: Option<Duration>) -> Result<BwResult> {
    let per_msg = size.max(1).div_ceil(DATAGRAM as u64);
    let peer = Peer::start(PeerKind::UdpSink, per_msg)?;
    let io = |e| Error::io("plain-UDP reference", e);
    let tx = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
    tx.connect(peer.addr).map_err(io)?;
    tx.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    let data = vec![0x5au8; size.clamp(1, DATAGRAM as u64) as usize];
    let mut ack = [0u8; 8];
    let start = Instant::now();
    let (mut sent, mut acked) = (0u64, 0u64);
    let mut total = iters * per_msg;
    while acked < total {
        if let Some(d) = duration {
            if start.elapsed() >= d && total == u64::MAX {
                total = sent.div_ceil(per_msg) * per_msg;
                continue;
            }
            if total == iters * per_msg {
                total = u64::MAX;
            }
        }
        while sent < total && sent - acked < WINDOW {
            let last = (sent + 1) % per_msg == 0;
            let n = if last {
                (size.max(1) - (per_msg - 1) * DATAGRAM as u64) as usize
            } else {
                DATAGRAM
            };
            tx.send(&data[..n.min(data.len())]).map_err(io)?;
            sent += 1;
        }
        if acked >= total {
            break;
        }
        tx.recv(&mut ack).map_err(|e| {
            Error::io(
                "plain-UDP reference (a datagram was lost on loopback; rerun)",
                e,
            )
        })?;
        acked = acked.max(u64::from_le_bytes(ack));
    }
    let elapsed = start.elapsed();
    let _ = tx.send(&[]);
    peer.finish()?;
    let msgs = acked / per_msg;
    let secs = elapsed.as_secs_f64().max(1e-9);
    Ok(BwResult {
        bytes: size,
        iters: msgs,
        peak_bps: (msgs * size) as f64 / secs,
        avg_bps: (msgs * size) as f64 / secs,
        msg_rate: msgs as f64 / secs,
    })
}

/// UDP ping-pong with an echo process: samples in µs, half the round trip.
pub fn udp_lat(size: u64, iters: u64) -> Result<Vec<f64>> {
    let peer = Peer::start(PeerKind::UdpEcho, 1)?;
    let io = |e| Error::io("plain-UDP reference", e);
    let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
    a.connect(peer.addr).map_err(io)?;
    a.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    let data = vec![0x5au8; size.clamp(1, 65507) as usize];
    let mut buf = vec![0u8; 65536];
    let mut samples = Vec::with_capacity(iters as usize);
    for _ in 0..iters {
        let t = Instant::now();
        a.send(&data).map_err(io)?;
        a.recv(&mut buf).map_err(io)?;
        samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
    }
    let _ = a.send(&[]);
    peer.finish()?;
    Ok(samples)
}

/// Runs the reference for every size of `opts`, prints its table and the ratio of each rdmesh
/// result (`ours`, same order as `opts.sizes`) to it.
///
/// Errors: the reference peer could not start or failed.
pub fn compare(opts: &BenchOptions, reference: Reference, ours: &[SizeResult]) -> Result<()> {
    let (iters, duration) = workload(opts);
    let what = match (reference, opts.lat) {
        (Reference::Tcp, _) => "one TCP stream between two processes",
        (Reference::Udp, true) => "UDP ping-pong between two processes",
        (Reference::Udp, false) => "plain UDP between two processes, RC window",
    };
    println!(" Reference: {what} on 127.0.0.1, same sizes and message counts");
    println!(
        "{}",
        if opts.lat {
            stats::lat_header()
        } else {
            stats::bw_header(opts.report_gbits)
        }
    );
    let mut ratios = Vec::new();
    let name = match reference {
        Reference::Tcp => "TCP",
        Reference::Udp => "UDP",
    };
    for (&size, mine) in opts.sizes.iter().zip(ours) {
        match mine {
            SizeResult::Lat(m) => {
                let mut s = udp_lat(size, iters)?;
                let r = LatResult::from_samples(size, &mut s);
                println!("{}", stats::lat_row(&r));
                // The median first (what the ratio is judged by), then the mean and the 99th
                // percentile: the tail (a late timer, a preempted thread) shows only there.
                ratios.push(format!(
                    " {size:<10} rdmesh/{name} median latency {:.2}x ({:.2} vs {:.2} usec), mean {:.2}x ({:.2} vs {:.2}), 99% percentile {:.2}x ({:.2} vs {:.2})",
                    m.typical / r.typical,
                    m.typical,
                    r.typical,
                    m.avg / r.avg,
                    m.avg,
                    r.avg,
                    m.p99 / r.p99,
                    m.p99,
                    r.p99
                ));
            }
            SizeResult::Bw(m) => {
                let r = match reference {
                    Reference::Tcp => tcp_bw(size, iters, duration)?,
                    Reference::Udp => udp_bw(size, iters, duration)?,
                };
                println!("{}", stats::bw_row(&r, opts.report_gbits));
                ratios.push(format!(
                    " {size:<10} rdmesh/{name} average bandwidth {:.2}x ({:.2} vs {:.2} MB/sec)",
                    m.avg_bps / r.avg_bps,
                    m.avg_bps / 1_048_576.0,
                    r.avg_bps / 1_048_576.0
                ));
            }
        }
    }
    println!("{}", stats::RULE);
    for r in ratios {
        println!("{r}");
    }
    Ok(())
}
