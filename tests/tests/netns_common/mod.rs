//! Shared pieces of the `netns_*` mesh tests: a scripted mesh endpoint that runs inside a
//! network namespace, and the test side that drives it.
//!
//! The test binary re-runs itself inside a namespace (`ip netns exec NS <test binary> --exact
//! <test> --nocapture` with `RDMESH_NETNS_CHILD=1`); there it starts a [`MeshNode`] on the
//! namespace's interfaces (topology discovery, `RDMESH_*` variables from the test) and obeys
//! one command per line on stdin, answering on stdout with lines that start with `@@`:
//!
//! | command | answer |
//! |---|---|
//! | `listen L` | `@@HANDLE L <hex>` |
//! | `connect C <hex>` | `@@CONNECTED C <route json>` or `@@ERROR C <ms> <message>` |
//! | `accept C L` | `@@ACCEPTED C <route json>` |
//! | `peer <hex>` | (adds the handle's node to the topology) |
//! | `send C COUNT SIZE SEED` | `@@PROGRESS C` after the first completion, then `@@SENT C <bytes>` |
//! | `recv C COUNT SIZE SEED` | `@@RECEIVED C <bytes>`, every byte checked |
//! | `counters` | `@@COUNTERS <json>` (per NIC) |
//! | `bench WORLD RANK RENDEZVOUS SIZE ITERS` | rank 0: `@@MATRIX <json>`, others `@@BENCHDONE` |
//! | `exit` | (exits) |
//!
//! Commands that wait run on their own thread, so one endpoint sends and receives at once.
//! The data of message `i` of a `send`/`recv` pair with seed `s` is [`pattern`]`(size, s + i)`.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdmesh_host::mesh::bench::{self, MeshBenchOptions};
use rdmesh_host::mesh::{
    Buffer, Handle, Listener, MeshConfig, MeshNode, RecvBuf, RecvComm, SendComm,
};
use rdmesh_tests::NetnsFabric;

/// Set in the environment of a re-run test binary that must act as an endpoint.
pub const CHILD_ENV: &str = "RDMESH_NETNS_CHILD";
/// How long an endpoint waits for a connection or a transfer before reporting an error.
const CHILD_WAIT: Duration = Duration::from_secs(60);

/// Whether this process is an endpoint.
pub fn is_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// Deterministic test data: `len` bytes from a xorshift generator seeded by `seed`.
pub fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

// ---------------------------------------------------------------- endpoint (child) side

#[derive(Default)]
struct State {
    listeners: HashMap<String, Listener>,
    sends: HashMap<String, Arc<SendComm>>,
    recvs: HashMap<String, Arc<RecvComm>>,
}

fn say(line: &str) {
    let out = std::io::stdout();
    let mut o = out.lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn one_line(s: &str) -> String {
    s.replace('\n', " | ")
}

/// The endpoint: runs until `exit` or the end of stdin.
pub fn child_main() {
    let filter = std::env::var("RDMESH_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    let node = match MeshConfig::from_env().and_then(MeshNode::new) {
        Ok(n) => n,
        Err(e) => {
            say(&format!("@@FATAL {}", one_line(&e.to_string())));
            std::process::exit(2);
        }
    };
    say(&format!(
        "@@NODE {:016x} {}",
        node.id(),
        serde_json::to_string(&node.nic_counters()).unwrap()
    ));
    let state = Arc::new(Mutex::new(State::default()));
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let w: Vec<String> = line.split_whitespace().map(str::to_string).collect();
        if w.is_empty() {
            continue;
        }
        let node = node.clone();
        let st = state.clone();
        match w[0].as_str() {
            "exit" => std::process::exit(0),
            "listen" => {
                let l = node.listen().unwrap();
                say(&format!("@@HANDLE {} {}", w[1], l.handle().to_hex()));
                st.lock().unwrap().listeners.insert(w[1].clone(), l);
            }
            "peer" => node.add_peer(&Handle::from_hex(&w[1]).unwrap()),
            "counters" => say(&format!(
                "@@COUNTERS {}",
                serde_json::to_string(&node.nic_counters()).unwrap()
            )),
            _ => {
                std::thread::spawn(move || run_command(&node, &st, &w));
            }
        }
    }
}

fn report_error(name: &str, start: Instant, e: impl std::fmt::Display) {
    say(&format!(
        "@@ERROR {name} {} {}",
        start.elapsed().as_millis(),
        one_line(&e.to_string())
    ));
}

