//! BAR0 of the model behind [`Mmio`]: the init segment in the first pages, UAR pages at
//! `uar_index · 4096` above it. Every store is handled at once; stores that can give the
//! device work (command and send doorbells, CQ/EQ doorbells) run the progress loop before
//! returning (see [`crate::model`]).

use std::sync::Arc;

use rdmesh_core::mlx5::cmd::init_seg;

use super::device::Device;
use super::init_seg::InitWrite;
use crate::seam::Mmio;

/// End of the init-segment region (pages 0..=2; UARs start above).
pub const INIT_SEG_END: usize = 3 * 4096;

/// The model's BAR0.
#[derive(Debug)]
pub struct ModelBar {
    pub(crate) dev: Arc<Device>,
    pub(crate) len: usize,
}

/// The value a 32-bit load returns for register value `reg` (big-endian register read as a
/// little-endian integer, as the [`Mmio`] contract says).
fn to_bar(reg: u32) -> u32 {
    u32::from_le_bytes(reg.to_be_bytes())
}

fn from_bar(v: u32) -> u32 {
    u32::from_be_bytes(v.to_le_bytes())
}

impl ModelBar {
    fn bad(&self, offset: usize, width: usize) -> bool {
        if offset % width != 0 || offset.checked_add(width).map_or(true, |e| e > self.len) {
            tracing::warn!(
                offset,
                width,
                bar_len = self.len,
                "model BAR0: access outside the BAR or misaligned"
            );
            return true;
        }
        false
    }
}

impl Mmio for ModelBar {
    fn len(&self) -> usize {
        self.len
    }

    fn read32(&self, offset: usize) -> u32 {
        if self.bad(offset, 4) {
            return u32::MAX;
        }
        let mut st = self.dev.lock();
        st.counters.mmio_reads += 1;
        st.pcie.mmio_read(4);
        if offset < init_seg::LEN {
            to_bar(st.init_read(offset))
        } else {
            0
        }
    }

    fn write32(&self, offset: usize, value: u32) {
        if self.bad(offset, 4) {
            return;
        }
        let work = {
            let mut st = self.dev.lock();
            st.counters.mmio_writes += 1;
            st.counters.mmio_writes32 += 1;
            st.pcie.mmio_other(4);
            let reg = from_bar(value);
            if offset < INIT_SEG_END {
                match st.init_write(offset, reg) {
                    InitWrite::CmdDoorbell(mask) => {
                        super::cmdq::ring(&mut st, mask);
                        true
                    }
                    InitWrite::None => false,
                }
            } else {
                let uar = (offset / 4096) as u32;
                if st.uars.contains(&uar) {
                    super::doorbell::write32(&mut st, uar, offset % 4096, reg)
                } else {
                    st.counters.bad_doorbells += 1;
                    tracing::warn!(
                        offset,
                        uar,
                        "model BAR0: store to a UAR page that is not allocated"
                    );
                    false
                }
            }
        };
        if work {
            self.dev.pump();
        }
    }

    fn write64(&self, offset: usize, value: u64) {
        if self.bad(offset, 8) {
            return;
        }
        let bytes = value.to_le_bytes();
        let work = {
            let mut st = self.dev.lock();
            st.counters.mmio_writes += 1;
            st.counters.mmio_writes64 += 1;
            if offset < INIT_SEG_END {
                st.pcie.mmio_other(8);
                // Two registers in one store (e.g. cmdq_addr_h and cmdq_addr_l_sz).
                let hi = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                let lo = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
                let mut mask = 0;
                for (o, v) in [(offset, hi), (offset + 4, lo)] {
                    if let InitWrite::CmdDoorbell(m) = st.init_write(o, v) {
                        mask |= m;
                    }
                }
                if mask != 0 {
                    super::cmdq::ring(&mut st, mask);
                }
                mask != 0
            } else {
                let uar = (offset / 4096) as u32;
                if st.uars.contains(&uar) {
                    super::doorbell::write64(&mut st, uar, offset % 4096, bytes)
                } else {
                    st.counters.bad_doorbells += 1;
                    tracing::warn!(
                        offset,
                        uar,
                        "model BAR0: store to a UAR page that is not allocated"
                    );
                    false
                }
            }
        };
        if work {
            self.dev.pump();
        }
    }

    /// One write-combined TLP: the PCIe accounting sees one BlueFlame write; the stores are
    /// then handled one by one as 64-bit stores (the counters in [`ModelCounters`] count
    /// them as such), and the progress loop runs once at the end.
    ///
    /// [`ModelCounters`]: super::ModelCounters
    fn write_burst(&self, offset: usize, data: &[u8]) {
        if data.is_empty()
            || data.len() % 8 != 0
            || self.bad(offset, 8)
            || self.bad(offset + data.len() - 8, 8)
        {
            return;
        }
        let work = {
            let mut st = self.dev.lock();
            let uar = (offset / 4096) as u32;
            if offset < INIT_SEG_END || !st.uars.contains(&uar) {
                drop(st);
                for (i, c) in data.chunks_exact(8).enumerate() {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(c);
                    self.write_bytes64(offset + i * 8, b);
                }
                return;
            }
            let at = st.pcie.mmio_blueflame(data.len() as u64);
            let mut work = false;
            for (i, c) in data.chunks_exact(8).enumerate() {
                let mut b = [0u8; 8];
                b.copy_from_slice(c);
                st.counters.mmio_writes += 1;
                st.counters.mmio_writes64 += 1;
                st.pcie.arrival = Some(super::pcie::MmioArrival::BlueFlame(at));
                work |= super::doorbell::write64(&mut st, uar, (offset + i * 8) % 4096, b);
            }
            st.pcie.arrival = None;
            work
        };
        if work {
            self.dev.pump();
        }
    }
}
