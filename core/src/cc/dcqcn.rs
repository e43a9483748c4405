//! DCQCN reaction point (RP): the sender side that lowers a QP's rate on each CNP and recovers
//! it with timer- and byte-counter-driven increases (Zhu et al., SIGCOMM'15; rocev2.md §4.2 for
//! the authors' reference implementation, §4.3 for NVIDIA's parameters and their defaults).
//!
//! State: current rate Rc, target rate Rt, α in Q10 fixed point (1024 = 1.0, as NVIDIA's
//! `dce_tcp_g` / `initial_alpha_value`), the time stage T and byte stage BC (increase events
//! since the last cut), and a byte counter.
//!
//! - **First CNP** (the flow is not rate-limited yet): the limiter is allocated — Rc starts at
//!   `rate_to_set_on_first_cnp` (0 = the maximum rate) and α at `initial_alpha`; then the CNP is
//!   handled as below.
//! - **CNP**: marks the current α period as "CNP seen". Unless a cut happened less than
//!   `rate_reduce_monitor_period` ago (then the rate is left alone): Rt ← Rc when
//!   `clamp_tgt_rate`, or when `clamp_tgt_rate_after_time_inc` and a timer-driven increase
//!   happened since the last cut; Rc ← max(Rc − (Rc·α ≫ `gd`), Rc·`min_dec_fac`/100,
//!   `min_rate`) — with `gd` = 11 and Q10 α that is Rc·(1 − α/2); T, BC and the byte counter
//!   restart, the increase timer restarts at `time_reset`.
//! - **α update**, every `alpha_update_period` since the limiter was allocated:
//!   α ← α·g/1024 + (1024 − g) if a CNP arrived in the period, else α ← α·g/1024 (integer
//!   division, NVIDIA `dce_tcp_g`, §4.3).
//! - **Increase events**: the timer every `time_reset` (bumps T) and every `byte_reset` bytes
//!   sent (bumps BC). Classified on the stage counts *before* the event (so `threshold` F is
//!   the number of fast-recovery steps, 1 with NVIDIA's defaults):
//!   fast recovery when T < F and BC < F: Rc ← (Rt + Rc)/2 (rounded up, so Rc reaches Rt); additive increase when exactly one
//!   of T, BC ≥ F: Rt ← Rt + `ai_rate`, Rc ← (Rt + Rc)/2; hyper increase when both ≥ F:
//!   Rt ← Rt + i·`hai_rate` with i = min(T, BC) − F + 1, Rc ← (Rt + Rc)/2. Rt and Rc are capped
//!   at the maximum rate; once both reach it the limiter is released (no timers; the next CNP
//!   is a "first CNP" again).
//!
//! Rates are kept in kb/s (integer arithmetic, every result can be computed by hand); the
//! parameters are in Mb/s, ns and bytes. Not modelled: the reference code's halving of T and
//! B in hyper increase.

use crate::rc::Instant;

/// Q10 fixed point: 1024 = 1.0.
const Q10: u64 = 1024;

