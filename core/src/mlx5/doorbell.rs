//! Doorbells: the doorbell records in host memory, the 8-byte doorbell and BlueFlame writes to
//! the UAR page, and the order in which they must happen, expressed as an ordered list of
//! [`Effect`]s that a backend (the VFIO provider, the device model) executes one by one.
//!
//! The send sequence mirrors rdma-core `providers/mlx5/qp.c` `post_send_db`, step by step:
//!
//! | # | rdma-core | effect | why |
//! |---|---|---|---|
//! | 1 | WQEs written by `_mlx5_post_send` | [`Effect::WriteWqes`] | the descriptors |
//! | 2 | `udma_to_device_barrier()` | [`Barrier::ToDevice`] | WQEs visible before the record that announces them |
//! | 3 | `db[MLX5_SND_DBR] = htobe32(cur_post & 0xffff)` | [`Effect::DbrecStore`] | the device reads the producer counter here |
//! | 4 | `mmio_wc_spinlock` / `mmio_wc_start()` | [`Effect::Lock`] (shared bfreg), [`Barrier::WcStart`] | the record store before the MMIO / write-combining stores |
//! | 5 | `mlx5_bf_copy` or `mmio_write64_be` | [`Effect::BlueFlame`] or [`Effect::Mmio64`] | wake the device: whole WQE, or the first 8 bytes of the last control segment |
//! | 6 | `mmio_flush_writes()` | [`Barrier::FlushWrites`] | push the WC buffer out inside the lock, so two CPUs' doorbells cannot reorder |
//! | 7 | `bf->offset ^= bf->buf_size` | (state in [`Bfreg`]) | alternate BlueFlame halves |
//! | 8 | unlock | [`Effect::Unlock`] | |
//!
//! BlueFlame is used iff the register supports it (write-combining mapping, not bfreg 0),
//! exactly one WQE is in the batch, the batch had inline data or BlueFlame is preferred,
//! `1 < DS ≤ buf_size / 16`; it copies `align(DS * 16, 64)` bytes in 64-byte chunks from the
//! last WQE, wrapping at the ring end. Receive: WQEs, [`Barrier::ToDevice`], dbrec word 0 (no
//! MMIO; rdma-core qp.c `mlx5_post_recv`).

use heapless::Vec;

use super::{wqebbs_for_ds, DS_LEN};

/// Offset of the first BlueFlame / doorbell register in a UAR page (`MLX5_BF_OFFSET`, Linux
/// doorbell.h / rdma-core mlx5.h).
pub const UAR_BF_OFFSET: u32 = 0x800;
/// Offset of the CQ doorbell register in a UAR page (`MLX5_CQ_DOORBELL`, mlx5dv.h).
pub const UAR_CQ_DOORBELL_OFFSET: u32 = 0x20;
/// Size of one BlueFlame half (`MLX5_DB_BLUEFLAME_BUFFER_SIZE`, rdma-core mlx5_ifc.h), bytes.
pub const BLUEFLAME_BUFFER_SIZE: u32 = 0x100;

/// A doorbell-record word. A QP's record holds the receive counter in dword 0
/// (`MLX5_RCV_DBR`) and the send counter in dword 1 (`MLX5_SND_DBR`); a CQ's holds the
/// consumer index in dword 0 (`MLX5_CQ_SET_CI`) and the arm value in dword 1
/// (`MLX5_CQ_ARM_DB`). All values are big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DbRecord {
    /// QP record dword 0: RQ producer counter (`rq.head & 0xffff`).
    QpRecv,
    /// QP record dword 1: SQ producer counter in WQEBBs (`sq.cur_post & 0xffff`).
    QpSend,
    /// CQ record dword 0: consumer index (`cons_index & 0xffffff`).
    CqSetCi,
    /// CQ record dword 1: arm value (`sn << 28 | cmd | ci`).
    CqArm,
}

impl DbRecord {
    /// The dword index inside the record (0 or 1).
    pub const fn dword(self) -> usize {
        match self {
            DbRecord::QpRecv | DbRecord::CqSetCi => 0,
            DbRecord::QpSend | DbRecord::CqArm => 1,
        }
    }

