//! The send-queue ring writer (rdma-core qp.c `_mlx5_post_send`, `mlx5_get_send_wqe`,
//! `mlx5_wq_overflow`).
//!
//! The ring is `2^n` WQEBBs of 64 bytes (n ≤ 15). A 16-bit producer counter `pc` counts
//! WQEBBs and wraps at 0xffff independently of the ring size; a WQE goes to slot
//! `pc & (wqebbs - 1)`, carries `pc` as its WQE index, and advances `pc` by `ceil(DS / 4)`.
//! A WQE that reaches the ring end continues at slot 0. WQEBBs stay in use until a completion
//! retires them ([`SqWriter::retire`]): a CQE's `wqe_counter` names the last completed WQE,
//! and every earlier (unsignaled) WQE is complete with it.
//!
//! The writer keeps the ring as shared 8-byte cells (`Cell<[u8; 8]>`) so that it can hold
//! the free window it writes next as a slice of its own: a post's stores then go to the
//! window's first bytes and the window pointer stays in a register from post to post. The
//! cost is that a `SqWriter` is neither `Send` nor `Sync` (a `&Cell` is not `Send`), and the
//! ring's bytes are read through [`SqWriter::copy_ring`] / [`SqWriter::read_wqebb`] while the
//! writer lives (the caller's buffer is its own again once the writer is dropped).

use super::cells::{self, Word, WORD};
use super::ctrl::{CtrlSeg, FmCeSe, DS_MASK};
use super::doorbell::SendBatch;
use super::wqe::{Payload, QpType, SendFlags, SendWr, Sge, TransportSeg, WrOp};
use super::{wqebbs_for_ds, Error, Result, DS_LEN, MAX_DS, MAX_RING_WQEBBS, WQEBB_LEN};

/// "No WQE" for [`SqWriter::post_many_signal`]'s `signal`.
pub const NO_SIGNAL: u16 = u16::MAX;

/// `CQ_UPDATE` in the control segment's second big-endian word (bytes 8..16): `fm_ce_se` is
/// byte 11, bits 39..32 of that word ([`CtrlRepr::tail`](super::CtrlRepr::tail)).
const CTRL_TAIL_CQ_UPDATE: u64 = (FmCeSe::CQ_UPDATE as u64) << 32;

/// Cells per WQEBB.
const WQEBB_CELLS: usize = WQEBB_LEN / WORD;

/// What [`SqWriter::post`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Posted {
    /// WQE index (the producer counter of its first WQEBB); a CQE's `wqe_counter` for this
    /// WQE equals it.
    pub wqe_index: u16,
    /// WQE size in DS units.
    pub ds: u8,
    /// WQEBBs consumed.
    pub wqebbs: u8,
}

/// A work request [`SqWriter::post_many`] can take: a [`SendWr`] itself, or a [`OneSge`]
/// that owns its gather entry (so that a closure can build it afresh for each WQE).
pub trait AsSendWr {
    /// The work request (borrowing from `self`).
    fn send_wr(&self) -> SendWr<'_>;
}

impl AsSendWr for SendWr<'_> {
    #[inline(always)]
    fn send_wr(&self) -> SendWr<'_> {
        *self
    }
}

/// A send work request with exactly one gather entry, owned (RC/UC, no inline data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OneSge {
    /// The operation.
    pub op: WrOp,
    /// Signaled / solicited / fence.
    pub flags: SendFlags,
    /// The gather entry.
    pub sge: Sge,
}

impl AsSendWr for OneSge {
    #[inline(always)]
    fn send_wr(&self) -> SendWr<'_> {
        SendWr {
            op: self.op,
            flags: self.flags,
            transport: TransportSeg::None,
            payload: Payload::Gather(core::slice::from_ref(&self.sge)),
        }
    }
}

/// What the doorbell for a batch written by [`SqWriter::post_whole_batch`] needs.
pub(crate) struct WholeBatch {
    /// WQE index of the first WQE.
    pub(crate) first_index: u16,
    /// Producer counter after the batch.
    pub(crate) end_index: u16,
    /// The first 8 bytes of the last WQE's control segment, as in memory.
    pub(crate) last_ctrl: [u8; 8],
}

/// How far [`SqWriter::post_whole_batch`] got when it could not post the whole batch.
pub(crate) struct Partial<W> {
    /// WQEs written (pending).
    pub(crate) k: u16,
    /// Request `k`, when the run stopped at it.
    pub(crate) other: Option<W>,
}

/// What [`SqWriter::run`] wrote.
struct Run<W> {
    /// WQEs written.
    k: u16,
    /// Bytes 0..8 of the last one's control segment, as a big-endian word (when k > 0).
    head: u64,
    /// Whether any carried inline data.
    inline: bool,
    /// The request the run stopped at, when it is not a valid one-WQEBB WQE.
    other: Option<W>,
}

