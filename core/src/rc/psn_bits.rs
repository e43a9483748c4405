//! A bitmap of PSNs in a window of [`SR_WINDOW`] PSNs that slides forward: which packets the
//! selective-repeat responder holds beyond ePSN, and which PSNs the requester must resend or
//! has resent. Bit `i` stands for PSN `base + i` (modulo 2^24).

use super::recovery::SR_WINDOW;
use crate::wire::Psn;

/// 256 bits: `[0]` holds bits 0..128, `[1]` bits 128..256 (the SACK block's layout,
/// [`crate::wire::SackRepr::held`]).
type Bits = [u128; 2];

const _: () = assert!(SR_WINDOW == 256);

fn shr(b: Bits, n: u32) -> Bits {
    match n {
        0 => b,
        1..=127 => [b[0] >> n | b[1] << (128 - n), b[1] >> n],
        128..=255 => [b[1] >> (n - 128), 0],
        _ => [0, 0],
    }
}

fn shl(b: Bits, n: u32) -> Bits {
    match n {
        0 => b,
        1..=127 => [b[0] << n, b[1] << n | b[0] >> (128 - n)],
        128..=255 => [0, b[0] << (n - 128)],
        _ => [0, 0],
    }
}

fn trailing_zeros(b: Bits) -> u32 {
    if b[0] != 0 {
        b[0].trailing_zeros()
    } else {
        128 + b[1].trailing_zeros()
    }
}

/// A set of offsets `0..SR_WINDOW` relative to some PSN (bit i: that PSN + i): what the
/// selective-repeat requester computes its loss marks with, a whole window per operation
/// instead of one PSN at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Mask(Bits);

/// Bits `0..n` (all of them for `n >= SR_WINDOW`).
#[inline]
fn low_ones(n: u32) -> Bits {
    match n {
        0 => [0, 0],
        1..=127 => [(1u128 << n) - 1, 0],
        128 => [u128::MAX, 0],
        129..=255 => [u128::MAX, (1u128 << (n - 128)) - 1],
        _ => [u128::MAX, u128::MAX],
    }
}

impl Mask {
    /// Offsets `lo..hi` (clamped to the window; empty when `hi <= lo`).
    #[inline]
    pub(crate) fn range(lo: u32, hi: u32) -> Mask {
        if hi <= lo {
            return Mask::default();
        }
        let (a, b) = (low_ones(hi), low_ones(lo));
        Mask([a[0] & !b[0], a[1] & !b[1]])
    }

    /// `true` when no offset is in the set.
    pub(crate) fn is_empty(self) -> bool {
        self.0 == [0, 0]
    }

    /// `true` when offset `i` is in the set.
    pub(crate) fn has(self, i: u32) -> bool {
        i < SR_WINDOW && self.0[(i / 128) as usize] >> (i % 128) & 1 == 1
    }

    /// The lowest offset in the set.
    pub(crate) fn lowest(self) -> Option<u32> {
        (!self.is_empty()).then(|| trailing_zeros(self.0))
    }

    /// The offsets in the set, lowest first.
    pub(crate) fn ones(self) -> impl Iterator<Item = u32> {
        let mut rest = self.0;
        core::iter::from_fn(move || {
            if rest == [0, 0] {
                return None;
            }
            let i = trailing_zeros(rest);
            rest[(i / 128) as usize] &= !(1u128 << (i % 128));
            Some(i)
        })
    }
}

impl core::ops::BitAnd for Mask {
    type Output = Mask;
    fn bitand(self, o: Mask) -> Mask {
        Mask([self.0[0] & o.0[0], self.0[1] & o.0[1]])
    }
}

impl core::ops::BitOr for Mask {
    type Output = Mask;
    fn bitor(self, o: Mask) -> Mask {
        Mask([self.0[0] | o.0[0], self.0[1] | o.0[1]])
    }
}

impl core::ops::Not for Mask {
    type Output = Mask;
    fn not(self) -> Mask {
        Mask([!self.0[0], !self.0[1]])
    }
}

/// A set of PSNs within `[base, base + SR_WINDOW)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PsnBits {
    base: Psn,
    bits: Bits,
}

impl PsnBits {
    /// Moves the window start forward to `to` (PSNs before it are dropped). Moving backwards
    /// or by 2^23 or more clears the set.
    pub(crate) fn advance(&mut self, to: Psn) {
        // An empty set (the scoreboards of a loss-free flow, advanced by every ACK) stays
        // empty whichever way the window moves.
        if self.bits == [0, 0] {
            self.base = to;
            return;
        }
        let d = to.diff(self.base);
        if d < 0 {
            self.bits = [0, 0];
        } else {
            self.bits = shr(self.bits, d as u32);
        }
        self.base = to;
    }

