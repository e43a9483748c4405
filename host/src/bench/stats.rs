//! Result tables in perftest's formats (ib_write_bw and ib_write_lat columns).
//!
//! MB/sec is 2^20 bytes per second and Gb/sec is 10^9 bits per second, as perftest reports them.

use std::time::Duration;

/// One bandwidth result.
#[derive(Debug, Clone, Copy)]
pub struct BwResult {
    /// Message size in bytes.
    pub bytes: u64,
    /// Messages completed.
    pub iters: u64,
    /// Highest rate over any window of ⌈iters/10⌉ consecutive messages, bytes/s
    /// (see [`BwResult::from_times`]).
    pub peak_bps: f64,
    /// Rate over the whole run, bytes/s.
    pub avg_bps: f64,
    /// Messages per second.
    pub msg_rate: f64,
}

impl BwResult {
    /// Computes the result from each message's post and completion times (both measured from
    /// the first post). The peak is perftest's idea restricted to windows of ⌈n/10⌉
    /// consecutive messages: the highest `w·bytes / (completed[j] − posted[j−w+1])`.
    pub fn from_times(bytes: u64, posted: &[Duration], completed: &[Duration]) -> BwResult {
        let iters = completed.len().min(posted.len()) as u64;
        let total = completed
            .last()
            .copied()
            .unwrap_or_default()
            .as_secs_f64()
            .max(1e-9);
        let avg_bps = (bytes * iters) as f64 / total;
        let w = (iters as usize / 10).max(1);
        let mut peak_bps = avg_bps;
        for j in w - 1..iters as usize {
            let dt = completed[j].saturating_sub(posted[j + 1 - w]).as_secs_f64();
            if dt > 0.0 {
                peak_bps = peak_bps.max((bytes * w as u64) as f64 / dt);
            }
        }
        BwResult {
            bytes,
            iters,
            peak_bps,
            avg_bps,
            msg_rate: iters as f64 / total,
        }
    }
}

/// The header line of a bandwidth table.
pub fn bw_header(gbits: bool) -> String {
    let unit = if gbits { "Gb/sec" } else { "MB/sec" };
    format!(
        " {:<10} {:<14} {:<18} {:<21} {:<14}",
        "#bytes",
        "#iterations",
        format!("BW peak[{unit}]"),
        format!("BW average[{unit}]"),
        "MsgRate[Mpps]"
    )
}

/// One bandwidth table row.
pub fn bw_row(r: &BwResult, gbits: bool) -> String {
    let conv = |bps: f64| {
        if gbits {
            bps * 8.0 / 1e9
        } else {
            bps / 1_048_576.0
        }
    };
    format!(
        " {:<10} {:<14} {:<18.2} {:<21.2} {:<14.6}",
        r.bytes,
        r.iters,
        conv(r.peak_bps),
        conv(r.avg_bps),
        r.msg_rate / 1e6
    )
}

/// Latency statistics in µs (ib_write_lat's columns).
#[derive(Debug, Clone, Copy)]
pub struct LatResult {
    /// Message size in bytes.
    pub bytes: u64,
    /// Samples.
    pub iters: u64,
    /// Minimum, µs.
    pub min: f64,
    /// Maximum, µs.
    pub max: f64,
    /// Median ("typical"), µs.
    pub typical: f64,
    /// Mean, µs.
    pub avg: f64,
    /// Standard deviation, µs.
    pub stdev: f64,
    /// 99th percentile, µs.
    pub p99: f64,
    /// 99.9th percentile, µs.
    pub p999: f64,
}

impl LatResult {
    /// Computes the statistics of `samples` (µs).
    pub fn from_samples(bytes: u64, samples: &mut [f64]) -> LatResult {
        samples.sort_by(|a, b| a.total_cmp(b));
        let n = samples.len().max(1);
        let pct = |p: f64| {
            samples
                .get(
                    ((n as f64 * p).ceil() as usize)
                        .saturating_sub(1)
                        .min(n - 1),
                )
                .copied()
                .unwrap_or(0.0)
        };
        let avg = samples.iter().sum::<f64>() / n as f64;
        let var = samples.iter().map(|s| (s - avg) * (s - avg)).sum::<f64>() / n as f64;
        LatResult {
            bytes,
            iters: samples.len() as u64,
            min: samples.first().copied().unwrap_or(0.0),
            max: samples.last().copied().unwrap_or(0.0),
            typical: samples.get(samples.len() / 2).copied().unwrap_or(0.0),
            avg,
            stdev: var.sqrt(),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

/// The header line of a latency table.
pub fn lat_header() -> String {
    format!(
        " {:<8} {:<12} {:<14} {:<14} {:<17} {:<14} {:<15} {:<23} {:<23}",
        "#bytes",
        "#iterations",
        "t_min[usec]",
        "t_max[usec]",
        "t_typical[usec]",
        "t_avg[usec]",
        "t_stdev[usec]",
        "99% percentile[usec]",
        "99.9% percentile[usec]"
    )
}

/// One latency table row.
pub fn lat_row(r: &LatResult) -> String {
    format!(
        " {:<8} {:<12} {:<14.2} {:<14.2} {:<17.2} {:<14.2} {:<15.2} {:<23.2} {:<23.2}",
        r.bytes, r.iters, r.min, r.max, r.typical, r.avg, r.stdev, r.p99, r.p999
    )
}

/// The dashed separator perftest prints around tables.
pub const RULE: &str =
    "---------------------------------------------------------------------------------------";

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn percentiles() {
        let mut s: Vec<f64> = (1..=1000).map(f64::from).collect();
        let r = LatResult::from_samples(8, &mut s);
        assert_eq!(r.min, 1.0);
        assert_eq!(r.max, 1000.0);
        assert_eq!(r.typical, 501.0);
        assert_eq!(r.p99, 990.0);
        assert_eq!(r.p999, 999.0);
        assert!((r.avg - 500.5).abs() < 1e-9);
    }

    #[test]
    fn bandwidth() {
        let done: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let posted: Vec<Duration> = (0..100).map(Duration::from_millis).collect();
        let r = BwResult::from_times(1 << 20, &posted, &done);
        assert!((r.avg_bps - 100.0 * 1048576.0 / 0.1).abs() < 1.0);
        assert!((r.msg_rate - 1000.0).abs() < 1e-6);
        assert!(bw_row(&r, false).contains("1000.00"));
        // Windows of 10 messages each took 10 ms from first post to last completion: no
        // window beats the average here.
        assert!((r.peak_bps - r.avg_bps).abs() < 1.0);
    }
}
