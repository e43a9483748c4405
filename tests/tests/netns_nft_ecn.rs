//! Real CE marks (root and nftables; CI runs as root): two senders into one receiver. Three
//! network namespaces: senders s0 (10.92.1.1) and s1 (10.92.2.1), each joined by its own veth
//! pair to the receiver r (10.92.1.2, 10.92.2.2). In r's prerouting hook one nftables rule
//! marks every RoCEv2 packet above a shared rate CE — `udp dport 4791 limit rate over
//! 1 mbytes/second ... ip ecn set ce` (one token bucket for both flows: a congested switch
//! port). Two `rdmesh bench write` servers run in r; each sender runs `rdmesh bench write -D 8
//! --dcqcn --dcqcn-line-rate 1000 --report-interval 250` at the same time.
//!
//! Checks: CNPs flow (each server's QP sent CNPs, each sender's QP received them, and the
//! marks the servers saw are the marks the rule made, give or take packets still in flight);
//! both senders' DCQCN rates fell below the line rate (`lowest_rate_mbps`, and `rate_mbps` in
//! the trace); and the goodputs are fair once converged: Jain's index of the two senders'
//! average goodputs over the window from 3 s after both started to the end is at least 0.9.
//! Prints both rate traces aligned on wall-clock time, and Jain's index per 1 s window.
//!
//! Rates are kept moderate (line rate 1000 Mb/s, a shared 8 Mb/s marking threshold, 8 s each)
//! so that the test stays bounded (< 60 s) on a loaded 2-core machine.

mod netns_nft_common;

use std::process::Command;
use std::time::Duration;

use netns_nft_common::*;
use rdmesh_tests::{assert_ok, rdmesh_bin, scratch, wait_bounded, NetnsFabric};

const TABLE: &str = "rdmesh_ecn";
const DURATION_S: &str = "8";
const LINE_RATE: u64 = 1000;
/// Jain's index is taken from this long after both senders started.
const CONVERGE_S: f64 = 3.0;

/// One trace line: (unix ms, goodput Mb/s over the interval, current rate Mb/s).
type Sample = (u64, f64, u64);

fn trace(out: &str) -> Vec<Sample> {
    out.lines()
        .filter(|l| l.trim_start().starts_with("trace "))
        .map(|l| {
            let kv = |k: &str| -> &str {
                l.split_whitespace()
                    .find_map(|t| t.strip_prefix(k).and_then(|r| r.strip_prefix('=')))
                    .unwrap_or_else(|| panic!("no {k} in {l}"))
            };
            (
                kv("unix_ms").parse().unwrap(),
                kv("goodput_mbps").parse().unwrap(),
                kv("rate_mbps").parse().unwrap(),
            )
        })
        .collect()
}

fn jain(x: &[f64]) -> f64 {
    let s: f64 = x.iter().sum();
    let q: f64 = x.iter().map(|v| v * v).sum();
    if q == 0.0 {
        0.0
    } else {
        s * s / (x.len() as f64 * q)
    }
}

