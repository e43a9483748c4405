//! Opening a device through the vfio provider: a real function by PCI BDF (VFIO system layer
//! `rdmesh_vfio::sys`, then the mlx5 bring-up), or a device model; the GID entry and the
//! neighbour table (peer IP → MAC) the provider keeps.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use rdmesh_vfio::mlx5::{gid_of, DriverConfig, Hca};
use rdmesh_vfio::model::ModelDevice;
use rdmesh_vfio::seam::{DmaAllocator, Interrupt, Mmio};
use rdmesh_vfio::sys::{Container, PciAddress, VfioDma, VfioDmaConfig, VfioPciDevice};

use super::convert::err;
use crate::error::{Error, Result};
use crate::verbs::DeviceInfo;

/// How to open a device through the vfio provider.
#[derive(Debug, Clone)]
pub struct VfioConfig {
    /// The local address: programmed as GID index 0 (SET_ROCE_ADDRESS, RoCEv2) and used as
    /// the source IP of every packet.
    pub addr: IpAddr,
    /// Port number (1-based).
    pub port: u8,
    /// Time limits and the device name in messages (the BDF by default).
    pub driver: Option<DriverConfig>,
}

impl VfioConfig {
    /// Defaults for `addr`: port 1, the driver's default limits.
    pub fn new(addr: IpAddr) -> VfioConfig {
        VfioConfig {
            addr,
            port: 1,
            driver: None,
        }
    }
}

/// How to open a device model on a real link (`--provider model`): an mlx5 device model in
/// this process whose port sends and receives through a UDP socket (see
/// [`crate::vfio_provider`]).
#[derive(Debug, Clone)]
pub struct ModelPortConfig {
    /// The local address: the GID, and the address the port's UDP socket binds.
    pub addr: IpAddr,
    /// UDP port: 4791 by default, 0 for an ephemeral one (rdmesh peers learn it out of band).
    pub udp_port: u16,
    /// Receive through a raw socket that shows the real IPv4 header (peers such as rxe that
    /// put a non-zero IP ID on their packets); root or `CAP_NET_RAW`.
    pub raw_receive: bool,
    /// The port's MAC; `None`: `02:00:` and the last four bytes of the address (unique per
    /// address, locally administered).
    pub mac: Option<[u8; 6]>,
    /// The model's fault knobs (`ce_mark_every`, `link_down`, ...).
    pub faults: rdmesh_vfio::model::ModelFaults,
}

impl ModelPortConfig {
    /// Defaults for `addr`: UDP port 4791, UDP receive path, MAC from the address, no faults.
    pub fn new(addr: IpAddr) -> ModelPortConfig {
        ModelPortConfig {
            addr,
            udp_port: crate::verbs::ROCE_V2_UDP_PORT,
            raw_receive: false,
            mac: None,
            faults: Default::default(),
        }
    }

    /// The MAC the port gets.
    pub fn port_mac(&self) -> [u8; 6] {
        self.mac.unwrap_or_else(|| {
            let o = match self.addr {
                IpAddr::V4(v4) => v4.octets(),
                IpAddr::V6(v6) => {
                    let b = v6.octets();
                    [b[12], b[13], b[14], b[15]]
                }
            };
            [0x02, 0x00, o[0], o[1], o[2], o[3]]
        })
    }
}

/// An open function: the device, BAR0, DMA memory.
pub(crate) type PciParts = (Arc<VfioPciDevice>, Arc<dyn Mmio>, Arc<dyn DmaAllocator>);

/// The VFIO side of a function at `bdf`, without the mlx5 bring-up: the device (group,
/// container), BAR0 mapped with bus mastering on, and IOMMU-mapped DMA memory
/// (`rdmesh doctor --probe` uses these alone).
///
/// Errors: [`Error::Config`] naming the BDF and what to check.
pub(crate) fn open_pci_parts(bdf: &str) -> Result<PciParts> {
    let sys = |e: rdmesh_vfio::sys::SysError| Error::Config(format!("vfio {bdf}: {e}"));
    let addr = PciAddress::parse(bdf).map_err(sys)?;
    let container = Container::open().map_err(sys)?;
    let dev = VfioPciDevice::open(&container, addr).map_err(sys)?;
    let bar: Arc<dyn Mmio> = Arc::new(dev.map_bar(0).map_err(sys)?);
    dev.enable_bus_master().map_err(sys)?;
    let dma: Arc<dyn DmaAllocator> =
        Arc::new(VfioDma::new(container, VfioDmaConfig::default()).map_err(sys)?);
    Ok((dev, bar, dma))
}

