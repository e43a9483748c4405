//! A bitmap of PSNs in a window of [`SR_WINDOW`] PSNs that slides forward: which packets the
//! selective-repeat responder holds beyond ePSN, and which PSNs the requester must resend or
//! has resent. Bit `i` stands for PSN `base + i` (modulo 2^24).

use super::recovery::SR_WINDOW;
use crate::wire::Psn;

/// A set of PSNs within `[base, base + 128)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PsnBits {
    base: Psn,
    bits: u128,
}

impl PsnBits {
    /// Moves the window start forward to `to` (PSNs before it are dropped). Moving backwards
    /// or by 2^23 or more clears the set.
    pub(crate) fn advance(&mut self, to: Psn) {
        let d = to.diff(self.base);
        if d <= 0 {
            if d < 0 {
                self.bits = 0;
            }
        } else if d as u32 >= SR_WINDOW {
            self.bits = 0;
        } else {
            self.bits >>= d as u32;
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
                self.bits |= 1u128 << i;
                true
            }
            None => false,
        }
    }

    /// Removes `psn`.
    pub(crate) fn remove(&mut self, psn: Psn) {
        if let Some(i) = self.offset(psn) {
            self.bits &= !(1u128 << i);
        }
    }

    /// `true` when `psn` is in the set.
    pub(crate) fn contains(&self, psn: Psn) -> bool {
        self.offset(psn).is_some_and(|i| self.bits >> i & 1 == 1)
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
        let rest = self.bits >> skip;
        (rest != 0).then(|| self.base.add(skip + rest.trailing_zeros()))
    }

    /// Empties the set.
    pub(crate) fn clear(&mut self) {
        self.bits = 0;
    }

    /// The set as a bitmap relative to the window start (bit i: PSN `base + i`).
    pub(crate) fn bits(&self) -> u128 {
        self.bits
    }

    /// Adds every PSN `at + i` whose bit i is set in `bits` (those inside the window).
    pub(crate) fn insert_bits_at(&mut self, at: Psn, bits: u128) {
        let d = at.diff(self.base);
        if d >= 0 && (d as u32) < SR_WINDOW {
            self.bits |= bits << d as u32;
        } else if d < 0 && d.unsigned_abs() < SR_WINDOW {
            self.bits |= bits >> d.unsigned_abs();
        }
    }

    /// The highest PSN in the set.
    pub(crate) fn highest(&self) -> Option<Psn> {
        (self.bits != 0).then(|| self.base.add(127 - self.bits.leading_zeros()))
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
        assert!(!b.insert(Psn::new(0xff_fffe + 128)), "outside the window");
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
}
