//! `rdmesh bench --report-interval MS`: a periodic goodput and DCQCN rate trace of the sending
//! end of a bandwidth test, one line per interval, `key=value` so that scripts and tests can
//! parse it:
//!
//! ```text
//!  trace t_ms=1500 unix_ms=1763800000123 goodput_mbps=84.12 bytes=31457280 rate_mbps=120 lowest_rate_mbps=40 cnps_received=17 rate_decreases=12
//! ```
//!
//! `t_ms`: ms since the size's first post; `unix_ms`: wall clock (aligns traces of several
//! processes); `goodput_mbps`: payload of the messages completed during the interval, Mb/s
//! (10^6 bit/s); `bytes`: payload completed so far; `rate_mbps`: the QP's current DCQCN rate
//! (0 = no limit applies); `lowest_rate_mbps`, `cnps_received`, `rate_decreases`: the QP's
//! counters ([`RcCounters`]).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdmesh_core::rc::RcCounters;

/// Samples the completed byte count and the QP counters once per interval.
#[derive(Debug)]
pub struct Tracer {
    start: Instant,
    interval: Duration,
    next: Duration,
    last_t: Duration,
    last_bytes: u64,
}

impl Tracer {
    /// A tracer whose intervals count from `start`; `interval` is at least 1 ms.
    pub fn new(start: Instant, interval: Duration) -> Tracer {
        let interval = interval.max(Duration::from_millis(1));
        Tracer {
            start,
            interval,
            next: interval,
            last_t: Duration::ZERO,
            last_bytes: 0,
        }
    }

    /// The trace line when an interval is over (`bytes`: payload completed so far), else
    /// `None`. `counters` is only called when a line is due.
    pub fn sample(&mut self, bytes: u64, counters: impl FnOnce() -> RcCounters) -> Option<String> {
        let t = self.start.elapsed();
        if t < self.next {
            return None;
        }
        while self.next <= t {
            self.next += self.interval;
        }
        let dt = (t - self.last_t).as_secs_f64();
        let goodput = if dt > 0.0 {
            (bytes - self.last_bytes) as f64 * 8.0 / dt / 1e6
        } else {
            0.0
        };
        self.last_t = t;
        self.last_bytes = bytes;
        Some(line(t, bytes, goodput, &counters()))
    }
}

fn line(t: Duration, bytes: u64, goodput_mbps: f64, c: &RcCounters) -> String {
    let unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!(
        " trace t_ms={} unix_ms={unix_ms} goodput_mbps={goodput_mbps:.2} bytes={bytes} rate_mbps={} lowest_rate_mbps={} cnps_received={} rate_decreases={}",
        t.as_millis(),
        c.current_rate_mbps,
        c.lowest_rate_mbps,
        c.cnps_received,
        c.rate_decreases
    )
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_interval_goodput() {
        let start = Instant::now() - Duration::from_millis(250);
        let mut t = Tracer::new(start, Duration::from_millis(100));
        let c = RcCounters {
            current_rate_mbps: 120,
            cnps_received: 3,
            ..Default::default()
        };
        // 250 ms in: due; 1 MB over 0.25 s = 32 Mb/s.
        let l = t.sample(1_000_000, || c).expect("due");
        let kv = |k: &str| -> f64 {
            l.split_whitespace()
                .find_map(|x| x.strip_prefix(&format!("{k}=")))
                .unwrap()
                .parse()
                .unwrap()
        };
        assert!((kv("goodput_mbps") - 32.0).abs() < 1.0, "{l}");
        assert_eq!(kv("rate_mbps"), 120.0);
        assert_eq!(kv("cnps_received"), 3.0);
        assert_eq!(kv("bytes"), 1e6);
        assert!(kv("t_ms") >= 250.0);
        // Not due again until the next 100 ms boundary.
        assert!(t.sample(2_000_000, || panic!("not due")).is_none());
    }
}
