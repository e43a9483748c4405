//! Per-QP congestion control: CE-marked arrivals feed the DCQCN notification point (which
//! produces CNPs for the host to send), received CNPs feed the reaction point, and its rate
//! drives a token-bucket pacer that gates the QP's data packets (requests and READ responses;
//! ACKs, NAKs and atomic ACKs are never held back). See [`crate::cc`].

use super::counters::RcCounters;
use super::timer::Instant;
use crate::cc::{DcqcnConfig, NotificationPoint, NpConfig, ReactionPoint, TokenBucket};

/// Notification point, optional reaction point and pacer of one QP.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Congestion {
    pub(crate) np: NotificationPoint,
    rp: Option<(ReactionPoint, TokenBucket)>,
}

impl Congestion {
    pub(crate) fn new() -> Self {
        Congestion {
            np: NotificationPoint::new(NpConfig::default()),
            rp: None,
        }
    }

    pub(crate) fn set_np_config(&mut self, cfg: NpConfig) {
        self.np.set_config(cfg);
    }

    /// Starts DCQCN and pacing at the configured maximum rate with a full bucket.
    pub(crate) fn enable(
        &mut self,
        now: Instant,
        cfg: DcqcnConfig,
        burst_bytes: u32,
        ctr: &mut RcCounters,
    ) {
        let rp = ReactionPoint::new(cfg);
        let tb = TokenBucket::new(now, rp.rate_kbps(), burst_bytes);
        self.rp = Some((rp, tb));
        ctr.current_rate_mbps = rp.rate_mbps();
        ctr.lowest_rate_mbps = rp.rate_mbps();
    }

    pub(crate) fn disable(&mut self, ctr: &mut RcCounters) {
        self.rp = None;
        ctr.current_rate_mbps = 0;
        ctr.lowest_rate_mbps = 0;
    }

    pub(crate) fn reaction_point(&self) -> Option<&ReactionPoint> {
        self.rp.as_ref().map(|(rp, _)| rp)
    }

    pub(crate) fn pacer(&self) -> Option<&TokenBucket> {
        self.rp.as_ref().map(|(_, tb)| tb)
    }

    /// Copies the reaction point's rate into the pacer and the counters.
    fn sync(&mut self, now: Instant, ctr: &mut RcCounters) {
        if let Some((rp, tb)) = &mut self.rp {
            if tb.rate_kbps() != rp.rate_kbps().max(1) {
                tb.set_rate(now, rp.rate_kbps());
            }
            ctr.current_rate_mbps = rp.rate_mbps();
            ctr.lowest_rate_mbps = ctr.lowest_rate_mbps.min(ctr.current_rate_mbps);
        }
    }

    /// A CE-marked packet for this QP arrived.
    pub(crate) fn on_ce(&mut self, now: Instant, ctr: &mut RcCounters) {
        ctr.ce_marks_received += 1;
        self.np.on_ce(now);
    }

    /// A CNP for this QP arrived.
    pub(crate) fn on_cnp(&mut self, now: Instant, ctr: &mut RcCounters) {
        ctr.cnps_received += 1;
        if let Some((rp, _)) = &mut self.rp {
            if rp.on_cnp(now) {
                ctr.rate_decreases += 1;
            }
        }
        self.sync(now, ctr);
    }

    /// `true` when a paced packet of up to `max_len` bytes may leave at `now`.
    pub(crate) fn allows(&self, now: Instant, max_len: u32) -> bool {
        self.pacer().map_or(true, |tb| tb.allows(now, max_len))
    }

    /// When a paced packet of up to `max_len` bytes may leave; `None` without pacing.
    pub(crate) fn conforming_at(&self, max_len: u32) -> Option<Instant> {
        self.pacer().map(|tb| tb.conforming_at(max_len))
    }

    /// A paced packet of `bytes` bytes left at `now`.
    pub(crate) fn on_sent(&mut self, now: Instant, bytes: usize, ctr: &mut RcCounters) {
        if let Some((rp, tb)) = &mut self.rp {
            tb.consume(now, bytes as u32);
            rp.on_bytes_sent(bytes as u64);
        }
        self.sync(now, ctr);
    }

    /// The reaction point's next increase timer.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.reaction_point().and_then(|rp| rp.next_deadline())
    }

    pub(crate) fn handle_timeout(&mut self, now: Instant, ctr: &mut RcCounters) {
        if let Some((rp, _)) = &mut self.rp {
            rp.handle_timeout(now);
        }
        self.sync(now, ctr);
    }
}
