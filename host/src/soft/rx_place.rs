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
//! Whether the head of the queue continues the WRITE is decided by a `MSG_PEEK` of its BTH
//! only for a WRITE's first placed batch (and after a wrong guess): from then on the next
//! batch is predicted to have the last one's segment size and is received scattered at once,
//! one system call per batch as on the ordinary path. What really came is checked afterwards
//! ([`landed`]): a batch of another layout, another QP or another source is copied back
//! together ([`arrived`]) and takes the usual path.
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
//! undefined); the retransmission writes them again. This holds for a predicted batch as for a
//! peeked one: what lands in the region, whatever it turns out to be, lands only in the
//! WRITE's range past ePSN. Placement is not tried while selective repeat holds packets past
//! ePSN, whose bytes may already be in that range.
//!
//! Selective repeat's own WRITEs (every packet an RDMA_WRITE_ONLY with its RETH, which the
//! negotiated default of two rdmesh ends sends) are not placed this way: a peek shows one
//! packet's RETH, and the packets after it in the batch may begin another message whose
//! target lies anywhere the R_Key allows — a guess that turned out wrong would have written
//! bytes outside any WRITE in flight, over data an earlier WRITE completed.

use std::io::IoSliceMut;
use std::sync::Arc;

use rdmesh_core::rc::{AccessKind, AtomicOp, MemError, MemoryAccess, WriteCursor};
use rdmesh_core::wire::ib_packet::ICRC_LEN;
use rdmesh_core::wire::{bth, BthRepr, Opcode};

use crate::verbs::mr::MrInner;
use crate::verbs::pd::{LastMr, PdInner, PdMemory};

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

/// Segment `k` of a receive of `bytes` cut every `seg` bytes (`seg` from `UDP_GRO`, or
/// `bytes` for a lone datagram), when it lies where the planned segment `s` was scattered: it
/// starts at `s.off` and holds the planned header, the `s.placed` bytes that went to the
/// region and an ICRC after them — the whole planned segment, or the receive's last segment
/// when that is shorter (the last packet of a WRITE). The segment as it really is (its real
/// length); `None` when the plan did not match what came.
///
/// With a plan made from a `MSG_PEEK` of the batch the layout is known and every segment
/// lands; with a plan predicted from the previous batch (no peek), this is where a wrong
/// prediction shows.
pub(crate) fn landed(s: &Segment, k: usize, bytes: usize, seg: usize) -> Option<Segment> {
    let seg = seg.max(1);
    let off = k.checked_mul(seg)?;
    if off != s.off || off >= bytes {
        return None;
    }
    let len = seg.min(bytes - off);
    let last = off + len == bytes;
    let fits = len >= HEADER + s.placed + ICRC_LEN;
    (len == s.len || (last && len < s.len && fits)).then_some(Segment { len, ..*s })
}

/// Bytes of segment `s`'s hole (its payload area scattered to the region) that a receive of
/// `bytes` filled: what must be copied back into the buffer when the segment is not what its
/// position predicted.
pub(crate) fn arrived(s: &Segment, bytes: usize) -> usize {
    s.placed.min(bytes.saturating_sub(s.off + HEADER))
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
    /// The region the QP's last received request named ([`PdMemory::cached`]).
    pub(crate) last_mr: &'a mut LastMr,
}

