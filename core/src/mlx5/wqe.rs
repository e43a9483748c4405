//! A send work request in mlx5 terms, and the segments rdma-core's mlx5 provider writes for it.
//!
//! [`SendWr`] is the mlx5 counterpart of a verbs `struct ibv_send_wr`: an operation
//! ([`WrOp`]), send flags, the QP-type segment (datagram for UD, Ethernet for raw packet) and
//! the payload (a gather list of data segments, or inline bytes). [`SendWr::segments`] yields
//! the segments after the control segment in exactly the order and form of rdma-core
//! `providers/mlx5/qp.c` `_mlx5_post_send`:
//!
//! | QP type / opcode | segments after ctrl |
//! |---|---|
//! | RC/UC SEND, SEND_IMM, SEND_INVAL | data × n (zero-length entries skipped) or one inline |
//! | RC/UC RDMA_WRITE, WRITE_IMM | raddr, then data × n or inline |
//! | RC RDMA_READ | raddr, data × n |
//! | RC ATOMIC_CS / ATOMIC_FA | raddr, atomic, data × n with byte count 8 |
//! | RC NOP | none |
//! | UD SEND, SEND_IMM | datagram (48 B), then data × n or inline |
//! | raw packet SEND, LSO | Ethernet (inline headers), then data × n or inline |
//!
//! DS = 1 (ctrl) + the segments' 16-byte units; the WQE consumes `ceil(DS / 4)` WQEBBs and DS
//! may not exceed 63 (so a WQE is at most 16 WQEBBs = 1 KiB).

use super::atomic::{AtomicRepr, AtomicSeg};
use super::bytes::SplitBytes;
use super::ctrl::{CtrlRepr, FmCeSe};
use super::data::{DataRepr, DataSeg};
use super::datagram::{self, DatagramRepr, DatagramSeg};
use super::eth::{self, EthRepr, EthSeg};
use super::inline::{self, InlineSeg};
use super::opcode::Opcode;
use super::raddr::{RaddrRepr, RaddrSeg};
use super::ring::{self, SegSink};
use super::{wqebbs_for_ds, Error, Result, ATOMIC_SIZE, DS_LEN, MAX_DS};

/// One gather entry of a send (verbs `struct ibv_sge`): `len` bytes at `addr` in the memory
/// region of `lkey`. Entries of length 0 are skipped, as rdma-core does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Sge {
    /// Local address of the first byte.
    pub addr: u64,
    /// L_Key of the memory region.
    pub lkey: u32,
    /// Length in bytes; below 2^31.
    pub len: u32,
}

/// The QP type, which decides the segment right after the control segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QpType {
    /// Reliable connected.
    Rc,
    /// Unreliable connected (no READ, no atomics).
    Uc,
    /// Unreliable datagram: a datagram segment follows the control segment.
    Ud,
    /// Raw packet (Ethernet): an Ethernet segment follows the control segment.
    RawPacket,
}

/// The operation of a send work request, with the values that go into the control,
/// remote-address and atomic segments.
///
/// `repr(C)`, with every variant's 32-bit fields first: each field then has the same offset
/// and width in every variant that has it (rkey / imm at 8, raddr at 16), so that once the
/// post path is inlined the compiler keeps them whole in registers instead of splitting a
/// 64-bit address around another variant's 32-bit field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(C)]
pub enum WrOp {
    /// NOP: a control segment only.
    Nop,
    /// SEND.
    Send,
    /// SEND with immediate; `imm` is the big-endian value of ctrl bytes 12–15.
    SendImm {
        /// Immediate data (verbs `imm_data` is `imm.to_be()`).
        imm: u32,
    },
    /// SEND with invalidate of `invalidate_rkey` (rdma-core stores `htobe32(rkey)`).
    SendInval {
        /// The rkey the responder invalidates.
        invalidate_rkey: u32,
    },
    /// RDMA WRITE to `raddr` / `rkey`.
    RdmaWrite {
        /// Remote key.
        rkey: u32,
        /// Remote address.
        raddr: u64,
    },
    /// RDMA WRITE with immediate.
    RdmaWriteImm {
        /// Remote key.
        rkey: u32,
        /// Immediate data as in [`WrOp::SendImm`].
        imm: u32,
        /// Remote address.
        raddr: u64,
    },
    /// RDMA READ from `raddr` / `rkey` into the gather list.
    RdmaRead {
        /// Remote key.
        rkey: u32,
        /// Remote address.
        raddr: u64,
    },
    /// 8-byte compare-and-swap at `raddr`.
    AtomicCs {
        /// Remote key.
        rkey: u32,
        /// Remote address (8-byte aligned).
        raddr: u64,
        /// Compare value.
        compare: u64,
        /// Swap value.
        swap: u64,
    },
    /// 8-byte fetch-and-add at `raddr`.
    AtomicFa {
        /// Remote key.
        rkey: u32,
        /// Remote address (8-byte aligned).
        raddr: u64,
        /// Value to add.
        add: u64,
    },
    /// Large send offload (raw-packet QPs; MSS and headers in the Ethernet segment).
    Lso,
}

