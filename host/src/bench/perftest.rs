//! `rdmesh bench --perftest-compat`: client or server of perftest's `ib_write_bw`,
//! `ib_send_bw`, `ib_read_bw` and `ib_write_lat` (RC, one QP, one message size, iterations),
//! speaking their out-of-band exchange ([`crate::bench::perftest_oob`]).
//!
//! The order of exchanges each tool makes (perftest v4.5-0.17 `src/write_bw.c`, `send_bw.c`,
//! `read_bw.c`, `write_lat.c`; every step is one symmetric exchange):
//!
//! | tool | before data | after data |
//! |---|---|---|
//! | ib_write_bw, ib_read_bw | version, sys data, MTU, keys, *connect*, keys, keys | keys, bw report, close |
//! | ib_send_bw | version, sys data, MTU, keys, *connect*, keys, keys, *server posts receives*, keys | close |
//! | ib_write_lat | version, sys data, MTU, keys, keys, *connect*, keys, keys | nothing |
//!
//! In the bandwidth tests only the client moves data (WRITE to, or READ from, the server's
//! advertised buffer; SENDs into the server's receives). In ib_write_lat both sides WRITE
//! `size` bytes into the peer's advertised buffer in turn, the **server first**, and detect an
//! arrival by the last byte of the message equalling the message number modulo 256.
//!
//! Checks on this end: the peer's bandwidth report names the same size and iterations (WRITE
//! and READ servers); every SEND arrives with the expected length (SEND server); WRITE data
//! landed in the advertised buffer (WRITE server); READ data landed locally (READ client);
//! every latency message arrives in order. perftest fills its buffers with random bytes, so
//! contents cannot be compared with a pattern.

use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::bench::endpoint::{DeviceChoice, Endpoint, RX_DEPTH, TX_DEPTH};
use crate::bench::oob::QpInfo;
use crate::bench::perftest_oob::{mtu_bytes, mtu_enum, BwReport, KeyMsg, PerftestChannel};
use crate::bench::run::{route_source, BenchOptions, Mode};
use crate::bench::stats::{self, BwResult, LatResult};
use crate::capture::Capture;
use crate::error::{Error, Result};
use crate::verbs::{Mtu, RecvWr, SendWr, Sge, WcOpcode, WrOpcode, ROCE_V2_UDP_PORT};

/// The cycle buffer this end announces (perftest's default: the page size).
const CYCLE_BUFFER: u32 = 4096;
/// The cache line size this end announces.
const CACHE_LINE: u32 = 64;
/// RDMA READs this end accepts outstanding as responder (announced as `out_reads`).
const OUT_READS: u16 = 16;
/// How long the device lives on after the test, answering the peer's last retransmissions.
const LINGER: Duration = Duration::from_millis(300);

/// Connects to `addr`, retrying while the peer refuses (it may not listen yet), up to `timeout`.
///
/// Errors: [`Error::Io`] naming `addr` and `what` when no connection is made in time.
pub fn connect_retrying(
    addr: std::net::SocketAddr,
    timeout: Duration,
    what: &str,
) -> Result<TcpStream> {
    let start = Instant::now();
    loop {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => return Ok(s),
            Err(e)
                if e.kind() == std::io::ErrorKind::ConnectionRefused
                    && start.elapsed() + Duration::from_millis(500) < timeout =>
            {
                std::thread::sleep(Duration::from_millis(500));
            }
            Err(e) => {
                return Err(Error::io(
                    format!("connecting to the {what} at {addr} (is it running? right -p port?)"),
                    e,
                ))
            }
        }
    }
}

fn tool(opts: &BenchOptions) -> &'static str {
    match (opts.mode, opts.lat) {
        (Mode::Write, false) => "ib_write_bw",
        (Mode::Send, false) => "ib_send_bw",
        (Mode::Read, false) => "ib_read_bw",
        (Mode::Write, true) => "ib_write_lat",
        (Mode::Send, true) => "ib_send_lat",
        (Mode::Read, true) => "ib_read_lat",
    }
}

