//! The real-NCCL benchmark scripts (`scripts/nccl-gpu/`: run.sh, bench.py, table.py) checked
//! without a GPU: bench.py's `--dry-run` (plan, busbw factors, expected-value formulas against a
//! simulated collective), table.py's merge of two JSON-lines files (rows, ratios, missing
//! sizes, refusal of unchecked results), and run.sh's flow with a stand-in `torchrun` (written
//! here) that runs bench.py `--dry-run` and prints NCCL's channel line only when told to, so
//! both the pass and the "NCCL did not use the plugin" paths are exercised. The GPU run itself
//! is not part of CI (docs/benchmarks.md says where its numbers come from).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{have, need, run_bounded, scratch, workspace_root};

fn python() -> bool {
    need(have("python3", &["--version"]), "python3")
}

fn script(name: &str) -> PathBuf {
    workspace_root().join("scripts/nccl-gpu").join(name)
}

fn py(args: &[&dyn AsRef<std::ffi::OsStr>]) -> std::process::Output {
    let mut cmd = Command::new("python3");
    for a in args {
        cmd.arg(a);
    }
    run_bounded(cmd, Duration::from_secs(120))
}

fn ok(out: &std::process::Output, what: &str) -> String {
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{s}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    s
}

/// bench.py --dry-run output file for a modelled bandwidth.
fn dry_run(dir: &Path, label: &str, gbps: &str) -> PathBuf {
    dry_run_with(dir, label, gbps, &[])
}

/// [`dry_run`] with more bench.py arguments.
fn dry_run_with(dir: &Path, label: &str, gbps: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(format!("{label}.jsonl"));
    let bench = script("bench.py");
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![
        &bench,
        &"--dry-run",
        &"--label",
        &label,
        &"--dry-run-gbps",
        &gbps,
        &"--out",
        &out,
    ];
    for a in extra {
        args.push(a);
    }
    let o = py(&args);
    ok(&o, "bench.py --dry-run");
    out
}

/// The data rows of table.py's markdown table (not its header or rule), cells trimmed.
fn table_rows(t: &str) -> Vec<Vec<String>> {
    t.lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| op "))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

fn results(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["type"] == "result")
        .collect()
}

#[test]
fn scripts_compile() {
    if !python() {
        return;
    }
    for s in ["bench.py", "table.py"] {
        let dir = scratch(&format!("pycompile-{s}"));
        let o = py(&[
            &"-c",
            &"import py_compile,sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)",
            &script(s),
            &dir.join("out.pyc"),
        ]);
        ok(&o, s);
    }
    let mut cmd = Command::new("bash");
    cmd.arg("-n").arg(script("run.sh"));
    ok(&run_bounded(cmd, Duration::from_secs(30)), "bash -n run.sh");
}

