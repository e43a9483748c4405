//! `rdmesh bench mesh`: the all-pairs bandwidth matrix of a set of mesh endpoints.
//!
//! One endpoint runs per node (`--world N --rank R --rendezvous HOST:PORT`); rank 0 also
//! coordinates: it listens on the rendezvous address, every endpoint (its own included)
//! connects there with its listen handles, rank 0 hands each endpoint the handles it needs,
//! and every endpoint connects to every other (relayed where no link is shared). Then, one
//! ordered pair at a time, the sender sends `iters + 1` messages of `size` bytes with up to 32
//! in flight; the receiver times from the first message's completion to the last (so the
//! setup of the pair is not counted) and checks every size. Rank 0 prints the matrix, in Gb/s
//! (row: sender, column: receiver), and each pair's route.
//!
//! The rendezvous is plain framed TCP ([`crate::framing`], magic `"RDMB"`): on a cluster it
//! runs over the management network, as NCCL's bootstrap does. `--loopback N` runs N endpoints
//! in one process over loopback (a self-test of the machinery, not a measurement of a mesh).

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::framing::{FramedStream, Protocol};
use crate::mesh::buffer::Buffer;
use crate::mesh::codec::{Reader, Writer};
use crate::mesh::comm::{RecvComm, SendComm};
use crate::mesh::config::MeshConfig;
use crate::mesh::error::{MeshError, Result};
use crate::mesh::handle::{Handle, HANDLE_LEN};
use crate::mesh::nic::NicSpec;
use crate::mesh::node::{Connector, Listener, MeshNode};
use crate::mesh::tagged::RecvBuf;
use crate::topo::IfAddr;

static RENDEZVOUS: Protocol = Protocol {
    magic: *b"RDMB",
    version: 1,
    max_payload: 1 << 20,
    name: "an rdmesh bench mesh endpoint",
};

const T_JOIN: u16 = 1;
const T_TABLE: u16 = 2;
const T_CONNECTED: u16 = 3;
const T_RUN: u16 = 4;
const T_DONE: u16 = 5;
const T_END: u16 = 6;

/// Most endpoints in one run.
pub const MAX_WORLD: usize = 64;
/// Requests in flight per direction.
const DEPTH: usize = 32;

/// What `rdmesh bench mesh` was asked to do.
#[derive(Debug, Clone)]
pub struct MeshBenchOptions {
    /// Number of endpoints.
    pub world: usize,
    /// This endpoint's rank.
    pub rank: usize,
    /// Rank 0's rendezvous address.
    pub rendezvous: String,
    /// Message size, bytes.
    pub size: usize,
    /// Messages timed per pair.
    pub iters: usize,
    /// How long to wait for the others, and for each pair.
    pub timeout: Duration,
    /// The node's configuration.
    pub config: MeshConfig,
}

/// One cell of the matrix.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PairResult {
    /// Sending rank.
    pub src: usize,
    /// Receiving rank.
    pub dst: usize,
    /// Bandwidth, Gb/s (10^9 bits per second), when the pair worked.
    pub gbps: Option<f64>,
    /// The sender's route to the receiver.
    pub route: String,
    /// What failed, when something did.
    pub error: Option<String>,
}

/// The all-pairs result.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Matrix {
    /// Number of endpoints.
    pub world: usize,
    /// Message size, bytes.
    pub size: usize,
    /// Messages timed per pair.
    pub iters: usize,
    /// Every ordered pair, sender-major.
    pub pairs: Vec<PairResult>,
}

impl Matrix {
    /// The cell for `src -> dst`.
    pub fn get(&self, src: usize, dst: usize) -> Option<&PairResult> {
        self.pairs.iter().find(|p| p.src == src && p.dst == dst)
    }

