//! Soft device ports: on a machine with no RDMA device, every netdev with an address is a
//! device of rdmesh's soft RoCEv2 provider, named `soft_<netdev>` with one port (as rxe binds
//! a device to a netdev). Left out, because their addresses never identify a link to a peer:
//! loopback interfaces (127.0.0.1 is on every machine) and netdevs whose only addresses are
//! IPv6 link-local (`fe80::/10`, which the kernel gives every interface that is up). IPv4
//! link-local addresses (169.254.0.0/16, as DGX Spark's netplan assigns) count.
//!
//! A soft port has no GID table: its RoCE v2 GID is its address (IPv4-mapped for IPv4), so
//! `gid` is `None` and nothing needs choosing.

use std::path::Path;

use super::addrs::NetdevAddrs;
use super::error::Result;
use super::netdev::read_netdev;
use super::pci::{pci_addr_of_dir, read_pcie_link};
use super::{DeviceKind, Port};

/// The soft device name of a netdev (`soft_eth0`), as [`crate::verbs::Device::list`] names it.
pub fn soft_device_name(netdev: &str) -> String {
    format!("soft_{netdev}")
}

/// Whether `ip` is an IPv6 link-local address (`fe80::/10`).
pub fn is_ipv6_link_local(ip: std::net::IpAddr) -> bool {
    matches!(ip, std::net::IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80)
}

/// One soft port per non-loopback netdev of `addrs` that has an address other than an IPv6
/// link-local one, with what
/// `<sysfs_root>/class/net/<netdev>` says about it (MTU, speed, carrier, PCI function).
///
/// Errors: malformed netdev attributes ([`super::TopoError::Parse`]).
pub fn soft_ports(sysfs_root: &Path, addrs: &[NetdevAddrs]) -> Result<Vec<Port>> {
    let mut out = Vec::new();
    for na in addrs {
        if na.loopback || na.addrs.iter().all(|a| is_ipv6_link_local(a.ip)) {
            continue;
        }
        let nd = read_netdev(sysfs_root, &na.name)?;
        if nd.is_loopback() {
            continue;
        }
        let sysfs_knows_link =
            nd.carrier.is_some() || nd.operstate.as_deref().is_some_and(|s| s != "unknown");
        let link_up = if sysfs_knows_link {
            nd.link_up()
        } else {
            na.up && na.lower_up
        };
        let pcie = match &nd.device_dir {
            Some(d) => read_pcie_link(d)?,
            None => None,
        };
        out.push(Port {
            device: soft_device_name(&na.name),
            kind: DeviceKind::Soft,
            port: 1,
            up: link_up,
            link_up,
            port_state: None,
            link_layer: None,
            rate: None,
            netdev: Some(na.name.clone()),
            addresses: na.addrs.clone(),
            gids: Vec::new(),
            gid: None,
            gid_miss: None,
            mtu: nd.mtu.or(na.mtu),
            speed_mbps: nd.speed_mbps,
            pci: nd.device_dir.as_deref().and_then(pci_addr_of_dir),
            pcie,
            siblings: Vec::new(),
            sys_image_guid: None,
            phys_port_id: nd.phys_port_id,
        });
    }
    Ok(out)
}
