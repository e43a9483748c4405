//! GID table entries and the choice of the source GID for a link.
//!
//! Rule: the GID of a link is the **RoCE v2** entry whose address equals the link's address
//! (an IPv4 address appears as the IPv4-mapped GID `::ffff:a.b.c.d`). Indexes are not stable:
//! they differ between nodes, start past 0 in containers (only the container's netdevs have
//! entries) and move after interface events (e.g. 3 → 4), so the choice is made again at
//! connect time ([`select_for_connect`]) and never pinned unless `RDMESH_GID_INDEX` says so
//! (as `NCCL_IB_GID_INDEX` does for NCCL). Every choice is logged with `tracing`.
//!
//! Sources: Linux `drivers/infiniband/core/sysfs.c` (`gids/<i>` printed with `%pI6`, empty
//! entries read as the zero GID; `gid_attrs/types/<i>` is "IB/RoCE v1" or "RoCE v2" from
//! `ib_cache_gid_type_str()`; `gid_attrs/ndevs/<i>` is the netdev name; both fail with EINVAL
//! for an empty entry); IBTA vol. 1 annex A17 (RoCE v2 GIDs are IPv6 or IPv4-mapped addresses);
//! libibverbs `struct ibv_global_route.sgid_index` (8 bits).

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::path::Path;

use super::error::{Result, TopoError};

/// The environment variable that pins the GID index for every port (like `NCCL_IB_GID_INDEX`).
pub const GID_INDEX_ENV: &str = "RDMESH_GID_INDEX";

/// The type of a GID table entry (`gid_attrs/types/<i>`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GidType {
    /// "IB/RoCE v1": InfiniBand, or RoCE v1 (GRH directly over Ethernet, EtherType 0x8915).
    RoceV1,
    /// "RoCE v2": the GRH replaced by IPv4/IPv6 + UDP destination port 4791.
    RoceV2,
    /// Any other text the kernel may write.
    Other(String),
}

impl GidType {
    /// Parses the text of `gid_attrs/types/<i>` (trimmed).
    pub fn parse(s: &str) -> GidType {
        match s.trim() {
            "RoCE v2" => GidType::RoceV2,
            "IB/RoCE v1" => GidType::RoceV1,
            other => GidType::Other(other.to_string()),
        }
    }

    /// The text the kernel writes for this type.
    pub fn as_str(&self) -> &str {
        match self {
            GidType::RoceV1 => "IB/RoCE v1",
            GidType::RoceV2 => "RoCE v2",
            GidType::Other(s) => s,
        }
    }
}

impl fmt::Display for GidType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One populated entry of a port's GID table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidEntry {
    /// Index in the table (`gids/<index>`), what libibverbs calls `sgid_index`.
    pub index: u32,
    /// The 128-bit GID, network byte order as an IPv6 address.
    pub gid: Ipv6Addr,
    /// The entry's type; `None` when `gid_attrs/types/<index>` is absent or unreadable.
    pub gid_type: Option<GidType>,
    /// The netdev the entry belongs to; `None` when `gid_attrs/ndevs/<index>` is absent or
    /// unreadable (InfiniBand ports have none).
    pub ndev: Option<String>,
}

impl GidEntry {
    /// The IP address the GID encodes: the IPv4 address of an IPv4-mapped GID
    /// (`::ffff:a.b.c.d`), else the GID as an IPv6 address.
    pub fn addr(&self) -> IpAddr {
        gid_addr(&self.gid)
    }

    /// Whether the entry is RoCE v2.
    pub fn is_roce_v2(&self) -> bool {
        self.gid_type == Some(GidType::RoceV2)
    }
}

impl fmt::Display for GidEntry {
    /// `3 RoCE v2 10.10.1.11 (enp1s0f0np0)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ", self.index)?;
        match &self.gid_type {
            Some(t) => write!(f, "{t} ")?,
            None => f.write_str("(type unknown) ")?,
        }
        write!(f, "{}", self.addr())?;
        if let Some(n) = &self.ndev {
            write!(f, " ({n})")?;
        }
        Ok(())
    }
}

/// The IP address a GID encodes (IPv4-mapped → IPv4).
pub fn gid_addr(gid: &Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(*gid),
    }
}