impl WrOp {
    /// The device opcode (`MLX5_OPCODE_*`; rdma-core qp.c `mlx5_ib_opcode[]`).
    #[inline]
    pub const fn opcode(&self) -> Opcode {
        match self {
            WrOp::Nop => Opcode::Nop,
            WrOp::Send => Opcode::Send,
            WrOp::SendImm { .. } => Opcode::SendImm,
            WrOp::SendInval { .. } => Opcode::SendInval,
            WrOp::RdmaWrite { .. } => Opcode::RdmaWrite,
            WrOp::RdmaWriteImm { .. } => Opcode::RdmaWriteImm,
            WrOp::RdmaRead { .. } => Opcode::RdmaRead,
            WrOp::AtomicCs { .. } => Opcode::AtomicCs,
            WrOp::AtomicFa { .. } => Opcode::AtomicFa,
            WrOp::Lso => Opcode::Lso,
        }
    }

    /// The control segment's `imm` word (rdma-core qp.c `send_ieth`): the immediate, the rkey
    /// to invalidate, or 0.
    #[inline]
    pub const fn imm(&self) -> u32 {
        match *self {
            WrOp::SendImm { imm } | WrOp::RdmaWriteImm { imm, .. } => imm,
            WrOp::SendInval { invalidate_rkey } => invalidate_rkey,
            _ => 0,
        }
    }

    /// The remote-address segment, for RDMA and atomic operations.
    #[inline]
    pub const fn raddr(&self) -> Option<RaddrRepr> {
        match *self {
            WrOp::RdmaWrite { raddr, rkey }
            | WrOp::RdmaWriteImm { raddr, rkey, .. }
            | WrOp::RdmaRead { raddr, rkey }
            | WrOp::AtomicCs { raddr, rkey, .. }
            | WrOp::AtomicFa { raddr, rkey, .. } => Some(RaddrRepr { raddr, rkey }),
            _ => None,
        }
    }

    /// The atomic segment (rdma-core qp.c `_set_atomic_seg`; fetch-add's compare is 0).
    #[inline]
    pub const fn atomic(&self) -> Option<AtomicRepr> {
        match *self {
            WrOp::AtomicCs { compare, swap, .. } => Some(AtomicRepr {
                swap_add: swap,
                compare,
            }),
            WrOp::AtomicFa { add, .. } => Some(AtomicRepr {
                swap_add: add,
                compare: 0,
            }),
            _ => None,
        }
    }

    #[inline]
    const fn allowed_on(&self, qp_type: QpType) -> bool {
        match qp_type {
            QpType::Rc => !matches!(self, WrOp::Lso),
            QpType::Uc => matches!(
                self,
                WrOp::Nop
                    | WrOp::Send
                    | WrOp::SendImm { .. }
                    | WrOp::RdmaWrite { .. }
                    | WrOp::RdmaWriteImm { .. }
            ),
            QpType::Ud => matches!(self, WrOp::Send | WrOp::SendImm { .. }),
            QpType::RawPacket => matches!(self, WrOp::Send | WrOp::Lso),
        }
    }
}

/// Send flags (verbs `IBV_SEND_SIGNALED`, `IBV_SEND_SOLICITED`, `IBV_SEND_FENCE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SendFlags {
    /// Generate a CQE for this WQE (`MLX5_WQE_CTRL_CQ_UPDATE`).
    pub signaled: bool,
    /// Set the solicited-event bit (`MLX5_WQE_CTRL_SOLICITED`).
    pub solicited: bool,
    /// Wait for earlier RDMA READs and atomics (`MLX5_WQE_CTRL_FENCE`).
    pub fence: bool,
}

