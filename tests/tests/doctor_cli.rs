//! `rdmesh doctor` end to end: on this machine (no IOMMU, no /dev/vfio, no ConnectX) it must
//! say plainly that the VFIO path cannot work and exit non-zero; on a fake sysfs/procfs/dev tree
//! of a ready passthrough setup it must pass, and on one with the function still on mlx5_core
//! it must print the exact bind commands.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rdmesh_tests::{rdmesh_bin, scratch};

fn doctor(args: &[&str]) -> (Output, String) {
    let out = Command::new(rdmesh_bin())
        .arg("doctor")
        .args(args)
        .output()
        .expect("running rdmesh doctor");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!(
        "--- rdmesh doctor {args:?}: {}\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

#[test]
fn this_machine_is_reported_plainly() {
    let (out, text) = doctor(&[]);
    let fails = text.lines().filter(|l| l.starts_with("FAIL")).count();
    assert_eq!(
        out.status.success(),
        fails == 0,
        "exit status must be non-zero exactly when a check fails"
    );
    assert!(
        text.lines().any(|l| l.starts_with("VFIO path: ")),
        "no summary line"
    );
    if !Path::new("/dev/vfio/vfio").exists() {
        assert!(!out.status.success());
        assert!(
            text.contains("FAIL vfio                 /dev/vfio/vfio missing"),
            "must name the missing container node"
        );
        assert!(text.contains("fix: modprobe vfio-pci"));
        assert!(text.contains("VFIO path: NOT usable on this machine"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("rdmesh: error: the VFIO path cannot work here"),
            "{err}"
        );
    }
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A passthrough guest with a ConnectX-7 function at 0000:01:00.0 in IOMMU group 7, bound to
/// `driver`.
fn tree(name: &str, driver: &str) -> PathBuf {
    let root = scratch(name);
    write(
        &root,
        "proc/cmdline",
        "root=/dev/vda1 intel_iommu=on iommu=pt\n",
    );
    write(
        &root,
        "proc/cpuinfo",
        "processor\t: 0\nflags\t\t: fpu sse2 hypervisor\n",
    );
    write(
        &root,
        "proc/meminfo",
        "HugePages_Total:     256\nHugePages_Free:      256\nHugepagesize:       2048 kB\n",
    );
    write(
        &root,
        "proc/self/limits",
        "Max locked memory         unlimited            unlimited            bytes\n",
    );
    write(&root, "proc/self/status", "Uid:\t0\t0\t0\t0\n");
    write(&root, "dev/vfio/vfio", "");
    write(&root, "dev/vfio/7", "");
    let d = root.join("sys/bus/pci/devices/0000:01:00.0");
    write(&root, "sys/bus/pci/devices/0000:01:00.0/vendor", "0x15b3\n");
    write(&root, "sys/bus/pci/devices/0000:01:00.0/device", "0x1021\n");
    write(
        &root,
        "sys/bus/pci/devices/0000:01:00.0/class",
        "0x020000\n",
    );
    let g = root.join("sys/kernel/iommu_groups/7/devices");
    std::fs::create_dir_all(&g).unwrap();
    symlink(&d, g.join("0000:01:00.0")).unwrap();
    symlink("../../../kernel/iommu_groups/7", d.join("iommu_group")).unwrap();
    std::fs::create_dir_all(root.join("sys/bus/pci/drivers").join(driver)).unwrap();
    symlink(
        format!("../../../bus/pci/drivers/{driver}"),
        d.join("driver"),
    )
    .unwrap();
    root
}

fn roots(root: &Path) -> Vec<String> {
    [
        ("--sysfs-root", "sys"),
        ("--proc-root", "proc"),
        ("--dev-root", "dev"),
    ]
    .iter()
    .flat_map(|(flag, dir)| [flag.to_string(), root.join(dir).display().to_string()])
    .collect()
}

#[test]
fn a_ready_guest_passes() {
    let root = tree("doctor-ready", "vfio-pci");
    let args = roots(&root);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, text) = doctor(&args);
    assert!(out.status.success());
    assert!(text.contains("OK   0000:01:00.0         ConnectX-7 (15b3:1021)"));
    assert!(text.contains("OK   0000:01:00.0 driver  bound to vfio-pci"));
    assert!(text.contains("IOMMU group 7, alone in it"));
    assert!(text.contains("VFIO path: ready (0 warning(s))"));
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn a_function_on_mlx5_core_gets_bind_commands() {
    let root = tree("doctor-mlx5core", "mlx5_core");
    let args = roots(&root);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (out, text) = doctor(&args);
    assert!(!out.status.success());
    assert!(text.contains("FAIL 0000:01:00.0 driver  bound to mlx5_core, not vfio-pci"));
    for cmd in [
        "fix: echo 0000:01:00.0 > /sys/bus/pci/devices/0000:01:00.0/driver/unbind",
        "fix: echo vfio-pci > /sys/bus/pci/devices/0000:01:00.0/driver_override",
        "fix: echo 0000:01:00.0 > /sys/bus/pci/drivers_probe",
        "echo 15b3 1021 > /sys/bus/pci/drivers/vfio-pci/new_id",
    ] {
        assert!(text.contains(cmd), "missing {cmd:?}");
    }
    assert!(text.contains("VFIO path: NOT usable on this machine — 1 check(s) failed"));
    let _ = std::fs::remove_dir_all(root);
}
