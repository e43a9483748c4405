//! Interface addresses and prefix lengths: from the kernel (netlink, through `getifaddrs`), or
//! from a file holding the output of `ip -json address show` (so a user can send both that
//! file and a copy of /sys from a remote machine for diagnosis).
//!
//! `ip -json address show` (iproute2 `ip/ipaddress.c`) prints a JSON array with one object per
//! interface: `ifname`, `ifindex`, `flags` (e.g. `["BROADCAST","MULTICAST","UP","LOWER_UP"]`),
//! `mtu`, `operstate` ("UP", "DOWN", "UNKNOWN"), `link_type` ("ether", "loopback", …) and
//! `addr_info`: objects with `family` ("inet"/"inet6"), `local` (the address) and `prefixlen`.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;

use serde_json::Value;

use super::error::{Result, TopoError};

/// An interface address with its prefix length (`10.10.1.11/24`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IfAddr {
    /// The address.
    pub ip: IpAddr,
    /// Prefix length in bits (0..=32 for IPv4, 0..=128 for IPv6).
    pub prefix_len: u8,
}

impl IfAddr {
    /// Whether `other` is in this address's subnet.
    pub fn contains(&self, other: IpAddr) -> bool {
        match (self.ip, other) {
            (IpAddr::V4(a), IpAddr::V4(b)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix_len.min(32)))
                    .unwrap_or(0);
                u32::from(a) & mask == u32::from(b) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(b)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix_len.min(128)))
                    .unwrap_or(0);
                u128::from(a) & mask == u128::from(b) & mask
            }
            _ => false,
        }
    }
}

impl fmt::Display for IfAddr {
    /// CIDR notation: `10.10.1.11/24`, `fd00::2/64`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.ip, self.prefix_len)
    }
}

/// One interface and its addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetdevAddrs {
    /// Interface name.
    pub name: String,
    /// Whether it is administratively up (`IFF_UP`).
    pub up: bool,
    /// Whether its link is up (`IFF_LOWER_UP`, or `IFF_RUNNING` from getifaddrs).
    pub lower_up: bool,
    /// Whether it is a loopback interface (`IFF_LOOPBACK`).
    pub loopback: bool,
    /// MTU in bytes, when the source gives it (`ip -json` does, getifaddrs does not).
    pub mtu: Option<u32>,
    /// Its addresses, in the kernel's order.
    pub addrs: Vec<IfAddr>,
}

/// Where addresses come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AddressSource {
    /// The running kernel (netlink, through `getifaddrs(3)`).
    #[default]
    Netlink,
    /// A file with `ip -json address show` output.
    IpJsonFile(std::path::PathBuf),
    /// A list given by the caller.
    Given(Vec<NetdevAddrs>),
}

impl AddressSource {
    /// Loads the interfaces and their addresses.
    ///
    /// Errors: [`TopoError::Netlink`] or [`TopoError::IpJson`].
    pub fn load(&self) -> Result<Vec<NetdevAddrs>> {
        match self {
            AddressSource::Netlink => from_netlink(),
            AddressSource::IpJsonFile(p) => read_ip_json(p),
            AddressSource::Given(v) => Ok(v.clone()),
        }
    }
}

/// The prefix length of a netmask (`255.255.255.0` → 24); `None` if the mask is not
/// contiguous ones then zeros.
pub fn prefix_len_of_mask(mask: IpAddr) -> Option<u8> {
    let (ones, leading) = match mask {
        IpAddr::V4(m) => (u32::from(m).count_ones(), u32::from(m).leading_ones()),
        IpAddr::V6(m) => (u128::from(m).count_ones(), u128::from(m).leading_ones()),
    };
    (ones == leading).then_some(ones as u8)
}

/// Lists the interfaces of this network namespace and their IPv4/IPv6 addresses with
/// `getifaddrs(3)` (glibc asks the kernel over rtnetlink); prefix lengths come from the
/// netmasks. Interfaces without addresses are listed too (from their `AF_PACKET` entry).
///
/// Errors: [`TopoError::Netlink`].
pub fn from_netlink() -> Result<Vec<NetdevAddrs>> {
    use nix::net::if_::InterfaceFlags as F;
    let list = nix::ifaddrs::getifaddrs().map_err(|e| TopoError::Netlink { source: e.into() })?;
    let mut out: Vec<NetdevAddrs> = Vec::new();
    for ifa in list {
        let idx = match out.iter().position(|n| n.name == ifa.interface_name) {
            Some(i) => i,
            None => {
                out.push(NetdevAddrs {
                    name: ifa.interface_name.clone(),
                    up: ifa.flags.contains(F::IFF_UP),
                    lower_up: ifa.flags.contains(F::IFF_LOWER_UP)
                        || ifa.flags.contains(F::IFF_RUNNING),
                    loopback: ifa.flags.contains(F::IFF_LOOPBACK),
                    mtu: None,
                    addrs: Vec::new(),
                });
                out.len() - 1
            }
        };
        let ip_of = |s: &nix::sys::socket::SockaddrStorage| -> Option<IpAddr> {
            if let Some(v4) = s.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                s.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        };
        let Some(ip) = ifa.address.as_ref().and_then(ip_of) else {
            continue;
        };
        let full = if ip.is_ipv4() { 32 } else { 128 };
        let prefix_len = ifa
            .netmask
            .as_ref()
            .and_then(ip_of)
            .and_then(prefix_len_of_mask)
            .unwrap_or(full);
        out[idx].addrs.push(IfAddr { ip, prefix_len });
    }
    Ok(out)
}