impl MemoryAccess for PlacedMemory<'_> {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> Result<(), MemError> {
        PdMemory::cached(self.pd, self.last_mr).read(key, va, out, kind)
    }

    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError> {
        let Some(p) = self.placed else {
            return PdMemory::cached(self.pd, self.last_mr).write(key, va, data, kind);
        };
        if (key, va, data.len()) == (p.rkey, p.va, p.len) {
            return PdMemory::cached(self.pd, self.last_mr).check(key, va, data.len() as u64, kind);
        }
        let real =
            p.mr.lock()
                .range(p.offset, p.len.min(data.len()))
                .ok_or(MemError::InvalidKey)?
                .to_vec();
        PdMemory::cached(self.pd, self.last_mr).write(key, va, &real, kind)
    }

    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError> {
        PdMemory::cached(self.pd, self.last_mr).check(key, va, len, kind)
    }

    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        PdMemory::new(self.pd).atomic(rkey, va, op)
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

    /// What the kernel does with a received datagram train: fills the iovecs in order.
    fn fill_as_the_kernel(iov: &mut [IoSliceMut<'_>], wire: &[u8]) {
        let mut src = wire;
        for v in iov.iter_mut() {
            let n = v.len().min(src.len());
            v[..n].copy_from_slice(&src[..n]);
            src = &src[n..];
        }
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
        fill_as_the_kernel(&mut iov, &wire);
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

    #[test]
    fn landed_accepts_the_planned_layout_and_a_shorter_last_segment_only() {
        let mut segs = Vec::new();
        let seg = 4112;
        // Predicted: as many full segments as 64 KiB holds, 20000 bytes of the WRITE left.
        plan(15 * seg, seg, 20000, &mut segs);
        // What came is what was predicted: every placed segment landed, as planned.
        for (k, s) in segs.iter().enumerate().filter(|(_, s)| s.placed > 0) {
            assert_eq!(landed(s, k, 15 * seg, seg), Some(*s));
        }
        // Two full segments and a LAST of 116 bytes: the third carries 100 of its 3616
        // placed bytes, so it did not land; the first two did.
        let bytes = 2 * seg + 116;
        assert_eq!(landed(&segs[0], 0, bytes, seg), Some(segs[0]));
        assert_eq!(landed(&segs[1], 1, bytes, seg), Some(segs[1]));
        assert_eq!(landed(&segs[2], 2, bytes, seg), None);
        // A LAST shorter than the segment size but holding all its placed bytes lands with
        // its real length.
        plan(15 * seg, seg, 4096 + 100, &mut segs);
        assert_eq!(segs[1].placed, 100);
        let l = landed(&segs[1], 1, seg + 116, seg).unwrap();
        assert_eq!((l.off, l.len, l.placed, l.at), (seg, 116, 100, 4096));
        // Fewer segments than predicted: the missing ones did not land.
        assert_eq!(landed(&segs[1], 1, seg, seg), None);
        // Another segment size (another QP's batch, a new path MTU): nothing lands but a
        // lone segment-0 datagram of exactly the planned length.
        assert_eq!(landed(&segs[0], 0, 3 * 1040, 1040), None);
        assert_eq!(landed(&segs[1], 1, 3 * 1040, 1040), None);
        assert_eq!(landed(&segs[0], 0, seg, seg), Some(segs[0]));
        // An ACK (20 bytes) where a WRITE was predicted.
        assert_eq!(landed(&segs[0], 0, 20, 20), None);
    }

    #[test]
    fn a_wrong_prediction_is_copied_back_into_the_datagrams_that_came() {
        // Predicted: segments of 12 + 40 + 4 bytes continuing a WRITE; what came is a batch
        // of 30-byte datagrams (another layout entirely). The kernel fills the iovecs in
        // order; copying back what arrived of each hole restores the batch in the buffer.
        let seg = 12 + 40 + 4;
        let mut segs = Vec::new();
        let placed = plan(3 * seg, seg, 1000, &mut segs);
        let wire: Vec<u8> = (0..100u8).map(|b| b.wrapping_mul(7)).collect();
        let mut buf = vec![0xeeu8; 3 * seg + 8];
        let mut region = vec![0u8; placed];
        let mut iov = Vec::new();
        scatter(&mut buf, &mut region, &segs, &mut iov);
        fill_as_the_kernel(&mut iov, &wire);
        drop(iov);
        for (k, s) in segs.iter().enumerate() {
            assert_eq!(landed(s, k, wire.len(), 30), None);
            let hole = s.off + HEADER;
            let n = arrived(s, wire.len());
            buf[hole..hole + n].copy_from_slice(&region[s.at..s.at + n]);
        }
        assert_eq!(arrived(&segs[0], wire.len()), 40);
        assert_eq!(arrived(&segs[1], wire.len()), 100 - seg - HEADER);
        assert_eq!(arrived(&segs[2], wire.len()), 0);
        assert_eq!(buf[..wire.len()], wire[..]);
    }

    /// Two soft devices on loopback, go-back-N, 4096-byte MTU: 1 MiB WRITEs are received
    /// with their payload placed in the region, and after the first placed batch the next
    /// batches' layout is predicted instead of looked at with a `MSG_PEEK` — fewer peeks
    /// than a GRO batch's worth of packets (15) per placed packet. Without the prediction
    /// every placed batch needs a peek. The bytes are checked.
    #[test]
    fn loopback_writes_are_placed_without_a_peek_per_batch() {
        use crate::verbs::*;
        use std::time::Duration;
        const LEN: usize = 1 << 20;
        const MSGS: u64 = 8;
        use crate::soft::test_pair::open;
        let (a, b) = (open(241), open(242));
        let (ea, eb) = crate::soft::test_pair::connected(&a, &b, LEN, Mtu::Mtu4096, 14);
        let (ma, mb, qb) = (&ea.mr, &eb.mr, &eb.qp);
        for m in 0..MSGS {
            let data: Vec<u8> = (0..LEN as u64)
                .map(|i| (i.wrapping_mul(131) ^ (m * 29)) as u8)
                .collect();
            ma.write(0, &data).unwrap();
            let wc = ea.write_to(&eb, LEN, m, Duration::from_secs(60));
            assert_eq!((wc.wr_id, wc.status), (m, WcStatus::Success));
            let mut got = vec![0u8; LEN];
            mb.read(0, &mut got).unwrap();
            assert!(got == data, "message {m} differs");
        }
        let c = b.counters();
        assert_eq!(c.icrc_errors, 0);
        assert!(c.rx_placed > 0, "nothing placed: {c:?}");
        assert!(
            c.rx_peeks * 15 < c.rx_placed,
            "a peek per batch: {c:?} ({:?})",
            qb.counters()
        );
    }
}
