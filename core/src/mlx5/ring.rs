//! Byte-level helpers for work-queue rings: copies that continue at the ring start when they
//! reach its end (rdma-core qp.c: `if (seg == qend) seg = mlx5_get_send_wqe(qp, 0)`).
//!
//! Callers guarantee: `ring.len()` is a non-zero multiple of 16, offsets are below
//! `ring.len()`, and no single copy is longer than the ring.

use super::DS_LEN;

/// Copies `data` into `ring` starting at `off`, wrapping at the end; returns the offset after
/// the last byte (`(off + data.len()) % ring.len()`).
#[inline]
pub(crate) fn put(ring: &mut [u8], off: usize, data: &[u8]) -> usize {
    let len = ring.len();
    let first = (len - off).min(data.len());
    ring[off..off + first].copy_from_slice(&data[..first]);
    let rest = data.len() - first;
    if rest == 0 {
        let end = off + first;
        return if end == len { 0 } else { end };
    }
    ring[..rest].copy_from_slice(&data[first..]);
    rest
}

/// Writes `n` zero bytes at `off`, wrapping; returns the offset after them.
#[inline]
pub(crate) fn zero(ring: &mut [u8], off: usize, n: usize) -> usize {
    let len = ring.len();
    let first = (len - off).min(n);
    ring[off..off + first].fill(0);
    let rest = n - first;
    if rest == 0 {
        let end = off + first;
        return if end == len { 0 } else { end };
    }
    ring[..rest].fill(0);
    rest
}

/// The offset `n` bytes after `off`, wrapping.
#[inline]
pub(crate) fn advance(ring_len: usize, off: usize, n: usize) -> usize {
    let end = off + n;
    if end >= ring_len {
        end - ring_len
    } else {
        end
    }
}

/// Stores a 16-byte segment given as two big-endian words at `off` of `buf` (two 8-byte
/// stores; with constant offsets into a buffer of known length the bounds checks fold away).
#[inline(always)]
pub(crate) fn put_words(buf: &mut [u8], off: usize, (a, b): (u64, u64)) {
    let c = &mut buf[off..off + DS_LEN];
    c[..8].copy_from_slice(&a.to_be_bytes());
    c[8..].copy_from_slice(&b.to_be_bytes());
}

/// Where a WQE's segments are written: a byte slice, or the send queue's cells
/// (`super::cells`). Offsets are in bytes, 16-aligned; a segment that reaches the end of the
/// destination continues at offset 0.
pub(crate) trait SegSink {
    /// Stores a 16-byte segment given as two big-endian words at `off`.
    fn put_words(&mut self, off: usize, words: (u64, u64));
    /// Writes `seg` at `off`; returns the offset after it (0 when it reached the end).
    fn put_segment(&mut self, seg: &super::Segment<'_>, off: usize) -> usize;
}

impl SegSink for [u8] {
    #[inline(always)]
    fn put_words(&mut self, off: usize, words: (u64, u64)) {
        put_words(self, off, words);
    }

    #[inline(always)]
    fn put_segment(&mut self, seg: &super::Segment<'_>, off: usize) -> usize {
        seg.write(self, off)
    }
}

/// The 16-byte chunk at `off` (which is 16-aligned, so a chunk never straddles the end).
#[inline]
pub(crate) fn chunk_mut(ring: &mut [u8], off: usize) -> &mut [u8] {
    &mut ring[off..off + DS_LEN]
}

/// The 16-byte chunk at `off`, read-only.
#[inline]
pub(crate) fn chunk(ring: &[u8], off: usize) -> &[u8] {
    &ring[off..off + DS_LEN]
}

/// Copies `out.len()` bytes starting at `off` out of the ring, wrapping.
#[inline]
pub(crate) fn get(ring: &[u8], off: usize, out: &mut [u8]) {
    let first = (ring.len() - off).min(out.len());
    out[..first].copy_from_slice(&ring[off..off + first]);
    let rest = out.len() - first;
    out[first..].copy_from_slice(&ring[..rest]);
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_put_wraps() {
        let mut r = [0u8; 32];
        assert_eq!(put(&mut r, 28, &[1, 2, 3, 4, 5, 6]), 2);
        assert_eq!(r[28..], [1, 2, 3, 4]);
        assert_eq!(r[..2], [5, 6]);
        assert_eq!(put(&mut r, 16, &[9; 16]), 0);
        assert_eq!(zero(&mut r, 30, 4), 2);
        assert_eq!(r[..2], [0, 0]);
        assert_eq!(advance(32, 16, 16), 0);
        assert_eq!(advance(32, 16, 40), 24);
        let mut o = [0u8; 4];
        r[31] = 7;
        r[0] = 8;
        get(&r, 30, &mut o);
        assert_eq!(o, [0, 7, 8, 0]);
    }
}
