//! Network interfaces (`<sysfs>/class/net/<name>`): MTU, speed, carrier, the PCI function
//! behind them, and which netdev belongs to which RDMA port.
//!
//! Formats (Linux `net/core/net-sysfs.c`): `mtu` in bytes; `speed` in Mb/s ("-1" when unknown,
//! EINVAL when the interface is down); `carrier` "1"/"0" (EINVAL when down); `operstate`
//! ("up", "down", "unknown", …, RFC 2863 names in lower case); `dev_port` (0-based port of a
//! multi-port function); `phys_port_id` (hex id of the physical port, EOPNOTSUPP on most
//! drivers); `type` (ARPHRD_*: 1 Ethernet, 32 InfiniBand, 772 loopback); `device` → the PCI
//! function (absent for virtual interfaces: veth, bridge, loopback).

use std::path::{Path, PathBuf};

use super::error::Result;
use super::sysfs::{list_dir, read_attr, read_num, RdmaDevice, RdmaPort};

/// `ARPHRD_LOOPBACK` (include/uapi/linux/if_arp.h).
pub const ARPHRD_LOOPBACK: u32 = 772;

/// What sysfs says about one netdev. Every field is `None` when its attribute is absent or
/// unreadable.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Netdev {
    /// Interface name.
    pub name: String,
    /// MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mb/s (`None` when the kernel reports -1 or the link is down).
    pub speed_mbps: Option<u64>,
    /// `carrier`: whether the physical link is up.
    pub carrier: Option<bool>,
    /// `operstate` text ("up", "down", "unknown", …).
    pub operstate: Option<String>,
    /// `dev_port`: the 0-based port of the function this netdev drives.
    pub dev_port: Option<u32>,
    /// `phys_port_id`: identifies the physical port (equal ids = same port).
    pub phys_port_id: Option<String>,
    /// `type` (ARPHRD_*).
    pub arp_type: Option<u32>,
    /// The directory its `device` link points to (a PCI function), for hardware interfaces.
    pub device_dir: Option<PathBuf>,
}

impl Netdev {
    /// Whether this is a loopback interface (`type` 772).
    pub fn is_loopback(&self) -> bool {
        self.arp_type == Some(ARPHRD_LOOPBACK)
    }

    /// The link state as `ibdev2netdev` prints it: carrier 1 → up. When `carrier` is
    /// unreadable, `operstate` "up" counts as up.
    pub fn link_up(&self) -> bool {
        match self.carrier {
            Some(c) => c,
            None => self.operstate.as_deref() == Some("up"),
        }
    }
}

/// Reads `<sysfs_root>/class/net/<name>`. A netdev sysfs does not show gives a [`Netdev`] with
/// only its name.
///
/// Errors: [`super::TopoError::Parse`] naming the file when `mtu`, `dev_port` or `type` is
/// present but not a number.
pub fn read_netdev(sysfs_root: &Path, name: &str) -> Result<Netdev> {
    let dir = sysfs_root.join("class/net").join(name);
    let speed = read_attr(&dir.join("speed"))
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|&s| s > 0)
        .map(|s| s as u64);
    let dev_port = match read_attr(&dir.join("dev_port")) {
        // Linux prints dev_port in decimal; some old drivers wrote hex ("0x1").
        Some(v) if v.starts_with("0x") => u32::from_str_radix(&v[2..], 16).ok(),
        _ => read_num(
            &dir.join("dev_port"),
            "netdev dev_port",
            "a port number such as \"0\"",
        )?,
    };
    Ok(Netdev {
        name: name.to_string(),
        mtu: read_num(&dir.join("mtu"), "netdev MTU", "bytes such as \"9000\"")?,
        speed_mbps: speed,
        carrier: read_attr(&dir.join("carrier")).map(|c| c == "1"),
        operstate: read_attr(&dir.join("operstate")),
        dev_port,
        phys_port_id: read_attr(&dir.join("phys_port_id")).filter(|s| !s.is_empty()),
        arp_type: read_num(
            &dir.join("type"),
            "netdev type",
            "an ARPHRD number such as \"1\"",
        )?,
        device_dir: super::pci::device_dir(&dir.join("device")),
    })
}

/// The netdevs of a PCI function (`<function dir>/net/*`), sorted.
pub fn netdevs_of_function(device_dir: &Path) -> Result<Vec<String>> {
    list_dir(&device_dir.join("net"), "netdevs of a PCI function")
}

/// The netdev of an RDMA port, as `ibdev2netdev` finds it:
/// 1. the netdev of the port's lowest populated GID entry (`gid_attrs/ndevs/<i>`; RoCE and rxe);
/// 2. `parent` of an rxe device;
/// 3. the function's netdevs (`device/net/*`): the only one, or the one whose `dev_port` is the
///    port number − 1.
pub fn netdev_for_port(
    sysfs_root: &Path,
    dev: &RdmaDevice,
    port: &RdmaPort,
) -> Result<Option<String>> {
    if let Some(n) = port.gids.iter().find_map(|g| g.ndev.clone()) {
        return Ok(Some(n));
    }
    if let Some(p) = dev.parent.clone().filter(|p| !p.is_empty()) {
        return Ok(Some(p));
    }
    let Some(dir) = &dev.device_dir else {
        return Ok(None);
    };
    let names = netdevs_of_function(dir)?;
    if names.len() == 1 {
        return Ok(names.into_iter().next());
    }
    for n in &names {
        if read_netdev(sysfs_root, n)?.dev_port == Some(port.num.saturating_sub(1)) {
            return Ok(Some(n.clone()));
        }
    }
    Ok(names.into_iter().next())
}
