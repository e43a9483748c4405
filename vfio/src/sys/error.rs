//! Errors of the VFIO system layer. Each names the path, group, device (PCI address) or region
//! involved and what to check.

use std::io;
use std::path::PathBuf;

/// An error of the VFIO system layer ([`crate::sys`]).
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// A VFIO device node (`/dev/vfio/vfio` or `/dev/vfio/<group>`) does not exist.
    #[error(
        "{path}: does not exist — {hint} (run `rdmesh doctor` for a full check of the VFIO path)"
    )]
    NodeMissing {
        /// The device node.
        path: PathBuf,
        /// What to check.
        hint: String,
    },
    /// A VFIO device node could not be opened for reading and writing.
    #[error("{path}: permission denied — is the group bound to vfio-pci and are you root (or the owner of {path})?")]
    PermissionDenied {
        /// The device node.
        path: PathBuf,
    },
    /// A VFIO group node is busy (another process, or QEMU, holds it).
    #[error(
        "{path}: busy — another process (a VM, another driver instance) holds this VFIO group"
    )]
    Busy {
        /// The device node.
        path: PathBuf,
    },
    /// The PCI address is malformed.
    #[error("{text:?} is not a PCI address (expected DDDD:BB:DD.F, e.g. 0000:01:00.0)")]
    BadAddress {
        /// What was given.
        text: String,
    },
    /// The PCI function is not in sysfs.
    #[error("PCI device {bdf} not found at {path} — check the address with `lspci -D`")]
    NoDevice {
        /// PCI address.
        bdf: String,
        /// The sysfs path looked at.
        path: PathBuf,
    },
    /// The function has no IOMMU group: the IOMMU is off.
    #[error("PCI device {bdf} has no IOMMU group ({path} missing) — the IOMMU is off: enable VT-d/AMD-Vi in the firmware and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD)")]
    NoIommuGroup {
        /// PCI address.
        bdf: String,
        /// The missing `iommu_group` link.
        path: PathBuf,
    },
    /// The function is not bound to vfio-pci.
    #[error("PCI device {bdf} is bound to {driver}, not vfio-pci — run: echo {bdf} > /sys/bus/pci/devices/{bdf}/driver/unbind; echo vfio-pci > /sys/bus/pci/devices/{bdf}/driver_override; echo {bdf} > /sys/bus/pci/drivers_probe")]
    NotVfioPci {
        /// PCI address.
        bdf: String,
        /// The driver it is bound to (`none` when unbound).
        driver: String,
    },
    /// A VFIO ioctl failed (through `vfio-ioctls`).
    #[error("{context}: {source}")]
    Vfio {
        /// What was being done, naming the device or group.
        context: String,
        /// The error of `vfio-ioctls`.
        #[source]
        source: vfio_ioctls::VfioError,
    },
    /// A system call failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, naming the device, group or region, and what to check.
        context: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A region is missing, too small or cannot be mapped.
    #[error("PCI device {bdf} region {index}: {reason}")]
    Region {
        /// PCI address.
        bdf: String,
        /// VFIO region index (0–5 are BAR0–BAR5, 7 is PCI config space).
        index: u32,
        /// What is wrong.
        reason: String,
    },
    /// An interrupt could not be set up.
    #[error("PCI device {bdf}: {reason}")]
    Irq {
        /// PCI address.
        bdf: String,
        /// What failed.
        reason: String,
    },
    /// The IOMMU information is unusable.
    #[error("VFIO_IOMMU_GET_INFO: {reason}")]
    IommuInfo {
        /// What is wrong.
        reason: String,
    },
}

impl SysError {
    /// Maps the error of opening a VFIO device node to a clear error naming `path`.
    ///
    /// `missing_hint` says what to check when the node does not exist.
    pub fn open_node(path: PathBuf, err: io::Error, missing_hint: &str) -> SysError {
        match err.kind() {
            io::ErrorKind::NotFound => SysError::NodeMissing {
                path,
                hint: missing_hint.to_string(),
            },
            io::ErrorKind::PermissionDenied => SysError::PermissionDenied { path },
            _ if err.raw_os_error() == Some(libc::EBUSY) => SysError::Busy { path },
            _ => SysError::Io {
                context: format!("opening {}", path.display()),
                source: err,
            },
        }
    }
}

/// Result alias of the system layer.
pub type Result<T> = std::result::Result<T, SysError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_node_errors_name_the_path_and_what_to_check() {
        let e = SysError::open_node(
            "/dev/vfio/12".into(),
            io::Error::from(io::ErrorKind::PermissionDenied),
            "",
        );
        assert_eq!(
            e.to_string(),
            "/dev/vfio/12: permission denied — is the group bound to vfio-pci and are you root (or the owner of /dev/vfio/12)?"
        );
        let e = SysError::open_node(
            "/dev/vfio/vfio".into(),
            io::Error::from(io::ErrorKind::NotFound),
            "load vfio-pci",
        );
        assert!(matches!(e, SysError::NodeMissing { .. }));
        assert!(e
            .to_string()
            .starts_with("/dev/vfio/vfio: does not exist — load vfio-pci"));
        let e = SysError::open_node(
            "/dev/vfio/3".into(),
            io::Error::from_raw_os_error(libc::EBUSY),
            "",
        );
        assert!(matches!(e, SysError::Busy { .. }), "{e}");
    }
}
