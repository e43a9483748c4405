//! [`Hca`]: one brought-up mlx5 function — the shared state every object (PD, MR, CQ, QP)
//! holds, and the teardown that runs when the last of them is gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rdmesh_core::mlx5::cmd::{EqeRepr, EventType, HcaCap, RoceCap};

use super::events::{EventState, EventThread};
use super::hw::Hw;
use super::qp::QpQueues;
use super::{DriverConfig, DriverError};
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
    /// Port 1 as PAOS and PMTU show it, when the device lets the function read them.
    pub port: Option<super::bringup::PortInfo>,
}

/// What the event thread shares with the device: the command state, the event state and
/// the dead flag. The thread holds this, never the device itself, so the last user handle
/// always runs the teardown (after stopping the thread).
pub(crate) struct Core {
    pub(crate) name: String,
    pub(crate) hw: Mutex<Hw>,
    /// What the async events said ([`super::events`]).
    pub(crate) events: Mutex<EventState>,
    /// Set once the firmware is declared dead (fatal health).
    pub(crate) dead: AtomicBool,
}

impl Core {
    pub(crate) fn new(name: String, hw: Hw) -> Core {
        Core {
            name,
            hw: Mutex::new(hw),
            events: Mutex::new(Default::default()),
            dead: AtomicBool::new(false),
        }
    }

    /// Locks the command state (a poisoned lock is taken over: the state stays consistent
    /// because every command either completed or marked its slot stuck).
    pub(crate) fn hw(&self) -> MutexGuard<'_, Hw> {
        self.hw.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The event state.
    pub(crate) fn events(&self) -> MutexGuard<'_, EventState> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Why the device is dead, when it is.
    pub(crate) fn fatal(&self) -> Option<DriverError> {
        if !self.dead.load(Ordering::Acquire) {
            return None;
        }
        self.events().fatal.clone()
    }

    /// Drains the async EQ: page requests serviced (MANAGE_PAGES), other events recorded.
    pub(crate) fn service_events(&self) {
        let (events, requests, r) = {
            let mut hw = self.hw();
            let before = hw.page_requests_serviced;
            let r = hw.poll_events();
            let evs = hw
                .eq
                .as_mut()
                .map(|eq| eq.take_events())
                .unwrap_or_default();
            (evs, hw.page_requests_serviced - before, r)
        };
        let mut st = self.events();
        st.page_requests += requests;
        st.handled += requests;
        for ev in events {
            if let EqeRepr::Other {
                event: EventType::InternalError,
                ..
            } = ev
            {
                tracing::error!(device = %self.name, "internal error event from the device");
            }
            st.note(ev);
        }
        drop(st);
        if let Err(e) = r {
            self.note_error(e);
        }
    }

    /// Samples the health counter; a dead device is recorded.
    pub(crate) fn sample_health(&self) {
        let r = self.hw().cmd.check_health();
        if let Err(e) = r {
            self.note_error(e);
        }
    }

    /// Records a device-level failure: a dead device stops everything.
    pub(crate) fn note_error(&self, e: DriverError) {
        match e {
            DriverError::DeviceDead { .. } => {
                let mut st = self.events();
                if st.fatal.is_none() {
                    tracing::error!(device = %self.name, "{e}");
                    st.fatal = Some(e);
                }
                drop(st);
                self.dead.store(true, Ordering::Release);
            }
            DriverError::Closed { .. } => {}
            e => tracing::warn!(device = %self.name, "servicing events: {e}"),
        }
    }
}

/// Shared state of one device.
pub struct HcaInner {
    pub(crate) cfg: DriverConfig,
    pub(crate) core: Arc<Core>,
    pub(crate) mmio: Arc<dyn Mmio>,
    pub(crate) dma: Arc<dyn DmaAllocator>,
    pub(crate) _irq: Arc<dyn Interrupt>,
    pub(crate) info: HcaInfo,
    pub(crate) qps: Mutex<HashMap<u32, Arc<Mutex<QpQueues>>>>,
    /// The background event thread.
    pub(crate) thread: Mutex<Option<EventThread>>,
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
    /// Locks the command state.
    pub(crate) fn hw(&self) -> MutexGuard<'_, Hw> {
        self.core.hw()
    }

    /// BAR0 offset of the shared UAR page.
    pub(crate) fn uar_offset(&self) -> usize {
        self.info.uar as usize * 4096
    }

    /// The event state.
    pub(crate) fn events(&self) -> MutexGuard<'_, EventState> {
        self.core.events()
    }

    /// Why the device is dead, when it is.
    pub(crate) fn fatal(&self) -> Option<DriverError> {
        self.core.fatal()
    }

    /// Whether the device is dead.
    pub(crate) fn is_dead(&self) -> bool {
        self.core.dead.load(Ordering::Acquire)
    }

    /// Drains the async EQ now.
    pub(crate) fn service_events(&self) {
        self.core.service_events()
    }

    /// Records a device-level failure.
    pub(crate) fn note_error(&self, e: DriverError) {
        self.core.note_error(e)
    }
}

impl Drop for HcaInner {
    fn drop(&mut self) {
        let name = self.cfg.name.clone();
        // The thread holds only the core: stopping it here always joins it.
        if let Some(mut t) = self
            .thread
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            t.stop();
        }
        let dead = self.is_dead();
        let mut hw = self.core.hw();
        if let Err(e) = super::teardown::teardown(&mut hw, &self.info, dead) {
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
        let r = self.inner.hw().cmd.check_health();
        if let Err(e) = &r {
            self.inner.note_error(e.clone());
        }
        r
    }

    /// Services the async EQ now (the event thread also does it on every interrupt) and
    /// returns the events seen since the last call (port changes, CQ/QP errors, ...).
    ///
    /// # Errors
    /// [`super::DriverError::DeviceDead`] once the device is dead.
    pub fn poll_events(&self) -> super::Result<Vec<EqeRepr>> {
        self.inner.service_events();
        if let Some(e) = self.inner.fatal() {
            return Err(e);
        }
        Ok(self.inner.events().recent.drain(..).collect())
    }

    /// Why the device is dead (the health syndrome named), or `None` while it lives.
    pub fn fatal(&self) -> Option<DriverError> {
        self.inner.fatal()
    }

    /// The port state the last port-change event reported (`true` active), `None` before
    /// any event.
    pub fn port_up(&self) -> Option<bool> {
        self.inner.events().port_up
    }

    /// The error event the device reported for QP `qpn` (WQ catastrophic, invalid request,
    /// access error), if any.
    pub fn qp_error(&self, qpn: u32) -> Option<EventType> {
        self.inner.events().qp_errors.get(&qpn).copied()
    }

    /// Page-request events the event thread serviced (with no command of the caller's
    /// running).
    pub fn page_requests_serviced(&self) -> u64 {
        self.inner.events().page_requests
    }

    /// Whether the background event thread runs.
    pub fn event_thread_running(&self) -> bool {
        self.inner
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }
}