    /// The table `rdmesh bench mesh` prints.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "rdmesh bench mesh: {} endpoints, {} messages of {} bytes per pair; Gb/s, row = sender, column = receiver",
            self.world, self.iters, self.size
        );
        let _ = write!(s, "{:>8}", "");
        for d in 0..self.world {
            let _ = write!(s, "{:>10}", format!("to {d}"));
        }
        s.push('\n');
        for src in 0..self.world {
            let _ = write!(s, "{:>8}", format!("from {src}"));
            for dst in 0..self.world {
                let cell = match self.get(src, dst) {
                    _ if src == dst => "-".to_string(),
                    Some(PairResult { gbps: Some(g), .. }) => format!("{g:.3}"),
                    Some(_) => "error".to_string(),
                    None => "?".to_string(),
                };
                let _ = write!(s, "{cell:>10}");
            }
            s.push('\n');
        }
        s.push_str("routes:\n");
        for p in &self.pairs {
            let _ = write!(s, "  {} -> {}: {}", p.src, p.dst, p.route);
            if let Some(e) = &p.error {
                let _ = write!(s, " [error: {e}]");
            }
            s.push('\n');
        }
        s
    }
}

fn bench_err(reason: impl Into<String>) -> MeshError {
    MeshError::Request(reason.into())
}

fn host(e: crate::Error) -> MeshError {
    MeshError::Host(e.to_string())
}

/// Runs one endpoint; rank 0 returns the matrix.
///
/// Errors: bad options, a rendezvous or connection failure ([`MeshError`] naming what).
pub fn run(opts: &MeshBenchOptions) -> Result<Option<Matrix>> {
    if opts.world < 2 || opts.world > MAX_WORLD || opts.rank >= opts.world {
        return Err(bench_err(format!(
            "--world {} --rank {}: the world has 2 to {MAX_WORLD} endpoints and the rank is below it",
            opts.world, opts.rank
        )));
    }
    let addr = resolve(&opts.rendezvous)?;
    let coordinator = if opts.rank == 0 {
        let l = TcpListener::bind(addr).map_err(|e| {
            bench_err(format!(
                "rank 0: cannot listen on the rendezvous address {addr}: {e}"
            ))
        })?;
        let o = opts.clone();
        Some(std::thread::spawn(move || coordinate(l, &o)))
    } else {
        None
    };
    let node = MeshNode::new(opts.config.clone())?;
    let worked = worker(&node, opts, addr);
    match coordinator {
        Some(t) => {
            let m = t
                .join()
                .map_err(|_| bench_err("the coordinator thread panicked"))?;
            worked?;
            m.map(Some)
        }
        None => worked.map(|_| None),
    }
}

/// Runs `n` endpoints in this process over loopback (127.0.77.1/24 … ), each its own node.
///
/// Errors: as [`run`].
pub fn run_loopback(n: usize, size: usize, iters: usize, timeout: Duration) -> Result<Matrix> {
    run_loopback_with(n, size, iters, timeout, Default::default())
}

/// [`run_loopback`] with the endpoints' devices of `provider` (soft, or the device model on a
/// UDP socket).
///
/// Errors: as [`run_loopback`].
pub fn run_loopback_with(
    n: usize,
    size: usize,
    iters: usize,
    timeout: Duration,
    provider: crate::verbs::ProviderKind,
) -> Result<Matrix> {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| bench_err(format!("picking a rendezvous port: {e}")))?
        .port();
    let mut threads = Vec::new();
    for rank in (0..n).rev() {
        let opts = MeshBenchOptions {
            world: n,
            rank,
            rendezvous: format!("127.0.0.1:{port}"),
            size,
            iters,
            timeout,
            config: MeshConfig {
                nics: Some(vec![NicSpec {
                    device: format!("soft_lo{rank}"),
                    port: 1,
                    netdev: "lo".into(),
                    addr: IfAddr {
                        ip: format!("127.0.77.{}", rank + 1)
                            .parse()
                            .expect("an address"),
                        prefix_len: 24,
                    },
                    gbps: 10.0,
                    provider: provider.clone(),
                }]),
                ..MeshConfig::default()
            },
        };
        threads.push(std::thread::spawn(move || run(&opts)));
    }
    let mut matrix = None;
    for t in threads {
        if let Some(m) = t.join().map_err(|_| bench_err("an endpoint panicked"))?? {
            matrix = Some(m);
        }
    }
    matrix.ok_or_else(|| bench_err("rank 0 produced no matrix"))
}

fn resolve(s: &str) -> Result<SocketAddr> {
    s.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| bench_err(format!("--rendezvous {s:?} is not HOST:PORT")))
}

fn status_payload(err: Option<&str>) -> Vec<u8> {
    let mut w = Writer::new();
    w.u8(u8::from(err.is_some())).str(err.unwrap_or(""), 4096);
    w.0
}

