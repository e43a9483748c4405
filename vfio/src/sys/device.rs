//! A PCI function opened through VFIO: its group joins the container, the device fd gives
//! region info, config space (pread/pwrite), BAR mmaps and interrupts.

use std::fs::File;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX};
use vfio_ioctls::{VfioDevice, VfioError};

use super::bar::BarMmio;
use super::container::{check_node, Container};
use super::error::{Result, SysError};
use super::irq::{EventFdInterrupt, IrqKind};
use super::pci_config;
use super::region::{RegionInfo, CONFIG};
use super::sysfs::{PciAddress, SysfsPci};

/// An open VFIO PCI device. Shared (`Arc`) by its BAR mappings and interrupts, which keep it
/// open.
pub struct VfioPciDevice {
    // Field order is drop order: our duplicate of the device fd closes before `device` puts
    // its group (which fails with EBUSY while any fd of the device is open).
    file: File,
    device: VfioDevice,
    container: Arc<Container>,
    bdf: PciAddress,
    group: u32,
}

impl std::fmt::Debug for VfioPciDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPciDevice")
            .field("bdf", &self.bdf.to_string())
            .field("group", &self.group)
            .finish()
    }
}

impl VfioPciDevice {
    /// Opens PCI function `bdf` (bound to vfio-pci) into `container`: checks sysfs (the
    /// function, its IOMMU group, its driver), opens `/dev/vfio/<group>`, checks that the group
    /// is viable, joins it to the container (setting the type1 v2 IOMMU on the first group) and
    /// gets the device fd (`VFIO_GROUP_GET_DEVICE_FD`).
    ///
    /// Errors: [`SysError::NoDevice`], [`SysError::NoIommuGroup`], [`SysError::NotVfioPci`],
    /// [`SysError::NodeMissing`], [`SysError::PermissionDenied`], [`SysError::Busy`],
    /// [`SysError::Vfio`] (a group that is not viable names its other members).
    pub fn open(container: &Arc<Container>, bdf: PciAddress) -> Result<Arc<VfioPciDevice>> {
        Self::open_in(&SysfsPci::default(), container, bdf)
    }

    /// [`open`](Self::open) with sysfs lookups under another root (the device node and ioctls
    /// are always the real ones).
    pub fn open_in(
        sysfs: &SysfsPci,
        container: &Arc<Container>,
        bdf: PciAddress,
    ) -> Result<Arc<VfioPciDevice>> {
        let group = sysfs.check_vfio_bound(bdf)?;
        let node = PathBuf::from(format!("/dev/vfio/{group}"));
        check_node(
            &node,
            &format!("{bdf} is in IOMMU group {group} but its node is missing — is vfio-pci loaded and the device bound to it?"),
        )?;
        let dir = sysfs.device_dir(bdf);
        let device = VfioDevice::new(&dir, container.vfio(), false).map_err(|source| {
            let context = match source {
                VfioError::GroupViable => {
                    let members: Vec<String> = sysfs
                        .group_members(group)
                        .into_iter()
                        .map(|m| {
                            format!("{m} ({})", sysfs.driver(m).unwrap_or_else(|| "no driver".into()))
                        })
                        .collect();
                    format!(
                        "{} (PCI device {bdf}) is not viable: every member of IOMMU group {group} must be bound to vfio-pci or to no driver; members: {}",
                        node.display(),
                        members.join(", ")
                    )
                }
                _ => format!("opening PCI device {bdf} through {}", node.display()),
            };
            SysError::Vfio { context, source }
        })?;
        // SAFETY: `device` owns this fd and outlives the borrow; we only duplicate it.
        let fd = unsafe { BorrowedFd::borrow_raw(device.as_raw_fd()) };
        let file = File::from(fd.try_clone_to_owned().map_err(|source| SysError::Io {
            context: format!("duplicating the VFIO fd of {bdf}"),
            source,
        })?);
        Ok(Arc::new(VfioPciDevice {
            file,
            device,
            container: container.clone(),
            bdf,
            group,
        }))
    }

    /// PCI address.
    pub fn bdf(&self) -> PciAddress {
        self.bdf
    }

    /// IOMMU group number.
    pub fn group(&self) -> u32 {
        self.group
    }

    /// The container the device's group joined.
    pub fn container(&self) -> &Arc<Container> {
        &self.container
    }

    /// Region `index` (`VFIO_DEVICE_GET_REGION_INFO`, read at open), with its sparse-mmap areas.
    pub fn region(&self, index: u32) -> RegionInfo {
        RegionInfo::new(
            index,
            self.device.get_region_size(index),
            self.device.get_region_offset(index),
            self.device.get_region_flags(index),
            &self.device.get_region_caps(index),
        )
    }