/// The one-WQEBB slots of `window` (a whole number of WQEBBs of cells), in order. From Rust
/// 1.88 on, `as_chunks`' slice iterator: the loop over them steps one pointer, and every store
/// into a slot is a base + displacement access (on the AMD Zen 4 this was measured on, a
/// WQE's six stores then take about 0.8 ns instead of 1.1 ns with base + index addressing,
/// docs/benchmarks.md). Before 1.88 (the crate's minimum is 1.80), `chunks_exact`: the same
/// slots.
#[rustversion::since(1.88)]
#[inline(always)]
#[allow(clippy::incompatible_msrv)]
fn slots(window: &[Word]) -> core::slice::Iter<'_, [Word; WQEBB_CELLS]> {
    window.as_chunks::<WQEBB_CELLS>().0.iter()
}

/// See the other `slots` (Rust before 1.88).
#[rustversion::before(1.88)]
#[inline(always)]
fn slots(window: &[Word]) -> impl Iterator<Item = &[Word; WQEBB_CELLS]> {
    window
        .chunks_exact(WQEBB_CELLS)
        .filter_map(|s| <&[Word; WQEBB_CELLS]>::try_from(s).ok())
}

/// The error of a post that does not fit: larger than the ring, or more than is free.
#[cold]
#[inline(never)]
fn no_room(ds: usize, needed: u16, free: u16, wqebbs: u16) -> Error {
    if needed > wqebbs {
        Error::Oversize { ds }
    } else {
        Error::RingFull { needed, free }
    }
}

/// Writes send WQEs into a ring held in caller memory: `2^n` WQEBBs of 64 bytes, every
/// field big-endian as the device reads it (rdma-core `providers/mlx5/qp.c`, `mlx5dv.h`).
///
/// The writer borrows the ring for `'r` and sees it as shared 8-byte cells (see the module
/// docs): it is neither `Send` nor `Sync`, and its bytes are read with
/// [`copy_ring`](Self::copy_ring) / [`read_wqebb`](Self::read_wqebb) while it lives.
#[derive(Debug)]
pub struct SqWriter<'r> {
    // The whole ring.
    ring: &'r [Word],
    // The free WQEBBs from the producer's slot that do not wrap: a post that fits is one
    // comparison (ring full and ring end at once) and writes the window's first bytes; the
    // window is recomputed only on retire and at the ring end. Held as a slice (not as an
    // offset into `ring`) so that the slot's address is carried from post to post and its
    // stores take a plain base + displacement address, not base + index (about 25 % faster
    // for a WQE's six stores on the AMD Zen 4 this was measured on, docs/benchmarks.md).
    window: &'r [Word],
    mask: u16,
    wqebbs: u16,
    qpn: u32,
    qp_type: QpType,
    signal_bits: u8,
    // 16-bit counters kept in u32 (always < 2^16): full-width loads and stores of the hot
    // fields avoid store-forwarding stalls on x86.
    pc: u32,
    cc: u32,
    batch_first: u32,
    batch_nreq: u32,
    batch_inline: bool,
    // Bytes 0..8 of the last WQE's control segment as a big-endian word: the doorbell value,
    // and (bits 55..40, 5..0) the last WQE index and DS, without reading the ring back.
    last_head: u64,
}