    /// Offset of `psn` in the window, if it lies inside.
    fn offset(&self, psn: Psn) -> Option<u32> {
        let d = psn.distance_from(self.base);
        (d < SR_WINDOW).then_some(d)
    }

    /// Adds `psn`; `false` (and nothing changes) when it lies outside the window.
    pub(crate) fn insert(&mut self, psn: Psn) -> bool {
        match self.offset(psn) {
            Some(i) => {
                self.bits[(i / 128) as usize] |= 1u128 << (i % 128);
                true
            }
            None => false,
        }
    }

    /// Removes `psn`.
    pub(crate) fn remove(&mut self, psn: Psn) {
        if let Some(i) = self.offset(psn) {
            self.bits[(i / 128) as usize] &= !(1u128 << (i % 128));
        }
    }

    /// `true` when `psn` is in the set.
    pub(crate) fn contains(&self, psn: Psn) -> bool {
        self.offset(psn)
            .is_some_and(|i| self.bits[(i / 128) as usize] >> (i % 128) & 1 == 1)
    }

    /// The first PSN in the set at or after `from` (`from` inside the window or before it).
    pub(crate) fn first_from(&self, from: Psn) -> Option<Psn> {
        let skip = if from.after(self.base) {
            from.distance_from(self.base)
        } else {
            0
        };
        if skip >= SR_WINDOW {
            return None;
        }
        let rest = shr(self.bits, skip);
        (rest != [0, 0]).then(|| self.base.add(skip + trailing_zeros(rest)))
    }

    /// Empties the set.
    pub(crate) fn clear(&mut self) {
        self.bits = [0, 0];
    }

    /// `true` when the set is empty.
    pub(crate) fn is_empty(&self) -> bool {
        self.bits == [0, 0]
    }

    /// The set as a bitmap relative to the window start (bit i: PSN `base + i`).
    pub(crate) fn bits(&self) -> [u128; 2] {
        self.bits
    }

    /// The set's bits relative to `from` (bit i: PSN `from + i`; PSNs before `from` or
    /// `SR_WINDOW` or more after it are left out).
    fn bits_from(&self, from: Psn) -> Bits {
        let d = from.diff(self.base);
        if d >= 0 {
            shr(self.bits, d as u32)
        } else {
            shl(self.bits, d.unsigned_abs())
        }
    }

    /// The set relative to `from` (offset i: PSN `from + i`; PSNs before `from` or
    /// `SR_WINDOW` or more after it are left out).
    pub(crate) fn mask_from(&self, from: Psn) -> Mask {
        Mask(self.bits_from(from))
    }

    /// How many PSNs in `[from, from + SR_WINDOW)` are in `self` or `other` (whatever their
    /// window starts).
    pub(crate) fn union_len_from(&self, other: &PsnBits, from: Psn) -> u32 {
        let (a, b) = (self.bits_from(from), other.bits_from(from));
        (a[0] | b[0]).count_ones() + (a[1] | b[1]).count_ones()
    }

    /// Adds every PSN `at + i` whose bit i is set in `bits` (those inside the window).
    pub(crate) fn insert_bits_at(&mut self, at: Psn, bits: [u128; 2]) {
        let add = PsnBits { base: at, bits }.bits_from(self.base);
        self.bits = [self.bits[0] | add[0], self.bits[1] | add[1]];
    }

