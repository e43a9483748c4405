//! `rdmesh bench`: server and client of the perftest-shaped benchmarks.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream, ToSocketAddrs, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::bench::endpoint::{common_mtu, DeviceChoice, Endpoint, RX_DEPTH, TX_DEPTH};
use crate::bench::oob::{
    negotiate, recovery_code, Channel, Hello, QpInfo, Report, Start, RECOVERY_NEGOTIATE,
};
use crate::bench::pattern;
use crate::bench::stats::{self, BwResult, LatResult};
use crate::capture::Capture;
use crate::error::{Error, Result};
use crate::soft::Impairment;
use crate::verbs::{CompletionQueue, Recovery, RecvWr, SendWr, Sge, WorkCompletion, WrOpcode};

/// Which operation the benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// RDMA WRITE (ib_write_bw / ib_write_lat).
    Write,
    /// SEND / RECV (ib_send_bw / ib_send_lat).
    Send,
    /// RDMA READ (ib_read_bw / ib_read_lat).
    Read,
}

impl Mode {
    fn code(self) -> u8 {
        match self {
            Mode::Write => 0,
            Mode::Send => 1,
            Mode::Read => 2,
        }
    }

    fn from_code(c: u8) -> Option<Mode> {
        [Mode::Write, Mode::Send, Mode::Read]
            .into_iter()
            .find(|m| m.code() == c)
    }
}

/// Everything `rdmesh bench` was asked to do.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Operation.
    pub mode: Mode,
    /// Server host to connect to (client), or `None` (server).
    pub server: Option<String>,
    /// Out-of-band TCP port.
    pub tcp_port: u16,
    /// Message sizes, bytes.
    pub sizes: Vec<u64>,
    /// Messages per size.
    pub iters: u64,
    /// Run each size for this long instead of `iters` messages.
    pub duration: Option<Duration>,
    /// Report Gb/s instead of MB/s.
    pub report_gbits: bool,
    /// Latency (ping-pong) test.
    pub lat: bool,
    /// Check every received byte against the pattern.
    pub verify: bool,
    /// Without `verify`: bytes of buffer the messages cycle through on each end (perftest's
    /// `--cycle_buffer`, default 4096): a message at least this long reuses one buffer of its
    /// own size, as perftest's and iperf3's do. With `verify` every message in flight has its
    /// own slot.
    pub cycle_buffer: u64,
    /// Write every packet to this pcap file.
    pub pcap: Option<std::path::PathBuf>,
    /// Run both ends in this process over loopback.
    pub loopback: bool,
    /// Local UDP port (None: 4791 or ephemeral when taken).
    pub udp_port: Option<u16>,
    /// Local address to bind (None: the route's source address towards the peer).
    pub local_addr: Option<IpAddr>,
    /// Largest path MTU to use, bytes.
    pub mtu: Option<u32>,
    /// Out-of-band and completion timeout.
    pub timeout: Duration,
    /// Also measure plain UDP between two processes in the same run (loopback only) and print
    /// the ratio ([`crate::bench::reference`]).
    pub compare_udp: bool,
    /// Also measure one TCP stream between two processes in the same run (loopback only,
    /// bandwidth) and print the ratio.
    pub compare_tcp: bool,
    /// With `loopback` and `impair`, bandwidth: switch the impairment of both ends on and off
    /// every 250 ms and print the goodput of the impaired periods against the clean ones
    /// ([`crate::bench::loss_split`]).
    pub compare_loss_free: bool,
    /// Pin every thread (and the reference's processes) to these CPUs.
    pub cpus: Option<Vec<usize>>,
    /// Queue pairs run side by side (perftest's `-q`), each on its own soft device — its own
    /// UDP socket and progress — and thread; the aggregate bandwidth is printed. Loopback
    /// bandwidth tests only.
    pub qps: u32,
    /// Print nothing (one QP of a `-q` run; the caller prints the table).
    pub quiet: bool,
    /// Speak perftest's out-of-band exchange instead of rdmesh's (the peer is ib_write_bw,
    /// ib_send_bw, ib_read_bw or ib_write_lat); see [`crate::bench::perftest`].
    pub perftest_compat: bool,
    /// Receive through a raw socket that shows the real IPv4 header (`SoftConfig::raw_receive`).
    pub raw_rx: bool,
    /// Test fault: corrupt the ICRC of this sent packet (1-based).
    pub corrupt_tx_icrc: Option<u64>,
    /// Seeded impairment of this end's packets (with `loopback`: both ends, the server's
    /// stream seeded with `seed + 1`).
    pub impair: Option<Impairment>,
    /// Loss recovery of the benchmark QPs. The client's choice travels in the hello; a server
    /// given `None` takes it, a server given another mode refuses the client.
    /// `None` on both ends: the mode `NEGOTIATED_RECOVERY` names (selective repeat; go-back-N
    /// where either end's device speaks only that).
    pub recovery: Option<Recovery>,
    /// Print the QP and device counters of each end at the end (`key=value` lines, see
    /// [`crate::bench::counters`]).
    pub counters: bool,
    /// DCQCN congestion control (rate limiter driven by CNPs) on this end's QP; `None` = off.
    /// With `loopback`, on both ends.
    pub dcqcn: Option<rdmesh_core::cc::DcqcnConfig>,
    /// Bandwidth tests: print a [`crate::bench::trace`] line this often while the client sends.
    pub report_interval: Option<Duration>,
    /// The provider of this end's device (with `loopback`: both ends).
    pub provider: crate::verbs::ProviderKind,
}

/// Bytes of buffer the client asks for per side.
const BUFFER_BUDGET: u64 = 256 << 20;