impl<'r> SqWriter<'r> {
    /// A writer over `ring` (the whole SQ buffer) for QP `qpn` of type `qp_type`, producer
    /// counter 0, nothing outstanding.
    ///
    /// # Errors
    /// [`Error::BadRing`] unless `ring.len()` is `2^n * 64` with `2^n ≤ 32768`;
    /// [`Error::BadField`] when `qpn ≥ 2^24`.
    #[inline]
    pub fn new(ring: &'r mut [u8], qpn: u32, qp_type: QpType) -> Result<SqWriter<'r>> {
        let n = ring.len() / WQEBB_LEN;
        if ring.len() % WQEBB_LEN != 0 || !n.is_power_of_two() || n > MAX_RING_WQEBBS {
            return Err(Error::BadRing);
        }
        if qpn >= 1 << 24 {
            return Err(Error::BadField);
        }
        let ring = cells::from_bytes(ring);
        Ok(SqWriter {
            ring,
            window: ring,
            mask: (n - 1) as u16,
            wqebbs: n as u16,
            qpn,
            qp_type,
            signal_bits: 0,
            pc: 0,
            cc: 0,
            batch_first: 0,
            batch_nreq: 0,
            batch_inline: false,
            last_head: 0,
        })
    }

    /// Starts the producer (and consumer) counter at `pc` instead of 0 (for a queue resumed
    /// mid-way, or to exercise the 16-bit wrap).
    #[inline]
    pub fn with_counter(mut self, pc: u16) -> Self {
        self.pc = pc as u32;
        self.cc = pc as u32;
        self.batch_first = pc as u32;
        self.rewindow();
        self
    }

    /// Recomputes the free window from the counters.
    #[inline]
    fn rewindow(&mut self) {
        let pos = (self.pc as u16 & self.mask) as usize * WQEBB_CELLS;
        let free = self.free() as usize * WQEBB_CELLS;
        let end = (pos + free).min(self.ring.len());
        self.window = self.ring.get(pos..end).unwrap_or(&[]);
    }

    /// Signal every WQE, as a QP created with `sq_sig_all` does (rdma-core `sq_signal_bits =
    /// MLX5_WQE_CTRL_CQ_UPDATE`).
    #[inline]
    pub fn with_sig_all(mut self, on: bool) -> Self {
        self.signal_bits = if on { FmCeSe::CQ_UPDATE } else { 0 };
        self
    }

    /// Posts one work request: checks it, writes the control segment and every segment at
    /// slot `pc & (wqebbs - 1)` (wrapping at the ring end) and advances `pc`.
    ///
    /// # Errors
    /// Those of [`SendWr::check`]; [`Error::Oversize`] when the WQE has more WQEBBs than the
    /// ring; [`Error::RingFull`] when fewer WQEBBs are free than it needs. Nothing is written
    /// on error.
    ///
    /// Always inlined: at a call site with a fixed work-request shape the encoder specializes
    /// (about 3x faster in `core/benches/mlx5_wqe.rs`). A WQE that fits in the free window
    /// (not full, not reaching the ring end) costs one comparison and its segments' 8-byte
    /// big-endian stores at the window's start; the window is recomputed, out of the way, at
    /// the ring end and after a retire.
    #[inline(always)]
    pub fn post(&mut self, wr: &SendWr<'_>) -> Result<Posted> {
        let ds = wr.check(self.qp_type)?;
        let n = wqebbs_for_ds(ds);
        let idx = self.pc as u16;
        let ctrl = wr.ctrl(idx, self.qpn, ds, self.signal_bits);
        let cells_n = n * WQEBB_CELLS;
        if cells_n > self.window.len() {
            // At the ring end, or full: recompute the window (a no-op unless the producer
            // reached the ring end or WQEs were retired).
            super::wqe::cold();
            self.rewindow();
        }
        match self.window.get(..cells_n) {
            Some(slot) => {
                let mut wqe = slot.get(..ds * DS_LEN / WORD).unwrap_or(slot);
                wr.write_flat_words(&mut wqe, ctrl.head(), ctrl.tail());
                self.window = self.window.get(cells_n..).unwrap_or(&[]);
            }
            None => {
                // Full, or a WQE that reaches the ring end: the general path (kept inline so
                // that the request never has to be spilled to memory for a call).
                super::wqe::cold();
                let free = self.free();
                if n as u16 > free {
                    return Err(no_room(ds, n as u16, free, self.wqebbs));
                }
                // Built flat, copied around the wrap.
                let off = (idx & self.mask) as usize * WQEBB_LEN;
                let mut tmp = [0u8; MAX_DS * DS_LEN];
                let wqe = &mut tmp[..(ds * DS_LEN).min(MAX_DS * DS_LEN)];
                wr.write_flat(wqe, &ctrl);
                cells::put(self.ring, off, wqe);
                self.pc = idx.wrapping_add(n as u16) as u32;
                self.rewindow();
                self.pc = idx as u32;
            }
        }
        self.batch_nreq += 1;
        if matches!(wr.payload, super::Payload::Inline(b) if !b.is_empty()) {
            self.batch_inline = true;
        }
        self.last_head = ctrl.head();
        self.pc = idx.wrapping_add(n as u16) as u32;
        Ok(Posted {
            wqe_index: idx,
            ds: ds as u8,
            wqebbs: n as u8,
        })
    }

    /// Posts `count` work requests built by `make(k)`, `k` = 0, 1, …, `count` − 1, in
    /// order, with the same result as `count` calls of [`post`](Self::post); returns how many
    /// were posted (fewer than `count` only with an error, which is returned after the posted
    /// ones are accounted for, as verbs' `bad_wr`).
    ///
    /// The run that fits before the ring end and the consumer is written with one bounds
    /// check for all of it (each one-WQEBB WQE goes to the next slot of a slice of exactly
    /// the run's size), the counters are updated once: the per-WQE work is the WQE's stores.
    /// Other WQEs (several WQEBBs, the ring end, a full ring) go through `post`.
    ///
    /// # Errors
    /// As [`post`](Self::post), for the first request that fails.
    #[inline(always)]
    pub fn post_many<W, F>(&mut self, count: u16, make: F) -> (u16, Result<()>)
    where
        W: AsSendWr,
        F: FnMut(u16) -> W,
    {
        self.post_many_signal(count, NO_SIGNAL, make)
    }

    /// [`post_many`](Self::post_many), and WQE number `signal` of the call (counted from 0,
    /// as `make`'s argument) is signaled (`CQ_UPDATE`) whatever its request's flags say;
    /// [`NO_SIGNAL`] (or any value ≥ `count`) for none. The same WQE bytes as `post_many`
    /// with that request's `flags.signaled` set.
    ///
    /// This is how a batch that signals one WQE in K (the [`Batcher`](super::Batcher)) posts
    /// without a per-WQE choice of flags: every WQE of the run is written from the request
    /// as it is, then the one control-segment byte of the signaled WQE is updated, before any
    /// doorbell announces it.
    ///
    /// # Errors
    /// As [`post`](Self::post), for the first request that fails.
    #[inline(always)]
    pub fn post_many_signal<W, F>(&mut self, count: u16, signal: u16, make: F) -> (u16, Result<()>)
    where
        W: AsSendWr,
        F: FnMut(u16) -> W,
    {
        self.post_many_from(0, count, signal, make, None, |_| {})
    }

    /// [`post_many`](Self::post_many) for a caller that announces every WQE as soon as it is
    /// written, as one `ibv_post_send` call per request does: `announce(dbrec)` runs after each
    /// WQE's bytes are in the ring, with the send doorbell-record word for the producer counter
    /// after it (what [`dbrec`](Self::dbrec) returns then: `htobe32(pc & 0xffff)`, as bytes);
    /// the caller's barrier and record store go there. The same WQE bytes and counters as
    /// `count` calls of [`post`](Self::post), each followed by `announce(self.dbrec())`.
    ///
    /// The difference with `post` in a loop is in the generated code: the WQEs that fit in the
    /// free window are written by one loop over their slots (see
    /// [`post_many`](Self::post_many)) with the counters updated once, where a `post` per
    /// request checks the window and updates the counters for each.
    ///
    /// # Errors
    /// As [`post`](Self::post), for the first request that fails (`announce` has run for every
    /// WQE before it).
    #[inline(always)]
    pub fn post_many_announced<W, F, A>(
        &mut self,
        count: u16,
        make: F,
        announce: A,
    ) -> (u16, Result<()>)
    where
        W: AsSendWr,
        F: FnMut(u16) -> W,
        A: FnMut([u8; 4]),
    {
        self.post_many_from(0, count, NO_SIGNAL, make, None, announce)
    }

    /// [`post_many_signal`](Self::post_many_signal) from request `done` on, `other` (when
    /// given) being request `done` already built; `announce` as in
    /// [`post_many_announced`](Self::post_many_announced) (with `signal` = [`NO_SIGNAL`]
    /// only: the signal is set after a run, which must not follow an announce).
    #[inline(always)]
    pub(crate) fn post_many_from<W, F, A>(
        &mut self,
        mut done: u16,
        count: u16,
        signal: u16,
        mut make: F,
        mut other: Option<W>,
        mut announce: A,
    ) -> (u16, Result<()>)
    where
        W: AsSendWr,
        F: FnMut(u16) -> W,
        A: FnMut([u8; 4]),
    {
        loop {
            if other.is_none() {
                // One-WQEBB WQEs that fit in the free window, written back to back.
                let room = (self.window.len() / WQEBB_CELLS) as u16;
                let n = (count - done).min(room);
                if n > 0 {
                    let r = self.run(done, n, signal, &mut make, &mut announce);
                    self.account(&r);
                    done += r.k;
                    other = r.other;
                }
            }
            if done == count {
                return (count, Ok(()));
            }
            // A WQE the run could not take, the ring end, or a full ring: the general way,
            // out of line.
            let item = match other.take() {
                Some(item) => item,
                None => make(done),
            };
            match self.post_cold(&item.send_wr(), done == signal) {
                Ok(_) => {
                    announce(self.dbrec());
                    done += 1;
                }
                Err(e) => return (done, Err(e)),
            }
        }
    }

    /// For the [`Batcher`](super::Batcher): when nothing is pending and `count` one-WQEBB
    /// slots are free before the ring end (one comparison), writes requests `make(0)`, …,
    /// `make(count - 1)` there as one run, WQE `signal` signaled as in
    /// [`post_many_signal`](Self::post_many_signal), and returns what the doorbell for them
    /// needs — the first WQE index, the producer counter after them and the first 8 bytes of
    /// the last control segment as in memory (what [`take_batch`](Self::take_batch) would
    /// report; no inline data, gather lists only) — nothing left pending.
    /// Otherwise a [`Partial`]: the first `k` WQEs were written and are pending, and `other`
    /// is request `k` when the run stopped at it (not a valid one-WQEBB WQE, or inline data);
    /// `k` = 0 and no request when the window was too small or WQEs were pending (nothing
    /// written).
    #[inline(always)]
    pub(crate) fn post_whole_batch<W, F>(
        &mut self,
        count: u16,
        signal: u16,
        make: &mut F,
    ) -> core::result::Result<WholeBatch, Partial<W>>
    where
        W: AsSendWr,
        F: FnMut(u16) -> W,
    {
        if self.batch_nreq != 0 || count as usize * WQEBB_CELLS > self.window.len() {
            return Err(Partial { k: 0, other: None });
        }
        let first = self.pc as u16;
        let r = self.run(0, count, signal, make, &mut |_| {});
        if r.k != count || r.inline {
            super::wqe::cold();
            self.account(&r);
            return Err(Partial {
                k: r.k,
                other: r.other,
            });
        }
        // Nothing pending before or after: the batch state stays empty, starting at `pc`.
        self.batch_first = self.pc;
        Ok(WholeBatch {
            first_index: first,
            end_index: self.pc as u16,
            last_ctrl: r.head.to_be_bytes(),
        })
    }

    /// [`post`](Self::post) out of line, the request signaled when `signal`.
    #[inline(never)]
    fn post_cold(&mut self, wr: &SendWr<'_>, signal: bool) -> Result<Posted> {
        if signal && !wr.flags.signaled {
            let mut w = *wr;
            w.flags.signaled = true;
            self.post(&w)
        } else {
            self.post(wr)
        }
    }

    /// Writes requests `make(done)`, …, `make(done + n - 1)` as one-WQEBB WQEs into the next
    /// `n` slots, which the caller has checked are free and before the ring end, with one
    /// bounds check for all of them; the producer counter and position are updated once
    /// (the pending batch is the caller's: [`account`](Self::account)). Stops early at a
    /// request that is not a valid one-WQEBB WQE.
    #[inline(always)]
    fn run<W, F, A>(
        &mut self,
        done: u16,
        n: u16,
        signal: u16,
        make: &mut F,
        announce: &mut A,
    ) -> Run<W>
    where
        W: AsSendWr,
        F: FnMut(u16) -> W,
        A: FnMut([u8; 4]),
    {
        // (The caller checked that `n` WQEBBs fit: `rest` is what the window keeps after a
        // whole run.)
        let (window, rest) = self
            .window
            .split_at_checked(n as usize * WQEBB_CELLS)
            .unwrap_or((self.window, &[]));
        let (qp_type, qpn, bits) = (self.qp_type, self.qpn, self.signal_bits);
        // The WQE index in bits 55..40 of the control head, added rather than ORed (the
        // head of `ctrl(0, ..)` has zeros there) so that it is carried from WQE to WQE by
        // one addition. The run ends at the ring end at the latest, and 2^16 is a multiple
        // of the ring size, so `pc + k` stays below 2^16 inside it: no carry into opmod.
        // (A local: `announce` may store to memory the compiler cannot tell from `self`.)
        let pc = self.pc;
        let mut idx_bits = (pc as u64) << 40;
        // The last WQE's head without its index (added after the run: for WQEs of one
        // shape a constant, not a second running sum).
        let mut head = 0;
        let mut inline = false;
        let mut k: u16 = 0;
        let mut other = None;
        for slot in slots(window) {
            let item = make(done + k);
            let wr = item.send_wr();
            let ds = match wr.check(qp_type) {
                Ok(ds) if ds * DS_LEN <= WQEBB_LEN => ds,
                // Several WQEBBs, or invalid: `post` takes it (and reports it).
                _ => {
                    super::wqe::cold();
                    other = Some(item);
                    break;
                }
            };
            let ctrl = wr.ctrl(0, qpn, ds, bits);
            let h = ctrl.head();
            let mut wqe = slot.get(..ds * DS_LEN / WORD).unwrap_or(slot);
            wr.write_flat_words(&mut wqe, h + idx_bits, ctrl.tail());
            head = h;
            inline |= matches!(wr.payload, super::Payload::Inline(b) if !b.is_empty());
            k += 1;
            idx_bits += 1 << 40;
            // (Nothing when the caller announces nothing: the closure is empty.)
            announce(((pc + k as u32) & 0xffff).to_be_bytes());
        }
        // The signaled WQE, when it is in this run: `CQ_UPDATE` in its `fm_ce_se` byte (ctrl
        // byte 11), ORed into the control tail word just stored.
        let s = signal.wrapping_sub(done);
        if s < k {
            let tail = s as usize * WQEBB_LEN + 8;
            let t = u64::from_be_bytes(cells::get(window, tail));
            cells::set_be(window, tail, t | CTRL_TAIL_CQ_UPDATE);
        }
        // (Meaningful only when k > 0.)
        let last_idx = (self.pc as u64 + k as u64).wrapping_sub(1);
        // A run ends at the ring end at the latest, so at 2^16 at the latest.
        self.pc = (self.pc + k as u32) & 0xffff;
        self.window = if k == n {
            rest
        } else {
            self.window.get(k as usize * WQEBB_CELLS..).unwrap_or(&[])
        };
        Run {
            k,
            head: head.wrapping_add(last_idx << 40),
            inline,
            other,
        }
    }

    /// Adds the WQEs of `r` to the pending batch.
    #[inline(always)]
    fn account<W>(&mut self, r: &Run<W>) {
        if r.k > 0 {
            self.batch_nreq += r.k as u32;
            self.last_head = r.head;
            self.batch_inline |= r.inline;
        }
    }

    /// Retires every WQE up to and including the one at `wqe_counter` (a CQE's
    /// `wqe_counter`); returns the WQEBBs freed.
    ///
    /// # Errors
    /// [`Error::NotOutstanding`] when no outstanding WQE starts at `wqe_counter`.
    #[inline]
    pub fn retire(&mut self, wqe_counter: u16) -> Result<u16> {
        let outstanding = self.outstanding();
        if wqe_counter.wrapping_sub(self.cc as u16) >= outstanding {
            return Err(Error::NotOutstanding { wqe_counter });
        }
        let off = (wqe_counter & self.mask) as usize * WQEBB_LEN;
        let mut b = [0u8; 16];
        cells::copy_out(self.ring, off, &mut b);
        let c = CtrlSeg::new_unchecked(&b[..]);
        let ds = c.ds() as usize;
        if c.wqe_index() != wqe_counter || ds == 0 {
            return Err(Error::NotOutstanding { wqe_counter });
        }
        let end = wqe_counter.wrapping_add(wqebbs_for_ds(ds) as u16);
        let freed = end.wrapping_sub(self.cc as u16);
        self.cc = end as u32;
        self.rewindow();
        Ok(freed)
    }

    /// The WQEs posted since the last call, for one doorbell (rdma-core rings once per
    /// `ibv_post_send` call, with the last WQE's control segment); `None` when nothing was
    /// posted. Resets the batch.
    #[inline]
    pub fn take_batch(&mut self) -> Option<SendBatch> {
        if self.batch_nreq == 0 {
            return None;
        }
        let b = SendBatch {
            first_index: self.batch_first as u16,
            end_index: self.pc as u16,
            nreq: self.batch_nreq as u16,
            inline: self.batch_inline,
            last_index: (self.last_head >> 40) as u16,
            last_ds: self.last_head as u8 & DS_MASK,
            last_ctrl: self.last_head.to_be_bytes(),
        };
        self.batch_nreq = 0;
        self.batch_inline = false;
        self.batch_first = self.pc;
        Some(b)
    }

    /// WQEs posted since the last [`take_batch`](Self::take_batch) (the next doorbell's
    /// `nreq`).
    #[inline]
    pub fn batch_len(&self) -> u16 {
        self.batch_nreq as u16
    }

    /// The producer counter: WQE index of the next WQE (what the doorbell record carries).
    #[inline]
    pub fn pc(&self) -> u16 {
        self.pc as u16
    }

    /// The consumer counter: first WQEBB not yet retired.
    #[inline]
    pub fn cc(&self) -> u16 {
        self.cc as u16
    }

    /// WQEBBs posted and not yet retired.
    #[inline]
    pub fn outstanding(&self) -> u16 {
        (self.pc as u16).wrapping_sub(self.cc as u16)
    }

    /// WQEBBs free for new WQEs.
    #[inline]
    pub fn free(&self) -> u16 {
        self.wqebbs - self.outstanding()
    }

    /// Ring size in WQEBBs.
    #[inline]
    pub fn wqebbs(&self) -> u16 {
        self.wqebbs
    }

    /// QP number written into every control segment.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// QP type.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Byte offset of WQE index `wqe_index` in the ring.
    #[inline]
    pub fn offset_of(&self, wqe_index: u16) -> usize {
        (wqe_index & self.mask) as usize * WQEBB_LEN
    }

    /// Ring size in bytes (`wqebbs() * 64`).
    #[inline]
    pub fn ring_len(&self) -> usize {
        cells::byte_len(self.ring)
    }

    /// Copies the ring's first `min(out.len(), ring_len())` bytes into `out` (the WQEs as the
    /// device reads them, big-endian as written); returns how many. While the writer lives
    /// this is how the ring's bytes are read; once it is dropped the buffer given to
    /// [`new`](Self::new) holds the same bytes.
    pub fn copy_ring(&self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.ring_len());
        cells::copy_out(self.ring, 0, &mut out[..n]);
        n
    }