    /// The byte offset inside the record (0 or 4).
    pub const fn byte_offset(self) -> usize {
        self.dword() * 4
    }
}

/// A memory barrier between two effects (rdma-core `util/udma_barrier.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Barrier {
    /// `udma_to_device_barrier`: earlier stores to DMA memory are visible to the device before
    /// later ones (x86-64: compiler barrier; aarch64: `dmb oshst`).
    ToDevice,
    /// `mmio_wc_start`: earlier stores before the following MMIO / write-combining stores
    /// (x86-64: `sfence`; aarch64: `dsb st`).
    WcStart,
    /// `mmio_flush_writes`: the write-combining buffer is flushed to the device (x86-64:
    /// `sfence`; aarch64: `dsb st`).
    FlushWrites,
}

/// Which work queue a [`Effect::WriteWqes`] refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WorkQueue {
    /// The send queue (indices and counts in WQEBBs).
    Send,
    /// The receive queue (indices and counts in WQEs).
    Recv,
}

/// One step of a doorbell sequence, executed in list order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Effect {
    /// The WQEs from 16-bit index `first`, `count` entries (slots wrap), must be in the
    /// device-visible queue buffer. A backend whose writer ring is a staging copy copies them
    /// now; one that writes the DMA buffer directly has nothing to do.
    WriteWqes {
        /// Send or receive queue.
        queue: WorkQueue,
        /// First index (WQEBBs for send, WQEs for receive).
        first: u16,
        /// Number of WQEBBs / WQEs.
        count: u16,
    },
    /// A memory barrier.
    Barrier(Barrier),
    /// A 4-byte store of `value` (already big-endian bytes) into a doorbell record.
    DbrecStore {
        /// Which record word.
        record: DbRecord,
        /// The bytes to store.
        value: [u8; 4],
    },
    /// Take the bfreg's lock (shared bfreg only).
    Lock,
    /// Release the bfreg's lock.
    Unlock,
    /// One single-copy 64-bit MMIO store of `value` (bytes in memory order) at byte `offset`
    /// of the UAR page.
    Mmio64 {
        /// Byte offset in the UAR page.
        offset: u32,
        /// The 8 bytes, in the order they sit in memory.
        value: [u8; 8],
    },
    /// BlueFlame: copy `chunks` × 64 bytes of the send queue, starting at the WQE with index
    /// `wqe_index` and wrapping at the ring end, to byte `offset` of the UAR page, in order,
    /// with 64-bit (or 64-byte) stores — never `memcpy` (rdma-core qp.c `mlx5_bf_copy`).
    BlueFlame {
        /// Byte offset in the UAR page.
        offset: u32,
        /// WQE index of the (single) WQE to copy.
        wqe_index: u16,
        /// Number of 64-byte chunks.
        chunks: u8,
    },
}

/// An ordered list of effects (at most 8 per doorbell).
pub type Effects = Vec<Effect, 8>;

/// Receives a doorbell sequence one [`Effect`] at a time, in order: an [`Effects`] list
/// collects them, a closure `FnMut(Effect)` executes them as they come. Executing them
/// directly (`Bfreg::ring_send_to`, `Batcher::post_to`) builds no list: once inlined, each
/// effect is a constant the sink's `match` folds, and what remains is the stores themselves.
pub trait EffectSink {
    /// The next effect of the sequence.
    fn effect(&mut self, e: Effect);
}

impl EffectSink for Effects {
    /// Appends `e` (a doorbell sequence has at most 8 effects, the capacity).
    #[inline]
    fn effect(&mut self, e: Effect) {
        let _ = self.push(e);
    }
}

impl<F: FnMut(Effect)> EffectSink for F {
    #[inline(always)]
    fn effect(&mut self, e: Effect) {
        self(e)
    }
}