/// The GID of an IP address: IPv4-mapped for IPv4, the address itself for IPv6.
pub fn addr_gid(addr: IpAddr) -> Ipv6Addr {
    match addr {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

/// Parses the text of `gids/<i>` ("0000:0000:0000:0000:0000:ffff:0a0a:010b", as `%pI6`
/// prints it; any IPv6 spelling is accepted). `None` when it is not an IPv6 address.
pub fn parse_gid(s: &str) -> Option<Ipv6Addr> {
    s.trim().parse().ok()
}

/// The GID chosen for a link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GidChoice {
    /// The GID table index (`sgid_index`).
    pub index: u32,
    /// The GID at that index.
    pub gid: Ipv6Addr,
    /// Its type.
    pub gid_type: Option<GidType>,
    /// The link address the GID equals; `None` only for a pinned index whose entry is not the
    /// RoCE v2 GID of any of the link's addresses.
    pub addr: Option<IpAddr>,
    /// Whether the index came from `RDMESH_GID_INDEX` instead of the address.
    pub pinned: bool,
}

/// Why no GID could be chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GidMiss {
    /// The link has no IP address, so there is no RoCE v2 GID to look for.
    NoAddress,
    /// No RoCE v2 entry equals any of these addresses.
    NoRoceV2 {
        /// The link addresses, in the order they were tried.
        addrs: Vec<IpAddr>,
    },
    /// The pinned index is not populated.
    PinnedEmpty {
        /// The pinned index.
        index: u32,
    },
}

/// The order in which a link's addresses are tried: IPv4 first, then IPv6 addresses that are
/// not link-local, then IPv6 link-local (`fe80::/10`), each group in the given order.
pub fn candidate_order(addrs: &[IpAddr]) -> Vec<IpAddr> {
    let rank = |a: &IpAddr| match a {
        IpAddr::V4(_) => 0,
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => 2,
        IpAddr::V6(_) => 1,
    };
    let mut out = addrs.to_vec();
    out.sort_by_key(rank); // stable: keeps the order inside each group
    out
}

/// Chooses the GID of a link from its port's table.
///
/// - `pin` (from `RDMESH_GID_INDEX`): that index, whatever it holds, if it is populated; the
///   choice's `addr` says whether it is the RoCE v2 GID of one of `addrs`.
/// - otherwise: for each address in [`candidate_order`], the RoCE v2 entry whose address
///   equals it, lowest index first, skipping entries that belong to another netdev than
///   `netdev` (when both are known).
pub fn select(
    entries: &[GidEntry],
    netdev: Option<&str>,
    addrs: &[IpAddr],
    pin: Option<u32>,
) -> std::result::Result<GidChoice, GidMiss> {
    let order = candidate_order(addrs);
    let matching = |e: &GidEntry| e.is_roce_v2() && order.contains(&e.addr());
    if let Some(index) = pin {
        let e = entries
            .iter()
            .find(|e| e.index == index)
            .ok_or(GidMiss::PinnedEmpty { index })?;
        return Ok(GidChoice {
            index,
            gid: e.gid,
            gid_type: e.gid_type.clone(),
            addr: matching(e).then(|| e.addr()),
            pinned: true,
        });
    }
    if order.is_empty() {
        return Err(GidMiss::NoAddress);
    }
    let own_netdev = |e: &GidEntry| match (netdev, e.ndev.as_deref()) {
        (Some(n), Some(d)) => n == d,
        _ => true,
    };
    for addr in &order {
        let mut found: Vec<&GidEntry> = entries
            .iter()
            .filter(|e| e.is_roce_v2() && e.addr() == *addr && own_netdev(e))
            .collect();
        found.sort_by_key(|e| e.index);
        if let Some(e) = found.first() {
            return Ok(GidChoice {
                index: e.index,
                gid: e.gid,
                gid_type: e.gid_type.clone(),
                addr: Some(*addr),
                pinned: false,
            });
        }
    }
    Err(GidMiss::NoRoceV2 { addrs: order })
}

/// A one-line summary of a GID table for messages: `0 IB/RoCE v1 fe80::1 (eth0), 1 RoCE v2 …`,
/// at most 16 entries, or "GID table empty".
pub fn table_summary(entries: &[GidEntry]) -> String {
    if entries.is_empty() {
        return "GID table empty".into();
    }
    let mut s = String::from("GID table: ");
    for (i, e) in entries.iter().take(16).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&e.to_string());
    }
    if entries.len() > 16 {
        s.push_str(&format!(", … ({} more)", entries.len() - 16));
    }
    s
}

