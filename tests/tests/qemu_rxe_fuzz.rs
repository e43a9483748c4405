//! `rdmesh fuzz peer` against Linux rdma_rxe in a QEMU guest: the guest runs perftest's
//! `ib_read_bw` servers in a loop (each one ends when a fuzzing connection's QP goes to the
//! error state and rdmesh connects again), printing rxe's hw_counters after each. rdmesh sends
//! generated frames around the live QPN, PSN window, R_Key and buffer, scanning the guest
//! console after every batch.
//!
//! Checked: the run ends without a finding (the guest answered every liveness probe, and its
//! console shows no BUG/WARNING/Oops/rxe error); valid READs were answered; frames with
//! violations behind the ICRC/QPN/PSN gates were NAKed (access, length, sequence checks), so
//! they reached rxe's deeper checks; rxe's counters saw out-of-sequence and duplicate
//! requests. Bounded: 96 frames (about 40 s with reconnects under TCG), about three minutes
//! with the guest boot.

mod qemu_common;

use std::time::Duration;

use qemu_common::{counters, GUEST_IP, HOST_IP};
use rdmesh_tests::fuzz_coverage_row;

/// Kernel messages of every level reach the console (the kernel runs with `quiet`, which
/// would hide WARN()'s KERN_WARNING lines), then the server loop.
const GUEST: &str = r#"
echo 8 > /proc/sys/kernel/printk
step fuzz_servers sh -c 'i=0; while [ $i -lt 60 ]; do i=$((i+1)); timeout 60 ib_read_bw -d rxe0 -x $GIDX -F -s 4096 -n 1000 || true; for c in /sys/class/infiniband/rxe0/ports/1/hw_counters/*; do echo "QF_COUNTER ${c##*/}=$(cat $c)"; done; done'
"#;

#[test]
fn qemu_rxe_fuzz_peer() {
    let Some(mut lab) = qemu_common::lab("qemu_rxe_fuzz") else {
        return;
    };
    lab.boot("g1", 0, GUEST_IP, GUEST);
    let at = lab.wait_for("g1", "QF_STEP fuzz_servers", 0, Duration::from_secs(300));
    lab.wait_for("g1", "Waiting for client", at, Duration::from_secs(60));
    let console = lab.console_path("g1");
    let out_dir = lab.dir.join("findings");
    let out = lab.run_rdmesh(
        &[
            "fuzz",
            "peer",
            GUEST_IP,
            "--bind",
            HOST_IP,
            "-s",
            "4096",
            "-n",
            "1000",
            "--iters",
            "96",
            "--batch",
            "16",
            "--seed",
            "5",
            "--reply-wait-ms",
            "50",
            "--probe-timeout",
            "3",
            "--timeout",
            "60",
            "--reconnect",
            "50",
            "--console",
            console.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("{stdout}");
    let findings: Vec<String> = std::fs::read_dir(&out_dir)
        .map(|d| {
            d.map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap_or_default())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        out.status.success(),
        "rdmesh fuzz peer against rxe ({}):\n{stdout}\n{stderr}\nfindings:\n{}",
        out.status,
        findings.join("\n")
    );
    assert!(stdout.contains("0 findings"), "{stdout}");
    let total = fuzz_coverage_row(&stdout, "total");
    assert_eq!(total[0], 96, "{stdout}");
    assert!(
        fuzz_coverage_row(&stdout, "none")[1] > 0,
        "no valid READ answered: {stdout}"
    );
    let deep: u64 = [
        "rkey-near-mr",
        "va-out-of-mr",
        "dma-len-mismatch",
        "payload-over-mtu",
    ]
    .iter()
    .map(|n| fuzz_coverage_row(&stdout, n)[3])
    .sum();
    assert!(
        deep > 0,
        "no frame reached rxe's access/length checks: {stdout}"
    );
    // The guest prints every counter after each server; the last value of each is current.
    let mut c = std::collections::BTreeMap::new();
    for (name, v) in counters(&lab.console("g1")) {
        c.insert(name, v);
    }
    println!("rxe hw_counters after the last server: {c:?}");
    let get = |name: &str| c.get(name).copied().unwrap_or(0);
    assert!(
        get("out_of_seq_request") + get("duplicate_request") > 0,
        "rxe saw no out-of-sequence or duplicate request: {c:?}"
    );
}