    /// The 64 bytes of the WQEBB at ring slot `wqe_index & (wqebbs - 1)`, as in memory (what a
    /// device's DMA read of that WQEBB returns).
    pub fn read_wqebb(&self, wqe_index: u16) -> [u8; WQEBB_LEN] {
        let mut b = [0u8; WQEBB_LEN];
        cells::copy_out(self.ring, self.offset_of(wqe_index), &mut b);
        b
    }

    /// The whole ring, copied (for the tests).
    #[cfg(test)]
    pub(crate) fn ring_vec(&self) -> std::vec::Vec<u8> {
        let mut v = std::vec![0; self.ring_len()];
        self.copy_ring(&mut v);
        v
    }

    /// The send doorbell-record word (QP dbrec dword 1, `MLX5_SND_DBR`):
    /// `htobe32(pc & 0xffff)`, as bytes.
    #[inline]
    pub fn dbrec(&self) -> [u8; 4] {
        self.pc.to_be_bytes()
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mlx5::decode::decode_wqe;
    use crate::mlx5::wqe::{Payload, SendFlags, Sge, WrOp};

    fn write(sges: &[Sge]) -> SendWr<'_> {
        SendWr {
            payload: Payload::Gather(sges),
            ..SendWr::new(WrOp::RdmaWrite {
                raddr: 0xabc,
                rkey: 7,
            })
        }
    }