impl SendFlags {
    /// The `fm_ce_se` byte for these flags.
    #[inline]
    pub const fn fm_ce_se(self) -> FmCeSe {
        FmCeSe::from_flags(self.signaled, self.solicited, self.fence)
    }
}

/// The payload of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A gather list: one data segment per non-empty entry.
    Gather(&'a [Sge]),
    /// Bytes copied into the WQE (verbs `IBV_SEND_INLINE`); empty = no segment.
    Inline(&'a [u8]),
}

impl Payload<'_> {
    /// No payload.
    pub const NONE: Payload<'static> = Payload::Gather(&[]);

    /// `true` when the payload contributes no segment.
    pub fn is_empty(&self) -> bool {
        match self {
            Payload::Gather(s) => s.iter().all(|s| s.len == 0),
            Payload::Inline(b) => b.is_empty(),
        }
    }
}

/// The segment that the QP type puts right after the control segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransportSeg<'a> {
    /// RC and UC: none.
    None,
    /// UD: the address vector.
    Datagram(DatagramRepr),
    /// Raw packet: the Ethernet segment (its inline headers are the packet's first bytes;
    /// the gather list then starts after them).
    Eth(EthRepr<'a>),
}

/// A send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// The operation.
    pub op: WrOp,
    /// Signaled / solicited / fence.
    pub flags: SendFlags,
    /// Datagram or Ethernet segment (must match the QP type).
    pub transport: TransportSeg<'a>,
    /// Gather list or inline bytes.
    pub payload: Payload<'a>,
}

/// One segment after the control segment, as written or as decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment<'a> {
    /// Remote address (16 B).
    Raddr(RaddrRepr),
    /// Atomic operands (16 B).
    Atomic(AtomicRepr),
    /// A data (scatter/gather) segment (16 B).
    Data(DataRepr),
    /// Inline data (`align(4 + len, 16)` B), possibly split at the ring end.
    Inline(SplitBytes<'a>),
    /// Ethernet segment (16 B or more).
    Eth(EthRepr<'a>),
    /// Datagram / address vector (48 B).
    Datagram(DatagramRepr),
    /// 16 bytes of a segment whose layout the decoder does not model (UMR, PSV, ...).
    Opaque([u8; DS_LEN]),
}

impl Segment<'_> {
    /// Length in bytes (a multiple of 16).
    pub const fn len(&self) -> usize {
        match self {
            Segment::Raddr(_) | Segment::Atomic(_) | Segment::Data(_) | Segment::Opaque(_) => {
                DS_LEN
            }
            Segment::Inline(b) => inline::seg_len(b.len()),
            Segment::Eth(e) => e.buffer_len(),
            Segment::Datagram(_) => datagram::LEN,
        }
    }

    /// Always `false`: every segment has at least 16 bytes (for clippy's `len` convention).
    pub const fn is_empty(&self) -> bool {
        false
    }

    /// DS units (16-byte units).
    pub const fn ds(&self) -> usize {
        self.len() / DS_LEN
    }

    /// Writes the segment into `ring` at the 16-aligned offset `off`, continuing at offset 0
    /// past the end, and returns the offset after it. The caller guarantees the ring is a
    /// multiple of 16 bytes and at least as long as the segment.
    pub(crate) fn write(&self, ring: &mut [u8], off: usize) -> usize {
        match self {
            Segment::Raddr(r) => {
                r.emit(&mut RaddrSeg::new_unchecked(ring::chunk_mut(ring, off)));
                ring::advance(ring.len(), off, DS_LEN)
            }
            Segment::Atomic(a) => {
                a.emit(&mut AtomicSeg::new_unchecked(ring::chunk_mut(ring, off)));
                ring::advance(ring.len(), off, DS_LEN)
            }
            Segment::Data(d) => {
                d.emit(&mut DataSeg::new_unchecked(ring::chunk_mut(ring, off)));
                ring::advance(ring.len(), off, DS_LEN)
            }
            Segment::Opaque(b) => {
                ring::chunk_mut(ring, off).copy_from_slice(b);
                ring::advance(ring.len(), off, DS_LEN)
            }
            Segment::Datagram(d) => {
                let mut tmp = [0u8; datagram::LEN];
                d.emit(&mut DatagramSeg::new_unchecked(&mut tmp[..]));
                ring::put(ring, off, &tmp)
            }
            Segment::Inline(b) => {
                InlineSeg::new_unchecked(ring::chunk_mut(ring, off)).set_inline_len(b.len() as u32);
                let mut o = ring::advance(ring.len(), off, inline::LEN);
                o = ring::put(ring, o, b.head);
                o = ring::put(ring, o, b.tail);
                let pad = inline::seg_len(b.len()) - inline::LEN - b.len();
                ring::zero(ring, o, pad)
            }
            Segment::Eth(e) => {
                let c = ring::chunk_mut(ring, off);
                c.fill(0);
                e.emit_fixed(&mut EthSeg::new_unchecked(c));
                let mut o = ring::advance(ring.len(), off, eth::INLINE_HDR_OFFSET);
                o = ring::put(ring, o, e.inline_hdr.head);
                o = ring::put(ring, o, e.inline_hdr.tail);
                let h = e.inline_hdr.len();
                let pad = e.buffer_len() - eth::INLINE_HDR_OFFSET - h;
                ring::zero(ring, o, pad)
            }
        }
    }
}