/// Mean goodput of the samples that end in `[from, to)` (ms).
fn mean(t: &[Sample], from: u64, to: u64) -> Option<f64> {
    let v: Vec<f64> = t
        .iter()
        .filter(|s| s.0 >= from && s.0 < to)
        .map(|s| s.1)
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

#[test]
fn netns_nft_ecn() {
    if !available() {
        return;
    }
    let f = NetnsFabric::new("nftecn", 3);
    f.link(0, "a0", "10.92.1.1/24", 2, "r0", "10.92.1.2/24", 9000);
    f.link(1, "a1", "10.92.2.1/24", 2, "r1", "10.92.2.2/24", 9000);
    nft_load(
        &f,
        2,
        &format!(
            "table inet {TABLE} {{
  counter marked {{}}
  chain pre {{
    type filter hook prerouting priority -150; policy accept;
    udp dport 4791 limit rate over 1 mbytes/second burst 64 kbytes counter name marked ip ecn set ce
  }}
}}
"
        ),
    );
    let dir = scratch("nftecn");
    let servers: Vec<Server> = (0..2)
        .map(|i| {
            Server::start(
                &f,
                2,
                &[
                    "write",
                    "-p",
                    &format!("{}", 18701 + i),
                    "--counters",
                    "--timeout",
                    "30",
                ],
                dir.join(format!("server{i}.err")),
            )
        })
        .collect();
    let clients: Vec<_> = (0..2)
        .map(|i| {
            let mut c: Command = f.command(i, &rdmesh_bin());
            c.args([
                "bench",
                "write",
                &format!("10.92.{}.2", i + 1),
                "-p",
                &format!("{}", 18701 + i),
                "-s",
                "64K",
                "-D",
                DURATION_S,
                "--dcqcn",
                "--dcqcn-line-rate",
                &LINE_RATE.to_string(),
                "--report-interval",
                "250",
                "--counters",
                "--timeout",
                "30",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
            c.spawn().expect("spawning a sender")
        })
        .collect();
    let outs: Vec<String> = clients
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            assert_ok(
                &wait_bounded(c, Duration::from_secs(45)),
                &format!("sender {i}"),
            )
        })
        .collect();
    let souts: Vec<String> = servers
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let (o, err) = s.finish(Duration::from_secs(15));
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(o.status.success(), "server {i} failed\n{text}\n{err}");
            text
        })
        .collect();
    let marked = nft_counter(&f, 2, TABLE, "marked");
    // CNPs flow both ends of each connection.
    let mut ce_total = 0;
    for i in 0..2 {
        let (cq, cd) = counters(&outs[i], "client");
        let (sq, _) = counters(&souts[i], "server");
        let what = format!("sender {i}");
        let (ce, cnp_tx, cnp_rx) = (
            get(&sq, "ce_marks_received", &what),
            get(&sq, "cnps_sent", &what),
            get(&cq, "cnps_received", &what),
        );
        ce_total += ce;
        println!(
            "{what}: receiver saw {ce} CE marks and sent {cnp_tx} CNPs; sender received {cnp_rx} CNPs (device {}), {} rate cuts, lowest rate {} Mb/s",
            get(&cd, "cnp_received", &what),
            get(&cq, "rate_decreases", &what),
            get(&cq, "lowest_rate_mbps", &what)
        );
        assert!(
            ce > 0 && cnp_tx > 0,
            "{what}: no CE marks / CNPs at the receiver"
        );
        assert!(cnp_tx <= ce, "{what}: more CNPs than CE marks");
        assert!(cnp_rx > 0, "{what}: the sender received no CNP");
        assert!(
            cnp_rx <= cnp_tx,
            "{what}: received more CNPs than were sent"
        );
        assert!(
            get(&cq, "lowest_rate_mbps", &what) < LINE_RATE,
            "{what}: DCQCN never cut the rate"
        );
    }
    println!("nft marked {marked} packets CE; the receivers counted {ce_total}");
    assert!(
        ce_total <= marked && marked - ce_total <= 64,
        "CE marks counted by the receivers ({ce_total}) differ from the rule's ({marked})"
    );
    // The traces, aligned on wall-clock time.
    let t: Vec<Vec<Sample>> = outs.iter().map(|o| trace(o)).collect();
    assert!(t.iter().all(|x| x.len() >= 8), "too few trace lines: {t:?}");
    let start = t[0][0].0.max(t[1][0].0);
    let end = t[0].last().unwrap().0.min(t[1].last().unwrap().0);
    println!("rate trace (s since both started: sender 0 goodput/rate Mb/s | sender 1)");
    for (i, tr) in t.iter().enumerate() {
        for s in tr {
            println!(
                "  {:>6.2}  sender {i}: goodput {:>8.2} rate {:>5}",
                (s.0 as f64 - start as f64) / 1e3,
                s.1,
                s.2
            );
        }
    }
    // Rates fell below the line rate in the trace too.
    for (i, tr) in t.iter().enumerate() {
        assert!(
            tr.iter().any(|s| s.2 > 0 && s.2 < LINE_RATE),
            "sender {i}: no trace sample below the line rate"
        );
    }
    let mut w = start;
    while w + 1000 <= end {
        if let (Some(a), Some(b)) = (mean(&t[0], w, w + 1000), mean(&t[1], w, w + 1000)) {
            println!(
                "  window {:>4.1}-{:>4.1} s: goodput {a:>8.2} / {b:>8.2} Mb/s, Jain {:.3}",
                (w - start) as f64 / 1e3,
                (w + 1000 - start) as f64 / 1e3,
                jain(&[a, b])
            );
        }
        w += 1000;
    }
    let from = start + (CONVERGE_S * 1e3) as u64;
    assert!(
        end >= from + 2000,
        "the senders overlapped for less than {CONVERGE_S} + 2 s"
    );
    let a = mean(&t[0], from, end + 1).unwrap();
    let b = mean(&t[1], from, end + 1).unwrap();
    let j = jain(&[a, b]);
    println!(
        "converged window {CONVERGE_S}-{:.1} s: goodput {a:.2} / {b:.2} Mb/s, Jain {j:.3}",
        (end - start) as f64 / 1e3
    );
    assert!(
        j >= 0.9,
        "Jain's index {j:.3} < 0.9 ({a:.2} vs {b:.2} Mb/s)"
    );
    let _ = std::fs::remove_dir_all(dir);
}
