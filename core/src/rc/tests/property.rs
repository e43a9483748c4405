//! Property: whatever the link does within a fault budget (drops, duplicates, reordering,
//! early timer expiries) and whenever receive WQEs get posted, every message is delivered
//! exactly once, in order, with the right completions on both sides — in go-back-N and in
//! selective repeat (each generated case runs in both), with SEND/WRITE/READ and atomics, any
//! in-flight cap, and optionally ECN CE marks whose CNPs drive DCQCN pacing on both QPs.
//!
//! The model is an in-order queue per direction: the expected completions are the posted
//! messages in order; the expected memory is each message applied once (atomics: the target
//! updated once, the original value returned once).
//!
//! The budget (at most 6 faults) stays below `retry_cnt = 7`, so the transport must always
//! recover; each destination byte is checked to be written exactly once (counting memory).

use proptest::prelude::*;

use super::*;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Send,
    SendImm,
    Write,
    /// A plain WRITE into the responder's one shared region, at `Msg::at`: WRITEs overlap
    /// (perftest's and NCCL's buffer reuse), so the later one's bytes must win.
    WriteShared,
    WriteImm,
    Read,
    /// Compare-and-swap whose compare value matches the target (`true`) or not.
    CmpSwap(bool),
    FetchAdd,
}

impl Kind {
    fn is_atomic(self) -> bool {
        matches!(self, Kind::CmpSwap(_) | Kind::FetchAdd)
    }
}

#[derive(Debug, Clone)]
struct Msg {
    /// `true`: A is the requester.
    from_a: bool,
    kind: Kind,
    len: u32,
    /// Extra receive-buffer bytes for SENDs.
    slack: u32,
    /// `Kind::WriteShared`: offset in the shared region.
    at: u32,
    signaled: bool,
}

#[derive(Debug, Clone, Copy)]
enum Action {
    /// Poll one packet from A (`true`) or B.
    Tx(bool),
    /// Deliver packet `idx` (mod queue length) of the A→B (`true`) or B→A queue.
    /// `fate`: 0..=2 drop, 3..=5 duplicate, 6..=11 deliver CE-marked (when ECN is on), else
    /// deliver.
    Deliver { a_to_b: bool, idx: usize, fate: u8 },
    /// Jump to the next deadline and run the timers.
    Timer,
    /// Post the next message.
    Post,
    /// Post the next receive WQE on A (`true`) or B.
    PostRecv(bool),
}

fn msg() -> impl Strategy<Value = Msg> {
    msg_of(prop_oneof![
        Just(Kind::Send),
        Just(Kind::SendImm),
        Just(Kind::Write),
        Just(Kind::WriteShared),
        Just(Kind::WriteShared),
        Just(Kind::WriteImm),
        Just(Kind::Read),
        Just(Kind::CmpSwap(true)),
        Just(Kind::CmpSwap(false)),
        Just(Kind::FetchAdd)
    ])
}

/// Mostly multi-packet READs (with WRITEs into the shared target, an atomic and SENDs
/// between them): lost responses, lost re-READs and their answers, re-READ timers.
fn read_heavy_msg() -> impl Strategy<Value = Msg> {
    msg_of(prop_oneof![
        6 => Just(Kind::Read),
        1 => Just(Kind::WriteShared),
        1 => Just(Kind::FetchAdd),
        1 => Just(Kind::Send),
    ])
}

fn msg_of(kinds: impl Strategy<Value = Kind>) -> impl Strategy<Value = Msg> {
    (
        any::<bool>(),
        kinds,
        prop_oneof![3 => 0u32..8, 3 => 0u32..3000, 3 => 200u32..600, 1 => 16_000u32..40_000],
        0u32..40,
        proptest::bool::weighted(0.8),
        0u32..6000,
    )
        .prop_map(|(from_a, kind, len, slack, signaled, at)| Msg {
            from_a,
            kind,
            len: if kind.is_atomic() { 8 } else { len },
            slack,
            signaled,
            at,
        })
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => any::<bool>().prop_map(Action::Tx),
        8 => (any::<bool>(), prop_oneof![4 => Just(0usize), 1 => 0usize..4], 0u8..40)
            .prop_map(|(a_to_b, idx, fate)| Action::Deliver { a_to_b, idx, fate }),
        1 => Just(Action::Timer),
        2 => Just(Action::Post),
        2 => any::<bool>().prop_map(Action::PostRecv),
    ]
}

