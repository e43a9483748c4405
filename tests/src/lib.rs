//! Shared helpers of rdmesh's cross-crate integration tests (`tests/tests/*.rs`).
//!
//! Tests that need an outside tool (tshark, python3 with scapy, root for a capture) skip with a
//! printed reason on a developer machine, and fail when `RDMESH_REQUIRE_TOOLS=1` (set by
//! `scripts/test.sh`, so CI never silently skips).

pub mod c_header;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Path of the release `rdmesh` binary, building it when needed (or `RDMESH_BIN`).
pub fn rdmesh_bin() -> PathBuf {
    if let Ok(p) = std::env::var("RDMESH_BIN") {
        return PathBuf::from(p);
    }
    static BUILD: std::sync::Once = std::sync::Once::new();
    let root = workspace_root();
    BUILD.call_once(|| {
        let st = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "-q",
                "-p",
                "rdmesh-host",
                "--bin",
                "rdmesh",
            ])
            .current_dir(&root)
            .status()
            .expect("running cargo build");
        assert!(st.success(), "building the rdmesh binary failed");
    });
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("release/rdmesh")
}

/// Key=value counters of one `rdmesh bench --counters` line kind.
pub type Counters = std::collections::HashMap<String, u64>;

/// The `(qp, device)` counters of `role` (`client`, `server`) from the `counters ROLE qp …` /
/// `counters ROLE device …` lines that `rdmesh bench --counters` prints. Fails the test when
/// `out` has none for `role`.
pub fn bench_counters(out: &str, role: &str) -> (Counters, Counters) {
    let mut qp = Counters::new();
    let mut dev = Counters::new();
    for line in out.lines() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        if toks.len() < 3 || toks[0] != "counters" || toks[1] != role {
            continue;
        }
        let (map, rest) = match toks[2] {
            "qp" => (&mut qp, &toks[4..]),
            "device" => (&mut dev, &toks[3..]),
            other => panic!("unknown counters line kind {other}: {line}"),
        };
        for t in rest {
            let (k, v) = t.split_once('=').expect("key=value");
            map.insert(k.to_string(), v.parse().expect("a number"));
        }
    }
    assert!(
        !qp.is_empty() && !dev.is_empty(),
        "no counters for {role} in:\n{out}"
    );
    (qp, dev)
}

