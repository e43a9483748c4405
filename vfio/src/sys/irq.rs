//! Interrupt vector 0 delivered to an eventfd (`VFIO_DEVICE_SET_IRQS`), as a
//! [`seam::Interrupt`](crate::seam::Interrupt).

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use vfio_bindings::bindings::vfio::{VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX};
use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};

use super::device::VfioPciDevice;
use super::error::{Result, SysError};
use crate::seam::Interrupt;

/// Which interrupt mechanism carries vector 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqKind {
    /// MSI-X (`VFIO_PCI_MSIX_IRQ_INDEX`).
    Msix,
    /// MSI (`VFIO_PCI_MSI_IRQ_INDEX`).
    Msi,
}

impl IrqKind {
    fn index(self) -> u32 {
        match self {
            IrqKind::Msix => VFIO_PCI_MSIX_IRQ_INDEX,
            IrqKind::Msi => VFIO_PCI_MSI_IRQ_INDEX,
        }
    }
}

/// Vector 0 of a device, signalled on an eventfd. Disables the interrupt on drop.
pub struct EventFdInterrupt {
    event: EventFd,
    device: Arc<VfioPciDevice>,
    kind: IrqKind,
}

impl std::fmt::Debug for EventFdInterrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventFdInterrupt")
            .field("bdf", &self.device.bdf().to_string())
            .field("kind", &self.kind)
            .finish()
    }
}

impl EventFdInterrupt {
    pub(crate) fn enable(device: Arc<VfioPciDevice>, kind: IrqKind) -> Result<EventFdInterrupt> {
        let event = EventFd::new(EFD_NONBLOCK).map_err(|source| SysError::Io {
            context: format!("creating an eventfd for {}", device.bdf()),
            source,
        })?;
        device
            .vfio()
            .enable_irq(kind.index(), vec![&event])
            .map_err(|e| SysError::Irq {
                bdf: device.bdf().to_string(),
                reason: format!("VFIO_DEVICE_SET_IRQS ({kind:?} vector 0 → eventfd): {e}"),
            })?;
        Ok(EventFdInterrupt {
            event,
            device,
            kind,
        })
    }

    /// MSI-X or MSI.
    pub fn kind(&self) -> IrqKind {
        self.kind
    }

    /// Consumes pending interrupts without waiting; returns how many arrived (the eventfd
    /// counter).
    pub fn take(&self) -> u64 {
        self.event.read().unwrap_or(0)
    }
}

impl Interrupt for EventFdInterrupt {
    fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.take() > 0 {
                return true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let mut p = libc::pollfd {
                fd: self.event.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
            // SAFETY: one valid pollfd on our own open eventfd.
            unsafe { libc::poll(&mut p, 1, ms) };
        }
    }
}

impl Drop for EventFdInterrupt {
    fn drop(&mut self) {
        if let Err(e) = self.device.vfio().disable_irq(self.kind.index()) {
            tracing::warn!("{}: disabling {:?}: {e}", self.device.bdf(), self.kind);
        }
    }
}
