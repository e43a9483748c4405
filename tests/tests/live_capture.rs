//! A live capture of two `rdmesh bench` processes: every RoCEv2 frame the kernel carried has an
//! ICRC that verifies with an independent checker (Python zlib, and scapy's `contrib.roce` when
//! installed), computed over the IP and UDP headers as they were on the wire.
//!
//! The processes run in a network namespace whose `lo` segments UDP GSO packets in software
//! (`tx-udp-segmentation off`), as a NIC does: the capture sees each frame with the IPv4
//! Identification the kernel gave it (segment `i` of a GSO send carries ID `i`), the sender
//! must have sealed every segment for that ID, and the receiver — which gets the segments one by
//! one, without the GRO batch that would tell it their index — must recover it from the ICRC.

use std::process::Stdio;
use std::time::{Duration, Instant};

use rdmesh_tests::{
    assert_ok, free_tcp_port, have, is_root, need, rdmesh_bin, run_bounded, scratch, wait_bounded,
    workspace_root, NetnsFabric,
};

#[test]
fn live_capture_icrc_verifies_independently() {
    if !need(
        have("tshark", &["--version"])
            && have("python3", &["--version"])
            && have("ethtool", &["--version"])
            && is_root(),
        "tshark, python3, ethtool and root (to capture on lo in a namespace)",
    ) {
        return;
    }
    let dir = scratch("live");
    let pcap = dir.join("live.pcap");
    let fabric = NetnsFabric::new("live", 1);
    fabric.wire_frames(0, "lo");
    let (server_ip, client_ip) = ("127.0.0.21", "127.0.0.22");
    let mut tshark = fabric
        .command(0, std::path::Path::new("tshark"))
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
    // 5000 bytes: two packets per message; 64 KiB: GSO sends of up to 15 segments. The last
    // two run the client through the impairment layer, which sends the runs of packets that
    // pass it as GSO sends of their own (each segment sealed for its ID in that send) and
    // duplicated or reordered packets alone.
    for (mode, size, n, impair) in [
        ("write", "5000", "40", ""),
        ("send", "5000", "40", ""),
        ("read", "5000", "40", ""),
        ("write", "64K", "20", ""),
        ("read", "64K", "20", ""),
        ("write", "64K", "40", "loss=5%,dup=2%,reorder=2%,seed=3"),
        ("send", "64K", "40", "loss=5%,seed=4"),
    ] {
        let server = fabric
            .command(0, &rdmesh_bin())
            .args([
                "bench",
                mode,
                "-p",
                &port,
                "--bind",
                server_ip,
                "--counters",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut client = fabric.command(0, &rdmesh_bin());
        client.args([
            "bench",
            mode,
            server_ip,
            "-p",
            &port,
            "--bind",
            client_ip,
            "-s",
            size,
            "-n",
            n,
            "--verify",
            "--counters",
        ]);
        if !impair.is_empty() {
            client.args(["--impair", impair, "--recovery", "selective"]);
        } else if (mode, size) == ("write", "64K") {
            // WRITE MIDDLE/LAST packets, which `soft::rx_place` receives into the region (the
            // negotiated selective repeat sends self-placing WRITE_ONLY packets instead).
            client.args(["--recovery", "go-back-n"]);
        }
        let out = assert_ok(&run_bounded(client, Duration::from_secs(60)), mode);
        // The receiver verified every segment: no ICRC errors, no retransmissions.
        for line in out.lines().filter(|l| l.contains("icrc_errors=")) {
            assert!(line.contains("icrc_errors=0"), "{mode} {size}: {line}");
        }
        let served = assert_ok(&wait_bounded(server, Duration::from_secs(30)), mode);
        if (mode, size, impair) == ("write", "64K", "") {
            // WRITE MIDDLE/LAST payload went straight into the region (`soft::rx_place`), and
            // the server verified every byte.
            let placed = served
                .split_whitespace()
                .find_map(|w| w.strip_prefix("rx_placed="))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            assert!(placed > 0, "no WRITE payload placed directly: {served}");
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let _ = std::process::Command::new("kill")
        .args(["-INT", &tshark.id().to_string()])
        .status();
    let t0 = Instant::now();
    while tshark.try_wait().unwrap().is_none() && t0.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = tshark.kill();
    let mut check = std::process::Command::new("python3");
    check
        .arg(workspace_root().join("tests/scripts/icrc_check.py"))
        .arg(&pcap);
    if std::process::Command::new("python3")
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
    assert!(roce > 400, "only {roce} RoCE frames captured: {out}");
    assert!(out.contains("bad=0"), "{out}");
    // The capture holds GSO segments (IPv4 IDs other than 0) and no GSO super-packets.
    let mut fields = std::process::Command::new("tshark");
    fields
        .args(["-r"])
        .arg(&pcap)
        .args(["-T", "fields", "-e", "ip.id", "-e", "ip.len"]);
    let ids = assert_ok(
        &run_bounded(fields, Duration::from_secs(60)),
        "tshark fields",
    );
    let mut nonzero = 0;
    for line in ids.lines() {
        let mut f = line.split_whitespace();
        let (Some(id), Some(len)) = (f.next(), f.next()) else {
            continue;
        };
        let id = u16::from_str_radix(id.trim_start_matches("0x"), 16).unwrap_or(0);
        let len: u32 = len.parse().unwrap_or(0);
        assert!(
            len <= 4096 + 80,
            "a frame of {len} bytes: a GSO packet reached the capture"
        );
        nonzero += u32::from(id != 0);
    }
    assert!(
        nonzero > 50,
        "only {nonzero} frames with a non-zero IPv4 ID: GSO segmentation was not exercised"
    );
}