    fn config_io(&self, offset: u64, len: usize) -> Result<u64> {
        let r = self.region(CONFIG);
        if r.size == 0 || offset + len as u64 > r.size {
            return Err(SysError::Region {
                bdf: self.bdf.to_string(),
                index: CONFIG,
                reason: format!(
                    "config access of {len} bytes at {offset:#x} outside the {}-byte config space",
                    r.size
                ),
            });
        }
        Ok(r.offset + offset)
    }

    /// Reads `out.len()` bytes of PCI config space at `offset` (pread on the config region).
    ///
    /// Errors: [`SysError::Region`], [`SysError::Io`].
    pub fn config_read(&self, offset: u64, out: &mut [u8]) -> Result<()> {
        let at = self.config_io(offset, out.len())?;
        self.file
            .read_exact_at(out, at)
            .map_err(|source| SysError::Io {
                context: format!("reading config space of {} at {offset:#x}", self.bdf),
                source,
            })
    }

    /// Writes `data` to PCI config space at `offset` (pwrite; vfio-pci filters what a user may
    /// change).
    ///
    /// Errors: [`SysError::Region`], [`SysError::Io`].
    pub fn config_write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.config_io(offset, data.len())?;
        self.file
            .write_all_at(data, at)
            .map_err(|source| SysError::Io {
                context: format!("writing config space of {} at {offset:#x}", self.bdf),
                source,
            })
    }

    /// A little-endian 16-bit config register.
    pub fn config_read16(&self, offset: u64) -> Result<u16> {
        let mut b = [0u8; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Vendor and device ID (config 0x00, 0x02).
    pub fn ids(&self) -> Result<(u16, u16)> {
        Ok((
            self.config_read16(pci_config::VENDOR_ID)?,
            self.config_read16(pci_config::DEVICE_ID)?,
        ))
    }

    /// Sets Memory Space and Bus Master in the PCI command register (config 0x04) — vfio-pci
    /// leaves bus mastering off — and returns the register read back.
    ///
    /// Errors: [`SysError::Io`], or [`SysError::Region`] when the bits do not stick.
    pub fn enable_bus_master(&self) -> Result<u16> {
        let cmd = self.config_read16(pci_config::COMMAND)?;
        let want = cmd | pci_config::COMMAND_MEMORY | pci_config::COMMAND_MASTER;
        self.config_write(pci_config::COMMAND, &want.to_le_bytes())?;
        let got = self.config_read16(pci_config::COMMAND)?;
        let need = pci_config::COMMAND_MEMORY | pci_config::COMMAND_MASTER;
        if got & need != need {
            return Err(SysError::Region {
                bdf: self.bdf.to_string(),
                index: CONFIG,
                reason: format!("PCI command register reads {got:#06x} after writing {want:#06x}: memory space / bus master did not stick"),
            });
        }
        Ok(got)
    }

    /// Maps BAR `index` (0–5) for volatile register access. Only the mmappable areas are
    /// mapped (the whole BAR, or its sparse-mmap areas); accesses elsewhere are refused.
    ///
    /// Errors: [`SysError::Region`] (no such BAR, not mmappable), [`SysError::Io`] (mmap).
    pub fn map_bar(self: &Arc<Self>, index: u32) -> Result<BarMmio> {
        BarMmio::map(self.clone(), index)
    }

    /// The fd regions are read and mapped through.
    pub(crate) fn fd(&self) -> &File {
        &self.file
    }

    /// Routes interrupt vector 0 to a new eventfd: MSI-X when the device has it, else MSI
    /// (`VFIO_DEVICE_SET_IRQS` with `DATA_EVENTFD | ACTION_TRIGGER`; the kernel enables the
    /// capability in config space). Disabled again when the returned value drops.
    ///
    /// Errors: [`SysError::Irq`] (no MSI/MSI-X, the ioctl failed), [`SysError::Io`] (eventfd).
    pub fn enable_vector0(self: &Arc<Self>) -> Result<EventFdInterrupt> {
        let count = |i: u32| self.device.get_irq_info(i).map_or(0, |q| q.count);
        let kind = if count(VFIO_PCI_MSIX_IRQ_INDEX) > 0 {
            IrqKind::Msix
        } else if count(VFIO_PCI_MSI_IRQ_INDEX) > 0 {
            IrqKind::Msi
        } else {
            return Err(SysError::Irq {
                bdf: self.bdf.to_string(),
                reason: "the device offers neither MSI-X nor MSI through VFIO".into(),
            });
        };
        EventFdInterrupt::enable(self.clone(), kind)
    }

    /// The `vfio-ioctls` device.
    pub(crate) fn vfio(&self) -> &VfioDevice {
        &self.device
    }
}
