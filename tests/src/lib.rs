//! Shared helpers of rdmesh's cross-crate integration tests (`tests/tests/*.rs`).
//!
//! Tests that need an outside tool (tshark, python3 with scapy, root for a capture) skip with a
//! printed reason on a developer machine, and fail when `RDMESH_REQUIRE_TOOLS=1` (set by
//! `scripts/test.sh`, so CI never silently skips).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// Path of the release `rdmesh` binary, building it when needed (or `RDMESH_BIN`).
pub fn rdmesh_bin() -> PathBuf {
    if let Ok(p) = std::env::var("RDMESH_BIN") {
        return PathBuf::from(p);
    }
    static BUILD: std::sync::Once = std::sync::Once::new();
    let root = workspace_root();
    BUILD.call_once(|| {
        let st = Command::new(env!("CARGO"))
            .args([
                "build",
                "--release",
                "-q",
                "-p",
                "rdmesh-host",
                "--bin",
                "rdmesh",
            ])
            .current_dir(&root)
            .status()
            .expect("running cargo build");
        assert!(st.success(), "building the rdmesh binary failed");
    });
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("release/rdmesh")
}

/// `true` when missing tools must fail the test instead of skipping it.
pub fn tools_required() -> bool {
    std::env::var("RDMESH_REQUIRE_TOOLS").is_ok_and(|v| v == "1")
}

/// Skips (returns false) or fails when `what` is unavailable.
pub fn need(available: bool, what: &str) -> bool {
    if !available {
        assert!(
            !tools_required(),
            "{what} is required (RDMESH_REQUIRE_TOOLS=1) but unavailable"
        );
        eprintln!("SKIPPED: {what} unavailable");
    }
    available
}

/// `true` when `cmd --version`-style probing succeeds.
pub fn have(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// `true` when running as root.
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A free TCP port on 127.0.0.1.
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A scratch directory unique to this test.
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rdmesh-test-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `cmd` to completion within `limit`, killing it on timeout; panics with its output.
pub fn run_bounded(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning");
    wait_bounded(child, limit)
}

/// Waits for `child` up to `limit` while draining its stdout and stderr (so a chatty child
/// never blocks on a full pipe), then kills it and panics on timeout.
pub fn wait_bounded(mut child: Child, limit: Duration) -> Output {
    use std::io::Read;
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().expect("waiting") {
            break Some(st);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
        None => panic!(
            "timed out after {limit:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&stdout),
            String::from_utf8_lossy(&stderr)
        ),
    }
}

/// Asserts success, printing both streams otherwise.
pub fn assert_ok(out: &Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({})\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
