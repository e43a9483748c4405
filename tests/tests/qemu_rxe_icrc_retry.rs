//! rdma_rxe enforces the ICRC by dropping a bad packet silently; the RC retry paths must
//! recover. `rdmesh pingpong` runs against the guest's `ibv_rc_pingpong` with one packet sent
//! with a corrupted ICRC (rdmesh's test-only `--corrupt-icrc-packet N`), twice:
//!
//! 1. rdmesh as client, packet 2 corrupted: the SEND Middle of the first message. rxe drops it,
//!    sees the next packet out of sequence and NAKs (PSN sequence error, rxe counter
//!    `out_of_seq_request`); rdmesh goes back and retransmits from the lost PSN.
//! 2. rdmesh as server, packet 1 corrupted: its ACK of the client's first message. rxe drops
//!    it, its retransmit timer fires and it resends the message (rxe counter
//!    `completer_retry_err`); rdmesh sees duplicates and ACKs again.
//!
//! Both runs must complete every iteration on both ends. The bridge capture shows exactly
//! those two frames with a bad ICRC (independent checker) and every other RoCEv2 frame valid;
//! no frame is malformed and no ICMP appears.

mod qemu_common;

use std::time::Duration;

use qemu_common::{counter, rdmesh_ok, step_rc, GUEST_IP, HOST_IP};
use rdmesh_tests::wait_bounded;

const ITERS: &str = "50";

/// The value after the word `key` in rdmesh pingpong's counter line (`... key N ...`).
fn rdmesh_counter(stdout: &str, key: &str) -> u64 {
    let words: Vec<&str> = stdout
        .split(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .find_map(|w| (w[0] == key).then(|| w[1].parse().ok()).flatten())
        .unwrap_or_else(|| panic!("no {key} in rdmesh's output:\n{stdout}"))
}

#[test]
fn qemu_rxe_icrc_retry() {
    let Some(mut lab) = qemu_common::lab("qemu_rxe_icrc_retry") else {
        return;
    };
    lab.start_capture();
    lab.boot(
        "g1",
        0,
        GUEST_IP,
        &format!(
            "step pp_server ibv_rc_pingpong -d rxe0 -g $GIDX -n {ITERS} -s 4096\n\
             counters\n\
             step pp_client retry ibv_rc_pingpong -d rxe0 -g $GIDX -n {ITERS} -s 4096 {HOST_IP}\n"
        ),
    );

    // 1. A lost SEND Middle: NAK and go-back-N.
    let at = lab.wait_for("g1", "QF_STEP pp_server", 0, Duration::from_secs(300));
    lab.wait_for("g1", "local address", at, Duration::from_secs(60));
    let out = lab.run_rdmesh(
        &[
            "pingpong",
            GUEST_IP,
            "-g",
            "1",
            "-n",
            ITERS,
            "--timeout",
            "120",
            "--corrupt-icrc-packet",
            "2",
        ],
        Duration::from_secs(240),
    );
    let client = rdmesh_ok(&out, "rdmesh pingpong client, packet 2 corrupted");
    assert!(client.contains(&format!("{ITERS} iters in")), "{client}");
    assert_eq!(rdmesh_counter(&client, "tx_icrc_corrupted"), 1);
    assert!(
        rdmesh_counter(&client, "retransmitted_packets") >= 1,
        "{client}"
    );

    // 2. A lost ACK: rxe's retransmit timer, duplicates at rdmesh.
    let server = lab.spawn_rdmesh(&[
        "pingpong",
        "-g",
        "1",
        "-n",
        ITERS,
        "--timeout",
        "180",
        "--corrupt-icrc-packet",
        "1",
    ]);
    let out = wait_bounded(server, Duration::from_secs(300));
    let served = rdmesh_ok(&out, "rdmesh pingpong server, packet 1 corrupted");
    assert!(served.contains(&format!("{ITERS} iters in")), "{served}");
    assert_eq!(rdmesh_counter(&served, "tx_icrc_corrupted"), 1);
    assert!(
        rdmesh_counter(&served, "duplicate_requests") >= 1,
        "{served}"
    );

    let console = lab.wait_done("g1", Duration::from_secs(240));
    assert_eq!(
        step_rc(&console, "pp_server"),
        Some(0),
        "guest ibv_rc_pingpong server"
    );
    assert_eq!(
        step_rc(&console, "pp_client"),
        Some(0),
        "guest ibv_rc_pingpong client"
    );
    eprintln!(
        "rxe hw_counters after both runs: {:?}",
        qemu_common::counters(&console)
    );
    // The guest prints its counters after each run: the first set is after run 1.
    let after_first = &console[..console.find("QF_STEP pp_client").expect("second step")];
    assert!(
        counter(after_first, "out_of_seq_request") >= 1,
        "rxe did not see the gap left by the dropped SEND Middle"
    );
    let rest = &console[console.find("QF_STEP pp_client").unwrap()..];
    assert!(
        counter(rest, "completer_retry_err") >= 1,
        "rxe did not retransmit after the dropped ACK"
    );
    for c in ["retry_exceeded_err", "retry_rnr_exceeded_err", "send_err"] {
        assert_eq!(counter(rest, c), 0, "rxe counter {c}");
    }

    let pcap = lab.stop_capture();
    let (roce, bad) = lab.icrc_check(&pcap, false);
    assert_eq!(
        bad.len(),
        2,
        "exactly the two corrupted frames fail the ICRC check: {bad:?}"
    );
    let mut ops = Vec::new();
    for frame in &bad {
        let f = lab.tshark_fields(
            &pcap,
            &format!("frame.number == {frame}"),
            &["ip.src", "infiniband.bth.opcode"],
        );
        let v: Vec<&str> = f[0].split('\t').collect();
        assert_eq!(v[0], HOST_IP, "corrupted frame {frame} comes from rdmesh");
        ops.push(v[1].to_string());
    }
    // SEND Middle (1) in run 1, ACK (17) in run 2.
    assert_eq!(ops, ["1", "17"], "opcodes of the corrupted frames");
    lab.check_dissection(&pcap, roce);
    lab.log(&format!(
        "{roce} RoCEv2 frames, 2 corrupted on purpose, all others valid"
    ));
}
