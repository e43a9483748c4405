//! The send queue's ring as shared 8-byte cells, so that [`SqWriter`](super::SqWriter) can
//! hold the whole ring and, at the same time, the free window it writes next (both are
//! `&[Cell<..>]`, which may alias; two `&mut [u8]` may not).
//!
//! Why: with the window held as a slice, a post's stores go to `window.as_ptr() + constant`
//! and the window pointer is carried from post to post in a register. With the ring as one
//! `&mut [u8]` and the producer's position as an offset, the compiler folds `ring + offset`
//! into every store (`mov %rcx,0x10(%rbp,%rax,1)`: base + index addressing), which made a WQE
//! about 25 % slower on the AMD Zen 4 this was measured on (docs/benchmarks.md).
//!
//! A cell is `Cell<[u8; 8]>` from Rust 1.88 on (`as_chunks_mut`): a 64-bit big-endian word is
//! one 8-byte store. Before 1.88 (the crate's minimum is 1.80) it is `Cell<u8>`: the same
//! bytes, stored byte by byte. Offsets and lengths here are in bytes and multiples of 8 (every
//! WQE segment is 16-byte aligned and a multiple of 16 bytes long).

use core::cell::Cell;

use super::ring::SegSink;
use super::DS_LEN;

/// One cell of the ring.
#[rustversion::since(1.88)]
pub(crate) type Word = Cell<[u8; 8]>;
/// One cell of the ring.
#[rustversion::before(1.88)]
pub(crate) type Word = Cell<u8>;

/// Bytes per cell.
#[rustversion::since(1.88)]
pub(crate) const WORD: usize = 8;
/// Bytes per cell.
#[rustversion::before(1.88)]
pub(crate) const WORD: usize = 1;

/// `ring` (a multiple of 8 bytes long) as cells; `ring.len() / WORD` of them.
#[rustversion::since(1.88)]
#[allow(clippy::incompatible_msrv)]
#[inline]
pub(crate) fn from_bytes(ring: &mut [u8]) -> &[Word] {
    Cell::from_mut(ring.as_chunks_mut::<8>().0).as_slice_of_cells()
}

/// `ring` as cells; `ring.len() / WORD` of them.
#[rustversion::before(1.88)]
#[inline]
pub(crate) fn from_bytes(ring: &mut [u8]) -> &[Word] {
    Cell::from_mut(ring).as_slice_of_cells()
}

/// Stores `v` big-endian at byte `off` (a multiple of 8) of `c`.
#[rustversion::since(1.88)]
#[inline(always)]
pub(crate) fn set_be(c: &[Word], off: usize, v: u64) {
    c[off / WORD].set(v.to_be_bytes());
}

/// Stores `v` big-endian at byte `off` of `c`.
#[rustversion::before(1.88)]
#[inline(always)]
pub(crate) fn set_be(c: &[Word], off: usize, v: u64) {
    for (c, b) in c[off..off + 8].iter().zip(v.to_be_bytes()) {
        c.set(b);
    }
}

/// The 8 bytes at byte `off` (a multiple of 8) of `c`.
#[rustversion::since(1.88)]
#[inline(always)]
pub(crate) fn get(c: &[Word], off: usize) -> [u8; 8] {
    c[off / WORD].get()
}

/// The 8 bytes at byte `off` of `c`.
#[rustversion::before(1.88)]
#[inline(always)]
pub(crate) fn get(c: &[Word], off: usize) -> [u8; 8] {
    let mut b = [0u8; 8];
    for (b, c) in b.iter_mut().zip(&c[off..off + 8]) {
        *b = c.get();
    }
    b
}

/// Length of `c` in bytes.
#[inline(always)]
pub(crate) const fn byte_len(c: &[Word]) -> usize {
    c.len() * WORD
}

/// Copies `data` (a multiple of 8 bytes, no longer than the ring) into the ring `c` from byte
/// `off` (a multiple of 8, inside the ring), continuing at byte 0 past the end; returns the
/// offset after the last byte, modulo the ring length.
pub(crate) fn put(c: &[Word], off: usize, data: &[u8]) -> usize {
    let len = byte_len(c);
    let mut o = off;
    for w in data.chunks_exact(8) {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        set_be(c, o, u64::from_be_bytes(b));
        o += 8;
        if o == len {
            o = 0;
        }
    }
    o
}

/// Copies `out.len()` bytes (no more than the ring) out of the ring `c` from byte `off` (a
/// multiple of 8, inside the ring), continuing at byte 0 past the end.
pub(crate) fn copy_out(c: &[Word], off: usize, out: &mut [u8]) {
    let len = byte_len(c);
    let mut o = off;
    for w in out.chunks_mut(8) {
        w.copy_from_slice(&get(c, o)[..w.len()]);
        o += 8;
        if o == len {
            o = 0;
        }
    }
}

