//! Putting discovery together: RDMA device ports with their netdev, addresses, GID choice,
//! PCIe link, and the sibling functions that share a physical port.
//!
//! Siblings. Some adapters drive one physical port from two PCI functions on two PCIe links
//! (ConnectX-7 in multi-host / Socket Direct mode; DGX Spark: `0000:01:00.0` and
//! `0002:01:00.0`, each a Gen5 x4 link of ≈126 Gb/s for a 200 Gb/s port). Two ports are
//! siblings when their netdevs report the same `phys_port_id`, or, where that attribute is not
//! available, when their RDMA devices have the same `sys_image_guid` (one adapter) and their
//! functions have the same device.function number on different PCIe links (domain or bus).

use std::path::Path;

use super::addrs::NetdevAddrs;
use super::error::{Result, TopoError};
use super::gid;
use super::netdev::{netdev_for_port, read_netdev};
use super::pci::{pci_addr_of_dir, read_pcie_link};
use super::sysfs::{list_devices, RdmaDevice, RdmaPort};
use super::{soft, DeviceKind, DiscoverOptions, Port, Topology};

/// Discovers the ports of the machine described by `opts`: the ports of every RDMA device under
/// `<sysfs_root>/class/infiniband`, or, when there is none, one soft port per netdev with an
/// address (loopback excluded). Each chosen GID is logged (`tracing`, `info`).
///
/// Errors: [`TopoError::SysfsRoot`] when the root is not a directory; listing, parse and
/// address-source errors (see [`TopoError`]).
pub fn discover(opts: &DiscoverOptions) -> Result<Topology> {
    let root = &opts.sysfs_root;
    if !root.is_dir() {
        return Err(TopoError::SysfsRoot {
            path: root.clone(),
            reason: if root.exists() {
                "not a directory".into()
            } else {
                "does not exist".into()
            },
        });
    }
    let devices = list_devices(root)?;
    let addrs = opts.addresses.load()?;
    let soft = devices.is_empty();
    let mut ports = if soft {
        soft::soft_ports(root, &addrs)?
    } else {
        let mut v = Vec::new();
        for dev in &devices {
            for port in &dev.ports {
                v.push(rdma_port(root, dev, port, &addrs, opts.gid_index)?);
            }
        }
        v
    };
    // Functions on vfio-pci have no RDMA device or netdev; list them too.
    ports.extend(super::vfio::vfio_ports(root)?);
    fill_siblings(&mut ports);
    ports.sort_by(|a, b| (a.device.as_bytes(), a.port).cmp(&(b.device.as_bytes(), b.port)));
    Ok(Topology {
        sysfs_root: root.clone(),
        soft,
        ports,
    })
}

fn rdma_port(
    root: &Path,
    dev: &RdmaDevice,
    port: &RdmaPort,
    addrs: &[NetdevAddrs],
    pin: Option<u32>,
) -> Result<Port> {
    let netdev_name = netdev_for_port(root, dev, port)?;
    let nd = match &netdev_name {
        Some(n) => Some(read_netdev(root, n)?),
        None => None,
    };
    let na = netdev_name
        .as_deref()
        .and_then(|n| addrs.iter().find(|a| a.name == n));
    let addresses = na.map(|a| a.addrs.clone()).unwrap_or_default();
    let link_up = nd.as_ref().is_some_and(|n| n.link_up());
    let up = match &port.state {
        Some(s) => s.is_active(),
        None => link_up,
    };
    let device_dir = dev
        .device_dir
        .clone()
        .or_else(|| nd.as_ref().and_then(|n| n.device_dir.clone()));
    let pcie = match &device_dir {
        Some(d) => read_pcie_link(d)?,
        None => None,
    };
    let speed_mbps =
        nd.as_ref()
            .and_then(|n| n.speed_mbps)
            .or(if up { port.rate_mbps } else { None });
    let ips: Vec<_> = addresses.iter().map(|a| a.ip).collect();
    let (gid, gid_miss) = match gid::select(&port.gids, netdev_name.as_deref(), &ips, pin) {
        Ok(c) => {
            gid::log_choice(&dev.name, port.num, &c);
            (Some(c), None)
        }
        Err(m) => (None, Some(m)),
    };
    Ok(Port {
        device: dev.name.clone(),
        kind: DeviceKind::Rdma,
        port: port.num,
        up,
        link_up,
        port_state: port.state.clone(),
        link_layer: port.link_layer.clone(),
        rate: port.rate.clone(),
        netdev: netdev_name,
        addresses,
        gids: port.gids.clone(),
        gid,
        gid_miss,
        mtu: nd.as_ref().and_then(|n| n.mtu).or(na.and_then(|a| a.mtu)),
        speed_mbps,
        pci: device_dir.as_deref().and_then(pci_addr_of_dir),
        pcie,
        siblings: Vec::new(),
        sys_image_guid: dev.sys_image_guid.clone(),
        phys_port_id: nd.and_then(|n| n.phys_port_id),
    })
}

/// Whether two ports drive the same physical port over different PCI functions (see the
/// module documentation for the rule).
pub fn are_siblings(a: &Port, b: &Port) -> bool {
    let (Some(pa), Some(pb)) = (a.pci, b.pci) else {
        return false;
    };
    if pa == pb {
        return false;
    }
    if let (Some(x), Some(y)) = (&a.phys_port_id, &b.phys_port_id) {
        return x == y;
    }
    matches!((&a.sys_image_guid, &b.sys_image_guid), (Some(x), Some(y)) if x == y)
        && pa.same_slot_other_link(&pb)
}

fn fill_siblings(ports: &mut [Port]) {
    let found: Vec<Vec<_>> = ports
        .iter()
        .map(|p| {
            let mut s: Vec<_> = ports
                .iter()
                .filter(|q| are_siblings(p, q))
                .filter_map(|q| q.pci)
                .collect();
            s.sort();
            s.dedup();
            s
        })
        .collect();
    for (p, s) in ports.iter_mut().zip(found) {
        p.siblings = s;
    }
}