/// Parses a `RDMESH_GID_INDEX` value: `None` or empty → not pinned; else a decimal index
/// 0..=255 (libibverbs `sgid_index` is 8 bits).
///
/// Errors: [`TopoError::GidIndexEnv`] naming the value.
pub fn parse_gid_index(value: Option<&str>) -> Result<Option<u32>> {
    let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let n: u32 = v.parse().map_err(|_| TopoError::GidIndexEnv {
        value: v.to_string(),
        reason: "not a decimal number",
    })?;
    if n > 255 {
        return Err(TopoError::GidIndexEnv {
            value: v.to_string(),
            reason: "a GID index is 0..=255 (libibverbs sgid_index is 8 bits)",
        });
    }
    Ok(Some(n))
}

/// Reads `RDMESH_GID_INDEX` from the environment (see [`parse_gid_index`]).
pub fn gid_index_from_env() -> Result<Option<u32>> {
    match std::env::var(GID_INDEX_ENV) {
        Ok(v) => parse_gid_index(Some(&v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(TopoError::GidIndexEnv {
            value: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8",
        }),
    }
}

/// Logs a choice at `info` (and at `warn` when a pinned index is not the address's RoCE v2 GID).
pub fn log_choice(device: &str, port: u32, choice: &GidChoice) {
    match (choice.pinned, choice.addr) {
        (false, Some(addr)) => tracing::info!(
            device,
            port,
            gid_index = choice.index,
            gid = %choice.gid,
            %addr,
            "GID {} (RoCE v2) selected for {addr}",
            choice.index
        ),
        (true, Some(addr)) => tracing::info!(
            device,
            port,
            gid_index = choice.index,
            gid = %choice.gid,
            %addr,
            "GID {} pinned by {GID_INDEX_ENV} (RoCE v2 for {addr})",
            choice.index
        ),
        (_, None) => tracing::warn!(
            device,
            port,
            gid_index = choice.index,
            gid = %choice.gid,
            "GID {} pinned by {GID_INDEX_ENV} is {} {}, not the RoCE v2 GID of the link address; unset {GID_INDEX_ENV} to select by address",
            choice.index,
            choice.gid_type.as_ref().map_or("of unknown type", |t| t.as_str()),
            gid_addr(&choice.gid)
        ),
    }
}

/// Connect-time GID selection: re-reads the GID table of `device` port `port` under
/// `sysfs_root` (normally `/sys`) and returns the RoCE v2 entry whose address is `addr`
/// (or the `pin`ned index). When `previous` (the index chosen earlier, e.g. at discovery) differs
/// from the result, the move is logged at `warn` ("moved from 3 to 4").
///
/// Errors: [`TopoError::NoSuchPort`] when the port's `gids` directory does not exist;
/// [`TopoError::NoGidForAddress`] when no RoCE v2 entry equals `addr`;
/// [`TopoError::PinnedGidEmpty`] when `pin` names an empty entry; read and parse errors of the
/// table.
pub fn select_for_connect(
    sysfs_root: &Path,
    device: &str,
    port: u32,
    addr: IpAddr,
    previous: Option<u32>,
    pin: Option<u32>,
) -> Result<GidChoice> {
    let port_dir = sysfs_root
        .join("class/infiniband")
        .join(device)
        .join("ports")
        .join(port.to_string());
    let gids_dir = port_dir.join("gids");
    if !gids_dir.is_dir() {
        return Err(TopoError::NoSuchPort {
            device: device.to_string(),
            port,
            path: gids_dir,
        });
    }
    let table = super::sysfs::read_gid_table(&port_dir)?;
    let choice = select(&table, None, &[addr], pin).map_err(|miss| match miss {
        GidMiss::PinnedEmpty { index } => TopoError::PinnedGidEmpty {
            device: device.to_string(),
            port,
            index,
            table: table_summary(&table),
        },
        GidMiss::NoAddress | GidMiss::NoRoceV2 { .. } => TopoError::NoGidForAddress {
            device: device.to_string(),
            port,
            addr,
            path: gids_dir.clone(),
            table: table_summary(&table),
        },
    })?;
    if let Some(prev) = previous.filter(|&p| p != choice.index) {
        tracing::warn!(
            device,
            port,
            %addr,
            previous = prev,
            gid_index = choice.index,
            "GID index for {addr} moved from {prev} to {} (interface event?); using {}",
            choice.index,
            choice.index
        );
    }
    log_choice(device, port, &choice);
    Ok(choice)
}

#[cfg(test)]
mod test {
    use super::*;
    use std::net::Ipv4Addr;

    fn e(index: u32, gid: &str, t: &str, ndev: Option<&str>) -> GidEntry {
        GidEntry {
            index,
            gid: parse_gid(gid).unwrap(),
            gid_type: Some(GidType::parse(t)),
            ndev: ndev.map(str::to_string),
        }
    }

    fn v4(a: u8, b: u8, c: u8, d: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(a, b, c, d))
    }

    #[test]
    fn kernel_gid_text() {
        let g = parse_gid("0000:0000:0000:0000:0000:ffff:0a0a:010b\n").unwrap();
        assert_eq!(gid_addr(&g), v4(10, 10, 1, 11));
        assert_eq!(addr_gid(v4(10, 10, 1, 11)), g);
        let ll = parse_gid("fe80:0000:0000:0000:eaeb:d3ff:fe41:a1b2").unwrap();
        assert_eq!(gid_addr(&ll), IpAddr::V6(ll));
        assert!(parse_gid("fe80::1::2").is_none());
        assert_eq!(GidType::parse("RoCE v2\n"), GidType::RoceV2);
        assert_eq!(GidType::parse("IB/RoCE v1"), GidType::RoceV1);
        assert_eq!(GidType::parse("iWARP").as_str(), "iWARP");
    }

    #[test]
    fn picks_roce_v2_of_the_address_not_v1_not_link_local() {
        let t = [
            e(0, "fe80::eaeb:d3ff:fe41:a1b2", "IB/RoCE v1", Some("eth0")),
            e(1, "fe80::eaeb:d3ff:fe41:a1b2", "RoCE v2", Some("eth0")),
            e(2, "::ffff:10.10.1.11", "IB/RoCE v1", Some("eth0")),
            e(3, "::ffff:10.10.1.11", "RoCE v2", Some("eth0")),
        ];
        let ll: IpAddr = "fe80::eaeb:d3ff:fe41:a1b2".parse().unwrap();
        let c = select(&t, Some("eth0"), &[ll, v4(10, 10, 1, 11)], None).unwrap();
        assert_eq!(
            (c.index, c.addr, c.pinned),
            (3, Some(v4(10, 10, 1, 11)), false)
        );
        // Only a link-local address: its RoCE v2 entry.
        assert_eq!(select(&t, Some("eth0"), &[ll], None).unwrap().index, 1);
        assert_eq!(select(&t, Some("eth0"), &[], None), Err(GidMiss::NoAddress));
        assert_eq!(
            select(&t, Some("eth0"), &[v4(10, 10, 9, 9)], None),
            Err(GidMiss::NoRoceV2 {
                addrs: vec![v4(10, 10, 9, 9)]
            })
        );
        // An entry of another netdev with the same address is not this link's.
        assert!(select(&t, Some("eth1"), &[v4(10, 10, 1, 11)], None).is_err());
    }

    #[test]
    fn pinned() {
        let t = [
            e(3, "::ffff:10.10.1.11", "IB/RoCE v1", None),
            e(4, "::ffff:10.10.1.11", "RoCE v2", None),
        ];
        let c = select(&t, None, &[v4(10, 10, 1, 11)], Some(3)).unwrap();
        assert_eq!((c.index, c.addr, c.pinned), (3, None, true));
        let c = select(&t, None, &[v4(10, 10, 1, 11)], Some(4)).unwrap();
        assert_eq!(
            (c.index, c.addr, c.pinned),
            (4, Some(v4(10, 10, 1, 11)), true)
        );
        assert_eq!(
            select(&t, None, &[], Some(7)),
            Err(GidMiss::PinnedEmpty { index: 7 })
        );
    }

    #[test]
    fn env_values() {
        assert_eq!(parse_gid_index(None).unwrap(), None);
        assert_eq!(parse_gid_index(Some(" ")).unwrap(), None);
        assert_eq!(parse_gid_index(Some("3")).unwrap(), Some(3));
        let err = parse_gid_index(Some("three")).unwrap_err().to_string();
        assert!(err.contains("RDMESH_GID_INDEX=\"three\""), "{err}");
        assert!(parse_gid_index(Some("256")).is_err());
    }

    #[test]
    fn candidate_order_groups() {
        let a: Vec<IpAddr> = ["fe80::1", "fd00::2", "10.0.0.1", "192.168.1.1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let o = candidate_order(&a);
        assert_eq!(o, vec![a[2], a[3], a[1], a[0]]);
    }
}