/// The WQEs posted since the previous doorbell ([`SqWriter::take_batch`](super::SqWriter)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendBatch {
    /// WQE index of the first WQE in the batch.
    pub first_index: u16,
    /// Producer counter after the batch (what the doorbell record receives).
    pub end_index: u16,
    /// Number of WQEs (rdma-core `nreq`).
    pub nreq: u16,
    /// `true` when any WQE of the batch carried inline data (rdma-core `inl`).
    pub inline: bool,
    /// WQE index of the last WQE.
    pub last_index: u16,
    /// DS of the last WQE (rdma-core `size`).
    pub last_ds: u8,
    /// The first 8 bytes of the last WQE's control segment, as in memory.
    pub last_ctrl: [u8; 8],
}

/// The receive WQEs posted since the previous doorbell-record update.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RecvBatch {
    /// Index of the first WQE.
    pub first: u16,
    /// Number of WQEs.
    pub count: u16,
    /// Producer counter after the batch (`rq.head & 0xffff`).
    pub head: u16,
}

/// When BlueFlame may be used for a batch of one WQE (rdma-core's `(inl || prefer_bf)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum BfMode {
    /// Never: always the 8-byte doorbell (rdma-core `MLX5_SHUT_UP_BF=1`).
    Off,
    /// Only when the WQE carries inline data (`MLX5_POST_SEND_PREFER_BF=0`).
    Inline,
    /// For every single small WQE (`MLX5_POST_SEND_PREFER_BF=1`, rdma-core's default).
    Prefer,
}

/// What the hardware offers for one BlueFlame register (a "bfreg" / UUAR).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BfregConfig {
    /// Byte offset of the register in the UAR page: `0x800 + k * bf_reg_size`.
    pub reg_offset: u32,
    /// Size of each of the two alternating halves in bytes (`bf_reg_size / 2`, usually 256);
    /// 0 = one fixed doorbell address (rdma-core's bfreg 0; VFIO).
    pub buf_size: u32,
    /// BlueFlame copies are possible: the page is mapped write-combining and this is not
    /// bfreg 0 (rdma-core `bf->uuarn != 0`). vfio-pci maps BARs uncached, so `false` there.
    pub blueflame: bool,
    /// Several threads share the register: wrap steps 4–8 in its lock (`bf->need_lock`).
    pub need_lock: bool,
}

impl BfregConfig {
    /// The plain 8-byte doorbell at `reg_offset`, no halves, no BlueFlame, no lock: what
    /// rdma-core's VFIO provider uses (`vfio_devx_alloc_uar`: NC UAR, `reg_addr = base +
    /// 0x800`).
    pub const fn doorbell_only(reg_offset: u32) -> BfregConfig {
        BfregConfig {
            reg_offset,
            buf_size: 0,
            blueflame: false,
            need_lock: false,
        }
    }

    /// A write-combining BlueFlame register with two halves of `buf_size` bytes, owned by one
    /// thread.
    pub const fn blueflame(reg_offset: u32, buf_size: u32) -> BfregConfig {
        BfregConfig {
            reg_offset,
            buf_size,
            blueflame: true,
            need_lock: false,
        }
    }
}

/// A BlueFlame register and the half it writes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Bfreg {
    config: BfregConfig,
    offset: u32,
}

impl Bfreg {
    /// A register starting at its first half.
    pub const fn new(config: BfregConfig) -> Bfreg {
        Bfreg { config, offset: 0 }
    }

    /// The configuration.
    pub const fn config(&self) -> BfregConfig {
        self.config
    }

    /// Offset of the half the next doorbell goes to (0 or `buf_size`).
    pub const fn half(&self) -> u32 {
        self.offset
    }

    /// `true` when `batch` goes out as a BlueFlame copy under `mode` (rdma-core
    /// `!shut_up_bf && nreq == 1 && bf->uuarn && (inl || prefer_bf) && size > 1 &&
    /// size <= bf->buf_size / 16`).
    #[inline]
    pub fn uses_blueflame(&self, batch: &SendBatch, mode: BfMode) -> bool {
        let wanted = match mode {
            BfMode::Off => false,
            BfMode::Inline => batch.inline,
            BfMode::Prefer => true,
        };
        self.config.blueflame
            && wanted
            && batch.nreq == 1
            && batch.last_ds > 1
            && batch.last_ds as u32 <= self.config.buf_size / DS_LEN as u32
    }

