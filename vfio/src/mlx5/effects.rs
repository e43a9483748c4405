//! Executes core's doorbell [`Effect`] lists (`rdmesh_core::mlx5::doorbell`) against DMA
//! memory and BAR0, in list order — the sequence of rdma-core qp.c `post_send_db`:
//! copy the WQEs into the device-visible queue, `udma_to_device_barrier`, doorbell record,
//! `mmio_wc_start`, one 8-byte store of the last WQE's first ctrl bytes to the UAR's doorbell
//! register, `mmio_flush_writes`.
//!
//! BlueFlame effects are refused: vfio-pci maps BARs uncached (`pgprot_noncached`), so a
//! BlueFlame WQE copy would be a train of uncached 8-byte stores — slower than the doorbell
//! and without the write-combining that makes BlueFlame worth it (see the module docs of
//! [`super`]).

use rdmesh_core::mlx5::doorbell::{Barrier, Effect, WorkQueue};

use super::{barrier, DriverError, Result};
use crate::seam::{DmaBuffer, Mmio};

/// Where the effects of one queue land.
pub(crate) struct Target<'a> {
    pub device: &'a str,
    pub qpn: u32,
    pub mmio: &'a dyn Mmio,
    /// BAR0 offset of the UAR page.
    pub uar_offset: usize,
    /// The doorbell record (8 bytes at offset 0).
    pub dbrec: &'a dyn DmaBuffer,
    /// The device-visible work-queue buffer and the staging rings that mirror it.
    pub wq: Option<WqTarget<'a>>,
}

/// A QP buffer: RQ at `rq_offset`, SQ at `sq_offset`, with their staging copies.
pub(crate) struct WqTarget<'a> {
    pub buf: &'a dyn DmaBuffer,
    pub sq_offset: usize,
    pub sq_ring: &'a [u8],
    pub rq_offset: usize,
    pub rq_ring: &'a [u8],
    pub rq_stride: usize,
}

fn copy_slots(
    t: &Target<'_>,
    buf: &dyn DmaBuffer,
    base: usize,
    ring: &[u8],
    stride: usize,
    first: u16,
    count: u16,
) -> Result<()> {
    let slots = ring.len() / stride;
    if slots == 0 {
        return Ok(());
    }
    let mut i = 0usize;
    let count = usize::from(count).min(slots);
    while i < count {
        let slot = (usize::from(first) + i) % slots;
        // Copy a contiguous run up to the ring end.
        let run = (count - i).min(slots - slot);
        let r = slot * stride..(slot + run) * stride;
        buf.write(base + r.start, &ring[r])
            .map_err(|e| DriverError::dma(t.device, e))?;
        i += run;
    }
    Ok(())
}

/// Runs `effects` in order.
///
/// # Errors
/// [`DriverError::Dma`]; [`DriverError::Config`] for a BlueFlame effect.
pub(crate) fn apply(t: &Target<'_>, effects: &[Effect]) -> Result<()> {
    for e in effects {
        match *e {
            Effect::WriteWqes {
                queue,
                first,
                count,
            } => {
                if let Some(w) = &t.wq {
                    match queue {
                        WorkQueue::Send => {
                            copy_slots(t, w.buf, w.sq_offset, w.sq_ring, 64, first, count)?
                        }
                        WorkQueue::Recv => {
                            copy_slots(t, w.buf, w.rq_offset, w.rq_ring, w.rq_stride, first, count)?
                        }
                    }
                }
            }
            Effect::Barrier(Barrier::ToDevice) => barrier::to_device(),
            Effect::Barrier(Barrier::WcStart) | Effect::Barrier(Barrier::FlushWrites) => {
                barrier::flush_writes()
            }
            Effect::DbrecStore { record, value } => t
                .dbrec
                .write(record.byte_offset(), &value)
                .map_err(|e| DriverError::dma(t.device, e))?,
            // The doorbell-only register is never shared between threads here: the queue's
            // own lock serializes its doorbells.
            Effect::Lock | Effect::Unlock => {}
            Effect::Mmio64 { offset, value } => {
                t.mmio.write_bytes64(t.uar_offset + offset as usize, value)
            }
            Effect::BlueFlame { .. } => {
                return Err(DriverError::config(
                    t.device,
                    format!(
                        "QPN {:#x}: BlueFlame is not available through vfio-pci's uncached BAR \
                         mapping; use the 8-byte doorbell (BfMode::Off)",
                        t.qpn
                    ),
                ))
            }
        }
    }
    Ok(())
}