#[test]
fn bench_dry_run_plan_and_busbw_factors() {
    if !python() {
        return;
    }
    // with 4 ranks 8 bytes (2 int32) do not split into 4 parts: start at 16 bytes
    for (ranks, min, ar, ag) in [("2", "8", "1.000", "0.500"), ("4", "16", "1.500", "0.750")] {
        let o = py(&[
            &script("bench.py"),
            &"--dry-run",
            &"--dry-run-ranks",
            &ranks,
            &"--min-bytes",
            &min,
        ]);
        let s = ok(&o, "bench.py --dry-run");
        println!("{s}");
        assert!(s.contains(&format!("{ranks} ranks")), "{s}");
        let line = |op: &str, size: &str| {
            s.lines()
                .find(|l| l.split_whitespace().next() == Some(op) && l.contains(size))
                .unwrap_or_else(|| panic!("no {op} {size} line:\n{s}"))
                .to_string()
        };
        assert!(line("all_reduce", &format!(" {min} B ")).ends_with(&format!("factor {ar}")));
        assert!(line("all_gather", "256 MiB").ends_with(&format!("factor {ag}")));
        assert!(line("reduce_scatter", "256 MiB").ends_with(&format!("factor {ag}")));
        assert!(line("sendrecv", "256 MiB").ends_with("factor 1.000"));
        // 8 B .. 256 MiB by powers of 4 (8 * 4^12 = 128 MiB) plus 256 MiB: 14 sizes;
        // 16 B .. 256 MiB (16 * 4^12 = 256 MiB): 13
        let n = if min == "8" { "14 sizes" } else { "13 sizes" };
        assert!(s.contains(n), "{s}");
    }
    // 8 bytes of all_gather over 4 ranks are refused with a reason
    let o = py(&[&script("bench.py"), &"--dry-run", &"--dry-run-ranks", &"4"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("do not split into 4"));
    // all_gather of 8 bytes over 2 ranks: one int32 each
    let o = py(&[&script("bench.py"), &"--dry-run", &"--ops", &"all_gather"]);
    let s = ok(&o, "bench.py --dry-run --ops all_gather");
    assert!(s.contains("in 1 out 2 int32"), "{s}");
    // a bad op is refused
    let o = py(&[&script("bench.py"), &"--dry-run", &"--ops", &"broadcast"]);
    assert!(!o.status.success());
}

#[test]
fn table_merges_two_runs() {
    if !python() {
        return;
    }
    let dir = scratch("nccl-table");
    let rd = dry_run(&dir, "rdmesh", "0.5");
    let so = dry_run(&dir, "Socket", "2.0");
    let o = py(&[&script("table.py"), &rd, &so, &"--commit", &"abc1234"]);
    let t = ok(&o, "table.py");
    println!("{t}");
    assert!(
        t.contains("Dry run"),
        "dry-run input must be labelled:\n{t}"
    );
    assert!(t.contains("rdmesh commit: abc1234"));
    assert!(t.contains("| op | size | busbw rdmesh (GB/s) | busbw Socket (GB/s) | ratio |"));
    let rows = table_rows(&t);
    assert_eq!(rows.len(), 4 * 14, "{t}");
    assert_eq!(rows[0][0], "all_reduce");
    assert_eq!(rows[0][1], "8 B");
    assert_eq!(rows[13][1], "256 MiB");
    assert_eq!(rows[55][0], "sendrecv");
    // every ratio is rdmesh busbw / Socket busbw from the JSON files
    let a = results(&rd);
    let b = results(&so);
    for (i, row) in rows.iter().enumerate() {
        let x = a[i]["busbw_GBps"].as_f64().unwrap();
        let y = b[i]["busbw_GBps"].as_f64().unwrap();
        assert_eq!(row[0], a[i]["op"].as_str().unwrap());
        assert_eq!(row[4], format!("{:.2}", x / y), "row {row:?}");
    }
    // large messages approach the modelled bandwidths: 0.5 vs 2.0 GB/s algbw (n = 2)
    let last_ar = &rows[13];
    assert_eq!(last_ar[2], "0.500");
    assert_eq!(last_ar[3], "2.00");
    assert_eq!(last_ar[4], "0.25");
}

/// With bench.py's `--iter-stats` in either file, table.py adds the median and the slowest
/// single op of both runs ("–" where a file has none); without it the table keeps its five
/// columns (`table_merges_two_runs`).
#[test]
fn table_shows_single_ops_with_iter_stats() {
    if !python() {
        return;
    }
    let dir = scratch("nccl-table-iter");
    let rd = dry_run_with(
        &dir,
        "rdmesh",
        "0.5",
        &["--iter-stats", "--ops", "all_reduce"],
    );
    let so = dry_run_with(&dir, "Socket", "2.0", &["--ops", "all_reduce"]);
    let o = py(&[&script("table.py"), &rd, &so]);
    let t = ok(&o, "table.py");
    println!("{t}");
    assert!(t.contains(
        "| op | size | busbw rdmesh (GB/s) | busbw Socket (GB/s) | ratio | median op, µs (rdmesh / Socket) | slowest op, ms (rdmesh / Socket) |"
    ));
    let a = results(&rd);
    assert!(
        a[0].get("iter_p50_us").is_some(),
        "bench.py --dry-run --iter-stats"
    );
    let rows = table_rows(&t);
    assert_eq!(rows.len(), a.len(), "{t}");
    // the modelled op takes 20 µs + size at 0.5 GB/s: 8 B ~20 µs, 256 MiB ~537 ms
    assert_eq!(rows[0][5], "20.0 / –");
    assert_eq!(rows[0][6], "0.02 / –");
    let last = rows.last().unwrap();
    let us = a.last().unwrap()["iter_p50_us"].as_f64().unwrap();
    assert_eq!(last[5], format!("{us:.0} / –"));
    assert_eq!(last[6], format!("{:.0} / –", us / 1e3));
}

#[test]
fn table_marks_missing_sizes_and_refuses_unchecked_results() {
    if !python() {
        return;
    }
    let dir = scratch("nccl-table-bad");
    let meta = r#"{"type": "meta", "label": "x", "date": "2026-01-01 00:00 UTC", "gpu": "G", "gpus": 2, "nccl": "2.28.9", "torch": "2.11", "commit": "c"}"#;
    let row = |op: &str, b: u64, bw: f64, checked: bool| {
        format!(
            r#"{{"type": "result", "op": "{op}", "bytes": {b}, "busbw_GBps": {bw}, "nranks": 2, "checked": {checked}}}"#
        )
    };
    let rd = dir.join("rd.jsonl");
    let so = dir.join("so.jsonl");
    std::fs::write(
        &rd,
        format!(
            "{meta}\n{}\n{}\n",
            row("all_reduce", 8, 0.001, true),
            row("sendrecv", 1 << 20, 0.75, true)
        ),
    )
    .unwrap();
    std::fs::write(
        &so,
        format!("{meta}\n{}\n", row("sendrecv", 1 << 20, 1.5, true)),
    )
    .unwrap();
    let t = ok(&py(&[&script("table.py"), &rd, &so]), "table.py");
    assert!(!t.contains("Dry run"), "{t}");
    assert!(t.contains("NCCL 2.28.9"), "{t}");
    assert!(t.contains("| all_reduce | 8 B | 0.00100 | – | – |"), "{t}");
    assert!(
        t.contains("| sendrecv | 1 MiB | 0.750 | 1.50 | 0.50 |"),
        "{t}"
    );
    std::fs::write(
        &so,
        format!("{meta}\n{}\n", row("sendrecv", 1 << 20, 1.5, false)),
    )
    .unwrap();
    let o = py(&[&script("table.py"), &rd, &so]);
    assert!(!o.status.success(), "an unchecked result must be refused");
    assert!(String::from_utf8_lossy(&o.stderr).contains("not checked"));
}

/// A stand-in for torchrun: runs bench.py --dry-run with the arguments run.sh passes, and
/// prints NCCL's channel line for $NCCL_NET only where FAKE_NCCL_USES_NET=1. A stand-in torch
/// module answers run.sh's version query.
fn fake_torch(dir: &Path) -> (PathBuf, PathBuf) {
    let pkg = dir.join("pylib/torch");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(
        pkg.join("__init__.py"),
        "__version__ = 'stand-in'\n\
         class version:\n    cuda = '0'\n\
         class _nccl:\n    @staticmethod\n    def version(): return (2, 28, 9)\n\
         class cuda:\n    nccl = _nccl\n\
         \x20   @staticmethod\n    def device_count():\n        import os\n        return int(os.environ.get('FAKE_GPUS', '2'))\n\
         \x20   @staticmethod\n    def get_device_name(i): return 'stand-in GPU'\n",
    )
    .unwrap();
    let tr = dir.join("torchrun");
    std::fs::write(
        &tr,
        "#!/usr/bin/env bash\n\
         args=(); for a in \"$@\"; do case \"$a\" in --standalone|--nproc_per_node=*) ;; *) args+=(\"$a\");; esac; done\n\
         [ \"${FAKE_NCCL_USES_NET:-0}\" = 1 ] && echo \"stand-in: Channel 00/0 : 0[0] -> 1[1] [send] via NET/$NCCL_NET/0\"\n\
         echo \"stand-in: NCCL_P2P_DISABLE=$NCCL_P2P_DISABLE NCCL_SHM_DISABLE=$NCCL_SHM_DISABLE NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE NCCL_NET_PLUGIN=${NCCL_NET_PLUGIN:-} RDMESH_RANK_ENV=${RDMESH_RANK_ENV:-}\"\n\
         exec python3 \"${args[@]}\" --dry-run\n",
    )
    .unwrap();
    let mut cmd = Command::new("chmod");
    cmd.arg("+x").arg(&tr);
    ok(&run_bounded(cmd, Duration::from_secs(10)), "chmod");
    (dir.join("pylib"), tr)
}

#[test]
fn run_sh_flow_with_a_stand_in_torchrun() {
    if !python() {
        return;
    }
    let dir = scratch("nccl-run-sh");
    let (pylib, tr) = fake_torch(&dir);
    if !need(have("cc", &["--version"]), "a C compiler (cc)") {
        return;
    }
    // run.sh's preflight dlopens the plugin: give it a real library that exports
    // ncclNetPlugin_v11 (the harness's fault-injecting wrapper; never initialised here)
    let so = dir.join("libnccl-net-rdmesh.so");
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(workspace_root().join("tests/nccl/faulty.c"))
        .arg("-ldl");
    ok(&run_bounded(cc, Duration::from_secs(120)), "cc faulty.c");
    let not_lib = dir.join("not-a-library.so");
    std::fs::write(&not_lib, b"not a library").unwrap();
    let run_gpus = |lib: &Path, out: &str, uses_net: bool, gpus: &str| {
        let mut cmd = Command::new("bash");
        cmd.arg(script("run.sh"))
            .arg(lib)
            .arg(dir.join(out))
            .env("PYTHONPATH", &pylib)
            .env("TORCHRUN", &tr)
            .env("RDMESH_COMMIT", "testcommit")
            .env("FAKE_NCCL_USES_NET", if uses_net { "1" } else { "0" })
            .env("SKIP_HARNESS", "1")
            .env("FAKE_GPUS", gpus)
            .env("MPS", "0")
            .env_remove("RDMESH_RANK_ENV");
        run_bounded(cmd, Duration::from_secs(300))
    };
    let run_with = |lib: &Path, out: &str, uses_net: bool| run_gpus(lib, out, uses_net, "2");
    let run = |out: &str, uses_net: bool| run_with(&so, out, uses_net);
    let o = run("good", true);
    let s = ok(&o, "run.sh");
    println!("{s}");
    assert!(s.contains("NCCL 2.28.9"), "{s}");
    assert!(s.contains("commit testcommit"), "{s}");
    assert!(s.contains("PASSED"), "{s}");
    assert!(s.contains("preflight: the plugin loads"), "{s}");
    let log = std::fs::read_to_string(dir.join("good/rdmesh.log")).unwrap();
    let abs = so.canonicalize().unwrap();
    assert!(
        log.contains(&format!("NCCL_NET_PLUGIN={}", abs.display())),
        "NCCL_NET_PLUGIN must be the absolute path:\n{log}"
    );
    assert!(log.contains("NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NVLS_ENABLE=0"));
    assert!(log.contains("RDMESH_RANK_ENV=RDMESH_NICS=lo=127.0.93.%r/24"));
    let slog = std::fs::read_to_string(dir.join("good/socket.log")).unwrap();
    assert!(slog.contains("NCCL_NET_PLUGIN= "), "{slog}");
    let table = std::fs::read_to_string(dir.join("good/table.md")).unwrap();
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("| all_") || l.starts_with("| reduce_scatter"))
            .count(),
        3 * 14
    );
    assert!(!s.contains("share-gpu"), "{s}");
    assert!(!table.contains("sharing the GPU"), "{table}");
    // one GPU for two ranks: run.sh has bench.py share it, and the table says so
    let o = run_gpus(&so, "onegpu", true, "1");
    let s = ok(&o, "run.sh on one GPU");
    assert!(
        s.contains("2 ranks on 1 GPU(s): the ranks share them (--share-gpu), time slicing"),
        "{s}"
    );
    let table = std::fs::read_to_string(dir.join("onegpu/table.md")).unwrap();
    assert!(table.contains("the ranks sharing the GPU"), "{table}");
    // NCCL falling back silently (no "via NET/rdmesh"): run.sh must fail and say so
    let o = run("bad", false);
    assert!(
        !o.status.success(),
        "run.sh passed without 'via NET/rdmesh'"
    );
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("via NET/rdmesh"), "{err}");
    // a file that is no library stops run.sh before any torchrun
    let o = run_with(&not_lib, "notlib", true);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("does not load"), "{err}");
    assert!(!dir.join("notlib/rdmesh.log").exists());
}
