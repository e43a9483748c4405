//! PCI functions: addresses, the PCIe link a function trained to, the bandwidth ceiling that link
//! implies, and sibling functions that share one physical network port.
//!
//! Sources: Linux `drivers/pci/pci-sysfs.c` (`current_link_speed`, `current_link_width`,
//! `max_link_speed`, `max_link_width`; the speed text comes from `pci_speed_string()` in
//! `drivers/pci/probe.c`: "32.0 GT/s PCIe", or "32 GT/s" before Linux 5.7, or "Unknown"), and
//! the PCI Express Base Specification for line encodings (8b/10b up to 5 GT/s, 128b/130b for
//! 8–32 GT/s, 256-byte FLITs carrying 236 bytes of TLPs at 64 GT/s).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::error::{Result, TopoError};
use super::sysfs::read_attr;

/// A PCI function address, `domain:bus:device.function` as Linux names PCI devices in sysfs
/// (`0000:01:00.0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddr {
    /// PCI segment (domain), 0..=0xffff (Linux allows up to 0xffffffff with VMD).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

impl PciAddr {
    /// Whether `self` and `other` are the same device and function number on different PCIe
    /// links (a different domain or bus): the shape of a multi-host / Socket Direct adapter's
    /// functions, e.g. DGX Spark's `0000:01:00.0` and `0002:01:00.0`.
    pub fn same_slot_other_link(&self, other: &PciAddr) -> bool {
        self.device == other.device
            && self.function == other.function
            && (self.domain, self.bus) != (other.domain, other.bus)
    }
}

impl fmt::Display for PciAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// A text that is not a PCI address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedPciAddr;

impl FromStr for PciAddr {
    type Err = MalformedPciAddr;