fn read_status(p: &[u8]) -> std::result::Result<(), String> {
    let mut r = Reader::new(p);
    let failed = r.u8("status")? != 0;
    let msg = r.str("message", 4096)?;
    if failed {
        Err(msg)
    } else {
        Ok(())
    }
}

fn coordinate(listener: TcpListener, opts: &MeshBenchOptions) -> Result<Matrix> {
    let deadline = Instant::now() + opts.timeout;
    let _ = listener.set_nonblocking(true);
    let mut chans: Vec<Option<FramedStream>> = (0..opts.world).map(|_| None).collect();
    let mut handles: Vec<Vec<[u8; HANDLE_LEN]>> = vec![Vec::new(); opts.world];
    let mut joined = 0;
    while joined < opts.world {
        match listener.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                let mut ch = FramedStream::new(s, opts.timeout, &RENDEZVOUS).map_err(host)?;
                let p = ch.recv(T_JOIN).map_err(host)?;
                let mut r = Reader::new(&p);
                let rank = r.u32("rank").map_err(bench_err)? as usize;
                let world = r.u32("world").map_err(bench_err)? as usize;
                if world != opts.world || rank >= world || chans[rank].is_some() {
                    return Err(bench_err(format!(
                        "an endpoint joined as rank {rank} of {world}; this run has {} endpoints (duplicate rank or wrong --world?)",
                        opts.world
                    )));
                }
                let hs = (0..world)
                    .map(|_| {
                        let b = r.take(HANDLE_LEN, "handle")?;
                        Ok(<[u8; HANDLE_LEN]>::try_from(b).expect("128 bytes"))
                    })
                    .collect::<std::result::Result<Vec<_>, String>>()
                    .map_err(bench_err)?;
                handles[rank] = hs;
                chans[rank] = Some(ch);
                joined += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    let missing: Vec<usize> =
                        (0..opts.world).filter(|&i| chans[i].is_none()).collect();
                    return Err(bench_err(format!(
                        "rendezvous: rank(s) {missing:?} did not join within {:?}",
                        opts.timeout
                    )));
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(bench_err(format!("rendezvous accept: {e}"))),
        }
    }
    let mut chans: Vec<FramedStream> = chans.into_iter().map(|c| c.expect("joined")).collect();
    for (i, ch) in chans.iter_mut().enumerate() {
        // Endpoint i needs, from every j, j's listener for i.
        let mut w = Writer::new();
        for hs in &handles {
            w.raw(&hs[i]);
        }
        ch.send(T_TABLE, &w.0).map_err(host)?;
    }
    for (i, ch) in chans.iter_mut().enumerate() {
        let p = ch.recv(T_CONNECTED).map_err(host)?;
        read_status(&p).map_err(|e| bench_err(format!("rank {i} could not connect: {e}")))?;
    }
    let mut pairs = Vec::new();
    for src in 0..opts.world {
        for dst in 0..opts.world {
            if src == dst {
                continue;
            }
            let mut w = Writer::new();
            w.u32(src as u32).u32(dst as u32);
            for &k in &[src, dst] {
                chans[k].send(T_RUN, &w.0).map_err(host)?;
            }
            let mut result = PairResult {
                src,
                dst,
                gbps: None,
                route: String::new(),
                error: None,
            };
            for &k in &[src, dst] {
                let p = chans[k].recv(T_DONE).map_err(host)?;
                let mut r = Reader::new(&p);
                let secs = f64::from_bits(r.u64("seconds").map_err(bench_err)?);
                let route = r.str("route", 4096).map_err(bench_err)?;
                let err = r.str("error", 4096).map_err(bench_err)?;
                if !err.is_empty() {
                    result.error.get_or_insert(format!("rank {k}: {err}"));
                }
                if k == src {
                    result.route = route;
                } else if secs > 0.0 {
                    result.gbps = Some((opts.size * opts.iters) as f64 * 8.0 / secs / 1e9);
                }
            }
            if result.error.is_some() {
                result.gbps = None;
            }
            pairs.push(result);
        }
    }
    for ch in chans.iter_mut() {
        let _ = ch.send(T_END, &[]);
    }
    Ok(Matrix {
        world: opts.world,
        size: opts.size,
        iters: opts.iters,
        pairs,
    })
}