/// Writes an inline-data segment with payload `data` at byte `off` (16-aligned) of `c`, word by
/// word: the 4-byte header (`byte_count | MLX5_INLINE_SEG`, big-endian), the payload, zeros up
/// to the next 16 bytes (rdma-core qp.c `set_data_inl_seg`); continues at byte 0 past the end
/// and returns the offset after it (0 at the end).
fn put_inline(c: &[Word], off: usize, data: &[u8]) -> usize {
    let len = byte_len(c);
    let end = super::inline::seg_len(data.len());
    let step = |o: usize| if o + 8 == len { 0 } else { o + 8 };
    let mut w = [0u8; 8];
    w[..4].copy_from_slice(&(data.len() as u32 | super::INLINE_SEG).to_be_bytes());
    let k = data.len().min(4);
    w[4..4 + k].copy_from_slice(&data[..k]);
    set_be(c, off, u64::from_be_bytes(w));
    let mut o = step(off);
    let mut done = 8;
    for ch in data[k..].chunks(8) {
        let mut w = [0u8; 8];
        w[..ch.len()].copy_from_slice(ch);
        set_be(c, o, u64::from_be_bytes(w));
        o = step(o);
        done += 8;
    }
    while done < end {
        set_be(c, o, 0);
        o = step(o);
        done += 8;
    }
    o
}

impl SegSink for &[Word] {
    #[inline(always)]
    fn put_words(&mut self, off: usize, (a, b): (u64, u64)) {
        set_be(self, off, a);
        set_be(self, off + 8, b);
    }

    fn put_segment(&mut self, seg: &super::Segment<'_>, off: usize) -> usize {
        if let super::Segment::Inline(b) = seg {
            if b.tail.is_empty() {
                return put_inline(self, off, b.head);
            }
        }
        // Built in bytes, then copied in (Ethernet headers, the datagram segment). The
        // temporary is sized to the segment's class so that a small segment does not pay for
        // zeroing the largest one (the datagram segment is 48 bytes).
        const ONE: usize = super::WQEBB_LEN;
        const SMALL: usize = 4 * super::WQEBB_LEN;
        let n = seg.len();
        if n <= ONE {
            let mut tmp = [0u8; ONE];
            seg.write(&mut tmp[..n], 0);
            put(self, off, &tmp[..n])
        } else if n <= SMALL {
            let mut tmp = [0u8; SMALL];
            seg.write(&mut tmp[..n], 0);
            put(self, off, &tmp[..n])
        } else {
            let mut tmp = [0u8; super::MAX_DS * DS_LEN];
            let n = n.min(tmp.len());
            seg.write(&mut tmp[..n], 0);
            put(self, off, &tmp[..n])
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mlx5::{Segment, SplitBytes};

    #[test]
    fn test_inline_words_match_bytes() {
        // Every payload length up to three WQEBBs, at a 16-aligned offset that makes the
        // longer ones wrap: the same bytes as the byte-slice writer.
        let data: [u8; 180] = core::array::from_fn(|i| (i as u8).wrapping_mul(7) ^ 0x5a);
        for n in 0..data.len() {
            let seg = Segment::Inline(SplitBytes::new(&data[..n]));
            let mut want = [0xeeu8; 256];
            let end_b = seg.write(&mut want, 160);
            let mut got = [0xeeu8; 256];
            let end_c = {
                let mut c = from_bytes(&mut got);
                c.put_segment(&seg, 160)
            };
            assert_eq!((end_c, &got[..]), (end_b, &want[..]), "payload {n}");
        }
    }

    #[test]
    fn test_put_get_wrap() {
        let mut ring = [0u8; 32];
        {
            let c = from_bytes(&mut ring);
            assert_eq!(byte_len(c), 32);
            set_be(c, 8, 0x0102_0304_0506_0708);
            assert_eq!(get(c, 8), [1, 2, 3, 4, 5, 6, 7, 8]);
            let data: [u8; 16] = core::array::from_fn(|i| 0x10 + i as u8);
            assert_eq!(put(c, 24, &data), 8);
            let mut out = [0u8; 16];
            copy_out(c, 24, &mut out);
            assert_eq!(out, data);
            assert_eq!(put(c, 16, &data), 0);
        }
        assert_eq!(ring[8..16], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(ring[..8], [0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f]);
        assert_eq!(
            ring[16..24],
            [0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17]
        );
    }
}
