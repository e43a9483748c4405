//! How a benchmark waiter busy-polls before it blocks: spin only where spinning pays.
//!
//! A latency waiter that busy-polls for a packet gets it without a wake-up — when the peer runs
//! on another CPU meanwhile. Where it cannot (one CPU, or the other CPUs busy, as on a shared
//! machine), the spin holds the CPU the peer needs, and every message costs the whole spin:
//! WRITE latency with `--cpus 0,1` on the loaded 2-core development VM was 58.6 µs per half
//! round trip with a fixed 50 µs spin, 8.1 µs with this policy (docs/benchmarks.md, issue 12).
//! So a waiter spins for [`SPIN_TIME`] while spins find their packet, stops after
//! [`MISS_LIMIT`] spins in a row that did not, and spins once every [`PROBE_EVERY`] waits to
//! notice when the peer has a CPU again.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// How long a waiter busy-polls before it blocks, when it has more than one CPU.
pub const SPIN_TIME: Duration = Duration::from_micros(50);
/// Spins in a row that ended without the packet after which a waiter blocks at once.
pub const MISS_LIMIT: u32 = 8;
/// While spinning is off, one wait in this many spins again (a probe).
pub const PROBE_EVERY: u32 = 64;

/// How long a waiter busy-polls (driving the device without blocking) before it blocks in the
/// kernel: [`SPIN_TIME`], or nothing when this thread may run on one CPU only (`taskset -c N`,
/// `--cpus N`): there the peer needs that CPU, and the kernel wakes a blocked thread faster
/// than a spinning one gives the CPU away.
pub fn spin_time() -> Duration {
    static ONE_CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *ONE_CPU.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() == 1)) {
        Duration::ZERO
    } else {
        SPIN_TIME
    }
}

/// CPUs a host needs before a waiter keeps spinning while packets flow
/// ([`spin_while_active`]): the spinner, the peer's receiving thread and the two progress
/// threads of a loopback run each have one.
pub const ACTIVE_SPIN_CPUS: usize = 4;

/// How long after the last packet the device processed a waiter that spins while packets flow
/// ([`spin_while_active`]) goes on spinning: longer than the gap between two ACKs of a
/// bandwidth sender (one per 64 packets of 4 KiB, 256 KiB: 85 µs at 3 GB/s, 500 µs at 0.5).
pub const ACTIVE_SPIN: Duration = Duration::from_micros(500);

/// Whether a waiter goes on spinning for as long as the device keeps processing packets (the
/// ACKs between a bandwidth sender's completions, at most [`ACTIVE_SPIN`] apart), not only for
/// [`spin_time`] in all. A sender
/// of 1 MiB messages completes one every few hundred µs, longer than any spin; blocked between
/// completions, every ACK's delivery wakes it, and on the 16-core host that wake-up cost the
/// receiving thread a quarter of its time (docs/benchmarks.md, issue 12). Only on hosts with
/// [`ACTIVE_SPIN_CPUS`] or more: with fewer, the spinner takes the CPU the receiver needs.
pub fn spin_while_active() -> bool {
    static MANY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *MANY.get_or_init(|| {
        std::thread::available_parallelism().is_ok_and(|n| n.get() >= ACTIVE_SPIN_CPUS)
    })
}

/// The spin budget of one waiter (one benchmark end), adapted to whether spins find their
/// packet (see the module docs).
#[derive(Debug, Default)]
pub struct AdaptiveSpin {
    /// Spins in a row that ended without the packet.
    misses: AtomicU32,
    /// Waits while spinning was off (for the probes).
    skipped: AtomicU32,
}

impl AdaptiveSpin {
    /// How long the next wait spins before it blocks: [`spin_time`], or zero while spins keep
    /// missing.
    pub fn budget(&self) -> Duration {
        self.budget_from(spin_time())
    }

    fn budget_from(&self, base: Duration) -> Duration {
        if base.is_zero() || self.misses.load(Ordering::Relaxed) < MISS_LIMIT {
            return base;
        }
        if self.skipped.fetch_add(1, Ordering::Relaxed) % PROBE_EVERY == PROBE_EVERY - 1 {
            base
        } else {
            Duration::ZERO
        }
    }

    /// Records how a wait that spun ended: `hit` when what it waited for came during the spin.
    pub fn record(&self, hit: bool) {
        if hit {
            self.misses.store(0, Ordering::Relaxed);
        } else {
            let m = self.misses.load(Ordering::Relaxed);
            self.misses.store(m.saturating_add(1), Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn stops_spinning_after_misses_probes_and_resumes_on_a_hit() {
        let base = Duration::from_micros(50);
        let s = AdaptiveSpin::default();
        assert_eq!(
            s.budget_from(Duration::ZERO),
            Duration::ZERO,
            "one CPU: never"
        );
        for _ in 0..MISS_LIMIT {
            assert_eq!(s.budget_from(base), base);
            s.record(false);
        }
        let spins: Vec<bool> = (0..2 * PROBE_EVERY)
            .map(|_| !s.budget_from(base).is_zero())
            .collect();
        assert_eq!(
            spins.iter().filter(|&&b| b).count(),
            2,
            "one probe per {PROBE_EVERY} waits"
        );
        assert!(spins[PROBE_EVERY as usize - 1] && spins[2 * PROBE_EVERY as usize - 1]);
        s.record(true);
        assert_eq!(
            s.budget_from(base),
            base,
            "a probe that hit turns spinning back on"
        );
    }
}
