//! The NICs a mesh node uses: one per link address of a selected, up device port, each with
//! the bandwidth ceiling that weights its share of striped messages, and its open soft device.
//!
//! The ceiling of a NIC is the smaller of its Ethernet speed and its PCIe link's ceiling
//! ([`crate::topo::PcieLink::ceiling_gbps`]; a DGX Spark half-port on PCIe Gen5 x4 gives about
//! 126 Gb/s, below the 200 Gb/s port), 10 Gb/s when neither is known, or what
//! `RDMESH_RAIL_GBPS` says for its netdev.

use std::sync::Arc;

use crate::mesh::counters::NicCounters;
use crate::mesh::error::{MeshError, Result};
use crate::mesh::select::HcaFilter;
use crate::topo::{IfAddr, Topology};
use crate::verbs::{Device, ProtectionDomain, SoftConfig};

/// The environment variable that overrides NIC ceilings: `netdev=Gb/s,...`.
pub const RAIL_GBPS_ENV: &str = "RDMESH_RAIL_GBPS";
/// The ceiling assumed when neither the link speed nor the PCIe link is known, Gb/s.
pub const DEFAULT_GBPS: f64 = 10.0;

/// A NIC as configured: a device port and one of its link addresses.
#[derive(Debug, Clone, PartialEq)]
pub struct NicSpec {
    /// Device name (`rocep1s0f0`, `soft_veth0`).
    pub device: String,
    /// Port number, 1-based.
    pub port: u32,
    /// The port's netdev.
    pub netdev: String,
    /// The link address and its prefix length.
    pub addr: IfAddr,
    /// Bandwidth ceiling per direction, Gb/s: the weight of this NIC in striping.
    pub gbps: f64,
    /// The provider of its device: soft (default), the device model on a UDP socket, or a
    /// vfio function (`RDMESH_NICS=vfio:BDF=addr/len`, `RDMESH_PROVIDER`).
    pub provider: crate::verbs::ProviderKind,
}

impl NicSpec {
    /// `netdev addr/prefix` for messages.
    pub fn label(&self) -> String {
        format!("{} {}", self.netdev, self.addr)
    }
}

/// Parses `RDMESH_RAIL_GBPS`-style overrides: `veth0=30,veth1=10`.
///
/// Errors: [`MeshError::Config`] for an entry without `=` or a ceiling that is not a positive
/// number.
pub fn parse_gbps_overrides(value: &str) -> Result<Vec<(String, f64)>> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, g) = item.split_once('=').ok_or_else(|| {
            MeshError::Config(format!(
                "{RAIL_GBPS_ENV}: entry {item:?} is not netdev=Gb/s (e.g. enp1s0f0np0=100)"
            ))
        })?;
        let gbps: f64 = g
            .trim()
            .parse()
            .ok()
            .filter(|v: &f64| *v > 0.0 && v.is_finite())
            .ok_or_else(|| {
                MeshError::Config(format!(
                    "{RAIL_GBPS_ENV}: {g:?} in entry {item:?} is not a positive number of Gb/s"
                ))
            })?;
        out.push((name.trim().to_string(), gbps));
    }
    Ok(out)
}

