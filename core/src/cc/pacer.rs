//! Token-bucket pacing rate limiter: the sender's rate, as DCQCN's reaction point sets it, turned
//! into "when may the next packet go".
//!
//! Tokens accrue at `rate` up to `burst_bytes`; a packet of `n` bytes conforms when the bucket
//! holds at least `min(n, burst_bytes)` bytes of tokens, and sending it takes `n` bytes of tokens
//! (the bucket may go into deficit when `n > burst_bytes`, so any packet size eventually passes
//! and the long-run rate is exact). Time is an input; nothing here reads a clock.
//!
//! Units: tokens are kept in micro-bits, because 1 kb/s = 1 µbit/ns, so accrual is the integer
//! product `rate_kbps · Δns`. Classic token bucket (e.g. RFC 2697 single-rate meter, without
//! colours).

use crate::rc::Instant;

/// Micro-bits per byte.
const UBITS_PER_BYTE: i128 = 8_000_000;

/// A token bucket: rate in kb/s, depth in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    rate_kbps: u64,
    burst_bytes: u32,
    /// Tokens at `last`, in micro-bits (negative: deficit).
    tokens: i128,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket at `now` that refills at `rate_kbps` kb/s (1 kb/s = 1000 bit/s; 0 is
    /// treated as 1) up to `burst_bytes` bytes (0 is treated as 1).
    pub fn new(now: Instant, rate_kbps: u64, burst_bytes: u32) -> Self {
        let burst_bytes = burst_bytes.max(1);
        TokenBucket {
            rate_kbps: rate_kbps.max(1),
            burst_bytes,
            tokens: burst_bytes as i128 * UBITS_PER_BYTE,
            last: now,
        }
    }

    /// The refill rate in kb/s.
    pub const fn rate_kbps(&self) -> u64 {
        self.rate_kbps
    }

    /// The bucket depth in bytes.
    pub const fn burst_bytes(&self) -> u32 {
        self.burst_bytes
    }

    fn cap(&self) -> i128 {
        self.burst_bytes as i128 * UBITS_PER_BYTE
    }

    /// Tokens (micro-bits) the bucket holds at `t` (`t` before the last update counts as the
    /// last update).
    fn tokens_at(&self, t: Instant) -> i128 {
        let dt = t.0.saturating_sub(self.last.0) as i128;
        (self.tokens + dt * self.rate_kbps as i128).min(self.cap())
    }

    /// Brings the bucket up to `now` (accrual at the current rate), so that later changes apply
    /// from `now` on.
    fn refill(&mut self, now: Instant) {
        if now > self.last {
            self.tokens = self.tokens_at(now);
            self.last = now;
        }
    }

    /// Changes the rate at `now`: tokens accrued until `now` count at the old rate.
    pub fn set_rate(&mut self, now: Instant, rate_kbps: u64) {
        self.refill(now);
        self.rate_kbps = rate_kbps.max(1);
    }

    /// Changes the depth at `now`; tokens above the new depth are dropped.
    pub fn set_burst(&mut self, now: Instant, burst_bytes: u32) {
        self.refill(now);
        self.burst_bytes = burst_bytes.max(1);
        self.tokens = self.tokens.min(self.cap());
    }

    /// The earliest instant (≥ the last update) at which a packet of `bytes` bytes conforms:
    /// when the bucket holds `min(bytes, burst_bytes)` bytes of tokens. Independent of the
    /// caller's clock, so it can be reported as a deadline.
    pub fn conforming_at(&self, bytes: u32) -> Instant {
        let need = bytes.min(self.burst_bytes) as i128 * UBITS_PER_BYTE;
        if self.tokens >= need {
            return self.last;
        }
        let missing = need - self.tokens;
        let rate = self.rate_kbps as i128;
        let wait = (missing + rate - 1) / rate;
        self.last.add_nanos(u64::try_from(wait).unwrap_or(u64::MAX))
    }

    /// The earliest instant at or after `now` at which a packet of `bytes` bytes may be sent
    /// (`now` itself when it conforms already).
    pub fn next_send_time(&self, now: Instant, bytes: u32) -> Instant {
        self.conforming_at(bytes).max(now)
    }

    /// `true` when a packet of `bytes` bytes may be sent at `now`.
    pub fn allows(&self, now: Instant, bytes: u32) -> bool {
        self.conforming_at(bytes) <= now
    }

    /// Records that `bytes` bytes were sent at `now` (whether or not they conformed).
    pub fn consume(&mut self, now: Instant, bytes: u32) {
        self.refill(now);
        self.tokens -= bytes as i128 * UBITS_PER_BYTE;
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn full_bucket_then_paced() {
        // 8 Mb/s = 8000 kb/s = 1 byte per µs; burst 3000 B.
        let mut tb = TokenBucket::new(Instant(0), 8_000, 3_000);
        assert!(tb.allows(Instant(0), 1500));
        tb.consume(Instant(0), 1500);
        tb.consume(Instant(0), 1500);
        // Empty: 1500 B need 1500 µs.
        assert_eq!(tb.next_send_time(Instant(0), 1500), Instant(1_500_000));
        assert!(!tb.allows(Instant(1_499_999), 1500));
        assert!(tb.allows(Instant(1_500_000), 1500));
        // A smaller packet conforms earlier.
        assert_eq!(tb.conforming_at(100), Instant(100_000));
        // Long idle: the bucket caps at the burst.
        assert_eq!(
            tb.next_send_time(Instant(1_000_000_000), 3000),
            Instant(1_000_000_000)
        );
        tb.consume(Instant(1_000_000_000), 3000);
        assert_eq!(
            tb.conforming_at(1),
            Instant(1_000_000_000 + 1_000),
            "burst was capped at 3000 B"
        );
    }

    #[test]
    fn oversized_packet_goes_into_deficit() {
        // 1 byte/µs, burst 1000 B: a 4000 B packet passes on a full bucket and leaves a deficit
        // of 3000 B, so the next byte waits 3001 µs.
        let mut tb = TokenBucket::new(Instant(0), 8_000, 1_000);
        assert!(tb.allows(Instant(0), 4000));
        tb.consume(Instant(0), 4000);
        assert_eq!(tb.conforming_at(1), Instant(3_001_000));
        assert_eq!(tb.conforming_at(4000), Instant(4_000_000));
    }

    #[test]
    fn long_run_rate_is_exact() {
        // 1 Gb/s = 1_000_000 kb/s = 125 B/µs. Send 1000 packets of 1250 B back to back, each
        // at the earliest conforming instant: 1000 · 10 µs after the burst of 2 packets.
        let mut tb = TokenBucket::new(Instant(0), 1_000_000, 2_500);
        let mut now = Instant(0);
        for _ in 0..1000 {
            now = tb.next_send_time(now, 1250);
            tb.consume(now, 1250);
        }
        assert_eq!(now, Instant(998 * 10_000));
    }

    /// A host that sends whenever it wakes and the packet conforms, and wakes at
    /// `conforming_at` but late by a varying 0–60 µs (scheduler latency, timer slack), still
    /// gets rate × time within 2 %, because the bucket keeps what accrued while it slept (up to
    /// the burst). 200 Mb/s = 25 B/µs, 4124-byte packets, burst 8448 B (the soft provider's
    /// two-packet minimum), 2 s.
    #[test]
    fn late_wakeups_keep_the_rate() {
        const RATE_KBPS: u64 = 200_000;
        const PKT: u32 = 4124;
        const END_NS: u64 = 2_000_000_000;
        let mut tb = TokenBucket::new(Instant(0), RATE_KBPS, 8448);
        let (mut now, mut sent, mut i) = (0u64, 0u64, 0u64);
        while now < END_NS {
            while tb.allows(Instant(now), PKT) {
                tb.consume(Instant(now), PKT);
                sent += u64::from(PKT);
            }
            i += 1;
            let late = (i * 7919) % 60_001;
            now = tb.conforming_at(PKT).0.max(now) + late;
        }
        let want = RATE_KBPS * 1000 / 8 * (END_NS / 1_000_000_000);
        assert!(
            sent.abs_diff(want) * 50 <= want,
            "sent {sent} B in 2 s, rate × time = {want} B"
        );
        // Waking only every 8 ms (SO_RCVTIMEO in jiffies) caps a 2-packet bucket at 2 packets
        // per wake-up: about a fifth of the rate here. This is why the host must wake at
        // `conforming_at`.
        let mut tb = TokenBucket::new(Instant(0), RATE_KBPS, 8448);
        let (mut now, mut sent) = (0u64, 0u64);
        while now < END_NS {
            while tb.allows(Instant(now), PKT) {
                tb.consume(Instant(now), PKT);
                sent += u64::from(PKT);
            }
            now += 8_000_000;
        }
        assert!(sent * 4 < want, "coarse wake-ups: {sent} B of {want} B");
    }

    #[test]
    fn rate_change_applies_from_now() {
        let mut tb = TokenBucket::new(Instant(0), 8_000, 1_000);
        tb.consume(Instant(0), 1_000);
        // 500 µs at 1 B/µs = 500 B, then 16 Mb/s = 2 B/µs: the other 500 B take 250 µs.
        tb.set_rate(Instant(500_000), 16_000);
        assert_eq!(tb.conforming_at(1_000), Instant(750_000));
        assert_eq!(tb.rate_kbps(), 16_000);
        tb.set_burst(Instant(750_000), 10);
        assert_eq!(tb.burst_bytes(), 10);
        assert!(
            tb.allows(Instant(750_000), 1_000),
            "min(bytes, burst) conforms"
        );
        // Rate 0 is treated as 1 kb/s.
        tb.set_rate(Instant(750_000), 0);
        assert_eq!(tb.rate_kbps(), 1);
    }
}
