//! PCI functions in sysfs: the address format, a function's IOMMU group, the driver it is
//! bound to, and the other members of its group (Linux `Documentation/ABI/testing/sysfs-bus-pci`,
//! `sysfs-kernel-iommu_groups`).
//!
//! Every lookup is relative to a sysfs root (normally `/sys`) so tests run on a fake tree.

use std::fmt;
use std::path::{Path, PathBuf};

use super::error::{Result, SysError};

/// A PCI function address, `domain:bus:device.function` (`DDDD:BB:DD.F`, hex), as sysfs and
/// VFIO name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PciAddress {
    /// PCI domain (segment), 16 bits.
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0–31.
    pub device: u8,
    /// Function number, 0–7.
    pub function: u8,
}

impl PciAddress {
    /// Parses `DDDD:BB:DD.F` or the short `BB:DD.F` (domain 0).
    ///
    /// Errors: [`SysError::BadAddress`].
    pub fn parse(text: &str) -> Result<PciAddress> {
        let bad = || SysError::BadAddress {
            text: text.to_string(),
        };
        let parts: Vec<&str> = text.trim().split(':').collect();
        let (domain, bus, devfn) = match parts.as_slice() {
            [d, b, df] => (u16::from_str_radix(d, 16).map_err(|_| bad())?, *b, *df),
            [b, df] => (0, *b, *df),
            _ => return Err(bad()),
        };
        let (dev, func) = devfn.split_once('.').ok_or_else(bad)?;
        let bus = u8::from_str_radix(bus, 16).map_err(|_| bad())?;
        let device = u8::from_str_radix(dev, 16).map_err(|_| bad())?;
        let function = u8::from_str_radix(func, 16).map_err(|_| bad())?;
        if device > 31 || function > 7 {
            return Err(bad());
        }
        Ok(PciAddress {
            domain,
            bus,
            device,
            function,
        })
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// PCI lookups under a sysfs root.
#[derive(Debug, Clone)]
pub struct SysfsPci {
    root: PathBuf,
}

impl Default for SysfsPci {
    fn default() -> Self {
        SysfsPci::new("/sys")
    }
}

impl SysfsPci {
    /// Lookups under `root` (normally `/sys`).
    pub fn new(root: impl Into<PathBuf>) -> SysfsPci {
        SysfsPci { root: root.into() }
    }

    /// `<root>/bus/pci/devices/<bdf>`.
    pub fn device_dir(&self, bdf: PciAddress) -> PathBuf {
        self.root.join("bus/pci/devices").join(bdf.to_string())
    }

    /// The function's IOMMU group number (the target of its `iommu_group` link).
    ///
    /// Errors: [`SysError::NoDevice`], [`SysError::NoIommuGroup`].
    pub fn iommu_group(&self, bdf: PciAddress) -> Result<u32> {
        let dir = self.device_dir(bdf);
        if !dir.exists() {
            return Err(SysError::NoDevice {
                bdf: bdf.to_string(),
                path: dir,
            });
        }
        let link = dir.join("iommu_group");
        let target = std::fs::read_link(&link).map_err(|_| SysError::NoIommuGroup {
            bdf: bdf.to_string(),
            path: link.clone(),
        })?;
        target
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| SysError::NoIommuGroup {
                bdf: bdf.to_string(),
                path: link,
            })
    }

    /// The driver the function is bound to (the name of its `driver` link), `None` if unbound.
    pub fn driver(&self, bdf: PciAddress) -> Option<String> {
        let target = std::fs::read_link(self.device_dir(bdf).join("driver")).ok()?;
        Some(target.file_name()?.to_string_lossy().into_owned())
    }

    /// Every PCI function in IOMMU group `group`, sorted
    /// (`<root>/kernel/iommu_groups/<group>/devices/`).
    pub fn group_members(&self, group: u32) -> Vec<PciAddress> {
        let dir = self
            .root
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let mut v: Vec<PciAddress> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| PciAddress::parse(&e.file_name().to_string_lossy()).ok())
            .collect();
        v.sort();
        v
    }

    /// Checks that the function exists, has an IOMMU group and is bound to vfio-pci; returns
    /// the group.
    ///
    /// Errors: [`SysError::NoDevice`], [`SysError::NoIommuGroup`], [`SysError::NotVfioPci`].
    pub fn check_vfio_bound(&self, bdf: PciAddress) -> Result<u32> {
        let group = self.iommu_group(bdf)?;
        match self.driver(bdf) {
            Some(d) if d == "vfio-pci" => Ok(group),
            other => Err(SysError::NotVfioPci {
                bdf: bdf.to_string(),
                driver: other.unwrap_or_else(|| "no driver".to_string()),
            }),
        }
    }

    /// The sysfs root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn addresses_parse_and_print_in_sysfs_form() {
        let a = PciAddress::parse("0000:01:00.1").unwrap();
        assert_eq!((a.domain, a.bus, a.device, a.function), (0, 1, 0, 1));
        assert_eq!(a.to_string(), "0000:01:00.1");
        assert_eq!(
            PciAddress::parse("02:1f.7").unwrap().to_string(),
            "0000:02:1f.7"
        );
        assert_eq!(PciAddress::parse("0002:01:00.0").unwrap().domain, 2);
        for bad in [
            "",
            "0000:01:00",
            "01:20.0",
            "00:00.8",
            "zz:00.0",
            "0:0:0:0.0",
        ] {
            assert!(
                matches!(PciAddress::parse(bad), Err(SysError::BadAddress { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn group_driver_and_members_from_a_fake_tree() {
        let root = std::env::temp_dir().join(format!("rdmesh-vfio-sysfs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dev = root.join("bus/pci/devices/0000:01:00.0");
        let dev2 = root.join("bus/pci/devices/0000:01:00.1");
        let g = root.join("kernel/iommu_groups/12/devices");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::create_dir_all(&dev2).unwrap();
        std::fs::create_dir_all(&g).unwrap();
        std::fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core")).unwrap();
        symlink("../../../kernel/iommu_groups/12", dev.join("iommu_group")).unwrap();
        symlink("../../../bus/pci/drivers/mlx5_core", dev.join("driver")).unwrap();
        symlink(&dev, g.join("0000:01:00.0")).unwrap();
        symlink(&dev2, g.join("0000:01:00.1")).unwrap();
        let s = SysfsPci::new(&root);
        let a = PciAddress::parse("0000:01:00.0").unwrap();
        let b = PciAddress::parse("0000:01:00.1").unwrap();
        assert_eq!(s.iommu_group(a).unwrap(), 12);
        assert_eq!(s.driver(a).as_deref(), Some("mlx5_core"));
        assert_eq!(s.driver(b), None);
        assert_eq!(s.group_members(12), vec![a, b]);
        let e = s.check_vfio_bound(a).unwrap_err();
        assert!(matches!(e, SysError::NotVfioPci { .. }));
        assert!(
            e.to_string().contains("bound to mlx5_core, not vfio-pci"),
            "{e}"
        );
        assert!(matches!(
            s.iommu_group(b),
            Err(SysError::NoIommuGroup { .. })
        ));
        let missing = PciAddress::parse("0000:09:00.0").unwrap();
        let e = s.iommu_group(missing).unwrap_err();
        assert!(e.to_string().contains("lspci -D"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