/// Runs one perftest-compatible test as `opts` says (client with `opts.server`, else server).
///
/// Errors: options perftest compatibility does not cover (several sizes, a duration,
/// loopback, send/read latency), exchange and device errors, a completion error, and failed
/// checks, each naming the peer and the step.
pub fn run(opts: &BenchOptions, capture: Option<std::sync::Arc<Capture>>) -> Result<()> {
    let name = tool(opts);
    if opts.lat && opts.mode != Mode::Write {
        return Err(Error::Config(format!(
            "--perftest-compat covers ib_write_bw, ib_send_bw, ib_read_bw and ib_write_lat; {name} is not implemented"
        )));
    }
    if opts.sizes.len() != 1 || opts.duration.is_some() || opts.loopback || opts.compare_udp {
        return Err(Error::Config(
            "--perftest-compat runs one size for -n iterations against a perftest peer: -a, -D, --loopback and --compare-udp do not apply".into(),
        ));
    }
    let size = opts.sizes[0];
    if size == 0 || size > u64::from(u32::MAX) {
        return Err(Error::Config(format!(
            "-s {size}: the size must be 1 byte .. 4 GiB"
        )));
    }
    let client = opts.server.is_some();
    let (stream, local) = match &opts.server {
        Some(host) => {
            let addr = (host.as_str(), opts.tcp_port)
                .to_socket_addrs()
                .map_err(|e| Error::io(format!("resolving {host}"), e))?
                .next()
                .ok_or_else(|| Error::Config(format!("{host} has no address")))?;
            let local = match opts.local_addr {
                Some(a) => a,
                None => route_source(addr.ip())?,
            };
            (
                connect_retrying(addr, opts.timeout, &format!("{name} server"))?,
                local,
            )
        }
        None => {
            let l = TcpListener::bind((Ipv4Addr::UNSPECIFIED, opts.tcp_port))
                .map_err(|e| Error::io(format!("listening on TCP port {}", opts.tcp_port), e))?;
            eprintln!(
                " Waiting for an {name} client on TCP port {} ...",
                opts.tcp_port
            );
            let (s, _) = l.accept().map_err(|e| Error::io("accepting a client", e))?;
            let local = match opts.local_addr {
                Some(a) => a,
                None => s
                    .local_addr()
                    .map_err(|e| Error::io("reading the accepted socket's address", e))?
                    .ip(),
            };
            (s, local)
        }
    };
    let mut ch = PerftestChannel::new(stream, client, opts.timeout)?;
    ch.exchange_versions()?;
    let (cycle, _cache_line) = ch.exchange_sys_data(CYCLE_BUFFER, CACHE_LINE)?;
    let slot = size.max(u64::from(cycle));
    let ep = Endpoint::open(
        &DeviceChoice {
            addr: local,
            udp_port: Some(opts.udp_port.unwrap_or(ROCE_V2_UDP_PORT)),
            capture,
            capture_received: true,
            raw_receive: opts.raw_rx,
            corrupt_tx_icrc: opts.corrupt_tx_icrc,
            impair: opts.impair,
            impair_switch: None,
            dcqcn: opts.dcqcn,
            provider: opts.provider.clone(),
        },
        (2 * slot + size) as usize,
    )?;
    let active = ep.device.info().active_mtu().bytes();
    let mine = opts.mtu.map_or(active, |m| m.min(active));
    let mtu_e = ch.exchange_mtu(mtu_enum(mine))?;
    let mtu = mtu_of(mtu_bytes(mtu_e));
    // ib_write_lat: the peer writes into the second slot; the bandwidth tests use the first.
    let vaddr = ep.mr.addr() + if opts.lat { slot } else { 0 };
    let my_key = KeyMsg {
        lid: 0,
        out_reads: OUT_READS,
        qpn: ep.qp.qp_num(),
        psn: ep.psn,
        rkey: ep.mr.rkey(),
        vaddr,
        gid: match ep.device.local_addr().ip() {
            IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            IpAddr::V6(v6) => v6,
        },
        srqn: 0,
    };
    let mut peer = ch.hand_shake(&my_key, "the key message")?;
    if opts.lat {
        peer = ch.hand_shake(&my_key, "the second key message")?;
    }
    if peer.addr().is_ipv4() != ep.device.local_addr().is_ipv4() {
        return Err(Error::Bench(format!(
            "the peer's GID {} and this end's {} are different IP versions (perftest: \"Found Incompatibility issue with GID types\")",
            peer.gid,
            ep.device.local_addr().ip()
        )));
    }
    let info = QpInfo {
        qpn: peer.qpn,
        psn: peer.psn,
        rkey: peer.rkey,
        va: peer.vaddr,
        len: size,
        gid: peer.addr(),
        udp_port: ROCE_V2_UDP_PORT,
        mtu: mtu.bytes(),
        // perftest peers speak IBTA go-back-N; nothing is negotiated.
        recovery: super::oob::RECOVERY_GO_BACK_N,
        // perftest's exchange carries no MAC: the kernel's, when it knows the peer.
        mac: crate::topo::neigh::peer_mac(peer.addr()),
    };
    let max_rd = peer.out_reads.clamp(1, OUT_READS) as u8;
    ep.connect_with(&info, mtu, max_rd)?;
    ch.hand_shake(&my_key, "the barrier after connecting")?;
    ch.hand_shake(&my_key, "the barrier after RTR")?;
    print_header(name, &ep, &my_key, &peer, mtu.bytes(), &ch);
    let result = match (opts.lat, opts.mode, client) {
        (true, _, _) => write_lat(opts, &ep, &peer, size, !client),
        (false, Mode::Send, false) => {
            let r = send_server(opts, &ep, &mut ch, &my_key, size)?;
            ch.close(&my_key)?;
            Ok(r)
        }
        (false, Mode::Send, true) => {
            ch.hand_shake(&my_key, "the barrier before the SENDs")?;
            let r = bw_client(opts, &ep, &peer, size)?;
            ch.close(&my_key)?;
            Ok(r)
        }
        (false, _, true) => {
            let r = bw_client(opts, &ep, &peer, size)?;
            ch.hand_shake(&my_key, "the barrier after the data")?;
            let mine = match &r {
                Outcome::Bw(b) => BwReport {
                    size,
                    iters: b.iters,
                    bw_peak: b.peak_bps / 1_048_576.0,
                    bw_avg: b.avg_bps / 1_048_576.0,
                    msg_rate_avg: b.msg_rate / 1e6,
                },
                _ => unreachable!("bw_client returns a bandwidth"),
            };
            ch.exchange_bw_report(&mine)?;
            ch.close(&my_key)?;
            Ok(r)
        }
        (false, _, false) => {
            ch.hand_shake(&my_key, "the client's end-of-data barrier")?;
            let theirs = ch.exchange_bw_report(&BwReport {
                size,
                iters: opts.iters,
                bw_peak: 0.0,
                bw_avg: 0.0,
                msg_rate_avg: 0.0,
            })?;
            ch.close(&my_key)?;
            passive_server_check(opts, &ep, size, &theirs)
        }
    };
    std::thread::sleep(LINGER);
    tracing::info!(qp = ?ep.qp.counters(), device = ?ep.device.counters(), "perftest-compat counters");
    let outcome = result?;
    match outcome {
        Outcome::Bw(r) => println!(
            "{}\n{}",
            stats::bw_header(opts.report_gbits),
            stats::bw_row(&r, opts.report_gbits)
        ),
        Outcome::Lat(r) => println!("{}\n{}", stats::lat_header(), stats::lat_row(&r)),
        Outcome::Remote(r) => println!(
            "{}\n {:<10} {:<14} {:<18.2} {:<21.2} {:<14.6}   (the client's report)",
            stats::bw_header(false),
            r.size,
            r.iters,
            r.bw_peak,
            r.bw_avg,
            r.msg_rate_avg
        ),
    }
    println!("{}", stats::RULE);
    let c = ep.device.counters();
    println!(
        " perftest-compat {name} {} done: {} iterations of {size} bytes; device counters: rx {} tx {} icrc_errors {} corrupted_tx {}",
        if client { "client" } else { "server" },
        opts.iters,
        c.rx_packets,
        c.tx_packets,
        c.icrc_errors,
        c.tx_icrc_corrupted
    );
    Ok(())
}

