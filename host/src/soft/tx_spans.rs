//! Sending payload straight from the memory region: the gathering half of the soft provider's
//! transmit path.
//!
//! The RC engine writes each packet into the flush buffer, reading its payload through
//! [`MemoryAccess`] (the requester's gather of a SEND/WRITE, the responder's READ response).
//! [`SpanMemory`] answers those reads without copying: it records where the payload lives
//! (the region and offset) and where it belongs in the buffer, and leaves that part of the
//! buffer unwritten. The ICRC is then computed over the header in the buffer and the payload in
//! the region ([`icrc_of`]), and the GSO send gathers the packets with one `sendmsg` whose
//! iovecs alternate between buffer and region ([`with_iovecs`]): the payload is copied once, by
//! the kernel, as a TCP stream's is. Where a path needs whole packets in the buffer (the
//! impairment layer, a capture, one datagram at a time) [`materialize`] copies the payload in.
//!
//! Short payloads (below [`MIN_SPAN`]) are copied as before: an iovec costs more than the copy.

use std::io::IoSlice;
use std::sync::Arc;

use rdmesh_core::rc::{AccessKind, AtomicOp, MemError, MemoryAccess};
use rdmesh_core::wire::icrc::IcrcFlow;

use crate::verbs::mr::{Backing, MrInner};
use crate::verbs::pd::{LastMr, PdInner, PdMemory};

/// Payload reads of at least this many bytes are recorded as spans instead of copied.
pub(crate) const MIN_SPAN: usize = 1024;

/// Payload bytes that stay in a memory region until the send.
#[derive(Debug, Clone)]
pub(crate) struct Span {
    /// Where they belong in the flush buffer (bytes from its start).
    pub(crate) at: usize,
    /// Length in bytes.
    pub(crate) len: usize,
    /// The region holding them.
    pub(crate) mr: Arc<MrInner>,
    /// Their offset in the region's buffer.
    pub(crate) offset: usize,
}

/// [`PdMemory`] that records large reads into the buffer starting at address `base` as
/// [`Span`]s instead of copying them. Access checks are the same.
pub(crate) struct SpanMemory<'a> {
    pd: &'a PdInner,
    /// Address of the flush buffer's first byte (compared, never dereferenced).
    base: usize,
    /// Length of the flush buffer.
    len: usize,
    /// Spans recorded, in buffer order.
    pub(crate) spans: &'a mut Vec<Span>,
    /// The region the last span read (a stream's packets read one).
    last_mr: &'a mut LastMr,
}

impl<'a> SpanMemory<'a> {
    /// Records reads landing in `buf` into `spans`, resolving their regions through `last_mr`.
    pub(crate) fn new(
        pd: &'a PdInner,
        buf: &[u8],
        spans: &'a mut Vec<Span>,
        last_mr: &'a mut LastMr,
    ) -> SpanMemory<'a> {
        SpanMemory {
            pd,
            base: buf.as_ptr() as usize,
            len: buf.len(),
            spans,
            last_mr,
        }
    }
}

impl MemoryAccess for SpanMemory<'_> {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> Result<(), MemError> {
        let at = (out.as_ptr() as usize).wrapping_sub(self.base);
        let payload = matches!(kind, AccessKind::LocalRead | AccessKind::RemoteRead);
        if !payload || out.len() < MIN_SPAN || at + out.len() > self.len {
            return PdMemory::cached(self.pd, self.last_mr).read(key, va, out, kind);
        }
        let (mr, offset) =
            PdMemory::cached(self.pd, self.last_mr).resolve(key, va, out.len() as u64, kind)?;
        self.spans.push(Span {
            at,
            len: out.len(),
            mr,
            offset,
        });
        Ok(())
    }

    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError> {
        PdMemory::cached(self.pd, self.last_mr).write(key, va, data, kind)
    }

    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError> {
        PdMemory::cached(self.pd, self.last_mr).check(key, va, len, kind)
    }

    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> Result<u64, MemError> {
        PdMemory::new(self.pd).atomic(rkey, va, op)
    }
}