/// Every DCQCN reaction-point parameter (NVIDIA MLNX_OFED / mlxconfig names in brackets).
/// [`Default`] gives NVIDIA's ConnectX defaults (rocev2.md §4.3) with a 100 Gb/s line rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DcqcnConfig {
    /// Port speed in Mb/s: the rate before any CNP and the cap when `max_rate_mbps` is 0.
    pub line_rate_mbps: u64,
    /// Maximum rate in Mb/s; 0 = `line_rate_mbps` [`rpg_max_rate`, default 0].
    pub max_rate_mbps: u64,
    /// Rate floor in Mb/s [`rpg_min_rate`, default 1].
    pub min_rate_mbps: u64,
    /// Rate in Mb/s a flow starts from when its first CNP allocates a limiter; 0 = the maximum
    /// rate [`rate_to_set_on_first_cnp`, default 0].
    pub rate_to_set_on_first_cnp_mbps: u64,
    /// α gain in Q10 (0..=1024; effective gain (1024 − g)/1024) [`dce_tcp_g`, default 1019].
    pub g: u32,
    /// α update period in ns [`dce_tcp_rtt`, default 1 µs].
    pub alpha_update_period_ns: u64,
    /// α when a limiter is allocated, Q10 (0..=1024) [`initial_alpha_value`, default 1023].
    pub initial_alpha: u32,
    /// Decrease shift: a cut removes Rc·α ≫ `gd` (11 with Q10 α = Rc·α/2)
    /// [`rpg_gd`, default 11].
    pub gd: u8,
    /// A single cut keeps at least this percentage of the rate [`rpg_min_dec_fac`, default 50].
    pub min_dec_fac_percent: u8,
    /// At most one cut per this many ns [`rate_reduce_monitor_period`, default 4 µs].
    pub rate_reduce_monitor_period_ns: u64,
    /// Rate-increase timer period in ns [`rpg_time_reset`, default 300 µs].
    pub time_reset_ns: u64,
    /// Bytes sent between byte-counter increase events; 0 disables the byte counter
    /// [`rpg_byte_reset`, default 32767; bytes as in Linux dcbnl.h `ieee_qcn.rpg_byte_reset`].
    pub byte_reset: u64,
    /// Fast-recovery steps F before additive increase [`rpg_threshold`, default 1].
    pub threshold: u32,
    /// Additive increase step in Mb/s [`rpg_ai_rate`, default 5].
    pub ai_rate_mbps: u64,
    /// Hyper increase step in Mb/s [`rpg_hai_rate`, default 50].
    pub hai_rate_mbps: u64,
    /// On every cut, Rt ← Rc first [`clamp_tgt_rate`, default false].
    pub clamp_tgt_rate: bool,
    /// On a cut, Rt ← Rc if a timer-driven increase happened since the previous cut
    /// [`clamp_tgt_rate_after_time_inc`, default true].
    pub clamp_tgt_rate_after_time_inc: bool,
}

impl Default for DcqcnConfig {
    fn default() -> Self {
        DcqcnConfig {
            line_rate_mbps: 100_000,
            max_rate_mbps: 0,
            min_rate_mbps: 1,
            rate_to_set_on_first_cnp_mbps: 0,
            g: 1019,
            alpha_update_period_ns: 1_000,
            initial_alpha: 1023,
            gd: 11,
            min_dec_fac_percent: 50,
            rate_reduce_monitor_period_ns: 4_000,
            time_reset_ns: 300_000,
            byte_reset: 32_767,
            threshold: 1,
            ai_rate_mbps: 5,
            hai_rate_mbps: 50,
            clamp_tgt_rate: false,
            clamp_tgt_rate_after_time_inc: true,
        }
    }
}

impl DcqcnConfig {
    /// The rate cap in kb/s: `max_rate_mbps`, or `line_rate_mbps` when that is 0 (at least
    /// 1 kb/s).
    pub fn max_rate_kbps(&self) -> u64 {
        let m = if self.max_rate_mbps == 0 {
            self.line_rate_mbps
        } else {
            self.max_rate_mbps.min(self.line_rate_mbps.max(1))
        };
        m.saturating_mul(1000).max(1)
    }

    fn min_rate_kbps(&self) -> u64 {
        self.min_rate_mbps
            .saturating_mul(1000)
            .min(self.max_rate_kbps())
    }
}

/// What triggered a rate increase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IncreaseEvent {
    /// The `time_reset` timer expired (bumps the time stage T).
    Timer,
    /// `byte_reset` bytes were sent (bumps the byte stage BC).
    ByteCounter,
}

/// The phase an increase event was classified into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IncreasePhase {
    /// Rc ← (Rt + Rc)/2.
    FastRecovery,
    /// Rt += R_AI, then Rc ← (Rt + Rc)/2.
    Additive,
    /// Rt += i·R_HAI, then Rc ← (Rt + Rc)/2.
    Hyper,
}

/// The DCQCN reaction point of one QP. Feed it CNPs, bytes sent and time; read the rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReactionPoint {
    cfg: DcqcnConfig,
    /// A limiter is allocated (a CNP arrived and the rate has not recovered to the maximum).
    active: bool,
    rc_kbps: u64,
    rt_kbps: u64,
    /// α, Q10.
    alpha: u32,
    alpha_period_start: Instant,
    cnp_in_period: bool,
    last_cut: Option<Instant>,
    next_increase: Option<Instant>,
    time_stage: u32,
    byte_stage: u32,
    bytes_since: u64,
    timer_increase_since_cut: bool,
    cuts: u64,
    increases: u64,
}

