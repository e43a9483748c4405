//! A seeded impairment layer for the soft provider: drops, duplicates, reorders, corrupts and
//! delays sent packets, and CE-marks received ones, each with a given probability, so that
//! loss recovery and congestion control can be exercised without a lossy network.
//!
//! The transmit side sits between the RC engine and `send_to`: every packet's fate is drawn
//! ([`Impairer::decide`]) and an altered one handed to [`Impairer::apply`], which says what
//! leaves now; held packets (delay, reorder) leave from
//! [`Impairer::release`], called by the progress thread. The receive side
//! ([`Impairer::mark_ce`]) models a switch that marks ECN-capable packets Congestion
//! Experienced (RFC 3168 §5), so the notification point sees CE without kernel help.
//!
//! Decisions come from a SplitMix64 stream seeded by [`Impairment::seed`]: the same seed and
//! the same packet sequence give the same impairments. With loss alone the stream gives the
//! number of packets that pass before the next drop (a geometric draw, the same Bernoulli
//! process as a draw per packet), so that a sender passes a whole batch with one decision
//! ([`Impairer::passes`]) and a lossy run costs the sender what a loss-free one does, less
//! the dropped packets.

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

/// How long a packet picked for reordering waits for a later packet to overtake it before it
/// is sent anyway, ns.
pub const REORDER_MAX_HOLD_NS: u64 = 1_000_000;

/// What to do to the packets of one soft device. Probabilities are in 0.0..=1.0.
///
/// Text form (`rdmesh bench --impair`): comma-separated `key=value` with keys `loss`, `dup`,
/// `reorder`, `corrupt`, `ce` (percentages such as `1%`, `0.1%`, or fractions such as `0.01`),
/// `delay` (a duration: `100us`, `2ms`, `500ns`), `delayp` (the share of packets delayed,
/// default 100 %) and `seed` (an integer, default 1). Example:
/// `loss=1%,dup=1%,reorder=1%,corrupt=1%,delay=100us`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impairment {
    /// Seed of the decision stream.
    pub seed: u64,
    /// Probability that a sent packet is dropped.
    pub loss: f64,
    /// Probability that a sent packet is sent twice.
    pub dup: f64,
    /// Probability that a sent packet is held until the next one has left (at most
    /// [`REORDER_MAX_HOLD_NS`]).
    pub reorder: f64,
    /// Probability that one bit of a sent packet (outside the ICRC-masked BTH byte 4) is
    /// flipped, so that the receiver's ICRC check fails.
    pub corrupt: f64,
    /// Delay added to delayed packets, ns.
    pub delay_ns: u64,
    /// Probability that a sent packet is delayed by `delay_ns` (1.0 = all of them).
    pub delay_prob: f64,
    /// Probability that a received ECN-capable packet is seen as CE-marked.
    pub ce: f64,
}

impl Default for Impairment {
    fn default() -> Impairment {
        Impairment {
            seed: 1,
            loss: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay_ns: 0,
            delay_prob: 1.0,
            ce: 0.0,
        }
    }
}

impl Impairment {
    /// The same impairment with another seed (both ends of a loopback run get their own
    /// stream).
    pub fn with_seed(self, seed: u64) -> Impairment {
        Impairment { seed, ..self }
    }

    /// `true` when packets may be held back (delay or reorder), so the progress thread must
    /// look at the hold queue often.
    pub fn holds_packets(&self) -> bool {
        (self.delay_ns > 0 && self.delay_prob > 0.0) || self.reorder > 0.0
    }
}

fn parse_prob(key: &str, v: &str) -> Result<f64, String> {
    let (num, scale) = match v.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (v, 1.0),
    };
    let p = num
        .trim()
        .parse::<f64>()
        .ok()
        .map(|x| x / scale)
        .filter(|x| (0.0..=1.0).contains(x))
        .ok_or_else(|| {
            format!("{key}={v}: expected a probability such as 1%, 0.5% or 0.01 (0..=100 %)")
        })?;
    Ok(p)
}