fn slots_for(opts: &BenchOptions, max_size: u64) -> u32 {
    if opts.lat {
        // Slot 0 is what this end sends from, slot 1 what the peer writes into.
        return 2;
    }
    let by_mem = (BUFFER_BUDGET / max_size.max(1)).max(1);
    // With --verify each slot holds one message until it is checked, and a SEND server
    // posts a slot's next receive only then: RX_DEPTH slots against TX_DEPTH messages in
    // flight leave the server that much slack before its receive queue runs dry (perftest's
    // rx_depth 512 against tx_depth 128).
    let by_iters = if opts.duration.is_some() {
        u64::from(if opts.verify { RX_DEPTH } else { TX_DEPTH })
    } else {
        opts.iters.max(1)
    };
    // perftest's BUFF_SIZE(size, cycle_buffer): messages shorter than the cycle buffer take
    // turns in it; longer ones all use one buffer of their own size.
    let by_cycle = if opts.verify {
        u64::MAX
    } else {
        (opts.cycle_buffer / max_size.max(1)).clamp(1, u64::from(TX_DEPTH))
    };
    by_mem.min(by_iters).min(by_cycle).max(1) as u32
}

/// Runs the benchmark as `opts` says: server, client, or both in one process.
pub fn run(opts: &BenchOptions) -> Result<()> {
    if opts.sizes.iter().any(|&s| s > 1 << 31) {
        return Err(Error::Config(
            "message sizes above 2^31 bytes are not allowed by RC".into(),
        ));
    }
    if opts.lat && opts.duration.is_some() {
        return Err(Error::Config(
            "--duration applies to bandwidth tests; use -n for --lat".into(),
        ));
    }
    if opts.lat && opts.mode == Mode::Write && opts.sizes.contains(&0) {
        return Err(Error::Config(
            "write latency needs messages of at least 1 byte (the last byte signals arrival)"
                .into(),
        ));
    }
    if let Some(cpus) = &opts.cpus {
        crate::bench::affinity::pin(cpus)?;
    }
    let capture = match &opts.pcap {
        Some(p) => Some(Capture::create(p)?),
        None => None,
    };
    if opts.perftest_compat {
        return crate::bench::perftest::run(opts, capture);
    }
    if opts.loopback {
        let results = if opts.qps > 1 {
            loopback_qps(opts, &capture)?
        } else {
            loopback_pair(opts, &capture)?
        };
        if opts.compare_udp {
            crate::bench::reference::compare(
                opts,
                crate::bench::reference::Reference::Udp,
                &results,
            )?;
        } else if opts.compare_tcp {
            crate::bench::reference::compare(
                opts,
                crate::bench::reference::Reference::Tcp,
                &results,
            )?;
        }
    } else if let Some(host) = &opts.server {
        let addr = (host.as_str(), opts.tcp_port)
            .to_socket_addrs()
            .map_err(|e| Error::io(format!("resolving {host}"), e))?
            .next()
            .ok_or_else(|| Error::Config(format!("{host} has no address")))?;
        let stream = TcpStream::connect_timeout(&addr, opts.timeout).map_err(|e| {
            Error::io(
                format!(
                    "connecting to the rdmesh bench server at {addr} (is it running? firewall?)"
                ),
                e,
            )
        })?;
        let local = match opts.local_addr {
            Some(a) => a,
            None => route_source(addr.ip())?,
        };
        let choice = DeviceChoice {
            addr: local,
            udp_port: opts.udp_port,
            capture,
            capture_received: true,
            raw_receive: opts.raw_rx,
            corrupt_tx_icrc: opts.corrupt_tx_icrc,
            impair: opts.impair,
            impair_switch: None,
            dcqcn: opts.dcqcn,
            provider: opts.provider.clone(),
        };
        client(opts, Channel::new(stream, opts.timeout)?, &choice)?;
    } else {
        let listener = TcpListener::bind((Ipv4Addr::UNSPECIFIED, opts.tcp_port)).map_err(|e| {
            Error::io(
                format!(
                    "listening on TCP port {} for the out-of-band exchange",
                    opts.tcp_port
                ),
                e,
            )
        })?;
        eprintln!(" Waiting for a client on TCP port {} ...", opts.tcp_port);
        let (stream, peer) = listener
            .accept()
            .map_err(|e| Error::io("accepting a client", e))?;
        let local = match opts.local_addr {
            Some(a) => a,
            None => stream
                .local_addr()
                .map_err(|e| Error::io("reading the accepted socket's address", e))?
                .ip(),
        };
        tracing::info!(%peer, %local, "client connected");
        let choice = DeviceChoice {
            addr: local,
            udp_port: opts.udp_port,
            capture,
            capture_received: true,
            raw_receive: opts.raw_rx,
            corrupt_tx_icrc: opts.corrupt_tx_icrc,
            impair: opts.impair,
            impair_switch: None,
            dcqcn: opts.dcqcn,
            provider: opts.provider.clone(),
        };
        serve(opts, Channel::new(stream, opts.timeout)?, &choice)?;
    }
    Ok(())
}

/// Both ends of the benchmark in this process over 127.0.0.1: the server on its own thread.
fn loopback_pair(
    opts: &BenchOptions,
    capture: &Option<std::sync::Arc<Capture>>,
) -> Result<Vec<SizeResult>> {
    let capture = capture.clone();
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("binding the loopback out-of-band port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| Error::io("reading the out-of-band port", e))?
        .port();
    let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
    // `--compare-loss-free`: one switch for both ends' impairment, driven by the client.
    let switch = (opts.compare_loss_free && opts.impair.is_some())
        .then(|| std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false)));
    let server_choice = DeviceChoice {
        addr: lo,
        udp_port: None,
        capture: capture.clone(),
        capture_received: false,
        raw_receive: false,
        corrupt_tx_icrc: None,
        impair: opts.impair.map(|i| i.with_seed(i.seed.wrapping_add(1))),
        impair_switch: switch.clone(),
        dcqcn: opts.dcqcn,
        provider: opts.provider.clone(),
    };
    let client_choice = DeviceChoice {
        addr: lo,
        udp_port: Some(opts.udp_port.unwrap_or(0)),
        capture: capture.clone(),
        capture_received: false,
        raw_receive: false,
        corrupt_tx_icrc: opts.corrupt_tx_icrc,
        impair: opts.impair,
        impair_switch: switch,
        dcqcn: opts.dcqcn,
        provider: opts.provider.clone(),
    };
    let sopts = opts.clone();
    let server = std::thread::Builder::new()
        .name("rdmesh-bench-server".into())
        .spawn(move || -> Result<()> {
            let (stream, _) = listener
                .accept()
                .map_err(|e| Error::io("accepting the loopback client", e))?;
            serve(&sopts, Channel::new(stream, sopts.timeout)?, &server_choice)
        })
        .map_err(|e| Error::io("starting the loopback server thread", e))?;
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .map_err(|e| Error::io("connecting to the loopback server", e))?;
    let client_result = client(opts, Channel::new(stream, opts.timeout)?, &client_choice);
    let server_result = server
        .join()
        .map_err(|_| Error::Bench("the loopback server thread panicked".into()))?;
    let results = client_result?;
    server_result?;
    Ok(results)
}