fn run_command(node: &MeshNode, st: &Arc<Mutex<State>>, w: &[String]) {
    let start = Instant::now();
    let name = w.get(1).cloned().unwrap_or_default();
    let num = |i: usize| -> u64 { w[i].parse().unwrap() };
    match w[0].as_str() {
        "connect" => {
            let h = Handle::from_hex(&w[2]).unwrap();
            match node.connect(&h).wait(CHILD_WAIT) {
                Ok(s) => {
                    let route = serde_json::to_string(s.route()).unwrap();
                    st.lock().unwrap().sends.insert(name.clone(), Arc::new(s));
                    say(&format!("@@CONNECTED {name} {route}"));
                }
                Err(e) => report_error(&name, start, e),
            }
        }
        "accept" => {
            let deadline = Instant::now() + CHILD_WAIT;
            loop {
                let got = {
                    let s = st.lock().unwrap();
                    s.listeners[&w[2]].accept().unwrap()
                };
                if let Some(r) = got {
                    let route = serde_json::to_string(r.route()).unwrap();
                    st.lock().unwrap().recvs.insert(name.clone(), Arc::new(r));
                    say(&format!("@@ACCEPTED {name} {route}"));
                    return;
                }
                if Instant::now() > deadline {
                    return report_error(&name, start, "no connection arrived");
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        "send" => {
            let s = st.lock().unwrap().sends[&name].clone();
            match send_all(&s, &name, num(2) as usize, num(3) as usize, num(4) as u32) {
                Ok(bytes) => say(&format!("@@SENT {name} {bytes}")),
                Err(e) => report_error(&name, start, e),
            }
        }
        "recv" => {
            let r = st.lock().unwrap().recvs[&name].clone();
            match recv_all(&r, num(2) as usize, num(3) as usize, num(4) as u32) {
                Ok(bytes) => say(&format!("@@RECEIVED {name} {bytes}")),
                Err(e) => report_error(&name, start, e),
            }
        }
        "bench" => {
            let opts = MeshBenchOptions {
                world: num(1) as usize,
                rank: num(2) as usize,
                rendezvous: w[3].clone(),
                size: num(4) as usize,
                iters: num(5) as usize,
                timeout: CHILD_WAIT,
                config: MeshConfig::from_env().unwrap(),
            };
            match bench::run(&opts) {
                Ok(Some(m)) => say(&format!("@@MATRIX {}", serde_json::to_string(&m).unwrap())),
                Ok(None) => say("@@BENCHDONE"),
                Err(e) => report_error("bench", start, e),
            }
        }
        other => say(&format!("@@FATAL unknown command {other}")),
    }
}

fn send_all(s: &SendComm, name: &str, count: usize, size: usize, seed: u32) -> Result<u64, String> {
    let deadline = Instant::now() + CHILD_WAIT;
    let mut inflight = VecDeque::new();
    let mut next = 0;
    let mut done = 0;
    while done < count {
        while next < count && inflight.len() < 32 {
            let buf = Buffer::from_vec(pattern(size, seed + next as u32));
            match s.isend(&buf, 0, size, 7).map_err(|e| e.to_string())? {
                Some(r) => {
                    inflight.push_back(r);
                    next += 1;
                }
                None => break,
            }
        }
        if let Some(r) = inflight.front() {
            if let Some(n) = r.test().map_err(|e| e.to_string())? {
                if n != size {
                    return Err(format!("send completed with {n} bytes, not {size}"));
                }
                inflight.pop_front();
                done += 1;
                if done == 1 {
                    say(&format!("@@PROGRESS {name}"));
                }
                continue;
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {count} sends not done in time",
                count - done
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((count * size) as u64)
}

fn recv_all(r: &RecvComm, count: usize, size: usize, seed: u32) -> Result<u64, String> {
    let deadline = Instant::now() + CHILD_WAIT;
    let mut inflight = VecDeque::new();
    let mut next = 0;
    let mut done = 0;
    while done < count {
        while next < count && inflight.len() < 32 {
            let buf = Buffer::new(size);
            let req = r
                .irecv(&[RecvBuf {
                    buf: buf.clone(),
                    offset: 0,
                    len: size,
                    tag: 7,
                }])
                .map_err(|e| e.to_string())?;
            match req {
                Some(q) => {
                    inflight.push_back((q, buf, next));
                    next += 1;
                }
                None => break,
            }
        }
        if let Some((q, buf, i)) = inflight.front() {
            if let Some(sizes) = q.test().map_err(|e| e.to_string())? {
                if sizes != [size] {
                    return Err(format!("message {i}: sizes {sizes:?}, expected [{size}]"));
                }
                if buf.to_vec() != pattern(size, seed + *i as u32) {
                    return Err(format!("message {i} of {size} bytes: data differs"));
                }
                inflight.pop_front();
                done += 1;
                continue;
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {count} receives not done in time",
                count - done
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok((count * size) as u64)
}

// ---------------------------------------------------------------- test (parent) side

/// An endpoint process in a namespace, driven over its stdin/stdout. Killed on drop.
pub struct Endpoint {
    pub label: String,
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<String>,
    seen: Vec<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
    pub node_id: String,
}

impl Endpoint {
    /// Starts the endpoint of test `test` in namespace `ns` with extra environment `env`.
    pub fn spawn(
        fabric: &NetnsFabric,
        ns: usize,
        test: &str,
        label: &str,
        env: &[(&str, &str)],
    ) -> Endpoint {
        let exe = std::env::current_exe().unwrap();
        let mut cmd = fabric.command(ns, &exe);
        cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawning an endpoint");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(l) = line else { break };
                // libtest may print "test name ... " before the first line on the same line.
                if let Some(i) = l.find("@@") {
                    if tx.send(l[i..].to_string()).is_err() {
                        break;
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let mut err_pipe = child.stderr.take().unwrap();
        let e2 = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut err_pipe, &mut buf) {
                if n == 0 {
                    break;
                }
                e2.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let stdin = child.stdin.take().unwrap();
        let mut ep = Endpoint {
            label: label.to_string(),
            child,
            stdin,
            lines: rx,
            seen: Vec::new(),
            stderr,
            node_id: String::new(),
        };
        let node = ep.expect("@@NODE", Duration::from_secs(60));
        ep.node_id = node.split_whitespace().nth(1).unwrap_or("").to_string();
        ep
    }

    /// Sends one command line.
    pub fn cmd(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("writing to an endpoint");
        self.stdin.flush().unwrap();
    }

    fn context(&self) -> String {
        format!(
            "endpoint {}: lines so far:\n{}\nstderr:\n{}",
            self.label,
            self.seen.join("\n"),
            String::from_utf8_lossy(&self.stderr.lock().unwrap())
        )
    }

    /// Waits for the next line starting with `prefix` (lines for other prefixes seen meanwhile
    /// stay available); panics on timeout, on `@@FATAL`, or on an `@@ERROR` unless `prefix`
    /// asks for one.
    pub fn expect(&mut self, prefix: &str, timeout: Duration) -> String {
        let start = Instant::now();
        loop {
            if let Some(i) = self
                .seen
                .iter()
                .position(|l| l.starts_with(prefix) && !l.starts_with("@@USED "))
            {
                let l = self.seen[i].clone();
                self.seen[i] = format!("@@USED {l}");
                return l;
            }
            if !prefix.starts_with("@@ERROR") {
                if let Some(e) = self
                    .seen
                    .iter()
                    .find(|l| l.starts_with("@@ERROR") || l.starts_with("@@FATAL"))
                {
                    panic!(
                        "unexpected {e} while waiting for {prefix}\n{}",
                        self.context()
                    );
                }
            }
            let left = timeout.saturating_sub(start.elapsed());
            match self.lines.recv_timeout(left.max(Duration::from_millis(1))) {
                Ok(l) => self.seen.push(l),
                Err(_) if start.elapsed() >= timeout => {
                    panic!("no {prefix} within {timeout:?}\n{}", self.context())
                }
                Err(_) => {}
            }
        }
    }

    /// `listen L`: the handle's hex.
    pub fn listen(&mut self, l: &str) -> String {
        self.cmd(&format!("listen {l}"));
        let line = self.expect(&format!("@@HANDLE {l} "), Duration::from_secs(30));
        line.split_whitespace().nth(2).unwrap().to_string()
    }

    /// The per-NIC counters as JSON.
    pub fn counters(&mut self) -> serde_json::Value {
        self.cmd("counters");
        let line = self.expect("@@COUNTERS ", Duration::from_secs(30));
        serde_json::from_str(&line["@@COUNTERS ".len()..]).unwrap()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Every endpoint's side of the story, not only the one that failed, with its
            // NIC counters.
            let _ = writeln!(self.stdin, "counters");
            let _ = self.stdin.flush();
            let until = Instant::now() + Duration::from_secs(1);
            while let Ok(l) = self
                .lines
                .recv_timeout(until.saturating_duration_since(Instant::now()))
            {
                let last = l.starts_with("@@COUNTERS");
                self.seen.push(l);
                if last {
                    break;
                }
            }
            eprintln!("---- {}", self.context());
        }
        let _ = writeln!(self.stdin, "exit");
        let _ = self.stdin.flush();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Parses the JSON part of a `@@CONNECTED`/`@@ACCEPTED` line: the route.
pub fn route_of(line: &str) -> serde_json::Value {
    let json = line.splitn(3, ' ').nth(2).unwrap();
    serde_json::from_str(json).unwrap()
}

/// A NIC's counter `key` from [`Endpoint::counters`] output, found by netdev.
pub fn nic_counter(counters: &serde_json::Value, netdev: &str, key: &str) -> u64 {
    counters
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["netdev"] == netdev)
        .unwrap_or_else(|| panic!("no NIC {netdev} in {counters}"))["counters"][key]
        .as_u64()
        .unwrap()
}
