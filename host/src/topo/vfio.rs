//! ConnectX functions bound to vfio-pci: rdmesh's vfio provider drives them without a kernel
//! driver, so they have neither an RDMA device nor a netdev in sysfs. Discovery lists each as a
//! port of kind [`DeviceKind::Vfio`](super::DeviceKind::Vfio) named `mlx5_vfio_<BDF>`, with
//! its PCIe link; its address comes from the user (`RDMESH_NICS=vfio:BDF=addr/prefix`), since
//! nothing in the kernel holds one.

use std::path::Path;

use super::error::Result;
use super::pci::{pci_addr_of_dir, read_pcie_link};
use super::{DeviceKind, Port};

/// NVIDIA (Mellanox) PCI vendor ID.
pub const MELLANOX_VENDOR: u16 = 0x15b3;

/// mlx5 device IDs (Linux `mlx5_core_pci_table`): ConnectX-5 to -10, BlueField, VFs.
pub fn is_mlx5(device: u16) -> bool {
    matches!(
        device,
        0x1017..=0x101f | 0x1021 | 0x1023 | 0x1025 | 0x1027 | 0xa2d2 | 0xa2d3 | 0xa2d6 | 0xa2dc
    )
}

fn hex(p: &Path) -> Option<u16> {
    let s = std::fs::read_to_string(p).ok()?;
    u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// The device name of the function at `bdf`.
pub fn device_name(bdf: &str) -> String {
    format!("mlx5_vfio_{bdf}")
}

/// One port per mlx5 function under `<sysfs_root>/bus/pci/devices` whose driver is vfio-pci.
/// Its state is unknown until rdmesh opens it, so it is listed as down with no netdev.
///
/// Errors: a PCIe link attribute that does not parse.
pub fn vfio_ports(root: &Path) -> Result<Vec<Port>> {
    let Ok(entries) = std::fs::read_dir(root.join("bus/pci/devices")) else {
        return Ok(Vec::new());
    };
    let mut dirs: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    dirs.sort();
    let mut out = Vec::new();
    for d in dirs {
        if hex(&d.join("vendor")) != Some(MELLANOX_VENDOR)
            || !hex(&d.join("device")).is_some_and(is_mlx5)
        {
            continue;
        }
        let driver = std::fs::read_link(d.join("driver"))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()));
        if driver.as_deref() != Some("vfio-pci") {
            continue;
        }
        let Some(pci) = pci_addr_of_dir(&d) else {
            continue;
        };
        out.push(Port {
            device: device_name(&pci.to_string()),
            kind: DeviceKind::Vfio,
            port: 1,
            up: false,
            link_up: false,
            port_state: None,
            link_layer: None,
            rate: None,
            netdev: None,
            addresses: Vec::new(),
            gids: Vec::new(),
            gid: None,
            gid_miss: None,
            mtu: None,
            speed_mbps: None,
            pci: Some(pci),
            pcie: read_pcie_link(&d)?,
            siblings: Vec::new(),
            sys_image_guid: None,
            phys_port_id: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    fn function(root: &Path, bdf: &str, device: &str, driver: &str) {
        let d = root.join("bus/pci/devices").join(bdf);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("vendor"), "0x15b3\n").unwrap();
        std::fs::write(d.join("device"), format!("{device}\n")).unwrap();
        std::fs::write(d.join("current_link_speed"), "32.0 GT/s PCIe\n").unwrap();
        std::fs::write(d.join("current_link_width"), "4\n").unwrap();
        let drv = root.join("bus/pci/drivers").join(driver);
        std::fs::create_dir_all(&drv).unwrap();
        std::os::unix::fs::symlink(&drv, d.join("driver")).unwrap();
    }

    #[test]
    fn lists_mlx5_functions_on_vfio_pci_only() {
        let t = tempfile::tempdir().unwrap();
        function(t.path(), "0000:01:00.0", "0x1021", "vfio-pci");
        function(t.path(), "0000:01:00.1", "0x1021", "mlx5_core");
        function(t.path(), "0002:01:00.0", "0x1021", "vfio-pci");
        function(t.path(), "0000:03:00.0", "0x1003", "vfio-pci"); // ConnectX-3: mlx4
        let p = vfio_ports(t.path()).unwrap();
        let names: Vec<&str> = p.iter().map(|p| p.device.as_str()).collect();
        assert_eq!(
            names,
            ["mlx5_vfio_0000:01:00.0", "mlx5_vfio_0002:01:00.0"],
            "{p:?}"
        );
        assert_eq!(p[0].kind, DeviceKind::Vfio);
        assert_eq!(p[0].pcie.map(|l| l.width), Some(4));
        assert!(p[0].netdev.is_none() && !p[0].up);
        assert!(vfio_ports(&t.path().join("missing")).unwrap().is_empty());
    }
}
