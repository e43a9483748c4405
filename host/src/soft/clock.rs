//! The soft provider's clock: `CLOCK_MONOTONIC` (the clock of `std::time::Instant` on Linux) in
//! nanoseconds since the device opened.
//!
//! The engine reads it a few times per message (a post's flush, each received batch). Through
//! `Instant::elapsed` a read also paid `Timespec` subtraction with its overflow checks and a
//! 128-bit `Duration::as_nanos` (~100 instructions, callgrind); here it is libc's
//! `clock_gettime` (the vDSO) and one multiply-add. (rustix's own vDSO lookup would skip libc's
//! wrapper, but it faults under valgrind, which hides the vDSO.)

use nix::time::{clock_gettime, ClockId};

/// Nanoseconds of `CLOCK_MONOTONIC` counted from an epoch taken at creation.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clock {
    /// `CLOCK_MONOTONIC` at creation, ns.
    epoch_ns: u64,
}

impl Clock {
    /// A clock whose epoch is now.
    pub(crate) fn start() -> Clock {
        Clock {
            epoch_ns: monotonic_ns(),
        }
    }

    /// ns since the epoch.
    #[inline]
    pub(crate) fn now_ns(&self) -> u64 {
        monotonic_ns().wrapping_sub(self.epoch_ns)
    }
}

/// `CLOCK_MONOTONIC`, ns (never negative: it counts from boot). It cannot fail for this
/// clock (`EINVAL` is for clocks the kernel lacks; std's `Instant::now` panics on it).
#[inline]
fn monotonic_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is readable");
    (t.tv_sec() as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(t.tv_nsec() as u64)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn counts_what_std_instant_counts() {
        // Both read CLOCK_MONOTONIC: a span measured by one lies within the other's bracket.
        let clock = Clock::start();
        let outer = std::time::Instant::now();
        let a = clock.now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = clock.now_ns();
        let outer_ns = outer.elapsed().as_nanos() as u64;
        assert!(b > a, "{a} then {b}");
        assert!(
            b - a <= outer_ns,
            "{} ns inside a span of {outer_ns} ns",
            b - a
        );
        assert!(b - a >= 2_000_000, "{} ns across a 2 ms sleep", b - a);
    }
}
