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
use crate::verbs::cq::{CompletionQueue, CqInner, CqKind};
use crate::verbs::pd::{PdInner, PdKind, ProtectionDomain};
use crate::vfio_provider::{VfioConfig, VfioDevice};

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
    /// Send the packets of one flush with UDP GSO (`UDP_SEGMENT`, segment `i` with IPv4 ID `i`)
    /// and receive with UDP GRO (see `crate::soft` "Batching"). Default: on, unless the
    /// environment sets `RDMESH_GSO=0`; ignored (off) with `raw_receive`, `impair` or
    /// `corrupt_tx_icrc`, which look at single packets.
    pub gso: bool,
}

impl SoftConfig {
    /// Defaults for `addr`: port 4791, no capture, TOS 0, UDP receive path, no faults, GSO/GRO
    /// batching unless `RDMESH_GSO=0`.
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
            gso: std::env::var("RDMESH_GSO").map_or(true, |v| v != "0"),
        }
    }
}

pub(crate) type DeviceInner = SoftDevice;

/// The provider behind a [`Device`]: the soft RoCEv2-over-UDP engine, or an mlx5 device driven
/// through VFIO ([`crate::vfio_provider`]).
#[derive(Debug, Clone)]
pub(crate) enum Provider {
    /// The soft provider.
    Soft(Arc<DeviceInner>),
    /// The vfio provider.
    Vfio(Arc<VfioDevice>),
}