/// Copies the payload of every span inside `buf` into it (which then holds whole packets) and
/// forgets those spans; spans past its end stay. A span of a lent region deregistered
/// meanwhile reads as zeros (the application freed memory a send was still reading).
pub(crate) fn materialize(buf: &mut [u8], spans: &mut Vec<Span>) {
    spans.retain(|s| {
        let inside = s.at + s.len <= buf.len();
        if inside {
            let out = &mut buf[s.at..s.at + s.len];
            match s.mr.lock().range(s.offset, s.len) {
                Some(b) => out.copy_from_slice(b),
                None => out.fill(0),
            }
        }
        !inside
    });
}

/// Keeps the spans of buffer bytes `from..` moved to the start of the buffer (a packet that
/// begins the next batch) and forgets the others.
pub(crate) fn shift(spans: &mut Vec<Span>, from: usize) {
    spans.retain_mut(|s| {
        let keep = s.at >= from;
        s.at = s.at.wrapping_sub(from);
        keep
    });
}

/// The one region all `spans` read from, or `None` when there are none or several (then the
/// caller materializes: holding one region's lock at a time keeps lock order trivial).
pub(crate) fn single_region(spans: &[Span]) -> Option<&Arc<MrInner>> {
    let first = &spans.first()?.mr;
    spans
        .iter()
        .all(|s| Arc::ptr_eq(&s.mr, first))
        .then_some(first)
}

/// The pieces of `buf[range]`: buffer bytes, with the spans inside the range read from
/// `region` (the locked bytes of [`single_region`], one range per span; callers check
/// [`Backing::is_live`] first, a released region gives empty pieces) instead.
fn pieces<'b>(
    buf: &'b [u8],
    range: std::ops::Range<usize>,
    spans: &[Span],
    region: &'b Backing,
    mut f: impl FnMut(&'b [u8]),
) {
    let mut pos = range.start;
    // Spans are in buffer order and do not overlap: those inside the range are a run, found
    // by a binary search (a batch's packets would otherwise each scan every span).
    let first = spans.partition_point(|s| s.at < range.start);
    for s in spans[first..]
        .iter()
        .take_while(|s| s.at + s.len <= range.end)
    {
        if s.at > pos {
            f(&buf[pos..s.at]);
        }
        f(region.range(s.offset, s.len).unwrap_or_default());
        pos = s.at + s.len;
    }
    if range.end > pos {
        f(&buf[pos..range.end]);
    }
}

/// The ICRC of the packet `buf[off..off + len]` (its last 4 bytes are the ICRC's place) with
/// its payload spans read from `region`, sent in `flow` with IPv4 ID `ident`.
///
/// Errors: as [`IcrcFlow::compute_parts`].
pub(crate) fn icrc_of(
    flow: &IcrcFlow,
    ident: u16,
    buf: &[u8],
    off: usize,
    len: usize,
    spans: &[Span],
    region: &Backing,
) -> rdmesh_core::wire::Result<u32> {
    let end = off + len - rdmesh_core::wire::ib_packet::ICRC_LEN;
    let mut parts: [&[u8]; 8] = [&[]; 8];
    let mut n = 0;
    let mut overflow = false;
    pieces(buf, off..end, spans, region, |p| {
        if n < parts.len() {
            parts[n] = p;
            n += 1;
        } else {
            overflow = true;
        }
    });
    if overflow || n == 0 {
        return Err(rdmesh_core::wire::Error::BadLength);
    }
    flow.compute_parts(ident, parts[0], &parts[1..n])
}

/// Iovecs a gathered send holds without a heap allocation: a GSO batch's packets, each a
/// header piece and a payload span, and one more piece of buffer.
const STACK_IOVECS: usize = 2 * crate::soft::udp_io::MAX_GSO_SEGMENTS + 2;

