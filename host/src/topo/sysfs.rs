//! RDMA devices from `<sysfs>/class/infiniband/*`: ports, port state, link layer, rate and the
//! GID table with each entry's type and netdev.
//!
//! Layout and formats (Linux `drivers/infiniband/core/sysfs.c`):
//! - `class/infiniband/<dev>/device` → the PCI function directory (absent for rxe, whose
//!   `parent` names its netdev); `node_guid`, `sys_image_guid` ("e8eb:d303:0041:a1b2").
//! - `ports/<p>/state`: "4: ACTIVE" (`enum ib_port_state`: 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE,
//!   5 ACTIVE_DEFER); `phys_state`: "5: LinkUp"; `link_layer`: "Ethernet" or "InfiniBand";
//!   `rate`: "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)".
//! - `ports/<p>/gids/<i>`: the GID as `%pI6` ("0000:0000:0000:0000:0000:ffff:0a0a:010b"); an
//!   empty entry reads as all zeros. `gid_attrs/types/<i>`: "IB/RoCE v1" or "RoCE v2";
//!   `gid_attrs/ndevs/<i>`: the netdev name; both fail (EINVAL) for an empty entry.

use std::fs;
use std::path::{Path, PathBuf};

use super::error::{Result, TopoError};
use super::gid::{parse_gid, GidEntry, GidType};

/// Reads a sysfs attribute, trimmed. `None` when it is absent or unreadable: the kernel answers
/// EINVAL for values it does not have (the speed of a down link, the type of an empty GID).
pub fn read_attr(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Reads an attribute and parses it as a decimal number; absent/unreadable → `Ok(None)`.
///
/// Errors: [`TopoError::Parse`] naming the path when the text is not a number.
pub fn read_num<T: std::str::FromStr>(
    path: &Path,
    what: &'static str,
    expected: &'static str,
) -> Result<Option<T>> {
    match read_attr(path) {
        None => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| TopoError::Parse {
            path: path.to_path_buf(),
            what,
            value: v,
            expected,
        }),
    }
}

/// The names of the entries of a directory, sorted by byte order (as `ls` in the C locale).
/// A directory that does not exist has no entries.
///
/// Errors: [`TopoError::ReadDir`] for any other failure.
pub fn list_dir(dir: &Path, what: &'static str) -> Result<Vec<String>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(TopoError::ReadDir {
                path: dir.to_path_buf(),
                what,
                source,
            })
        }
    };
    let mut names = Vec::new();
    for ent in rd {
        let ent = ent.map_err(|source| TopoError::ReadDir {
            path: dir.to_path_buf(),
            what,
            source,
        })?;
        if let Some(n) = ent.file_name().to_str() {
            names.push(n.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// An IB port state (`ports/<p>/state`, "4: ACTIVE").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    /// `enum ib_port_state` value (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE, 5 ACTIVE_DEFER).
    pub code: u8,
    /// The name the kernel prints.
    pub name: String,
}

impl PortState {
    /// `IB_PORT_ACTIVE` (4): the port passes traffic.
    pub const ACTIVE: u8 = 4;

    /// Parses "4: ACTIVE".
    pub fn parse(s: &str) -> Option<PortState> {
        let (code, name) = s.trim().split_once(':')?;
        Some(PortState {
            code: code.trim().parse().ok()?,
            name: name.trim().to_string(),
        })
    }

    /// Whether the port is ACTIVE.
    pub fn is_active(&self) -> bool {
        self.code == Self::ACTIVE
    }
}

/// The link layer of a port (`ports/<p>/link_layer`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkLayer {
    /// "Ethernet": RoCE.
    Ethernet,
    /// "InfiniBand".
    InfiniBand,
    /// Anything else ("Unknown").
    Other(String),
}

impl LinkLayer {
    /// Parses the attribute text.
    pub fn parse(s: &str) -> LinkLayer {
        match s.trim() {
            "Ethernet" => LinkLayer::Ethernet,
            "InfiniBand" => LinkLayer::InfiniBand,
            o => LinkLayer::Other(o.to_string()),
        }
    }

    /// The kernel's spelling.
    pub fn as_str(&self) -> &str {
        match self {
            LinkLayer::Ethernet => "Ethernet",
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Other(s) => s,
        }
    }
}

/// Parses a port `rate` ("200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)") into Mb/s.
pub fn parse_rate_mbps(s: &str) -> Option<u64> {
    let (num, _) = s.trim().split_once(" Gb/sec")?;
    let gbps: f64 = num.trim().parse().ok()?;
    (gbps.is_finite() && gbps > 0.0).then(|| (gbps * 1000.0).round() as u64)
}

/// One port of an RDMA device, as sysfs shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaPort {
    /// Port number (1-based).
    pub num: u32,
    /// The port directory (`class/infiniband/<dev>/ports/<num>`).
    pub dir: PathBuf,
    /// `state`, when readable.
    pub state: Option<PortState>,
    /// `phys_state` text ("5: LinkUp"), when readable.
    pub phys_state: Option<String>,
    /// `link_layer`, when readable.
    pub link_layer: Option<LinkLayer>,
    /// `rate` in Mb/s, when readable.
    pub rate_mbps: Option<u64>,
    /// `rate` as the kernel prints it.
    pub rate: Option<String>,
    /// The populated GID entries, by index.
    pub gids: Vec<GidEntry>,
}