/// Iterator over the segments of a [`SendWr`] after the control segment
/// (see [`SendWr::segments`]).
#[derive(Debug, Clone)]
pub struct Segments<'w, 'a> {
    wr: &'w SendWr<'a>,
    stage: u8,
    idx: usize,
}

impl<'a> Iterator for Segments<'_, 'a> {
    type Item = Segment<'a>;

    fn next(&mut self) -> Option<Segment<'a>> {
        loop {
            match self.stage {
                0 => {
                    self.stage = 1;
                    match self.wr.transport {
                        TransportSeg::None => {}
                        TransportSeg::Datagram(d) => return Some(Segment::Datagram(d)),
                        TransportSeg::Eth(e) => return Some(Segment::Eth(e)),
                    }
                }
                1 => {
                    self.stage = 2;
                    if let Some(r) = self.wr.op.raddr() {
                        return Some(Segment::Raddr(r));
                    }
                }
                2 => {
                    self.stage = 3;
                    if let Some(a) = self.wr.op.atomic() {
                        return Some(Segment::Atomic(a));
                    }
                }
                3 => match self.wr.payload {
                    Payload::Inline(b) => {
                        self.stage = 4;
                        if !b.is_empty() {
                            return Some(Segment::Inline(SplitBytes::new(b)));
                        }
                    }
                    Payload::Gather(list) => {
                        while let Some(s) = list.get(self.idx) {
                            self.idx += 1;
                            if s.len != 0 {
                                let byte_count = if self.wr.op.atomic().is_some() {
                                    ATOMIC_SIZE
                                } else {
                                    s.len
                                };
                                return Some(Segment::Data(DataRepr {
                                    byte_count,
                                    lkey: s.lkey,
                                    addr: s.addr,
                                }));
                            }
                        }
                        self.stage = 4;
                    }
                },
                _ => return None,
            }
        }
    }
}