    /// The effects that ring the send doorbell for `batch` (rdma-core qp.c `post_send_db`;
    /// table in the module docs), and the switch to the other half.
    pub fn ring_send(&mut self, batch: &SendBatch, mode: BfMode) -> Effects {
        let mut e = Effects::new();
        self.ring_send_into(batch, mode, &mut e);
        e
    }

    /// [`ring_send`](Self::ring_send) into a caller-provided list (cleared first), which
    /// avoids moving the list on hot paths.
    #[inline]
    pub fn ring_send_into(&mut self, batch: &SendBatch, mode: BfMode, e: &mut Effects) {
        e.clear();
        self.ring_send_to(batch, mode, e);
    }

    /// The same sequence as [`ring_send`](Self::ring_send), handed to `sink` one effect at a
    /// time (nothing is cleared; no list is built unless the sink builds one).
    #[inline(always)]
    pub fn ring_send_to<S: EffectSink + ?Sized>(
        &mut self,
        batch: &SendBatch,
        mode: BfMode,
        sink: &mut S,
    ) {
        if self.uses_blueflame(batch, mode) {
            let (wqe_index, chunks) = (
                batch.last_index,
                wqebbs_for_ds(batch.last_ds as usize) as u8,
            );
            self.send_sequence(batch.first_index, batch.end_index, sink, |offset| {
                Effect::BlueFlame {
                    offset,
                    wqe_index,
                    chunks,
                }
            });
        } else {
            self.ring_send_doorbell_to(batch.first_index, batch.end_index, batch.last_ctrl, sink);
        }
    }

    /// The send sequence with the 8-byte doorbell (no BlueFlame): WQEs `first_index` up to
    /// `end_index` (16-bit WQE indices; `end_index` goes to the doorbell record), and
    /// `last_ctrl`, the first 8 bytes of the last WQE's control segment as they sit in memory,
    /// to the register. The same effects as [`ring_send_to`](Self::ring_send_to) for a batch
    /// that does not go out by BlueFlame (one of more than one WQE, for instance), without
    /// building the [`SendBatch`].
    #[inline(always)]
    pub fn ring_send_doorbell_to<S: EffectSink + ?Sized>(
        &mut self,
        first_index: u16,
        end_index: u16,
        last_ctrl: [u8; 8],
        sink: &mut S,
    ) {
        self.send_sequence(first_index, end_index, sink, |offset| Effect::Mmio64 {
            offset,
            value: last_ctrl,
        });
    }

    /// Steps 1–8 of the send sequence (module docs), `wake(register offset)` at step 5.
    #[inline(always)]
    fn send_sequence<S: EffectSink + ?Sized>(
        &mut self,
        first_index: u16,
        end_index: u16,
        sink: &mut S,
        wake: impl FnOnce(u32) -> Effect,
    ) {
        let reg = self.config.reg_offset + self.offset;
        sink.effect(Effect::WriteWqes {
            queue: WorkQueue::Send,
            first: first_index,
            count: end_index.wrapping_sub(first_index),
        });
        sink.effect(Effect::Barrier(Barrier::ToDevice));
        sink.effect(Effect::DbrecStore {
            record: DbRecord::QpSend,
            value: (end_index as u32).to_be_bytes(),
        });
        if self.config.need_lock {
            sink.effect(Effect::Lock);
        }
        sink.effect(Effect::Barrier(Barrier::WcStart));
        sink.effect(wake(reg));
        sink.effect(Effect::Barrier(Barrier::FlushWrites));
        self.offset ^= self.config.buf_size;
        if self.config.need_lock {
            sink.effect(Effect::Unlock);
        }
    }
}