    #[test]
    fn test_ring_rules() {
        assert_eq!(
            SqWriter::new(&mut [0u8; 96], 1, QpType::Rc).unwrap_err(),
            Error::BadRing
        );
        assert_eq!(
            SqWriter::new(&mut [0u8; 192], 1, QpType::Rc).unwrap_err(),
            Error::BadRing
        );
        assert_eq!(
            SqWriter::new(&mut [], 1, QpType::Rc).unwrap_err(),
            Error::BadRing
        );
        assert_eq!(
            SqWriter::new(&mut [0u8; 64], 1 << 24, QpType::Rc).unwrap_err(),
            Error::BadField
        );
    }

    #[test]
    fn test_full_and_retire() {
        let mut ring = [0u8; 4 * 64];
        let mut sq = SqWriter::new(&mut ring, 5, QpType::Rc).unwrap();
        let sge = [Sge {
            addr: 1,
            lkey: 2,
            len: 3,
        }];
        for i in 0..4 {
            assert_eq!(sq.post(&write(&sge)).unwrap().wqe_index, i);
        }
        assert_eq!(
            sq.post(&write(&sge)),
            Err(Error::RingFull { needed: 1, free: 0 })
        );
        assert_eq!(sq.retire(4), Err(Error::NotOutstanding { wqe_counter: 4 }));
        assert_eq!(sq.retire(1), Ok(2));
        assert_eq!(sq.free(), 2);
        assert_eq!(sq.retire(1), Err(Error::NotOutstanding { wqe_counter: 1 }));
        let b = sq.take_batch().unwrap();
        assert_eq!(
            (b.first_index, b.end_index, b.nreq, b.last_index),
            (0, 4, 4, 3)
        );
        assert!(sq.take_batch().is_none());
        assert_eq!(sq.dbrec(), [0, 0, 0, 4]);
    }

