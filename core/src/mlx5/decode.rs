//! The WQE decoder: send-queue ring bytes back into the typed form (for tests, the device
//! model, and users debugging a queue with `rdmesh mlx5 decode-wqe`).
//!
//! The layout after the control segment is not self-describing, so the decoder follows the
//! same rules the writer does ([`wqe`](super::wqe) module docs): the QP type decides whether a
//! datagram or Ethernet segment comes first; on RC/UC the opcode decides the remote-address
//! and atomic segments; every remaining 16-byte unit starts either an inline segment (bit 31
//! of its first word, `MLX5_INLINE_SEG`) or a data segment. Opcodes whose layout is not
//! modelled (UMR, PSV, ...) decode as opaque 16-byte chunks. The control segment's DS must
//! account exactly for the segments found.

use heapless::Vec;

use super::atomic::{AtomicRepr, AtomicSeg};
use super::bytes::SplitBytes;
use super::ctrl::{CtrlRepr, CtrlSeg};
use super::data::{DataRepr, DataSeg};
use super::datagram::{self, DatagramRepr, DatagramSeg};
use super::eth::{self, EthRepr, EthSeg};
use super::inline::{self, InlineSeg};
use super::raddr::{RaddrRepr, RaddrSeg};
use super::wqe::{QpType, Segment};
use super::{ring, Error, Result, DS_LEN, INLINE_SEG, MAX_SEGMENTS};

/// A decoded send WQE: the control segment and the segments after it. Inline data and inline
/// Ethernet headers borrow from the ring (split where they wrapped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WqeRepr<'a> {
    /// The control segment.
    pub ctrl: CtrlRepr,
    /// The segments after it, in ring order.
    pub segments: Vec<Segment<'a>, MAX_SEGMENTS>,
}

impl WqeRepr<'_> {
    /// Length in bytes: `ctrl.ds * 16`.
    pub const fn buffer_len(&self) -> usize {
        self.ctrl.ds as usize * DS_LEN
    }

    /// Re-encodes the WQE into the start of `buf` (no wrap); returns its length.
    ///
    /// # Errors
    /// [`Error::Truncated`] when `buf` is shorter than the WQE; [`Error::DsMismatch`] when the
    /// segments do not add up to `ctrl.ds`.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let n = self.buffer_len();
        let total: usize = DS_LEN + self.segments.iter().map(Segment::len).sum::<usize>();
        if total != n || !self.ctrl.ds_valid() {
            return Err(Error::DsMismatch);
        }
        let out = buf.get_mut(..n).ok_or(Error::Truncated)?;
        self.ctrl
            .emit(&mut CtrlSeg::new_unchecked(&mut out[..DS_LEN]));
        let mut off = DS_LEN;
        for s in &self.segments {
            off = s.write(out, off);
        }
        Ok(n)
    }
}

/// Decodes the send WQE whose control segment starts at byte `offset` of `ring`, continuing at
/// the ring start past its end. `ring` is the whole send-queue buffer (a multiple of 16 bytes;
/// a single WQE in a buffer of exactly its size also works); `qp_type` picks the segment after
/// the control segment.
///
/// # Errors
/// - [`Error::BadRing`]: `ring` is empty or not a multiple of 16 bytes.
/// - [`Error::Truncated`]: `offset` is outside the ring, or DS × 16 exceeds the ring.
/// - [`Error::BadField`]: `offset` is not 16-aligned, DS is 0 / has reserved bits, or an
///   inline Ethernet header is longer than a WQE can be.
/// - [`Error::DsMismatch`]: a segment runs past the DS the control segment declares.
pub fn decode_wqe<'a>(ring: &'a [u8], offset: usize, qp_type: QpType) -> Result<WqeRepr<'a>> {
    let len = ring.len();
    if len == 0 || len % DS_LEN != 0 {
        return Err(Error::BadRing);
    }
    if offset >= len {
        return Err(Error::Truncated);
    }
    if offset % DS_LEN != 0 {
        return Err(Error::BadField);
    }
    let ctrl = CtrlRepr::parse(&CtrlSeg::new_unchecked(ring::chunk(ring, offset)))?;
    if ctrl.ds as usize * DS_LEN > len {
        return Err(Error::Truncated);
    }
    let mut remaining = ctrl.ds as usize - 1;
    let mut off = ring::advance(len, offset, DS_LEN);
    let mut segments: Vec<Segment<'a>, MAX_SEGMENTS> = Vec::new();

    match qp_type {
        QpType::Ud => {
            let n = datagram::LEN / DS_LEN;
            if remaining < n {
                return Err(Error::DsMismatch);
            }
            let mut tmp = [0u8; datagram::LEN];
            ring::get(ring, off, &mut tmp);
            let d = DatagramRepr::parse(&DatagramSeg::new_unchecked(&tmp[..]))?;
            push(&mut segments, Segment::Datagram(d))?;
            remaining -= n;
            off = ring::advance(len, off, datagram::LEN);
        }
        QpType::RawPacket => {
            if remaining == 0 {
                return Err(Error::DsMismatch);
            }
            let fixed = EthSeg::new_unchecked(ring::chunk(ring, off));
            let h = fixed.inline_hdr_sz() as usize;
            if h > eth::MAX_INLINE_HDR {
                return Err(Error::BadField);
            }
            let n = eth::seg_len(h) / DS_LEN;
            if n > remaining {
                return Err(Error::DsMismatch);
            }
            let start = ring::advance(len, off, eth::INLINE_HDR_OFFSET);
            let hdr = SplitBytes::from_ring(ring, start, h).ok_or(Error::DsMismatch)?;
            push(
                &mut segments,
                Segment::Eth(EthRepr::from_fixed(&fixed, hdr)),
            )?;
            remaining -= n;
            off = ring::advance(len, off, n * DS_LEN);
        }
        QpType::Rc | QpType::Uc => {}
    }

    if !ctrl.opcode.layout_known() {
        while remaining > 0 {
            let mut b = [0u8; DS_LEN];
            b.copy_from_slice(ring::chunk(ring, off));
            push(&mut segments, Segment::Opaque(b))?;
            remaining -= 1;
            off = ring::advance(len, off, DS_LEN);
        }
        return Ok(WqeRepr { ctrl, segments });
    }

    if matches!(qp_type, QpType::Rc | QpType::Uc) && ctrl.opcode.has_raddr() {
        if remaining == 0 {
            return Err(Error::DsMismatch);
        }
        let r = RaddrRepr::parse(&RaddrSeg::new_unchecked(ring::chunk(ring, off)))?;
        push(&mut segments, Segment::Raddr(r))?;
        remaining -= 1;
        off = ring::advance(len, off, DS_LEN);
        if ctrl.opcode.is_atomic() {
            if remaining == 0 {
                return Err(Error::DsMismatch);
            }
            let a = AtomicRepr::parse(&AtomicSeg::new_unchecked(ring::chunk(ring, off)))?;
            push(&mut segments, Segment::Atomic(a))?;
            remaining -= 1;
            off = ring::advance(len, off, DS_LEN);
        }
    }

    while remaining > 0 {
        let c = ring::chunk(ring, off);
        let head = InlineSeg::new_unchecked(c);
        if head.byte_count() & INLINE_SEG != 0 {
            let l = head.inline_len();
            if l > inline::MAX_INLINE_LEN {
                return Err(Error::DsMismatch);
            }
            let n = inline::ds(l);
            if n > remaining {
                return Err(Error::DsMismatch);
            }
            let start = ring::advance(len, off, inline::LEN);
            let data = SplitBytes::from_ring(ring, start, l).ok_or(Error::DsMismatch)?;
            push(&mut segments, Segment::Inline(data))?;
            remaining -= n;
            off = ring::advance(len, off, n * DS_LEN);
        } else {
            let d = DataRepr::parse(&DataSeg::new_unchecked(c))?;
            push(&mut segments, Segment::Data(d))?;
            remaining -= 1;
            off = ring::advance(len, off, DS_LEN);
        }
    }
    Ok(WqeRepr { ctrl, segments })
}