fn mtu_of(bytes: u32) -> Mtu {
    match bytes {
        4096 => Mtu::Mtu4096,
        2048 => Mtu::Mtu2048,
        1024 => Mtu::Mtu1024,
        512 => Mtu::Mtu512,
        _ => Mtu::Mtu256,
    }
}

/// What one end measured.
enum Outcome {
    /// This end's bandwidth.
    Bw(BwResult),
    /// This end's latency.
    Lat(LatResult),
    /// The client's report, printed by a WRITE/READ server.
    Remote(BwReport),
}

fn print_header(
    name: &str,
    ep: &Endpoint,
    me: &KeyMsg,
    peer: &KeyMsg,
    mtu: u32,
    ch: &PerftestChannel,
) {
    println!("{}", stats::RULE);
    println!(
        "                    {name} compatible test (rdmesh soft RoCEv2, peer perftest {})",
        ch.peer_version()
    );
    println!(
        " Transport: RC   MTU: {mtu}   TX depth: {TX_DEPTH}   device: {}",
        ep.device.name()
    );
    for (side, k) in [("local", me), ("remote", peer)] {
        println!(
            " {side} address: LID {:#06x} QPN {:#08x} PSN {:#08x} OUT {:#04x} RKey {:#010x} VAddr {:#018x} GID {}",
            k.lid, k.qpn, k.psn, k.out_reads, k.rkey, k.vaddr, k.addr()
        );
    }
    println!("{}", stats::RULE);
}

