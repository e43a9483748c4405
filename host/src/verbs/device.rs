//! Devices: listing and opening RDMA devices (libibverbs `ibv_get_device_list`,
//! `ibv_open_device`).
//!
//! With the `soft` provider, every network interface address is a device: the soft RoCEv2
//! provider binds a UDP socket to that address (destination port 4791, like rxe binds to a
//! netdev). Port 0 asks for an ephemeral UDP port so several endpoints can share one address;
//! such endpoints can only talk to peers that learn the port out of band (rdmesh peers do).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

use rdmesh_core::rc::Mtu;

use crate::capture::Capture;
use crate::error::{Error, Result};
use crate::soft::SoftDevice;
use crate::verbs::cq::{CompletionQueue, CqInner};
use crate::verbs::pd::{PdInner, ProtectionDomain};

/// The RoCEv2 UDP destination port (IANA; rxe_net.c `ROCE_V2_UDP_DPORT`).
pub const ROCE_V2_UDP_PORT: u16 = 4791;

/// What `Device::list` reports for one device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device name (`soft_<netdev>` for the soft provider).
    pub name: String,
    /// Provider name (`soft`).
    pub provider: &'static str,
    /// The network interface the device sends on.
    pub netdev: String,
    /// The interface address the device binds to (the RoCEv2 GID is this address).
    pub addr: IpAddr,
    /// The interface MTU in bytes.
    pub netdev_mtu: u32,
}

impl DeviceInfo {
    /// The largest IB path MTU that fits the interface: ≤ netdev MTU − 80 bytes of
    /// Ethernet/IP/UDP/BTH/ext headers and ICRC (rxe_param.h `RXE_MAX_HDR_LENGTH`).
    pub fn active_mtu(&self) -> Mtu {
        active_mtu_for(self.netdev_mtu)
    }
}

/// The largest IB path MTU that fits an interface MTU (see [`DeviceInfo::active_mtu`]).
pub fn active_mtu_for(netdev_mtu: u32) -> Mtu {
    let room = netdev_mtu.saturating_sub(80);
    [Mtu::Mtu4096, Mtu::Mtu2048, Mtu::Mtu1024, Mtu::Mtu512]
        .into_iter()
        .find(|m| m.bytes() <= room)
        .unwrap_or(Mtu::Mtu256)
}

/// How to open a soft device.
#[derive(Debug, Clone)]
pub struct SoftConfig {
    /// Local address to bind (must be a concrete interface address, not unspecified: the ICRC
    /// covers the source address, so it must be known).
    pub addr: IpAddr,
    /// Local UDP port: 4791 by default, 0 for an ephemeral port.
    pub udp_port: u16,
    /// Write every packet sent and received to this capture.
    pub capture: Option<Arc<Capture>>,
    /// Record received packets in the capture too (off when both ends share one capture).
    pub capture_received: bool,
    /// IP TOS byte (DSCP << 2 | ECN) put on every packet.
    pub tos: u8,
    /// Receive through a raw `IPPROTO_UDP` socket that shows each datagram's real IPv4 header,
    /// and verify the ICRC over it (for peers such as Linux rdma_rxe that put a non-zero IP
    /// identification on their packets). IPv4 only; needs root or `CAP_NET_RAW`. The UDP socket
    /// stays bound so the kernel does not answer the peer with ICMP port unreachable.
    pub raw_receive: bool,
    /// Fault injection for tests: corrupt the ICRC of the N-th packet (1-based) this device
    /// sends, so a strict peer drops it and the retransmit path must recover.
    pub corrupt_tx_icrc: Option<u64>,
    /// Seeded impairment of this device's packets (drop, duplicate, reorder, corrupt, delay on
    /// transmit; CE marks on receive), see [`crate::soft::Impairment`]. `None`: none.
    pub impair: Option<crate::soft::Impairment>,
    /// DCQCN rate control and pacing for every QP of this device (`docs/reliability.md`,
    /// rocev2.md §4): CNPs from the peer cut the sending rate. `None` (default): CNPs are only
    /// counted. Set `line_rate_mbps` to the port speed.
    pub dcqcn: Option<rdmesh_core::cc::DcqcnConfig>,
}