/// The NICs of a discovered topology: every port that is up, selected by `filter`, with each
/// of its addresses other than IPv6 link-local ones. Ceilings come from the port (see the
/// module docs) unless `overrides` names its netdev.
///
/// Logs a warning for a port that is one half of a physical port (DGX Spark) whose other half
/// is not among the NICs: half of that port's bandwidth stays unused.
pub fn nics_from_topology(
    topo: &Topology,
    filter: Option<&HcaFilter>,
    overrides: &[(String, f64)],
) -> Vec<NicSpec> {
    let mut out = Vec::new();
    for p in topo
        .ports
        .iter()
        .filter(|p| p.kind == crate::topo::DeviceKind::Vfio)
    {
        let bdf = p.pci.map(|a| a.to_string()).unwrap_or_default();
        tracing::info!(
            device = %p.device,
            "{bdf} is a ConnectX function on vfio-pci: nothing in the kernel holds its address, so rdmesh uses it only when RDMESH_NICS lists it (RDMESH_NICS=vfio:{bdf}=ADDR/PREFIX)"
        );
    }
    let selected: Vec<_> = topo
        .ports
        .iter()
        .filter(|p| p.up)
        .filter(|p| filter.is_none_or_selects(&p.device, p.port, p.netdev.as_deref()))
        .filter(|p| p.netdev.is_some())
        .collect();
    for p in &selected {
        let netdev = p.netdev.clone().unwrap_or_default();
        let mut gbps: Option<f64> = p.speed_mbps.map(|s| s as f64 / 1000.0);
        if let Some(c) = p.pcie_ceiling_gbps() {
            gbps = Some(gbps.map_or(c, |g| g.min(c)));
        }
        let gbps = overrides
            .iter()
            .find(|(n, _)| *n == netdev)
            .map(|(_, g)| *g)
            .or(gbps.filter(|g| *g > 0.0))
            .unwrap_or(DEFAULT_GBPS);
        for a in &p.addresses {
            if crate::topo::soft::is_ipv6_link_local(a.ip) {
                continue;
            }
            out.push(NicSpec {
                device: p.device.clone(),
                port: p.port,
                netdev: netdev.clone(),
                addr: *a,
                gbps,
                provider: Default::default(),
            });
        }
        for s in &p.siblings {
            let used = selected
                .iter()
                .any(|q| q.pci.as_ref() == Some(s) && !q.addresses.is_empty());
            if !used {
                tracing::warn!(
                    device = %p.device,
                    netdev = %netdev,
                    sibling = %s,
                    "{} is one half of a physical port whose other half (PCI {s}) is down, excluded or has no address: rdmesh stripes over both halves only when both have an address on their own subnet; half of the port's bandwidth stays unused",
                    p.device
                );
            }
        }
    }
    out
}

trait FilterExt {
    fn is_none_or_selects(&self, device: &str, port: u32, netdev: Option<&str>) -> bool;
}

impl FilterExt for Option<&HcaFilter> {
    fn is_none_or_selects(&self, device: &str, port: u32, netdev: Option<&str>) -> bool {
        self.map_or(true, |f| f.selects(device, port, netdev))
    }
}

/// A NIC in use: its configuration, its open soft device(s) and protection domain(s), and its
/// counters.
#[derive(Debug)]
pub struct Nic {
    /// Index in the node's NIC list.
    pub index: usize,
    /// What it is.
    pub spec: NicSpec,
    /// Every shard's device and PD, shard 0 first (one entry unless the node has several
    /// progress threads and the devices use ephemeral UDP ports).
    shards: Vec<(Device, ProtectionDomain)>,
    /// Its counters.
    pub counters: Arc<NicCounters>,
}

impl Nic {
    /// Opens the device of `spec` (its provider) on UDP port `udp_port` (0 = ephemeral; a
    /// vfio function always uses 4791). With `shards` > 1, a soft NIC on an ephemeral port gets
    /// one device per shard — its own UDP socket on the same address, driven by that shard's
    /// progress thread ([`crate::mesh::progress`]); otherwise one device serves every shard.
    ///
    /// Errors: [`MeshError::Host`] when a device cannot bind its address or come up.
    pub fn open(index: usize, spec: NicSpec, udp_port: u16, shards: usize) -> Result<Nic> {
        let n = if spec.provider == crate::verbs::ProviderKind::Soft && udp_port == 0 {
            shards.max(1)
        } else {
            1
        };
        let mut opened = Vec::with_capacity(n);
        for _ in 0..n {
            let device = Device::open_provider(
                &spec.provider,
                SoftConfig {
                    udp_port,
                    ..SoftConfig::new(spec.addr.ip)
                },
            )
            .map_err(|e| {
                MeshError::Host(format!(
                    "opening the {} device for NIC {}: {e}",
                    spec.provider,
                    spec.label()
                ))
            })?;
            let pd = device.alloc_pd().map_err(|e| {
                MeshError::Host(format!(
                    "allocating the protection domain of NIC {}: {e}",
                    spec.label()
                ))
            })?;
            opened.push((device, pd));
        }
        Ok(Nic {
            index,
            spec,
            shards: opened,
            counters: Arc::new(NicCounters::default()),
        })
    }

    /// The device and PD that shard `shard` uses on this NIC (modulo the devices opened).
    pub fn shard(&self, shard: usize) -> (&Device, &ProtectionDomain) {
        let (d, pd) = &self.shards[shard % self.shards.len()];
        (d, pd)
    }

    /// The device of shard 0: the NIC's port as the other shards' devices see it too (same
    /// address, MTU and provider).
    pub fn device(&self) -> &Device {
        &self.shards[0].0
    }

    /// Every device of the NIC (one per shard).
    pub fn devices(&self) -> impl Iterator<Item = &Device> {
        self.shards.iter().map(|(d, _)| d)
    }

