//! Doorbell batching as an explicit policy: which WQEs are signaled, which payloads go
//! inline, when the doorbell rings, and whether a lone small WQE goes out by BlueFlame.
//!
//! Knobs ([`BatchPolicy`]):
//! - `max_batch` (N): ring the doorbell once N WQEs are pending (1 = ring on every post, as
//!   one `ibv_post_send` per WR does); [`Batcher::flush`] rings for fewer.
//! - `signal_every` (K): every K-th WQE is signaled (`CQ_UPDATE`), the others are not;
//!   a CQE for a signaled WQE retires every WQE before it (rdma-core / Linux semantics), so
//!   K must not exceed the ring's WQE capacity or the queue can fill with unretirable WQEs.
//! - `inline_threshold`: SEND / WRITE payloads of at most this many bytes whose bytes the
//!   caller supplies are copied into the WQE (verbs `IBV_SEND_INLINE`), saving the device a
//!   DMA read; 0 = never.
//! - `bf`: [`BfMode`] — BlueFlame for a single small WQE (the whole WQE is written through the
//!   write-combining register, so the device need not fetch it) or always the 8-byte doorbell.
//!
//! The policy is pure: for a given sequence of posts the writes ([`Effect`] lists) and WQE
//! bytes are fully determined, which the tests check.
//!
//! [`Effect`]: super::doorbell::Effect

use super::doorbell::{BfMode, Bfreg, EffectSink, Effects};
use super::sq::{OneSge, Posted, SqWriter, NO_SIGNAL};
use super::wqe::{Payload, SendFlags, SendWr, Sge, TransportSeg, WrOp};
use super::{Error, Result};

/// The batching knobs (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BatchPolicy {
    /// WQEs per doorbell (N ≥ 1).
    pub max_batch: u16,
    /// Signal one WQE in every K (K ≥ 1).
    pub signal_every: u16,
    /// Largest payload, in bytes, sent inline (0 = never).
    pub inline_threshold: u16,
    /// BlueFlame use for a batch of one WQE.
    pub bf: BfMode,
}

impl Default for BatchPolicy {
    /// rdma-core's behaviour for one `ibv_post_send` per signaled WR: N = 1, K = 1, no
    /// inline, BlueFlame preferred.
    fn default() -> Self {
        BatchPolicy {
            max_batch: 1,
            signal_every: 1,
            inline_threshold: 0,
            bf: BfMode::Prefer,
        }
    }
}

/// One post as the application sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Post<'a> {
    /// The operation.
    pub op: WrOp,
    /// The gather list.
    pub sges: &'a [Sge],
    /// The payload bytes (the contents of `sges`), when the caller can supply them; needed
    /// for inline sends.
    pub bytes: Option<&'a [u8]>,
    /// Solicited event.
    pub solicited: bool,
    /// Fence.
    pub fence: bool,
    /// Signal this WQE regardless of K (e.g. the last of a transfer).
    pub force_signal: bool,
    /// Datagram / Ethernet segment for UD / raw-packet QPs.
    pub transport: TransportSeg<'a>,
}

impl<'a> Post<'a> {
    /// A post of `op` over `sges` with no flags.
    pub const fn new(op: WrOp, sges: &'a [Sge]) -> Post<'a> {
        Post {
            op,
            sges,
            bytes: None,
            solicited: false,
            fence: false,
            force_signal: false,
            transport: TransportSeg::None,
        }
    }
}

/// Applies a [`BatchPolicy`] to an [`SqWriter`] and a [`Bfreg`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batcher {
    policy: BatchPolicy,
    bfreg: Bfreg,
    // u32 rather than u16: see the note on SqWriter's counters. The WQEs pending a doorbell
    // are counted by the SqWriter (`SqWriter::batch_len`), not twice.
    since_signal: u32,
}

impl Batcher {
    /// A batcher ringing through `bfreg`.
    ///
    /// # Errors
    /// [`Error::BadField`] when `max_batch` or `signal_every` is 0.
    pub fn new(policy: BatchPolicy, bfreg: Bfreg) -> Result<Batcher> {
        if policy.max_batch == 0 || policy.signal_every == 0 {
            return Err(Error::BadField);
        }
        Ok(Batcher {
            policy,
            bfreg,
            since_signal: 0,
        })
    }

    /// The policy.
    pub const fn policy(&self) -> BatchPolicy {
        self.policy
    }

    /// WQEs written to `sq` but not yet announced by a doorbell.
    pub fn pending(&self, sq: &SqWriter<'_>) -> u16 {
        sq.batch_len()
    }