/// As [`action`], with faults aimed at the B→A direction more often (READ responses when A
/// reads) and timers fired more often (re-READ timers).
fn read_heavy_action() -> impl Strategy<Value = Action> {
    prop_oneof![
        6 => any::<bool>().prop_map(Action::Tx),
        8 => (proptest::bool::weighted(0.3), prop_oneof![4 => Just(0usize), 1 => 0usize..4], 0u8..24)
            .prop_map(|(a_to_b, idx, fate)| Action::Deliver { a_to_b, idx, fate }),
        2 => Just(Action::Timer),
        2 => Just(Action::Post),
        1 => any::<bool>().prop_map(Action::PostRecv),
    ]
}

const SRC_KEY: u32 = 0x100;
const DST_KEY: u32 = 0x200;
/// R_Key of each side's shared WRITE target (`Kind::WriteShared`).
const SHARED_KEY: u32 = 0x7000;
const SHARED_ADDR: u64 = 0x4000_0000;
/// Covers the largest message (40 000 bytes) at the largest offset.
const SHARED_LEN: usize = 48 * 1024;

fn addr(i: usize) -> u64 {
    (i as u64 + 1) << 20
}

/// The FETCH_ADD addend / CMP_SWAP swap value of message `i`.
fn operand(i: usize) -> u64 {
    0x0123_4567_89ab_cdefu64.rotate_left(i as u32 * 7) | 1
}

/// Options of one run.
#[derive(Debug, Clone, Copy)]
struct Opts {
    recovery: Recovery,
    max_inflight: u32,
    /// CE marks on some deliveries, CNPs forwarded, DCQCN pacing on both QPs.
    ecn: bool,
    /// Each transmit continues with a run of WRITE packets (`RcQp::poll_transmit_run`).
    runs: bool,
}

struct Sim {
    p: Pair,
    msgs: Vec<Msg>,
    posted: usize,
    /// Indices of the messages that consume a receive WQE at A (sent by B) and at B.
    recv_for: [Vec<usize>; 2],
    recv_posted: [usize; 2],
    faults_left: usize,
    opts: Opts,
}

impl Sim {
    fn new(msgs: Vec<Msg>, mtu: Mtu, psn_ab: u32, psn_ba: u32, opts: Opts) -> Sim {
        let mut p = Pair::new_in(opts.recovery, mtu, psn_ab & 0xff_ffff, psn_ba & 0xff_ffff);
        p.a.set_max_inflight(opts.max_inflight);
        p.b.set_max_inflight(opts.max_inflight);
        p.runs = opts.runs;
        if opts.ecn {
            let cfg = crate::cc::DcqcnConfig {
                line_rate_mbps: 40_000,
                min_rate_mbps: 5_000,
                ..crate::cc::DcqcnConfig::default()
            };
            let burst = p.a.max_packet_len() as u32;
            p.a.enable_dcqcn(p.now, cfg, burst);
            p.b.enable_dcqcn(p.now, cfg, burst);
        }
        let mut recv_for = [Vec::new(), Vec::new()];
        for mem in [&mut p.mem_a, &mut p.mem_b] {
            mem.add(SHARED_KEY, SHARED_ADDR, SHARED_LEN, Access::ALL, |_| 0xee);
        }
        for (i, m) in msgs.iter().enumerate() {
            if m.kind.is_atomic() {
                // Result buffer at the requester, target (and slack) at the responder.
                let (req, resp) = if m.from_a {
                    (&mut p.mem_a, &mut p.mem_b)
                } else {
                    (&mut p.mem_b, &mut p.mem_a)
                };
                req.add(SRC_KEY + i as u32, addr(i), 8, Access::ALL, |_| 0xee);
                let len = 8 + m.slack as usize;
                resp.add(
                    DST_KEY + i as u32,
                    addr(i),
                    len,
                    Access::ALL,
                    pattern(i as u8),
                );
                continue;
            }
            // Data flows from `src_mem` to `dst_mem`.
            let read = matches!(m.kind, Kind::Read);
            let src_is_a = m.from_a != read;
            let (src, dst) = if src_is_a {
                (&mut p.mem_a, &mut p.mem_b)
            } else {
                (&mut p.mem_b, &mut p.mem_a)
            };
            src.add(
                SRC_KEY + i as u32,
                addr(i),
                m.len as usize,
                Access::ALL,
                pattern(i as u8),
            );
            if matches!(m.kind, Kind::WriteShared) {
                continue;
            }
            let dst_len = (m.len + m.slack) as usize;
            dst.add(DST_KEY + i as u32, addr(i), dst_len, Access::ALL, |_| 0xee);
            if matches!(m.kind, Kind::Send | Kind::SendImm | Kind::WriteImm) {
                // Receiver is the responder: B when A sends.
                recv_for[usize::from(m.from_a)].push(i);
            }
        }
        Sim {
            p,
            msgs,
            posted: 0,
            recv_for,
            recv_posted: [0, 0],
            faults_left: 6,
            opts,
        }
    }

