//! Topology discovery: which RDMA device ports this machine has, the netdev, addresses, GID,
//! MTU, link speed and PCIe link of each, and which PCI functions share one physical port.
//!
//! Everything is read from a sysfs tree whose root is a parameter (`/sys` normally; a fixture
//! tree or a copy from another machine in tests and diagnosis) and from an address source
//! (netlink, or a file of `ip -json address show` output). On a machine with no RDMA device,
//! every netdev with an address is a `soft` device port (as rxe binds to a netdev), so the
//! same report and the mesh transport work without hardware.
//!
//! - [`sysfs`]: RDMA devices, ports and GID tables; [`netdev`]: interfaces; [`pci`]: PCI
//!   addresses, PCIe links and their bandwidth ceiling; [`addrs`]: addresses and prefixes;
//!   [`soft`]: soft device ports; [`vfio`]: ConnectX functions bound to vfio-pci; [`gid`]:
//!   the GID choice (also at connect time);
//!   [`discover`]: putting it together; [`report`]: the `rdmesh topo` text and JSON.
//!
//! ```no_run
//! use rdmesh_host::topo::{DiscoverOptions, Topology};
//! let topo = Topology::discover(&DiscoverOptions::from_env()?)?;
//! for p in &topo.ports {
//!     println!("{} port {}: {:?} gid {:?}", p.device, p.port, p.netdev, p.gid.as_ref().map(|g| g.index));
//! }
//! # Ok::<(), rdmesh_host::topo::TopoError>(())
//! ```

pub mod addrs;
pub mod discover;
pub mod error;
pub mod gid;
pub mod neigh;
pub mod netdev;
pub mod pci;
pub mod report;
pub mod soft;
pub mod sysfs;
pub mod vfio;

use std::net::IpAddr;
use std::path::PathBuf;

pub use addrs::{AddressSource, IfAddr, NetdevAddrs};
pub use error::{Result, TopoError};
pub use gid::{select_for_connect, GidChoice, GidEntry, GidMiss, GidType, GID_INDEX_ENV};
pub use pci::{PciAddr, PcieLink};
pub use sysfs::{LinkLayer, PortState};

/// The bytes RoCE headers take from the Ethernet MTU when the kernel derives a RoCE port's
/// active MTU: GRH 40 + UDP 8 + BTH 12 + XRC ETH 4 + AtomicETH 28 + ICRC 4 = 96
/// (Linux `include/rdma/ib_addr.h` `iboe_get_mtu()`, sizes from `include/rdma/ib_pack.h`).
pub const IBOE_MTU_OVERHEAD: u32 = 96;

/// The RoCE path MTU (256..=4096 bytes) a hardware RoCE port gets from a netdev MTU, as the
/// kernel computes it (`iboe_get_mtu`): the largest IB MTU ≤ `netdev_mtu` − 96. `None` below
/// 352 bytes.
pub fn iboe_mtu(netdev_mtu: u32) -> Option<u32> {
    let room = netdev_mtu.checked_sub(IBOE_MTU_OVERHEAD)?;
    [4096, 2048, 1024, 512, 256]
        .into_iter()
        .find(|&m| m <= room)
}

/// How to discover.
#[derive(Debug, Clone)]
pub struct DiscoverOptions {
    /// The sysfs root: the directory holding `class/infiniband` and `class/net` (`/sys`).
    pub sysfs_root: PathBuf,
    /// Where interface addresses come from.
    pub addresses: AddressSource,
    /// A GID index pinned for every port (`RDMESH_GID_INDEX`); `None` selects by address.
    pub gid_index: Option<u32>,
}

impl Default for DiscoverOptions {
    /// `/sys`, netlink, GID by address.
    fn default() -> Self {
        DiscoverOptions {
            sysfs_root: PathBuf::from("/sys"),
            addresses: AddressSource::Netlink,
            gid_index: None,
        }
    }
}

impl DiscoverOptions {
    /// The defaults with `gid_index` from `RDMESH_GID_INDEX`.
    ///
    /// Errors: [`TopoError::GidIndexEnv`] when the variable is not an index.
    pub fn from_env() -> Result<Self> {
        Ok(DiscoverOptions {
            gid_index: gid::gid_index_from_env()?,
            ..Default::default()
        })
    }
}

/// What kind of device a port belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A kernel RDMA device (`/sys/class/infiniband/*`: mlx5, rxe, …).
    Rdma,
    /// A netdev used by rdmesh's soft RoCEv2 provider (machines without RDMA devices).
    Soft,
    /// A ConnectX function bound to vfio-pci, for rdmesh's vfio provider ([`vfio`]).
    Vfio,
}