fn worker(node: &MeshNode, opts: &MeshBenchOptions, addr: SocketAddr) -> Result<()> {
    let deadline = Instant::now() + opts.timeout;
    let listeners: Vec<Option<Listener>> = (0..opts.world)
        .map(|j| (j != opts.rank).then(|| node.listen()).transpose())
        .collect::<Result<_>>()?;
    let stream = loop {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
            Ok(s) => break s,
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(%addr, error = %e, "rendezvous not up yet");
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => {
                return Err(bench_err(format!(
                    "rank {}: cannot reach rank 0's rendezvous at {addr}: {e}",
                    opts.rank
                )))
            }
        }
    };
    let mut ch = FramedStream::new(stream, opts.timeout, &RENDEZVOUS).map_err(host)?;
    let mut w = Writer::new();
    w.u32(opts.rank as u32).u32(opts.world as u32);
    for l in &listeners {
        match l {
            Some(l) => w.raw(&l.handle().to_bytes()),
            None => w.raw(&[0u8; HANDLE_LEN]),
        };
    }
    ch.send(T_JOIN, &w.0).map_err(host)?;
    let p = ch.recv(T_TABLE).map_err(host)?;
    if p.len() != opts.world * HANDLE_LEN {
        return Err(bench_err(format!("handle table of {} bytes", p.len())));
    }
    let mut to_me: Vec<Option<Handle>> = Vec::new();
    for (j, b) in p.chunks(HANDLE_LEN).enumerate() {
        if j == opts.rank {
            to_me.push(None);
            continue;
        }
        let h = Handle::from_bytes(b)?;
        node.add_peer(&h);
        to_me.push(Some(h));
    }
    let connected = connect_all(node, &listeners, &to_me, deadline);
    let (sends, recvs) = match connected {
        Ok(x) => {
            ch.send(T_CONNECTED, &status_payload(None)).map_err(host)?;
            x
        }
        Err(e) => {
            let _ = ch.send(T_CONNECTED, &status_payload(Some(&e.to_string())));
            return Err(e);
        }
    };
    loop {
        let (ty, p) = ch.recv_any(T_RUN).map_err(host)?;
        if ty == T_END {
            return Ok(());
        }
        if ty != T_RUN || p.len() != 8 {
            return Err(bench_err(format!(
                "unexpected rendezvous message type {ty}"
            )));
        }
        let src = u32::from_be_bytes(p[0..4].try_into().expect("4 bytes")) as usize;
        let dst = u32::from_be_bytes(p[4..8].try_into().expect("4 bytes")) as usize;
        let (secs, route, err) = if src == opts.rank {
            let s = sends[dst].as_ref().expect("connected");
            let r = send_burst(s, opts);
            (0.0, s.route().to_string(), r.err())
        } else if dst == opts.rank {
            let r = recvs[src].as_ref().expect("connected");
            match recv_burst(r, opts) {
                Ok(secs) => (secs, String::new(), None),
                Err(e) => (0.0, String::new(), Some(e)),
            }
        } else {
            (0.0, String::new(), Some(bench_err("not part of this pair")))
        };
        let mut w = Writer::new();
        w.u64(f64::to_bits(secs))
            .str(&route, 4096)
            .str(&err.map(|e| e.to_string()).unwrap_or_default(), 4096);
        ch.send(T_DONE, &w.0).map_err(host)?;
    }
}

type Comms = (Vec<Option<SendComm>>, Vec<Option<RecvComm>>);