/// The client's data phase of the bandwidth tests: `iters` WRITEs to, READs from, or SENDs to
/// the peer's advertised buffer, up to [`TX_DEPTH`] outstanding.
fn bw_client(opts: &BenchOptions, ep: &Endpoint, peer: &KeyMsg, size: u64) -> Result<Outcome> {
    let iters = opts.iters;
    let mut posted_at = Vec::with_capacity(iters as usize);
    let mut done_at = Vec::with_capacity(iters as usize);
    let (mut posted, mut completed) = (0u64, 0u64);
    let local = Sge {
        addr: ep.mr.addr(),
        length: size as u32,
        lkey: ep.mr.lkey(),
    };
    let start = Instant::now();
    while completed < iters {
        let mut batch = Vec::new();
        while posted < iters && posted - completed < u64::from(TX_DEPTH) && batch.len() < 32 {
            let opcode = match opts.mode {
                Mode::Write => WrOpcode::RdmaWrite {
                    remote_addr: peer.vaddr,
                    rkey: peer.rkey,
                },
                Mode::Read => WrOpcode::RdmaRead {
                    remote_addr: peer.vaddr,
                    rkey: peer.rkey,
                },
                Mode::Send => WrOpcode::Send,
            };
            batch.push(SendWr::new(posted, opcode, vec![local]));
            posted += 1;
        }
        if !batch.is_empty() {
            let t = start.elapsed();
            posted_at.extend(std::iter::repeat(t).take(batch.len()));
            ep.qp.post_send(&batch)?;
        }
        ep.next_completion(opts.timeout)?;
        completed += 1;
        done_at.push(start.elapsed());
    }
    if opts.mode == Mode::Read {
        let landed = ep
            .mr
            .with(|b| b[..size as usize].iter().filter(|&&x| x != 0).count());
        if landed == 0 {
            return Err(Error::Bench(format!(
                "RDMA READ: {iters} READs of {size} bytes completed but the local buffer is still all zero"
            )));
        }
    }
    Ok(Outcome::Bw(BwResult::from_times(
        size, &posted_at, &done_at,
    )))
}

/// The SEND server: posts receives for all `iters` messages (up to [`RX_DEPTH`] at a time)
/// before the barrier that starts the client, then checks each arrival's length. The close
/// follows the last arrival directly (send_bw.c runs no barrier between data and close for one
/// size).
fn send_server(
    opts: &BenchOptions,
    ep: &Endpoint,
    ch: &mut PerftestChannel,
    me: &KeyMsg,
    size: u64,
) -> Result<Outcome> {
    let iters = opts.iters;
    let recv = |i: u64| RecvWr {
        wr_id: i,
        sg_list: vec![Sge {
            addr: ep.mr.addr(),
            length: size as u32,
            lkey: ep.mr.lkey(),
        }],
    };
    let first: Vec<RecvWr> = (0..iters.min(u64::from(RX_DEPTH))).map(recv).collect();
    let mut posted = first.len() as u64;
    ep.qp.post_recv(&first)?;
    ch.hand_shake(me, "the barrier before the SENDs")?;
    let mut arrived = Vec::with_capacity(iters as usize);
    let mut start = None;
    for i in 0..iters {
        let wc = ep.next_completion(opts.timeout).map_err(|e| {
            Error::Bench(format!(
                "SEND server: message {i} of {iters} did not arrive: {e}"
            ))
        })?;
        if wc.opcode != WcOpcode::Recv || u64::from(wc.byte_len) != size {
            return Err(Error::Bench(format!(
                "SEND server: message {i} completed as {:?} with {} bytes; expected a {size}-byte receive (same -s on both ends?)",
                wc.opcode, wc.byte_len
            )));
        }
        let t0 = *start.get_or_insert_with(Instant::now);
        arrived.push(t0.elapsed());
        if posted < iters {
            ep.qp.post_recv(&[recv(posted)])?;
            posted += 1;
        }
    }
    let landed = ep.mr.with(|b| b[..size as usize].iter().any(|&x| x != 0));
    if !landed {
        return Err(Error::Bench(format!(
            "SEND server: {iters} receives completed but the receive buffer is all zero"
        )));
    }
    let zero = vec![Duration::ZERO; arrived.len()];
    Ok(Outcome::Bw(BwResult::from_times(size, &zero, &arrived)))
}

