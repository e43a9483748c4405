//! A live capture on the loopback interface of two `rdmesh bench` processes: every RoCEv2
//! frame the kernel carried has an ICRC that verifies with an independent checker (Python
//! zlib, and scapy's `contrib.roce` when installed), computed over the IP and UDP headers as
//! they were on the wire.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdmesh_tests::{
    assert_ok, free_tcp_port, have, is_root, need, rdmesh_bin, run_bounded, scratch, wait_bounded,
    workspace_root,
};

#[test]
fn live_capture_icrc_verifies_independently() {
    if !need(
        have("tshark", &["--version"]) && have("python3", &["--version"]) && is_root(),
        "tshark, python3 and root (to capture on lo)",
    ) {
        return;
    }
    let dir = scratch("live");
    let pcap = dir.join("live.pcap");
    let (server_ip, client_ip) = ("127.0.0.21", "127.0.0.22");
    let mut tshark = Command::new("tshark")
        .args([
            "-i",
            "lo",
            "-f",
            &format!("udp port 4791 and host {server_ip}"),
            "-a",
            "duration:120",
            "-F",
            "pcap",
            "-w",
        ])
        .arg(&pcap)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting tshark");
    // Wait until the capture file exists (tshark prints "Capturing on" and creates it).
    let t0 = Instant::now();
    while !pcap.exists() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let port = free_tcp_port().to_string();
    for mode in ["write", "send", "read"] {
        let server = Command::new(rdmesh_bin())
            .args(["bench", mode, "-p", &port, "--bind", server_ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut client = Command::new(rdmesh_bin());
        client.args([
            "bench", mode, server_ip, "-p", &port, "--bind", client_ip, "-s", "5000", "-n", "40",
            "--verify",
        ]);
        assert_ok(&run_bounded(client, Duration::from_secs(60)), mode);
        assert_ok(&wait_bounded(server, Duration::from_secs(30)), mode);
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill")
        .args(["-INT", &tshark.id().to_string()])
        .status();
    let t0 = Instant::now();
    while tshark.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = tshark.kill();
    let mut check = Command::new("python3");
    check
        .arg(workspace_root().join("tests/scripts/icrc_check.py"))
        .arg(&pcap);
    if Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .status()
        .is_ok_and(|s| s.success())
    {
        check.arg("--scapy");
    }
    let out = assert_ok(
        &run_bounded(check, Duration::from_secs(120)),
        "independent ICRC check",
    );
    let roce: u64 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("roce="))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(roce > 200, "only {roce} RoCE frames captured: {out}");
    assert!(out.contains("bad=0"), "{out}");
}