/// Calls `f` with the iovecs of `buf[range]` (whole packets), span bytes taken from `region`.
/// Up to [`STACK_IOVECS`] of them (any batch of the transmit path) live on the stack: no
/// allocation per send.
pub(crate) fn with_iovecs<R>(
    buf: &[u8],
    range: std::ops::Range<usize>,
    spans: &[Span],
    region: &Backing,
    f: impl FnOnce(&[IoSlice<'_>]) -> R,
) -> R {
    // At most two pieces per span (buffer, then region) and one more of buffer.
    if 2 * spans.len() < STACK_IOVECS {
        let mut iov = heapless::Vec::<IoSlice<'_>, STACK_IOVECS>::new();
        let mut fits = true;
        pieces(buf, range.clone(), spans, region, |p| {
            fits &= iov.push(IoSlice::new(p)).is_ok();
        });
        if fits {
            return f(&iov);
        }
    }
    let mut iov = Vec::with_capacity(2 * spans.len() + 1);
    pieces(buf, range, spans, region, |p| iov.push(IoSlice::new(p)));
    f(&iov)
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::verbs::mr::AccessFlags;

    fn region(len: usize) -> Arc<MrInner> {
        let buf: Box<[u8]> = (0..len).map(|i| (i * 13 + 1) as u8).collect();
        Arc::new(MrInner {
            lkey: 1,
            rkey: 1,
            addr: 0x1000,
            access: AccessFlags::LOCAL_WRITE,
            len,
            buf: std::sync::Mutex::new(Backing::Owned(buf)),
            handles: 1.into(),
        })
    }

    #[test]
    fn iovecs_and_icrc_equal_the_materialized_packet() {
        let mr = region(8192);
        let ctx = rdmesh_core::wire::IcrcContext::for_udp_socket_v4(
            std::net::Ipv4Addr::new(10, 0, 0, 1),
            std::net::Ipv4Addr::new(10, 0, 0, 2),
            50000,
            4791,
        );
        // Two packets: 12-byte header + 2000 payload + 4 ICRC, then 12 + 1500 + 4.
        let mut buf = vec![0xeeu8; 4096];
        for (i, b) in buf[..12].iter_mut().enumerate() {
            *b = i as u8;
        }
        for (i, b) in buf[2016..2028].iter_mut().enumerate() {
            *b = 0x40 + i as u8;
        }
        let mut spans = vec![
            Span {
                at: 12,
                len: 2000,
                mr: mr.clone(),
                offset: 100,
            },
            Span {
                at: 2028,
                len: 1500,
                mr: mr.clone(),
                offset: 5000,
            },
        ];
        let used = 2016 + 1516;
        let guard = mr.lock();
        let c0 = icrc_of(&IcrcFlow::new(&ctx), 0, &buf, 0, 2016, &spans, &guard).unwrap();
        let c1 = icrc_of(&IcrcFlow::new(&ctx), 0, &buf, 2016, 1516, &spans, &guard).unwrap();
        let gathered = with_iovecs(&buf, 0..used, &spans, &guard, |iov| {
            iov.iter()
                .flat_map(|s| s.iter().copied())
                .collect::<Vec<u8>>()
        });
        drop(guard);
        let mut whole = buf.clone();
        materialize(&mut whole, &mut spans);
        assert!(spans.is_empty());
        assert_eq!(gathered, whole[..used]);
        assert_eq!(c0, ctx.compute(&whole[..2012]).unwrap());
        assert_eq!(c1, ctx.compute(&whole[2016..2016 + 1512]).unwrap());
        assert_eq!(whole[12..2012], *mr.lock().range(100, 2000).unwrap());
    }

    #[test]
    fn shift_keeps_the_moved_packet_spans() {
        let mr = region(64);
        let span = |at| Span {
            at,
            len: 8,
            mr: mr.clone(),
            offset: 0,
        };
        let mut spans = vec![span(10), span(100), span(120)];
        shift(&mut spans, 100);
        assert_eq!(spans.iter().map(|s| s.at).collect::<Vec<_>>(), [0, 20]);
        assert!(single_region(&spans).is_some());
        spans.push(Span {
            mr: region(8),
            ..span(40)
        });
        assert!(single_region(&spans).is_none());
    }
}
