//! Packet Sequence Number: 24-bit modular arithmetic (IBTA vol. 1 §9.7.1).

use core::cmp::Ordering;
use core::fmt;

/// A 24-bit Packet Sequence Number.
///
/// Arithmetic wraps modulo 2^24. Ordering follows rxe's `psn_compare`
/// (`(s32)((a - b) << 8)`): `a` is after `b` iff it lies within the 2^23 PSNs that follow `b`.
/// This is not a total order, so `Psn` implements [`PartialOrd`] only through [`Psn::cmp_window`].
///
/// Source: IBTA vol. 1 §9.7.1 (PSN), Linux `drivers/infiniband/sw/rxe/rxe_verbs.h` `psn_compare`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Psn(u32);

impl Psn {
    /// Mask of the 24 significant bits.
    pub const MASK: u32 = 0x00ff_ffff;
    /// Half the sequence space (2^23): the comparison window.
    pub const WINDOW: u32 = 1 << 23;

    /// Makes a PSN from the low 24 bits of `v` (higher bits are discarded).
    #[inline]
    pub const fn new(v: u32) -> Psn {
        Psn(v & Self::MASK)
    }

    /// The PSN as a number in `0..2^24`.
    #[inline]
    pub const fn value(self) -> u32 {
        self.0
    }

    /// `self + n` modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn add(self, n: u32) -> Psn {
        Psn(self.0.wrapping_add(n) & Self::MASK)
    }

    /// `self - n` modulo 2^24.
    #[inline]
    #[allow(clippy::should_implement_trait)]
    pub const fn sub(self, n: u32) -> Psn {
        Psn(self.0.wrapping_sub(n) & Self::MASK)
    }

    /// Forward distance from `earlier` to `self` modulo 2^24 (`self - earlier`), in `0..2^24`.
    #[inline]
    pub const fn distance_from(self, earlier: Psn) -> u32 {
        self.0.wrapping_sub(earlier.0) & Self::MASK
    }

    /// Signed difference `self - other` in the 2^23 window: in `-2^23..2^23`.
    #[inline]
    pub const fn diff(self, other: Psn) -> i32 {
        ((self.0.wrapping_sub(other.0)) << 8) as i32 >> 8
    }

    /// Window comparison: `Greater` when `self` lies in the 2^23 PSNs after `other`,
    /// `Less` when it lies in the 2^23 before, `Equal` when they are the same.
    #[inline]
    pub fn cmp_window(self, other: Psn) -> Ordering {
        self.diff(other).cmp(&0)
    }

    /// `true` when `self` comes strictly after `other` in the window.
    #[inline]
    pub fn after(self, other: Psn) -> bool {
        self.diff(other) > 0
    }

    /// `true` when `self` comes strictly before `other` in the window.
    #[inline]
    pub fn before(self, other: Psn) -> bool {
        self.diff(other) < 0
    }
}

impl From<Psn> for u32 {
    fn from(p: Psn) -> u32 {
        p.0
    }
}

impl fmt::Display for Psn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn wraps() {
        assert_eq!(Psn::new(0xff_ffff).add(1), Psn::new(0));
        assert_eq!(Psn::new(0).sub(1), Psn::new(0xff_ffff));
        assert_eq!(Psn::new(0x1ff_fffe).value(), 0xff_fffe);
        assert_eq!(Psn::new(2).distance_from(Psn::new(0xff_fffe)), 4);
    }

    #[test]
    fn window_compare() {
        let a = Psn::new(0xff_fff0);
        let b = Psn::new(0x10);
        assert!(b.after(a));
        assert!(a.before(b));
        assert_eq!(b.diff(a), 0x20);
        assert_eq!(a.diff(b), -0x20);
        // Exactly 2^23 apart: rxe treats the difference as negative (i32 sign bit).
        assert_eq!(
            Psn::new(Psn::WINDOW).diff(Psn::new(0)),
            -(Psn::WINDOW as i32)
        );
        assert_eq!(
            Psn::new(Psn::WINDOW - 1).diff(Psn::new(0)),
            (Psn::WINDOW - 1) as i32
        );
        assert_eq!(a.cmp_window(a), Ordering::Equal);
    }
}