    /// `true` when `p` would be sent inline under this policy.
    #[inline]
    pub fn goes_inline(&self, p: &Post<'_>) -> bool {
        let op_ok = matches!(
            p.op,
            WrOp::Send
                | WrOp::SendImm { .. }
                | WrOp::SendInval { .. }
                | WrOp::RdmaWrite { .. }
                | WrOp::RdmaWriteImm { .. }
        );
        matches!(p.bytes, Some(b) if !b.is_empty() && b.len() <= self.policy.inline_threshold as usize)
            && op_ok
    }

    /// Posts one WQE under the policy. When the batch reaches `max_batch`, the doorbell
    /// rings: `effects` receives the doorbell sequence to execute (it is cleared first, and
    /// left empty when no doorbell is due).
    ///
    /// # Errors
    /// Those of [`SqWriter::post`] (the batcher's state is unchanged on error; flush pending
    /// WQEs and retire completions after [`Error::RingFull`]).
    #[inline]
    pub fn post(
        &mut self,
        sq: &mut SqWriter<'_>,
        p: &Post<'_>,
        effects: &mut Effects,
    ) -> Result<Posted> {
        effects.clear();
        self.post_to(sq, p, effects)
    }

    /// [`post`](Self::post), handing the doorbell sequence (when one is due) to `sink` one
    /// effect at a time instead of building a list: the hot path of a backend that executes
    /// the effects as they come (see [`EffectSink`]).
    ///
    /// # Errors
    /// As [`post`](Self::post).
    #[inline(always)]
    pub fn post_to<S: EffectSink + ?Sized>(
        &mut self,
        sq: &mut SqWriter<'_>,
        p: &Post<'_>,
        sink: &mut S,
    ) -> Result<Posted> {
        let since = self.since_signal + 1;
        let signaled = p.force_signal || since >= self.policy.signal_every as u32;
        let payload = match p.bytes {
            Some(b) if self.goes_inline(p) => Payload::Inline(b),
            _ => Payload::Gather(p.sges),
        };
        let wr = SendWr {
            op: p.op,
            flags: SendFlags {
                signaled,
                solicited: p.solicited,
                fence: p.fence,
            },
            transport: p.transport,
            payload,
        };
        let posted = sq.post(&wr)?;
        self.since_signal = if signaled { 0 } else { since };
        if sq.batch_len() >= self.policy.max_batch {
            self.flush_to(sq, sink);
        }
        Ok(posted)
    }