    /// The value the target of atomic message `i` holds before it executes: the pattern it
    /// was registered with (only message `i` touches it).
    fn atomic_initial(&self, i: usize) -> u64 {
        let b: Vec<u8> = (0..8).map(pattern(i as u8)).collect();
        u64::from_ne_bytes(b.try_into().unwrap())
    }

    fn post_next(&mut self) {
        let Some(m) = self.msgs.get(self.posted).cloned() else {
            return;
        };
        let i = self.posted;
        self.posted += 1;
        let initial = self.atomic_initial(i);
        let (op, local_key, remote_key) = match m.kind {
            Kind::Send => (SendOpcode::Send, SRC_KEY, 0),
            Kind::SendImm => (SendOpcode::SendWithImm, SRC_KEY, 0),
            Kind::Write | Kind::WriteShared => (SendOpcode::RdmaWrite, SRC_KEY, DST_KEY),
            Kind::WriteImm => (SendOpcode::RdmaWriteWithImm, SRC_KEY, DST_KEY),
            Kind::Read => (SendOpcode::RdmaRead, DST_KEY, SRC_KEY),
            Kind::CmpSwap(hit) => (
                SendOpcode::AtomicCmpAndSwp {
                    compare: if hit { initial } else { initial ^ 1 },
                    swap: operand(i),
                },
                SRC_KEY,
                DST_KEY,
            ),
            Kind::FetchAdd => (
                SendOpcode::AtomicFetchAndAdd { add: operand(i) },
                SRC_KEY,
                DST_KEY,
            ),
        };
        let i32 = i as u32;
        let mut w = send_wqe(
            i as u64,
            op,
            &[sge(addr(i), m.len, local_key + i32)],
            addr(i),
            remote_key + i32,
        );
        if matches!(m.kind, Kind::WriteShared) {
            w.remote_addr = SHARED_ADDR + m.at as u64;
            w.rkey = SHARED_KEY;
        }
        w.imm = 0x1000_0000 | i32;
        w.signaled = m.signaled;
        let qp = if m.from_a {
            &mut self.p.a
        } else {
            &mut self.p.b
        };
        qp.post_send(w).expect("send queue has room");
    }

    /// Posts the next receive WQE on side A (`true`) or B.
    fn post_recv(&mut self, on_a: bool) {
        let side = usize::from(!on_a);
        let Some(&i) = self.recv_for[side].get(self.recv_posted[side]) else {
            return;
        };
        self.recv_posted[side] += 1;
        let m = &self.msgs[i];
        let sges: Vec<Sge> = if matches!(m.kind, Kind::WriteImm) {
            Vec::new()
        } else {
            vec![sge(addr(i), m.len + m.slack, DST_KEY + i as u32)]
        };
        let qp = if on_a { &mut self.p.a } else { &mut self.p.b };
        qp.post_recv(recv_wqe(1000 + i as u64, &sges))
            .expect("receive queue has room");
    }