impl ReactionPoint {
    /// A reaction point at the maximum rate, no limiter allocated.
    pub fn new(cfg: DcqcnConfig) -> Self {
        let max = cfg.max_rate_kbps();
        ReactionPoint {
            cfg,
            active: false,
            rc_kbps: max,
            rt_kbps: max,
            alpha: cfg.initial_alpha.min(Q10 as u32),
            alpha_period_start: Instant(0),
            cnp_in_period: false,
            last_cut: None,
            next_increase: None,
            time_stage: 0,
            byte_stage: 0,
            bytes_since: 0,
            timer_increase_since_cut: false,
            cuts: 0,
            increases: 0,
        }
    }

    /// The parameters.
    pub const fn config(&self) -> &DcqcnConfig {
        &self.cfg
    }

    /// Current rate Rc in kb/s.
    pub const fn rate_kbps(&self) -> u64 {
        self.rc_kbps
    }

    /// Current rate Rc in Mb/s (rounded down).
    pub const fn rate_mbps(&self) -> u64 {
        self.rc_kbps / 1000
    }

    /// Target rate Rt in kb/s.
    pub const fn target_rate_kbps(&self) -> u64 {
        self.rt_kbps
    }

    /// α in Q10 (1024 = 1.0), as of the last event processed.
    pub const fn alpha(&self) -> u32 {
        self.alpha
    }

    /// `true` while a limiter is allocated (between a CNP and full recovery).
    pub const fn is_active(&self) -> bool {
        self.active
    }

    /// Rate cuts so far.
    pub const fn cuts(&self) -> u64 {
        self.cuts
    }

    /// Rate increase events so far.
    pub const fn increases(&self) -> u64 {
        self.increases
    }

    /// The time stage T and byte stage BC (increase events since the last cut).
    pub const fn stages(&self) -> (u32, u32) {
        (self.time_stage, self.byte_stage)
    }

    /// When the next increase timer fires; `None` without a limiter.
    pub const fn next_deadline(&self) -> Option<Instant> {
        if self.active {
            self.next_increase
        } else {
            None
        }
    }

    /// Applies the α updates of every period that ended at or before `now`.
    fn update_alpha(&mut self, now: Instant) {
        let p = self.cfg.alpha_update_period_ns.max(1);
        let g = u64::from(self.cfg.g.min(Q10 as u32));
        while now.0 >= self.alpha_period_start.0.saturating_add(p) {
            let a = u64::from(self.alpha);
            let next = if self.cnp_in_period {
                a * g / Q10 + (Q10 - g)
            } else {
                a * g / Q10
            };
            let was_cnp = core::mem::replace(&mut self.cnp_in_period, false);
            if next == a && !was_cnp {
                // Fixed point without CNPs: skip the remaining whole periods at once.
                let periods = (now.0 - self.alpha_period_start.0) / p;
                self.alpha_period_start = self.alpha_period_start.add_nanos(periods * p);
                break;
            }
            self.alpha = next.min(Q10) as u32;
            self.alpha_period_start = self.alpha_period_start.add_nanos(p);
        }
    }

    /// Runs the increase timer events due at or before `now` (α is brought up to date too).
    pub fn handle_timeout(&mut self, now: Instant) {
        while self.active {
            let Some(t) = self.next_increase.filter(|t| *t <= now) else {
                break;
            };
            self.update_alpha(t);
            self.increase(IncreaseEvent::Timer);
            self.next_increase = if self.active {
                Some(t.add_nanos(self.cfg.time_reset_ns.max(1)))
            } else {
                None
            };
        }
        if self.active {
            self.update_alpha(now);
        }
    }