/// What a WRITE or READ server can check: the client's report and, for WRITE, that data landed.
fn passive_server_check(
    opts: &BenchOptions,
    ep: &Endpoint,
    size: u64,
    theirs: &BwReport,
) -> Result<Outcome> {
    if theirs.size != size || theirs.iters != opts.iters {
        return Err(Error::Bench(format!(
            "the client reports {} iterations of {} bytes; this server expected {} of {size} (same -s and -n on both ends?)",
            theirs.iters, theirs.size, opts.iters
        )));
    }
    if opts.mode == Mode::Write {
        let written = ep
            .mr
            .with(|b| b[..size as usize].iter().filter(|&&x| x != 0).count());
        if written == 0 {
            return Err(Error::Bench(format!(
                "WRITE server: the client reports {} WRITEs of {size} bytes but the advertised buffer is still all zero",
                theirs.iters
            )));
        }
    }
    Ok(Outcome::Remote(*theirs))
}

/// ib_write_lat's ping-pong: WRITE `size` bytes whose last byte is the message number (mod
/// 256) into the peer's buffer, then wait for the peer's next number in this end's buffer.
/// The server writes first.
fn write_lat(
    opts: &BenchOptions,
    ep: &Endpoint,
    peer: &KeyMsg,
    size: u64,
    server: bool,
) -> Result<Outcome> {
    let iters = opts.iters;
    let n = size as usize;
    let recv_last = (peer_slot_offset(ep, size) + size - 1) as usize;
    let wr = |i: u64| {
        SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                remote_addr: peer.vaddr,
                rkey: peer.rkey,
            },
            vec![Sge {
                addr: ep.mr.addr(),
                length: size as u32,
                lkey: ep.mr.lkey(),
            }],
        )
    };
    let mut samples = Vec::with_capacity(iters as usize);
    let mut last_post = None;
    let (mut scnt, mut rcnt) = (0u64, 0u64);
    while scnt < iters || rcnt < iters {
        if rcnt < iters && !(server && scnt == 0) {
            rcnt += 1;
            wait_byte(ep, recv_last, rcnt as u8, opts.timeout, rcnt)?;
            if let Some(t) = last_post.take() {
                samples.push(Instant::elapsed(&t).as_secs_f64() * 1e6 / 2.0);
            }
        }
        if scnt < iters {
            scnt += 1;
            ep.mr.with(|b| b[n - 1] = scnt as u8);
            last_post = Some(Instant::now());
            ep.qp.post_send(&[wr(scnt)])?;
            ep.next_completion(opts.timeout)?;
        }
    }
    Ok(Outcome::Lat(LatResult::from_samples(size, &mut samples)))
}

/// Offset in this end's buffer of the slot the peer writes in ib_write_lat.
fn peer_slot_offset(ep: &Endpoint, size: u64) -> u64 {
    // Buffer = slot 0 (sent) | slot 1 (written by the peer) | size spare; slot = (len - size) / 2.
    (ep.mr.len() as u64 - size) / 2
}

/// Waits until byte `at` of this end's buffer equals `want` (message `i` arrived).
fn wait_byte(ep: &Endpoint, at: usize, want: u8, timeout: Duration, i: u64) -> Result<()> {
    let start = Instant::now();
    let mut b = [0u8; 1];
    let mut spins = 0u32;
    loop {
        ep.mr.read(at, &mut b)?;
        if b[0] == want {
            return Ok(());
        }
        spins += 1;
        if spins >= 64 {
            if let Some(wc) = ep.cq.poll_one() {
                return Err(Error::Bench(format!(
                    "write latency: unexpected completion {:?} while waiting for message {i}",
                    wc
                )));
            }
            if start.elapsed() > timeout {
                return Err(Error::Bench(format!(
                    "write latency: message {i} did not arrive within {timeout:?} (last byte {:#04x}, want {want:#04x}); device counters {:?}; QP counters {:?}",
                    b[0],
                    ep.device.counters(),
                    ep.qp.counters()
                )));
            }
            std::thread::yield_now();
        }
    }
}
