//! Shared pieces of the `netns_nft_*` tests: `rdmesh bench` servers and clients running in
//! network namespaces, nftables rules and counters inside them, and parsers for the bench's
//! `--counters` lines and bandwidth rows.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub use rdmesh_tests::{bench_counters as counters, Counters};
use rdmesh_tests::{have, need, rdmesh_bin, NetnsFabric};

/// `true` when this machine can run the test: root, iproute2 and nftables; skips (prints
/// SKIPPED) or fails under `RDMESH_REQUIRE_TOOLS=1` otherwise.
pub fn available() -> bool {
    NetnsFabric::available()
        && need(
            have("nft", &["--version"]),
            "nft (apt install nftables) for kernel packet drops and CE marks",
        )
}

/// Loads nftables rules (the text of an `nft -f` file) into namespace `ns`.
pub fn nft_load(f: &NetnsFabric, ns: usize, rules: &str) {
    let mut child = Command::new("ip")
        .args(["netns", "exec", f.ns(ns), "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running nft");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(rules.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "nft -f in {}: {}\nrules:\n{rules}",
        f.ns(ns),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Packets counted so far by the named counter `name` of table `inet <table>` in namespace
/// `ns`, read from `nft -j list counter`.
pub fn nft_counter(f: &NetnsFabric, ns: usize, table: &str, name: &str) -> u64 {
    let out = f.exec(ns, &["nft", "-j", "list", "counter", "inet", table, name]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("nft -j prints JSON");
    v["nftables"]
        .as_array()
        .expect("nftables array")
        .iter()
        .find_map(|e| e.get("counter").and_then(|c| c["packets"].as_u64()))
        .unwrap_or_else(|| panic!("no counter {name} in {out}"))
}

/// The value of `key` in `m`, failing the test with `what` when it is missing.
pub fn get(m: &Counters, key: &str, what: &str) -> u64 {
    *m.get(key)
        .unwrap_or_else(|| panic!("{what}: no counter {key}"))
}

/// The average bandwidth (MB/s) of the bench row for messages of `size` bytes.
pub fn bw_average(out: &str, size: u64) -> f64 {
    out.lines()
        .find_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            (t.len() == 5 && t[0] == size.to_string())
                .then(|| t[3].parse::<f64>().ok())
                .flatten()
        })
        .unwrap_or_else(|| panic!("no bandwidth row for {size} bytes in:\n{out}"))
}

/// A bench server started in namespace `ns`; its stderr goes to a file so that the test can
/// see when it listens.
pub struct Server {
    pub child: Child,
    pub log: PathBuf,
}

impl Server {
    /// Starts `rdmesh bench <args>` in namespace `ns` and waits (up to 10 s) until it listens.
    pub fn start(f: &NetnsFabric, ns: usize, args: &[&str], log: PathBuf) -> Server {
        let err = std::fs::File::create(&log).unwrap();
        let child = f
            .command(ns, &rdmesh_bin())
            .arg("bench")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(err)
            .spawn()
            .expect("spawning the bench server");
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("Waiting for a client") {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the bench server in {} did not listen within 10 s: {text}",
                f.ns(ns)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Server { child, log }
    }

    /// Waits for the server to exit (bounded), then returns its output with its stderr.
    pub fn finish(self, limit: Duration) -> (Output, String) {
        let out = rdmesh_tests::wait_bounded(self.child, limit);
        let err = std::fs::read_to_string(&self.log).unwrap_or_default();
        (out, err)
    }
}