    /// Parses `DDDD:BB:DD.F` (hex; the domain may be longer than 4 digits).
    fn from_str(s: &str) -> std::result::Result<Self, MalformedPciAddr> {
        let (domain, rest) = s.split_once(':').ok_or(MalformedPciAddr)?;
        let (bus, rest) = rest.split_once(':').ok_or(MalformedPciAddr)?;
        let (device, function) = rest.split_once('.').ok_or(MalformedPciAddr)?;
        let hex = |t: &str, max_len: usize| {
            if t.is_empty() || t.len() > max_len || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                Err(MalformedPciAddr)
            } else {
                u32::from_str_radix(t, 16).map_err(|_| MalformedPciAddr)
            }
        };
        let (domain, bus, device, function) = (
            hex(domain, 8)?,
            hex(bus, 2)?,
            hex(device, 2)?,
            hex(function, 1)?,
        );
        if device > 31 || function > 7 {
            return Err(MalformedPciAddr);
        }
        Ok(PciAddr {
            domain,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

/// The PCIe link of a function: what it trained to and what it could train to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PcieLink {
    /// Current transfer rate per lane in GT/s (`current_link_speed`), e.g. 32.0 for Gen5.
    pub speed_gts: f64,
    /// Current number of lanes (`current_link_width`).
    pub width: u32,
    /// Maximum transfer rate of the function in GT/s (`max_link_speed`), when known.
    pub max_speed_gts: Option<f64>,
    /// Maximum number of lanes of the function (`max_link_width`), when known.
    pub max_width: Option<u32>,
}

impl PcieLink {
    /// The data bandwidth ceiling of the link, per direction, in Gb/s:
    /// `speed_gts × width × encoding efficiency` (see [`encoding_efficiency`]). Gen5 x4:
    /// 32 × 4 × 128/130 ≈ 126.0 Gb/s. TLP headers and flow control cost a few percent more.
    pub fn ceiling_gbps(&self) -> f64 {
        self.speed_gts * f64::from(self.width) * encoding_efficiency(self.speed_gts)
    }

    /// Whether the link trained below what the function supports (slower or narrower): a slot,
    /// riser or bifurcation problem worth reporting.
    pub fn is_downtrained(&self) -> bool {
        self.max_speed_gts
            .is_some_and(|m| self.speed_gts + 0.01 < m)
            || self.max_width.is_some_and(|m| self.width < m)
    }

    /// PCIe generation of the current speed (1 for 2.5 GT/s … 6 for 64 GT/s), 0 when unknown.
    pub fn generation(&self) -> u8 {
        generation(self.speed_gts)
    }
}

/// The fraction of the raw line rate that carries data at a PCIe transfer rate:
/// 8b/10b (0.8) at 2.5 and 5 GT/s, 128b/130b at 8, 16 and 32 GT/s, and 236/256 at 64 GT/s
/// (FLIT mode: a 256-byte FLIT carries 236 bytes of TLPs, the rest is DLP, CRC and FEC).
pub fn encoding_efficiency(speed_gts: f64) -> f64 {
    if speed_gts <= 5.0 + 1e-9 {
        0.8
    } else if speed_gts <= 32.0 + 1e-9 {
        128.0 / 130.0
    } else {
        236.0 / 256.0
    }
}

/// PCIe generation (1..=6) of a transfer rate in GT/s, 0 when it is not one of 2.5, 5, 8, 16,
/// 32, 64.
pub fn generation(speed_gts: f64) -> u8 {
    [2.5, 5.0, 8.0, 16.0, 32.0, 64.0]
        .iter()
        .position(|&s| (s - speed_gts).abs() < 0.01)
        .map_or(0, |i| i as u8 + 1)
}

/// A `current_link_speed`/`max_link_speed` text that is not a PCIe speed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MalformedLinkSpeed;

/// Parses a `current_link_speed`/`max_link_speed` value: "32.0 GT/s PCIe" (Linux ≥ 5.7),
/// "32 GT/s" or "2.5 GT/s" (older). Returns `Ok(None)` for "Unknown"/"Unknown speed" (a VF or a
/// link that is down).
///
/// Errors: [`MalformedLinkSpeed`] for any other text.
pub fn parse_link_speed(s: &str) -> std::result::Result<Option<f64>, MalformedLinkSpeed> {
    let s = s.trim();
    if s.starts_with("Unknown") {
        return Ok(None);
    }
    let num = s.strip_suffix("PCIe").unwrap_or(s).trim_end();
    let num = num
        .strip_suffix("GT/s")
        .ok_or(MalformedLinkSpeed)?
        .trim_end();
    let v: f64 = num.parse().map_err(|_| MalformedLinkSpeed)?;
    if v.is_finite() && v > 0.0 {
        Ok(Some(v))
    } else {
        Err(MalformedLinkSpeed)
    }
}

/// The PCI address of a sysfs device directory: its own name when that is a PCI address
/// (`.../0000:01:00.0`), else its parent's (a virtio device below its PCI function).
pub fn pci_addr_of_dir(dir: &Path) -> Option<PciAddr> {
    let own = dir
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.parse().ok());
    own.or_else(|| dir.parent()?.file_name()?.to_str()?.parse().ok())
}

/// Reads the PCIe link of the PCI function at `dir` (a `/sys/devices/pci…/DDDD:BB:DD.F`
/// directory). A virtual function reports "Unknown"/width 0: its physical function's link
/// (`physfn`) is read instead. Returns `Ok(None)` when no link attributes are readable.
///
/// Errors: [`TopoError::Parse`] when an attribute is present but malformed.
pub fn read_pcie_link(dir: &Path) -> Result<Option<PcieLink>> {
    if let Some(link) = read_own_link(dir)? {
        return Ok(Some(link));
    }
    let physfn = dir.join("physfn");
    if physfn.exists() {
        return read_own_link(&physfn);
    }
    Ok(None)
}

fn read_own_link(dir: &Path) -> Result<Option<PcieLink>> {
    let speed = read_speed(&dir.join("current_link_speed"))?;
    let width = read_width(&dir.join("current_link_width"))?;
    match (speed, width) {
        (Some(speed_gts), Some(width)) if width > 0 => Ok(Some(PcieLink {
            speed_gts,
            width,
            max_speed_gts: read_speed(&dir.join("max_link_speed"))?,
            max_width: read_width(&dir.join("max_link_width"))?.filter(|&w| w > 0),
        })),
        _ => Ok(None),
    }
}

fn read_speed(path: &Path) -> Result<Option<f64>> {
    match read_attr(path) {
        None => Ok(None),
        Some(v) => parse_link_speed(&v).map_err(|MalformedLinkSpeed| TopoError::Parse {
            path: path.to_path_buf(),
            what: "PCIe link speed",
            value: v,
            expected: "\"32.0 GT/s PCIe\" or \"8 GT/s\"",
        }),
    }
}

fn read_width(path: &Path) -> Result<Option<u32>> {
    match read_attr(path) {
        None => Ok(None),
        Some(v) => v.parse::<u32>().map(Some).map_err(|_| TopoError::Parse {
            path: path.to_path_buf(),
            what: "PCIe link width",
            value: v,
            expected: "a lane count such as \"4\"",
        }),
    }
}

/// The canonical directory a sysfs `device` link points to, when it exists.
pub fn device_dir(link: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(link).ok().filter(|p| p.is_dir())
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn pci_addr_round_trip() {
        let a: PciAddr = "0002:01:00.1".parse().unwrap();
        assert_eq!(
            a,
            PciAddr {
                domain: 2,
                bus: 1,
                device: 0,
                function: 1
            }
        );
        assert_eq!(a.to_string(), "0002:01:00.1");
        let b: PciAddr = "10000:e1:1f.7".parse().unwrap();
        assert_eq!(b.to_string(), "10000:e1:1f.7");
        for bad in [
            "",
            "0000:01:00",
            "0000:01.00.0",
            "0000:01:20.0",
            "0000:01:00.8",
            "0000:1g:00.0",
            "virtio0",
            "0000:001:00.0",
        ] {
            assert!(bad.parse::<PciAddr>().is_err(), "{bad}");
        }
    }

    #[test]
    fn siblings_shape() {
        let a: PciAddr = "0000:01:00.0".parse().unwrap();
        assert!(a.same_slot_other_link(&"0002:01:00.0".parse().unwrap()));
        assert!(!a.same_slot_other_link(&"0002:01:00.1".parse().unwrap()));
        assert!(!a.same_slot_other_link(&"0000:01:00.1".parse().unwrap()));
        assert!(!a.same_slot_other_link(&a));
    }

    #[test]
    fn link_speed_strings() {
        assert_eq!(parse_link_speed("32.0 GT/s PCIe\n"), Ok(Some(32.0)));
        assert_eq!(parse_link_speed("2.5 GT/s PCIe"), Ok(Some(2.5)));
        assert_eq!(parse_link_speed("8 GT/s"), Ok(Some(8.0)));
        assert_eq!(parse_link_speed("Unknown"), Ok(None));
        assert_eq!(parse_link_speed("Unknown speed"), Ok(None));
        assert_eq!(parse_link_speed("fast"), Err(MalformedLinkSpeed));
        assert_eq!(parse_link_speed("0 GT/s"), Err(MalformedLinkSpeed));
    }

    #[test]
    fn ceilings() {
        let gen5x4 = PcieLink {
            speed_gts: 32.0,
            width: 4,
            max_speed_gts: Some(32.0),
            max_width: Some(4),
        };
        assert!((gen5x4.ceiling_gbps() - 126.03).abs() < 0.01);
        assert!(!gen5x4.is_downtrained());
        assert_eq!(gen5x4.generation(), 5);
        let gen4x16 = PcieLink {
            speed_gts: 16.0,
            width: 16,
            max_speed_gts: None,
            max_width: None,
        };
        assert!((gen4x16.ceiling_gbps() - 252.06).abs() < 0.01);
        let gen2x8 = PcieLink {
            speed_gts: 5.0,
            width: 8,
            max_speed_gts: Some(16.0),
            max_width: Some(8),
        };
        assert!((gen2x8.ceiling_gbps() - 32.0).abs() < 1e-9);
        assert!(gen2x8.is_downtrained());
        assert_eq!(generation(64.0), 6);
        assert_eq!(generation(20.0), 0);
    }
}