/// One port of one device: everything `rdmesh topo` reports about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Port {
    /// Device name: the RDMA device (`rocep1s0f0`), or `soft_<netdev>`.
    pub device: String,
    /// RDMA or soft.
    pub kind: DeviceKind,
    /// Port number (1-based; 1 for soft devices).
    pub port: u32,
    /// Whether the port passes traffic: IB port state ACTIVE for RDMA ports (the netdev's
    /// carrier when the state is unreadable), the netdev's link for soft ports.
    pub up: bool,
    /// The netdev's carrier, as `ibdev2netdev` prints it ("Up"/"Down").
    pub link_up: bool,
    /// The IB port state, RDMA ports only.
    pub port_state: Option<PortState>,
    /// The link layer, RDMA ports only.
    pub link_layer: Option<LinkLayer>,
    /// The port rate as the kernel prints it ("200 Gb/sec (4X HDR)"), RDMA ports only.
    pub rate: Option<String>,
    /// The netdev of the port.
    pub netdev: Option<String>,
    /// The netdev's addresses with prefix lengths.
    pub addresses: Vec<IfAddr>,
    /// The populated GID table entries (empty for soft ports: their GID is the address).
    pub gids: Vec<GidEntry>,
    /// The chosen GID (RoCE v2 GID of the link address, or the pinned index).
    pub gid: Option<GidChoice>,
    /// Why no GID was chosen, RDMA ports only.
    pub gid_miss: Option<GidMiss>,
    /// Netdev MTU in bytes.
    pub mtu: Option<u32>,
    /// Link speed in Mb/s (netdev `speed`; the port rate when that is unknown and the port up).
    pub speed_mbps: Option<u64>,
    /// The PCI function of the port.
    pub pci: Option<PciAddr>,
    /// Its PCIe link.
    pub pcie: Option<PcieLink>,
    /// Other PCI functions that drive the same physical port over another PCIe link.
    pub siblings: Vec<PciAddr>,
    /// `sys_image_guid` of the RDMA device (one adapter), used to find siblings.
    pub sys_image_guid: Option<String>,
    /// The netdev's `phys_port_id`, used to find siblings.
    pub phys_port_id: Option<String>,
}

impl Port {
    /// The PCIe ceiling per direction in Gb/s (see [`PcieLink::ceiling_gbps`]).
    pub fn pcie_ceiling_gbps(&self) -> Option<f64> {
        self.pcie.map(|l| l.ceiling_gbps())
    }

    /// Whether the PCIe link caps the port below its Ethernet speed.
    pub fn pcie_caps_link(&self) -> bool {
        match (self.pcie_ceiling_gbps(), self.speed_mbps) {
            (Some(c), Some(s)) => c * 1000.0 < s as f64,
            _ => false,
        }
    }

    /// The RoCE path MTU in bytes the netdev MTU allows: the kernel's rule
    /// ([`iboe_mtu`]) for RDMA ports, the soft provider's
    /// ([`crate::verbs::active_mtu_for`]) for soft ports.
    pub fn roce_mtu(&self) -> Option<u32> {
        let mtu = self.mtu?;
        match self.kind {
            DeviceKind::Rdma | DeviceKind::Vfio => iboe_mtu(mtu),
            DeviceKind::Soft => Some(crate::verbs::active_mtu_for(mtu).bytes()),
        }
    }

    /// The IP addresses of the port.
    pub fn ips(&self) -> Vec<IpAddr> {
        self.addresses.iter().map(|a| a.ip).collect()
    }

    /// The port address whose subnet contains `peer` with the longest prefix, if any.
    pub fn route_to(&self, peer: IpAddr) -> Option<IfAddr> {
        self.addresses
            .iter()
            .filter(|a| a.contains(peer))
            .max_by_key(|a| a.prefix_len)
            .copied()
    }
}

/// The ports of a machine.
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    /// The sysfs root it was read from.
    pub sysfs_root: PathBuf,
    /// Whether there was no RDMA device, so the ports are soft device ports.
    pub soft: bool,
    /// The ports, sorted by device name (byte order) and port number.
    pub ports: Vec<Port>,
}

impl Topology {
    /// Discovers the ports (see [`discover::discover`]).
    pub fn discover(opts: &DiscoverOptions) -> Result<Topology> {
        discover::discover(opts)
    }

    /// The port `port` of device `device`.
    pub fn port(&self, device: &str, port: u32) -> Option<&Port> {
        self.ports
            .iter()
            .find(|p| p.device == device && p.port == port)
    }

    /// The port whose netdev is `netdev`.
    pub fn by_netdev(&self, netdev: &str) -> Option<&Port> {
        self.ports
            .iter()
            .find(|p| p.netdev.as_deref() == Some(netdev))
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn iboe_mtu_rule() {
        assert_eq!(iboe_mtu(1500), Some(1024));
        assert_eq!(iboe_mtu(9000), Some(4096));
        assert_eq!(iboe_mtu(4192), Some(4096));
        assert_eq!(iboe_mtu(4191), Some(2048));
        assert_eq!(iboe_mtu(352), Some(256));
        assert_eq!(iboe_mtu(351), None);
        assert_eq!(iboe_mtu(0), None);
    }
}
