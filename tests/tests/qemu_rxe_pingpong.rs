//! `rdmesh pingpong` against rdma-core's `ibv_rc_pingpong` on Linux rdma_rxe in a QEMU guest,
//! in both directions: rdmesh as client of the guest's server, then as server of the guest's
//! client. 200 SENDs of 4096 bytes each way at path MTU 1024 (4 packets per message), with
//! `-c` on both ends; rdmesh also checks that every message the peer echoes is the pattern it
//! sent.
//!
//! Checked in the same run: both tools exit 0; rxe's hw_counters show no sequence errors,
//! retries or RNR NAKs; on the bridge capture every RoCEv2 frame passes the independent ICRC
//! check, tshark finds no malformed frame and no ICMP (rdmesh owns UDP 4791); every frame
//! goes to UDP 4791 between the two IPv4 GIDs; the largest frame carries exactly 1024 bytes of
//! payload in both directions (rxe's active MTU on a 1500-byte link); rdmesh sends IPv4 ID 0
//! while rxe sends non-zero IDs (so rdmesh verified rxe's ICRCs over the real header).

mod qemu_common;

use std::time::Duration;

use qemu_common::{assert_clean_counters, rdmesh_ok, step_rc, GUEST_IP, HOST_IP};
use rdmesh_tests::wait_bounded;

const ITERS: &str = "200";
const SIZE: &str = "4096";

#[test]
fn qemu_rxe_pingpong() {
    let Some(mut lab) = qemu_common::lab("qemu_rxe_pingpong") else {
        return;
    };
    lab.start_capture();
    lab.boot(
        "g1",
        0,
        GUEST_IP,
        &format!(
            "step pp_server ibv_rc_pingpong -d rxe0 -g $GIDX -n {ITERS} -s {SIZE} -c\n\
             step pp_client retry ibv_rc_pingpong -d rxe0 -g $GIDX -n {ITERS} -s {SIZE} -c {HOST_IP}\n"
        ),
    );

    // 1. rdmesh is the client: wait for the guest's server to print its address (it listens
    //    right after), then connect.
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
            "-s",
            SIZE,
            "-c",
            "--timeout",
            "120",
        ],
        Duration::from_secs(240),
    );
    let client = rdmesh_ok(&out, "rdmesh pingpong (client of ibv_rc_pingpong)");
    assert!(client.contains(&format!("{ITERS} iters in")), "{client}");
    assert!(
        client.contains(&format!("checked {ITERS} of {ITERS} received messages")),
        "{client}"
    );

    // 2. rdmesh is the server; the guest's client retries until it listens.
    let server = lab.spawn_rdmesh(&[
        "pingpong",
        "-g",
        "1",
        "-n",
        ITERS,
        "-s",
        SIZE,
        "-c",
        "--timeout",
        "180",
    ]);
    let out = wait_bounded(server, Duration::from_secs(300));
    let served = rdmesh_ok(&out, "rdmesh pingpong (server of ibv_rc_pingpong)");
    assert!(served.contains(&format!("{ITERS} iters in")), "{served}");
    // The first message is the client's own buffer; every later one echoes ours.
    assert!(
        served.contains(&format!("checked 199 of {ITERS} received messages")),
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
    assert!(
        console.matches(&format!("{ITERS} iters in")).count() == 2,
        "both guest runs report all iterations"
    );

    let pcap = lab.stop_capture();
    let spurious = lab.rxe_spurious_retries(&pcap);
    assert_clean_counters(&console, spurious);
    let roce = lab.check_capture(&pcap, true);
    // 2 runs × 2 directions × 200 messages × 4 packets, plus ACKs.
    assert!(roce >= 3200, "only {roce} RoCEv2 frames captured");
    // UDP 8 + BTH 12 + 1024 payload + ICRC 4: path MTU 1024 both ways.
    lab.wire_facts(&pcap).assert_rdmesh_rxe(1048);
    lab.log(&format!("{roce} RoCEv2 frames checked"));
}