    #[test]
    fn test_wrap_and_counter_wrap() {
        let mut ring = [0u8; 4 * 64];
        // Start 2 WQEBBs before the 16-bit wrap and 2 slots before the ring end.
        let mut sq = SqWriter::new(&mut ring, 5, QpType::Rc)
            .unwrap()
            .with_counter(0xfffe);
        let sge = [Sge {
            addr: 1,
            lkey: 2,
            len: 3,
        }; 6];
        let p = sq.post(&write(&sge)).unwrap(); // DS 8 = 2 WQEBBs
        assert_eq!((p.wqe_index, p.ds, p.wqebbs), (0xfffe, 8, 2));
        let inl = [0x5au8; 100]; // ctrl + raddr + inline(104 B -> 112) = 144 B = 3 WQEBBs
        let wr = SendWr {
            payload: Payload::Inline(&inl),
            ..SendWr::new(WrOp::RdmaWrite { raddr: 1, rkey: 2 })
        };
        assert_eq!(sq.post(&wr), Err(Error::RingFull { needed: 3, free: 2 }));
        assert_eq!(sq.retire(0xfffe), Ok(2));
        let p = sq.post(&wr).unwrap();
        assert_eq!((p.wqe_index, p.wqebbs), (0, 3));
        assert_eq!(sq.pc(), 3);
        {
            let r = sq.ring_vec();
            let d = decode_wqe(&r, sq.offset_of(0), QpType::Rc).unwrap();
            assert!(d.segments.iter().copied().eq(wr.segments()));
        }
        let p = sq.retire(0).unwrap();
        assert_eq!(p, 3);
        let mut ring2 = [0u8; 4 * 64];
        let mut sq2 = SqWriter::new(&mut ring2, 5, QpType::Rc)
            .unwrap()
            .with_counter(3);
        let p = sq2.post(&wr).unwrap(); // slot 3, continues at slots 0 and 1
        assert_eq!(p.wqe_index, 3);
        let r2 = sq2.ring_vec();
        let d = decode_wqe(&r2, sq2.offset_of(3), QpType::Rc).unwrap();
        assert!(d.segments.iter().copied().eq(wr.segments()));
        match d.segments[1] {
            crate::mlx5::Segment::Inline(b) => {
                assert_eq!(b.head.len(), 64 - 32 - 4);
                assert_eq!(b.tail.len(), 100 - 28);
            }
            _ => panic!("expected inline"),
        }
    }