fn push<'a>(segments: &mut Vec<Segment<'a>, MAX_SEGMENTS>, s: Segment<'a>) -> Result<()> {
    segments.push(s).map_err(|_| Error::DsMismatch)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mlx5::wqe::{Payload, SendWr, Sge, WrOp};
    use crate::mlx5::Opcode;

    #[test]
    fn test_decode_rdma_write() {
        let sge = [Sge {
            addr: 0x7f00,
            lkey: 0x11,
            len: 64,
        }];
        let wr = SendWr {
            payload: Payload::Gather(&sge),
            ..SendWr::new(WrOp::RdmaWrite {
                raddr: 0x1000,
                rkey: 0x22,
            })
        };
        let mut b = [0u8; 48];
        wr.emit(QpType::Rc, 9, 0x42, &mut b).unwrap();
        let d = decode_wqe(&b, 0, QpType::Rc).unwrap();
        assert_eq!(d.ctrl.opcode, Opcode::RdmaWrite);
        assert_eq!(d.ctrl.wqe_index, 9);
        assert!(d.segments.iter().copied().eq(wr.segments()));
        let mut again = [0u8; 48];
        assert_eq!(d.emit(&mut again).unwrap(), 48);
        assert_eq!(again, b);
    }

    #[test]
    fn test_decode_errors() {
        assert_eq!(decode_wqe(&[], 0, QpType::Rc), Err(Error::BadRing));
        assert_eq!(decode_wqe(&[0u8; 20], 0, QpType::Rc), Err(Error::BadRing));
        let mut b = [0u8; 32];
        assert_eq!(decode_wqe(&b, 0, QpType::Rc), Err(Error::BadField));
        b[3] = 0x08; // RDMA_WRITE
        b[7] = 1; // DS 1: raddr missing
        assert_eq!(decode_wqe(&b, 0, QpType::Rc), Err(Error::DsMismatch));
        b[7] = 3; // longer than the buffer
        assert_eq!(decode_wqe(&b, 0, QpType::Rc), Err(Error::Truncated));
        b[3] = 0x0a; // SEND, DS 2, inline claiming 20 bytes
        b[7] = 2;
        b[16..20].copy_from_slice(&[0x80, 0, 0, 20]);
        assert_eq!(decode_wqe(&b, 0, QpType::Rc), Err(Error::DsMismatch));
        assert_eq!(decode_wqe(&b, 8, QpType::Rc), Err(Error::BadField));
        assert_eq!(decode_wqe(&b, 32, QpType::Rc), Err(Error::Truncated));
    }

    #[test]
    fn test_decode_unknown_opcode_is_opaque() {
        let mut b = [0u8; 32];
        b[3] = 0x25; // UMR
        b[7] = 2;
        b[16] = 0x5a;
        let d = decode_wqe(&b, 0, QpType::Rc).unwrap();
        assert_eq!(d.segments.len(), 1);
        assert!(matches!(d.segments[0], Segment::Opaque(x) if x[0] == 0x5a));
    }
}
