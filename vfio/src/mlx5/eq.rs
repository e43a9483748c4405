//! The async event queue: command completions (type 0x0a), page requests (0x0b) and the other
//! asynchronous events (port change, CQ/QP errors), read with the ownership rule and
//! acknowledged through the EQ doorbell (rdma-core `mlx5_vfio.c` `create_async_eqs`,
//! `mlx5_vfio_process_async_events`; Linux `eq.c`).
//!
//! The buffer is one IOVA-contiguous DMA block, every entry's `owner` byte initialised to 1;
//! the entry at consumer index `ci` is new when `owner & 1 == (ci >> log_nent) & 1`. After a
//! batch the driver writes `eqn << 24 | ci` (big-endian) to UAR + 0x40, which also re-arms the
//! interrupt.

use std::collections::VecDeque;

use rdmesh_core::mlx5::cmd::eqe::{self, Eqe, EqeRepr, EQ_DOORBELL_ARM_OFFSET};

use super::{barrier, DriverError, Result};
use crate::seam::{DmaBuffer, Mmio};

/// Events kept for the caller at most (older ones are dropped and counted).
const MAX_KEPT_EVENTS: usize = 1024;

/// One event queue and what it has delivered.
#[derive(Debug)]
pub struct EventQueue {
    buf: Box<dyn DmaBuffer>,
    log_nent: u8,
    ci: u32,
    eqn: u8,
    /// BAR0 offset of the UAR page whose doorbell acknowledges this EQ.
    uar_offset: usize,
    /// Page requests not yet serviced (pages wanted; negative: pages returned).
    pub(crate) page_requests: VecDeque<i32>,
    /// Completed command slots not yet claimed (bit `i` = slot `i`).
    pub(crate) cmd_done: u32,
    /// Other events (port change, CQ/QP errors, completions) for the caller.
    pub(crate) events: VecDeque<EqeRepr>,
    /// Events dropped because [`MAX_KEPT_EVENTS`] were queued.
    pub(crate) dropped: u64,
}

impl EventQueue {
    /// Sets every entry's owner byte to 1 in `buf` (a fresh EQ buffer of `2^log_nent`
    /// entries), as rdma-core `init_eq_buf` does.
    ///
    /// # Errors
    /// [`DriverError::Dma`] when the buffer is smaller than the queue.
    pub fn init_buffer(buf: &dyn DmaBuffer, log_nent: u8, device: &str) -> Result<()> {
        let mut page = vec![0u8; (1usize << log_nent) * eqe::LEN];
        for e in page.chunks_exact_mut(eqe::LEN) {
            e[eqe::LEN - 1] = eqe::OWNER_INIT_VAL;
        }
        buf.write(0, &page).map_err(|e| DriverError::dma(device, e))
    }

    /// Wraps a created EQ.
    pub fn new(buf: Box<dyn DmaBuffer>, log_nent: u8, eqn: u8, uar_offset: usize) -> EventQueue {
        EventQueue {
            buf,
            log_nent,
            ci: 0,
            eqn,
            uar_offset,
            page_requests: VecDeque::new(),
            cmd_done: 0,
            events: VecDeque::new(),
            dropped: 0,
        }
    }

    /// The EQ number.
    pub fn eqn(&self) -> u8 {
        self.eqn
    }

    /// The consumer index.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Arms the EQ: `eqn << 24 | ci` to UAR + 0x40.
    pub fn arm(&self, mmio: &dyn Mmio) {
        barrier::flush_writes();
        mmio.write32_be(
            self.uar_offset + EQ_DOORBELL_ARM_OFFSET,
            eqe::eq_doorbell_value(self.eqn, self.ci),
        );
    }

    /// Reads every new entry, sorts it (command completions into `cmd_done`, page requests
    /// into `page_requests`, the rest into `events`) and acknowledges them with one doorbell.
    /// Returns how many entries were consumed.
    ///
    /// # Errors
    /// [`DriverError::Dma`] when the buffer cannot be read. An entry that does not parse is
    /// consumed, logged and skipped.
    pub fn poll(&mut self, mmio: &dyn Mmio, device: &str) -> Result<usize> {
        let nent = 1u32 << self.log_nent;
        let mut n = 0;
        loop {
            let off = (self.ci & (nent - 1)) as usize * eqe::LEN;
            let mut raw = [0u8; eqe::LEN];
            self.buf
                .read(off, &mut raw)
                .map_err(|e| DriverError::dma(device, e))?;
            let view = Eqe::new_unchecked(&raw[..]);
            if !view.sw_owned(self.ci, nent) {
                break;
            }
            barrier::from_device();
            // Re-read after the barrier: the owner byte may have been seen before the data.
            self.buf
                .read(off, &mut raw)
                .map_err(|e| DriverError::dma(device, e))?;
            match EqeRepr::parse(&Eqe::new_unchecked(&raw[..])) {
                Ok(EqeRepr::Cmd { vector }) => self.cmd_done |= vector,
                Ok(EqeRepr::PageRequest { num_pages, .. }) => {
                    self.page_requests.push_back(num_pages)
                }
                Ok(ev) => {
                    if self.events.len() >= MAX_KEPT_EVENTS {
                        self.events.pop_front();
                        self.dropped += 1;
                    }
                    self.events.push_back(ev);
                }
                Err(e) => tracing::warn!(device, "unparsable EQE at ci {}: {e}", self.ci),
            }
            self.ci = self.ci.wrapping_add(1);
            n += 1;
            // Acknowledge at least every 128 entries so the device never overruns the queue.
            if n % eqe::NUM_SPARE_EQE as usize == 0 {
                self.arm(mmio);
            }
        }
        if n > 0 {
            self.arm(mmio);
        }
        Ok(n)
    }

    /// Takes the queued events (port changes, CQ/QP errors, completions).
    pub fn take_events(&mut self) -> Vec<EqeRepr> {
        self.events.drain(..).collect()
    }
}