/// The effects that publish receive WQEs (rdma-core qp.c `mlx5_post_recv`): the WQEs, a
/// device barrier, then dbrec word 0 = `htobe32(head & 0xffff)`. No MMIO.
pub fn ring_recv(batch: &RecvBatch) -> Effects {
    let mut e = Effects::new();
    let _ = e.push(Effect::WriteWqes {
        queue: WorkQueue::Recv,
        first: batch.first,
        count: batch.count,
    });
    let _ = e.push(Effect::Barrier(Barrier::ToDevice));
    let _ = e.push(Effect::DbrecStore {
        record: DbRecord::QpRecv,
        value: (batch.head as u32).to_be_bytes(),
    });
    e
}

#[cfg(test)]
mod test {
    use super::*;

    fn batch(nreq: u16, ds: u8, inline: bool) -> SendBatch {
        SendBatch {
            first_index: 10,
            end_index: 10 + nreq,
            nreq,
            inline,
            last_index: 9 + nreq,
            last_ds: ds,
            last_ctrl: [1, 2, 3, 4, 5, 6, 7, 8],
        }
    }

    #[test]
    fn test_plain_doorbell_sequence() {
        let mut bf = Bfreg::new(BfregConfig::doorbell_only(0x800));
        let e = bf.ring_send(&batch(3, 3, false), BfMode::Prefer);
        assert_eq!(
            e.as_slice(),
            &[
                Effect::WriteWqes {
                    queue: WorkQueue::Send,
                    first: 10,
                    count: 3
                },
                Effect::Barrier(Barrier::ToDevice),
                Effect::DbrecStore {
                    record: DbRecord::QpSend,
                    value: [0, 0, 0, 13]
                },
                Effect::Barrier(Barrier::WcStart),
                Effect::Mmio64 {
                    offset: 0x800,
                    value: [1, 2, 3, 4, 5, 6, 7, 8]
                },
                Effect::Barrier(Barrier::FlushWrites),
            ]
        );
        assert_eq!(bf.half(), 0);
    }

    #[test]
    fn test_blueflame_alternates_halves() {
        let mut bf = Bfreg::new(BfregConfig::blueflame(0xa00, 256));
        let one = batch(1, 3, false);
        let e = bf.ring_send(&one, BfMode::Prefer);
        assert_eq!(
            e[4],
            Effect::BlueFlame {
                offset: 0xa00,
                wqe_index: 10,
                chunks: 1
            }
        );
        let e = bf.ring_send(&one, BfMode::Prefer);
        assert!(matches!(e[4], Effect::BlueFlame { offset: 0xb00, .. }));
        assert_eq!(bf.half(), 0);
        // Not inline and BF only for inline: plain doorbell, still alternating.
        let e = bf.ring_send(&one, BfMode::Inline);
        assert!(matches!(e[4], Effect::Mmio64 { offset: 0xa00, .. }));
        let e = bf.ring_send(&batch(1, 3, true), BfMode::Inline);
        assert!(matches!(e[4], Effect::BlueFlame { offset: 0xb00, .. }));
        // DS 1 (a NOP), two WQEs, or DS above buf_size / 16: plain doorbell.
        assert!(!bf.uses_blueflame(&batch(1, 1, true), BfMode::Prefer));
        assert!(!bf.uses_blueflame(&batch(2, 3, true), BfMode::Prefer));
        assert!(bf.uses_blueflame(&batch(1, 16, true), BfMode::Prefer));
        assert!(!bf.uses_blueflame(&batch(1, 17, true), BfMode::Prefer));
        assert!(!bf.uses_blueflame(&batch(1, 3, true), BfMode::Off));
    }

    #[test]
    fn test_locked_and_recv() {
        let mut cfg = BfregConfig::blueflame(0x800, 256);
        cfg.need_lock = true;
        let e = Bfreg::new(cfg).ring_send(&batch(2, 4, false), BfMode::Prefer);
        assert_eq!(e.len(), 8);
        assert_eq!(e[3], Effect::Lock);
        assert_eq!(e[7], Effect::Unlock);
        let r = ring_recv(&RecvBatch {
            first: 0xffff,
            count: 2,
            head: 1,
        });
        assert_eq!(
            r[2],
            Effect::DbrecStore {
                record: DbRecord::QpRecv,
                value: [0, 0, 0, 1]
            }
        );
    }
}
