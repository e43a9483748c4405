//! `rdmesh stats` against a running `rdmesh bench write --loopback`: while the bench runs, the
//! snapshots its two soft devices publish show up in `rdmesh stats --json` (one per device,
//! one RTS QP each, the two QPs naming each other), with non-zero counters that only grow, and
//! agree with what the bench prints at the end (`--counters`). The table output has a row per
//! QP. After the bench exits, its entries are gone (files removed on close); after a SIGKILL,
//! `rdmesh stats` drops the dead process's leftover files.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdmesh_tests::{assert_ok, rdmesh_bin, run_bounded, scratch, wait_bounded};
use serde_json::Value;

fn stats(dir: &Path, args: &[&str]) -> String {
    let mut c = Command::new(rdmesh_bin());
    c.arg("stats").args(args).env("RDMESH_STATS_DIR", dir);
    assert_ok(&run_bounded(c, Duration::from_secs(10)), "rdmesh stats")
}

fn snapshots(dir: &Path, pid: u32) -> Vec<Value> {
    let v: Value = serde_json::from_str(&stats(dir, &["--json"])).expect("stats --json is JSON");
    v.as_array()
        .expect("an array")
        .iter()
        .filter(|s| s["pid"].as_u64() == Some(u64::from(pid)))
        .cloned()
        .collect()
}

fn bench(dir: &Path, secs: &str) -> Child {
    Command::new(rdmesh_bin())
        .args([
            "bench",
            "write",
            "--loopback",
            "-s",
            "64K",
            "-D",
            secs,
            "--counters",
        ])
        .env("RDMESH_STATS_DIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning rdmesh bench")
}

/// Waits until both devices of `pid` publish an RTS QP that has sent something.
fn wait_running(dir: &Path, pid: u32) -> Vec<Value> {
    let start = Instant::now();
    loop {
        let s = snapshots(dir, pid);
        let running = s.len() == 2
            && s.iter().all(|d| {
                d["qps"].as_array().is_some_and(|q| {
                    q.len() == 1
                        && q[0]["state"] == "RTS"
                        && q[0]["counters"]["tx_packets"].as_u64() > Some(0)
                })
            });
        if running {
            return s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "the bench's devices did not publish running QPs within 15 s: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn n(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a counter: {v}"))
}

/// (client, server) by direction of the WRITEs: the client's QP sends the payload.
fn roles(s: &[Value]) -> (&Value, &Value) {
    let payload = |d: &Value| n(&d["qps"][0]["counters"]["tx_payload_bytes"]);
    if payload(&s[0]) > payload(&s[1]) {
        (&s[0], &s[1])
    } else {
        (&s[1], &s[0])
    }
}

#[test]
fn stats_of_a_running_bench() {
    let dir = scratch("stats-cli");
    let child = bench(&dir, "3");
    let pid = child.id();
    let first = wait_running(&dir, pid);
    let (c1, s1) = roles(&first);
    // The two QPs name each other.
    let (cq, sq) = (&c1["qps"][0], &s1["qps"][0]);
    assert_eq!(cq["remote_qpn"], sq["qpn"], "{first:?}");
    assert_eq!(sq["remote_qpn"], cq["qpn"], "{first:?}");
    assert_eq!(cq["remote"], s1["local"]);
    assert_eq!(sq["remote"], c1["local"]);
    assert_eq!(c1["process"], "rdmesh");
    // Data flows one way, ACKs the other.
    assert!(n(&cq["counters"]["tx_payload_bytes"]) > 0);
    assert!(n(&sq["counters"]["rx_payload_bytes"]) > 0);
    assert!(n(&sq["counters"]["acks_sent"]) > 0);
    for d in [c1, s1] {
        // The device is read before its QP, and a QP's packet is counted before it leaves.
        assert!(
            n(&d["counters"]["tx_packets"]) <= n(&d["qps"][0]["counters"]["tx_packets"]),
            "{d}"
        );
        assert_eq!(n(&d["counters"]["icrc_errors"]), 0);
    }
    // A later snapshot only grows.
    std::thread::sleep(Duration::from_millis(1200));
    let second = snapshots(&dir, pid);
    assert_eq!(second.len(), 2, "{second:?}");
    let (c2, s2) = roles(&second);
    for (a, b) in [(c1, c2), (s1, s2)] {
        for k in [
            "tx_packets",
            "rx_packets",
            "tx_payload_bytes",
            "rx_payload_bytes",
        ] {
            assert!(
                n(&b["qps"][0]["counters"][k]) >= n(&a["qps"][0]["counters"][k]),
                "{k} went down"
            );
        }
        assert!(n(&b["unix_ms"]) > n(&a["unix_ms"]));
    }
    assert!(
        n(&c2["qps"][0]["counters"]["tx_payload_bytes"])
            > n(&c1["qps"][0]["counters"]["tx_payload_bytes"]),
        "the bench is still sending"
    );
    // The table: one block per device, one row per QP.
    let table = stats(&dir, &["--pid", &pid.to_string()]);
    println!("{table}");
    assert_eq!(
        table
            .matches(&format!("pid {pid} (rdmesh) device "))
            .count(),
        2
    );
    for q in [cq, sq] {
        let qpn = format!("{:#08x}", n(&q["qpn"]));
        assert!(
            table
                .lines()
                .any(|l| l.trim_start().starts_with(&qpn) && l.contains(" RTS ")),
            "no row for QP {qpn}:\n{table}"
        );
    }
    let out = wait_bounded(child, Duration::from_secs(30));
    let text = assert_ok(&out, "rdmesh bench write --loopback");
    // The final counters the bench prints are at least what stats saw while it ran.
    let final_tx: u64 = text
        .lines()
        .find(|l| l.trim_start().starts_with("counters client qp"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|t| t.strip_prefix("tx_payload_bytes="))
                .map(|v| v.parse().unwrap())
        })
        .expect("client counters line");
    assert!(final_tx >= n(&c2["qps"][0]["counters"]["tx_payload_bytes"]));
    println!(
        "bench sent {final_tx} payload bytes; stats saw {} then {}",
        n(&c1["qps"][0]["counters"]["tx_payload_bytes"]),
        n(&c2["qps"][0]["counters"]["tx_payload_bytes"])
    );
    // Gone after exit: the files themselves were removed on close.
    assert!(snapshots(&dir, pid).is_empty());
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|f| f.starts_with(&format!("{pid}-")))
        .collect();
    assert!(left.is_empty(), "files left after exit: {left:?}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn stats_drops_entries_of_killed_processes() {
    let dir = scratch("stats-cli-kill");
    let mut child = bench(&dir, "20");
    let pid = child.id();
    wait_running(&dir, pid);
    child.kill().unwrap();
    child.wait().unwrap();
    let count = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{pid}-"))
            })
            .count()
    };
    assert_eq!(count(), 2, "SIGKILL leaves the files");
    assert!(
        snapshots(&dir, pid).is_empty(),
        "a dead process is not shown"
    );
    assert_eq!(count(), 0, "rdmesh stats removes a dead process's files");
    let _ = std::fs::remove_dir_all(dir);
}