    fn quiescent(&self) -> bool {
        self.p.a_to_b.is_empty() && self.p.b_to_a.is_empty()
    }

    fn step(&mut self, a: Action) {
        match a {
            Action::Tx(on_a) => {
                self.p.transmit(if on_a { Dir::AtoB } else { Dir::BtoA });
            }
            Action::Deliver { a_to_b, idx, fate } => {
                let (dir, q) = if a_to_b {
                    (Dir::AtoB, &mut self.p.a_to_b)
                } else {
                    (Dir::BtoA, &mut self.p.b_to_a)
                };
                if q.is_empty() {
                    return;
                }
                let mut idx = idx % q.len();
                // 0..=2 drop, 3..=5 duplicate, otherwise deliver: only while budget lasts.
                let mut fate = fate;
                if (idx != 0 || fate < 6) && self.faults_left == 0 {
                    idx = 0;
                    fate = 12;
                }
                if idx != 0 || fate < 6 {
                    self.faults_left -= 1;
                }
                let pkt = if (3..6).contains(&fate) {
                    q[idx].clone()
                } else {
                    q.remove(idx).expect("index in range")
                };
                if fate >= 3 {
                    // CE marks are not faults: congestion only slows the sender down.
                    self.p.ecn = if self.opts.ecn && (6..12).contains(&fate) {
                        0b11
                    } else {
                        0b10
                    };
                    self.p.deliver(dir, &pkt);
                    self.p.ecn = 0;
                    // CNPs travel at once (they are not reliable; losing them is not tested).
                    self.p.forward_cnp(Dir::AtoB);
                    self.p.forward_cnp(Dir::BtoA);
                }
            }
            Action::Timer => {
                // A timer is early (a fault) unless the links are empty and neither side has
                // anything ready to send: a packet it has ready goes on the link first.
                self.p.transmit(Dir::AtoB);
                self.p.transmit(Dir::BtoA);
                let early = !self.quiescent();
                if early && self.faults_left == 0 {
                    return;
                }
                if self.p.fire_timer() && early {
                    self.faults_left -= 1;
                }
            }
            Action::Post => self.post_next(),
            Action::PostRecv(on_a) => self.post_recv(on_a),
        }
    }

    fn finish(&mut self) {
        self.p.ecn = 0;
        while self.posted < self.msgs.len() {
            self.post_next();
        }
        for on_a in [true, false] {
            let side = usize::from(!on_a);
            while self.recv_posted[side] < self.recv_for[side].len() {
                self.post_recv(on_a);
            }
        }
        // Deliver what is still on the links in order, then run to quiescence.
        self.p.run_with(200_000, |_, _, _| Fate::Deliver);
    }

