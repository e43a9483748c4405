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

/// An open vfio-provider device.
pub(crate) struct VfioDevice {
    pub(crate) hca: Hca,
    pub(crate) info: DeviceInfo,
    pub(crate) port: u8,
    neighbors: Mutex<HashMap<IpAddr, [u8; 6]>>,
    /// What keeps the VFIO device (fd, BAR mapping) open, for a real device.
    _sys: Option<Arc<VfioPciDevice>>,
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
                netdev_mtu: 4200,
            },
            hca,
            port: cfg.port,
            neighbors: Mutex::new(HashMap::new()),
            _sys: sys,
        }))
    }

    /// Opens the function at `bdf` (e.g. `0000:01:00.0`) bound to vfio-pci.
    pub(crate) fn open_pci(bdf: &str, cfg: VfioConfig) -> Result<Arc<VfioDevice>> {
        let sys = |e: rdmesh_vfio::sys::SysError| Error::Config(format!("vfio {bdf}: {e}"));
        let addr = PciAddress::parse(bdf).map_err(sys)?;
        let container = Container::open().map_err(sys)?;
        let dev = VfioPciDevice::open(&container, addr).map_err(sys)?;
        let bar: Arc<dyn Mmio> = Arc::new(dev.map_bar(0).map_err(sys)?);
        dev.enable_bus_master().map_err(sys)?;
        let irq: Arc<dyn Interrupt> = Arc::new(dev.enable_vector0().map_err(sys)?);
        let dma: Arc<dyn DmaAllocator> =
            Arc::new(VfioDma::new(container, VfioDmaConfig::default()).map_err(sys)?);
        VfioDevice::open_with(bdf.to_string(), bar, dma, irq, cfg, Some(dev), false)
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