impl<'a> SendWr<'a> {
    /// A work request with no flags, no QP-type segment and no payload.
    pub const fn new(op: WrOp) -> SendWr<'static> {
        SendWr {
            op,
            flags: SendFlags {
                signaled: false,
                solicited: false,
                fence: false,
            },
            transport: TransportSeg::None,
            payload: Payload::NONE,
        }
    }

    /// The segments after the control segment, in rdma-core's order (see the module docs).
    pub fn segments(&self) -> Segments<'_, 'a> {
        Segments {
            wr: self,
            stage: 0,
            idx: 0,
        }
    }

    /// WQE size in DS units, control segment included (not checked against the limit; see
    /// [`check`](Self::check)).
    #[inline]
    pub fn ds(&self) -> usize {
        let mut ds = 1 + self.transport_ds();
        if self.op.raddr().is_some() {
            ds += 1;
        }
        if self.op.atomic().is_some() {
            ds += 1;
        }
        ds += match self.payload {
            Payload::Inline([]) => 0,
            Payload::Inline(b) => inline::ds(b.len()),
            Payload::Gather(list) => list.iter().filter(|s| s.len != 0).count(),
        };
        ds
    }

    #[inline]
    fn transport_ds(&self) -> usize {
        match &self.transport {
            TransportSeg::None => 0,
            TransportSeg::Datagram(_) => datagram::LEN / DS_LEN,
            TransportSeg::Eth(e) => e.buffer_len() / DS_LEN,
        }
    }

    /// WQEBBs the WQE consumes: `ceil(ds / 4)`.
    pub fn wqebbs(&self) -> usize {
        wqebbs_for_ds(self.ds())
    }

    /// Checks that rdma-core would post this request on a QP of `qp_type` and that it fits in
    /// one WQE; returns its DS.
    ///
    /// # Errors
    /// - [`Error::Unsupported`]: the operation is not valid on `qp_type`, the QP-type segment
    ///   does not match `qp_type`, NOP with a payload, inline data on READ or an atomic, an
    ///   MSS on a non-LSO Ethernet segment.
    /// - [`Error::BadLength`]: a gather entry of 2^31 bytes or more.
    /// - [`Error::Oversize`]: more than 63 DS.
    #[inline(always)]
    pub fn check(&self, qp_type: QpType) -> Result<usize> {
        if !self.op.allowed_on(qp_type) {
            return Err(Error::Unsupported);
        }
        match (&self.transport, qp_type) {
            (TransportSeg::None, QpType::Rc | QpType::Uc) => {}
            (TransportSeg::Datagram(_), QpType::Ud) => {}
            (TransportSeg::Eth(e), QpType::RawPacket) => {
                if e.mss != 0 && !matches!(self.op, WrOp::Lso) {
                    return Err(Error::Unsupported);
                }
                if e.inline_hdr.len() > eth::MAX_INLINE_HDR {
                    return Err(Error::Oversize {
                        ds: 1 + eth::seg_len(e.inline_hdr.len()) / DS_LEN,
                    });
                }
            }
            _ => return Err(Error::Unsupported),
        }
        let mut ds = 1 + self.transport_ds();
        if self.op.raddr().is_some() {
            ds += 1;
        }
        let atomic = self.op.atomic().is_some();
        if atomic {
            ds += 1;
        }
        match self.payload {
            Payload::Inline([]) => {}
            Payload::Inline(b) => {
                let no_inline = matches!(
                    self.op,
                    WrOp::Nop
                        | WrOp::RdmaRead { .. }
                        | WrOp::AtomicCs { .. }
                        | WrOp::AtomicFa { .. }
                );
                if no_inline {
                    return Err(Error::Unsupported);
                }
                ds += inline::ds(b.len());
            }
            Payload::Gather(list) => {
                let mut n = 0;
                for s in list {
                    if s.len != 0 {
                        if !atomic && s.len >= 1 << 31 {
                            return Err(Error::BadLength);
                        }
                        n += 1;
                    }
                }
                if n != 0 && matches!(self.op, WrOp::Nop) {
                    return Err(Error::Unsupported);
                }
                ds += n;
            }
        }
        if ds > MAX_DS {
            return Err(Error::Oversize { ds });
        }
        Ok(ds)
    }

    /// The control segment for this request at `wqe_index` on QP `qpn`, with `extra` bits
    /// ORed into `fm_ce_se` (rdma-core's `sq_signal_bits`: CQ_UPDATE when every WQE is
    /// signaled). `ds` is the value [`check`](Self::check) returned.
    #[inline]
    pub fn ctrl(&self, wqe_index: u16, qpn: u32, ds: usize, extra: u8) -> CtrlRepr {
        CtrlRepr {
            opmod: 0,
            wqe_index,
            opcode: self.op.opcode(),
            qpn,
            ds: ds as u8,
            signature: 0,
            dci_stream_channel_id: 0,
            fm_ce_se: FmCeSe(self.flags.fm_ce_se().0 | extra),
            imm: self.op.imm(),
        }
    }

    /// Writes the WQE into `ring` at the 16-aligned byte offset `off`, wrapping at the ring
    /// end. The caller has run [`check`](Self::check) and guarantees the ring (a multiple of
    /// 16 bytes) is at least `ds * 16` bytes long.
    ///
    /// This is the hot path of [`SqWriter::post`](super::SqWriter::post). A WQE that does not
    /// reach the ring end (the common case) is written into a slice of exactly its size, each
    /// 16-byte segment as two big-endian words at offsets that are constants for a fixed
    /// work-request shape, so the compiler drops the bounds checks and emits two 8-byte
    /// stores per segment — no per-field stores, no zeroing. The segment order is the one
    /// [`segments`](Self::segments) yields (the tests check both agree, byte for byte,
    /// against rdma-core).
    #[inline(always)]
    pub(crate) fn write(&self, ring: &mut [u8], off: usize, ctrl: &CtrlRepr) {
        let len = ctrl.ds as usize * DS_LEN;
        match ring.get_mut(off..off + len) {
            Some(wqe) => self.write_flat(wqe, ctrl),
            None => {
                // Reaches the ring end: build it flat, then copy it around the wrap. (Kept
                // inline, so the hot path above never has to spill the request to memory
                // for an out-of-line call.)
                cold();
                let mut tmp = [0u8; MAX_DS * DS_LEN];
                let wqe = &mut tmp[..len.min(MAX_DS * DS_LEN)];
                self.write_flat(wqe, ctrl);
                ring::put(ring, off, wqe);
            }
        }
    }

    /// [`write`](Self::write) into `wqe`, exactly `ds * 16` bytes long.
    #[inline(always)]
    pub(crate) fn write_flat(&self, wqe: &mut [u8], ctrl: &CtrlRepr) {
        self.write_flat_words(wqe, ctrl.head(), ctrl.tail());
    }

    /// [`write_flat`](Self::write_flat) with the control segment given as its two
    /// big-endian words ([`CtrlRepr::head`], [`CtrlRepr::tail`]), into a byte slice or the
    /// send queue's cells (`wqe` exactly `ds * 16` bytes long).
    #[inline(always)]
    pub(crate) fn write_flat_words<O: SegSink + ?Sized>(&self, wqe: &mut O, head: u64, tail: u64) {
        wqe.put_words(0, (head, tail));
        let mut o = DS_LEN;
        match &self.transport {
            TransportSeg::None => {}
            TransportSeg::Datagram(d) => o = wqe.put_segment(&Segment::Datagram(*d), o),
            TransportSeg::Eth(e) => o = wqe.put_segment(&Segment::Eth(*e), o),
        }
        if o == 0 {
            return; // the transport segment reached the end: it was the last one
        }
        if let Some(r) = self.op.raddr() {
            wqe.put_words(o, r.words());
            o += DS_LEN;
            if let Some(a) = self.op.atomic() {
                wqe.put_words(o, a.words());
                o += DS_LEN;
            }
        }
        match self.payload {
            Payload::Inline([]) => {}
            Payload::Inline(b) => {
                wqe.put_segment(&Segment::Inline(SplitBytes::new(b)), o);
            }
            Payload::Gather([s]) => {
                // One entry (the common case): no loop.
                if s.len != 0 {
                    wqe.put_words(o, self.data_seg(s).words());
                }
            }
            Payload::Gather(list) => {
                for s in list {
                    if s.len != 0 {
                        wqe.put_words(o, self.data_seg(s).words());
                        o += DS_LEN;
                    }
                }
            }
        }
    }

    /// The data segment for gather entry `s` (an atomic's local segment has byte count 8).
    #[inline(always)]
    fn data_seg(&self, s: &Sge) -> DataRepr {
        DataRepr {
            byte_count: if self.op.atomic().is_some() {
                ATOMIC_SIZE
            } else {
                s.len
            },
            lkey: s.lkey,
            addr: s.addr,
        }
    }

    /// Encodes the WQE into the start of `buf` (no ring wrap) and returns its length,
    /// `ds * 16` bytes: the bytes rdma-core's mlx5 provider would write for the same work
    /// request at `wqe_index` on QP `qpn` of type `qp_type` (without `sq_sig_all`).
    ///
    /// # Errors
    /// Those of [`check`](Self::check); [`Error::Truncated`] when `buf` is shorter than the WQE.
    pub fn emit(&self, qp_type: QpType, wqe_index: u16, qpn: u32, buf: &mut [u8]) -> Result<usize> {
        let ds = self.check(qp_type)?;
        if qpn >= 1 << 24 {
            return Err(Error::BadField);
        }
        let n = ds * DS_LEN;
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        self.write(out, 0, &self.ctrl(wqe_index, qpn, ds, 0));
        Ok(n)
    }
}