/// An open RDMA device context. Cloning yields another handle; the provider stops when the
/// last handle (and every object made from it) is gone.
#[derive(Debug, Clone)]
pub struct Device {
    pub(crate) provider: Provider,
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
            provider: Provider::Soft(SoftDevice::open(info, config)?),
        })
    }

    /// Opens the mlx5 function at PCI address `bdf` (e.g. `0000:01:00.0`, bound to
    /// vfio-pci) through the vfio provider: VFIO container/group/device, BAR0, bus master,
    /// MSI-X vector 0, IOMMU-mapped DMA memory, then the mlx5 bring-up and GID index 0 =
    /// `config.addr`. Run `rdmesh doctor` first to check the machine.
    ///
    /// Errors: [`Error::Config`] naming the BDF and what to check (IOMMU group, vfio-pci
    /// binding, memlock limit, firmware state).
    pub fn open_vfio(bdf: &str, config: VfioConfig) -> Result<Device> {
        Ok(Device {
            provider: Provider::Vfio(VfioDevice::open_pci(bdf, config)?),
        })
    }

    /// Opens an in-process mlx5 device model through the vfio provider (tests and research:
    /// the same driver code as [`Device::open_vfio`], against `rdmesh_vfio::model`).
    ///
    /// Errors: [`Error::Config`] when the bring-up fails.
    pub fn open_vfio_model(
        model: &rdmesh_vfio::model::ModelDevice,
        name: &str,
        config: VfioConfig,
    ) -> Result<Device> {
        Ok(Device {
            provider: Provider::Vfio(VfioDevice::open_model(model, name, config)?),
        })
    }

    /// The provider's name: `soft` or `vfio`.
    pub fn provider(&self) -> &'static str {
        self.info().provider
    }

    /// vfio provider: records the MAC of the peer whose GID is `ip` (there is no kernel ARP
    /// under VFIO). The soft provider resolves peers through its UDP socket and ignores this.
    pub fn set_neighbor(&self, ip: IpAddr, mac: [u8; 6]) {
        if let Provider::Vfio(v) = &self.provider {
            v.set_neighbor(ip, mac);
        }
    }

    /// vfio provider: the port MAC (from QUERY_NIC_VPORT_CONTEXT); `None` for the soft
    /// provider.
    pub fn mac(&self) -> Option<[u8; 6]> {
        match &self.provider {
            Provider::Soft(_) => None,
            Provider::Vfio(v) => Some(v.hca.info().mac),
        }
    }

    /// The device name.
    pub fn name(&self) -> &str {
        &self.info().name
    }

    /// Device information.
    pub fn info(&self) -> &DeviceInfo {
        match &self.provider {
            Provider::Soft(d) => &d.info,
            Provider::Vfio(v) => &v.info,
        }
    }

    /// The UDP address the device is bound to (vfio provider: the GID address, port 4791).
    pub fn local_addr(&self) -> SocketAddr {
        match &self.provider {
            Provider::Soft(d) => d.local,
            Provider::Vfio(v) => SocketAddr::new(v.info.addr, ROCE_V2_UDP_PORT),
        }
    }

    /// Allocates a protection domain (ibv_alloc_pd).
    ///
    /// vfio provider: panics if ALLOC_PD fails (use [`Device::try_alloc_pd`] to get the
    /// error).
    pub fn alloc_pd(&self) -> ProtectionDomain {
        match self.try_alloc_pd() {
            Ok(pd) => pd,
            Err(e) => panic!("ibv_alloc_pd on {}: {e}", self.name()),
        }
    }

    /// Allocates a protection domain (ibv_alloc_pd).
    ///
    /// Errors: vfio provider: [`Error::Config`] when ALLOC_PD fails.
    pub fn try_alloc_pd(&self) -> Result<ProtectionDomain> {
        Ok(ProtectionDomain {
            kind: match &self.provider {
                Provider::Soft(d) => PdKind::Soft {
                    inner: Arc::new(PdInner::default()),
                    device: d.clone(),
                },
                Provider::Vfio(v) => PdKind::Vfio {
                    pd: v
                        .hca
                        .alloc_pd()
                        .map_err(crate::vfio_provider::convert::err)?,
                    dev: v.clone(),
                },
            },
        })
    }

    /// Creates a completion queue holding up to `capacity` entries (ibv_create_cq).
    ///
    /// vfio provider: panics if CREATE_CQ fails (use [`Device::try_create_cq`]).
    pub fn create_cq(&self, capacity: usize) -> CompletionQueue {
        match self.try_create_cq(capacity) {
            Ok(cq) => cq,
            Err(e) => panic!("ibv_create_cq on {}: {e}", self.name()),
        }
    }

    /// Creates a completion queue holding up to `capacity` entries (ibv_create_cq).
    ///
    /// Errors: vfio provider: [`Error::Config`] when CREATE_CQ fails.
    pub fn try_create_cq(&self, capacity: usize) -> Result<CompletionQueue> {
        Ok(CompletionQueue {
            kind: match &self.provider {
                Provider::Soft(d) => {
                    CqKind::Soft(Arc::new(CqInner::new(capacity.max(1), Arc::downgrade(d))))
                }
                Provider::Vfio(v) => CqKind::Vfio(
                    v.hca
                        .create_cq(capacity)
                        .map_err(crate::vfio_provider::convert::err)?,
                    capacity.max(1),
                ),
            },
        })
    }

    /// Drives the device on the caller's thread (soft provider): receives and processes the
    /// packets its socket holds and runs due timers; with `wait`, blocks up to that long for a
    /// packet when none is queued. Polling a CQ does this already; call it when waiting on
    /// memory instead (the passive side of an RDMA WRITE). Returns the packets processed.
    /// vfio provider: the NIC needs no driving; returns 0 at once.
    pub fn progress(&self, wait: Option<std::time::Duration>) -> usize {
        match &self.provider {
            Provider::Soft(d) => d.progress(wait),
            Provider::Vfio(_) => 0,
        }
    }

    /// Device-wide packet counters (vfio provider: all zero; see the device's own counters).
    pub fn counters(&self) -> crate::soft::DeviceCounters {
        match &self.provider {
            Provider::Soft(d) => crate::soft::DeviceCounters {
                impair: d.impair_counters(),
                ..d.counters.snapshot()
            },
            Provider::Vfio(_) => crate::soft::DeviceCounters::default(),
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
