//! Real kernel drops (root and nftables; CI runs as root): two network namespaces joined by a
//! veth pair (MTU 9000, path MTU 4096), and in each namespace's input hook the nftables rule
//! `udp dport 4791 numgen random mod 100 < N counter drop`, N = 0 (the loss-free reference,
//! through the same rule), 1 and 5 — so data packets and ACKs are both lost. `rdmesh bench
//! write|send|read --verify` run across, under go-back-N and selective repeat. Each run must
//! deliver every message byte-exact (`Verified ... all correct`), complete every WR
//! successfully (the bench exits 0), and its counters must agree with the kernel's: the rule's
//! own counter shows drops, the requester retransmitted, and what the receiver's device saw is
//! what the sender's device sent less what the rule dropped. Selective repeat resends no more
//! than twice what the kernel dropped, plus what its timeouts resent (no retransmission storm).
//!
//! Prints per case: goodput (MB/s, the bench's average), kernel drops each way, retransmits,
//! timeouts, NAKs; then, per operation at 1 %, selective repeat against the loss-free
//! reference and against go-back-N (issue 13's bar: ≥ 0.8× and ≥ 2×; printed, not asserted —
//! timing on a shared CI machine is too noisy to fail a build on). The 0 % and 1 % cases send
//! 1000 × 64 KiB, ~0.2 s each; `RDMESH_NFT_LOSS_MESSAGES=N` sends N instead, for runs long
//! enough to measure by.

mod netns_nft_common;

use std::time::{Duration, Instant};

use netns_nft_common::*;
use rdmesh_tests::{assert_ok, run_bounded, scratch, NetnsFabric};

const TABLE: &str = "rdmesh_loss";
const SERVER_IP: &str = "10.91.0.2";

fn rules(percent: u32) -> String {
    let drop = if percent > 0 {
        format!("udp dport 4791 numgen random mod 100 < {percent} counter name dropped drop")
    } else {
        String::new()
    };
    format!(
        "table inet {TABLE} {{
  counter dropped {{}}
  counter seen {{}}
  chain input {{
    type filter hook input priority 0; policy accept;
    udp dport 4791 counter name seen
    {drop}
  }}
}}
"
    )
}

/// Installs the loss rule with `percent` in both namespaces (replacing an earlier one).
fn set_loss(f: &NetnsFabric, percent: u32) {
    for ns in 0..2 {
        let _ = std::process::Command::new("ip")
            .args([
                "netns",
                "exec",
                f.ns(ns),
                "nft",
                "delete",
                "table",
                "inet",
                TABLE,
            ])
            .output();
        nft_load(f, ns, &rules(percent));
    }
}

struct Measured {
    what: String,
    goodput_mbs: f64,
    drops_to_server: u64,
    drops_to_client: u64,
    retransmits: u64,
    timeouts: u64,
    secs: f64,
    mode: String,
    percent: u32,
    recovery: String,
}