/// Marks the branch that calls it as unlikely.
#[cold]
#[inline(never)]
pub(crate) fn cold() {}

#[cfg(test)]
mod test {
    use super::*;

    fn write_wr<'a>(sge: &'a [Sge]) -> SendWr<'a> {
        SendWr {
            op: WrOp::RdmaWrite {
                raddr: 0x1000,
                rkey: 0x22,
            },
            flags: SendFlags {
                signaled: true,
                ..Default::default()
            },
            transport: TransportSeg::None,
            payload: Payload::Gather(sge),
        }
    }

    #[test]
    fn test_rdma_write_layout() {
        let sge = [Sge {
            addr: 0x7f00,
            lkey: 0x11,
            len: 64,
        }];
        let wr = write_wr(&sge);
        assert_eq!(wr.ds(), 3);
        assert_eq!(wr.wqebbs(), 1);
        let mut b = [0xaau8; 64];
        assert_eq!(wr.emit(QpType::Rc, 5, 0x123, &mut b).unwrap(), 48);
        let expect: [u8; 48] = [
            0x00, 0x00, 0x05, 0x08, 0x00, 0x01, 0x23, 0x03, 0, 0, 0, 0x08, 0, 0, 0, 0, //
            0, 0, 0, 0, 0, 0, 0x10, 0x00, 0, 0, 0, 0x22, 0, 0, 0, 0, //
            0, 0, 0, 64, 0, 0, 0, 0x11, 0, 0, 0, 0, 0, 0, 0x7f, 0x00,
        ];
        assert_eq!(b[..48], expect);
        assert_eq!(b[48], 0xaa);
    }

    #[test]
    fn test_zero_length_sge_skipped_and_atomic_count() {
        let sge = [
            Sge {
                addr: 1,
                lkey: 2,
                len: 0,
            },
            Sge {
                addr: 3,
                lkey: 4,
                len: 100,
            },
        ];
        let wr = SendWr {
            op: WrOp::AtomicFa {
                raddr: 8,
                rkey: 9,
                add: 1,
            },
            payload: Payload::Gather(&sge),
            ..SendWr::new(WrOp::Nop)
        };
        assert_eq!(wr.ds(), 4);
        let segs: heapless::Vec<Segment, 8> = wr.segments().collect();
        assert_eq!(segs.len(), 3);
        assert_eq!(
            segs[2],
            Segment::Data(DataRepr {
                byte_count: 8,
                lkey: 4,
                addr: 3
            })
        );
    }

    #[test]
    fn test_check_rules() {
        let inl = [1u8; 8];
        let read = SendWr {
            payload: Payload::Inline(&inl),
            ..SendWr::new(WrOp::RdmaRead { raddr: 0, rkey: 0 })
        };
        assert_eq!(read.check(QpType::Rc), Err(Error::Unsupported));
        assert_eq!(SendWr::new(WrOp::Nop).check(QpType::Rc), Ok(1));
        assert_eq!(
            SendWr::new(WrOp::RdmaRead { raddr: 0, rkey: 0 }).check(QpType::Uc),
            Err(Error::Unsupported)
        );
        assert_eq!(
            SendWr::new(WrOp::Send).check(QpType::Ud),
            Err(Error::Unsupported)
        );
        let big = [Sge {
            addr: 0,
            lkey: 0,
            len: 1 << 31,
        }];
        let s = SendWr {
            payload: Payload::Gather(&big),
            ..SendWr::new(WrOp::Send)
        };
        assert_eq!(s.check(QpType::Rc), Err(Error::BadLength));
        let many = [Sge {
            addr: 0,
            lkey: 0,
            len: 1,
        }; 63];
        let s = SendWr {
            payload: Payload::Gather(&many),
            ..SendWr::new(WrOp::Send)
        };
        assert_eq!(s.check(QpType::Rc), Err(Error::Oversize { ds: 64 }));
        let s = SendWr {
            payload: Payload::Gather(&many[..62]),
            ..SendWr::new(WrOp::Send)
        };
        assert_eq!(s.check(QpType::Rc), Ok(63));
        assert_eq!(s.wqebbs(), 16);
    }

    #[test]
    fn test_inline_layout() {
        let data: [u8; 20] = core::array::from_fn(|i| i as u8);
        let wr = SendWr {
            op: WrOp::SendImm { imm: 0xdead_beef },
            payload: Payload::Inline(&data),
            ..SendWr::new(WrOp::Nop)
        };
        let mut b = [0xffu8; 48];
        assert_eq!(wr.emit(QpType::Rc, 0xffff, 7, &mut b).unwrap(), 48);
        assert_eq!(b[..4], [0x00, 0xff, 0xff, 0x0b]);
        assert_eq!(b[7], 3);
        assert_eq!(b[12..16], [0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(b[16..20], [0x80, 0, 0, 20]);
        assert_eq!(b[20..40], data);
        assert_eq!(b[40..48], [0; 8]);
    }
}