/// `-q N`: N loopback pairs side by side, one thread each; prints each QP's row and the
/// aggregate (the sum of the QPs' average bandwidths, as perftest's `-q` reports).
fn loopback_qps(
    opts: &BenchOptions,
    capture: &Option<std::sync::Arc<Capture>>,
) -> Result<Vec<SizeResult>> {
    if opts.lat {
        return Err(Error::Config(
            "-q applies to bandwidth tests; --lat uses one QP".into(),
        ));
    }
    let quiet = BenchOptions {
        quiet: true,
        compare_udp: false,
        compare_tcp: false,
        ..opts.clone()
    };
    let runs: Vec<Result<Vec<SizeResult>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..opts.qps)
            .map(|_| scope.spawn(|| loopback_pair(&quiet, capture)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::Bench("a -q benchmark thread panicked".into())))
            })
            .collect()
    });
    let runs = runs.into_iter().collect::<Result<Vec<_>>>()?;
    println!("{}", stats::RULE);
    println!(
        "                    {:?} BW Test, {} QPs (one soft device, socket and thread each)",
        opts.mode, opts.qps
    );
    println!("{}", stats::bw_header(opts.report_gbits));
    let mut aggregate = Vec::new();
    for (i, &size) in opts.sizes.iter().enumerate() {
        let mut sum: Option<BwResult> = None;
        for (q, run) in runs.iter().enumerate() {
            if let Some(SizeResult::Bw(r)) = run.get(i) {
                println!("{} (QP {q})", stats::bw_row(r, opts.report_gbits));
                let s = sum.get_or_insert(BwResult {
                    bytes: size,
                    iters: 0,
                    peak_bps: 0.0,
                    avg_bps: 0.0,
                    msg_rate: 0.0,
                });
                s.iters += r.iters;
                s.peak_bps += r.peak_bps;
                s.avg_bps += r.avg_bps;
                s.msg_rate += r.msg_rate;
            }
        }
        if let Some(s) = sum {
            println!(
                "{} (aggregate of {} QPs)",
                stats::bw_row(&s, opts.report_gbits),
                opts.qps
            );
            aggregate.push(SizeResult::Bw(s));
        }
    }
    println!("{}", stats::RULE);
    Ok(aggregate)
}

/// The local address the kernel would use to reach `dst`.
///
/// Errors: [`Error::Io`] when there is no route.
pub(crate) fn route_source(dst: IpAddr) -> Result<IpAddr> {
    let any: SocketAddr = if dst.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        "[::]:0".parse().expect("valid")
    };
    let s = UdpSocket::bind(any).map_err(|e| Error::io("finding the route to the peer", e))?;
    s.connect((dst, 4791))
        .map_err(|e| Error::io(format!("no route to {dst}"), e))?;
    Ok(s.local_addr()
        .map_err(|e| Error::io("finding the route to the peer", e))?
        .ip())
}

fn header_line(opts: &BenchOptions, ep: &Endpoint, peer: &QpInfo, mtu: u32, recovery: Recovery) {
    let op = match opts.mode {
        Mode::Write => "RDMA_Write",
        Mode::Send => "Send",
        Mode::Read => "RDMA_Read",
    };
    println!("{}", stats::RULE);
    println!(
        "                    {op} {} Test",
        if opts.lat { "Latency" } else { "BW" }
    );
    println!(
        " Provider: soft (RoCEv2 over UDP)   Transport: RC   MTU: {mtu}   TX depth: {TX_DEPTH}"
    );
    if opts.recovery.is_some() || opts.impair.is_some() || recovery == Recovery::Selective {
        println!(
            " Recovery: {:?}   Impairment: {}",
            recovery,
            opts.impair
                .map(|i| i.to_string())
                .unwrap_or_else(|| "none".into())
        );
    }
    println!(
        " local  address: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} GID {} UDP {}",
        ep.qp.qp_num(),
        ep.psn,
        ep.mr.rkey(),
        ep.mr.addr(),
        ep.device.local_addr().ip(),
        ep.device.local_addr().port()
    );
    println!(
        " remote address: QPN {:#08x} PSN {:#08x} RKey {:#010x} VAddr {:#018x} GID {} UDP {}",
        peer.qpn, peer.psn, peer.rkey, peer.va, peer.gid, peer.udp_port
    );
    println!("{}", stats::RULE);
}

/// One size's result.
#[derive(Debug, Clone, Copy)]
pub enum SizeResult {
    /// Bandwidth test.
    Bw(BwResult),
    /// Latency test.
    Lat(LatResult),
}

/// Whether this end's QPs can use selective repeat (the soft provider's can; hardware QPs and
/// the device model speak go-back-N only).
fn selective_capable(choice: &DeviceChoice) -> bool {
    choice.provider == crate::verbs::ProviderKind::Soft
}

