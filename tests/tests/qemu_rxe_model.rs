//! A model-backed endpoint (`--provider model`: the vfio provider's mlx5 driver against the
//! device model, the model's port on a UDP socket) against Linux rdma_rxe in a QEMU guest —
//! an independent judge of the model's wire behaviour: `ibv_rc_pingpong` (rdmesh as client,
//! then as server; 200 SENDs of 4096 bytes each way, `-c` on both ends) and `ib_write_bw`
//! (rdmesh as client of the guest's server, then server of its client; 200 WRITEs of 16 KiB).
//!
//! The model's port receives through a raw socket (rxe puts non-zero IP IDs on its packets and
//! the ICRC covers them); the guest's MAC comes from the kernel's neighbour entry, which the
//! out-of-band TCP connection filled (rc_pingpong's and perftest's exchanges carry none).
//! Checked: every run exits 0 with every iteration; rxe's hw_counters show no sequence errors
//! or RNR NAKs, and no more duplicates than the model sent again; the model never NAKs and
//! never retransmits before its ACK timeout (a TCG guest may stall past it, so a retransmission
//! after the timeout is correct behaviour, not noise to hide); every RoCEv2 frame on the bridge
//! passes the independent ICRC check, none is malformed, no ICMP; every frame goes to UDP 4791
//! between the two GIDs; rdmesh's frames carry IPv4 ID 0 and rxe's non-zero IDs.

mod qemu_common;

use std::time::Duration;

use std::collections::HashMap;
use std::path::Path;

use qemu_common::{counter, rdmesh_ok, step_rc, Lab, GUEST_IP, HOST_IP};
use rdmesh_tests::wait_bounded;

/// The QPs' local ACK timeout, 4.096 µs · 2^14, less a little for capture timestamps.
const ACK_TIMEOUT_S: f64 = 0.060;

/// Retransmissions on the bridge: `(rdmesh's, rxe's)` packets sent again. A TCG guest can stall
/// for longer than the ACK timeout, so either end may time out legitimately; what must hold is
/// that rdmesh never retransmits before its timeout expired (a model timer bug) and never
/// NAKs, and that every rdmesh retransmission is one rxe counts as a duplicate request.
fn retransmissions(lab: &Lab, pcap: &Path) -> (u64, u64) {
    let rows = lab.tshark_fields(
        pcap,
        "infiniband",
        &[
            "frame.number",
            "frame.time_relative",
            "ip.src",
            "udp.srcport",
            "infiniband.bth.destqp",
            "infiniband.bth.opcode",
            "infiniband.bth.psn",
            "infiniband.aeth.syndrome",
        ],
    );
    let mut first = HashMap::new();
    let (mut ours, mut theirs) = (0, 0);
    for r in &rows {
        let v: Vec<&str> = r.split('\t').collect();
        let (frame, src) = (v[0], v[2]);
        let t: f64 = v[1].parse().expect("time");
        let op: u8 = v[5].parse().expect("opcode");
        let psn: u32 = v[6].parse().expect("psn");
        if op == 17 {
            let syndrome: u8 = v[7].parse().unwrap_or(0);
            assert!(
                src != HOST_IP || syndrome >> 5 == 0,
                "rdmesh (model) sent a NAK (syndrome {syndrome:#04x}): frame {frame}"
            );
            continue;
        }
        if src == HOST_IP && (13..=16).contains(&op) {
            continue; // READ responses repeat when rxe repeats a READ request
        }
        let key = (src.to_string(), v[3].to_string(), v[4].to_string(), psn);
        match first.get(&key) {
            Some(&t0) => {
                let dt: f64 = t - t0;
                if src == HOST_IP {
                    assert!(
                        dt >= ACK_TIMEOUT_S,
                        "the model retransmitted PSN {psn} (frame {frame}) {:.1} ms after sending it, before its ACK timeout",
                        dt * 1e3
                    );
                    ours += 1;
                } else {
                    theirs += 1;
                }
                first.insert(key, t);
            }
            None => {
                first.insert(key, t);
            }
        }
    }
    (ours, theirs)
}

const ITERS: &str = "200";
const PP_SIZE: &str = "4096";
const BW_SIZE: &str = "16384";