    fn check(&mut self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.p.a.state(), QpState::Rts);
        prop_assert_eq!(self.p.b.state(), QpState::Rts);
        prop_assert!(self.p.a.send_queue_len() == 0 && self.p.b.send_queue_len() == 0);
        if !self.opts.ecn {
            prop_assert_eq!(self.p.a.counters().cnps_sent, 0);
        }
        for on_a in [true, false] {
            // Send completions: signaled messages of this requester, in posting order.
            let want: Vec<WorkCompletion> = self
                .msgs
                .iter()
                .enumerate()
                .filter(|(_, m)| m.from_a == on_a && m.signaled)
                .map(|(i, m)| {
                    let op = match m.kind {
                        Kind::Send | Kind::SendImm => WcOpcode::Send,
                        Kind::Write | Kind::WriteShared | Kind::WriteImm => WcOpcode::RdmaWrite,
                        Kind::Read => WcOpcode::RdmaRead,
                        Kind::CmpSwap(_) => WcOpcode::CompSwap,
                        Kind::FetchAdd => WcOpcode::FetchAdd,
                    };
                    ok_wc(i as u64, op, m.len, if on_a { QPN_A } else { QPN_B })
                })
                .collect();
            let got = self
                .p
                .send_completions(if on_a { Dir::AtoB } else { Dir::BtoA });
            prop_assert_eq!(got, want);
            // Receive completions at this side: messages from the other side, in order.
            let want: Vec<WorkCompletion> = self.recv_for[usize::from(!on_a)]
                .iter()
                .map(|&i| {
                    let m = &self.msgs[i];
                    WorkCompletion {
                        wr_id: 1000 + i as u64,
                        status: WcStatus::Success,
                        opcode: if matches!(m.kind, Kind::WriteImm) {
                            WcOpcode::RecvRdmaWithImm
                        } else {
                            WcOpcode::Recv
                        },
                        byte_len: m.len,
                        imm_data: match m.kind {
                            Kind::Send => None,
                            _ => Some(0x1000_0000 | i as u32),
                        },
                        qp_num: if on_a { QPN_A } else { QPN_B },
                    }
                })
                .collect();
            let got = self
                .p
                .recv_completions(if on_a { Dir::AtoB } else { Dir::BtoA });
            prop_assert_eq!(got, want);
        }
        // Shared targets: the WRITEs into each side's region applied in posting order (the
        // later one's bytes win where they overlap), whatever order the packets came in.
        for on_a in [true, false] {
            let mut want = vec![0xeeu8; SHARED_LEN];
            for (i, m) in self.msgs.iter().enumerate() {
                if matches!(m.kind, Kind::WriteShared) && m.from_a != on_a {
                    let at = m.at as usize;
                    for (k, b) in want[at..at + m.len as usize].iter_mut().enumerate() {
                        *b = pattern(i as u8)(k);
                    }
                }
            }
            let mem = if on_a { &self.p.mem_a } else { &self.p.mem_b };
            let got = mem.bytes(SHARED_KEY, SHARED_ADDR, SHARED_LEN);
            let bad = got.iter().zip(&want).position(|(g, w)| g != w);
            prop_assert!(
                bad.is_none(),
                "shared WRITE target at {}: first wrong byte {:?}",
                if on_a { "A" } else { "B" },
                bad
            );
        }
        // Data: every destination byte equals the source and was written exactly once; the
        // slack after it was never written; sources were never written.
        for (i, m) in self.msgs.iter().enumerate() {
            if matches!(m.kind, Kind::WriteShared) {
                continue;
            }
            if m.kind.is_atomic() {
                let initial = self.atomic_initial(i);
                let (req, resp) = if m.from_a {
                    (&self.p.mem_a, &self.p.mem_b)
                } else {
                    (&self.p.mem_b, &self.p.mem_a)
                };
                let (rk, tk) = (SRC_KEY + i as u32, DST_KEY + i as u32);
                // The original value came back once.
                prop_assert_eq!(req.u64_at(rk, addr(i)), initial, "atomic {} result", i);
                prop_assert!(req.region(rk).writes.iter().all(|&c| c == 1));
                // The target changed once (or, for a missed compare, not at all).
                let (want, writes) = match m.kind {
                    Kind::FetchAdd => (initial.wrapping_add(operand(i)), 1),
                    Kind::CmpSwap(true) => (operand(i), 1),
                    _ => (initial, 0),
                };
                prop_assert_eq!(resp.u64_at(tk, addr(i)), want, "atomic {} target", i);
                let w = &resp.region(tk).writes;
                prop_assert!(
                    w[..8].iter().all(|&c| c == writes),
                    "atomic {} executed once",
                    i
                );
                prop_assert!(w[8..].iter().all(|&c| c == 0));
                continue;
            }
            let read = matches!(m.kind, Kind::Read);
            let src_is_a = m.from_a != read;
            let (src, dst) = if src_is_a {
                (&self.p.mem_a, &self.p.mem_b)
            } else {
                (&self.p.mem_b, &self.p.mem_a)
            };
            let (sk, dk, n) = (SRC_KEY + i as u32, DST_KEY + i as u32, m.len as usize);
            prop_assert_eq!(
                dst.bytes(dk, addr(i), n),
                src.bytes(sk, addr(i), n),
                "message {}",
                i
            );
            prop_assert!(
                dst.region(dk).writes[..n].iter().all(|&c| c == 1),
                "message {} written once",
                i
            );
            prop_assert!(dst.region(dk).writes[n..].iter().all(|&c| c == 0));
            prop_assert!(src.region(sk).writes.iter().all(|&c| c == 0));
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn faults_never_lose_or_repeat_messages(
        msgs in proptest::collection::vec(msg(), 1..20),
        actions in proptest::collection::vec(action(), 0..600),
        mtu in proptest::sample::select(Mtu::ALL.to_vec()),
        psn_ab in any::<u32>(),
        psn_ba in prop_oneof![any::<u32>(), Just(0xff_fff0u32)],
        max_inflight in prop_oneof![3 => Just(MAX_UNACKED_PSNS), 1 => 1u32..=130],
        ecn in proptest::bool::weighted(0.3),
        runs in any::<bool>(),
    ) {
        both_modes(&msgs, &actions, mtu, psn_ab, psn_ba, max_inflight, ecn, runs)?;
    }

    #[test]
    fn read_faults_never_lose_or_repeat_messages(
        msgs in proptest::collection::vec(read_heavy_msg(), 1..12),
        actions in proptest::collection::vec(read_heavy_action(), 0..600),
        mtu in proptest::sample::select(vec![Mtu::Mtu256, Mtu::Mtu512, Mtu::Mtu1024]),
        psn_ab in any::<u32>(),
        psn_ba in prop_oneof![any::<u32>(), Just(0xff_fff0u32)],
        max_inflight in prop_oneof![3 => Just(MAX_UNACKED_PSNS), 1 => 1u32..=130],
        runs in any::<bool>(),
    ) {
        both_modes(&msgs, &actions, mtu, psn_ab, psn_ba, max_inflight, false, runs)?;
    }
}

/// Runs the same messages and link behaviour once per recovery mode.
#[allow(clippy::too_many_arguments)]
fn both_modes(
    msgs: &[Msg],
    actions: &[Action],
    mtu: Mtu,
    psn_ab: u32,
    psn_ba: u32,
    max_inflight: u32,
    ecn: bool,
    runs: bool,
) -> Result<(), TestCaseError> {
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let opts = Opts {
            recovery,
            max_inflight,
            ecn,
            runs,
        };
        let mut sim = Sim::new(msgs.to_vec(), mtu, psn_ab, psn_ba, opts);
        for a in actions.iter().copied() {
            sim.step(a);
        }
        sim.finish();
        sim.check().map_err(|e| {
            TestCaseError::fail(std::format!(
                "{recovery:?}, in-flight cap {max_inflight}, ECN {ecn}, runs {runs}: {e}"
            ))
        })?;
    }
    Ok(())
}

