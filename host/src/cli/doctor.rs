//! `rdmesh doctor`: checks a machine (a host or a passthrough guest) for rdmesh's VFIO path —
//! a ConnectX function driven from user space through vfio-pci — and says exactly what to fix.
//!
//! Only reads sysfs, procfs and `/dev` (no ioctl, no config-space writes). Each check prints
//! `OK`, `NOTE`, `WARN` or `FAIL` with what was found and, for a problem, the commands to run.
//! The command exits non-zero when any check FAILs: the VFIO path cannot work as the machine
//! stands. The roots are options so tests run on a fake tree.
//!
//! Sources: Linux `Documentation/driver-api/vfio.rst` (groups, viability, `/dev/vfio`),
//! `Documentation/ABI/testing/sysfs-bus-pci` (`driver_override`, `new_id`, `iommu_group`),
//! `sysfs-kernel-iommu_groups`; PCI IDs from Linux `mlx5_core_pci_table` (docs/vfio.md);
//! PCIe capability layout from the PCI Express Base spec §7.5.3 (Device Control bit 4 = Enable
//! Relaxed Ordering) and extended capability IDs 0x000D (ACS), 0x000F (ATS).

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// `rdmesh doctor` arguments.
#[derive(Debug, clap::Args)]
pub struct DoctorArgs {
    /// Root of sysfs (for tests: a fake tree).
    #[arg(long, default_value = "/sys")]
    pub sysfs_root: PathBuf,
    /// Root of procfs (`cmdline`, `meminfo`, `self/limits`, `cpuinfo`).
    #[arg(long, default_value = "/proc")]
    pub proc_root: PathBuf,
    /// Root of the device nodes (`vfio/vfio`, `vfio/<group>`).
    #[arg(long, default_value = "/dev")]
    pub dev_root: PathBuf,
    /// First contact with a function on vfio-pci (a PCI address, or `model` for the device
    /// model): bring-up up to INIT_HCA and back down, each command printed with its status and
    /// time, and a JSON transcript written (see --transcript). Runs instead of the checks.
    #[arg(long, value_name = "BDF")]
    pub probe: Option<String>,
    /// With --probe: where to write the transcript (default rdmesh-probe-<BDF>.json).
    #[arg(long, requires = "probe", value_name = "FILE")]
    pub transcript: Option<PathBuf>,
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Status {
    /// Fine.
    Ok,
    /// Information, nothing to do.
    Note,
    /// Works, but slower or fragile; the fix is given.
    Warn,
    /// The VFIO path cannot work until this is fixed.
    Fail,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "OK  ",
            Status::Note => "NOTE",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        })
    }
}

/// One finding: its status, a one-line message and the commands or steps that fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Outcome.
    pub status: Status,
    /// Short name of what was checked (`iommu`, `vfio`, `0000:01:00.0 driver`, ...).
    pub name: String,
    /// What was found.
    pub message: String,
    /// What to do (commands to run, one per line).
    pub fix: Vec<String>,
}

impl Check {
    fn new(status: Status, name: impl Into<String>, message: impl Into<String>) -> Check {
        Check {
            status,
            name: name.into(),
            message: message.into(),
            fix: Vec::new(),
        }
    }
    fn fix(mut self, lines: &[&str]) -> Check {
        self.fix.extend(lines.iter().map(|s| s.to_string()));
        self
    }
    fn fix_owned(mut self, lines: Vec<String>) -> Check {
        self.fix.extend(lines);
        self
    }
}

/// The machine's roots.
#[derive(Debug, Clone)]
pub struct Roots {
    /// sysfs (`/sys`).
    pub sys: PathBuf,
    /// procfs (`/proc`).
    pub proc: PathBuf,
    /// device nodes (`/dev`).
    pub dev: PathBuf,
}

/// NVIDIA (Mellanox) PCI vendor ID.
pub const MELLANOX_VENDOR: u16 = 0x15b3;