/// An open vfio-provider device.
pub(crate) struct VfioDevice {
    pub(crate) hca: Hca,
    pub(crate) info: DeviceInfo,
    pub(crate) port: u8,
    neighbors: Mutex<HashMap<IpAddr, [u8; 6]>>,
    /// What keeps the VFIO device (fd, BAR mapping) open, for a real device.
    _sys: Option<Arc<VfioPciDevice>>,
    /// The device model behind a model-backed device, and its port on the link.
    pub(crate) model: Option<(ModelDevice, Option<super::udp_port::UdpPort>)>,
    /// The QPs made on this device, as `rdmesh stats` shows them.
    pub(crate) qp_stats: super::stats::QpStats,
    /// The `rdmesh stats` publisher.
    stats: Mutex<Option<super::stats::StatsThread>>,
}

impl Drop for VfioDevice {
    fn drop(&mut self) {
        // The publisher first: it reads the device until it stops.
        drop(
            self.stats
                .get_mut()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }
}

impl std::fmt::Debug for VfioDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioDevice")
            .field("info", &self.info)
            .field("hca", &self.hca)
            .finish()
    }
}

impl VfioDevice {
    fn open_with(
        name: String,
        mmio: Arc<dyn Mmio>,
        dma: Arc<dyn DmaAllocator>,
        irq: Arc<dyn Interrupt>,
        cfg: VfioConfig,
        sys: Option<Arc<VfioPciDevice>>,
        model: bool,
    ) -> Result<Arc<VfioDevice>> {
        let driver = cfg.driver.clone().unwrap_or_else(|| {
            if model {
                DriverConfig::for_model(name.clone())
            } else {
                DriverConfig::new(name.clone())
            }
        });
        let hca = Hca::bring_up(mmio, dma, irq, driver).map_err(err)?;
        hca.set_gid(cfg.port, 0, gid_of(cfg.addr), None, None)
            .map_err(err)?;
        Ok(Arc::new(VfioDevice {
            info: DeviceInfo {
                name: format!("mlx5_vfio_{name}"),
                provider: "vfio",
                netdev: name,
                addr: cfg.addr,
                // The port's MTU from PMTU (hardware MTU − 22), as a netdev would have it;
                // 4200 (path MTU 4096) when the function cannot read the register.
                netdev_mtu: hca.info().port.and_then(|p| p.eth_mtu()).unwrap_or(4200),
            },
            hca,
            port: cfg.port,
            neighbors: Mutex::new(HashMap::new()),
            _sys: sys,
            model: None,
            qp_stats: Default::default(),
            stats: Mutex::new(None),
        }))
    }

    /// Starts the `rdmesh stats` publisher.
    fn publish(dev: Arc<VfioDevice>) -> Arc<VfioDevice> {
        let src = super::stats::Source {
            provider: dev.info.provider,
            device: dev.info.name.clone(),
            netdev: dev.info.netdev.clone(),
            local: dev.local_addr(),
            port: dev.port,
            reader: dev.hca.counter_reader(),
            qps: dev.qp_stats.clone(),
            link: match &dev.model {
                Some((_, Some(p))) => Some(p.counters()),
                _ => None,
            },
        };
        *dev.stats.lock().unwrap_or_else(|p| p.into_inner()) =
            super::stats::StatsThread::start(src);
        dev
    }

