//! [`Entropy`]: the byte cursor every generator decision reads from.
//!
//! The same idea as `arbitrary::Unstructured`, without a heap or `std`: each decision takes a
//! few bytes from the front of a slice, and an exhausted slice reads as zeros, so every input
//! (a libFuzzer test case, or bytes from a seeded PRNG) generates a frame, and short inputs
//! generate the simplest ones. Multi-byte integers are little-endian.

/// A cursor over the bytes that drive the generator.
#[derive(Debug, Clone)]
pub struct Entropy<'a> {
    data: &'a [u8],
}

impl<'a> Entropy<'a> {
    /// Reads decisions from `data`.
    pub const fn new(data: &'a [u8]) -> Entropy<'a> {
        Entropy { data }
    }

    /// Bytes not read yet.
    pub const fn remaining(&self) -> usize {
        self.data.len()
    }

    /// The next byte, or 0 when exhausted.
    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A little-endian u16 (zeros past the end).
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }

    /// A little-endian u32 (zeros past the end).
    pub fn u32(&mut self) -> u32 {
        u32::from(self.u16()) | (u32::from(self.u16()) << 16)
    }

    /// A little-endian u64 (zeros past the end).
    pub fn u64(&mut self) -> u64 {
        u64::from(self.u32()) | (u64::from(self.u32()) << 32)
    }

    /// `true` with probability 1/2 (`false` when exhausted).
    pub fn bool(&mut self) -> bool {
        self.byte() & 1 != 0
    }

    /// `true` with probability `num/den` for `den` ≤ 256 (`false` when exhausted and `num` <
    /// `den`).
    pub fn ratio(&mut self, num: u8, den: u16) -> bool {
        let den = den.clamp(1, 256);
        (u16::from(self.byte()) % den) < u16::from(num)
    }

    /// A value in `lo..=hi` (`lo` when exhausted or `hi < lo`). Reads as few bytes as the
    /// span needs.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        let span = hi - lo;
        let v = if span <= 0xff {
            u64::from(self.byte())
        } else if span <= 0xffff {
            u64::from(self.u16())
        } else if span <= 0xffff_ffff {
            u64::from(self.u32())
        } else {
            self.u64()
        };
        match span.checked_add(1) {
            Some(m) => lo + v % m,
            None => v,
        }
    }

    /// A value in `0..n` as usize (0 when `n` is 0 or exhausted).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            self.range(0, n as u64 - 1) as usize
        }
    }

    /// One element of a non-empty slice (the first when exhausted).
    ///
    /// # Panics
    /// When `items` is empty.
    pub fn choose<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn exhausted_reads_zero() {
        let mut e = Entropy::new(&[0xff, 0x01]);
        assert_eq!(e.u16(), 0x01ff);
        assert_eq!(e.u32(), 0);
        assert!(!e.bool());
        assert_eq!(e.range(5, 9), 5);
        assert_eq!(e.choose(&[7, 8]), 7);
    }

    #[test]
    fn range_bounds() {
        let data: [u8; 64] = core::array::from_fn(|i| (i * 37 + 11) as u8);
        let mut e = Entropy::new(&data);
        for _ in 0..20 {
            let v = e.range(10, 12);
            assert!((10..=12).contains(&v));
        }
        let mut e = Entropy::new(&[0xff; 8]);
        assert_eq!(e.range(0, u64::MAX), u64::MAX);
    }
}