    /// The largest path MTU the NIC's netdev allows, bytes.
    pub fn active_mtu(&self) -> u32 {
        self.device().info().active_mtu().bytes()
    }

    /// The largest path MTU this end can use on any route, bytes: a soft device sends what the
    /// route allows (4096, IBTA's maximum; each end caps it by its route in
    /// [`path_mtu`](Self::path_mtu)); a hardware port what its netdev allows.
    pub fn max_mtu(&self) -> u32 {
        if self.device().provider() == "soft" {
            crate::verbs::Mtu::Mtu4096.bytes()
        } else {
            self.active_mtu()
        }
    }

    /// The path MTU towards `peer` in bytes and where it came from: for a soft device the route's
    /// MTU (two ranks on one host reach each other through `lo` whatever netdev their addresses
    /// are on), else — or when the route cannot be read — the netdev's.
    pub fn path_mtu(&self, peer: std::net::IpAddr) -> (u32, String) {
        if self.device().provider() == "soft" {
            if let Some((mtu, route)) = crate::soft::path_mtu::ib_path_mtu(self.spec.addr.ip, peer)
            {
                return (mtu.bytes(), format!("route MTU {route}"));
            }
        }
        (
            self.active_mtu(),
            format!(
                "{} MTU {}",
                self.spec.netdev,
                self.device().info().netdev_mtu
            ),
        )
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::topo::{DeviceKind, PciAddr, PcieLink, Port};

    fn port(dev: &str, netdev: &str, addr: &str, pci: &str, sib: &[&str]) -> Port {
        let (ip, p) = addr.split_once('/').unwrap();
        Port {
            device: dev.into(),
            kind: DeviceKind::Rdma,
            port: 1,
            up: true,
            link_up: true,
            port_state: None,
            link_layer: None,
            rate: None,
            netdev: Some(netdev.into()),
            addresses: vec![
                IfAddr {
                    ip: ip.parse().unwrap(),
                    prefix_len: p.parse().unwrap(),
                },
                IfAddr {
                    ip: "fe80::1".parse().unwrap(),
                    prefix_len: 64,
                },
            ],
            gids: vec![],
            gid: None,
            gid_miss: None,
            mtu: Some(9000),
            speed_mbps: Some(200_000),
            pci: Some(pci.parse::<PciAddr>().unwrap()),
            pcie: Some(PcieLink {
                speed_gts: 32.0,
                width: 4,
                max_speed_gts: None,
                max_width: None,
            }),
            siblings: sib.iter().map(|s| s.parse().unwrap()).collect(),
            sys_image_guid: None,
            phys_port_id: None,
        }
    }

    #[test]
    fn spark_halves_get_pcie_ceilings_and_selection_applies() {
        let topo = Topology {
            sysfs_root: "/sys".into(),
            soft: false,
            ports: vec![
                port(
                    "rocep1s0f0",
                    "enp1s0f0np0",
                    "10.10.1.11/24",
                    "0000:01:00.0",
                    &["0002:01:00.0"],
                ),
                port(
                    "roceP2p1s0f0",
                    "enP2p1s0f0np0",
                    "10.10.2.11/24",
                    "0002:01:00.0",
                    &["0000:01:00.0"],
                ),
            ],
        };
        let nics = nics_from_topology(&topo, None, &[]);
        assert_eq!(nics.len(), 2, "link-local addresses are left out");
        assert!((nics[0].gbps - 126.03).abs() < 0.1, "{}", nics[0].gbps);
        let f = HcaFilter::parse("^=roceP2p1s0f0").unwrap();
        let nics = nics_from_topology(&topo, Some(&f), &[("enp1s0f0np0".into(), 50.0)]);
        assert_eq!(nics.len(), 1);
        assert_eq!(
            (nics[0].device.as_str(), nics[0].gbps),
            ("rocep1s0f0", 50.0)
        );
    }

    #[test]
    fn overrides_parse() {
        let o = parse_gbps_overrides("veth0=30, veth1 = 10").unwrap();
        assert_eq!(o, vec![("veth0".into(), 30.0), ("veth1".into(), 10.0)]);
        assert!(parse_gbps_overrides("veth0")
            .unwrap_err()
            .to_string()
            .contains("netdev=Gb/s"));
        assert!(parse_gbps_overrides("veth0=-1").is_err());
        assert!(parse_gbps_overrides("veth0=x").is_err());
    }
}