    /// Records a QP made on this device for `rdmesh stats`.
    pub(crate) fn register_qp(&self, stat: &Arc<super::stats::QpStat>) {
        let mut v = self.qp_stats.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|w| w.strong_count() > 0);
        v.push(Arc::downgrade(stat));
    }

    /// Opens the function at `bdf` (e.g. `0000:01:00.0`) bound to vfio-pci.
    pub(crate) fn open_pci(bdf: &str, cfg: VfioConfig) -> Result<Arc<VfioDevice>> {
        let sys = |e: rdmesh_vfio::sys::SysError| Error::Config(format!("vfio {bdf}: {e}"));
        let (dev, bar, dma) = open_pci_parts(bdf)?;
        let irq: Arc<dyn Interrupt> = Arc::new(dev.enable_vector0().map_err(sys)?);
        VfioDevice::open_with(bdf.to_string(), bar, dma, irq, cfg, Some(dev), false)
            .map(VfioDevice::publish)
    }

    /// Opens a device model (tests, research).
    pub(crate) fn open_model(
        model: &ModelDevice,
        name: &str,
        cfg: VfioConfig,
    ) -> Result<Arc<VfioDevice>> {
        VfioDevice::open_with(
            name.to_string(),
            model.mmio(),
            model.dma(),
            model.interrupt(),
            cfg,
            None,
            true,
        )
    }

    /// Opens a device model whose port is a UDP socket on `cfg.addr` (`--provider model`).
    ///
    /// Errors: [`Error::Bind`] when the UDP port is taken; [`Error::Config`] when the
    /// bring-up fails.
    pub(crate) fn open_model_port(cfg: &ModelPortConfig) -> Result<Arc<VfioDevice>> {
        let mac = cfg.port_mac();
        let model = ModelDevice::new(rdmesh_vfio::model::ModelConfig {
            mac,
            ..Default::default()
        });
        model.set_faults(cfg.faults);
        let name = format!("model_{}", cfg.addr);
        let port = super::udp_port::UdpPort::open(
            &model,
            &name,
            cfg.addr,
            cfg.udp_port,
            mac,
            cfg.raw_receive,
        )?;
        // Several models may share an address (ephemeral ports): the port tells them apart.
        let bound = port.local_addr().port();
        let name = if bound == crate::verbs::ROCE_V2_UDP_PORT {
            name
        } else {
            format!("{name}:{bound}")
        };
        let dev = VfioDevice::open_with(
            name,
            model.mmio(),
            model.dma(),
            model.interrupt(),
            VfioConfig::new(cfg.addr),
            None,
            true,
        )?;
        let mut dev = Arc::try_unwrap(dev).map_err(|_| {
            Error::Config("model device: the device was shared during bring-up".into())
        })?;
        dev.info.provider = "model";
        dev.model = Some((model, Some(port)));
        Ok(VfioDevice::publish(Arc::new(dev)))
    }

    /// The UDP address peers send to: the model port's socket, or the GID address and 4791.
    pub(crate) fn local_addr(&self) -> std::net::SocketAddr {
        match &self.model {
            Some((_, Some(p))) => p.local_addr(),
            _ => std::net::SocketAddr::new(self.info.addr, crate::verbs::ROCE_V2_UDP_PORT),
        }
    }

    /// A model port: frames for QP `qpn` at `ip` go to UDP port `port` (hardware always
    /// sends to 4791; rdmesh peers may listen elsewhere).
    pub(crate) fn learn_peer_port(&self, ip: IpAddr, qpn: u32, port: u16) {
        if let Some((_, Some(p))) = &self.model {
            p.learn_peer_port(ip, qpn, port);
        }
    }

    /// Records the MAC of the peer at `ip`.
    pub(crate) fn set_neighbor(&self, ip: IpAddr, mac: [u8; 6]) {
        self.neighbors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ip, mac);
    }

    /// The MAC of the peer at `ip`.
    pub(crate) fn neighbor(&self, ip: IpAddr) -> Result<[u8; 6]> {
        self.neighbors
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&ip)
            .copied()
            .ok_or_else(|| {
                Error::Config(format!(
                    "{}: no MAC known for peer {ip}: under VFIO there is no kernel ARP; call \
                     Device::set_neighbor({ip}, <peer MAC>) first",
                    self.info.name
                ))
            })
    }
}