fn client(opts: &BenchOptions, mut ch: Channel, choice: &DeviceChoice) -> Result<Vec<SizeResult>> {
    let max_size = opts.sizes.iter().copied().max().unwrap_or(0).max(1);
    let slots = slots_for(opts, max_size);
    // No --recovery: the server chooses (its own --recovery, else oob::NEGOTIATED_RECOVERY) —
    // unless this end's device speaks go-back-N only (the model, a vfio function).
    let asked = opts.recovery.map_or(
        if selective_capable(choice) {
            RECOVERY_NEGOTIATE
        } else {
            recovery_code(Recovery::GoBackN)
        },
        recovery_code,
    );
    ch.send_hello(&Hello {
        mode: opts.mode.code(),
        lat: opts.lat,
        verify: opts.verify,
        max_size,
        slots,
        recovery: asked,
    })?;
    let ep = Endpoint::open(choice, (max_size * u64::from(slots)) as usize)?;
    ch.send_qp_info(&ep.info())?;
    let peer = ch.recv_qp_info()?;
    let recovery = negotiate(peer.recovery, opts.recovery)?;
    ep.qp.set_recovery(recovery)?;
    let mtu = common_mtu(ep.info().mtu, peer.mtu, opts.mtu)?;
    ep.connect(&peer, mtu)?;
    ch.sync(0)?;
    if !opts.quiet {
        header_line(opts, &ep, &peer, mtu.bytes(), recovery);
        println!(
            "{}",
            if opts.lat {
                stats::lat_header()
            } else {
                stats::bw_header(opts.report_gbits)
            }
        );
    }
    let mut total_verified = 0u64;
    let mut results = Vec::new();
    for &size in &opts.sizes {
        let iters = if opts.duration.is_some() {
            0
        } else {
            opts.iters
        };
        ch.send_start(&Start { size, iters })?;
        let mut split_line = None;
        let (count, result, verified) = if opts.lat {
            let (count, mut samples, verified) = client_lat(opts, &ep, &peer, size)?;
            (
                count,
                SizeResult::Lat(LatResult::from_samples(size, &mut samples)),
                verified,
            )
        } else {
            let mut split = choice
                .impair_switch
                .clone()
                .map(crate::bench::loss_split::LossSplit::new);
            let (posted, completed, verified) =
                client_bw(opts, &ep, &peer, (size, max_size), slots, split.as_mut())?;
            split_line = split.map(|mut s| {
                s.finish(completed.last().copied().unwrap_or_default())
                    .line(opts.report_gbits)
            });
            (
                completed.len() as u64,
                SizeResult::Bw(BwResult::from_times(size, &posted, &completed)),
                verified,
            )
        };
        let row = match &result {
            SizeResult::Bw(r) => stats::bw_row(r, opts.report_gbits),
            SizeResult::Lat(r) => stats::lat_row(r),
        };
        results.push(result);
        ch.send_report(&Report {
            status: 0,
            value: count,
            message: String::new(),
        })?;
        let r = ch.recv_report()?;
        if r.status != 0 {
            return Err(Error::Bench(format!(
                "the server at {} reports: {}",
                ch.peer(),
                r.message
            )));
        }
        total_verified += verified + r.value;
        if !opts.quiet {
            println!("{row}");
            if let Some(l) = split_line {
                println!("{l}");
            }
        }
    }
    if !opts.quiet {
        println!("{}", stats::RULE);
    }
    tracing::info!(qp = ?ep.qp.counters(), device = ?ep.device.counters(), "client counters");
    if opts.counters {
        print_counters("client", &ep);
    }
    if opts.verify {
        println!(" Verified {total_verified} bytes against the pattern: all correct");
    }
    Ok(results)
}