/// Name of a ConnectX / BlueField mlx5 function by PCI device ID (Linux `mlx5_core_pci_table`,
/// rdma-core `providers/mlx5/mlx5.c` `hca_table`); `None` for IDs mlx5 does not drive.
pub fn connectx_name(device: u16) -> Option<&'static str> {
    Some(match device {
        0x1017 => "ConnectX-5",
        0x1018 => "ConnectX-5 VF",
        0x1019 => "ConnectX-5 Ex",
        0x101a => "ConnectX-5 Ex VF",
        0x101b => "ConnectX-6",
        0x101c => "ConnectX-6 VF",
        0x101d => "ConnectX-6 Dx",
        0x101e => "ConnectX family mlx5Gen VF",
        0x101f => "ConnectX-6 Lx",
        0x1021 => "ConnectX-7",
        0x1023 => "ConnectX-8",
        0x1025 => "ConnectX-9",
        0x1027 => "ConnectX-10",
        0xa2d6 => "BlueField-2 integrated ConnectX-6 Dx",
        0xa2dc => "BlueField-3 integrated ConnectX-7",
        _ => return None,
    })
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn hex_id(p: &Path) -> Option<u16> {
    let s = read_trim(p)?;
    u16::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

fn link_name(p: &Path) -> Option<String> {
    Some(
        std::fs::read_link(p)
            .ok()?
            .file_name()?
            .to_string_lossy()
            .into_owned(),
    )
}

/// One PCI function as sysfs shows it.
#[derive(Debug, Clone)]
struct Function {
    bdf: String,
    vendor: u16,
    device: u16,
    driver: Option<String>,
    group: Option<u32>,
    class: u32,
}

fn function(sys: &Path, bdf: &str) -> Option<Function> {
    let d = sys.join("bus/pci/devices").join(bdf);
    Some(Function {
        bdf: bdf.to_string(),
        vendor: hex_id(&d.join("vendor"))?,
        device: hex_id(&d.join("device"))?,
        driver: link_name(&d.join("driver")),
        group: link_name(&d.join("iommu_group")).and_then(|g| g.parse().ok()),
        class: read_trim(&d.join("class"))
            .and_then(|c| u32::from_str_radix(c.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0),
    })
}

fn pci_functions(sys: &Path) -> Vec<Function> {
    let mut v: Vec<String> = std::fs::read_dir(sys.join("bus/pci/devices"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v.iter().filter_map(|b| function(sys, b)).collect()
}

/// Facts from a function's config space (sysfs `config`; only the first 64 bytes are readable
/// without root, so the capability lists may be out of reach).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct ConfigFacts {
    readable_caps: bool,
    relaxed_ordering: Option<bool>,
    ats: bool,
    acs: bool,
}

fn config_facts(cfg: &[u8]) -> ConfigFacts {
    let mut f = ConfigFacts::default();
    let rd16 = |o: usize| cfg.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let rd32 = |o: usize| {
        cfg.get(o..o + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    if cfg.len() < 256 || rd16(0x06).unwrap_or(0) & 0x10 == 0 {
        return f;
    }
    f.readable_caps = true;
    // Standard list: find the PCI Express capability (id 0x10); Device Control at +8.
    let mut at = cfg[0x34] as usize & !3;
    for _ in 0..48 {
        if at < 0x40 || at + 2 > cfg.len() {
            break;
        }
        if cfg[at] == 0x10 {
            f.relaxed_ordering = rd16(at + 8).map(|c| c & 0x10 != 0);
        }
        at = cfg[at + 1] as usize & !3;
    }
    // Extended list at 0x100 (needs the 4096-byte config space).
    let mut at = 0x100usize;
    for _ in 0..64 {
        let Some(h) = rd32(at) else { break };
        if h == 0 || h == u32::MAX {
            break;
        }
        match h & 0xffff {
            0x000d => f.acs = true,
            0x000f => f.ats = true,
            _ => {}
        }
        at = (h >> 20) as usize & !3;
        if at < 0x100 {
            break;
        }
    }
    f
}

/// Runs every check against `roots`.
pub fn diagnose(roots: &Roots) -> Vec<Check> {
    let mut out = Vec::new();
    let sys = &roots.sys;
    let cmdline = read_trim(&roots.proc.join("cmdline")).unwrap_or_default();
    let guest = read_trim(&roots.proc.join("cpuinfo")).is_some_and(|c| {
        c.lines()
            .any(|l| l.starts_with("flags") && l.contains(" hypervisor"))
    });

    // 1. IOMMU.
    let groups = std::fs::read_dir(sys.join("kernel/iommu_groups"))
        .map(|d| d.count())
        .unwrap_or(0);
    let param = cmdline
        .split_whitespace()
        .filter(|w| {
            w.starts_with("intel_iommu=") || w.starts_with("amd_iommu=") || w.starts_with("iommu=")
        })
        .collect::<Vec<_>>()
        .join(" ");
    if groups > 0 {
        out.push(Check::new(
            Status::Ok,
            "iommu",
            format!(
                "IOMMU on: {groups} IOMMU groups in {}/kernel/iommu_groups{}",
                sys.display(),
                if param.is_empty() {
                    String::new()
                } else {
                    format!(" (kernel command line: {param})")
                }
            ),
        ));
    } else {
        let mut fix = vec![
            "enable VT-d (Intel) or AMD-Vi/IOMMU (AMD) in the firmware setup".to_string(),
            "add intel_iommu=on (Intel; AMD turns its IOMMU on by default) and iommu=pt to the kernel command line (GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update-grub; Proxmox with systemd-boot: /etc/kernel/cmdline, then proxmox-boot-tool refresh), and reboot".to_string(),
        ];
        if guest {
            fix.push("this is a virtual machine: give it a virtual IOMMU (Proxmox: machine q35 and `qm set VMID --machine q35,viommu=intel`; QEMU: -device intel-iommu,intremap=on,caching-mode=on) — docs/vfio.md".to_string());
        }
        out.push(
            Check::new(
                Status::Fail,
                "iommu",
                format!(
                    "no IOMMU groups in {}/kernel/iommu_groups: the IOMMU is off or absent{}",
                    sys.display(),
                    if param.is_empty() {
                        " (no intel_iommu=/amd_iommu= on the kernel command line)".to_string()
                    } else {
                        format!(" (kernel command line has {param})")
                    }
                ),
            )
            .fix_owned(fix),
        );
    }

    // 2. VFIO.
    let container = roots.dev.join("vfio/vfio");
    if container.exists() {
        out.push(Check::new(
            Status::Ok,
            "vfio",
            format!("{} present", container.display()),
        ));
    } else {
        let loaded = sys.join("module/vfio_pci").exists() || sys.join("module/vfio").exists();
        out.push(
            Check::new(
                Status::Fail,
                "vfio",
                format!(
                    "{} missing: {}",
                    container.display(),
                    if loaded {
                        "the vfio modules are loaded but no container node exists (is /dev populated?)"
                    } else {
                        "vfio-pci is not loaded"
                    }
                ),
            )
            .fix(&[
                "modprobe vfio-pci",
                "echo vfio-pci > /etc/modules-load.d/vfio-pci.conf   # load it at every boot",
            ]),
        );
    }

    // 3. ConnectX functions, their groups and drivers.
    let all = pci_functions(sys);
    let cx: Vec<&Function> = all
        .iter()
        .filter(|f| f.vendor == MELLANOX_VENDOR && connectx_name(f.device).is_some())
        .collect();
    if cx.is_empty() {
        out.push(
            Check::new(
                Status::Fail,
                "connectx",
                format!(
                    "no ConnectX function (PCI vendor 15b3, mlx5 device IDs such as 1021 = ConnectX-7) in {}/bus/pci/devices",
                    sys.display()
                ),
            )
            .fix(&[
                "check `lspci -nn -d 15b3:`; in a VM, pass the function through (Proxmox: qm set VMID --hostpci0 0000:01:00.0,pcie=1) — docs/vfio.md",
            ]),
        );
    }
    for f in &cx {
        let name = connectx_name(f.device).unwrap_or("mlx5");
        let bdf = &f.bdf;
        out.push(Check::new(
            Status::Ok,
            bdf.clone(),
            format!("{name} (15b3:{:04x})", f.device),
        ));
        let Some(group) = f.group else {
            out.push(
                Check::new(
                    Status::Fail,
                    format!("{bdf} group"),
                    "no IOMMU group (the IOMMU is off for this function)",
                )
                .fix(&["see the iommu check above"]),
            );
            continue;
        };
        // Other members: all must be on vfio-pci or unbound (bridges on pcieport are fine).
        let members: Vec<Function> = std::fs::read_dir(
            sys.join("kernel/iommu_groups")
                .join(group.to_string())
                .join("devices"),
        )
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| function(sys, &e.file_name().to_string_lossy()))
        .collect();
        let others: Vec<&Function> = members.iter().filter(|m| &m.bdf != bdf).collect();
        let blocking: Vec<&&Function> = others
            .iter()
            .filter(|m| {
                let bridge = m.class >> 16 == 0x06;
                !bridge && !matches!(m.driver.as_deref(), None | Some("vfio-pci"))
            })
            .collect();
        let list = |v: &[&Function]| {
            v.iter()
                .map(|m| {
                    format!(
                        "{} ({:04x}:{:04x}, {})",
                        m.bdf,
                        m.vendor,
                        m.device,
                        m.driver.as_deref().unwrap_or("no driver")
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        if blocking.is_empty() {
            out.push(Check::new(
                Status::Ok,
                format!("{bdf} group"),
                if others.is_empty() {
                    format!("IOMMU group {group}, alone in it")
                } else {
                    format!("IOMMU group {group}, other members: {}", list(&others))
                },
            ));
        } else {
            let mut fix = Vec::new();
            for m in &blocking {
                fix.extend(bind_commands(&m.bdf));
            }
            fix.push("or pass the whole group through; if the group is large, the platform lacks ACS isolation: use another slot, or (at your own risk) the pcie_acs_override kernel patch".to_string());
            out.push(
                Check::new(
                    Status::Fail,
                    format!("{bdf} group"),
                    format!(
                        "IOMMU group {group} is not viable: these members are bound to host drivers: {} (every member must be on vfio-pci or unbound)",
                        list(&blocking.iter().map(|m| **m).collect::<Vec<_>>())
                    ),
                )
                .fix_owned(fix),
            );
        }
        match f.driver.as_deref() {
            Some("vfio-pci") => out.push(Check::new(
                Status::Ok,
                format!("{bdf} driver"),
                "bound to vfio-pci",
            )),
            other => {
                let mut fix = bind_commands(bdf);
                fix.push(format!(
                    "or, for every function with this ID: modprobe vfio-pci; echo 15b3 {:04x} > /sys/bus/pci/drivers/vfio-pci/new_id",
                    f.device
                ));
                out.push(
                    Check::new(
                        Status::Fail,
                        format!("{bdf} driver"),
                        format!(
                            "bound to {}, not vfio-pci{}",
                            other.unwrap_or("no driver"),
                            if other == Some("mlx5_core") {
                                " (the kernel driver owns it: its netdev and RDMA device disappear when you unbind)"
                            } else {
                                ""
                            }
                        ),
                    )
                    .fix_owned(fix),
                );
            }
        }
        let node = roots.dev.join("vfio").join(group.to_string());
        if f.driver.as_deref() == Some("vfio-pci") {
            if node.exists() {
                out.push(Check::new(
                    Status::Ok,
                    format!("{bdf} node"),
                    format!(
                        "{} present (open it as root or chown it to the user running rdmesh)",
                        node.display()
                    ),
                ));
            } else {
                out.push(
                    Check::new(
                        Status::Fail,
                        format!("{bdf} node"),
                        format!(
                            "{} missing although the function is on vfio-pci",
                            node.display()
                        ),
                    )
                    .fix(&["check dmesg for vfio errors; reload vfio-pci"]),
                );
            }
        }
        let d = sys.join("bus/pci/devices").join(bdf);
        if let (Some(speed), Some(width)) = (
            read_trim(&d.join("current_link_speed")),
            read_trim(&d.join("current_link_width")),
        ) {
            out.push(Check::new(
                Status::Note,
                format!("{bdf} link"),
                format!("PCIe {speed} x{width}"),
            ));
        }
        let facts = std::fs::read(d.join("config"))
            .map(|c| config_facts(&c))
            .unwrap_or_default();
        if !facts.readable_caps {
            out.push(Check::new(
                Status::Note,
                format!("{bdf} pcie"),
                "PCIe capabilities not readable (run as root for the relaxed-ordering / ATS / ACS notes)",
            ));
        } else {
            out.push(Check::new(
                Status::Note,
                format!("{bdf} pcie"),
                format!(
                    "relaxed ordering {}, ATS capability {}, ACS capability {}",
                    match facts.relaxed_ordering {
                        Some(true) => "enabled",
                        Some(false) => "disabled",
                        None => "unknown",
                    },
                    if facts.ats { "present" } else { "absent" },
                    if facts.acs { "present" } else { "absent" }
                ),
            ));
        }
    }

    // 4. Hugepages.
    let meminfo = read_trim(&roots.proc.join("meminfo")).unwrap_or_default();
    let field = |k: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
    };
    let nr2m = read_trim(&sys.join("kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"))
        .and_then(|s| s.parse::<u64>().ok())
        .or_else(|| {
            (field("Hugepagesize:") == Some(2048))
                .then(|| field("HugePages_Total:"))
                .flatten()
        });
    match nr2m {
        Some(n) if n > 0 => out.push(Check::new(
            Status::Ok,
            "hugepages",
            format!(
                "{n} × 2 MiB hugepages reserved ({} free): DMA blocks use them",
                field("HugePages_Free:").map_or("?".into(), |f| f.to_string())
            ),
        )),
        _ => out.push(
            Check::new(
                Status::Warn,
                "hugepages",
                "no 2 MiB hugepages reserved: DMA memory falls back to 4 KiB pages (more IOMMU entries and TLB misses)",
            )
            .fix(&[
                "echo 512 > /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages   # 1 GiB now",
                "or add hugepagesz=2M hugepages=512 to the kernel command line",
            ]),
        ),
    }

    // 5. Memlock limit (VFIO_IOMMU_MAP_DMA pins pages and charges them to RLIMIT_MEMLOCK unless
    //    the process has CAP_IPC_LOCK, as root does).
    let limits = read_trim(&roots.proc.join("self/limits")).unwrap_or_default();
    let memlock = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string));
    let root = read_trim(&roots.proc.join("self/status"))
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .map(|u| u.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    const WANT: u64 = 1 << 30;
    match memlock.as_deref() {
        Some("unlimited") => out.push(Check::new(Status::Ok, "memlock", "memlock limit unlimited")),
        Some(v) => {
            let bytes: u64 = v.parse().unwrap_or(0);
            let text = format!("memlock limit {} KiB", bytes / 1024);
            if root {
                out.push(Check::new(
                    Status::Ok,
                    "memlock",
                    format!("{text}; running as root (CAP_IPC_LOCK): VFIO pins without limit"),
                ));
            } else if bytes < WANT {
                out.push(
                    Check::new(
                        Status::Warn,
                        "memlock",
                        format!("{text}: VFIO DMA mappings of more than that fail (each queue, CQ and registered buffer is pinned)"),
                    )
                    .fix(&[
                        "ulimit -l unlimited   # in the shell that starts rdmesh (needs a raised hard limit)",
                        "or in /etc/security/limits.conf: <user> - memlock unlimited; systemd services: LimitMEMLOCK=infinity",
                    ]),
                );
            } else {
                out.push(Check::new(Status::Ok, "memlock", text));
            }
        }
        None => out.push(Check::new(
            Status::Note,
            "memlock",
            "memlock limit unknown (no Max locked memory in /proc/self/limits)",
        )),
    }

    // 6. Notes for guests.
    if guest {
        out.push(Check::new(
            Status::Note,
            "guest",
            "running in a virtual machine: VFIO here needs a virtual IOMMU from the hypervisor (Proxmox: viommu=intel; QEMU: -device intel-iommu,intremap=on,caching-mode=on), and the host needs its own IOMMU on with the function bound to vfio-pci and passed through",
        ));
        out.push(Check::new(
            Status::Note,
            "guest pcie",
            "ATS is normally not enabled for a device assigned behind QEMU's virtual IOMMU (rdmesh does not need it); relaxed ordering depends on the host's root port and the device's Device Control setting, which QEMU passes through — leave it as the host firmware set it; ACS isolation is decided on the host (its IOMMU groups), not in the guest",
        ));
    }
    out
}

/// The commands that bind `bdf` to vfio-pci (driver_override; survives new_id ID clashes).
fn bind_commands(bdf: &str) -> Vec<String> {
    vec![
        "modprobe vfio-pci".to_string(),
        format!("echo {bdf} > /sys/bus/pci/devices/{bdf}/driver/unbind   # if bound"),
        format!("echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override"),
        format!("echo {bdf} > /sys/bus/pci/drivers_probe"),
    ]
}

/// Writes the report of `checks` to `w`; returns the number of FAILs.
pub fn report(checks: &[Check], w: &mut impl std::io::Write) -> std::io::Result<usize> {
    for c in checks {
        writeln!(w, "{} {:<20} {}", c.status, c.name, c.message)?;
        for f in &c.fix {
            writeln!(w, "       fix: {f}")?;
        }
    }
    let fails = checks.iter().filter(|c| c.status == Status::Fail).count();
    let warns = checks.iter().filter(|c| c.status == Status::Warn).count();
    if fails == 0 {
        writeln!(
            w,
            "VFIO path: ready ({warns} warning(s)). rdmesh can drive the function(s) above through vfio-pci."
        )?;
    } else {
        writeln!(
            w,
            "VFIO path: NOT usable on this machine — {fails} check(s) failed, {warns} warning(s). Fix the FAIL lines above (docs/vfio.md has the whole procedure)."
        )?;
    }
    Ok(fails)
}

/// Runs `rdmesh doctor`: prints the report; an error (exit status 1) when a check failed.
pub fn run(args: &DoctorArgs) -> Result<()> {
    if let Some(target) = &args.probe {
        return super::probe::run(target, args.transcript.as_deref());
    }
    let roots = Roots {
        sys: args.sysfs_root.clone(),
        proc: args.proc_root.clone(),
        dev: args.dev_root.clone(),
    };
    let checks = diagnose(&roots);
    let fails = report(&checks, &mut std::io::stdout().lock()).map_err(|source| Error::Io {
        context: "writing the doctor report".into(),
        source,
    })?;
    if fails > 0 {
        return Err(Error::Config(format!(
            "the VFIO path cannot work here: {fails} check(s) failed (see above)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Tree {
        root: PathBuf,
    }

    impl Tree {
        fn new(name: &str) -> Tree {
            let root =
                std::env::temp_dir().join(format!("rdmesh-doctor-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            for d in [
                "sys/bus/pci/devices",
                "sys/kernel/iommu_groups",
                "proc/self",
                "dev",
            ] {
                std::fs::create_dir_all(root.join(d)).unwrap();
            }
            Tree { root }
        }
        fn roots(&self) -> Roots {
            Roots {
                sys: self.root.join("sys"),
                proc: self.root.join("proc"),
                dev: self.root.join("dev"),
            }
        }
        fn write(&self, rel: &str, text: &str) {
            let p = self.root.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        fn function(
            &self,
            bdf: &str,
            vendor: u16,
            device: u16,
            class: u32,
            group: u32,
            driver: Option<&str>,
        ) {
            let d = format!("sys/bus/pci/devices/{bdf}");
            self.write(&format!("{d}/vendor"), &format!("0x{vendor:04x}\n"));
            self.write(&format!("{d}/device"), &format!("0x{device:04x}\n"));
            self.write(&format!("{d}/class"), &format!("0x{class:06x}\n"));
            let g = self
                .root
                .join(format!("sys/kernel/iommu_groups/{group}/devices"));
            std::fs::create_dir_all(&g).unwrap();
            let dev = self.root.join(&d);
            let _ = symlink(&dev, g.join(bdf));
            let _ = symlink(
                format!("../../../kernel/iommu_groups/{group}"),
                dev.join("iommu_group"),
            );
            if let Some(drv) = driver {
                std::fs::create_dir_all(self.root.join(format!("sys/bus/pci/drivers/{drv}")))
                    .unwrap();
                symlink(
                    format!("../../../bus/pci/drivers/{drv}"),
                    dev.join("driver"),
                )
                .unwrap();
            }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    fn find<'a>(c: &'a [Check], name: &str) -> &'a Check {
        c.iter()
            .find(|c| c.name == name)
            .unwrap_or_else(|| panic!("no check {name}: {c:#?}"))
    }

    /// A 4096-byte config space with a PCIe capability at 0x40 (Device Control RO bit as
    /// given) and extended ATS then ACS capabilities.
    fn config(ro: bool) -> Vec<u8> {
        let mut c = vec![0u8; 4096];
        c[0x06] = 0x10; // status: capabilities list
        c[0x34] = 0x40;
        c[0x40] = 0x10; // PCIe capability, next 0
        c[0x48] = if ro { 0x10 } else { 0 };
        c[0x100..0x104].copy_from_slice(&(0x000fu32 | (1 << 16) | (0x180 << 20)).to_le_bytes());
        c[0x180..0x184].copy_from_slice(&(0x000du32 | (1 << 16)).to_le_bytes());
        c
    }

    fn ready_tree(t: &Tree) {
        t.write(
            "proc/cmdline",
            "BOOT_IMAGE=/vmlinuz root=/dev/sda1 intel_iommu=on iommu=pt\n",
        );
        t.write(
            "proc/meminfo",
            "HugePages_Total:     512\nHugePages_Free:      500\nHugepagesize:       2048 kB\n",
        );
        t.write(
            "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages",
            "512\n",
        );
        t.write("proc/self/limits", "Limit                     Soft Limit           Hard Limit           Units\nMax locked memory         unlimited            unlimited            bytes\n");
        t.write(
            "proc/self/status",
            "Name:\trdmesh\nUid:\t1000\t1000\t1000\t1000\n",
        );
        t.write("dev/vfio/vfio", "");
        t.write("dev/vfio/14", "");
        t.function(
            "0000:01:00.0",
            0x15b3,
            0x1021,
            0x020000,
            14,
            Some("vfio-pci"),
        );
        t.function(
            "0000:00:01.0",
            0x8086,
            0x1234,
            0x060400,
            14,
            Some("pcieport"),
        );
        t.write(
            "sys/bus/pci/devices/0000:01:00.0/current_link_speed",
            "32.0 GT/s PCIe\n",
        );
        t.write("sys/bus/pci/devices/0000:01:00.0/current_link_width", "4\n");
        std::fs::write(
            t.root.join("sys/bus/pci/devices/0000:01:00.0/config"),
            config(true),
        )
        .unwrap();
    }

    #[test]
    fn a_ready_machine_passes_with_notes() {
        let t = Tree::new("ready");
        ready_tree(&t);
        let c = diagnose(&t.roots());
        assert!(c.iter().all(|c| c.status != Status::Fail), "{c:#?}");
        assert_eq!(find(&c, "0000:01:00.0").message, "ConnectX-7 (15b3:1021)");
        assert_eq!(find(&c, "0000:01:00.0 driver").status, Status::Ok);
        assert!(find(&c, "0000:01:00.0 group")
            .message
            .contains("0000:00:01.0 (8086:1234, pcieport)"));
        assert_eq!(find(&c, "hugepages").status, Status::Ok);
        assert_eq!(find(&c, "memlock").status, Status::Ok);
        assert_eq!(
            find(&c, "0000:01:00.0 link").message,
            "PCIe 32.0 GT/s PCIe x4"
        );
        assert_eq!(
            find(&c, "0000:01:00.0 pcie").message,
            "relaxed ordering enabled, ATS capability present, ACS capability present"
        );
        let mut out = Vec::new();
        assert_eq!(report(&c, &mut out).unwrap(), 0);
        assert!(String::from_utf8(out).unwrap().contains("VFIO path: ready"));
    }

    #[test]
    fn a_function_on_mlx5_core_gets_the_bind_commands() {
        let t = Tree::new("mlx5core");
        ready_tree(&t);
        std::fs::remove_file(t.root.join("sys/bus/pci/devices/0000:01:00.0/driver")).unwrap();
        symlink(
            "../../../bus/pci/drivers/mlx5_core",
            t.root.join("sys/bus/pci/devices/0000:01:00.0/driver"),
        )
        .unwrap();
        // a second function in the same group, still on the host driver
        t.function(
            "0000:01:00.1",
            0x15b3,
            0x1021,
            0x020000,
            14,
            Some("mlx5_core"),
        );
        std::fs::write(
            t.root.join("sys/bus/pci/devices/0000:01:00.0/config"),
            config(false),
        )
        .unwrap();
        let c = diagnose(&t.roots());
        let d = find(&c, "0000:01:00.0 driver");
        assert_eq!(d.status, Status::Fail);
        assert!(
            d.message.starts_with("bound to mlx5_core, not vfio-pci"),
            "{}",
            d.message
        );
        assert!(d.fix.contains(
            &"echo 0000:01:00.0 > /sys/bus/pci/devices/0000:01:00.0/driver/unbind   # if bound"
                .to_string()
        ));
        assert!(d.fix.contains(
            &"echo vfio-pci > /sys/bus/pci/devices/0000:01:00.0/driver_override".to_string()
        ));
        assert!(d
            .fix
            .iter()
            .any(|f| f.ends_with("echo 15b3 1021 > /sys/bus/pci/drivers/vfio-pci/new_id")));
        let g = find(&c, "0000:01:00.0 group");
        assert_eq!(g.status, Status::Fail);
        assert!(
            g.message.contains("0000:01:00.1 (15b3:1021, mlx5_core)"),
            "{}",
            g.message
        );
        assert!(
            !g.message.contains("pcieport"),
            "bridges do not block viability: {}",
            g.message
        );
        assert!(find(&c, "0000:01:00.0 pcie")
            .message
            .starts_with("relaxed ordering disabled"));
        let mut out = Vec::new();
        assert!(report(&c, &mut out).unwrap() >= 2);
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("VFIO path: NOT usable"));
    }

    #[test]
    fn no_iommu_no_vfio_no_connectx_in_a_guest() {
        let t = Tree::new("bare");
        t.write("proc/cmdline", "console=ttyS0 quiet\n");
        t.write(
            "proc/cpuinfo",
            "processor\t: 0\nflags\t\t: fpu vme sse2 hypervisor lahf_lm\n",
        );
        t.write(
            "proc/meminfo",
            "HugePages_Total:       0\nHugepagesize:       2048 kB\n",
        );
        t.write(
            "proc/self/limits",
            "Max locked memory         8388608              8388608              bytes\n",
        );
        t.write("proc/self/status", "Uid:\t1000\t1000\t1000\t1000\n");
        t.function(
            "0000:00:03.0",
            0x1af4,
            0x1000,
            0x020000,
            0,
            Some("virtio-pci"),
        );
        std::fs::remove_dir_all(t.root.join("sys/kernel/iommu_groups")).unwrap();
        std::fs::create_dir_all(t.root.join("sys/kernel/iommu_groups")).unwrap();
        let c = diagnose(&t.roots());
        let i = find(&c, "iommu");
        assert_eq!(i.status, Status::Fail);
        assert!(
            i.message
                .contains("no intel_iommu=/amd_iommu= on the kernel command line"),
            "{}",
            i.message
        );
        assert!(
            i.fix.iter().any(|f| f.contains("viommu=intel")),
            "guest hint: {:?}",
            i.fix
        );
        assert_eq!(find(&c, "vfio").status, Status::Fail);
        assert!(find(&c, "vfio")
            .fix
            .contains(&"modprobe vfio-pci".to_string()));
        assert_eq!(find(&c, "connectx").status, Status::Fail);
        assert_eq!(find(&c, "hugepages").status, Status::Warn);
        let m = find(&c, "memlock");
        assert_eq!(m.status, Status::Warn);
        assert!(
            m.message.starts_with("memlock limit 8192 KiB"),
            "{}",
            m.message
        );
        assert!(c.iter().any(|c| c.name == "guest pcie"));
        let mut out = Vec::new();
        assert_eq!(report(&c, &mut out).unwrap(), 3);
    }

    #[test]
    fn config_space_parsing_survives_garbage() {
        assert_eq!(config_facts(&[]), ConfigFacts::default());
        assert_eq!(config_facts(&[0xff; 64]), ConfigFacts::default());
        let mut c = config(true);
        c[0x41] = 0x40; // capability pointing at itself
        c[0x100..0x104].copy_from_slice(&(0x000fu32 | (0x100 << 20)).to_le_bytes()); // loop
        let f = config_facts(&c);
        assert!(f.readable_caps && f.ats && f.relaxed_ordering == Some(true));
        let f = config_facts(&[0xffu8; 4096]);
        assert!(!f.ats && !f.acs);
    }

    #[test]
    fn device_ids_name_the_generation() {
        assert_eq!(connectx_name(0x1021), Some("ConnectX-7"));
        assert_eq!(
            connectx_name(0xa2dc),
            Some("BlueField-3 integrated ConnectX-7")
        );
        assert_eq!(connectx_name(0x101e), Some("ConnectX family mlx5Gen VF"));
        assert_eq!(connectx_name(0x6750), None);
    }
}