    /// A CNP for this QP arrived at `now`. Returns `true` when it cut the rate (`false` inside
    /// `rate_reduce_monitor_period` of the previous cut). Timer events due before `now` run
    /// first.
    pub fn on_cnp(&mut self, now: Instant) -> bool {
        self.handle_timeout(now);
        if !self.active {
            self.active = true;
            let first = self.cfg.rate_to_set_on_first_cnp_mbps.saturating_mul(1000);
            let max = self.cfg.max_rate_kbps();
            self.rc_kbps = if first == 0 { max } else { first.min(max) };
            self.rt_kbps = max;
            self.alpha = self.cfg.initial_alpha.min(Q10 as u32);
            self.alpha_period_start = now;
            self.cnp_in_period = false;
            self.last_cut = None;
            self.timer_increase_since_cut = false;
        }
        self.cnp_in_period = true;
        if let Some(t) = self.last_cut {
            if now.0.saturating_sub(t.0) < self.cfg.rate_reduce_monitor_period_ns {
                return false;
            }
        }
        if self.cfg.clamp_tgt_rate
            || (self.cfg.clamp_tgt_rate_after_time_inc && self.timer_increase_since_cut)
        {
            self.rt_kbps = self.rc_kbps;
        }
        let rc = self.rc_kbps;
        let dec = (u128::from(rc) * u128::from(self.alpha)) >> self.cfg.gd.min(127);
        let cut = rc.saturating_sub(u64::try_from(dec).unwrap_or(u64::MAX));
        let floor =
            (u128::from(rc) * u128::from(self.cfg.min_dec_fac_percent.min(100)) / 100) as u64;
        self.rc_kbps = cut.max(floor).max(self.cfg.min_rate_kbps());
        self.time_stage = 0;
        self.byte_stage = 0;
        self.bytes_since = 0;
        self.timer_increase_since_cut = false;
        self.last_cut = Some(now);
        self.next_increase = Some(now.add_nanos(self.cfg.time_reset_ns.max(1)));
        self.cuts += 1;
        true
    }

    /// `bytes` were sent: advances the byte counter, running byte-counter increase events.
    pub fn on_bytes_sent(&mut self, bytes: u64) {
        if !self.active || self.cfg.byte_reset == 0 {
            return;
        }
        self.bytes_since = self.bytes_since.saturating_add(bytes);
        while self.active && self.bytes_since >= self.cfg.byte_reset {
            self.bytes_since -= self.cfg.byte_reset;
            self.increase(IncreaseEvent::ByteCounter);
        }
    }

    /// The phase the next increase event would run in (stage counts before it).
    pub fn phase(&self) -> IncreasePhase {
        let f = self.cfg.threshold;
        match (self.time_stage >= f, self.byte_stage >= f) {
            (false, false) => IncreasePhase::FastRecovery,
            (true, true) => IncreasePhase::Hyper,
            _ => IncreasePhase::Additive,
        }
    }

