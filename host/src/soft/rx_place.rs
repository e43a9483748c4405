//! Receiving RDMA WRITE payload straight into the memory region: the scattering half of the
//! soft provider's data path (the gathering half is `tx_spans`).
//!
//! A NIC places WRITE payload by DMA as packets arrive. The soft provider gets the closest to
//! that a UDP socket allows: when the responder of a QP is in the middle of a WRITE
//! ([`rdmesh_core::rc::WriteCursor`]) and the datagram (or GRO batch) at the head of the queue
//! starts with that WRITE's next packet, one `recvmsg` scatters each segment's BTH and ICRC
//! into the receive buffer and its payload into the region, at the place the packet would be
//! written if it is what it looks like. The kernel's copy is then the only one, as a TCP
//! stream's is.
//!
//! Nothing is trusted before it is checked: each segment's BTH (opcode WRITE MIDDLE/LAST, the
//! QP, the PSN the segment's position predicts, the payload length) and its ICRC — over the
//! header in the buffer and the payload in the region — are verified before the packet is
//! handed to the RC engine, which then writes nothing for it ([`PlacedMemory`]). A segment
//! that fails is copied back together and takes the ordinary path (and is dropped there if its
//! ICRC is bad). The bytes it left in the region lie inside the range the WRITE in progress
//! was granted (its R_Key was checked for the whole message) and past everything accepted so
//! far, which IBTA leaves undefined until the WRITE completes (vol. 1 §9.4.1.1: a responder
//! may place a request's data before checking it; an errored WRITE leaves the target
//! undefined); the retransmission writes them again. Placement is not tried while selective
//! repeat holds packets past ePSN, whose bytes may already be in that range.

use std::io::IoSliceMut;
use std::sync::Arc;

use rdmesh_core::rc::{AccessKind, AtomicOp, MemError, MemoryAccess, WriteCursor};
use rdmesh_core::wire::ib_packet::ICRC_LEN;
use rdmesh_core::wire::{bth, BthRepr, Opcode};

use crate::verbs::mr::MrInner;
use crate::verbs::pd::{PdInner, PdMemory};

/// BTH bytes: the header of a WRITE MIDDLE or LAST without immediate.
const HEADER: usize = bth::HEADER_LEN;

/// Where one segment of a scattered receive landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Segment {
    /// Offset of the segment in the receive buffer (as if it were received whole).
    pub(crate) off: usize,
    /// Segment length in bytes (UDP payload: BTH .. ICRC).
    pub(crate) len: usize,
    /// Payload bytes placed in the region (`buf[off + 12 .. off + 12 + placed]` is a hole).
    pub(crate) placed: usize,
    /// Offset of those bytes from the first placed byte.
    pub(crate) at: usize,
}

/// Plans the segments of a receive of `bytes` cut every `seg` bytes whose payload continues a
/// WRITE with `remaining` bytes to come: each full segment's payload area (between BTH and
/// ICRC) goes to the region until `remaining` runs out. Returns the bytes placed in total.
pub(crate) fn plan(bytes: usize, seg: usize, remaining: u32, out: &mut Vec<Segment>) -> usize {
    out.clear();
    let mut left = remaining as usize;
    let mut at = 0;
    for off in (0..bytes).step_by(seg.max(1)) {
        let len = seg.min(bytes - off);
        let area = len.saturating_sub(HEADER + ICRC_LEN);
        let placed = area.min(left);
        left -= placed;
        out.push(Segment {
            off,
            len,
            placed,
            at,
        });
        at += placed;
    }
    at
}

/// Fills `iov` with the pieces of a scattered receive into `buf` and `region` (`region` holds
/// exactly the bytes [`plan`] placed): headers and tails into `buf` at their offsets, payload
/// into `region` in order; whatever of `buf` follows the last segment takes any excess.
pub(crate) fn scatter<'a>(
    buf: &'a mut [u8],
    region: &'a mut [u8],
    segs: &[Segment],
    iov: &mut Vec<IoSliceMut<'a>>,
) {
    let mut rest = buf;
    let mut pos = 0;
    let mut mr = region;
    for s in segs {
        if s.placed == 0 {
            continue;
        }
        let (a, b) = std::mem::take(&mut rest).split_at_mut(s.off + HEADER - pos);
        iov.push(IoSliceMut::new(a));
        let (_hole, b) = b.split_at_mut(s.placed);
        let (m, r) = std::mem::take(&mut mr).split_at_mut(s.placed);
        iov.push(IoSliceMut::new(m));
        mr = r;
        rest = b;
        pos = s.off + HEADER + s.placed;
    }
    iov.push(IoSliceMut::new(rest));
}

