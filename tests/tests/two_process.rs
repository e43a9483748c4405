//! Two `rdmesh bench` processes, server and client, move ≥ 64 MiB with RDMA WRITE, SEND and
//! READ with `--verify` (every byte checked against the pattern on the receiving side).
//! Each test uses its own pair of loopback addresses so both ends bind UDP port 4791.

use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{assert_ok, free_tcp_port, rdmesh_bin, run_bounded, wait_bounded};

fn two_processes(mode: &str, server_ip: &str, client_ip: &str) {
    let port = free_tcp_port().to_string();
    let server = Command::new(rdmesh_bin())
        .args([
            "bench",
            mode,
            "-p",
            &port,
            "--bind",
            server_ip,
            "--timeout",
            "60",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the server");
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Command::new(rdmesh_bin());
    client.args([
        "bench",
        mode,
        server_ip,
        "-p",
        &port,
        "--bind",
        client_ip,
        "-s",
        "1M",
        "-n",
        "64",
        "--verify",
        "--timeout",
        "60",
    ]);
    let out = run_bounded(client, Duration::from_secs(240));
    let stdout = assert_ok(&out, &format!("rdmesh bench {mode} client"));
    let server_out = wait_bounded(server, Duration::from_secs(30));
    assert_ok(&server_out, &format!("rdmesh bench {mode} server"));
    assert!(stdout.contains("1048576"), "no result row:\n{stdout}");
    let verified: u64 = stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Verified ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("no verification line:\n{stdout}"));
    assert!(
        verified >= 64 << 20,
        "verified only {verified} bytes:\n{stdout}"
    );
}

#[test]
fn rdma_write_64mib_verified() {
    two_processes("write", "127.0.0.11", "127.0.0.12");
}

#[test]
fn send_64mib_verified() {
    two_processes("send", "127.0.0.13", "127.0.0.14");
}

#[test]
fn rdma_read_64mib_verified() {
    two_processes("read", "127.0.0.15", "127.0.0.16");
}

#[test]
fn mismatched_tests_fail_with_a_clear_error() {
    let port = free_tcp_port().to_string();
    let server = Command::new(rdmesh_bin())
        .args([
            "bench",
            "write",
            "-p",
            &port,
            "--bind",
            "127.0.0.17",
            "--timeout",
            "10",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Command::new(rdmesh_bin());
    client.args([
        "bench",
        "read",
        "127.0.0.17",
        "-p",
        &port,
        "--bind",
        "127.0.0.18",
        "-n",
        "10",
        "--timeout",
        "10",
    ]);
    let out = run_bounded(client, Duration::from_secs(60));
    assert!(!out.status.success());
    let s = wait_bounded(server, Duration::from_secs(30));
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(
        err.contains("client runs Read") && err.contains("server runs Write"),
        "{err}"
    );
}
