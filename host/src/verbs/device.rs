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
use crate::vfio_provider::{ModelPortConfig, VfioConfig, VfioDevice};

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
    /// Turns `impair` on and off while the device runs: while it holds `false` every packet
    /// passes the layer untouched (packets it already holds still leave when due). `None`
    /// (default): always on. `rdmesh bench --compare-loss-free` alternates impaired and clean
    /// periods on one connection with it, so that the loss-free reference runs in the same
    /// run, interleaved in time.
    pub impair_switch: Option<Arc<std::sync::atomic::AtomicBool>>,
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
            impair_switch: None,
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

    /// Opens an mlx5 device model whose port is a UDP socket on `config.addr` (see
    /// [`crate::vfio_provider`]): the vfio provider's driver and the model behind it, no
    /// hardware, real RoCEv2 on the wire. [`Device::provider`] is `model`.
    ///
    /// Errors: [`Error::Bind`] when the UDP port is taken or the address is not local;
    /// [`Error::Config`] when the bring-up fails.
    pub fn open_model(config: ModelPortConfig) -> Result<Device> {
        if config.addr.is_unspecified() {
            return Err(Error::Config(format!(
                "model device: {} is not an interface address; the ICRC covers the source address, so bind a concrete one",
                config.addr
            )));
        }
        Ok(Device {
            provider: Provider::Vfio(VfioDevice::open_model_port(&config)?),
        })
    }

    /// The provider's name: `soft`, `vfio`, or `model` (a device model on a UDP socket).
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

    /// The port MAC: vfio provider and model from QUERY_NIC_VPORT_CONTEXT; soft provider
    /// the MAC of the netdev it sends on (`/sys/class/net/<netdev>/address`; all zeros for
    /// loopback), `None` when it cannot be read. Peers of a vfio device need it for their
    /// address path (rdmesh carries it out of band and in the mesh handshake).
    pub fn mac(&self) -> Option<[u8; 6]> {
        match &self.provider {
            Provider::Soft(d) => netdev_mac(&d.info.netdev),
            Provider::Vfio(v) => Some(v.hca.info().mac),
        }
    }

    /// The device model behind a model-backed device ([`Device::open_model`]), for tests and
    /// diagnosis (pages it holds, its counters, its fault knobs); `None` otherwise.
    pub fn model(&self) -> Option<rdmesh_vfio::model::ModelDevice> {
        match &self.provider {
            Provider::Vfio(v) => v.model.as_ref().map(|(m, _)| m.clone()),
            Provider::Soft(_) => None,
        }
    }

    /// vfio provider and model: why the device is dead (fatal health, the syndrome named), or
    /// `None` while it lives (and always for the soft provider).
    pub fn fatal_error(&self) -> Option<String> {
        match &self.provider {
            Provider::Vfio(v) => v.hca.fatal().map(|e| e.to_string()),
            Provider::Soft(_) => None,
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
            Provider::Vfio(v) => v.local_addr(),
        }
    }

    /// Allocates a protection domain (ibv_alloc_pd).
    ///
    /// Errors: vfio provider: [`Error::Config`] when ALLOC_PD fails (the message names the
    /// device and the firmware status); the soft provider never fails.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain> {
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
    /// Errors: vfio provider: [`Error::Config`] when CREATE_CQ fails or `capacity` exceeds
    /// the device's CQ size; the soft provider never fails.
    pub fn create_cq(&self, capacity: usize) -> Result<CompletionQueue> {
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

    /// Whether `self` and `other` are handles to the same open device.
    pub fn same_device(&self, other: &Device) -> bool {
        match (&self.provider, &other.provider) {
            (Provider::Soft(a), Provider::Soft(b)) => Arc::ptr_eq(a, b),
            (Provider::Vfio(a), Provider::Vfio(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Each device of `devices` once (handles to the same open device count once), in first
    /// appearance order.
    pub(crate) fn distinct<'a>(devices: impl IntoIterator<Item = &'a Device>) -> Vec<&'a Device> {
        let mut out: Vec<&Device> = Vec::new();
        for d in devices {
            if !out.iter().any(|x| x.same_device(d)) {
                out.push(d);
            }
        }
        out
    }

    /// Drives the device on the caller's thread (soft provider): receives and processes the
    /// packets its socket holds and runs due timers; with `wait`, blocks up to that long for a
    /// packet when none is queued. Polling a CQ does this already; call it when waiting on
    /// memory instead (the passive side of an RDMA WRITE). Returns the packets processed.
    /// vfio provider: the NIC needs no driving; returns 0 (after yielding the CPU when asked to
    /// wait).
    pub fn progress(&self, wait: Option<std::time::Duration>) -> usize {
        match &self.provider {
            Provider::Soft(d) => d.progress(wait),
            Provider::Vfio(_) => {
                // Nothing to drive; a waiting caller still lets the device's threads (the
                // model's, on a small machine) run.
                if wait.is_some() {
                    std::thread::yield_now();
                }
                0
            }
        }
    }

    /// Whether [`Device::socket_wait`] can wait for this device's work: a soft device that
    /// receives on its UDP socket. Not a vfio device (its completions come with no socket to
    /// wait on), nor a soft device receiving through the raw socket (its progress thread alone
    /// receives there).
    pub(crate) fn waitable(&self) -> bool {
        match &self.provider {
            Provider::Soft(d) => d.waitable(),
            Provider::Vfio(_) => false,
        }
    }

    /// Soft provider: starts a wait on the device's socket by a thread that polls it together
    /// with other file descriptors (a mesh progress shard with nothing to do). Until the
    /// returned wait drops, the caller holds the device's receive: its progress thread leaves
    /// the queued datagrams to the caller and runs only the timers that fall due. Drop it and
    /// drive the device with [`Device::progress`] once the poll returns. `None`: another thread is receiving, or the
    /// provider has no socket to wait on (vfio: the NIC needs no driving).
    pub(crate) fn socket_wait(&self) -> Option<crate::soft::SocketWait<'_>> {
        match &self.provider {
            Provider::Soft(d) => d.socket_wait(),
            Provider::Vfio(_) => None,
        }
    }

    /// Soft provider: receive bursts that processed packets so far, on any thread, counted as
    /// each ends, after its completions were pushed and its data placed: the same count before
    /// a thread polls its CQs (or reads a region) and once it holds [`Device::socket_wait`]
    /// (or at its next look) means no completion and no data came meanwhile.
    /// vfio provider: 0.
    pub(crate) fn rx_bursts(&self) -> u64 {
        match &self.provider {
            Provider::Soft(d) => d.rx_bursts(),
            Provider::Vfio(_) => 0,
        }
    }

    /// Device-wide packet counters. vfio provider and model: from the device's own
    /// counters (QUERY_VPORT_COUNTER, QUERY_CONG_STATISTICS; see [`Device::hw_counters`]):
    /// RoCE packets each way, packets received with errors as `malformed`, CNPs handled as
    /// `cnp_received`; all zero when the device cannot be queried.
    pub fn counters(&self) -> crate::soft::DeviceCounters {
        match &self.provider {
            Provider::Soft(d) => crate::soft::DeviceCounters {
                impair: d.impair_counters(),
                ..d.counters.snapshot()
            },
            Provider::Vfio(v) => match v.hca.port_counters(v.port) {
                Ok(p) => crate::soft::DeviceCounters {
                    tx_packets: p.tx_packets,
                    rx_packets: p.rx_packets,
                    malformed: p.rx_errors,
                    cnp_received: p.rp_cnp_handled + p.rp_cnp_ignored,
                    ..Default::default()
                },
                Err(e) => {
                    tracing::debug!(device = %v.info.name, "reading the port counters: {e}");
                    crate::soft::DeviceCounters::default()
                }
            },
        }
    }

    /// The device's own port counters as `(name, value)` pairs under their Linux names
    /// (vfio provider and model: `tx_packets`, `tx_bytes`, `rx_packets`, `rx_bytes`,
    /// `rx_errors` from QUERY_VPORT_COUNTER; `rp_cnp_handled`, `rp_cnp_ignored`,
    /// `np_ecn_marked_roce_packets`, `np_cnp_sent` from QUERY_CONG_STATISTICS). The soft
    /// provider has no device counters of this kind: an empty list (see
    /// [`Device::counters`]).
    ///
    /// Errors: vfio provider: [`Error::Config`] when a counter command fails.
    pub fn hw_counters(&self) -> Result<Vec<(&'static str, u64)>> {
        match &self.provider {
            Provider::Soft(_) => Ok(Vec::new()),
            Provider::Vfio(v) => Ok(v
                .hca
                .port_counters(v.port)
                .map_err(crate::vfio_provider::convert::err)?
                .named()),
        }
    }
}

/// The MAC of netdev `name` from sysfs (`address`), when it reads as six hex octets.
fn netdev_mac(name: &str) -> Option<[u8; 6]> {
    let text = std::fs::read_to_string(format!("/sys/class/net/{name}/address")).ok()?;
    parse_mac(text.trim())
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut out = [0u8; 6];
    let mut parts = s.split(':');
    for o in out.iter_mut() {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *o = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(out)
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
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