/// Whether segment `k` of a scattered receive, placed under `cursor`, is the packet its
/// position predicts: the QP's next WRITE MIDDLE (payload = the whole area) or LAST (payload
/// = the area less PadCnt) with PSN `cursor.psn + k`, its payload exactly the bytes placed.
pub(crate) fn is_expected(
    bth_bytes: &[u8],
    s: &Segment,
    k: usize,
    qpn: u32,
    cursor: &WriteCursor,
) -> bool {
    let Ok(p) = bth::Packet::new_checked(bth_bytes) else {
        return false;
    };
    let Ok(b) = BthRepr::parse(&p) else {
        return false;
    };
    let area = s.len.saturating_sub(HEADER + ICRC_LEN);
    let payload = area.saturating_sub(usize::from(b.pad_cnt));
    let shape = match b.opcode {
        Opcode::RcRdmaWriteMiddle => b.pad_cnt == 0 && s.placed == area,
        Opcode::RcRdmaWriteLast => payload == s.placed,
        _ => false,
    };
    shape && s.placed > 0 && b.dest_qp == qpn && b.psn == cursor.psn.add(k as u32)
}

/// A packet whose payload is already in its region: `len` bytes at offset `offset` of `mr`,
/// which the responder writes at `(rkey, va)`.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) rkey: u32,
    pub(crate) va: u64,
    pub(crate) len: usize,
    pub(crate) mr: Arc<MrInner>,
    pub(crate) offset: usize,
}

/// [`PdMemory`] for handing the RC engine a packet whose payload is [`Placed`]: the write of
/// exactly those bytes to exactly that place is already done and is skipped; any other write
/// copies from where the payload really is (the packet's own payload bytes are a stale hole).
pub(crate) struct PlacedMemory<'a> {
    pub(crate) pd: &'a PdInner,
    pub(crate) placed: Option<&'a Placed>,
}

impl MemoryAccess for PlacedMemory<'_> {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> Result<(), MemError> {
        PdMemory(self.pd).read(key, va, out, kind)
    }

    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError> {
        let Some(p) = self.placed else {
            return PdMemory(self.pd).write(key, va, data, kind);
        };
        if (key, va, data.len()) == (p.rkey, p.va, p.len) {
            return PdMemory(self.pd).check(key, va, data.len() as u64, kind);
        }
        let real =
            p.mr.lock()
                .range(p.offset, p.len.min(data.len()))
                .ok_or(MemError::InvalidKey)?
                .to_vec();
        PdMemory(self.pd).write(key, va, &real, kind)
    }

    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError> {
        PdMemory(self.pd).check(key, va, len, kind)
    }

    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        PdMemory(self.pd).atomic(rkey, va, op)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn plan_places_full_areas_until_the_message_ends() {
        let mut segs = Vec::new();
        // Three segments of 12 + 4096 + 4 and a LAST of 12 + 100 + pad 0 + 4; 12388 bytes left.
        let seg = 4112;
        let bytes = 3 * seg + 116;
        assert_eq!(plan(bytes, seg, 12388, &mut segs), 12388);
        assert_eq!(
            segs.iter()
                .map(|s| (s.off, s.len, s.placed, s.at))
                .collect::<Vec<_>>(),
            [
                (0, 4112, 4096, 0),
                (4112, 4112, 4096, 4096),
                (8224, 4112, 4096, 8192),
                (12336, 116, 100, 12288)
            ]
        );
        // A message that ends early: nothing past `remaining` goes to the region.
        assert_eq!(plan(bytes, seg, 5000, &mut segs), 5000);
        assert_eq!(segs[1].placed, 904);
        assert_eq!(segs[2].placed, 0);
    }

    #[test]
    fn scatter_puts_headers_in_the_buffer_and_payload_in_the_region() {
        let mut segs = Vec::new();
        let seg = 12 + 40 + 4;
        let bytes = 2 * seg;
        let placed = plan(bytes, seg, 80, &mut segs);
        let wire: Vec<u8> = (0..bytes as u8).collect();
        let mut buf = vec![0xeeu8; 200];
        let mut region = vec![0u8; placed];
        let mut iov = Vec::new();
        scatter(&mut buf, &mut region, &segs, &mut iov);
        // What the kernel does: fill the iovecs in order.
        let mut src = &wire[..];
        for v in iov.iter_mut() {
            let n = v.len().min(src.len());
            v[..n].copy_from_slice(&src[..n]);
            src = &src[n..];
        }
        drop(iov);
        assert_eq!(buf[..12], wire[..12]);
        assert_eq!(region[..40], wire[12..52]);
        assert_eq!(buf[52..68], wire[52..68]);
        assert_eq!(region[40..], wire[68..108]);
        assert_eq!(buf[108..112], wire[108..112]);
        assert!(
            buf[12..52].iter().all(|&b| b == 0xee),
            "the hole stays untouched"
        );
    }
}