    /// The highest PSN in the set.
    pub(crate) fn highest(&self) -> Option<Psn> {
        if self.bits[1] != 0 {
            Some(self.base.add(255 - self.bits[1].leading_zeros()))
        } else if self.bits[0] != 0 {
            Some(self.base.add(127 - self.bits[0].leading_zeros()))
        } else {
            None
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn window_slides_and_wraps() {
        let mut b = PsnBits::default();
        b.advance(Psn::new(0xff_fffe));
        assert!(b.insert(Psn::new(0xff_ffff)));
        assert!(b.insert(Psn::new(3)));
        assert!(
            !b.insert(Psn::new(0xff_fffe + SR_WINDOW)),
            "outside the window"
        );
        assert!(b.contains(Psn::new(3)));
        assert!(!b.contains(Psn::new(2)));
        assert_eq!(b.first_from(Psn::new(0xff_fffe)), Some(Psn::new(0xff_ffff)));
        assert_eq!(b.first_from(Psn::new(0)), Some(Psn::new(3)));
        assert_eq!(b.first_from(Psn::new(4)), None);
        b.advance(Psn::new(1));
        assert!(!b.contains(Psn::new(0xff_ffff)), "dropped");
        assert!(b.contains(Psn::new(3)));
        b.remove(Psn::new(3));
        assert_eq!(b.first_from(Psn::new(1)), None);
        assert!(b.is_empty());
        b.insert(Psn::new(128));
        b.advance(Psn::new(1 + 500));
        assert_eq!(b.first_from(Psn::new(501)), None, "moved past: cleared");
        b.insert(Psn::new(600));
        b.advance(Psn::new(0));
        assert_eq!(b.first_from(Psn::new(0)), None, "moved back: cleared");
        b.insert(Psn::new(5));
        b.clear();
        assert!(!b.contains(Psn::new(5)));
    }

    /// Every operation against a plain list of PSNs, across the two 128-bit halves.
    #[test]
    fn both_halves_agree_with_a_list() {
        let base = Psn::new(0xff_ff00);
        let mut b = PsnBits::default();
        b.advance(base);
        let offsets = [0u32, 1, 63, 64, 126, 127, 128, 129, 200, 254, 255];
        for &o in &offsets {
            assert!(b.insert(base.add(o)));
        }
        assert!(!b.insert(base.add(256)));
        let empty = PsnBits::default();
        assert_eq!(b.union_len_from(&empty, base), 11);
        assert_eq!(b.union_len_from(&b, base.add(128)), 5, "from 128 on");
        let mut other = PsnBits::default();
        other.advance(base.add(100));
        other.insert(base.add(130));
        other.insert(base.add(300));
        assert_eq!(
            b.union_len_from(&other, base),
            12,
            "130 is new, 300 out of range"
        );
        assert_eq!(
            other.union_len_from(&b, base.add(129)),
            6,
            "129, 130, 200, 254, 255 and 300"
        );
        assert_eq!(b.highest(), Some(base.add(255)));
        // first_from walks the list in order.
        let mut seen = Vec::new();
        let mut at = base;
        while let Some(p) = b.first_from(at) {
            seen.push(p.distance_from(base));
            at = p.add(1);
        }
        assert_eq!(seen, offsets);
        // Sliding by every amount keeps exactly the PSNs at or after the new start.
        for d in [0u32, 1, 5, 100, 127, 128, 129, 200, 255, 256, 300] {
            let mut s = b;
            s.advance(base.add(d));
            for &o in &offsets {
                assert_eq!(s.contains(base.add(o)), o >= d, "slide {d}, offset {o}");
            }
            let hi = offsets.iter().copied().filter(|&o| o >= d).max();
            assert_eq!(s.highest(), hi.map(|o| base.add(o)), "slide {d}");
        }
        // A block of bits inserted at another start lands at the same PSNs.
        for at in [0u32, 1, 127, 128, 129, 250] {
            let blk = shr(b.bits(), at);
            let mut s = PsnBits::default();
            s.advance(base);
            s.insert_bits_at(base.add(at), blk);
            for &o in &offsets {
                assert_eq!(
                    s.contains(base.add(o)),
                    o >= at,
                    "block at {at}, offset {o}"
                );
            }
        }
        // ... and one inserted before the start is cut at it.
        let mut s = PsnBits::default();
        s.advance(base.add(130));
        s.insert_bits_at(base, b.bits());
        for &o in &offsets {
            assert_eq!(s.contains(base.add(o)), o >= 130, "offset {o}");
        }
        b.remove(base.add(128));
        assert!(!b.contains(base.add(128)) && b.contains(base.add(129)));
    }

    /// Masks agree with plain lists of offsets, across the two 128-bit halves.
    #[test]
    fn masks_agree_with_lists() {
        let cuts = [0u32, 1, 5, 127, 128, 129, 200, 255, 256, 300];
        for &lo in &cuts {
            for &hi in &cuts {
                let m = Mask::range(lo, hi);
                let want: Vec<u32> = (lo..hi.min(SR_WINDOW)).collect();
                assert_eq!(m.ones().collect::<Vec<_>>(), want, "{lo}..{hi}");
                assert_eq!(m.lowest(), want.first().copied(), "{lo}..{hi}");
                assert_eq!(m.is_empty(), want.is_empty());
                for i in 0..SR_WINDOW + 2 {
                    assert_eq!(m.has(i), want.contains(&i), "{lo}..{hi} has {i}");
                }
                let all = Mask::range(0, SR_WINDOW);
                assert_eq!((m | !m), all);
                assert!((m & !m).is_empty());
            }
        }
        let base = Psn::new(0xff_fff0);
        let mut b = PsnBits::default();
        b.advance(base);
        for o in [0u32, 20, 130, 255] {
            b.insert(base.add(o));
        }
        let got: Vec<u32> = b.mask_from(base.add(20)).ones().collect();
        assert_eq!(
            got,
            [0, 110, 235],
            "relative to base + 20, across the PSN wrap"
        );
    }
}