/// `true` when missing tools must fail the test instead of skipping it.
pub fn tools_required() -> bool {
    std::env::var("RDMESH_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// Skips (returns false) or fails when `what` is unavailable.
pub fn need(available: bool, what: &str) -> bool {
    if !available {
        assert!(
            !tools_required(),
            "{what} is required (RDMESH_REQUIRE_TOOLS=1) but unavailable"
        );
        eprintln!("SKIPPED: {what} unavailable");
    }
    available
}

/// `true` when `cmd --version`-style probing succeeds.
pub fn have(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `true` when running as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A free TCP port on 127.0.0.1.
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scratch directory unique to this test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmesh-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd` to completion within `limit`, killing it on timeout; panics with its output.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning");
    wait_bounded(child, limit)
}

/// Waits for `child` up to `limit` while draining its stdout and stderr (so a chatty child
/// never blocks on a full pipe), then kills it and panics on timeout.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting") {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ),
    }
}

/// Asserts success, printing both streams otherwise.
pub fn assert_ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Network namespaces joined by veth links, for tests that need a real multi-node topology on
/// one machine (root). Namespace names carry the test name and this process id, so tests run
/// in parallel; every address lives inside the namespaces. On drop, the processes running in
/// the namespaces (the test's own endpoints) are killed by pid and the namespaces deleted, also
/// when the test failed.
pub struct NetnsFabric {
    names: Vec<String>,
}

impl NetnsFabric {
    /// `true` when namespaces can be made here (root and iproute2); skips or fails per
    /// [`need`] otherwise.
    pub fn available() -> bool {
        need(
            is_root() && have("ip", &["-V"]),
            "root and iproute2 (ip netns) for network namespaces",
        )
    }

    /// Creates `count` namespaces named `rdm-<test>-<pid>-<i>`, each with `lo` up.
    pub fn new(test: &str, count: usize) -> NetnsFabric {
        let mut f = NetnsFabric { names: Vec::new() };
        for i in 0..count {
            let name = format!("rdm-{test}-{}-{i}", std::process::id());
            let _ = Command::new("ip").args(["netns", "del", &name]).output();
            let out = Command::new("ip")
                .args(["netns", "add", &name])
                .output()
                .expect("running ip (install iproute2)");
            assert!(
                out.status.success(),
                "ip netns add {name} (needs root): {}",
                String::from_utf8_lossy(&out.stderr)
            );
            f.names.push(name);
            f.exec(i, &["ip", "link", "set", "lo", "up"]);
        }
        f
    }

    /// The name of namespace `i`.
    pub fn ns(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Runs `args` inside namespace `i` and asserts success; returns stdout.
    pub fn exec(&self, i: usize, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.names[i]])
            .args(args)
            .output()
            .expect("running ip netns exec");
        assert!(
            out.status.success(),
            "ip netns exec {} {args:?}: {}",
            self.names[i],
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A veth link from namespace `a` (interface `a_if`, address `a_cidr`) to namespace `b`
    /// (`b_if`, `b_cidr`), both ends up with MTU `mtu`. The pair is created inside `a` with its
    /// peer placed directly in `b`, so no name is ever used outside the namespaces.
    #[allow(clippy::too_many_arguments)]
    pub fn link(
        &self,
        a: usize,
        a_if: &str,
        a_cidr: &str,
        b: usize,
        b_if: &str,
        b_cidr: &str,
        mtu: u32,
    ) {
        let mtu = mtu.to_string();
        self.exec(
            a,
            &[
                "ip",
                "link",
                "add",
                a_if,
                "type",
                "veth",
                "peer",
                "name",
                b_if,
                "netns",
                &self.names[b],
            ],
        );
        for (ns, ifn, cidr) in [(a, a_if, a_cidr), (b, b_if, b_cidr)] {
            self.exec(ns, &["ip", "link", "set", ifn, "mtu", &mtu]);
            self.exec(ns, &["ip", "addr", "add", cidr, "dev", ifn]);
            self.exec(ns, &["ip", "link", "set", ifn, "up"]);
            self.wire_frames(ns, ifn);
        }
    }

    /// Makes interface `ifn` of namespace `i` segment UDP GSO packets in software before they
    /// leave it (`ethtool -K IFN tx-udp-segmentation off`), so that nftables rules, captures
    /// and the receiver see each RoCEv2 frame as a NIC puts it on the wire — with the IPv4 IDs
    /// that GSO gives its segments — not a 64 KiB GSO packet.
    pub fn wire_frames(&self, i: usize, ifn: &str) {
        assert!(
            have("ethtool", &["--version"]),
            "ethtool is needed to turn off UDP segmentation offload on {ifn} (scripts/setup.sh installs it)"
        );
        self.exec(i, &["ethtool", "-K", ifn, "tx-udp-segmentation", "off"]);
    }

    /// Sets interface `ifn` of namespace `i` up or down.
    pub fn set_link(&self, i: usize, ifn: &str, up: bool) {
        self.exec(
            i,
            &["ip", "link", "set", ifn, if up { "up" } else { "down" }],
        );
    }

    /// A command that runs `program` inside namespace `i`.
    pub fn command(&self, i: usize, program: &Path) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.names[i]]).arg(program);
        c
    }
}

impl Drop for NetnsFabric {
    fn drop(&mut self) {
        for name in &self.names {
            if let Ok(out) = Command::new("ip").args(["netns", "pids", name]).output() {
                for pid in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                    if pid.chars().all(|c| c.is_ascii_digit()) {
                        let _ = Command::new("kill").args(["-9", pid]).status();
                    }
                }
            }
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// The row `name` of an `rdmesh fuzz peer` coverage table: frames sent, answered, ACKed,
/// NAKed, silent. Fails the test when `out` has no such row.
pub fn fuzz_coverage_row(out: &str, name: &str) -> [u64; 5] {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))
        .unwrap_or_else(|| panic!("no coverage row {name}:\n{out}"));
    let n: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|t| t.parse().unwrap())
        .collect();
    [n[0], n[1], n[2], n[3], n[4]]
}
