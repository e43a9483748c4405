//! `rdmesh bench --perftest-compat` against perftest's `ib_write_bw`, `ib_send_bw`,
//! `ib_read_bw` and `ib_write_lat` on Linux rdma_rxe in a QEMU guest: rdmesh as the client of
//! each guest server, then as the server of each guest client (8 runs, one guest boot).
//! Bandwidth runs move 200 messages of 16 KiB (16 packets each at path MTU 1024), the latency
//! runs 200 round trips of 64 bytes.
//!
//! Checked: every perftest run exits 0 and reports 200 iterations of the right size (the
//! WRITE/READ servers print the report rdmesh sent; the SEND server counts what arrived);
//! every rdmesh run completes (its servers check the client's report, the SEND server each
//! arrival's length, the WRITE server that data landed, the READ client that data came back);
//! rxe's hw_counters show no sequence errors, retries or RNR NAKs; on the bridge capture every
//! RoCEv2 frame passes the independent ICRC check, none is malformed, no ICMP, every frame
//! goes to UDP 4791 between the two IPv4 GIDs, both ends send and answer WRITE, SEND and READ
//! (first/middle/last and only) and ACK, and the largest frame each way is a 1024-byte WRITE
//! First (path MTU 1024).

mod qemu_common;

use std::time::Duration;

use qemu_common::{assert_clean_counters, rdmesh_ok, step_rc, GUEST_IP, HOST_IP};
use rdmesh_tests::wait_bounded;

const ITERS: &str = "200";
const BW_SIZE: &str = "16384";
const LAT_SIZE: &str = "64";

/// (step suffix, perftest tool, rdmesh bench arguments, size)
const TESTS: [(&str, &str, &[&str], &str); 4] = [
    ("write_bw", "ib_write_bw", &["write"], BW_SIZE),
    ("send_bw", "ib_send_bw", &["send"], BW_SIZE),
    ("read_bw", "ib_read_bw", &["read"], BW_SIZE),
    ("write_lat", "ib_write_lat", &["write", "--lat"], LAT_SIZE),
];

fn guest_script() -> String {
    let mut s = String::new();
    for (name, tool, _, size) in TESTS {
        s.push_str(&format!(
            "step srv_{name} {tool} -d rxe0 -x $GIDX -F -n {ITERS} -s {size}\n"
        ));
    }
    for (name, tool, _, size) in TESTS {
        s.push_str(&format!(
            "sleep 1; step cli_{name} retry {tool} -d rxe0 -x $GIDX -F -n {ITERS} -s {size} {HOST_IP}\n"
        ));
    }
    s
}

/// The result row perftest printed after step `step` started: `#bytes #iterations ...`.
fn perftest_row(console: &str, step: &str) -> Vec<String> {
    let from = console
        .find(&format!("QF_STEP {step}"))
        .unwrap_or_else(|| panic!("no step {step}"));
    let to = console[from..]
        .find(&format!("QF_RESULT {step}"))
        .map_or(console.len(), |i| from + i);
    console[from..to]
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            w.len() >= 4 && w[0].parse::<u64>().is_ok() && w[1].parse::<u64>().is_ok()
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn qemu_rxe_perftest() {
    let Some(mut lab) = qemu_common::lab("qemu_rxe_perftest") else {
        return;
    };
    lab.start_capture();
    lab.boot("g1", 0, GUEST_IP, &guest_script());

    // 1. rdmesh is the client of each perftest server.
    let mut at = 0;
    for (name, tool, bench, size) in TESTS {
        at = lab.wait_for(
            "g1",
            &format!("QF_STEP srv_{name}"),
            at,
            Duration::from_secs(300),
        );
        at = lab.wait_for(
            "g1",
            "Waiting for client to connect",
            at,
            Duration::from_secs(60),
        );
        let mut args = vec!["bench"];
        args.extend_from_slice(bench);
        args.extend_from_slice(&[
            GUEST_IP,
            "--perftest-compat",
            "-n",
            ITERS,
            "-s",
            size,
            "--timeout",
            "120",
        ]);
        let out = lab.run_rdmesh(&args, Duration::from_secs(240));
        let stdout = rdmesh_ok(&out, &format!("rdmesh as client of {tool}"));
        assert!(
            stdout.contains(&format!(
                "{tool} client done: {ITERS} iterations of {size} bytes"
            )),
            "{stdout}"
        );
        at = lab.wait_for(
            "g1",
            &format!("QF_RESULT srv_{name}"),
            at,
            Duration::from_secs(120),
        );
    }

    // 2. rdmesh is the server of each perftest client (which retries until it listens).
    for (name, tool, bench, size) in TESTS {
        let mut args = vec!["bench"];
        args.extend_from_slice(bench);
        args.extend_from_slice(&[
            "--perftest-compat",
            "-n",
            ITERS,
            "-s",
            size,
            "--timeout",
            "180",
        ]);
        let server = lab.spawn_rdmesh(&args);
        let out = wait_bounded(server, Duration::from_secs(300));
        let stdout = rdmesh_ok(&out, &format!("rdmesh as server of {tool}"));
        assert!(
            stdout.contains(&format!(
                "{tool} server done: {ITERS} iterations of {size} bytes"
            )),
            "{stdout}"
        );
        at = lab.wait_for(
            "g1",
            &format!("QF_RESULT cli_{name}"),
            at,
            Duration::from_secs(120),
        );
    }

    let console = lab.wait_done("g1", Duration::from_secs(120));
    for (name, tool, _, size) in TESTS {
        for side in ["srv", "cli"] {
            let step = format!("{side}_{name}");
            assert_eq!(step_rc(&console, &step), Some(0), "guest {tool} ({step})");
            let rows = perftest_row(&console, &step);
            assert!(
                rows.iter().any(|r| {
                    let w: Vec<&str> = r.split_whitespace().collect();
                    w[0] == size && w[1] == ITERS
                }),
                "guest {tool} ({step}) reports no row of {ITERS} iterations of {size} bytes: {rows:?}"
            );
        }
    }

    let pcap = lab.stop_capture();
    let spurious = lab.rxe_spurious_retries(&pcap);
    assert_clean_counters(&console, spurious);
    let roce = lab.check_capture(&pcap, false);
    // 6 bandwidth runs × 200 messages × 16 packets, plus the latency runs and ACKs.
    assert!(roce >= 19_200, "only {roce} RoCEv2 frames captured");
    // UDP 8 + BTH 12 + RETH 16 + 1024 payload + ICRC 4: a WRITE First at path MTU 1024.
    let facts = lab.wire_facts(&pcap);
    facts.assert_rdmesh_rxe(1064);
    // SEND First/Middle/Last, WRITE First/Middle/Last/Only, READ request, READ response
    // First/Middle/Last, ACK: both ends are requester and responder of every operation.
    for src in [HOST_IP, GUEST_IP] {
        let ops = &facts.opcodes[src];
        for op in [0u8, 1, 2, 6, 7, 8, 10, 12, 13, 14, 15, 17] {
            assert!(ops.contains(&op), "no opcode {op} from {src}: {ops:?}");
        }
    }
    lab.log(&format!("{roce} RoCEv2 frames checked"));
}
