//! `rdmesh fuzz peer` against a soft-provider rdmesh peer in another process: `rdmesh bench
//! read --perftest-compat` servers, restarted in a loop as the fuzzer's frames send their QP
//! to the error state. The connection-aware frames must reach the responder's deeper checks
//! (READs answered, PSN sequence / invalid request / access NAKs per violation kind), and the
//! peer must answer every liveness probe (no `silence` finding).
//!
//! The QEMU rxe guest target (tests/qemu) is not exercised here.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdmesh_tests::{free_tcp_port, fuzz_coverage_row, is_root, rdmesh_bin, run_bounded, scratch};

#[test]
fn fuzz_peer_against_a_soft_rdmesh_peer() {
    let dir = scratch("fuzz-peer");
    let port = free_tcp_port();
    let port_s = port.to_string();
    // Server and fuzzer on their own loopback addresses: RoCEv2 replies go to port 4791 of
    // the announced GID, so each end needs 4791 on its own address.
    let (server_ip, fuzzer_ip) = ("127.0.0.61", "127.0.0.62");
    let stop = Arc::new(AtomicBool::new(false));
    let current: Arc<Mutex<Option<Child>>> = Arc::new(Mutex::new(None));
    let log = dir.join("servers.log");
    let servers = {
        let (stop, current, port_s, log) =
            (stop.clone(), current.clone(), port_s.clone(), log.clone());
        std::thread::spawn(move || {
            let mut runs = 0u32;
            while !stop.load(Ordering::SeqCst) && runs < 400 {
                runs += 1;
                let mut cmd = Command::new(rdmesh_bin());
                cmd.args([
                    "bench",
                    "read",
                    "--perftest-compat",
                    "-s",
                    "4096",
                    "-n",
                    "1000",
                    "-p",
                    &port_s,
                    "--bind",
                    server_ip,
                    "--timeout",
                    "20",
                ]);
                if !is_root() {
                    cmd.arg("--no-raw-rx");
                }
                let out = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&log)
                    .unwrap();
                let child = cmd
                    .stdout(out.try_clone().unwrap())
                    .stderr(out)
                    .stdin(Stdio::null())
                    .spawn()
                    .unwrap();
                *current.lock().unwrap() = Some(child);
                loop {
                    std::thread::sleep(Duration::from_millis(20));
                    let mut g = current.lock().unwrap();
                    match g.as_mut() {
                        Some(c) => {
                            if c.try_wait().unwrap().is_some() {
                                *g = None;
                                break;
                            }
                        }
                        None => break,
                    }
                }
            }
            runs
        })
    };
    let mut fuzz = Command::new(rdmesh_bin());
    fuzz.args([
        "fuzz",
        "peer",
        server_ip,
        "-p",
        &port_s,
        "--bind",
        fuzzer_ip,
        "-s",
        "4096",
        "-n",
        "1000",
        "--iters",
        "240",
        "--batch",
        "16",
        "--seed",
        "3",
        "--reply-wait-ms",
        "10",
        "--reconnect",
        "200",
        "--out",
    ])
    .arg(dir.join("out"));
    let out = run_bounded(fuzz, Duration::from_secs(150));
    stop.store(true, Ordering::SeqCst);
    if let Some(mut c) = current.lock().unwrap().take() {
        let _ = c.kill();
        let _ = c.wait();
    }
    let runs = servers.join().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    println!("{stdout}\n{runs} server runs");
    assert!(
        out.status.success(),
        "rdmesh fuzz peer failed ({})\n{stdout}\n{stderr}\nservers:\n{}",
        out.status,
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(stdout.contains("0 findings"), "{stdout}");
    assert!(
        stdout.starts_with("rdmesh fuzz peer: 240 frames"),
        "{stdout}"
    );
    let total = fuzz_coverage_row(&stdout, "total");
    assert_eq!(total[0], 240);
    // Valid READs were answered; the violations drew NAKs from the responder's checks past
    // the ICRC, QPN and PSN (access, length and sequence checks).
    let none = fuzz_coverage_row(&stdout, "none");
    assert!(none[1] > 0, "no valid READ answered: {stdout}");
    assert!(total[3] > 20, "too few NAKs: {stdout}");
    let deep: u64 = [
        "rkey-near-mr",
        "va-out-of-mr",
        "dma-len-mismatch",
        "payload-over-mtu",
        "out-of-order-opcode",
    ]
    .iter()
    .map(|n| fuzz_coverage_row(&stdout, n)[3])
    .sum();
    assert!(
        deep > 5,
        "the responder's deeper checks were not reached: {stdout}"
    );
    // Frames that die at the first checks (ICRC, QPN) are mostly silent.
    for name in ["bad-icrc", "wrong-qpn"] {
        let r = fuzz_coverage_row(&stdout, name);
        assert!(r[0] > 0 && r[4] * 2 > r[0], "{name}: {stdout}");
    }
}
