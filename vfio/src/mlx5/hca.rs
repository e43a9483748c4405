//! [`Hca`]: one brought-up mlx5 function — the shared state every object (PD, MR, CQ, QP)
//! holds, and the teardown that runs when the last of them is gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use rdmesh_core::mlx5::cmd::{HcaCap, RoceCap};

use super::hw::Hw;
use super::qp::QpQueues;
use super::DriverConfig;
use crate::seam::{DmaAllocator, Interrupt, Mmio};

/// What bring-up learnt and allocated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HcaInfo {
    /// Firmware version (major, minor, subminor).
    pub fw: (u16, u16, u16),
    /// General capabilities in effect after SET_HCA_CAP.
    pub caps: HcaCap,
    /// RoCE capabilities, when the device has them.
    pub roce: Option<RoceCap>,
    /// The UAR shared by the async EQ, the CQs and the QPs (index; BAR0 + uar·4096).
    pub uar: u32,
    /// The async EQ number (also the completion EQ of every CQ).
    pub eqn: u8,
    /// The port's permanent MAC (QUERY_NIC_VPORT_CONTEXT).
    pub mac: [u8; 6],
    /// Boot + init pages lent during bring-up.
    pub startup_pages: usize,
}

/// Shared state of one device.
pub struct HcaInner {
    pub(crate) cfg: DriverConfig,
    pub(crate) hw: Mutex<Hw>,
    pub(crate) mmio: Arc<dyn Mmio>,
    pub(crate) dma: Arc<dyn DmaAllocator>,
    pub(crate) _irq: Arc<dyn Interrupt>,
    pub(crate) info: HcaInfo,
    pub(crate) qps: Mutex<HashMap<u32, Arc<Mutex<QpQueues>>>>,
}

impl core::fmt::Debug for HcaInner {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Hca")
            .field("device", &self.cfg.name)
            .field("info", &self.info)
            .finish()
    }
}

impl HcaInner {
    /// Locks the command state (a poisoned lock is taken over: the state stays consistent
    /// because every command either completed or marked its slot stuck).
    pub(crate) fn hw(&self) -> MutexGuard<'_, Hw> {
        self.hw.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// BAR0 offset of the shared UAR page.
    pub(crate) fn uar_offset(&self) -> usize {
        self.info.uar as usize * 4096
    }
}

impl Drop for HcaInner {
    fn drop(&mut self) {
        let name = self.cfg.name.clone();
        let hw = self.hw.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = super::teardown::teardown(hw, &self.info) {
            tracing::warn!(device = %name, "teardown incomplete: {e}");
        }
    }
}

/// A brought-up mlx5 device (made by [`Hca::bring_up`]). Cloning gives another handle; the
/// device is torn down (reference order: DESTROY_EQ, DEALLOC_UAR, TEARDOWN_HCA, page reclaim,
/// DISABLE_HCA) when the last handle and every object made from it are dropped.
#[derive(Debug, Clone)]
pub struct Hca {
    pub(crate) inner: Arc<HcaInner>,
}

impl Hca {
    /// The device name (its PCI BDF for a real device).
    pub fn name(&self) -> &str {
        &self.inner.cfg.name
    }

    /// What bring-up found.
    pub fn info(&self) -> &HcaInfo {
        &self.inner.info
    }

    /// Every command opcode posted so far, in order.
    pub fn command_history(&self) -> Vec<rdmesh_core::mlx5::cmd::Opcode> {
        self.inner.hw().cmd.history().to_vec()
    }

    /// Command-interface counters.
    pub fn command_stats(&self) -> super::cmdif::CmdStats {
        self.inner.hw().cmd.stats().clone()
    }

    /// Pages currently lent to the firmware.
    pub fn pages_lent(&self) -> usize {
        self.inner.hw().pages.lent()
    }

    /// Samples the health counter now.
    ///
    /// # Errors
    /// [`super::DriverError::DeviceDead`].
    pub fn check_health(&self) -> super::Result<()> {
        self.inner.hw().cmd.check_health()
    }

    /// Polls the async EQ, services page requests, and returns the other events seen
    /// (port changes, CQ/QP errors).
    ///
    /// # Errors
    /// [`super::DriverError::Dma`], page-request command errors.
    pub fn poll_events(&self) -> super::Result<Vec<rdmesh_core::mlx5::cmd::EqeRepr>> {
        let mut hw = self.inner.hw();
        hw.poll_events()?;
        Ok(hw
            .eq
            .as_mut()
            .map(|eq| eq.take_events())
            .unwrap_or_default())
    }
}
