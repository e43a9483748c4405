//! rdmesh-vfio's system layer against a real kernel VFIO and IOMMU: a QEMU guest (TCG, q35,
//! emulated Intel IOMMU with interrupt remapping) with QEMU's `edu` PCI device bound to
//! vfio-pci runs `edu_probe` (vfio/examples/edu_probe.rs), built here from the plumbing:
//! container, group viability, device fd, region info, BAR0 mmap, bus master, IOMMU IOVA
//! ranges, DMA map, an edu DMA round trip, a DMA to an unmapped IOVA that the IOMMU blocks
//! (the guest kernel's DMAR fault report is the independent witness), and MSI to an eventfd.
//!
//! Scripts: tests/qemu/build-image.sh (cached image), tests/qemu/run-vfio.sh,
//! tests/qemu/guest/init-vfio. Needs root, qemu-system-x86_64, debootstrap, kmod, cpio, zstd;
//! with `RDMESH_REQUIRE_TOOLS=1` a missing one fails the test.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use rdmesh_tests::{have, is_root, need, run_bounded, scratch, workspace_root};

/// Every check edu_probe makes; each must print `PASS <name>:`.
const CHECKS: [&str; 16] = [
    "container",
    "group",
    "pci_ids",
    "iommu_info",
    "bar0_mmap",
    "id_register",
    "liveness",
    "bus_master",
    "dma_map",
    "dma_round_trip",
    "dma_mapped_control",
    "dma_unmapped_blocked",
    "irq_setup",
    "irq_quiet",
    "msi_raise",
    "msi_factorial",
];

fn tools_ok() -> bool {
    let checks: [(bool, &str); 5] = [
        (is_root(), "root (debootstrap for the guest image)"),
        (
            have("qemu-system-x86_64", &["--version"]),
            "qemu-system-x86_64 (apt-get install qemu-system-x86)",
        ),
        (
            have("debootstrap", &["--version"]) || Path::new("/usr/sbin/debootstrap").exists(),
            "debootstrap",
        ),
        (have("cpio", &["--version"]), "cpio"),
        (have("zstd", &["--version"]), "zstd"),
    ];
    checks.iter().all(|(ok, what)| need(*ok, what))
}

/// Builds `edu_probe` (release, host target) and returns its path.
fn build_probe() -> PathBuf {
    let root = workspace_root();
    let out = run_bounded(
        {
            let mut c = Command::new(env!("CARGO"));
            c.args([
                "build",
                "--release",
                "-q",
                "-p",
                "rdmesh-vfio",
                "--example",
                "edu_probe",
            ])
            .current_dir(&root);
            c
        },
        Duration::from_secs(900),
    );
    assert!(
        out.status.success(),
        "building edu_probe failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("release/examples/edu_probe")
}

fn build_image() -> PathBuf {
    let out = run_bounded(
        {
            let mut c = Command::new("bash");
            c.arg(workspace_root().join("tests/qemu/build-image.sh"));
            c
        },
        Duration::from_secs(900),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprint!("{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "building the guest image failed ({}):\n{stdout}",
        out.status
    );
    PathBuf::from(stdout.lines().last().expect("image path").trim())
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

#[test]
fn qemu_vfio_edu() {
    if !tools_ok() {
        return;
    }
    let t0 = Instant::now();
    let probe = build_probe();
    let img = build_image();
    let dir = scratch("qemu_vfio_edu");
    eprintln!(
        "[{:5.1}s] probe {} image {}",
        t0.elapsed().as_secs_f64(),
        probe.display(),
        img.display()
    );
    let boot = Instant::now();
    let out = run_bounded(
        {
            let mut c = Command::new("bash");
            c.arg(workspace_root().join("tests/qemu/run-vfio.sh"))
                .arg(&img)
                .arg(&probe)
                .arg(&dir)
                .arg("vfio");
            c
        },
        Duration::from_secs(170),
    );
    let console = std::fs::read_to_string(dir.join("vfio.console")).unwrap_or_default();
    eprintln!(
        "[{:5.1}s] guest ran {:.1}s ({})",
        t0.elapsed().as_secs_f64(),
        boot.elapsed().as_secs_f64(),
        out.status
    );
    let show = |why: &str| -> String {
        format!(
            "{why}\n===== guest console (last 60 lines) =====\n{}\n===== qemu stderr =====\n{}",
            tail(&console, 60),
            tail(&String::from_utf8_lossy(&out.stderr), 20)
        )
    };
    let probe_lines: Vec<&str> = console
        .lines()
        .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL "))
        .collect();
    eprintln!("{}", probe_lines.join("\n"));
    assert!(
        console.contains("QF_DONE rc="),
        "{}",
        show("the guest did not finish")
    );
    for name in CHECKS {
        let key = format!("PASS {name}:");
        assert!(
            probe_lines.iter().any(|l| l.starts_with(&key)),
            "{}",
            show(&format!("edu_probe did not print {key:?}"))
        );
    }
    assert!(
        !probe_lines.iter().any(|l| l.starts_with("FAIL ")),
        "{}",
        show("edu_probe printed a FAIL line")
    );
    assert!(
        console.contains("EDU_PROBE_RESULT PASS checks=17 failed=0"),
        "{}",
        show("no EDU_PROBE_RESULT PASS line")
    );
    assert!(
        console.contains("QF_RESULT edu_probe rc=0"),
        "{}",
        show("edu_probe exited non-zero")
    );
    // The kernel's own witness of the blocked DMA: a DMAR fault at the IOVA edu_probe unmapped.
    let line = probe_lines
        .iter()
        .find(|l| l.starts_with("PASS dma_unmapped_blocked:"))
        .unwrap();
    let iova = line
        .split("at iova ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .expect("iova in the dma_unmapped_blocked line");
    let fault = format!("fault addr {iova} ");
    assert!(
        console
            .lines()
            .any(|l| l.contains("DMAR") && l.contains(&fault)),
        "{}",
        show(&format!(
            "no DMAR fault line with {fault:?} in the guest kernel log"
        ))
    );
    eprintln!(
        "kernel: {}",
        console
            .lines()
            .find(|l| l.contains(&fault))
            .unwrap_or_default()
            .trim()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