/// A case the property found in CI (three compare-and-swaps and an empty READ, with the
/// timer firing while the first atomic's request and its duplicates are in flight): the link
/// must settle in both modes.
#[test]
fn atomics_then_an_empty_read_settle_after_timeouts() {
    use Action::*;
    let m = |kind, len| Msg {
        from_a: true,
        kind,
        len,
        slack: 0,
        at: 0,
        signaled: false,
    };
    let d = |a_to_b, idx, fate| Deliver { a_to_b, idx, fate };
    let msgs = [
        m(Kind::CmpSwap(true), 8),
        m(Kind::CmpSwap(true), 8),
        m(Kind::CmpSwap(true), 8),
        m(Kind::Read, 0),
    ];
    let actions = [
        Post,
        Tx(true),
        Post,
        Timer,
        Post,
        Tx(true),
        d(true, 0, 6),
        Timer,
        d(false, 0, 6),
        d(true, 0, 6),
        Tx(false),
        d(true, 0, 6),
        d(true, 0, 6),
        d(false, 0, 6),
        Tx(true),
        Post,
        Timer,
        Tx(false),
        d(true, 0, 6),
        d(true, 0, 6),
        Tx(true),
        d(true, 0, 0),
        Tx(false),
        d(false, 2, 0),
    ];
    for runs in [false, true] {
        both_modes(&msgs, &actions, Mtu::Mtu256, 0, 0, 128, false, runs).unwrap();
    }
}
