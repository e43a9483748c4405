//! The rustc wrapper that applies the profile-guided optimization profile (`scripts/rustc-pgo.sh`,
//! `.cargo/config.toml`, docs/building.md), driven with a stand-in compiler (written here) that
//! prints the arguments it got and answers `-vV` with a chosen LLVM version: which invocations
//! get `-Cprofile-use`, with the committed profile's absolute path, and that every argument
//! reaches the compiler unchanged and in order.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rdmesh_tests::{run_bounded, scratch, workspace_root};

/// A stand-in rustc: `-vV` prints a version block with LLVM `$FAKE_LLVM` (default 22); any other
/// call prints one argument per line.
fn fake_rustc() -> PathBuf {
    let dir = scratch("pgo-wrapper");
    let path = dir.join("rustc");
    std::fs::write(
        &path,
        "#!/bin/sh\n\
         if [ \"$1\" = -vV ]; then\n\
         echo 'rustc 1.95.0 (test)'; echo \"LLVM version: ${FAKE_LLVM:-22}.1.2\"; exit 0\n\
         fi\n\
         for a in \"$@\"; do echo \"$a\"; done\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&path).status().unwrap();
    path
}

/// The arguments the stand-in compiler received through the wrapper.
fn through_wrapper(rustc: &PathBuf, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("scripts/rustc-pgo.sh"))
        .arg(rustc)
        .args(args)
        .env_remove("RDMESH_PGO");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = run_bounded(cmd, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "wrapper failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn profile_flag() -> String {
    let profile = workspace_root().join("pgo/rdmesh.profdata");
    assert!(profile.is_file(), "{} is committed", profile.display());
    format!("-Cprofile-use={}", profile.display())
}

#[test]
fn optimized_host_builds_get_the_profile_with_its_absolute_path() {
    let rustc = fake_rustc();
    let with = [
        profile_flag(),
        "-Cllvm-args=-no-pgo-warn-mismatch".to_string(),
    ];
    for args in [
        &["--crate-name", "x", "-C", "opt-level=3", "src/lib.rs"][..],
        &["--crate-name", "x", "-Copt-level=3", "src/lib.rs"],
        &["--target", "x86_64-unknown-linux-gnu", "-C", "opt-level=3"],
        &["--target=x86_64-unknown-linux-gnu", "-C", "opt-level=3"],
    ] {
        let got = through_wrapper(&rustc, args, &[]);
        let mut want: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        want.extend(with.iter().cloned());
        assert_eq!(got, want, "arguments {args:?}");
    }
}

/// Compiler arguments, environment, and what the invocation stands for.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

#[test]
fn other_builds_pass_through_unchanged() {
    let rustc = fake_rustc();
    let cases: &[Case] = &[
        (&["-C", "opt-level=0", "src/lib.rs"], &[], "a debug build"),
        (&["src/lib.rs"], &[], "no optimization level"),
        (
            &["--target", "x86_64-unknown-none", "-C", "opt-level=3"],
            &[],
            "another target (the no_std build)",
        ),
        (
            &["-C", "opt-level=3", "--target=aarch64-unknown-linux-gnu"],
            &[],
            "another target, --target=",
        ),
        (
            &["-Cprofile-generate=/tmp/raw", "-C", "opt-level=3"],
            &[],
            "an instrumented build (scripts/pgo-train.sh)",
        ),
        (
            &["--cfg", "fuzzing", "-C", "opt-level=3"],
            &[],
            "a fuzzing build",
        ),
        (
            &["-C", "opt-level=3"],
            &[("RDMESH_PGO", "0")],
            "RDMESH_PGO=0",
        ),
        (
            &["-C", "opt-level=3"],
            &[("FAKE_LLVM", "18")],
            "a compiler whose LLVM is older than the profile's",
        ),
    ];
    for (args, env, what) in cases {
        let got = through_wrapper(&rustc, args, env);
        assert_eq!(got, *args, "{what}: arguments changed");
    }
}

#[test]
fn the_profile_names_the_llvm_that_wrote_it() {
    let v = std::fs::read_to_string(workspace_root().join("pgo/rdmesh.llvm")).unwrap();
    let major: u32 = v
        .trim()
        .parse()
        .expect("pgo/rdmesh.llvm holds an LLVM major version");
    assert!(major >= 17, "LLVM {major}");
}
