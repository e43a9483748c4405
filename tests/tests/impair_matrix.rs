//! RC loss recovery under the soft provider's seeded impairment layer (`rdmesh bench --impair`):
//! loss 0.1/1/5/10 %, duplication, reordering and corruption at 1 % each, and all combined
//! with a 100 µs delay, each with RDMA WRITE, SEND and READ (`--loopback --verify`: every
//! byte checked against the pattern, every completion successful, in order).
//!
//! The counters each end prints (`--counters`) must agree with what the impairment layer did:
//! - every packet the QP produced left the device, was dropped, or is still held
//!   (`qp.tx_packets + impair.duplicated = device.tx_packets + impair.dropped + held`, held
//!   only where packets can be held: reorder, delay);
//! - loss forces retransmissions (`retransmitted_packets > 0` on the requester);
//! - every corrupted packet that arrived was counted as an ICRC error by its receiver, and no
//!   other packet was (`icrc_errors ≤ impair.corrupted` of the peer, equal up to packets still
//!   in flight when the counters were read);
//! - nothing was received that the peer did not send.
//!
//! Loss 1 % also runs with `--recovery selective` (IRN-style selective repeat).

use std::process::Command;
use std::time::{Duration, Instant};

use rdmesh_tests::{assert_ok, bench_counters as counters, rdmesh_bin, run_bounded, Counters};

struct Case {
    impair: &'static str,
    /// Messages of 64 KiB (16 packets each at path MTU 4096).
    n: u32,
    loss: bool,
    corrupt: bool,
    holds: bool,
}

const CASES: &[Case] = &[
    Case {
        impair: "loss=0.1%,seed=11",
        n: 300,
        loss: true,
        corrupt: false,
        holds: false,
    },
    Case {
        impair: "loss=1%,seed=12",
        n: 300,
        loss: true,
        corrupt: false,
        holds: false,
    },
    Case {
        impair: "loss=5%,seed=13",
        n: 60,
        loss: true,
        corrupt: false,
        holds: false,
    },
    Case {
        impair: "loss=10%,seed=14",
        n: 30,
        loss: true,
        corrupt: false,
        holds: false,
    },
    Case {
        impair: "dup=1%,seed=15",
        n: 200,
        loss: false,
        corrupt: false,
        holds: false,
    },
    Case {
        impair: "reorder=1%,seed=16",
        n: 200,
        loss: false,
        corrupt: false,
        holds: true,
    },
    Case {
        impair: "corrupt=1%,seed=17",
        n: 200,
        loss: false,
        corrupt: true,
        holds: false,
    },
    Case {
        impair: "loss=1%,dup=1%,reorder=1%,corrupt=1%,delay=100us,seed=18",
        n: 150,
        loss: true,
        corrupt: true,
        holds: true,
    },
];