fn connect_all(
    node: &MeshNode,
    listeners: &[Option<Listener>],
    to_me: &[Option<Handle>],
    deadline: Instant,
) -> Result<Comms> {
    let n = listeners.len();
    let mut connectors: Vec<Option<Connector>> = to_me
        .iter()
        .map(|h| h.as_ref().map(|h| node.connect(h)))
        .collect();
    let mut sends: Vec<Option<SendComm>> = (0..n).map(|_| None).collect();
    let mut recvs: Vec<Option<RecvComm>> = (0..n).map(|_| None).collect();
    loop {
        let mut pending = 0;
        for j in 0..n {
            if let Some(c) = connectors[j].as_mut() {
                match c.poll()? {
                    Some(s) => {
                        sends[j] = Some(s);
                        connectors[j] = None;
                    }
                    None => pending += 1,
                }
            }
            if let (Some(l), None) = (&listeners[j], &recvs[j]) {
                match l.accept()? {
                    Some(r) => recvs[j] = Some(r),
                    None => pending += 1,
                }
            }
        }
        if pending == 0 {
            return Ok((sends, recvs));
        }
        if Instant::now() > deadline {
            return Err(bench_err(format!(
                "{pending} connection(s) of node {:016x} not up before the timeout",
                node.id()
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn send_burst(s: &SendComm, opts: &MeshBenchOptions) -> Result<()> {
    let src = Buffer::from_vec((0..opts.size).map(|i| (i * 31 % 251) as u8).collect());
    let deadline = Instant::now() + opts.timeout;
    let total = opts.iters + 1;
    let mut posted = 0;
    let mut inflight = std::collections::VecDeque::new();
    while posted < total || !inflight.is_empty() {
        while posted < total && inflight.len() < DEPTH {
            match s.isend(&src, 0, opts.size, 0)? {
                Some(r) => {
                    inflight.push_back(r);
                    posted += 1;
                }
                None => break,
            }
        }
        if let Some(r) = inflight.front() {
            if r.test()?.is_some() {
                inflight.pop_front();
                continue;
            }
        }
        if Instant::now() > deadline {
            return Err(bench_err(format!(
                "{} of {total} sends not complete within {:?}",
                total - posted + inflight.len(),
                opts.timeout
            )));
        }
        std::thread::yield_now();
    }
    Ok(())
}

fn recv_burst(r: &RecvComm, opts: &MeshBenchOptions) -> Result<f64> {
    let deadline = Instant::now() + opts.timeout;
    let total = opts.iters + 1;
    let bufs: Vec<Buffer> = (0..DEPTH).map(|_| Buffer::new(opts.size)).collect();
    let mut posted = 0;
    let mut done = 0;
    let mut inflight = std::collections::VecDeque::new();
    let mut first: Option<Instant> = None;
    while done < total {
        while posted < total && inflight.len() < DEPTH {
            let b = bufs[posted % DEPTH].clone();
            match r.irecv(&[RecvBuf {
                buf: b,
                offset: 0,
                len: opts.size,
                tag: 0,
            }])? {
                Some(q) => {
                    inflight.push_back(q);
                    posted += 1;
                }
                None => break,
            }
        }
        if let Some(q) = inflight.front() {
            if let Some(sizes) = q.test()? {
                if sizes != [opts.size] {
                    return Err(bench_err(format!(
                        "received {sizes:?} bytes, expected {}",
                        opts.size
                    )));
                }
                inflight.pop_front();
                done += 1;
                if first.is_none() {
                    first = Some(Instant::now());
                }
                continue;
            }
        }
        if Instant::now() > deadline {
            return Err(bench_err(format!(
                "{} of {total} receives not complete within {:?}",
                total - done,
                opts.timeout
            )));
        }
        std::thread::yield_now();
    }
    Ok(first.map_or(0.0, |t| t.elapsed().as_secs_f64()))
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn loopback_matrix_of_three() {
        let m = run_loopback(3, 65536, 8, Duration::from_secs(30)).unwrap();
        assert_eq!(m.pairs.len(), 6);
        for p in &m.pairs {
            assert!(p.error.is_none(), "{p:?}");
            assert!(p.gbps.is_some_and(|g| g > 0.0), "{p:?}");
            assert!(p.route.starts_with("direct over 1 rail"), "{p:?}");
        }
        let text = m.render();
        assert!(text.contains("from 2") && text.contains("to 1"), "{text}");
        assert!(text.contains("0 -> 2: direct"), "{text}");
    }

    #[test]
    fn bad_options_are_refused() {
        let opts = MeshBenchOptions {
            world: 1,
            rank: 0,
            rendezvous: "127.0.0.1:1".into(),
            size: 1,
            iters: 1,
            timeout: Duration::from_secs(1),
            config: MeshConfig::default(),
        };
        assert!(run(&opts).unwrap_err().to_string().contains("--world 1"));
        let opts = MeshBenchOptions {
            world: 2,
            rank: 1,
            rendezvous: "nonsense".into(),
            ..opts
        };
        assert!(run(&opts).unwrap_err().to_string().contains("HOST:PORT"));
    }
}
