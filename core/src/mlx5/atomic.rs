//! Atomic segment: 16 bytes after the remote-address segment of compare-swap and fetch-add
//! (mlx5dv.h `struct mlx5_wqe_atomic_seg`; rdma-core qp.c `_set_atomic_seg`).
//!
//! ```text
//! bytes 0-7: swap_add (BE64) | bytes 8-15: compare (BE64)
//! ```
//! Compare-swap: `swap_add` = swap value, `compare` = compare value. Fetch-add: `swap_add` =
//! value to add, `compare` unused (rdma-core leaves it unwritten; this crate writes 0).

use super::Result;
use crate::wire::{read_u64, write_u64};

mod field {
    use crate::wire::Field;

    pub const SWAP_ADD: Field = 0..8;
    pub const COMPARE: Field = 8..16;
}

/// Length of an atomic segment in bytes.
pub const LEN: usize = field::COMPARE.end;

mlx5_view!(AtomicSeg, "an atomic segment");

impl<T: AsRef<[u8]>> AtomicSeg<T> {
    /// Swap value (compare-swap) or value to add (fetch-add) (bytes 0–7).
    #[inline]
    pub fn swap_add(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SWAP_ADD)
    }

    /// Compare value (bytes 8–15).
    #[inline]
    pub fn compare(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicSeg<T> {
    /// Sets the swap / add value.
    #[inline]
    pub fn set_swap_add(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::SWAP_ADD, v)
    }

    /// Sets the compare value.
    #[inline]
    pub fn set_compare(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::COMPARE, v)
    }
}

/// The parsed form of an atomic segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AtomicRepr {
    /// Swap value (compare-swap) or value to add (fetch-add).
    pub swap_add: u64,
    /// Compare value (compare-swap; 0 for fetch-add).
    pub compare: u64,
}

impl AtomicRepr {
    /// Parses an atomic segment.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) below 16 bytes.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &AtomicSeg<&T>) -> Result<AtomicRepr> {
        seg.check_len()?;
        Ok(AtomicRepr {
            swap_add: seg.swap_add(),
            compare: seg.compare(),
        })
    }

    /// Length of the emitted segment: 16 bytes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// The 16 bytes as two big-endian words: swap (or add), then compare.
    #[inline(always)]
    pub const fn words(&self) -> (u64, u64) {
        (self.swap_add, self.compare)
    }

    /// Writes the 16 bytes; panics below 16 bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, seg: &mut AtomicSeg<&mut T>) {
        crate::mlx5::ring::put_words(seg.buffer.as_mut(), 0, self.words());
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_parse_emit() {
        let r = AtomicRepr {
            swap_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
        };
        let mut b = [0u8; 16];
        r.emit(&mut AtomicSeg::new_unchecked(&mut b[..]));
        assert_eq!(b[..8], [1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[8..], [0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        assert_eq!(
            AtomicRepr::parse(&AtomicSeg::new_unchecked(&b[..])).unwrap(),
            r
        );
    }
}