fn parse_duration_ns(key: &str, v: &str) -> Result<u64, String> {
    let v = v.trim();
    let (num, mul) = if let Some(n) = v.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("us") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("µs") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e9)
    } else {
        return Err(format!(
            "{key}={v}: expected a duration with a unit (ns, us, ms, s), such as 100us"
        ));
    };
    num.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite() && *x >= 0.0 && *x * mul <= 10e9)
        .map(|x| (x * mul).round() as u64)
        .ok_or_else(|| format!("{key}={v}: expected a duration between 0 and 10 s"))
}

impl FromStr for Impairment {
    type Err = String;

    /// Parses the text form described on [`Impairment`]; an empty string is no impairment.
    fn from_str(s: &str) -> Result<Impairment, String> {
        let mut imp = Impairment::default();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("'{item}': expected key=value (for example loss=1%)"))?;
            let k = k.trim();
            match k {
                "loss" => imp.loss = parse_prob(k, v)?,
                "dup" => imp.dup = parse_prob(k, v)?,
                "reorder" => imp.reorder = parse_prob(k, v)?,
                "corrupt" => imp.corrupt = parse_prob(k, v)?,
                "ce" => imp.ce = parse_prob(k, v)?,
                "delayp" => imp.delay_prob = parse_prob(k, v)?,
                "delay" => imp.delay_ns = parse_duration_ns(k, v)?,
                "seed" => {
                    imp.seed = v
                        .trim()
                        .parse()
                        .map_err(|_| format!("seed={v}: expected an unsigned integer"))?
                }
                _ => {
                    return Err(format!(
                    "unknown impairment '{k}'; known: loss, dup, reorder, corrupt, delay, delayp, ce, seed"
                ))
                }
            }
        }
        Ok(imp)
    }
}

impl fmt::Display for Impairment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss={}%,dup={}%,reorder={}%,corrupt={}%,delay={}ns,delayp={}%,ce={}%,seed={}",
            self.loss * 100.0,
            self.dup * 100.0,
            self.reorder * 100.0,
            self.corrupt * 100.0,
            self.delay_ns,
            self.delay_prob * 100.0,
            self.ce * 100.0,
            self.seed
        )
    }
}

/// What the impairment layer did, per device.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImpairCounters {
    /// Sent packets dropped.
    pub dropped: u64,
    /// Extra copies sent.
    pub duplicated: u64,
    /// Packets held back so that the next packet overtook them.
    pub reordered: u64,
    /// Packet copies sent with a flipped bit (each fails the receiver's ICRC check).
    pub corrupted: u64,
    /// Packets delayed.
    pub delayed: u64,
    /// Received packets treated as CE-marked.
    pub ce_marked: u64,
}

/// The fate of one packet ([`Impairer::decide`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Dropped.
    Drop,
    /// Leaves now, unchanged and alone, right after the packet before it: it may share a GSO
    /// send with its neighbours that pass too.
    Pass,
    /// Anything else (a copy, a flipped bit, held for reordering or delay, or a held packet
    /// released right after it): seal it alone and hand it to [`Impairer::apply`].
    Alter(Plan),
}

/// What happens to a packet that does not simply pass: one plan per copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// 1, or 2 when duplicated.
    copies: usize,
    each: [CopyPlan; 2],
}

/// What happens to one copy of a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct CopyPlan {
    /// Random bits choosing the bit to flip (corruption).
    flip: Option<u64>,
    /// Held until the next packet leaves.
    reorder: bool,
    /// Held for the delay.
    delay: bool,
}

/// A packet waiting in the impairment layer.
#[derive(Debug)]
struct Held {
    due_ns: u64,
    dst: SocketAddr,
    pkt: Vec<u8>,
}

/// The impairment state of one device: decision stream, held packets, counters.
#[derive(Debug)]
pub(crate) struct Impairer {
    cfg: Impairment,
    state: u64,
    /// Loss alone ([`Self::loss_only`]): packets that pass before the next drop (drawn at
    /// construction and after each drop; unused otherwise).
    gap: u64,
    /// Delayed packets, in due order (one delay for all, so FIFO order is due order).
    delayed: VecDeque<Held>,
    /// The packet held for reordering, if any.
    reorder_slot: Option<Held>,
    pub(crate) counters: ImpairCounters,
}

