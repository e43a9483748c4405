//! `rdmesh bench` and `rdmesh pingpong` on the device model (`--provider model`: the vfio
//! provider's mlx5 driver against the model, its port on a UDP socket): in one process
//! (`--loopback`), and as two processes — model server with a model client and with a soft
//! client — with every byte verified. The peer's MAC travels in the out-of-band QP info.

use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{assert_ok, free_tcp_port, rdmesh_bin, run_bounded, wait_bounded};

fn verified(stdout: &str) -> u64 {
    stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Verified ")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("no verification line:\n{stdout}"))
}

fn loopback(mode: &str, lat: bool) {
    let mut c = Command::new(rdmesh_bin());
    c.args([
        "bench",
        mode,
        "--loopback",
        "--provider",
        "model",
        "--verify",
    ]);
    if lat {
        c.args(["--lat", "-n", "200"]);
    } else {
        c.args(["-s", "64K", "-n", "500"]);
    }
    let out = run_bounded(c, Duration::from_secs(240));
    let stdout = assert_ok(
        &out,
        &format!("rdmesh bench {mode} --loopback --provider model"),
    );
    let want = if lat { 200 * 2 } else { 500 * 65536 };
    assert!(verified(&stdout) >= want, "{stdout}");
}

#[test]
fn loopback_write_send_read_on_the_model() {
    for mode in ["write", "send", "read"] {
        loopback(mode, false);
    }
}

#[test]
fn loopback_latency_on_the_model() {
    for mode in ["write", "send", "read"] {
        loopback(mode, true);
    }
}

fn two_processes(mode: &str, server_ip: &str, client_ip: &str, client_provider: &str) {
    let port = free_tcp_port().to_string();
    let server = Command::new(rdmesh_bin())
        .args([
            "bench",
            mode,
            "-p",
            &port,
            "--bind",
            server_ip,
            "--provider",
            "model",
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
        "--provider",
        client_provider,
        "-s",
        "64K",
        "-n",
        "500",
        "--verify",
        "--timeout",
        "60",
    ]);
    let out = run_bounded(client, Duration::from_secs(240));
    let stdout = assert_ok(
        &out,
        &format!("rdmesh bench {mode} --provider {client_provider} client"),
    );
    let server_out = wait_bounded(server, Duration::from_secs(30));
    assert_ok(
        &server_out,
        &format!("rdmesh bench {mode} --provider model server"),
    );
    assert!(verified(&stdout) >= 500 * 65536, "{stdout}");
}

#[test]
fn model_server_with_model_client() {
    two_processes("write", "127.0.0.41", "127.0.0.42", "model");
    two_processes("send", "127.0.0.43", "127.0.0.44", "model");
    two_processes("read", "127.0.0.45", "127.0.0.46", "model");
}

#[test]
fn model_server_with_soft_client() {
    two_processes("write", "127.0.0.51", "127.0.0.52", "soft");
    two_processes("send", "127.0.0.53", "127.0.0.54", "soft");
    two_processes("read", "127.0.0.55", "127.0.0.56", "soft");
}

#[test]
fn pingpong_model_and_soft() {
    let port = free_tcp_port().to_string();
    let server = Command::new(rdmesh_bin())
        .args([
            "pingpong",
            "-p",
            &port,
            "--provider",
            "model",
            "--bind",
            "127.0.0.61",
            "--no-raw-rx",
            "-n",
            "300",
            "--timeout",
            "30",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the server");
    std::thread::sleep(Duration::from_millis(300));
    let mut client = Command::new(rdmesh_bin());
    client.args([
        "pingpong",
        "127.0.0.1",
        "-p",
        &port,
        "--bind",
        "127.0.0.62",
        "--no-raw-rx",
        "-n",
        "300",
        "-c",
        "--timeout",
        "30",
    ]);
    let out = run_bounded(client, Duration::from_secs(60));
    let stdout = assert_ok(&out, "rdmesh pingpong client (soft)");
    let server_out = wait_bounded(server, Duration::from_secs(30));
    let sout = assert_ok(&server_out, "rdmesh pingpong server (model)");
    for s in [&stdout, &sout] {
        assert!(s.contains("300 iters"), "{s}");
        assert!(s.contains("all correct"), "{s}");
    }
}

#[test]
fn vfio_endpoint_without_a_peer_mac_refuses_clearly() {
    // A model endpoint whose peer is ibv_rc_pingpong-style (no MAC in the exchange) at an
    // address the kernel cannot resolve: the run stops and says how to give the MAC.
    let port = free_tcp_port().to_string();
    let server = Command::new(rdmesh_bin())
        .args([
            "pingpong",
            "-p",
            &port,
            "--provider",
            "model",
            "--bind",
            "127.0.0.71",
            "--no-raw-rx",
            "--timeout",
            "10",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starting the server");
    std::thread::sleep(Duration::from_millis(300));
    // The client claims a GID no host holds (rc_pingpong's message is all the server sees).
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap()))
        .expect("connecting");
    let mut m = [0u8; 52];
    let text = "0000:000011:000001:00000000000000000000ffffc6336401";
    m[..text.len()].copy_from_slice(text.as_bytes());
    s.write_all(&m).unwrap();
    let mut back = Vec::new();
    let _ = s.read_to_end(&mut back);
    let out = wait_bounded(server, Duration::from_secs(30));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cannot learn the MAC of peer 198.51.100.1") && err.contains("--peer-mac"),
        "{err}"
    );
}