    #[test]
    fn test_post_many_matches_post() {
        // One-WQEBB WRITEs, 3-WQEBB inline SENDs, an invalid request (inline on READ), the
        // ring end and a full ring: the same bytes, counters and errors as one post each.
        let inl = [0x5au8; 100];
        let sge = [Sge {
            addr: 0x1000,
            lkey: 7,
            len: 64,
        }];
        let make = |k: u16| -> SendWr<'_> {
            match k % 5 {
                3 => SendWr {
                    payload: Payload::Inline(&inl),
                    ..SendWr::new(WrOp::Send)
                },
                4 if k == 9 => SendWr {
                    payload: Payload::Inline(&inl[..4]),
                    ..SendWr::new(WrOp::RdmaRead { raddr: 1, rkey: 2 })
                },
                _ => SendWr {
                    flags: SendFlags {
                        signaled: k % 2 == 0,
                        ..SendFlags::default()
                    },
                    ..write(&sge)
                },
            }
        };
        let mut ring_a = [0u8; 16 * 64];
        let mut ring_b = [0u8; 16 * 64];
        let mut a = SqWriter::new(&mut ring_a, 5, QpType::Rc)
            .unwrap()
            .with_counter(0xfffa);
        let mut b = SqWriter::new(&mut ring_b, 5, QpType::Rc)
            .unwrap()
            .with_counter(0xfffa);
        let mut next = 0u16;
        for count in [4u16, 7, 3, 12] {
            let (n, r) = b.post_many(count, |j| make(next + j));
            let mut want = (count, Ok(()));
            for j in 0..count {
                if let Err(e) = a.post(&make(next + j)) {
                    want = (j, Err(e));
                    break;
                }
            }
            assert_eq!((n, r), want, "count {count} from {next}");
            assert_eq!(a.ring_vec(), b.ring_vec());
            assert_eq!((a.pc(), a.free()), (b.pc(), b.free()));
            assert_eq!(a.take_batch(), b.take_batch());
            next += n + u16::from(n < count);
            if a.free() < 6 {
                // Retire everything (the last WQE may span WQEBBs: find its start).
                let pc = a.pc();
                let start = (1..=16u16)
                    .map(|d| pc.wrapping_sub(d))
                    .find(|&i| a.retire(i).is_ok())
                    .unwrap();
                b.retire(start).unwrap();
            }
        }
    }

    #[test]
    fn test_post_many_announced_matches_post_and_dbrec() {
        // One-WQEBB WRITEs and 3-WQEBB inline SENDs, through the ring end, the 16-bit counter
        // wrap and a full ring: the same bytes and counters as `post` per request, and one
        // announce per posted WQE with the record `dbrec()` gives right after it.
        let inl = [0x5au8; 100];
        let sge = [Sge {
            addr: 0x1000,
            lkey: 7,
            len: 64,
        }];
        let make = |k: u16| -> SendWr<'_> {
            if k % 7 == 3 {
                SendWr {
                    payload: Payload::Inline(&inl),
                    ..SendWr::new(WrOp::Send)
                }
            } else {
                write(&sge)
            }
        };
        let mut ring_a = [0u8; 16 * 64];
        let mut ring_b = [0u8; 16 * 64];
        let mut a = SqWriter::new(&mut ring_a, 5, QpType::Rc)
            .unwrap()
            .with_counter(0xfff6);
        let mut b = SqWriter::new(&mut ring_b, 5, QpType::Rc)
            .unwrap()
            .with_counter(0xfff6);
        let mut next = 0u16;
        for count in [5u16, 9, 2, 14] {
            let mut want_rec: heapless::Vec<[u8; 4], 16> = heapless::Vec::new();
            let mut want = (count, Ok(()));
            for j in 0..count {
                match a.post(&make(next + j)) {
                    Ok(_) => want_rec.push(a.dbrec()).unwrap(),
                    Err(e) => {
                        want = (j, Err(e));
                        break;
                    }
                }
            }
            let mut got_rec: heapless::Vec<[u8; 4], 16> = heapless::Vec::new();
            let got =
                b.post_many_announced(count, |j| make(next + j), |r| got_rec.push(r).unwrap());
            assert_eq!(got, want, "count {count} from {next}");
            assert_eq!(got_rec, want_rec);
            assert_eq!(a.ring_vec(), b.ring_vec());
            assert_eq!((a.pc(), a.free()), (b.pc(), b.free()));
            assert_eq!(a.take_batch(), b.take_batch());
            next += got.0 + u16::from(got.0 < count);
            if a.free() < 8 {
                let pc = a.pc();
                let start = (1..=16u16)
                    .map(|d| pc.wrapping_sub(d))
                    .find(|&i| a.retire(i).is_ok())
                    .unwrap();
                b.retire(start).unwrap();
            }
        }
    }

    #[test]
    fn test_oversize() {
        let mut ring = [0u8; 2 * 64];
        let mut sq = SqWriter::new(&mut ring, 5, QpType::Rc).unwrap();
        let sge = [Sge {
            addr: 1,
            lkey: 2,
            len: 3,
        }; 7]; // DS 9 -> 3 WQEBBs > 2
        assert_eq!(sq.post(&write(&sge)), Err(Error::Oversize { ds: 9 }));
    }
}
