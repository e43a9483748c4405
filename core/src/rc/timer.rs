//! Time as an input: the caller's [`Instant`], the RC retransmit timer and the RNR timer.
//!
//! Nothing here reads a clock. The QP computes deadlines from the `now` values it is given and
//! reports the earliest one through `RcQp::next_deadline`; the caller calls
//! `RcQp::handle_timeout` once that instant has passed.
//!
//! Sources: IBTA vol. 1 §9.7.6.1.1 (Local ACK Timeout: 4.096 µs · 2^timeout, 0 = infinite),
//! §9.7.5.2.8 / Table 45 (RNR NAK timer codes); Linux rxe_qp.c (`qp_timeout_jiffies =
//! nsecs_to_jiffies(4096 << timeout)`), rxe_comp.c (`rnrnak_usec`).

use crate::wire::aeth::rnr_timer_us;

/// A point in time: nanoseconds from an origin the caller chooses (e.g. process start).
///
/// Only differences matter; the caller must supply non-decreasing values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Instant(pub u64);

impl Instant {
    /// The instant `ns` nanoseconds after the origin.
    pub const fn from_nanos(ns: u64) -> Instant {
        Instant(ns)
    }

    /// The instant `us` microseconds after the origin (saturating).
    pub const fn from_micros(us: u64) -> Instant {
        Instant(us.saturating_mul(1_000))
    }

    /// Nanoseconds since the origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + ns` nanoseconds (saturating at `u64::MAX`).
    pub const fn add_nanos(self, ns: u64) -> Instant {
        Instant(self.0.saturating_add(ns))
    }
}

/// The Local ACK Timeout for the 5-bit `timeout` attribute, in nanoseconds:
/// `4096 ns · 2^timeout` (t = 14 ≈ 67 ms, t = 18 ≈ 1.07 s). `None` for `timeout == 0`, which
/// disables the retransmit timer. Only the low 5 bits of `timeout` are used.
///
/// Source: IBTA vol. 1 §9.7.6.1.1 (C9-140), Linux rxe_qp.c `rxe_qp_init_req`/`rxe_qp_from_attr`.
pub const fn ack_timeout_ns(timeout: u8) -> Option<u64> {
    let t = timeout & 0x1f;
    if t == 0 {
        None
    } else {
        Some(4096u64 << t)
    }
}

/// The delay an RNR NAK timer code asks for, in nanoseconds (IBTA vol. 1 Table 45;
/// code 0 = 655.36 ms, 1 = 10 µs … 31 = 491.52 ms). Only the low 5 bits are used.
pub const fn rnr_delay_ns(code: u8) -> u64 {
    rnr_timer_us(code) as u64 * 1_000
}

/// A one-shot timer: armed with a deadline, or idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Timer {
    deadline: Option<Instant>,
}

impl Timer {
    /// Arms the timer to expire at `at`, replacing any earlier deadline.
    pub(crate) fn arm(&mut self, at: Instant) {
        self.deadline = Some(at);
    }

    /// Arms the timer at `at` unless it is already armed.
    pub(crate) fn arm_if_idle(&mut self, at: Instant) {
        if self.deadline.is_none() {
            self.deadline = Some(at);
        }
    }

    /// Disarms the timer.
    pub(crate) fn stop(&mut self) {
        self.deadline = None;
    }

    /// The deadline, if armed.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// `true` when armed.
    pub(crate) fn is_armed(&self) -> bool {
        self.deadline.is_some()
    }

    /// `true` (and disarms) when armed with a deadline at or before `now`.
    pub(crate) fn expire(&mut self, now: Instant) -> bool {
        match self.deadline {
            Some(d) if d <= now => {
                self.deadline = None;
                true
            }
            _ => false,
        }
    }
}

/// The earlier of two optional instants.
#[inline]
pub(crate) fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn ack_timeout_values() {
        assert_eq!(ack_timeout_ns(0), None);
        assert_eq!(ack_timeout_ns(1), Some(8_192));
        // t = 14: 4.096 µs · 16384 = 67.108864 ms.
        assert_eq!(ack_timeout_ns(14), Some(67_108_864));
        assert_eq!(ack_timeout_ns(31), Some(4096u64 << 31));
        // Only 5 bits count.
        assert_eq!(ack_timeout_ns(32 + 14), ack_timeout_ns(14));
    }

    #[test]
    fn rnr_delays() {
        assert_eq!(rnr_delay_ns(0), 655_360_000);
        assert_eq!(rnr_delay_ns(1), 10_000);
        assert_eq!(rnr_delay_ns(12), 640_000);
    }

    #[test]
    fn timer_expiry() {
        let mut t = Timer::default();
        assert!(!t.expire(Instant(u64::MAX)));
        t.arm_if_idle(Instant(10));
        t.arm_if_idle(Instant(5));
        assert_eq!(t.deadline(), Some(Instant(10)));
        assert!(!t.expire(Instant(9)));
        assert!(t.expire(Instant(10)));
        assert!(!t.is_armed());
        t.arm(Instant(3));
        t.stop();
        assert_eq!(t.deadline(), None);
        assert_eq!(
            earliest(Some(Instant(4)), Some(Instant(2))),
            Some(Instant(2))
        );
        assert_eq!(earliest(None, Some(Instant(2))), Some(Instant(2)));
        assert_eq!(Instant::from_micros(3).add_nanos(5), Instant(3005));
    }
}
