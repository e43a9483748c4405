//! `rdmesh fuzz exec` against programs that read pcap files:
//! - a small C parser with a planted bug (`tests/c/planted_roce.c`: it dereferences NULL on an
//!   ICRC-valid RC WRITE Only with Immediate whose RETH length disagrees with its payload) is
//!   found from a fixed seed within a bounded number of iterations, the saved reproducer is
//!   minimized to one frame and still crashes it, and the same number of random-byte frames of
//!   the same lengths does not;
//! - `rdmesh pcap decode` and `tshark -r` run as targets (tshark for 60 s) and print a summary.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{have, need, rdmesh_bin, run_bounded, scratch, workspace_root};

fn build_planted(dir: &Path) -> Option<PathBuf> {
    if !need(have("cc", &["--version"]), "a C compiler (cc)") {
        return None;
    }
    let exe = dir.join("planted_roce");
    let mut cc = Command::new("cc");
    cc.args(["-O1", "-Wall", "-o"])
        .arg(&exe)
        .arg(workspace_root().join("tests/c/planted_roce.c"));
    let out = run_bounded(cc, Duration::from_secs(60));
    assert!(
        out.status.success(),
        "cc planted_roce.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

fn fuzz_exec(args: &[&str], program: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let mut cmd = Command::new(rdmesh_bin());
    cmd.args(["fuzz", "exec"])
        .args(args)
        .arg("--")
        .args(program);
    let out = run_bounded(cmd, limit);
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The number after `key` in the first summary line, e.g. `N iterations`.
fn count_before(summary: &str, word: &str) -> u64 {
    let first = summary.lines().next().unwrap_or("");
    let toks: Vec<&str> = first.split_whitespace().collect();
    toks.windows(2)
        .find(|w| w[1].trim_end_matches(',') == word)
        .and_then(|w| w[0].parse().ok())
        .unwrap_or_else(|| panic!("no '{word}' count in: {first}"))
}

#[test]
fn planted_crash_is_found_minimized_and_reproduces() {
    let dir = scratch("fuzz-exec-planted");
    let Some(exe) = build_planted(&dir) else {
        return;
    };
    let exe_s = exe.to_str().unwrap();
    let out = dir.join("out");
    let (code, stdout, stderr) = fuzz_exec(
        &[
            "--seed",
            "7",
            "--iters",
            "300",
            "--frames",
            "16",
            "--max-findings",
            "1",
            "--timeout",
            "5",
            "--out",
            out.to_str().unwrap(),
        ],
        &[exe_s],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(1), "findings exit 1\n{stdout}\n{stderr}");
    assert!(stdout.contains("finding 1: crash-sig11"), "{stdout}");
    assert_eq!(count_before(&stdout, "findings"), 1, "{stdout}");
    let iterations = count_before(&stdout, "iterations");
    assert!(iterations <= 300, "{stdout}");
    // The minimized reproducer: one frame, still SIGSEGV, an ICRC-valid WRITE Only with
    // Immediate in rdmesh's own decoder.
    let pcap = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            let n = p.file_name().unwrap().to_str().unwrap();
            n.starts_with("crash-sig11") && n.ends_with(".pcap") && !n.ends_with(".orig.pcap")
        })
        .expect("a saved reproducer");
    let frames = rdmesh_host::fuzz::pcapio::read(&pcap).unwrap();
    assert_eq!(frames.len(), 1, "minimized to one frame");
    let orig = rdmesh_host::fuzz::pcapio::read(&pcap.with_extension("orig.pcap")).unwrap();
    assert_eq!(orig.len(), 16);
    assert!(frames[0].len() <= orig.iter().map(Vec::len).max().unwrap());
    let st = Command::new(&exe).arg(&pcap).status().unwrap();
    assert_eq!(st.signal(), Some(11), "the reproducer still crashes it");
    let mut dec = Command::new(rdmesh_bin());
    dec.args(["pcap", "decode", "--json"]).arg(&pcap);
    let d = run_bounded(dec, Duration::from_secs(30));
    let v: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&d.stdout).lines().next().unwrap()).unwrap();
    if v["roce"] == true {
        assert_eq!(v["opcode"], 0x0b, "{v}");
        assert_eq!(v["icrc_valid"], true, "{v}");
    }
    let report = std::fs::read_to_string(pcap.with_extension("txt")).unwrap();
    assert!(report.contains("--seed 7 --first-iter"), "{report}");

    // The control: random bytes, same frame count and lengths, same iterations: no crash.
    let (code, stdout, stderr) = fuzz_exec(
        &[
            "--seed",
            "7",
            "--iters",
            &iterations.max(300).to_string(),
            "--frames",
            "16",
            "--random-bytes",
            "--timeout",
            "5",
            "--out",
            dir.join("random").to_str().unwrap(),
        ],
        &[exe_s],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("random bytes"), "{stdout}");
    assert_eq!(count_before(&stdout, "findings"), 0, "{stdout}");
}

#[test]
fn hang_is_a_finding() {
    let dir = scratch("fuzz-exec-hang");
    // A "parser" that never finishes on any input.
    let (code, stdout, _) = fuzz_exec(
        &[
            "--iters",
            "2",
            "--frames",
            "2",
            "--timeout",
            "0.3",
            "--minimize-runs",
            "3",
            "--max-findings",
            "1",
            "--out",
            dir.to_str().unwrap(),
        ],
        &["sh", "-c", "sleep 30", "sh"],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1), "{stdout}");
    assert!(stdout.contains("finding 1: hang"), "{stdout}");
}

#[test]
fn rdmesh_pcap_decode_as_a_target() {
    let dir = scratch("fuzz-exec-decode");
    let bin = rdmesh_bin();
    let (code, stdout, stderr) = fuzz_exec(
        &[
            "--iters",
            "40",
            "--frames",
            "32",
            "--out",
            dir.to_str().unwrap(),
        ],
        &[bin.to_str().unwrap(), "pcap", "decode"],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "{stdout}\n{stderr}");
    assert_eq!(count_before(&stdout, "frames"), 40 * 32, "{stdout}");
    assert!(stdout.contains("0 findings"), "{stdout}");
    // Coverage lists violations and opcodes.
    assert!(
        stdout.contains("bad-icrc") && stdout.contains("RcRdmaReadRequest"),
        "{stdout}"
    );
}

#[test]
fn tshark_for_sixty_seconds() {
    if !need(have("tshark", &["--version"]), "tshark") {
        return;
    }
    let dir = scratch("fuzz-exec-tshark");
    let (code, stdout, stderr) = fuzz_exec(
        &[
            "--duration",
            "60",
            "--iters",
            "1000000",
            "--frames",
            "32",
            "--seed",
            "1",
            "--timeout",
            "30",
            "--out",
            dir.to_str().unwrap(),
        ],
        &["tshark", "-r"],
        Duration::from_secs(400),
    );
    // Exit 1 only for findings (a tshark crash or hang), which the summary names.
    println!("{stdout}");
    assert!(
        code == Some(0) || (code == Some(1) && stdout.contains("finding 1:")),
        "{stdout}\n{stderr}"
    );
    let frames = count_before(&stdout, "frames");
    assert!(frames >= 32 * 20, "only {frames} frames in 60 s: {stdout}");
}
