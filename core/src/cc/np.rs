//! DCQCN notification point (NP): the receiver side that turns CE-marked packets of one QP into
//! Congestion Notification Packets (CNPs) towards the sender of that flow.
//!
//! Rule (NVIDIA `min_time_between_cnps`, rocev2.md §4.3; DCQCN reference implementation
//! `CNPInterval`, §4.2): a CE-marked packet produces a CNP unless a CNP for the same QP was
//! generated less than `min_time_between_cnps` before it; CE marks inside that interval produce
//! nothing (they are not remembered for later). One pending CNP at most: several CE marks before
//! the host collects the CNP coalesce into one.

use crate::rc::Instant;

/// Notification point parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NpConfig {
    /// Minimum time between two CNPs generated for one QP, in nanoseconds
    /// (NVIDIA `min_time_between_cnps`, configured in µs there). 0 = a CNP for every CE mark.
    pub min_time_between_cnps_ns: u64,
}

impl Default for NpConfig {
    /// `min_time_between_cnps` = 2 µs: the value of a ConnectX-5 Ex `mlxconfig -q` dump
    /// (rocev2.md §4.3; third-party notes quote 4 µs, the DCQCN paper design 50 µs).
    fn default() -> Self {
        NpConfig {
            min_time_between_cnps_ns: 2_000,
        }
    }
}

/// The notification point of one QP: CE marks in, at most one CNP per interval out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotificationPoint {
    cfg: NpConfig,
    /// When the last CNP was generated.
    last_cnp: Option<Instant>,
    /// A CNP was generated and not yet collected with [`take_cnp`](Self::take_cnp).
    pending: bool,
}

impl NotificationPoint {
    /// An idle notification point.
    pub const fn new(cfg: NpConfig) -> Self {
        NotificationPoint {
            cfg,
            last_cnp: None,
            pending: false,
        }
    }

    /// The parameters.
    pub const fn config(&self) -> &NpConfig {
        &self.cfg
    }

    /// Replaces the parameters (the interval already running keeps its start).
    pub fn set_config(&mut self, cfg: NpConfig) {
        self.cfg = cfg;
    }

    /// A CE-marked packet for this QP arrived at `now` (callers pass only CE packets; see
    /// [`Ecn::is_ce`](super::Ecn::is_ce)). Returns `true` when it generated a CNP, `false`
    /// when a CNP was generated less than `min_time_between_cnps` ago.
    pub fn on_ce(&mut self, now: Instant) -> bool {
        let allowed = match self.last_cnp {
            None => true,
            Some(t) => now.0.saturating_sub(t.0) >= self.cfg.min_time_between_cnps_ns,
        };
        if allowed {
            self.last_cnp = Some(now);
            self.pending = true;
        }
        allowed
    }

    /// `true` while a generated CNP waits to be sent.
    pub const fn cnp_pending(&self) -> bool {
        self.pending
    }

    /// Takes the pending CNP: `true` once per generated CNP.
    pub fn take_cnp(&mut self) -> bool {
        core::mem::replace(&mut self.pending, false)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn at_most_one_cnp_per_interval() {
        let mut np = NotificationPoint::new(NpConfig {
            min_time_between_cnps_ns: 4_000,
        });
        assert!(!np.take_cnp());
        // CE marks at 0, 1, 3.999 µs: one CNP; at 4 µs: the next; at 7 µs: none; at 8: one.
        let marks = [0u64, 1_000, 3_999, 4_000, 7_000, 7_999, 8_000, 100_000];
        let generated: std::vec::Vec<bool> = marks.iter().map(|&t| np.on_ce(Instant(t))).collect();
        assert_eq!(
            generated,
            [true, false, false, true, false, false, true, true]
        );
        // Not collected in between: they coalesce into one pending CNP.
        assert!(np.cnp_pending());
        assert!(np.take_cnp());
        assert!(!np.take_cnp());
    }

    #[test]
    fn zero_interval_marks_every_packet() {
        let mut np = NotificationPoint::new(NpConfig {
            min_time_between_cnps_ns: 0,
        });
        for t in [5u64, 5, 6] {
            assert!(np.on_ce(Instant(t)));
            assert!(np.take_cnp());
        }
        assert_eq!(NpConfig::default().min_time_between_cnps_ns, 2_000);
    }
}
