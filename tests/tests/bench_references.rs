//! `rdmesh bench`'s references and run shapes: `--compare-tcp` and `--compare-udp` run their
//! peer in a separate process (`rdmesh reference-peer`) and print a ratio, `--cpus` pins every
//! thread of the run and the reference's process, `-q N` runs N QP pairs with an aggregate, and
//! `--compare-loss-free` interleaves loss-free and impaired periods on one connection.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdmesh_tests::{assert_ok, rdmesh_bin, run_bounded};

fn bench(args: &[&str]) -> String {
    let mut c = Command::new(rdmesh_bin());
    c.arg("bench").args(args).env("RDMESH_STATS", "0");
    assert_ok(&run_bounded(c, Duration::from_secs(120)), &args.join(" "))
}

/// The ratio on the line that starts with `what` after the size.
fn ratio(out: &str, what: &str) -> f64 {
    ratio_after(out, what, what)
}

/// The first ratio after `label` on the line that contains `what`.
fn ratio_after(out: &str, what: &str, label: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.contains(what))
        .unwrap_or_else(|| panic!("no {what:?} line in\n{out}"));
    let (_, rest) = line
        .split_once(label)
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"));
    let r: f64 = rest
        .split_whitespace()
        .find_map(|w| w.strip_suffix('x').and_then(|n| n.parse().ok()))
        .unwrap_or_else(|| panic!("no ratio after {label:?} in {line:?}"));
    assert!(r.is_finite() && r > 0.0, "{line}");
    r
}

#[test]
fn tcp_and_udp_references_print_ratios() {
    let out = bench(&[
        "write",
        "--loopback",
        "-s",
        "64K",
        "-n",
        "300",
        "--compare-tcp",
    ]);
    assert!(
        out.contains("one TCP stream between two processes"),
        "{out}"
    );
    ratio(&out, "rdmesh/TCP average bandwidth");
    let out = bench(&[
        "write",
        "--loopback",
        "--lat",
        "-s",
        "8",
        "-n",
        "300",
        "--compare-udp",
    ]);
    assert!(out.contains("UDP ping-pong between two processes"), "{out}");
    ratio(&out, "rdmesh/UDP median latency");
    // The tail's ratios too: the mean and the 99th percentile.
    ratio_after(&out, "rdmesh/UDP median latency", ", mean ");
    ratio_after(&out, "rdmesh/UDP median latency", "99% percentile ");
    let out = bench(&[
        "send",
        "--loopback",
        "-s",
        "5000",
        "-n",
        "200",
        "--compare-udp",
    ]);
    ratio(&out, "rdmesh/UDP average bandwidth");
}

/// `--compare-loss-free`: impaired and loss-free periods alternate; the drops happen, the ratio
/// is printed, and the flag refuses a run without an impairment to switch.
#[test]
fn compare_loss_free_alternates_periods_on_one_connection() {
    let out = bench(&[
        "write",
        "--loopback",
        "-s",
        "64K",
        "-D",
        "1.2",
        "--impair",
        "loss=1%,seed=3",
        "--compare-loss-free",
        "--counters",
    ]);
    let r = ratio(&out, "impaired / loss-free periods");
    assert!(r < 5.0, "{out}");
    assert!(out.contains("alternating periods of 250 ms"), "{out}");
    let dropped: u64 = out
        .lines()
        .find(|l| l.contains("counters client device"))
        .and_then(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix("impair.dropped="))
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no impair.dropped in\n{out}"));
    assert!(dropped > 0, "{out}");
    let mut c = Command::new(rdmesh_bin());
    c.args([
        "bench",
        "write",
        "--loopback",
        "-n",
        "10",
        "--compare-loss-free",
    ])
    .env("RDMESH_STATS", "0");
    let o = run_bounded(c, Duration::from_secs(60));
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("needs --loopback and --impair"),
        "{o:?}"
    );
}

#[test]
fn qps_run_side_by_side_with_an_aggregate() {
    let out = bench(&[
        "write",
        "--loopback",
        "-s",
        "64K",
        "-n",
        "200",
        "-q",
        "3",
        "--verify",
    ]);
    for q in 0..3 {
        assert!(out.contains(&format!("(QP {q})")), "{out}");
    }
    assert!(out.contains("(aggregate of 3 QPs)"), "{out}");
    assert_eq!(out.matches("all correct").count(), 3, "{out}");
}

/// The CPUs every task of `pid` may run on (`Cpus_allowed_list` of each thread).
fn allowed_cpus(pid: u32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        })
        .collect()
}

#[test]
fn cpus_pins_every_thread_and_the_reference_process() {
    let mut child = Command::new(rdmesh_bin())
        .args([
            "bench",
            "write",
            "--loopback",
            "-s",
            "64K",
            "-D",
            "3",
            "--compare-tcp",
            "--cpus",
            "0",
        ])
        .env("RDMESH_STATS", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let start = Instant::now();
    let (mut bench_seen, mut peer_seen) = (false, false);
    while start.elapsed() < Duration::from_secs(20) && !(bench_seen && peer_seen) {
        let cpus = allowed_cpus(pid);
        if cpus.len() >= 3 {
            assert!(cpus.iter().all(|c| c == "0"), "bench threads: {cpus:?}");
            bench_seen = true;
        }
        // The reference peer: a child process running `reference-peer`.
        if let Ok(kids) = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")) {
            for kid in kids
                .split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok())
            {
                let cmd =
                    std::fs::read_to_string(format!("/proc/{kid}/cmdline")).unwrap_or_default();
                if cmd.contains("reference-peer") {
                    let cpus = allowed_cpus(kid);
                    if !cpus.is_empty() {
                        assert!(cpus.iter().all(|c| c == "0"), "reference peer: {cpus:?}");
                        peer_seen = true;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
    assert!(bench_seen, "never saw the bench's threads");
    assert!(peer_seen, "never saw the reference peer process");
}