    /// Posts `count` single-SGE work requests `make(k)` = (operation, gather entry), `k` = 0,
    /// 1, …, `count` − 1, under the policy — signaling every K-th, ringing through `sink`
    /// whenever `max_batch` are pending — with the same WQEs and doorbells as `count` calls
    /// of [`post_to`](Self::post_to) with [`Post::new`]; returns how many were posted.
    ///
    /// The WQEs between two doorbells go through [`SqWriter::post_many_signal`] (one bounds
    /// check and one counter update per run, the per-WQE work is the WQE's stores, the
    /// signaled WQE marked after the run). A whole batch — nothing pending, `count` = N,
    /// K ≥ N, room in the free window — takes one straight path: the run, then the 8-byte
    /// doorbell sequence ([`Bfreg::ring_send_doorbell_to`]; more than one WQE never goes out
    /// by BlueFlame). A batch of one is [`post_to`](Self::post_to).
    ///
    /// # Errors
    /// As [`SqWriter::post_many`], after ringing for what was posted up to `max_batch`.
    #[inline(always)]
    pub fn post_many<S, F>(
        &mut self,
        sq: &mut SqWriter<'_>,
        count: u16,
        mut make: F,
        sink: &mut S,
    ) -> (u16, Result<()>)
    where
        S: EffectSink + ?Sized,
        F: FnMut(u16) -> (WrOp, Sge),
    {
        if count == 1 {
            // A batch of one: exactly `post_to`.
            let (op, sge) = make(0);
            return match self.post_to(sq, &Post::new(op, &[sge]), sink) {
                Ok(_) => (1, Ok(())),
                Err(e) => (0, Err(e)),
            };
        }
        let k_every = self.policy.signal_every as u32;
        let one = |op: WrOp, sge: Sge, signaled: bool| OneSge {
            op,
            flags: SendFlags {
                signaled,
                ..SendFlags::default()
            },
            sge,
        };
        // After `m` more WQEs, the count of unsignaled ones since the last signal (m WQEs
        // hold at most one signal when m ≤ K: no division).
        let after = |since: u32, m: u16| {
            let s = since + u32::from(m);
            if s >= k_every {
                s - k_every
            } else {
                s
            }
        };
        let mut done = 0u16;
        let mut other = None;
        // The common case first: one whole batch (nothing pending, `count` = N) with at most
        // one signal in it (K ≥ N): one run of WQEs into the free window, the signal set
        // after it, one doorbell.
        if count == self.policy.max_batch && k_every >= u32::from(count) {
            let since = self.since_signal;
            // WQE `k` is signaled when (since + k + 1) is a multiple of K: at most the one WQE
            // `K - 1 - since`.
            let sig_k = k_every - 1 - since;
            let signal = if sig_k < u32::from(count) {
                sig_k as u16
            } else {
                NO_SIGNAL
            };
            let mut mk = |k| {
                let (op, sge) = make(k);
                one(op, sge, false)
            };
            match sq.post_whole_batch(count, signal, &mut mk) {
                Ok(b) => {
                    self.since_signal = after(since, count);
                    // More than one WQE (a batch of one went to `post_to`), none inline: never
                    // BlueFlame, the 8-byte doorbell.
                    self.bfreg
                        .ring_send_doorbell_to(b.first_index, b.end_index, b.last_ctrl, sink);
                    return (count, Ok(()));
                }
                Err(p) => {
                    // Pending WQEs, a full window or the ring end, or a request that is not
                    // a one-WQEBB WQE: the general way from WQE `k` on.
                    self.since_signal = after(since, p.k);
                    done = p.k;
                    other = p.other;
                    if done == count && sq.batch_len() >= self.policy.max_batch {
                        // All written (inline data made it leave the one-run path): ring.
                        self.flush_to(sq, sink);
                    }
                }
            }
        }
        while done < count {
            let room = self.policy.max_batch.saturating_sub(sq.batch_len()).max(1);
            let chunk = (count - done).min(room);
            let since = self.since_signal;
            // Up to the next signaled WQE at most (the last of the piece when it is reached).
            let to_sig = k_every - since;
            let piece = u32::from(chunk).min(to_sig) as u16;
            let signal = if u32::from(piece) == to_sig {
                piece - 1
            } else {
                NO_SIGNAL
            };
            let base = done;
            let (n, r) = sq.post_many_from(
                0,
                piece,
                signal,
                |k| {
                    let (op, sge) = make(base + k);
                    one(op, sge, false)
                },
                other.take(),
                |_| {},
            );
            self.since_signal = after(since, n);
            done += n;
            if sq.batch_len() >= self.policy.max_batch {
                self.flush_to(sq, sink);
            }
            if let Err(e) = r {
                return (done, Err(e));
            }
        }
        (done, Ok(()))
    }

    /// Rings the doorbell for the pending WQEs: `effects` receives the sequence (cleared
    /// first); returns `false`, with `effects` empty, when nothing was pending.
    #[inline]
    pub fn flush(&mut self, sq: &mut SqWriter<'_>, effects: &mut Effects) -> bool {
        effects.clear();
        self.flush_to(sq, effects)
    }