impl SoftConfig {
    /// Defaults for `addr`: port 4791, no capture, TOS 0, UDP receive path, no faults.
    pub fn new(addr: IpAddr) -> SoftConfig {
        SoftConfig {
            addr,
            udp_port: ROCE_V2_UDP_PORT,
            capture: None,
            capture_received: true,
            tos: 0,
            raw_receive: false,
            corrupt_tx_icrc: None,
            impair: None,
            dcqcn: None,
        }
    }
}

pub(crate) type DeviceInner = SoftDevice;

/// An open RDMA device context. Cloning yields another handle; the provider stops when the
/// last handle (and every object made from it) is gone.
#[derive(Debug, Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

impl Device {
    /// Lists the devices of this machine: one soft device per interface address
    /// (interface MTUs from `/sys/class/net`).
    ///
    /// Errors: [`Error::Io`] when the interface list cannot be read.
    pub fn list() -> Result<Vec<DeviceInfo>> {
        list_soft_devices(&PathBuf::from("/sys"))
    }

    /// Opens a soft device on `config.addr`.
    ///
    /// Errors: [`Error::Bind`] when the UDP port is taken or the address is not local;
    /// [`Error::Config`] for an unspecified address.
    pub fn open_soft(config: SoftConfig) -> Result<Device> {
        if config.addr.is_unspecified() {
            return Err(Error::Config(format!(
                "soft device: {} is not an interface address; the ICRC covers the source address, so bind a concrete one",
                config.addr
            )));
        }
        let info = find_device_for(config.addr).unwrap_or_else(|| DeviceInfo {
            name: format!("soft_{}", config.addr),
            provider: "soft",
            netdev: "?".into(),
            addr: config.addr,
            netdev_mtu: 1500,
        });
        Ok(Device {
            inner: SoftDevice::open(info, config)?,
        })
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.inner.info.name
    }

    /// Device information.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The UDP address the device is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local
    }

    /// Allocates a protection domain (ibv_alloc_pd).
    pub fn alloc_pd(&self) -> ProtectionDomain {
        ProtectionDomain {
            inner: Arc::new(PdInner::default()),
            device: self.inner.clone(),
        }
    }

    /// Creates a completion queue holding up to `capacity` entries (ibv_create_cq).
    pub fn create_cq(&self, capacity: usize) -> CompletionQueue {
        CompletionQueue {
            inner: Arc::new(CqInner::new(capacity.max(1))),
        }
    }

    /// Device-wide packet counters.
    pub fn counters(&self) -> crate::soft::DeviceCounters {
        crate::soft::DeviceCounters {
            impair: self.inner.impair_counters(),
            ..self.inner.counters.snapshot()
        }
    }
}

/// The device whose interface owns `addr`: an exact address match, or a loopback interface
/// whose prefix contains it (all of 127.0.0.0/8 is local on `lo`).
fn find_device_for(addr: IpAddr) -> Option<DeviceInfo> {
    let netdevs = crate::topo::addrs::from_netlink().ok()?;
    let exact = netdevs
        .iter()
        .find(|n| n.addrs.iter().any(|a| a.ip == addr));
    let owner = exact.or_else(|| {
        netdevs
            .iter()
            .find(|n| n.loopback && n.addrs.iter().any(|a| a.contains(addr)))
    })?;
    Some(device_info(&PathBuf::from("/sys"), owner, addr))
}

fn device_info(
    sysfs: &std::path::Path,
    n: &crate::topo::addrs::NetdevAddrs,
    addr: IpAddr,
) -> DeviceInfo {
    let mtu = crate::topo::netdev::read_netdev(sysfs, &n.name)
        .ok()
        .and_then(|d| d.mtu)
        .or(n.mtu)
        .unwrap_or(1500);
    DeviceInfo {
        name: crate::topo::soft::soft_device_name(&n.name),
        provider: "soft",
        netdev: n.name.clone(),
        addr,
        netdev_mtu: mtu,
    }
}

/// One soft device per interface address (loopback included: it is where two endpoints on
/// one machine meet), skipping IPv6 link-local addresses, which need a scope to route.
fn list_soft_devices(sysfs: &std::path::Path) -> Result<Vec<DeviceInfo>> {
    let netdevs = crate::topo::addrs::from_netlink().map_err(|e| Error::Config(e.to_string()))?;
    Ok(netdevs
        .iter()
        .flat_map(|n| {
            n.addrs
                .iter()
                .filter(|a| !crate::topo::soft::is_ipv6_link_local(a.ip))
                .map(move |a| device_info(sysfs, n, a.ip))
        })
        .collect())
}