    /// One increase event (see the module docs).
    fn increase(&mut self, event: IncreaseEvent) {
        let max = self.cfg.max_rate_kbps();
        let f = self.cfg.threshold;
        match self.phase() {
            IncreasePhase::FastRecovery => {}
            IncreasePhase::Additive => {
                self.rt_kbps = self
                    .rt_kbps
                    .saturating_add(self.cfg.ai_rate_mbps.saturating_mul(1000));
            }
            IncreasePhase::Hyper => {
                let i = u64::from(self.time_stage.min(self.byte_stage) - f + 1);
                let step = self
                    .cfg
                    .hai_rate_mbps
                    .saturating_mul(1000)
                    .saturating_mul(i);
                self.rt_kbps = self.rt_kbps.saturating_add(step);
            }
        }
        self.rt_kbps = self.rt_kbps.min(max);
        // Rounded up, so that Rc reaches Rt instead of stopping one kb/s short.
        self.rc_kbps = (u128::from(self.rt_kbps) + u128::from(self.rc_kbps)).div_ceil(2) as u64;
        self.rc_kbps = self.rc_kbps.min(max);
        match event {
            IncreaseEvent::Timer => {
                self.time_stage = self.time_stage.saturating_add(1);
                self.timer_increase_since_cut = true;
            }
            IncreaseEvent::ByteCounter => self.byte_stage = self.byte_stage.saturating_add(1),
        }
        self.increases += 1;
        if self.rc_kbps >= max && self.rt_kbps >= max {
            self.active = false;
            self.next_increase = None;
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// 10 Gb/s line, timer only (byte counter off), NVIDIA defaults otherwise.
    fn cfg10g() -> DcqcnConfig {
        DcqcnConfig {
            line_rate_mbps: 10_000,
            byte_reset: 0,
            ..DcqcnConfig::default()
        }
    }

    const US: u64 = 1_000;

    #[test]
    fn defaults_are_nvidia_values() {
        let c = DcqcnConfig::default();
        assert_eq!(
            (
                c.g,
                c.initial_alpha,
                c.gd,
                c.min_dec_fac_percent,
                c.threshold
            ),
            (1019, 1023, 11, 50, 1)
        );
        assert_eq!(
            (c.ai_rate_mbps, c.hai_rate_mbps, c.min_rate_mbps),
            (5, 50, 1)
        );
        assert_eq!(
            (
                c.time_reset_ns,
                c.byte_reset,
                c.rate_reduce_monitor_period_ns
            ),
            (300 * US, 32_767, 4 * US)
        );
        assert_eq!(c.alpha_update_period_ns, US);
        assert!(!c.clamp_tgt_rate && c.clamp_tgt_rate_after_time_inc);
        assert_eq!(c.max_rate_kbps(), 100_000_000);
    }

    #[test]
    fn first_cnp_then_fast_recovery_additive_hyper() {
        let mut rp = ReactionPoint::new(cfg10g());
        assert_eq!(rp.rate_kbps(), 10_000_000);
        assert_eq!(rp.next_deadline(), None);
        let t0 = Instant(1_000_000);
        assert!(rp.on_cnp(t0));
        // α = 1023: 10_000_000 · 1023 >> 11 = 4_995_117 (.1875 dropped) → Rc = 5_004_883.
        assert_eq!(rp.rate_kbps(), 5_004_883);
        // Rt not clamped: no timer increase happened yet.
        assert_eq!(rp.target_rate_kbps(), 10_000_000);
        assert_eq!(rp.next_deadline(), Some(t0.add_nanos(300 * US)));
        // Timer 1 (T = 0 < F): fast recovery, ⌈(10_000_000 + 5_004_883) / 2⌉ = 7_502_442.
        rp.handle_timeout(t0.add_nanos(300 * US));
        assert_eq!(rp.rate_kbps(), 7_502_442);
        assert_eq!(rp.stages(), (1, 0));
        // Timer 2 (T = 1 ≥ F, BC = 0): additive: Rt = min(10_005_000, cap) = 10_000_000 →
        // Rc = ⌈(10_000_000 + 7_502_442) / 2⌉ = 8_751_221.
        rp.handle_timeout(t0.add_nanos(600 * US));
        assert_eq!(rp.phase(), IncreasePhase::Additive);
        assert_eq!(rp.rate_kbps(), 8_751_221);
        assert_eq!(rp.target_rate_kbps(), 10_000_000);
        // A CNP now clamps Rt to Rc (a timer increase happened since the cut). α has decayed
        // over 600 periods without CNP — from 1023, (α·1019)/1024 each µs. Compute by hand:
        let mut a = 1023u64;
        // The first period contained the first CNP.
        a = a * 1019 / 1024 + 5;
        for _ in 1..700 {
            a = a * 1019 / 1024;
        }
        let t1 = t0.add_nanos(700 * US);
        assert!(rp.on_cnp(t1));
        assert_eq!(u64::from(rp.alpha()), a);
        assert_eq!(rp.target_rate_kbps(), 8_751_221);
        let want = (8_751_221 - 8_751_221 * a / 2048).max(8_751_221 * 50 / 100);
        assert_eq!(rp.rate_kbps(), want);
        assert_eq!(rp.cuts(), 2);
    }

    #[test]
    fn alpha_tracks_cnp_periods_q10() {
        let mut rp = ReactionPoint::new(cfg10g());
        let t0 = Instant(0);
        rp.on_cnp(t0);
        assert_eq!(rp.alpha(), 1023);
        // CNPs in every 1 µs period keep α at its Q10 fixed point 1023:
        // 1023·1019/1024 = 1018 (integer), + 5 = 1023.
        for k in 1..10u64 {
            rp.on_cnp(Instant(k * US));
            assert_eq!(rp.alpha(), 1023, "period {k}");
        }
        // No CNP for 3 periods after the one at 9 µs: update at 10 µs adds 5 (CNP in period
        // [9, 10)); 11 µs: 1023·1019/1024 = 1018; 12 µs: 1018·1019/1024 = 1013.
        rp.handle_timeout(Instant(12 * US));
        assert_eq!(rp.alpha(), 1013);
        // Long idle: α decays to 0 and stays there (no endless loop).
        rp.handle_timeout(Instant(250 * US));
        assert!(rp.is_active());
        rp.handle_timeout(Instant(10_000_000_000));
        assert_eq!(rp.alpha(), 0);
    }

    #[test]
    fn second_cut_uses_the_decayed_alpha() {
        let mut rp = ReactionPoint::new(cfg10g());
        rp.on_cnp(Instant(0));
        let r0 = rp.rate_kbps();
        // 10 µs later: α went through [0,1) with the CNP (1023) and 9 periods without.
        let mut a = 1023u64 * 1019 / 1024 + 5;
        for _ in 1..10 {
            a = a * 1019 / 1024;
        }
        assert_eq!(a, 978);
        assert!(rp.on_cnp(Instant(10 * US)));
        assert_eq!(u64::from(rp.alpha()), a);
        // No increase in between: Rt stays at the line rate (no clamp).
        assert_eq!(rp.target_rate_kbps(), 10_000_000);
        // 5_004_883 · 978 >> 11 = 2_390_027 → 2_614_856, above the 50 % floor (2_502_441).
        assert_eq!(rp.rate_kbps(), r0 - r0 * 978 / 2048);
        assert_eq!(rp.rate_kbps(), 2_614_856);
    }

    #[test]
    fn monitor_period_min_dec_fac_and_min_rate() {
        let mut rp = ReactionPoint::new(DcqcnConfig {
            line_rate_mbps: 1_000,
            min_rate_mbps: 300,
            initial_alpha: 1024,
            gd: 10, // α/1024: a full cut would remove everything
            ..cfg10g()
        });
        assert!(rp.on_cnp(Instant(0)));
        // Rc − Rc·1024>>10 = 0, floored at 50 % = 500_000.
        assert_eq!(rp.rate_kbps(), 500_000);
        // Inside the 4 µs monitor period: ignored for the rate.
        assert!(!rp.on_cnp(Instant(3_999)));
        assert_eq!(rp.rate_kbps(), 500_000);
        // α per 1 µs period: [0,1) CNP: 1024·1019/1024 + 5 = 1024; [1,2) none: 1019;
        // [2,3) none: 1019·1019/1024 = 1014; [3,4) CNP at 3.999: 1014·1019/1024 + 5 = 1014.
        assert!(rp.on_cnp(Instant(4_000)));
        assert_eq!(rp.alpha(), 1014);
        // 500_000 − 500_000·1014>>10 (495_117) = 4_883; the 50 % floor is 250_000;
        // min_rate 300 Mb/s wins.
        assert_eq!(rp.rate_kbps(), 300_000);
        assert!(rp.on_cnp(Instant(8_000)));
        assert_eq!(rp.rate_kbps(), 300_000);
    }

    /// ⌈(a + b) / 2⌉, the increase step's average.
    fn avg(a: u64, b: u64) -> u64 {
        (a + b).div_ceil(2)
    }

    #[test]
    fn byte_counter_and_hyper_increase() {
        const LINE: u64 = 100_000_000;
        let mut rp = ReactionPoint::new(DcqcnConfig {
            byte_reset: 1000,
            threshold: 2,
            ai_rate_mbps: 10,
            hai_rate_mbps: 100,
            ..DcqcnConfig::default()
        });
        rp.on_cnp(Instant(0));
        // 100_000_000 · 1023 / 2048 = 49_951_171 (.875 dropped).
        let r0 = rp.rate_kbps();
        assert_eq!(r0, 50_048_829);
        // Bytes below the threshold: nothing.
        rp.on_bytes_sent(999);
        assert_eq!(rp.rate_kbps(), r0);
        // 1 more byte: BC event 1, fast recovery (T = 0, BC = 0 < F = 2).
        rp.on_bytes_sent(1);
        let r1 = avg(LINE, r0);
        assert_eq!(rp.rate_kbps(), r1);
        // Second BC event: still fast recovery (BC = 1 < 2).
        rp.on_bytes_sent(1000);
        let r2 = avg(LINE, r1);
        assert_eq!(rp.rate_kbps(), r2);
        assert_eq!(rp.stages(), (0, 2));
        assert_eq!(rp.phase(), IncreasePhase::Additive);
        // Timers at 300 and 600 µs: both additive (BC ≥ F); Rt is at the cap already.
        rp.handle_timeout(Instant(600 * US));
        assert_eq!(rp.rate_kbps(), avg(LINE, avg(LINE, r2)));
        assert_eq!(rp.stages(), (2, 2));
        assert_eq!(rp.phase(), IncreasePhase::Hyper);
        // Cut at 601 µs; a timer increase happened since the last cut, so Rt = Rc first.
        let before = rp.rate_kbps();
        rp.on_cnp(Instant(601 * US));
        assert_eq!(rp.target_rate_kbps(), before);
        assert_eq!(rp.stages(), (0, 0));
        // α over the 601 periods since the first CNP (which fell in the first one): Q10
        // truncation loses at least 1 per period once α < 205, so it has reached 0.
        let mut a = 1023u64 * 1019 / 1024 + 5;
        for _ in 1..601 {
            a = a * 1019 / 1024;
        }
        assert_eq!((u64::from(rp.alpha()), a), (0, 0));
        let (mut rc, mut rt) = (rp.rate_kbps(), before);
        assert_eq!(rc, before, "α = 0: the cut removes nothing");
        // Timer at 901 µs: (T, BC) = (0, 0): fast recovery.
        rp.handle_timeout(Instant(901 * US));
        rc = avg(rt, rc);
        assert_eq!(rp.rate_kbps(), rc);
        // BC events at (1, 0) and (1, 1): fast recovery.
        rp.on_bytes_sent(2000);
        rc = avg(rt, avg(rt, rc));
        assert_eq!(rp.rate_kbps(), rc);
        // Timer at 1201 µs: (1, 2): additive, Rt += 10 Mb/s.
        rp.handle_timeout(Instant(1201 * US));
        rt += 10_000;
        rc = avg(rt, rc);
        assert_eq!((rp.rate_kbps(), rp.target_rate_kbps()), (rc, rt));
        // BC event: (2, 2): hyper, i = 2 − 2 + 1 = 1: Rt += 100 Mb/s.
        rp.on_bytes_sent(1000);
        rt += 100_000;
        rc = avg(rt, rc);
        assert_eq!((rp.rate_kbps(), rp.target_rate_kbps()), (rc, rt));
        // Timer at 1501 µs: (2, 3): hyper, i = 1. Then a BC event at (3, 3): i = 2.
        rp.handle_timeout(Instant(1501 * US));
        rt += 100_000;
        rc = avg(rt, rc);
        assert_eq!((rp.rate_kbps(), rp.target_rate_kbps()), (rc, rt));
        rp.on_bytes_sent(1000);
        rt += 200_000;
        rc = avg(rt, rc);
        assert_eq!((rp.rate_kbps(), rp.target_rate_kbps()), (rc, rt));
        assert!(rt < LINE, "no cap involved");
        assert_eq!(rp.increases(), 11);
    }

    #[test]
    fn recovers_to_line_rate_and_releases_the_limiter() {
        let mut rp = ReactionPoint::new(cfg10g());
        rp.on_cnp(Instant(0));
        let mut t = Instant(0);
        let mut steps = 0;
        while rp.is_active() {
            t = rp.next_deadline().expect("timer runs while limited");
            rp.handle_timeout(t);
            steps += 1;
            assert!(steps < 100, "converges");
        }
        assert_eq!(rp.rate_kbps(), 10_000_000);
        assert_eq!(rp.next_deadline(), None);
        // Each step halves (rounding down) the distance to Rt = line: 4_995_117 has 23 bits,
        // so 23 steps reach 0.
        assert_eq!(steps, 23);
        assert!(t > Instant(0));
        // A new CNP is a first CNP again (α back to the initial value).
        assert!(rp.on_cnp(t.add_nanos(1)));
        assert_eq!(rp.alpha(), 1023);
        assert_eq!(rp.rate_kbps(), 5_004_883);
    }

    #[test]
    fn rate_on_first_cnp_and_max_rate() {
        let mut rp = ReactionPoint::new(DcqcnConfig {
            max_rate_mbps: 4_000,
            rate_to_set_on_first_cnp_mbps: 2_000,
            ..cfg10g()
        });
        assert_eq!(rp.rate_kbps(), 4_000_000);
        rp.on_cnp(Instant(0));
        // Start at 2 Gb/s, cut: 2_000_000 − 2_000_000·1023/2048 (= 999_023) = 1_000_977.
        assert_eq!(rp.rate_kbps(), 1_000_977);
        assert_eq!(rp.target_rate_kbps(), 4_000_000);
        assert_eq!(rp.rate_mbps(), 1_000);
    }
}