    /// [`flush`](Self::flush), handing the sequence to `sink` one effect at a time.
    #[inline(always)]
    pub fn flush_to<S: EffectSink + ?Sized>(
        &mut self,
        sq: &mut SqWriter<'_>,
        sink: &mut S,
    ) -> bool {
        match sq.take_batch() {
            Some(b) => {
                self.bfreg.ring_send_to(&b, self.policy.bf, sink);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mlx5::ctrl::CtrlSeg;
    use crate::mlx5::doorbell::{BfregConfig, Effect};
    use crate::mlx5::QpType;

    fn policy(n: u16, k: u16, inl: u16, bf: BfMode) -> BatchPolicy {
        BatchPolicy {
            max_batch: n,
            signal_every: k,
            inline_threshold: inl,
            bf,
        }
    }

    #[test]
    fn test_batch_of_four_signal_every_two() {
        let mut ring = [0u8; 16 * 64];
        let mut sq = SqWriter::new(&mut ring, 3, QpType::Rc).unwrap();
        let mut b = Batcher::new(
            policy(4, 2, 0, BfMode::Prefer),
            Bfreg::new(BfregConfig::blueflame(0x800, 256)),
        )
        .unwrap();
        let sge = [Sge {
            addr: 0x1000,
            lkey: 1,
            len: 64,
        }];
        let op = WrOp::RdmaWrite {
            raddr: 0x2000,
            rkey: 2,
        };
        let mut rings = 0;
        let mut e = Effects::new();
        for i in 0..8u16 {
            let p = b.post(&mut sq, &Post::new(op, &sge), &mut e).unwrap();
            assert_eq!(p.wqe_index, i);
            if !e.is_empty() {
                rings += 1;
                assert_eq!(i % 4, 3);
                // Four WQEs: never BlueFlame; the 8-byte doorbell carries WQE i's ctrl head.
                assert_eq!(
                    e[4],
                    Effect::Mmio64 {
                        offset: 0x800 + if rings == 1 { 0 } else { 256 },
                        value: [0, 0, i as u8, 0x08, 0, 0, 3, 3]
                    }
                );
            }
        }
        assert_eq!(rings, 2);
        let signaled: heapless::Vec<bool, 8> = (0..8)
            .map(|i| {
                CtrlSeg::new_unchecked(&sq.read_wqebb(i)[..])
                    .fm_ce_se()
                    .signaled()
            })
            .collect();
        assert_eq!(
            signaled,
            [false, true, false, true, false, true, false, true]
        );
        assert!(!b.flush(&mut sq, &mut e));
        assert!(e.is_empty());
    }

    #[test]
    fn test_post_many_matches_post_to() {
        // Through the ring end and the 16-bit counter wrap, with retirements in between: the
        // same ring bytes and the same doorbells as one post_to per WQE.
        for (n, k) in [(1u16, 1u16), (4, 2), (8, 8), (5, 3), (4, 6), (6, 4)] {
            let mut ring_a = [0u8; 16 * 64];
            let mut ring_b = [0u8; 16 * 64];
            let mut a = SqWriter::new(&mut ring_a, 9, QpType::Rc)
                .unwrap()
                .with_counter(0xfff9);
            let mut b = SqWriter::new(&mut ring_b, 9, QpType::Rc)
                .unwrap()
                .with_counter(0xfff9);
            let bf = Bfreg::new(BfregConfig::blueflame(0x800, 256));
            let mut ba = Batcher::new(policy(n, k, 0, BfMode::Off), bf).unwrap();
            let mut bb = Batcher::new(policy(n, k, 0, BfMode::Off), bf).unwrap();
            let wr = |i: u16| {
                (
                    WrOp::RdmaWrite {
                        raddr: 0x1000 * u64::from(i),
                        rkey: 5,
                    },
                    Sge {
                        addr: u64::from(i),
                        lkey: 6,
                        len: 64,
                    },
                )
            };
            let (mut ea, mut eb) = (
                heapless::Vec::<Effect, 64>::new(),
                heapless::Vec::<Effect, 64>::new(),
            );
            let mut i = 0u16;
            // Whole batches (count = N, the one-run path) between partial ones, and through
            // the ring end.
            let counts = [3u16, n, 11, 1, n, 7, n, 16, n, 2, n, n];
            for (round, &count) in counts.iter().enumerate() {
                if a.free() < count {
                    let last = a.pc().wrapping_sub(1);
                    a.retire(last).unwrap();
                    b.retire(last).unwrap();
                }
                let mut sink_a = |e: Effect| {
                    let _ = ea.push(e);
                };
                for j in 0..count {
                    let (op, sge) = wr(i + j);
                    ba.post_to(&mut a, &Post::new(op, &[sge]), &mut sink_a)
                        .unwrap();
                }
                let mut sink_b = |e: Effect| {
                    let _ = eb.push(e);
                };
                let base = i;
                let (done, r) = bb.post_many(&mut b, count, |j| wr(base + j), &mut sink_b);
                assert_eq!((done, r), (count, Ok(())));
                i += count;
                assert_eq!(a.pc(), b.pc());
                assert_eq!(a.ring_vec(), b.ring_vec(), "N={n} K={k} round {round}");
                assert_eq!(ea, eb, "N={n} K={k} round {round}");
                ea.clear();
                eb.clear();
            }
            // A full ring: both stop at the same WQE with the same error.
            let (op, sge) = wr(0);
            let free = a.free();
            let mut sink = |_e: Effect| {};
            let (done, r) = bb.post_many(&mut b, free + 1, |_| wr(0), &mut sink);
            assert_eq!(done, free);
            assert!(matches!(r, Err(Error::RingFull { .. })));
            for _ in 0..free {
                ba.post_to(&mut a, &Post::new(op, &[sge]), &mut sink)
                    .unwrap();
            }
            assert_eq!(a.ring_vec(), b.ring_vec());
        }
    }

    #[test]
    fn test_post_many_stops_at_invalid_request() {
        // A whole batch whose WQE 3 is not valid on the QP (LSO on RC): the run stops there,
        // the error comes back after the three posted WQEs, no doorbell; the next batch then
        // signals and rings exactly as after three post_to calls and a failed fourth.
        let mut ring_a = [0u8; 16 * 64];
        let mut ring_b = [0u8; 16 * 64];
        let mut a = SqWriter::new(&mut ring_a, 9, QpType::Rc).unwrap();
        let mut b = SqWriter::new(&mut ring_b, 9, QpType::Rc).unwrap();
        let bf = Bfreg::new(BfregConfig::blueflame(0x800, 256));
        let mut ba = Batcher::new(policy(8, 8, 0, BfMode::Off), bf).unwrap();
        let mut bb = Batcher::new(policy(8, 8, 0, BfMode::Off), bf).unwrap();
        let wr = |i: u16, bad: bool| {
            let op = if bad {
                WrOp::Lso
            } else {
                WrOp::RdmaWrite {
                    raddr: 0x1000 * u64::from(i),
                    rkey: 5,
                }
            };
            (
                op,
                Sge {
                    addr: u64::from(i),
                    lkey: 6,
                    len: 64,
                },
            )
        };
        let (mut ea, mut eb) = (
            heapless::Vec::<Effect, 64>::new(),
            heapless::Vec::<Effect, 64>::new(),
        );
        let mut sink_a = |e: Effect| {
            let _ = ea.push(e);
        };
        let mut sink_b = |e: Effect| {
            let _ = eb.push(e);
        };
        let mut want = Ok(());
        for j in 0..4 {
            let (op, sge) = wr(j, j == 3);
            if let Err(e) = ba.post_to(&mut a, &Post::new(op, &[sge]), &mut sink_a) {
                want = Err(e);
            }
        }
        let (done, r) = bb.post_many(&mut b, 8, |j| wr(j, j == 3), &mut sink_b);
        assert_eq!((done, r), (3, want));
        assert!(want.is_err());
        for j in 3..11 {
            let (op, sge) = wr(j, false);
            ba.post_to(&mut a, &Post::new(op, &[sge]), &mut sink_a)
                .unwrap();
        }
        assert_eq!(
            bb.post_many(&mut b, 8, |j| wr(3 + j, false), &mut sink_b),
            (8, Ok(()))
        );
        assert_eq!(a.pc(), b.pc());
        assert_eq!(a.ring_vec(), b.ring_vec());
        assert_eq!(ea, eb);
        assert!(!ea.is_empty());
    }

    #[test]
    fn test_inline_threshold_and_single_blueflame() {
        let mut ring = [0u8; 16 * 64];
        let mut sq = SqWriter::new(&mut ring, 3, QpType::Rc).unwrap();
        let mut b = Batcher::new(
            policy(1, 1, 32, BfMode::Inline),
            Bfreg::new(BfregConfig::blueflame(0x800, 256)),
        )
        .unwrap();
        let data = [7u8; 32];
        let sge = [Sge {
            addr: 0x1000,
            lkey: 1,
            len: 32,
        }];
        let mut p = Post::new(WrOp::Send, &sge);
        p.bytes = Some(&data);
        assert!(b.goes_inline(&p));
        let mut e = Effects::new();
        let posted = b.post(&mut sq, &p, &mut e).unwrap();
        assert_eq!(posted.ds, 4); // ctrl + inline(36 -> 48 B)
        assert_eq!(
            e[4],
            Effect::BlueFlame {
                offset: 0x800,
                wqe_index: 0,
                chunks: 1
            }
        );
        // 33 bytes: above the threshold, gather list, plain doorbell under BfMode::Inline.
        let data = [7u8; 33];
        p.bytes = Some(&data);
        assert!(!b.goes_inline(&p));
        let posted = b.post(&mut sq, &p, &mut e).unwrap();
        assert_eq!(posted.ds, 2);
        assert!(matches!(e[4], Effect::Mmio64 { offset: 0x900, .. }));
        // READ never goes inline.
        let mut r = Post::new(WrOp::RdmaRead { raddr: 0, rkey: 0 }, &sge);
        r.bytes = Some(&data[..4]);
        assert!(!b.goes_inline(&r));
        assert!(Batcher::new(policy(0, 1, 0, BfMode::Off), b.bfreg).is_err());
    }
}