#[test]
fn qemu_rxe_model() {
    let Some(mut lab) = qemu_common::lab("qemu_rxe_model") else {
        return;
    };
    lab.start_capture();
    lab.boot(
        "g1",
        0,
        GUEST_IP,
        &format!(
            "step pp_server ibv_rc_pingpong -d rxe0 -g $GIDX -n {ITERS} -s {PP_SIZE} -c\n\
             step pp_client retry ibv_rc_pingpong -d rxe0 -g $GIDX -n {ITERS} -s {PP_SIZE} -c {HOST_IP}\n\
             step srv_write_bw ib_write_bw -d rxe0 -x $GIDX -F -n {ITERS} -s {BW_SIZE}\n\
             sleep 1; step cli_write_bw retry ib_write_bw -d rxe0 -x $GIDX -F -n {ITERS} -s {BW_SIZE} {HOST_IP}\n"
        ),
    );

    // 1. ibv_rc_pingpong server in the guest, rdmesh (model) its client.
    let at = lab.wait_for("g1", "QF_STEP pp_server", 0, Duration::from_secs(300));
    let at = lab.wait_for("g1", "local address", at, Duration::from_secs(60));
    let out = lab.run_rdmesh(
        &[
            "pingpong",
            GUEST_IP,
            "--provider",
            "model",
            "-g",
            "1",
            "-n",
            ITERS,
            "-s",
            PP_SIZE,
            "-c",
            "--timeout",
            "120",
        ],
        Duration::from_secs(240),
    );
    let client = rdmesh_ok(&out, "rdmesh pingpong --provider model (client)");
    assert!(
        client.contains(&format!("checked {ITERS} of {ITERS} received messages")),
        "{client}"
    );

    // 2. rdmesh (model) as server of the guest's client.
    let server = lab.spawn_rdmesh(&[
        "pingpong",
        "--provider",
        "model",
        "-g",
        "1",
        "-n",
        ITERS,
        "-s",
        PP_SIZE,
        "-c",
        "--timeout",
        "180",
    ]);
    let out = wait_bounded(server, Duration::from_secs(300));
    let served = rdmesh_ok(&out, "rdmesh pingpong --provider model (server)");
    assert!(
        served.contains(&format!("checked 199 of {ITERS} received messages")),
        "{served}"
    );

    // 3. ib_write_bw server in the guest, rdmesh (model) its client.
    let at = lab.wait_for("g1", "QF_STEP srv_write_bw", at, Duration::from_secs(300));
    let at = lab.wait_for(
        "g1",
        "Waiting for client to connect",
        at,
        Duration::from_secs(60),
    );
    let out = lab.run_rdmesh(
        &[
            "bench",
            "write",
            GUEST_IP,
            "--perftest-compat",
            "--provider",
            "model",
            "-n",
            ITERS,
            "-s",
            BW_SIZE,
            "--timeout",
            "120",
        ],
        Duration::from_secs(240),
    );
    let stdout = rdmesh_ok(
        &out,
        "rdmesh bench write --provider model (client of ib_write_bw)",
    );
    assert!(
        stdout.contains(&format!(
            "ib_write_bw client done: {ITERS} iterations of {BW_SIZE} bytes"
        )),
        "{stdout}"
    );
    lab.wait_for("g1", "QF_RESULT srv_write_bw", at, Duration::from_secs(120));

    // 4. rdmesh (model) as server of the guest's ib_write_bw client.
    let server = lab.spawn_rdmesh(&[
        "bench",
        "write",
        "--perftest-compat",
        "--provider",
        "model",
        "-n",
        ITERS,
        "-s",
        BW_SIZE,
        "--timeout",
        "180",
    ]);
    let out = wait_bounded(server, Duration::from_secs(300));
    let stdout = rdmesh_ok(
        &out,
        "rdmesh bench write --provider model (server of ib_write_bw)",
    );
    assert!(
        stdout.contains(&format!(
            "ib_write_bw server done: {ITERS} iterations of {BW_SIZE} bytes"
        )),
        "{stdout}"
    );

    let console = lab.wait_done("g1", Duration::from_secs(240));
    for step in ["pp_server", "pp_client", "srv_write_bw", "cli_write_bw"] {
        assert_eq!(step_rc(&console, step), Some(0), "guest step {step}");
    }
    let pcap = lab.stop_capture();
    let (ours, theirs) = retransmissions(&lab, &pcap);
    lab.log(&format!(
        "retransmitted packets: {ours} by the model, {theirs} by rxe"
    ));
    for name in [
        "rcvd_seq_err",
        "out_of_seq_request",
        "retry_exceeded_err",
        "retry_rnr_exceeded_err",
        "rcvd_rnr_err",
        "send_rnr_err",
        "send_err",
    ] {
        assert_eq!(counter(&console, name), 0, "rxe counter {name} moved");
    }
    // Every duplicate rxe saw is one the model sent again after its timeout.
    assert!(
        counter(&console, "duplicate_request") <= ours,
        "rxe counted {} duplicate requests, the model retransmitted {ours} packets",
        counter(&console, "duplicate_request")
    );
    let roce = lab.check_capture(&pcap, true);
    assert!(roce >= 3200, "only {roce} RoCEv2 frames captured");
    // The largest frame each way: a WRITE First at path MTU 1024 (UDP 8 + BTH 12 + RETH 16 +
    // 1024 + ICRC 4).
    lab.wire_facts(&pcap).assert_rdmesh_rxe(1064);
    lab.log(&format!("{roce} RoCEv2 frames checked"));
}