/// An RDMA device (`class/infiniband/<name>`).
#[derive(Debug, Clone, PartialEq)]
pub struct RdmaDevice {
    /// Device name (`rocep1s0f0`, `mlx5_0`, `rxe0`).
    pub name: String,
    /// `node_guid`, when readable.
    pub node_guid: Option<String>,
    /// `sys_image_guid` (shared by the functions of one adapter), when readable.
    pub sys_image_guid: Option<String>,
    /// The directory its `device` link points to (the PCI function), when it has one.
    pub device_dir: Option<PathBuf>,
    /// `parent` (rxe: the netdev it is bound to), when readable.
    pub parent: Option<String>,
    /// Its ports, by number.
    pub ports: Vec<RdmaPort>,
}

/// Lists the RDMA devices under `<sysfs_root>/class/infiniband`, sorted by name. No such
/// directory (no RDMA driver loaded) is an empty list.
///
/// Errors: listing failures, and [`TopoError::Parse`] for malformed `state` or GID files.
pub fn list_devices(sysfs_root: &Path) -> Result<Vec<RdmaDevice>> {
    let class = sysfs_root.join("class/infiniband");
    let mut out = Vec::new();
    for name in list_dir(&class, "RDMA devices")? {
        out.push(read_device(&class.join(&name), name)?);
    }
    Ok(out)
}

fn read_device(dir: &Path, name: String) -> Result<RdmaDevice> {
    let ports_dir = dir.join("ports");
    let mut ports = Vec::new();
    for p in list_dir(&ports_dir, "RDMA ports")? {
        let Ok(num) = p.parse::<u32>() else { continue };
        ports.push(read_port(&ports_dir.join(&p), num)?);
    }
    ports.sort_by_key(|p| p.num);
    Ok(RdmaDevice {
        name,
        node_guid: read_attr(&dir.join("node_guid")),
        sys_image_guid: read_attr(&dir.join("sys_image_guid")),
        device_dir: super::pci::device_dir(&dir.join("device")),
        parent: read_attr(&dir.join("parent")),
        ports,
    })
}

fn read_port(dir: &Path, num: u32) -> Result<RdmaPort> {
    let state = match read_attr(&dir.join("state")) {
        None => None,
        Some(v) => Some(PortState::parse(&v).ok_or_else(|| TopoError::Parse {
            path: dir.join("state"),
            what: "port state",
            value: v,
            expected: "\"4: ACTIVE\"",
        })?),
    };
    let rate = read_attr(&dir.join("rate"));
    Ok(RdmaPort {
        num,
        dir: dir.to_path_buf(),
        state,
        phys_state: read_attr(&dir.join("phys_state")),
        link_layer: read_attr(&dir.join("link_layer")).map(|s| LinkLayer::parse(&s)),
        rate_mbps: rate.as_deref().and_then(parse_rate_mbps),
        rate,
        gids: read_gid_table(dir)?,
    })
}

/// Reads the populated entries of a port's GID table (`<port_dir>/gids/*` with
/// `gid_attrs/types/*` and `gid_attrs/ndevs/*`), sorted by index. All-zero GIDs (empty
/// entries) and unreadable GID files are left out.
///
/// Errors: [`TopoError::Parse`] naming the file when a GID is not an IPv6 address.
pub fn read_gid_table(port_dir: &Path) -> Result<Vec<GidEntry>> {
    let gids = port_dir.join("gids");
    let mut out = Vec::new();
    for name in list_dir(&gids, "GID table")? {
        let Ok(index) = name.parse::<u32>() else {
            continue;
        };
        let path = gids.join(&name);
        let Some(text) = read_attr(&path) else {
            continue;
        };
        let gid = parse_gid(&text).ok_or_else(|| TopoError::Parse {
            path: path.clone(),
            what: "GID",
            value: text.clone(),
            expected: "\"0000:0000:0000:0000:0000:ffff:0a0a:010b\" (8 groups of 4 hex digits)",
        })?;
        if gid.is_unspecified() {
            continue;
        }
        let gid_type = read_attr(&port_dir.join("gid_attrs/types").join(&name))
            .filter(|s| !s.is_empty())
            .map(|s| GidType::parse(&s));
        let ndev =
            read_attr(&port_dir.join("gid_attrs/ndevs").join(&name)).filter(|s| !s.is_empty());
        out.push(GidEntry {
            index,
            gid,
            gid_type,
            ndev,
        });
    }
    out.sort_by_key(|e| e.index);
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn port_state_text() {
        let s = PortState::parse("4: ACTIVE\n").unwrap();
        assert_eq!(
            (s.code, s.name.as_str(), s.is_active()),
            (4, "ACTIVE", true)
        );
        let s = PortState::parse("1: DOWN").unwrap();
        assert!(!s.is_active());
        assert!(PortState::parse("ACTIVE").is_none());
        assert!(PortState::parse("x: ACTIVE").is_none());
    }

    #[test]
    fn rate_text() {
        assert_eq!(parse_rate_mbps("200 Gb/sec (4X HDR)"), Some(200_000));
        assert_eq!(parse_rate_mbps("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(parse_rate_mbps("100 Gb/sec (2X HDR)\n"), Some(100_000));
        assert_eq!(parse_rate_mbps("fast"), None);
    }

    #[test]
    fn link_layer_text() {
        assert_eq!(LinkLayer::parse("Ethernet\n"), LinkLayer::Ethernet);
        assert_eq!(LinkLayer::parse("InfiniBand"), LinkLayer::InfiniBand);
        assert_eq!(LinkLayer::parse("Unknown").as_str(), "Unknown");
    }
}