/// Runs one bench and checks its counters; returns (client, server) counters and the time.
fn run_case(mode: &str, case: &Case, recovery: &str) -> Duration {
    // Enough packets that 0.1 % loss drops some on the requester's side (4800 data packets
    // of 4 KiB), few enough that the matrix stays under a minute (fewer messages at 5 and
    // 10 % loss, where go-back-N resends most of each window).
    let (size, n) = ("64K", case.n.to_string());
    let mut cmd = Command::new(rdmesh_bin());
    cmd.args([
        "bench",
        mode,
        "--loopback",
        "--verify",
        "-s",
        size,
        "-n",
        &n,
        "--timeout",
        "20",
        "--impair",
        case.impair,
        "--recovery",
        recovery,
        "--counters",
    ]);
    let t = Instant::now();
    let out = run_bounded(cmd, Duration::from_secs(60));
    let elapsed = t.elapsed();
    let what = format!(
        "rdmesh bench {mode} --impair {} --recovery {recovery}",
        case.impair
    );
    let stdout = assert_ok(&out, &what);
    assert!(
        stdout.contains("all correct"),
        "{what}: no verification line\n{stdout}"
    );
    let (cq, cd) = counters(&stdout, "client");
    let (sq, sd) = counters(&stdout, "server");
    let g = |m: &Counters, k: &str| *m.get(k).unwrap_or_else(|| panic!("{what}: no {k}"));
    println!(
        "{what}: {:.2} s; client qp tx {} retx {} timeouts {} naks_rx {}; server qp rx {} dup {} oos {} ooo_placed {}; client dev dropped {} dup {} reord {} corrupt {} icrc {}; server dev dropped {} dup {} reord {} corrupt {} icrc {}",
        elapsed.as_secs_f64(),
        g(&cq, "tx_packets"),
        g(&cq, "retransmitted_packets"),
        g(&cq, "timeouts"),
        g(&cq, "naks_received.psn_sequence"),
        g(&sq, "rx_packets"),
        g(&sq, "duplicate_requests"),
        g(&sq, "out_of_sequence_requests"),
        g(&sq, "out_of_order_placed"),
        g(&cd, "impair.dropped"),
        g(&cd, "impair.duplicated"),
        g(&cd, "impair.reordered"),
        g(&cd, "impair.corrupted"),
        g(&cd, "icrc_errors"),
        g(&sd, "impair.dropped"),
        g(&sd, "impair.duplicated"),
        g(&sd, "impair.reordered"),
        g(&sd, "impair.corrupted"),
        g(&sd, "icrc_errors"),
    );
    // Conservation on each end: produced + duplicates = sent + dropped + coalesced ACKs (+ still
    // held).
    for (role, q, d) in [("client", &cq, &cd), ("server", &sq, &sd)] {
        let produced = g(q, "tx_packets") + g(d, "impair.duplicated");
        let accounted = g(d, "tx_packets") + g(d, "impair.dropped") + g(d, "acks_coalesced");
        // A delay/reorder queue may still hold up to a window of packets (128 PSNs, the
        // requester's limit) and their ACKs when the counters are printed.
        let slack = if case.holds { 160 } else { 0 };
        assert!(
            accounted <= produced && produced - accounted <= slack,
            "{what}: {role}: QP produced {} (+{} duplicates) but the device sent {} and dropped {}",
            g(q, "tx_packets"),
            g(d, "impair.duplicated"),
            g(d, "tx_packets"),
            g(d, "impair.dropped")
        );
        assert_eq!(g(d, "tx_errors"), 0, "{what}: {role}: kernel send errors");
        assert_eq!(g(d, "malformed"), 0, "{what}: {role}");
        assert_eq!(g(d, "wrong_source"), 0, "{what}: {role}");
    }
    // Nothing arrives that the peer did not send. Each end prints its counters when it is
    // done, so a packet the reorder layer still held then may be sent (and arrive) later:
    // the same slack as above.
    let slack = if case.holds { 160 } else { 0 };
    assert!(
        g(&sd, "rx_packets") <= g(&cd, "tx_packets") + slack,
        "{what}"
    );
    assert!(
        g(&cd, "rx_packets") <= g(&sd, "tx_packets") + slack,
        "{what}"
    );
    if case.loss {
        assert!(
            g(&cd, "impair.dropped") + g(&sd, "impair.dropped") > 0,
            "{what}: nothing dropped"
        );
        // Every packet the client sends is a request, so losing one must cause a
        // retransmission; a lost ACK from the server may be covered by a later one.
        if g(&cd, "impair.dropped") > 0 {
            assert!(
                g(&cq, "retransmitted_packets") > 0,
                "{what}: requests lost without retransmissions"
            );
        }
    } else {
        assert_eq!(g(&cd, "impair.dropped") + g(&sd, "impair.dropped"), 0);
    }
    // ICRC errors are exactly the corrupted packets that arrived.
    for (rx, tx, dir) in [(&sd, &cd, "client->server"), (&cd, &sd, "server->client")] {
        let (icrc, corrupted) = (g(rx, "icrc_errors"), g(tx, "impair.corrupted"));
        assert!(
            icrc <= corrupted && corrupted - icrc <= if case.holds { 8 } else { 2 },
            "{what}: {dir}: {corrupted} packets corrupted but {icrc} ICRC errors counted"
        );
    }
    if case.corrupt {
        assert!(
            g(&cd, "impair.corrupted") + g(&sd, "impair.corrupted") > 0,
            "{what}: nothing corrupted"
        );
    }
    elapsed
}

#[test]
fn every_message_survives_the_impairment_matrix_with_consistent_counters() {
    let start = Instant::now();
    let mut runs = 0;
    for case in CASES {
        for mode in ["write", "send", "read"] {
            run_case(mode, case, "go-back-n");
            runs += 1;
        }
    }
    for mode in ["write", "send", "read"] {
        run_case(mode, &CASES[1], "selective");
        runs += 1;
    }
    run_case("write", &CASES[7], "selective");
    runs += 1;
    println!(
        "{runs} impaired runs in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