/// Reads a file of `ip -json address show` output (see [`parse_ip_json`]).
///
/// Errors: [`TopoError::IpJson`] naming the file.
pub fn read_ip_json(path: &Path) -> Result<Vec<NetdevAddrs>> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| TopoError::IpJson {
        origin: origin.clone(),
        reason: format!("cannot read: {e}"),
    })?;
    parse_ip_json(&text, &origin)
}

/// Parses `ip -json address show` output (also `ip -json -pretty`). Addresses of families other
/// than inet/inet6 are skipped. `origin` names the input in errors.
///
/// Errors: [`TopoError::IpJson`] naming the interface entry and field that is wrong.
pub fn parse_ip_json(text: &str, origin: &str) -> Result<Vec<NetdevAddrs>> {
    let bad = |reason: String| TopoError::IpJson {
        origin: origin.to_string(),
        reason,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let Value::Array(ifaces) = v else {
        return Err(bad("expected a JSON array of interfaces".into()));
    };
    let mut out = Vec::new();
    for (i, ifc) in ifaces.iter().enumerate() {
        let name = ifc
            .get("ifname")
            .and_then(Value::as_str)
            .ok_or_else(|| bad(format!("interface entry {i}: no \"ifname\" string")))?;
        let flags: Vec<&str> = ifc
            .get("flags")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let operstate = ifc.get("operstate").and_then(Value::as_str);
        let mut n = NetdevAddrs {
            name: name.to_string(),
            up: flags.contains(&"UP"),
            lower_up: flags.contains(&"LOWER_UP") || operstate == Some("UP"),
            loopback: flags.contains(&"LOOPBACK")
                || ifc.get("link_type").and_then(Value::as_str) == Some("loopback"),
            mtu: ifc
                .get("mtu")
                .and_then(Value::as_u64)
                .and_then(|m| u32::try_from(m).ok()),
            addrs: Vec::new(),
        };
        let infos = match ifc.get("addr_info") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => &a[..],
            Some(_) => {
                return Err(bad(format!(
                    "interface {name}: \"addr_info\" is not an array"
                )))
            }
        };
        for (j, a) in infos.iter().enumerate() {
            let family = a.get("family").and_then(Value::as_str).unwrap_or("");
            if family != "inet" && family != "inet6" {
                continue;
            }
            let local = a.get("local").and_then(Value::as_str).ok_or_else(|| {
                bad(format!(
                    "interface {name}: addr_info[{j}]: no \"local\" address"
                ))
            })?;
            let ip: IpAddr = local.parse().map_err(|_| {
                bad(format!(
                    "interface {name}: addr_info[{j}]: \"local\" {local:?} is not an IP address"
                ))
            })?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let prefix_len = a
                .get("prefixlen")
                .and_then(Value::as_u64)
                .filter(|&p| p <= max)
                .ok_or_else(|| {
                    bad(format!(
                        "interface {name}: addr_info[{j}]: \"prefixlen\" missing or above {max}"
                    ))
                })?;
            if (ip.is_ipv4()) != (family == "inet") {
                return Err(bad(format!(
                    "interface {name}: addr_info[{j}]: {local} is not of family {family}"
                )));
            }
            n.addrs.push(IfAddr {
                ip,
                prefix_len: prefix_len as u8,
            });
        }
        out.push(n);
    }
    Ok(out)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn masks() {
        assert_eq!(
            prefix_len_of_mask("255.255.255.0".parse().unwrap()),
            Some(24)
        );
        assert_eq!(prefix_len_of_mask("0.0.0.0".parse().unwrap()), Some(0));
        assert_eq!(prefix_len_of_mask("255.0.255.0".parse().unwrap()), None);
        assert_eq!(
            prefix_len_of_mask("ffff:ffff:ffff:ffff::".parse().unwrap()),
            Some(64)
        );
    }

    #[test]
    fn subnet_contains() {
        let a = IfAddr {
            ip: "10.10.1.11".parse().unwrap(),
            prefix_len: 24,
        };
        assert!(a.contains("10.10.1.12".parse().unwrap()));
        assert!(!a.contains("10.10.2.12".parse().unwrap()));
        assert!(!a.contains("fd00::1".parse().unwrap()));
        let z = IfAddr {
            ip: "10.10.1.11".parse().unwrap(),
            prefix_len: 0,
        };
        assert!(z.contains("192.168.0.1".parse().unwrap()));
        let v6 = IfAddr {
            ip: "fd00::2".parse().unwrap(),
            prefix_len: 64,
        };
        assert!(v6.contains("fd00::ffff".parse().unwrap()));
        assert_eq!(v6.to_string(), "fd00::2/64");
    }

    #[test]
    fn ip_json_errors_name_the_entry() {
        let e = parse_ip_json("{}", "x.json").unwrap_err().to_string();
        assert!(e.contains("x.json") && e.contains("array"), "{e}");
        let e = parse_ip_json(r#"[{"ifname":"eth0","addr_info":[{"family":"inet","local":"10.0.0.300","prefixlen":24}]}]"#, "x.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("eth0") && e.contains("10.0.0.300"), "{e}");
        let e = parse_ip_json(r#"[{"ifname":"eth0","addr_info":[{"family":"inet","local":"10.0.0.3","prefixlen":33}]}]"#, "x.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("prefixlen"), "{e}");
        assert!(parse_ip_json("not json", "x").is_err());
    }
}