impl Impairer {
    pub(crate) fn new(cfg: Impairment) -> Impairer {
        let mut imp = Impairer {
            cfg,
            state: cfg.seed,
            gap: 0,
            delayed: VecDeque::new(),
            reorder_slot: None,
            counters: ImpairCounters::default(),
        };
        if imp.loss_only() {
            imp.gap = imp.draw_gap();
        }
        imp
    }

    /// The next SplitMix64 output (Steele, Lea, Flood: "Fast splittable pseudorandom number
    /// generators", OOPSLA 2014).
    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `true` with probability `p` (no draw when `p` is 0, so an unused impairment does not
    /// shift the stream of the others).
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// Takes one sealed packet (ICRC included) for `dst` at `now_ns` and appends what must be
    /// sent now, in order, to `out` ([`Self::decide`], then [`Self::apply`] unless dropped):
    /// the two steps a sender takes, as one (the soft device takes them apart, to send a
    /// packet that passes without copying it and with the lock released).
    #[cfg(test)]
    pub(crate) fn submit(
        &mut self,
        now_ns: u64,
        dst: SocketAddr,
        pkt: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        match self.decide() {
            Fate::Drop => {}
            Fate::Pass => out.push((dst, pkt.to_vec())),
            Fate::Alter(plan) => self.apply(plan, now_ns, dst, pkt, out),
        }
    }

    /// Draws the fate of the next packet before it is sealed (nothing in the decision depends
    /// on its bytes), so that a sender can seal the packets that simply pass for the GSO send
    /// they share (segment `i` of a send carries IPv4 ID `i`, which the ICRC covers) and the
    /// others for a datagram of their own (ID 0). Counts drops; a [`Fate::Alter`] packet must
    /// be handed to [`Self::apply`], which counts the rest. The draws are those `submit` always
    /// made, in the same order, so a seed gives the same impairments either way (with loss
    /// alone, the gap to the next drop counts down, as [`Self::passes`] counts it).
    pub(crate) fn decide(&mut self) -> Fate {
        if self.loss_only() {
            if self.gap == 0 {
                self.counters.dropped += 1;
                self.gap = self.draw_gap();
                return Fate::Drop;
            }
            self.gap -= 1;
            return Fate::Pass;
        }
        if self.chance(self.cfg.loss) {
            self.counters.dropped += 1;
            return Fate::Drop;
        }
        let copies = if self.chance(self.cfg.dup) {
            self.counters.duplicated += 1;
            2
        } else {
            1
        };
        let mut plan = Plan {
            copies,
            each: [CopyPlan::default(); 2],
        };
        let mut slot_taken = self.reorder_slot.is_some();
        for cp in plan.each.iter_mut().take(copies) {
            if self.chance(self.cfg.corrupt) {
                cp.flip = Some(self.next_u64());
            }
            if !slot_taken && self.chance(self.cfg.reorder) {
                cp.reorder = true;
                slot_taken = true;
            } else if self.cfg.delay_ns > 0 && self.chance(self.cfg.delay_prob) {
                cp.delay = true;
            } else {
                // Leaves now, and a held packet right after it.
                slot_taken = false;
            }
        }
        let plain = copies == 1 && plan.each[0] == CopyPlan::default();
        if plain && self.reorder_slot.is_none() {
            Fate::Pass
        } else {
            Fate::Alter(plan)
        }
    }

    /// `true` when the next `n` packets all simply pass, and then they are decided: with loss
    /// alone, no drop falls among them (a sender then sends them as if there were no layer).
    /// `false` decides nothing: the sender draws each one's fate with [`Self::decide`].
    pub(crate) fn passes(&mut self, n: usize) -> bool {
        let n = n as u64;
        if !self.loss_only() || self.gap < n {
            return false;
        }
        self.gap -= n;
        true
    }

    /// Only packet loss is configured (no copies, flips, holds): every packet passes or is
    /// dropped, decided by the gap to the next drop.
    fn loss_only(&self) -> bool {
        let c = &self.cfg;
        c.dup == 0.0 && c.corrupt == 0.0 && !c.holds_packets()
    }

    /// Packets passing before the next drop when each is dropped with probability `loss`: the
    /// geometric distribution's inversion, ⌊ln U / ln(1 − loss)⌋ with U uniform in (0, 1]
    /// (`u64::MAX`, never, at loss 0).
    fn draw_gap(&mut self) -> u64 {
        let p = self.cfg.loss;
        if p <= 0.0 {
            return u64::MAX;
        }
        if p >= 1.0 {
            return 0;
        }
        let u = ((self.next_u64() >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let g = (u.ln() / (-p).ln_1p()).floor();
        if g >= u64::MAX as f64 {
            u64::MAX
        } else {
            g as u64
        }
    }

    /// Carries out `plan` ([`Self::decide`]) on the sealed packet `pkt` for `dst` at `now_ns`:
    /// appends what must be sent now, in order, to `out`; holds what waits.
    pub(crate) fn apply(
        &mut self,
        plan: Plan,
        now_ns: u64,
        dst: SocketAddr,
        pkt: &[u8],
        out: &mut Vec<(SocketAddr, Vec<u8>)>,
    ) {
        for cp in plan.each.iter().take(plan.copies) {
            let mut p = pkt.to_vec();
            if let Some(r) = cp.flip.filter(|_| !p.is_empty()) {
                let mut at = (r % p.len() as u64) as usize;
                if at == 4 {
                    // BTH byte 4 (resv8a) is masked out of the ICRC: flip the last byte.
                    at = p.len() - 1;
                }
                p[at] ^= 1 << ((r >> 32) % 8);
                self.counters.corrupted += 1;
            }
            // Reordering first: a held packet leaves right after the next packet that leaves,
            // whether that one leaves now or after its delay.
            if cp.reorder {
                self.counters.reordered += 1;
                self.reorder_slot = Some(Held {
                    due_ns: now_ns + REORDER_MAX_HOLD_NS.max(2 * self.cfg.delay_ns),
                    dst,
                    pkt: p,
                });
                continue;
            }
            if cp.delay {
                self.counters.delayed += 1;
                self.delayed.push_back(Held {
                    due_ns: now_ns + self.cfg.delay_ns,
                    dst,
                    pkt: p,
                });
                continue;
            }
            out.push((dst, p));
            if let Some(h) = self.reorder_slot.take() {
                out.push((h.dst, h.pkt));
            }
        }
    }

    /// Appends every held packet that is due at `now_ns` to `out`.
    pub(crate) fn release(&mut self, now_ns: u64, out: &mut Vec<(SocketAddr, Vec<u8>)>) {
        while self.delayed.front().is_some_and(|h| h.due_ns <= now_ns) {
            let h = self.delayed.pop_front().expect("front exists");
            out.push((h.dst, h.pkt));
            // A delayed packet leaving is a packet passing: it releases the reorder slot.
            if let Some(r) = self.reorder_slot.take() {
                out.push((r.dst, r.pkt));
            }
        }
        if self
            .reorder_slot
            .as_ref()
            .is_some_and(|h| h.due_ns <= now_ns)
        {
            let h = self.reorder_slot.take().expect("checked");
            out.push((h.dst, h.pkt));
        }
    }

    /// Decides whether a received ECN-capable packet is treated as CE-marked.
    pub(crate) fn mark_ce(&mut self) -> bool {
        let hit = self.chance(self.cfg.ce);
        if hit {
            self.counters.ce_marked += 1;
        }
        hit
    }

    /// The poll interval the progress thread should use while packets may be held.
    pub(crate) fn poll_interval(&self) -> Option<Duration> {
        self.cfg.holds_packets().then(|| {
            let d = if self.cfg.delay_ns > 0 {
                (self.cfg.delay_ns / 4).clamp(10_000, 100_000)
            } else {
                100_000
            };
            Duration::from_nanos(d)
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    fn addr() -> SocketAddr {
        "127.0.0.1:4791".parse().unwrap()
    }

    #[test]
    fn parses_the_bench_syntax_and_rejects_nonsense() {
        let i: Impairment = "loss=1%,dup=0.5%,reorder=0.01,corrupt=1%,delay=100us,ce=10%,seed=7"
            .parse()
            .unwrap();
        assert_eq!(i.loss, 0.01);
        assert_eq!(i.dup, 0.005);
        assert_eq!(i.reorder, 0.01);
        assert_eq!(i.corrupt, 0.01);
        assert_eq!(i.delay_ns, 100_000);
        assert_eq!(i.delay_prob, 1.0);
        assert_eq!(i.ce, 0.1);
        assert_eq!(i.seed, 7);
        assert_eq!("".parse::<Impairment>().unwrap(), Impairment::default());
        assert!("delay=2ms".parse::<Impairment>().unwrap().delay_ns == 2_000_000);
        for bad in [
            "loss=101%",
            "loss",
            "jitter=1%",
            "delay=100",
            "seed=-1",
            "dup=x%",
        ] {
            let e = bad.parse::<Impairment>().unwrap_err();
            assert!(!e.is_empty(), "{bad}");
        }
        assert!("loss=2%"
            .parse::<Impairment>()
            .unwrap()
            .to_string()
            .contains("loss=2%"));
    }

    #[test]
    fn loss_rate_matches_and_the_stream_is_reproducible() {
        let cfg = Impairment {
            loss: 0.1,
            seed: 42,
            ..Default::default()
        };
        let run = || {
            let mut imp = Impairer::new(cfg);
            let mut out = Vec::new();
            let mut kept = Vec::new();
            for i in 0..20_000u32 {
                out.clear();
                imp.submit(0, addr(), &i.to_be_bytes(), &mut out);
                kept.extend(out.iter().map(|(_, p)| p.clone()));
            }
            (imp.counters, kept)
        };
        let (c, kept) = run();
        assert_eq!(c.dropped + kept.len() as u64, 20_000);
        // 2000 expected; 5 sigma ≈ 212.
        assert!((1788..=2212).contains(&c.dropped), "{c:?}");
        assert_eq!(run().1, kept, "same seed, same decisions");
    }

    #[test]
    fn a_batch_that_passes_whole_takes_the_decisions_of_its_packets() {
        // Loss alone: a sender asks `passes(n)` for each batch and, when a drop falls inside
        // it, `decide` for each of its packets; the packets dropped must be the ones a
        // per-packet sender with the same seed drops.
        let cfg = Impairment {
            loss: 0.01,
            seed: 5,
            ..Default::default()
        };
        let total = 200_000u64;
        let mut each = Impairer::new(cfg);
        let per_packet: Vec<u64> = (0..total).filter(|_| each.decide() == Fate::Drop).collect();
        let mut batched = Impairer::new(cfg);
        let mut dropped = Vec::new();
        let (mut next, mut n, mut whole) = (0u64, 1usize, 0u32);
        while next < total {
            let len = (n as u64).min(total - next);
            if batched.passes(len as usize) {
                whole += 1;
            } else {
                for i in next..next + len {
                    match batched.decide() {
                        Fate::Drop => dropped.push(i),
                        Fate::Pass => {}
                        Fate::Alter(_) => panic!("loss alone never alters a packet"),
                    }
                }
            }
            next += len;
            n = n % 64 + 1;
        }
        assert_eq!(dropped, per_packet);
        assert_eq!(batched.counters.dropped, per_packet.len() as u64);
        // 2000 expected; 5 sigma ≈ 222.
        assert!(
            (1778..=2222).contains(&per_packet.len()),
            "{}",
            per_packet.len()
        );
        assert!(whole > 4000, "most batches pass whole: {whole}");

        // No loss: every batch passes, and the stream is never drawn from.
        let mut none = Impairer::new(Impairment::default());
        assert!((0..1000).all(|_| none.passes(64)));
        assert_eq!(none.state, Impairment::default().seed);
        // Anything besides loss: each packet is decided on its own.
        for other in [
            Impairment { dup: 0.01, ..cfg },
            Impairment {
                corrupt: 0.01,
                ..cfg
            },
            Impairment {
                reorder: 0.01,
                ..cfg
            },
            Impairment {
                delay_ns: 1000,
                ..cfg
            },
        ] {
            assert!(!Impairer::new(other).passes(1), "{other}");
        }
        // Loss 100 %: nothing passes.
        let mut all = Impairer::new(Impairment { loss: 1.0, ..cfg });
        assert!(!all.passes(1));
        assert_eq!(all.decide(), Fate::Drop);
    }

    #[test]
    fn only_packets_that_simply_pass_may_share_a_gso_send() {
        // Loss only: every packet passes or is dropped, in the stream `submit` uses.
        let cfg = Impairment {
            loss: 0.3,
            seed: 9,
            ..Default::default()
        };
        let (mut a, mut b) = (Impairer::new(cfg), Impairer::new(cfg));
        let mut out = Vec::new();
        for i in 0..200u8 {
            out.clear();
            b.submit(0, addr(), &[i], &mut out);
            match a.decide() {
                Fate::Pass => assert_eq!(out.len(), 1, "packet {i}"),
                Fate::Drop => assert!(out.is_empty(), "packet {i}"),
                Fate::Alter(_) => panic!("loss alone never alters a packet"),
            }
        }
        assert_eq!(a.counters, b.counters);
        // A packet held for reordering: the next one must not join a GSO run (the held one
        // leaves right after it), and `apply` sends both in that order.
        let mut imp = Impairer::new(Impairment {
            reorder: 1.0,
            ..Default::default()
        });
        let Fate::Alter(first) = imp.decide() else {
            panic!("held for reordering");
        };
        out.clear();
        imp.apply(first, 0, addr(), &[1], &mut out);
        assert!(out.is_empty());
        let Fate::Alter(next) = imp.decide() else {
            panic!("releases the held packet");
        };
        imp.apply(next, 5, addr(), &[2], &mut out);
        assert_eq!(out.iter().map(|(_, p)| p[0]).collect::<Vec<_>>(), [2, 1]);
    }

    #[test]
    fn dup_corrupt_reorder_delay_do_what_they_say() {
        let pkt: Vec<u8> = (0..64u8).collect();
        // Duplicate everything.
        let mut imp = Impairer::new(Impairment {
            dup: 1.0,
            ..Default::default()
        });
        let mut out = Vec::new();
        imp.submit(0, addr(), &pkt, &mut out);
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|(_, p)| *p == pkt));
        // Corrupt everything: exactly one bit differs, never in byte 4.
        let mut imp = Impairer::new(Impairment {
            corrupt: 1.0,
            ..Default::default()
        });
        for _ in 0..200 {
            out.clear();
            imp.submit(0, addr(), &pkt, &mut out);
            let diff: u32 = out[0]
                .1
                .iter()
                .zip(&pkt)
                .map(|(a, b)| (a ^ b).count_ones())
                .sum();
            assert_eq!(diff, 1);
            assert_eq!(out[0].1[4], pkt[4]);
        }
        assert_eq!(imp.counters.corrupted, 200);
        // Reorder: the held packet leaves right after the next one.
        let mut imp = Impairer::new(Impairment {
            reorder: 1.0,
            ..Default::default()
        });
        out.clear();
        imp.submit(0, addr(), &[1], &mut out);
        assert!(out.is_empty());
        imp.submit(10, addr(), &[2], &mut out);
        assert_eq!(
            out.iter().map(|(_, p)| p[0]).collect::<Vec<_>>(),
            [2, 1],
            "overtaken"
        );
        // A held packet with no successor leaves after REORDER_MAX_HOLD_NS.
        out.clear();
        imp.submit(100, addr(), &[3], &mut out);
        imp.release(100 + REORDER_MAX_HOLD_NS - 1, &mut out);
        assert!(out.is_empty());
        imp.release(100 + REORDER_MAX_HOLD_NS, &mut out);
        assert_eq!(out.len(), 1);
        // Delay: held for exactly delay_ns.
        let mut imp = Impairer::new(Impairment {
            delay_ns: 5_000,
            ..Default::default()
        });
        out.clear();
        imp.submit(1_000, addr(), &[9], &mut out);
        imp.release(5_999, &mut out);
        assert!(out.is_empty());
        imp.release(6_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(imp.counters.delayed, 1);
    }
}