fn run_case(f: &NetnsFabric, mode: &str, percent: u32, recovery: &str, n: u32) -> Measured {
    set_loss(f, percent);
    let what =
        format!("bench {mode} --verify, nft drop {percent}% each way, --recovery {recovery}");
    let port = "18600";
    let dir = scratch(&format!("nftloss-{mode}-{percent}-{recovery}"));
    let server = Server::start(
        f,
        1,
        &[
            mode,
            "-p",
            port,
            "--udp-port",
            "4791",
            "--counters",
            "--timeout",
            "30",
        ],
        dir.join("server.err"),
    );
    let t = Instant::now();
    let mut c = f.command(0, &rdmesh_tests::rdmesh_bin());
    c.args([
        "bench",
        mode,
        SERVER_IP,
        "-p",
        port,
        "--udp-port",
        "4791",
        "--verify",
        "-s",
        "64K",
        "-n",
        &n.to_string(),
        "--recovery",
        recovery,
        "--counters",
        "--timeout",
        "30",
    ]);
    let client = run_bounded(c, Duration::from_secs(90));
    let secs = t.elapsed().as_secs_f64();
    let (sout, serr) = server.finish(Duration::from_secs(30));
    let cout = assert_ok(&client, &format!("client: {what}"));
    let sout_text = String::from_utf8_lossy(&sout.stdout).into_owned();
    assert!(
        sout.status.success(),
        "server: {what} failed\n{sout_text}\n{serr}"
    );
    assert!(
        cout.contains("all correct"),
        "{what}: every byte must be verified\n{cout}"
    );
    let goodput_mbs = bw_average(&cout, 65536);
    let (cq, cd) = counters(&cout, "client");
    let (sq, sd) = counters(&sout_text, "server");
    let drops_to_server = nft_counter(f, 1, TABLE, "dropped");
    let drops_to_client = nft_counter(f, 0, TABLE, "dropped");
    let seen_server = nft_counter(f, 1, TABLE, "seen");
    let seen_client = nft_counter(f, 0, TABLE, "seen");
    let retransmits = get(&cq, "retransmitted_packets", &what);
    let m = Measured {
        what: what.clone(),
        goodput_mbs,
        drops_to_server,
        drops_to_client,
        retransmits,
        timeouts: get(&cq, "timeouts", &what),
        secs,
        mode: mode.into(),
        percent,
        recovery: recovery.into(),
    };
    println!(
        "{what}: {n} x 64 KiB in {secs:.2} s, goodput {goodput_mbs:.1} MB/s; kernel dropped {drops_to_server} of {seen_server} to the server, {drops_to_client} of {seen_client} to the client; client retransmitted {retransmits}, timeouts {}, NAKs received {}; server NAKs sent {}, duplicates {}, out-of-sequence {}",
        m.timeouts,
        get(&cq, "naks_received.psn_sequence", &what),
        get(&sq, "naks_sent.psn_sequence", &what),
        get(&sq, "duplicate_requests", &what),
        get(&sq, "out_of_sequence_requests", &what),
    );
    // Requests travel to the server, READ responses to the client.
    let data_drops = if mode == "read" {
        drops_to_client
    } else {
        drops_to_server
    };
    if percent > 0 {
        // The rule dropped data packets, so the requester resent.
        assert!(data_drops > 0, "{what}: the nft rule dropped no data");
        assert!(retransmits > 0, "{what}: drops but no retransmission");
    }
    if recovery == "selective" {
        // No storm: each resend answers a drop (a lost ACK or SACK can cost one more), or a
        // timeout — a host that stalls past the 4 ms floor resends at most 3 packets for it.
        let lost = drops_to_server + drops_to_client;
        assert!(
            retransmits <= 2 * lost + 3 * m.timeouts + 4,
            "{what}: {retransmits} packets resent for {lost} dropped and {} timeouts",
            m.timeouts
        );
    }
    // Every packet the kernel let through reached the device (nothing else uses port 4791 in
    // these namespaces): device rx = rule's seen − dropped, give or take packets still in
    // flight when a process printed its counters.
    for (role, d, seen, dropped) in [
        ("server", &sd, seen_server, drops_to_server),
        ("client", &cd, seen_client, drops_to_client),
    ] {
        let rx = get(d, "rx_packets", &what);
        let passed = seen - dropped;
        assert!(
            rx <= passed && passed - rx <= 16,
            "{what}: {role} device received {rx} packets, the kernel passed {passed} ({seen} seen, {dropped} dropped)"
        );
        assert_eq!(get(d, "icrc_errors", &what), 0, "{what}: {role}");
        assert_eq!(get(d, "wrong_source", &what), 0, "{what}: {role}");
    }
    // What a device sent either was dropped by the peer's rule or passed it.
    for (from, d, seen_at_peer) in [("client", &cd, seen_server), ("server", &sd, seen_client)] {
        let tx = get(d, "tx_packets", &what);
        assert!(
            seen_at_peer <= tx && tx - seen_at_peer <= 16,
            "{what}: {from} sent {tx} packets but the peer's rule saw {seen_at_peer}"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    m
}

#[test]
fn netns_nft_loss() {
    if !available() {
        return;
    }
    let f = NetnsFabric::new("nftloss", 2);
    f.link(0, "na", "10.91.0.1/24", 1, "nb", "10.91.0.2/24", 9000);
    let mut results = Vec::new();
    // RDMESH_NFT_LOSS_MESSAGES: messages of the 0 % and 1 % cases (default 1000, ~0.2 s a
    // run, mostly start-up); more make the printed ratios a measurement.
    let n = std::env::var("RDMESH_NFT_LOSS_MESSAGES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1000);
    for (percent, n) in [(0u32, n), (1, n), (5, 60)] {
        for mode in ["write", "send", "read"] {
            for recovery in ["go-back-n", "selective"] {
                results.push(run_case(&f, mode, percent, recovery, n));
            }
        }
    }
    println!("summary (goodput MB/s, drops to server/client, retransmits, timeouts, seconds):");
    for m in &results {
        println!(
            "  {:<70} {:>8.1} {:>5}/{:<5} {:>6} {:>4} {:>6.2}",
            m.what,
            m.goodput_mbs,
            m.drops_to_server,
            m.drops_to_client,
            m.retransmits,
            m.timeouts,
            m.secs
        );
    }
    let goodput = |mode: &str, percent: u32, recovery: &str| {
        results
            .iter()
            .find(|m| m.mode == mode && m.percent == percent && m.recovery == recovery)
            .map_or(0.0, |m| m.goodput_mbs)
    };
    println!(
        "at 1 % (selective / loss-free selective, selective / go-back-N; issue 13: >= 0.8, >= 2):"
    );
    for mode in ["write", "send", "read"] {
        let sr = goodput(mode, 1, "selective");
        println!(
            "  {mode:<5} {:.2}x {:.2}x",
            sr / goodput(mode, 0, "selective"),
            sr / goodput(mode, 1, "go-back-n")
        );
    }
}