fn serve(opts: &BenchOptions, mut ch: Channel, choice: &DeviceChoice) -> Result<()> {
    let hello = ch.recv_hello()?;
    let mode = Mode::from_code(hello.mode)
        .ok_or_else(|| Error::Bench(format!("client asked for unknown test {}", hello.mode)))?;
    if mode != opts.mode || hello.lat != opts.lat {
        let msg = format!(
            "client runs {mode:?}{} but this server runs {:?}{}; start both with the same test",
            if hello.lat { " --lat" } else { "" },
            opts.mode,
            if opts.lat { " --lat" } else { "" }
        );
        return Err(Error::Bench(msg));
    }
    let buf_len = hello
        .max_size
        .checked_mul(u64::from(hello.slots))
        .filter(|&l| l <= 2 * BUFFER_BUDGET)
        .ok_or_else(|| {
            Error::Bench(format!(
                "client asked for {} slots of {} bytes: more than this server allows",
                hello.slots, hello.max_size
            ))
        })?;
    // A device that speaks go-back-N only (the model, a vfio function) answers with it.
    let own = opts
        .recovery
        .or((!selective_capable(choice)).then_some(Recovery::GoBackN));
    let recovery = negotiate(hello.recovery, own)?;
    let ep = Endpoint::open(choice, buf_len as usize)?;
    ep.qp.set_recovery(recovery)?;
    if mode == Mode::Read && hello.verify {
        ep.mr.with(|b| {
            for (s, chunk) in b.chunks_mut(hello.max_size as usize).enumerate() {
                pattern::fill(chunk, s as u64);
            }
        });
    }
    let peer = ch.recv_qp_info()?;
    ch.send_qp_info(&QpInfo {
        recovery: recovery_code(recovery),
        ..ep.info()
    })?;
    let mtu = common_mtu(ep.info().mtu, peer.mtu, opts.mtu)?;
    ep.connect(&peer, mtu)?;
    let mut recvs = RecvState::default();
    if mode == Mode::Send && !hello.lat {
        // Receives posted before the client may send: a SEND that finds none costs an RNR
        // wait and, in selective repeat, a resend of every packet behind it.
        post_initial_recvs(&ep, &mut recvs, hello.max_size, hello.slots, hello.verify)?;
    }
    ch.sync(0)?;
    let timeout = opts.timeout;
    loop {
        let start = match ch.recv_start() {
            Ok(s) => s,
            Err(Error::Exchange { reason, .. }) if reason.contains("closed the connection") => {
                if opts.counters {
                    print_counters("server", &ep);
                }
                break;
            }
            Err(e) => return Err(e),
        };
        let size = start.size;
        let outcome: Result<u64> = if hello.lat {
            server_lat(&ep, &peer, mode, size, start.iters, hello.verify, timeout)
                .and_then(|v| ch.recv_report().map(|_| v))
        } else if mode == Mode::Send {
            server_send_bw(
                &ep,
                &mut recvs,
                size,
                hello.max_size,
                hello.slots,
                hello.verify,
                &mut ch,
                timeout,
            )
        } else {
            // WRITE/READ bandwidth: the server is passive; the client's report carries the count.
            ch.recv_report().and_then(|done| {
                if mode == Mode::Write && hello.verify {
                    verify_written(&ep, size, hello.max_size, hello.slots, done.value)
                } else {
                    Ok(0)
                }
            })
        };
        match outcome {
            Ok(v) => ch.send_report(&Report {
                status: 0,
                value: v,
                message: String::new(),
            })?,
            Err(e) => {
                let _ = ch.send_report(&Report {
                    status: 1,
                    value: 0,
                    message: e.to_string(),
                });
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Prints the `--counters` lines of one end.
fn print_counters(role: &str, ep: &Endpoint) {
    // Device first: every packet the device counts was produced by the QP before, so the QP's
    // counts read afterwards are never behind the device's.
    let device = ep.device.counters();
    let qp = ep.qp.counters();
    println!(
        "{}",
        crate::bench::counters::qp_line(role, ep.qp.qp_num(), &qp)
    );
    println!("{}", crate::bench::counters::device_line(role, &device));
}

/// Checks the server buffer after a WRITE run of `count` messages: slot `s` (at `s · stride`)
/// holds the last message `i < count` with `i % slots == s`.
fn verify_written(ep: &Endpoint, size: u64, stride: u64, slots: u32, count: u64) -> Result<u64> {
    let slots = u64::from(slots);
    let mut verified = 0;
    for s in 0..slots.min(count) {
        let last = s + slots * ((count - 1 - s) / slots);
        let off = (s * stride) as usize;
        let mismatch = ep
            .mr
            .with(|b| pattern::first_mismatch(&b[off..off + size as usize], last));
        if let Some(at) = mismatch {
            return Err(Error::Bench(format!("RDMA WRITE data mismatch: message {last} ({size} bytes), byte {at} differs from the pattern")));
        }
        verified += size;
    }
    Ok(verified)
}

/// Runs one size of a bandwidth test; returns each message's post and completion times and
/// the bytes verified.
///
/// Both buffers are `slots` slots of `stride` (the largest size) bytes; message `i` uses slot
/// `i % slots` on both ends. `split` (`--compare-loss-free`): switched at each period's start
/// and given each completed message's bytes.
fn client_bw(
    opts: &BenchOptions,
    ep: &Endpoint,
    peer: &QpInfo,
    (size, stride): (u64, u64),
    slots: u32,
    mut split: Option<&mut crate::bench::loss_split::LossSplit>,
) -> Result<(Vec<Duration>, Vec<Duration>, u64)> {
    // With --verify a slot is not reused while a message on it is in flight; otherwise the
    // messages share the cycle buffer, as perftest's do.
    let depth = u64::from(if opts.verify {
        TX_DEPTH.min(slots)
    } else {
        TX_DEPTH
    });
    let iters = opts.iters;
    let deadline = opts.duration;
    let mut times = Vec::with_capacity(iters.min(1 << 24) as usize);
    let mut post_times = Vec::with_capacity(iters.min(1 << 24) as usize);
    let mut posted = 0u64;
    let mut completed = 0u64;
    let mut verified = 0u64;
    let slot_addr = |i: u64, base: u64| base + (i % u64::from(slots)) * stride;
    let start = Instant::now();
    let mut stop = false;
    let mut tracer = opts
        .report_interval
        .map(|i| crate::bench::trace::Tracer::new(start, i));
    loop {
        if let Some(t) = tracer.as_mut() {
            if let Some(line) = t.sample(completed * size, || ep.qp.counters()) {
                println!("{line}");
            }
        }
        if let Some(s) = split.as_deref_mut() {
            s.tick(start.elapsed());
        }
        if let Some(d) = deadline {
            stop = stop || start.elapsed() >= d;
        }
        let target = if deadline.is_some() {
            if stop {
                posted
            } else {
                u64::MAX
            }
        } else {
            iters
        };
        let mut batch = Vec::new();
        while posted < target && posted - completed < depth && batch.len() < 32 {
            let local = slot_addr(posted, ep.mr.addr());
            if opts.verify {
                let off = (local - ep.mr.addr()) as usize;
                ep.mr.with(|b| {
                    let slot = &mut b[off..off + size as usize];
                    if opts.mode == Mode::Read {
                        // Cleared, so a READ that places nothing cannot pass the check.
                        slot.fill(0);
                    } else {
                        pattern::fill(slot, posted);
                    }
                });
            }
            let remote = slot_addr(posted, peer.va);
            let opcode = match opts.mode {
                Mode::Write => WrOpcode::RdmaWrite {
                    remote_addr: remote,
                    rkey: peer.rkey,
                },
                Mode::Send => WrOpcode::Send,
                Mode::Read => WrOpcode::RdmaRead {
                    remote_addr: remote,
                    rkey: peer.rkey,
                },
            };
            batch.push(SendWr::new(
                posted,
                opcode,
                vec![Sge {
                    addr: local,
                    length: size as u32,
                    lkey: ep.mr.lkey(),
                }],
            ));
            posted += 1;
        }
        if !batch.is_empty() {
            let t = start.elapsed();
            post_times.extend(std::iter::repeat(t).take(batch.len()));
            ep.qp.post_send(&batch)?;
        }
        if completed == posted && (posted >= target) {
            break;
        }
        let wc = ep.next_completion(opts.timeout)?;
        if opts.verify && opts.mode == Mode::Read {
            let i = wc.wr_id;
            let src_slot = i % u64::from(slots);
            let off = (src_slot * stride) as usize;
            if let Some(at) = ep
                .mr
                .with(|b| pattern::first_mismatch(&b[off..off + size as usize], src_slot))
            {
                return Err(Error::Bench(format!("RDMA READ data mismatch: message {i} ({size} bytes), byte {at} differs from the pattern")));
            }
            verified += size;
        }
        completed += 1;
        if let Some(s) = split.as_deref_mut() {
            s.completed(size);
        }
        times.push(start.elapsed());
    }
    Ok((post_times, times, verified))
}

/// Receives posted by the server of a SEND bandwidth test; they persist across sizes (each
/// is a whole slot of the largest size, so a leftover receive fits any later message).
#[derive(Debug, Default)]
struct RecvState {
    posted: u64,
    received: u64,
}

/// Receive `i` of a SEND bandwidth test: slot `i % slots` of `max_size` bytes.
fn recv_wr(ep: &Endpoint, i: u64, max_size: u64, slots: u64) -> RecvWr {
    RecvWr {
        wr_id: i,
        sg_list: vec![Sge {
            addr: ep.mr.addr() + (i % slots) * max_size,
            length: max_size as u32,
            lkey: ep.mr.lkey(),
        }],
    }
}

/// Posts the receives a SEND bandwidth server keeps (up to its receive depth), once.
fn post_initial_recvs(
    ep: &Endpoint,
    st: &mut RecvState,
    max_size: u64,
    slots: u32,
    verify: bool,
) -> Result<()> {
    // With --verify a slot is not reused while a message on it is in flight; otherwise the
    // messages share the cycle buffer, as perftest's do.
    let depth = u64::from(if verify {
        RX_DEPTH.min(slots.max(1))
    } else {
        RX_DEPTH
    });
    let slots = u64::from(slots);
    let initial: Vec<RecvWr> = (st.posted..depth)
        .map(|i| recv_wr(ep, i, max_size, slots))
        .collect();
    if !initial.is_empty() {
        ep.qp.post_recv(&initial)?;
        st.posted = depth;
    }
    Ok(())
}

/// How long the SEND bandwidth server's thread sleeps when it finds no receive completion:
/// it only counts completions and reposts receives, with [`RX_DEPTH`] receives of slack.
const SERVER_IDLE_SLEEP: Duration = Duration::from_micros(50);

/// The SEND bandwidth server's next receive completion: what the device already completed,
/// without driving it from this thread ([`CompletionQueue::poll_ready`]); the device's
/// progress thread receives, as it does for the passive WRITE and READ servers, and the
/// server's thread sleeps [`SERVER_IDLE_SLEEP`] when it finds nothing.
///
/// Until 2026-11-27 this loop received itself (`poll_one`) and spun (`yield_now`) between
/// completions. On a host with more runnable threads than CPUs the scheduler took its CPU
/// away for a tick (4 ms at HZ=250) at a time, mostly while it held the device's receive
/// (`recvmmsg`, placement, copies), and the progress thread could not step in: nothing was
/// received, placed or acknowledged meanwhile. A 4-s 64 KiB SEND run on the shared 2-core VM
/// had 51–632 gaps of 2–6 ms between request packets (0.2–2.2 s in all; WRITE, whose server
/// is passive: 6–10, 22–33 ms), each longer one a 4-ms retransmit timeout of the requester
/// (docs/reliability.md, "SEND: the server thread that receives loses its CPU").
fn recv_completion(cq: &CompletionQueue) -> Option<WorkCompletion> {
    cq.poll_ready()
}

#[allow(clippy::too_many_arguments)]
fn server_send_bw(
    ep: &Endpoint,
    st: &mut RecvState,
    size: u64,
    max_size: u64,
    slots: u32,
    verify: bool,
    ch: &mut Channel,
    timeout: Duration,
) -> Result<u64> {
    post_initial_recvs(ep, st, max_size, slots, verify)?;
    let slots = u64::from(slots);
    let recv = |i: u64| recv_wr(ep, i, max_size, slots);
    let expected = AtomicU64::new(u64::MAX);
    let base = st.received;
    let (worker_result, done) = std::thread::scope(|scope| {
        let expected = &expected;
        let st = &mut *st;
        let worker = scope.spawn(move || -> Result<u64> {
            let mut verified = 0u64;
            let mut idle = Instant::now();
            while st.received - base < expected.load(Ordering::Acquire) {
                let Some(wc) = recv_completion(&ep.cq) else {
                    if idle.elapsed() > timeout {
                        return Err(Error::Bench(format!("server: no SEND arrived within {timeout:?} (message {}); counters {:?}", st.received - base, ep.device.counters())));
                    }
                    std::thread::sleep(SERVER_IDLE_SLEEP);
                    continue;
                };
                idle = Instant::now();
                let i = st.received - base;
                if wc.status != crate::verbs::WcStatus::Success {
                    return Err(Error::Bench(format!("server: receive of message {i} failed with {:?}", wc.status)));
                }
                if wc.wr_id != st.received {
                    return Err(Error::Bench(format!("server: receive {} completed out of order (expected {})", wc.wr_id, st.received)));
                }
                if u64::from(wc.byte_len) != size {
                    return Err(Error::Bench(format!("server: SEND {i} carried {} bytes, expected {size}", wc.byte_len)));
                }
                if verify {
                    let off = ((st.received % slots) * max_size) as usize;
                    if let Some(at) = ep.mr.with(|b| pattern::first_mismatch(&b[off..off + size as usize], i)) {
                        return Err(Error::Bench(format!("SEND data mismatch: message {i} ({size} bytes), byte {at} differs from the pattern")));
                    }
                    verified += size;
                }
                st.received += 1;
                ep.qp.post_recv(&[recv(st.posted)])?;
                st.posted += 1;
            }
            Ok(verified)
        });
        let done = ch.recv_report();
        expected.store(
            done.as_ref().map(|r| r.value).unwrap_or(0),
            Ordering::Release,
        );
        let w = worker
            .join()
            .unwrap_or_else(|_| Err(Error::Bench("server receive thread panicked".into())));
        (w, done)
    });
    done?;
    worker_result
}

fn client_lat(
    opts: &BenchOptions,
    ep: &Endpoint,
    peer: &QpInfo,
    size: u64,
) -> Result<(u64, Vec<f64>, u64)> {
    let mut samples = Vec::with_capacity(opts.iters as usize);
    let mut verified = 0;
    let n = size as usize;
    let src = Sge {
        addr: ep.mr.addr(),
        length: size as u32,
        lkey: ep.mr.lkey(),
    };
    let dst = Sge {
        addr: ep.mr.addr() + size,
        length: size as u32,
        lkey: ep.mr.lkey(),
    };
    let peer_dst = peer.va + size;
    // Work requests built once and renumbered: no allocation per message.
    let mut write = SendWr::new(
        0,
        WrOpcode::RdmaWrite {
            remote_addr: peer_dst,
            rkey: peer.rkey,
        },
        vec![src],
    );
    let mut send = SendWr::new(0, WrOpcode::Send, vec![src]);
    let mut recv = RecvWr {
        wr_id: 0,
        sg_list: vec![dst],
    };
    let mut read_after = None;
    for i in 0..opts.iters {
        match opts.mode {
            Mode::Write => {
                ep.mr.with(|b| fill_marked(&mut b[..n], i, opts.verify));
                let t = Instant::now();
                lat_write(ep, &mut write, i);
                ep.qp.post_send(std::slice::from_ref(&write))?;
                wait_marker(ep, &mut read_after, size, i, opts.timeout)?;
                samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
                if opts.verify {
                    check_marked(ep, size, i, "RDMA WRITE")?;
                    verified += size;
                }
            }
            Mode::Send => {
                recv.wr_id = i;
                ep.qp.post_recv(std::slice::from_ref(&recv))?;
                if opts.verify {
                    ep.mr.with(|b| pattern::fill(&mut b[..n], i));
                }
                let t = Instant::now();
                send.wr_id = i;
                ep.qp.post_send(std::slice::from_ref(&send))?;
                let (mut got_recv, mut got_send) = (false, false);
                while !(got_recv && got_send) {
                    match ep.next_completion(opts.timeout)?.opcode {
                        crate::verbs::WcOpcode::Recv => got_recv = true,
                        _ => got_send = true,
                    }
                }
                samples.push(t.elapsed().as_secs_f64() * 1e6 / 2.0);
                if opts.verify {
                    if let Some(at) = ep
                        .mr
                        .with(|b| pattern::first_mismatch(&b[n..2 * n], reply_iter(i)))
                    {
                        return Err(Error::Bench(format!(
                            "SEND reply {i} ({size} bytes): byte {at} differs from the pattern"
                        )));
                    }
                    verified += size;
                }
            }
            Mode::Read => {
                let t = Instant::now();
                ep.qp.post_send(&[SendWr::new(
                    i,
                    WrOpcode::RdmaRead {
                        remote_addr: peer.va,
                        rkey: peer.rkey,
                    },
                    vec![dst],
                )])?;
                ep.next_completion(opts.timeout)?;
                samples.push(t.elapsed().as_secs_f64() * 1e6);
                if opts.verify {
                    if let Some(at) = ep.mr.with(|b| pattern::first_mismatch(&b[n..2 * n], 0)) {
                        return Err(Error::Bench(format!(
                            "RDMA READ {i} ({size} bytes): byte {at} differs from the pattern"
                        )));
                    }
                    ep.mr.with(|b| b[n..2 * n].fill(0));
                    verified += size;
                }
            }
        }
    }
    Ok((opts.iters, samples, verified))
}

/// The pattern number of the server's reply to SEND ping `i`.
fn reply_iter(i: u64) -> u64 {
    i | 1 << 40
}

fn server_lat(
    ep: &Endpoint,
    peer: &QpInfo,
    mode: Mode,
    size: u64,
    iters: u64,
    verify: bool,
    timeout: Duration,
) -> Result<u64> {
    let n = size as usize;
    let src = Sge {
        addr: ep.mr.addr(),
        length: size as u32,
        lkey: ep.mr.lkey(),
    };
    let dst = Sge {
        addr: ep.mr.addr() + size,
        length: size as u32,
        lkey: ep.mr.lkey(),
    };
    let peer_dst = peer.va + size;
    let mut verified = 0;
    // Work requests built once and renumbered: no allocation per message.
    let mut recv = RecvWr {
        wr_id: 0,
        sg_list: vec![dst],
    };
    match mode {
        Mode::Write => {
            let mut write = SendWr::new(
                0,
                WrOpcode::RdmaWrite {
                    remote_addr: peer_dst,
                    rkey: peer.rkey,
                },
                vec![src],
            );
            let mut read_after = None;
            for i in 0..iters {
                wait_marker(ep, &mut read_after, size, i, timeout)?;
                if verify {
                    check_marked(ep, size, i, "RDMA WRITE")?;
                    verified += size;
                }
                ep.mr.with(|b| fill_marked(&mut b[..n], i, verify));
                lat_write(ep, &mut write, i);
                ep.qp.post_send(std::slice::from_ref(&write))?;
            }
        }
        Mode::Send => {
            let mut send = SendWr::new(0, WrOpcode::Send, vec![src]);
            ep.qp.post_recv(std::slice::from_ref(&recv))?;
            for i in 0..iters {
                while ep.next_completion(timeout)?.opcode != crate::verbs::WcOpcode::Recv {}
                if verify {
                    if let Some(at) = ep.mr.with(|b| pattern::first_mismatch(&b[n..2 * n], i)) {
                        return Err(Error::Bench(format!(
                            "SEND {i} ({size} bytes): byte {at} differs from the pattern"
                        )));
                    }
                    verified += size;
                    ep.mr.with(|b| pattern::fill(&mut b[..n], reply_iter(i)));
                }
                if i + 1 < iters {
                    recv.wr_id = i + 1;
                    ep.qp.post_recv(std::slice::from_ref(&recv))?;
                }
                send.wr_id = i;
                ep.qp.post_send(std::slice::from_ref(&send))?;
            }
        }
        Mode::Read => {}
    }
    Ok(verified)
}

/// Makes `wr` write-latency WRITE number `i`: unsignaled. A hardware-style provider (vfio,
/// model) frees send-queue entries only when a completion reports them, so every 64th is
/// signaled there (and reaped by [`wait_marker`]); the soft provider frees them on the ACK.
fn lat_write(ep: &Endpoint, wr: &mut SendWr, i: u64) {
    wr.wr_id = i;
    wr.signaled = ep.device.provider() != "soft" && i % 64 == 63;
}

/// The arrival marker in the last byte of message `i` of a write ping-pong: never 0 and never
/// equal for consecutive messages.
fn marker(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

fn fill_marked(buf: &mut [u8], i: u64, with_pattern: bool) {
    if with_pattern {
        pattern::fill(buf, i);
    }
    if let Some(last) = buf.last_mut() {
        *last = marker(i);
    }
}

/// Checks the received message `i` in slot 1 (all but its marker byte).
fn check_marked(ep: &Endpoint, size: u64, i: u64, what: &str) -> Result<()> {
    let n = size as usize;
    if let Some(at) = ep.mr.with(|b| pattern::first_mismatch(&b[n..2 * n - 1], i)) {
        return Err(Error::Bench(format!(
            "{what} message {i} ({size} bytes): byte {at} differs from the pattern"
        )));
    }
    Ok(())
}

/// Waits until the marker of message `i` arrives in the last byte of slot 1: busy-polls
/// memory and the device for the end's spin budget ([`crate::bench::spin`]), then blocks on the
/// device until a packet comes. Without a spin (one CPU, or spins that keep missing) that is
/// one blocking receive per packet, as a UDP ping-pong's is, and the clock is read only when
/// that first wait came back without the marker (the timeout counts from then). The soft
/// provider changes a region only in a receive burst: the region (its lock) is read again
/// only once another burst has ended since `read_after` (the count of
/// [`Device::rx_bursts`](crate::verbs::Device) before the last read, kept across messages by
/// the caller; 0 with the vfio provider: read at every look), as a `ibv_write_lat` loop reads
/// its buffer's last byte only when it can have changed.
fn wait_marker(
    ep: &Endpoint,
    read_after: &mut Option<u64>,
    size: u64,
    i: u64,
    timeout: Duration,
) -> Result<()> {
    let want = marker(i);
    let spin = ep.spin.budget();
    let mut start: Option<Instant> = None;
    let mut blocked = false;
    let mut b = [0u8; 1];
    loop {
        // Completions of our own unsignaled writes (none are produced) and errors.
        if let Some(wc) = ep.cq.poll_ready() {
            if wc.status != crate::verbs::WcStatus::Success {
                return Err(Error::Bench(format!(
                    "write latency: completion error {:?} on QP {:#08x}",
                    wc.status,
                    ep.qp.qp_num()
                )));
            }
        }
        let bursts = ep.device.rx_bursts();
        if bursts == 0 || *read_after != Some(bursts) {
            *read_after = Some(bursts);
            ep.mr.read(2 * size as usize - 1, &mut b)?;
            if b[0] == want {
                if !spin.is_zero() && !blocked && start.is_some() {
                    ep.spin.record(true);
                }
                return Ok(());
            }
        }
        let elapsed = match start {
            Some(s) => s.elapsed(),
            // No spin: block at once; the clock starts after the first wait.
            None if spin.is_zero() && !blocked => Duration::ZERO,
            None => {
                start = Some(Instant::now());
                Duration::ZERO
            }
        };
        if elapsed < spin {
            ep.device.progress(None);
            continue;
        }
        if !spin.is_zero() && !blocked {
            ep.spin.record(false);
        }
        blocked = true;
        let left = timeout.saturating_sub(elapsed);
        if left.is_zero() {
            return Err(Error::Bench(format!(
                "write latency: message {i} did not arrive within {timeout:?}; device counters {:?}",
                ep.device.counters()
            )));
        }
        // Receive on this thread, blocking on the device's socket until a packet comes.
        ep.device.progress(Some(left.min(Duration::from_millis(1))));
    }
}

#[cfg(test)]
mod test {
    use super::recv_completion;
    use crate::soft::test_pair::{connected, open, soft};
    use crate::verbs::{Mtu, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
    use std::time::{Duration, Instant};

    /// The SEND bandwidth server's completion loop never receives on the device itself: the
    /// progress thread does, so a server thread that loses its CPU holds no receive (see
    /// `recv_completion`). With `poll_one` the loop drove the device.
    #[test]
    fn send_server_loop_leaves_the_receive_to_the_progress_thread() {
        let (a, b) = (open(249), open(250));
        let (ea, eb) = connected(&a, &b, 4096, Mtu::Mtu1024, 12);
        let sge = |e: &crate::soft::test_pair::End| Sge {
            addr: e.mr.addr(),
            length: 3000,
            lkey: e.mr.lkey(),
        };
        // Polled before anything arrives too: `poll_one` on an empty CQ drives the device.
        assert!(recv_completion(&eb.cq).is_none());
        eb.qp
            .post_recv(&[RecvWr {
                wr_id: 5,
                sg_list: vec![sge(&eb)],
            }])
            .unwrap();
        ea.qp
            .post_send(&[SendWr::new(1, WrOpcode::Send, vec![sge(&ea)])])
            .unwrap();
        let limit = Instant::now() + Duration::from_secs(10);
        let wc = loop {
            if let Some(wc) = recv_completion(&eb.cq) {
                break wc;
            }
            assert!(Instant::now() < limit, "the SEND never completed");
            std::thread::yield_now();
        };
        assert_eq!(
            (wc.wr_id, wc.status, wc.byte_len),
            (5, WcStatus::Success, 3000)
        );
        assert!(
            !soft(&b).app_ever_drove(),
            "the server's completion loop drove the device"
        );
    }
}
