//! `rdmesh bench --loopback --impair … --compare-loss-free`: the loss-free reference of a lossy
//! bandwidth run, in the same run and on the same connection.
//!
//! The impairment layer of both ends is switched on and off every [`SLICE`] (first off), and
//! each message's payload counts for the period in which its completion arrives. The goodput of
//! the clean periods is the reference, the goodput of the impaired periods the result, and
//! their ratio is printed after the size's row. On a noisy machine two separate runs (one
//! loss-free, one lossy) drift apart by more than a small loss rate costs; periods a quarter
//! of a second long, alternating, see the same machine. A hole still open when a period ends
//! is repaired in the next one, so each period carries the edge of the one before: about one
//! round trip per [`SLICE`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long each clean or impaired period lasts.
pub const SLICE: Duration = Duration::from_millis(250);

/// Goodput of the clean and the impaired periods of one size's run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// Payload completed per second while the layer was off, bytes/s.
    pub clean_bps: f64,
    /// Payload completed per second while the layer was on, bytes/s.
    pub impaired_bps: f64,
    /// Periods of each kind that began ([clean, impaired]).
    pub periods: [u32; 2],
}

impl Split {
    /// `impaired_bps / clean_bps` (0 when no clean period completed anything).
    pub fn ratio(&self) -> f64 {
        if self.clean_bps > 0.0 {
            self.impaired_bps / self.clean_bps
        } else {
            0.0
        }
    }

    /// The line printed after the size's row, in the table's unit (MB/s = 2^20 bytes/s, as
    /// perftest's, or Gb/s).
    pub fn line(&self, gbits: bool) -> String {
        let (conv, unit) = if gbits {
            (8.0 / 1e9, "Gb/sec")
        } else {
            (1.0 / 1_048_576.0, "MB/sec")
        };
        format!(
            " impaired / loss-free periods: {:.2}x ({:.2} vs {:.2} {unit}; {} + {} alternating periods of {} ms on one connection)",
            self.ratio(),
            self.impaired_bps * conv,
            self.clean_bps * conv,
            self.periods[1],
            self.periods[0],
            SLICE.as_millis()
        )
    }
}

/// Drives the switch and sorts completed bytes by period.
#[derive(Debug)]
pub struct LossSplit {
    switch: Arc<AtomicBool>,
    on: bool,
    since: Duration,
    time: [Duration; 2],
    bytes: [u64; 2],
    periods: [u32; 2],
}

impl LossSplit {
    /// Starts with a clean period at time zero (`switch` set to `false`).
    pub fn new(switch: Arc<AtomicBool>) -> LossSplit {
        switch.store(false, Ordering::Relaxed);
        LossSplit {
            switch,
            on: false,
            since: Duration::ZERO,
            time: [Duration::ZERO; 2],
            bytes: [0; 2],
            periods: [1, 0],
        }
    }

    /// Moves to the period that `now` (since the run began) falls in, flipping the switch when
    /// it changes.
    pub fn tick(&mut self, now: Duration) {
        let on = (now.as_nanos() / SLICE.as_nanos()) % 2 == 1;
        if on != self.on {
            self.time[usize::from(self.on)] += now.saturating_sub(self.since);
            self.since = now;
            self.on = on;
            self.periods[usize::from(on)] += 1;
            self.switch.store(on, Ordering::Relaxed);
        }
    }

    /// Counts `bytes` of payload completed now for the current period.
    pub fn completed(&mut self, bytes: u64) {
        self.bytes[usize::from(self.on)] += bytes;
    }

    /// Ends the run at `now`: switches the layer off and returns the split.
    pub fn finish(&mut self, now: Duration) -> Split {
        self.time[usize::from(self.on)] += now.saturating_sub(self.since);
        self.since = now;
        self.switch.store(false, Ordering::Relaxed);
        let bps = |k: usize| {
            let t = self.time[k].as_secs_f64();
            if t > 0.0 {
                self.bytes[k] as f64 / t
            } else {
                0.0
            }
        };
        Split {
            clean_bps: bps(0),
            impaired_bps: bps(1),
            periods: self.periods,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn periods_alternate_and_bytes_go_to_the_period_they_complete_in() {
        let sw = Arc::new(AtomicBool::new(true));
        let mut s = LossSplit::new(sw.clone());
        assert!(!sw.load(Ordering::Relaxed), "the first period is clean");
        s.completed(100);
        s.tick(SLICE + Duration::from_millis(1));
        assert!(sw.load(Ordering::Relaxed), "the second is impaired");
        s.completed(50);
        s.tick(2 * SLICE + Duration::from_millis(1));
        assert!(!sw.load(Ordering::Relaxed));
        s.completed(100);
        let split = s.finish(3 * SLICE + Duration::from_millis(1));
        assert!(!sw.load(Ordering::Relaxed), "off after the run");
        assert_eq!(split.periods, [2, 1]);
        // 200 bytes in ~0.5 s clean, 50 bytes in 0.25 s impaired.
        assert!((split.clean_bps - 200.0 / 0.501).abs() < 1.0, "{split:?}");
        assert!((split.impaired_bps - 50.0 / 0.25).abs() < 1.0, "{split:?}");
        assert!((split.ratio() - 0.5).abs() < 0.01, "{split:?}");
        assert!(split
            .line(false)
            .starts_with(" impaired / loss-free periods: 0.50x"));
    }
}
