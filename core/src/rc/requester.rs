//! The RC requester: the send queue, and turning send WQEs into request packets.
//!
//! - Segmentation by path MTU; opcodes FIRST/MIDDLE/LAST/ONLY (+ "with immediate"), RETH on the
//!   FIRST/ONLY packet of a WRITE, ImmDt on LAST/ONLY (IBTA vol. 1 §9.4, Table 38).
//! - PSNs: one per packet; an RDMA READ request reserves `max(1, ceil(len / PMTU))` PSNs, one per
//!   response packet (IBTA vol. 1 §9.4.3; rxe_req.c `update_wqe_psn`).
//! - AckReq on the last packet of every message and on at least every 64th packet
//!   (rxe_req.c, `RXE_MAX_PKT_PER_ACK`).
//! - Window: no new packet while [`MAX_UNACKED_PSNS`] PSNs (or the smaller in-flight cap) are
//!   unacknowledged (rxe_req.c, `RXE_MAX_UNACKED_PSNS`) — in selective repeat, undelivered
//!   (see `window_allows`); no new READ/atomic while `max_rd_atomic` of them are outstanding
//!   (rxe_req.c `check_init_depth`).
//! - Atomics (COMPARE_SWAP, FETCH_ADD): one packet with an AtomicETH and AckReq, one PSN; they
//!   count with READs against the initiator depth (IBTA vol. 1 §9.4.5; rxe_req.c).
//! - Retries rewind to the oldest unacknowledged PSN (go-back-N): a partly acknowledged
//!   SEND/WRITE resumes at that packet; a partly answered READ is re-issued for its tail, with the
//!   VA advanced by the bytes already received and the PSN of the first missing response
//!   (rxe_req.c `req_retry`).
//! - Selective repeat (`recovery.rs`): WRITEs (with immediate too) that write nothing an
//!   outstanding READ/atomic reads or updates go out as self-placing RDMA_WRITE_ONLY packets, SEND packets carry a placement header, and
//!   retries resend individual PSNs (a READ: the run of responses it misses) from a bitmap
//!   instead of rewinding; the retransmit timer follows the measured round-trip time (RTO_low
//!   with few packets in flight).
//!
//! The completer half (ACK/NAK/READ response processing, timers) is in `completer.rs`.

use heapless::Deque;

use super::completion::{WcOpcode, WcStatus, WorkCompletion};
use super::config::RtsConfig;
use super::counters::RcCounters;
use super::memory::{gather, MemoryAccess};
use super::mtu::Mtu;
use super::packet::{deque_get, deque_get_mut, emit_packet, Path};
use super::psn_bits::{Mask, PsnBits};
use super::recovery::{
    Recovery, REORDER_WINDOW_MIN_NS, RTO_HIGH_MIN_NS, RTO_LOW_MIN_NS, RTO_LOW_PACKETS,
    RTO_REREAD_MIN_NS, SR_WINDOW,
};
use super::timer::{ack_timeout_ns, Instant, Timer};
use super::wqe::{PostError, SendOpcode, SendWqe, MAX_MESSAGE_LEN};
use super::Fatal;
use crate::wire::aeth::MAX_MSN;
use crate::wire::{placement, AtomicEthRepr, Opcode, PlacementRepr, Psn, RethRepr, TransportRepr};

/// The requester stops sending new packets while this many PSNs are unacknowledged
/// (rxe `RXE_MAX_UNACKED_PSNS`).
pub const MAX_UNACKED_PSNS: u32 = 128;

/// The requester sets AckReq on at least every this-many-th packet (rxe `RXE_MAX_PKT_PER_ACK`).
pub const MAX_PKTS_PER_ACK: u32 = 64;

/// Largest number of PSNs one READ may reserve (half the 2^23 comparison window).
const MAX_READ_PSNS: u32 = 1 << 22;

/// A posted send WQE with its transport state.
#[derive(Debug, Clone)]
pub(crate) struct SqEntry {
    pub(crate) wqe: SendWqe,
    /// Message length in bytes (≤ 2^31).
    pub(crate) len: u32,
    /// PSNs the message occupies: packets for SEND/WRITE, reserved response PSNs for READ.
    pub(crate) npkts: u32,
    /// PSN of the first packet (assigned in posting order, modulo 2^24).
    pub(crate) first_psn: Psn,
    /// READ only: response packets received in order so far.
    pub(crate) read_done: u32,
    /// Selective repeat: a WRITE sent as self-placing RDMA_WRITE_ONLY packets (with
    /// immediate: the last one an RDMA_WRITE_ONLY_WITH_IMMEDIATE naming the whole message).
    pub(crate) split: bool,
    /// SEND and WRITE with immediate: receive WQEs consumed at the peer by the messages
    /// before this one (the placement header's receive sequence number).
    pub(crate) recv_seq: u32,
    /// Selective repeat, atomics: the ATOMIC ACKNOWLEDGE arrived (original value already in
    /// the local buffer) while an earlier READ/atomic was incomplete.
    pub(crate) atomic_done: bool,
    /// Send sequence number: the responder's MSN once it has completed this message's first
    /// wire message, modulo 2^24 (IBTA vol. 1 §9.7.7.2). A split WRITE is one wire message
    /// per packet, and the responder counts each ([`SqEntry::wire_messages`]).
    pub(crate) ssn: u32,
}

impl SqEntry {
    /// One past the last PSN of the message.
    pub(crate) fn end_psn(&self) -> Psn {
        self.first_psn.add(self.npkts)
    }

    /// Last PSN of the message.
    pub(crate) fn last_psn(&self) -> Psn {
        self.first_psn.add(self.npkts - 1)
    }

    pub(crate) fn is_read(&self) -> bool {
        self.wqe.opcode == SendOpcode::RdmaRead
    }

    /// Messages the responder counts in its MSN for this WQE: one, or one per packet of a
    /// split WRITE (each an RDMA_WRITE_ONLY).
    pub(crate) fn wire_messages(&self) -> u32 {
        if self.split {
            self.npkts
        } else {
            1
        }
    }

    /// SEND or WRITE with immediate: consumes a receive WQE at the responder.
    pub(crate) fn consumes_recv(&self) -> bool {
        matches!(
            self.wqe.opcode,
            SendOpcode::Send | SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm
        )
    }

    pub(crate) fn is_atomic(&self) -> bool {
        self.wqe.opcode.is_atomic()
    }

    /// READ or atomic: completes only through its response(s), needs a responder resource.
    pub(crate) fn is_rd_atomic(&self) -> bool {
        self.wqe.opcode.is_rd_atomic()
    }

    /// The PSN of the request packet that (re)starts this WQE's unanswered part: for a READ the
    /// first response not yet received, otherwise the first PSN.
    pub(crate) fn request_psn(&self) -> Psn {
        self.first_psn.add(self.read_done)
    }

    /// `true` when `psn` lies in `[first_psn, end_psn)`.
    pub(crate) fn contains(&self, psn: Psn) -> bool {
        psn.distance_from(self.first_psn) < self.npkts
    }

    pub(crate) fn wc_opcode(&self) -> WcOpcode {
        wc_opcode(self.wqe.opcode)
    }
}

/// The completion opcode of a send WQE's operation.
pub(crate) fn wc_opcode(op: SendOpcode) -> WcOpcode {
    match op {
        SendOpcode::Send | SendOpcode::SendWithImm => WcOpcode::Send,
        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
        SendOpcode::RdmaRead => WcOpcode::RdmaRead,
        SendOpcode::AtomicCmpAndSwp { .. } => WcOpcode::CompSwap,
        SendOpcode::AtomicFetchAndAdd { .. } => WcOpcode::FetchAdd,
    }
}

/// Send queue, requester cursor and completer state of one QP.
#[derive(Debug)]
pub(crate) struct Requester<const SQ: usize> {
    /// Posted, not yet completed WQEs in posting (= PSN) order.
    pub(crate) sq: Deque<SqEntry, SQ>,
    /// READs and atomics in `sq` (a post scans `sq` for them only when there are some).
    pub(crate) rd_atomics: u32,
    /// Completions not yet polled. `sq.len() + cq.len() <= SQ` always holds, so pushes never fail.
    pub(crate) cq: Deque<WorkCompletion, SQ>,
    /// RTS attributes.
    pub(crate) rts: RtsConfig,
    pub(crate) local_qpn: u32,
    pub(crate) mtu: Mtu,
    /// PSN the next posted WQE gets.
    pub(crate) tail_psn: Psn,
    /// Cursor: index in `sq` of the WQE being sent (== `sq.len()` when all are sent).
    pub(crate) cur_idx: usize,
    /// Cursor: packet (PSN offset) inside that WQE.
    pub(crate) cur_pkt: u32,
    /// PSN of the next packet to send (`req.psn` in rxe).
    pub(crate) psn: Psn,
    /// One past the highest PSN ever sent.
    pub(crate) psn_hi: Psn,
    /// Packets sent since the last one with AckReq.
    pub(crate) noack_pkts: u32,
    /// Oldest unacknowledged PSN (`comp.psn` in rxe).
    pub(crate) comp_psn: Psn,
    /// One past the highest PSN an ACK or NAK acknowledged, possibly beyond `comp_psn` when an
    /// unanswered READ/atomic blocked it: once that completes, the WQEs up to here complete
    /// without waiting for another ACK.
    pub(crate) ack_hi: Psn,
    /// Transport retries left (reset to `retry_cnt` on progress).
    pub(crate) retry_left: u8,
    /// A go-back-N retry started and `comp_psn` has not moved since: NAKs and implied NAKs are
    /// then answers to packets sent before the rewind and start no further retry; only the
    /// timer does (rxe_comp.c `started_retry`).
    pub(crate) retry_started: bool,
    /// RNR retries left (reset to `rnr_retry` on progress; unused when `rnr_retry == 7`).
    pub(crate) rnr_left: u8,
    pub(crate) retrans_timer: Timer,
    /// Armed while waiting out an RNR NAK's delay; nothing is sent meanwhile.
    pub(crate) rnr_timer: Timer,
    /// Loss recovery mode (fixed before RTS).
    pub(crate) recovery: Recovery,
    /// Most PSNs outstanding before new packets stall (1..=128).
    pub(crate) max_inflight: u32,
    /// Selective repeat: PSNs to resend (a READ/atomic by its request PSN).
    pub(crate) resend: PsnBits,
    /// Selective repeat: PSNs resent since the last timeout (not resent again on a NAK).
    pub(crate) resent: PsnBits,
    /// Receive sequence number the next SEND / WRITE with immediate gets.
    pub(crate) recv_seq_next: u32,
    /// Send sequence number the next WQE gets (starts at 1: the MSN after the first message).
    pub(crate) ssn_next: u32,
    /// End-to-end credits (IBTA vol. 1 §9.7.7.2): the highest receive sequence number
    /// (`recv_seq`) that a new SEND / WRITE with immediate may start with — the receive WQEs
    /// the responder's last ACK advertised, plus the one message beyond them that IBTA lets
    /// a requester send to learn of new ones (an RNR NAK, if none was posted meanwhile).
    /// `None`: no limit (no ACK with a credit count yet, or the responder sends code 0x1F,
    /// "invalid", as rxe does).
    pub(crate) recv_limit: Option<u32>,
    /// The receive sequence number of the last message counted in `credit_waits`.
    pub(crate) credit_waited: Option<u32>,
    /// Selective repeat: PSNs the responder holds beyond its ePSN (from SACK blocks).
    pub(crate) sacked: PsnBits,
    /// Selective repeat: READ response PSNs received and placed.
    pub(crate) got: PsnBits,
    /// Selective repeat: PSNs marked for resending by a timeout (the others are fast
    /// retransmits).
    pub(crate) timer_marked: PsnBits,
    /// Selective repeat: for each resent PSN (by `psn % SR_WINDOW`), `psn_hi` when it was
    /// resent: it counts as lost again once the peer holds a PSN that far beyond.
    pub(crate) retx_mark: [Psn; SR_WINDOW as usize],
    /// Selective repeat: when each PSN (by `psn % SR_WINDOW`) was last sent.
    pub(crate) sent_at: [Instant; SR_WINDOW as usize],
    /// Selective repeat: for each resent PSN (by `psn % SR_WINDOW`), the sequence number of
    /// the resend that last carried it (a re-READ carries its whole run).
    pub(crate) retx_seq: [u32; SR_WINDOW as usize],
    /// Selective repeat: the sequence number the next resend gets.
    pub(crate) retx_seq_next: u32,
    /// Selective repeat: the latest re-READ answered so far — its sequence number and the
    /// highest PSN of its answer that arrived. The responder answers re-READs in the order
    /// they arrive, each in PSN order: a re-READ PSN still missing behind it was lost.
    pub(crate) reread_seen: Option<(u32, Psn)>,
    /// Selective repeat: smoothed time from a re-READ to its answer and its variation, ns
    /// (RFC 6298's estimator over re-READs only; `None` before the first answer).
    pub(crate) rr_srtt_ns: Option<u64>,
    pub(crate) rr_rttvar_ns: u64,
    /// Selective repeat: runs when a re-READ's answer is overdue ([`Self::reread_rto_ns`]
    /// after it was sent), so that a lost re-READ or answer is asked for again without the
    /// retransmit timeout — nothing else reveals it while the window is stuck behind it.
    pub(crate) reread_timer: Timer,
    /// Selective repeat: expiries of `reread_timer` since a re-READ was last answered (the
    /// overdue time doubles with each).
    pub(crate) reread_backoff: u32,
    /// Selective repeat: the lowest missing READ response that fewer than
    /// [`DUP_THRESH`](super::recovery::DUP_THRESH) later
    /// PSNs overtook, and when it was first seen so — it counts as lost once
    /// [`Self::reorder_window_ns`] passed since (RACK's reordering window, RFC 8985 §6.2).
    pub(crate) read_suspect: Option<(Psn, Instant)>,
    /// Selective repeat: runs when `read_suspect`'s reorder window ends.
    pub(crate) reorder_timer: Timer,
    /// Selective repeat: smoothed round-trip time and its variation, ns (RFC 6298); `None`
    /// before the first sample.
    pub(crate) srtt_ns: Option<u64>,
    pub(crate) rttvar_ns: u64,
    /// Selective repeat: retransmit timeouts since the last progress (the timeout doubles
    /// with each, up to the IBTA Local ACK Timeout).
    pub(crate) backoff: u32,
    /// The latest instant a response or timeout was handled at.
    pub(crate) now: Instant,
    /// Selective repeat: which PSNs of `[comp_psn, psn_hi)` belong to READs and to atomics
    /// (offsets from `comp_psn`), for the `comp_psn` and `psn_hi` they were computed at
    /// (`Requester::rd_atomic_masks`).
    pub(crate) rd_masks: Option<(Psn, Psn, Mask, Mask)>,
}

impl<const SQ: usize> Requester<SQ> {
    pub(crate) fn new(local_qpn: u32, mtu: Mtu) -> Self {
        let rts = RtsConfig {
            sq_psn: Psn::new(0),
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 1,
        };
        let mut r = Requester {
            sq: Deque::new(),
            rd_atomics: 0,
            cq: Deque::new(),
            rts,
            local_qpn,
            mtu,
            tail_psn: Psn::new(0),
            cur_idx: 0,
            cur_pkt: 0,
            psn: Psn::new(0),
            psn_hi: Psn::new(0),
            noack_pkts: 0,
            comp_psn: Psn::new(0),
            ack_hi: Psn::new(0),
            retry_left: 0,
            retry_started: false,
            rnr_left: 0,
            retrans_timer: Timer::default(),
            rnr_timer: Timer::default(),
            recovery: Recovery::GoBackN,
            max_inflight: MAX_UNACKED_PSNS,
            resend: PsnBits::default(),
            resent: PsnBits::default(),
            recv_seq_next: 0,
            ssn_next: 1,
            recv_limit: None,
            credit_waited: None,
            sacked: PsnBits::default(),
            got: PsnBits::default(),
            timer_marked: PsnBits::default(),
            retx_mark: [Psn::new(0); SR_WINDOW as usize],
            sent_at: [Instant(0); SR_WINDOW as usize],
            retx_seq: [0; SR_WINDOW as usize],
            retx_seq_next: 0,
            reread_seen: None,
            rr_srtt_ns: None,
            rr_rttvar_ns: 0,
            reread_timer: Timer::default(),
            reread_backoff: 0,
            read_suspect: None,
            reorder_timer: Timer::default(),
            srtt_ns: None,
            rttvar_ns: 0,
            backoff: 0,
            now: Instant(0),
            rd_masks: None,
        };
        r.configure(rts);
        r
    }

    /// `true` in selective-repeat mode.
    pub(crate) fn selective(&self) -> bool {
        self.recovery == Recovery::Selective
    }

    /// Sets the in-flight cap (clamped to 1..=128).
    pub(crate) fn set_max_inflight(&mut self, packets: u32) {
        self.max_inflight = packets.clamp(1, MAX_UNACKED_PSNS);
    }

    /// Applies the RTS attributes; the send queue is empty at this point.
    pub(crate) fn configure(&mut self, rts: RtsConfig) {
        self.rts = RtsConfig {
            timeout: rts.timeout & 0x1f,
            retry_cnt: rts.retry_cnt & 7,
            rnr_retry: rts.rnr_retry & 7,
            ..rts
        };
        self.tail_psn = rts.sq_psn;
        self.psn = rts.sq_psn;
        self.psn_hi = rts.sq_psn;
        self.comp_psn = rts.sq_psn;
        self.ack_hi = rts.sq_psn;
        self.cur_idx = self.sq.len();
        self.cur_pkt = 0;
        self.resend.advance(rts.sq_psn);
        self.resend.clear();
        self.resent.advance(rts.sq_psn);
        self.resent.clear();
        self.sacked.advance(rts.sq_psn);
        self.sacked.clear();
        self.got.advance(rts.sq_psn);
        self.got.clear();
        self.rd_masks = None;
        self.reset_retry_counters();
    }

    /// The retransmit timeout to arm now: the IBTA Local ACK Timeout in go-back-N or before
    /// any round-trip sample; in selective repeat SRTT + 4·RTTVAR (RFC 6298), at least
    /// [`RTO_HIGH_MIN_NS`] — or, with at most [`RTO_LOW_PACKETS`] PSNs undelivered (IRN's
    /// RTO_low), SRTT + RTTVAR, at least [`RTO_LOW_MIN_NS`] — doubled per timeout without
    /// progress, at most the Local ACK Timeout. `None` when the timer is off (`timeout` 0).
    pub(crate) fn rto_ns(&self) -> Option<u64> {
        let ibta = ack_timeout_ns(self.rts.timeout)?;
        let Some(srtt) = self.srtt_ns.filter(|_| self.selective()) else {
            return Some(ibta);
        };
        // RTO_low: the few packets still undelivered were resent or sent last, behind little
        // or nothing at the responder, so their answer is due within about one smoothed
        // round trip (inflated by the queue the full window built); the 4·RTTVAR margin of
        // RFC 6298, fed by host scheduling jitter, would stretch a tail loss to many RTTs.
        // A spurious RTO_low resends at most RTO_LOW_PACKETS packets.
        let (floor, margin) = if self.undelivered() <= RTO_LOW_PACKETS {
            (RTO_LOW_MIN_NS, self.rttvar_ns)
        } else {
            (RTO_HIGH_MIN_NS, 4 * self.rttvar_ns)
        };
        let rto = srtt.saturating_add(margin).max(floor);
        Some(rto.saturating_mul(1 << self.backoff.min(20)).min(ibta))
    }

    /// How long a re-READ's answer may take before the run is asked for again (selective
    /// repeat): the re-READ round trip (SRTT + 4·RTTVAR over re-READs; the responder answers
    /// them ahead of its queue, so this is far shorter than the READ round trip), at least
    /// [`RTO_REREAD_MIN_NS`], doubled per overdue expiry without an answer, at most the
    /// retransmit timeout. Before the first answer: RTO_low.
    pub(crate) fn reread_rto_ns(&self) -> Option<u64> {
        let rto = self.rto_ns()?;
        let Some(srtt) = self.rr_srtt_ns else {
            let low = self.srtt_ns.map_or(rto, |s| {
                s.saturating_add(self.rttvar_ns).max(RTO_LOW_MIN_NS)
            });
            return Some(low.min(rto));
        };
        let t = srtt
            .saturating_add(4 * self.rr_rttvar_ns)
            .max(RTO_REREAD_MIN_NS);
        Some(t.saturating_mul(1 << self.reread_backoff.min(20)).min(rto))
    }

    /// How long a missing READ response overtaken by fewer than
    /// [`DUP_THRESH`](super::recovery::DUP_THRESH) PSNs may stay
    /// missing before it counts as lost (selective repeat): a quarter of the smoothed round
    /// trip (RFC 8985 §6.2), at least [`REORDER_WINDOW_MIN_NS`], at most [`RTO_LOW_MIN_NS`]
    /// (also before the first sample).
    pub(crate) fn reorder_window_ns(&self) -> u64 {
        self.srtt_ns.map_or(RTO_LOW_MIN_NS, |s| {
            (s / 4).clamp(REORDER_WINDOW_MIN_NS, RTO_LOW_MIN_NS)
        })
    }

    /// Feeds one re-READ answer time (RFC 6298 §2, as [`Self::rtt_sample`]).
    pub(crate) fn reread_sample(&mut self, rtt_ns: u64) {
        match self.rr_srtt_ns {
            None => {
                self.rr_srtt_ns = Some(rtt_ns);
                self.rr_rttvar_ns = rtt_ns / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(rtt_ns);
                self.rr_rttvar_ns = (3 * self.rr_rttvar_ns + err) / 4;
                self.rr_srtt_ns = Some((7 * srtt + rtt_ns) / 8);
            }
        }
    }

    /// PSNs sent and not known to be delivered: outstanding, less those the responder holds
    /// (SACK) and READ responses already placed — the packets "in flight" of IRN's RTO_low
    /// rule.
    pub(crate) fn undelivered(&self) -> u32 {
        let known = self.sacked.union_len_from(&self.got, self.comp_psn);
        self.psn_hi
            .distance_from(self.comp_psn)
            .saturating_sub(known)
    }

    /// Feeds one round-trip sample (RFC 6298 §2: α = 1/8, β = 1/4).
    pub(crate) fn rtt_sample(&mut self, rtt_ns: u64) {
        match self.srtt_ns {
            None => {
                self.srtt_ns = Some(rtt_ns);
                self.rttvar_ns = rtt_ns / 2;
            }
            Some(srtt) => {
                let err = srtt.abs_diff(rtt_ns);
                self.rttvar_ns = (3 * self.rttvar_ns + err) / 4;
                self.srtt_ns = Some((7 * srtt + rtt_ns) / 8);
            }
        }
    }

    pub(crate) fn reset_retry_counters(&mut self) {
        self.retry_left = self.rts.retry_cnt;
        self.retry_started = false;
        self.rnr_left = self.rts.rnr_retry;
    }

    /// Room for one more WQE, counting completions not yet polled.
    pub(crate) fn has_room(&self) -> bool {
        self.sq.len() + self.cq.len() < SQ
    }

    /// Queues a WQE (the QP is in RTS).
    #[inline]
    pub(crate) fn post(&mut self, wqe: SendWqe) -> Result<(), PostError> {
        let len = wqe.length();
        if len > MAX_MESSAGE_LEN {
            return Err(PostError::MessageTooLong);
        }
        let len = len as u32;
        let atomic = wqe.opcode.is_atomic();
        if atomic && len != 8 {
            return Err(PostError::AtomicLength);
        }
        let npkts = if atomic { 1 } else { self.mtu.packets(len) };
        if wqe.opcode == SendOpcode::RdmaRead && npkts > MAX_READ_PSNS {
            return Err(PostError::MessageTooLong);
        }
        if !self.has_room() {
            return Err(PostError::QueueFull);
        }
        // Self-placing unless an earlier outstanding READ/atomic reads or updates its target
        // (a WRITE placed early would change what that READ reads, or race the atomic). A WRITE overlapping an earlier outstanding one is split
        // too: the responder never lets an earlier packet overwrite bytes a later held packet
        // placed (`Responder::write_ordered`), so the later WRITE's data wins as in order.
        // A WRITE with immediate too: its last packet carries the immediate data and the
        // whole message's RETH (see `build`).
        // Behind an outstanding READ/atomic only when it does not touch the bytes that one
        // reads or updates (compared by address, whatever the R_Keys: two regions may alias).
        let split = self.selective()
            && matches!(
                wqe.opcode,
                SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm
            )
            && (self.rd_atomics == 0
                || !self.sq.iter().any(|e| {
                    e.is_rd_atomic() && overlaps(e.wqe.remote_addr, e.len, wqe.remote_addr, len)
                }));
        let first_psn = self.tail_psn;
        let entry = SqEntry {
            wqe,
            len,
            npkts,
            first_psn,
            read_done: 0,
            split,
            recv_seq: self.recv_seq_next,
            atomic_done: false,
            ssn: self.ssn_next,
        };
        let (consumes_recv, messages) = (entry.consumes_recv(), entry.wire_messages());
        let rd_atomic = entry.is_rd_atomic();
        if self.sq.push_back(entry).is_err() {
            return Err(PostError::QueueFull);
        }
        self.rd_atomics += u32::from(rd_atomic);
        debug_assert_eq!(
            self.rd_atomics as usize,
            self.sq.iter().filter(|e| e.is_rd_atomic()).count()
        );
        if consumes_recv {
            self.recv_seq_next = self.recv_seq_next.wrapping_add(1);
        }
        self.ssn_next = (self.ssn_next + messages) & MAX_MSN;
        self.tail_psn = first_psn.add(npkts);
        Ok(())
    }

    /// READs and atomics queued before index `idx` (outstanding: sent or about to be).
    fn rd_atomic_before(&self, idx: usize) -> usize {
        if self.rd_atomics == 0 {
            return 0;
        }
        self.sq
            .iter()
            .take(idx)
            .filter(|e| e.is_rd_atomic())
            .count()
    }

    /// `true` when [`poll_transmit`](Self::poll_transmit) has a packet to send now (given a
    /// large enough buffer): a pending selective resend, or a new packet that the window, the
    /// in-flight cap and the initiator depth allow; never during an RNR wait.
    pub(crate) fn ready(&self) -> bool {
        if self.rnr_timer.is_armed() {
            return false;
        }
        if self.selective()
            && !self.resend.is_empty()
            && self.resend.first_from(self.comp_psn).is_some()
        {
            return true;
        }
        self.new_packet_allowed()
    }

    /// `true` when the next new packet (at the cursor) may go: the window and the in-flight cap
    /// have room and, for a READ/atomic, fewer than `max_rd_atomic` are outstanding before it
    /// (the responder keeps that many for replay, IBTA vol. 1 §9.4.5). Checked for every new
    /// packet, also when a pending selective resend turned out stale.
    fn new_packet_allowed(&self) -> bool {
        let Some(entry) = deque_get(&self.sq, self.cur_idx) else {
            return false;
        };
        if !self.window_allows(entry) {
            return false;
        }
        if self.cur_pkt == 0 && !self.credit_allows(entry) {
            return false;
        }
        if entry.is_rd_atomic() {
            let max_rd = self.rts.max_rd_atomic.max(1) as usize;
            if self.rd_atomic_before(self.cur_idx) >= max_rd {
                return false;
            }
        }
        true
    }

    /// Counts, once per message, a new SEND / WRITE with immediate at the cursor that the
    /// credits hold back while the window would let it go.
    fn count_credit_wait(&mut self, ctr: &mut RcCounters) {
        let Some(e) = deque_get(&self.sq, self.cur_idx) else {
            return;
        };
        if self.cur_pkt == 0
            && !self.credit_allows(e)
            && self.window_allows(e)
            && self.credit_waited != Some(e.recv_seq)
        {
            self.credit_waited = Some(e.recv_seq);
            ctr.credit_waits += 1;
        }
    }

    /// `true` when the end-to-end credits let `entry` start (IBTA vol. 1 §9.7.7.2): it needs
    /// no receive WQE, or its receive sequence number is at most [`Requester::recv_limit`].
    fn credit_allows(&self, entry: &SqEntry) -> bool {
        match self.recv_limit {
            Some(limit) if entry.consumes_recv() => {
                (entry.recv_seq.wrapping_sub(limit) as i32) <= 0
            }
            _ => true,
        }
    }

    /// `true` when the next new packet (of `entry`, at the cursor) fits the window. Go-back-N:
    /// fewer than `max_inflight` PSNs outstanding. Selective repeat: fewer than `max_inflight`
    /// undelivered (what the responder holds, or READ responses placed, no longer count: new
    /// packets take their place while a hole is repaired) and fewer than [`SR_WINDOW`]
    /// outstanding (the scoreboards' and the responder's reach); a READ's whole reservation
    /// must fit both, unless nothing is outstanding.
    pub(super) fn window_allows(&self, entry: &SqEntry) -> bool {
        let out = self.psn.distance_from(self.comp_psn);
        if !self.selective() {
            return out < self.max_inflight;
        }
        let n = if entry.is_read() && out > 0 {
            entry.npkts - self.cur_pkt
        } else {
            1
        };
        if out + n <= self.max_inflight {
            // Fewer outstanding than the cap: fewer undelivered too (every loss-free packet).
            return true;
        }
        // `n` is 1 but for a READ's whole reservation.
        let pipe = self.undelivered();
        out + n <= SR_WINDOW && pipe + n <= self.max_inflight
    }

    /// The next selective resend: (WQE index, packet index), dropping stale bits.
    fn next_resend(&mut self) -> Option<(usize, u32)> {
        while let Some(p) = self.resend.first_from(self.comp_psn) {
            let found = self.sq.iter().position(|e| e.contains(p));
            match found {
                Some(i) if p.before(self.psn_hi) => {
                    let e = deque_get(&self.sq, i)?;
                    let k = p.distance_from(e.first_psn);
                    // A READ resends from a missing response, an atomic at its PSN; nothing
                    // the peer already holds.
                    let stale = if e.is_read() {
                        k < e.read_done || self.got.contains(p)
                    } else {
                        (e.is_atomic() && k != 0) || self.sacked.contains(p)
                    };
                    if stale {
                        self.resend.remove(p);
                        continue;
                    }
                    return Some((i, k));
                }
                _ => self.resend.remove(p),
            }
        }
        None
    }

    /// Produces the next request packet (new or retransmitted), or `None` when nothing may be
    /// sent now: queue drained, window full, READ/atomic depth reached, RNR wait, or `buf` too
    /// small.
    ///
    /// # Errors
    /// [`Fatal`] after completing the WQE with `LocProtErr` (and flushing the rest) when its
    /// local buffers cannot be read.
    pub(crate) fn poll_transmit<M: MemoryAccess + ?Sized>(
        &mut self,
        now: super::Instant,
        path: &Path,
        mem: &mut M,
        buf: &mut [u8],
        ctr: &mut RcCounters,
    ) -> Result<Option<usize>, Fatal> {
        // `ready`, evaluated once: a pending resend first (dropping stale bits), else a new
        // packet that the window and the READ/atomic depth allow.
        if self.rnr_timer.is_armed() {
            return Ok(None);
        }
        let resend = if self.selective() && !self.resend.is_empty() {
            self.next_resend()
        } else {
            None
        };
        let (idx, k) = match resend {
            Some(at) => at,
            None => {
                if !self.new_packet_allowed() {
                    self.count_credit_wait(ctr);
                    return Ok(None);
                }
                (self.cur_idx, self.cur_pkt)
            }
        };
        let Some(entry) = deque_get(&self.sq, idx) else {
            return Ok(None);
        };
        let psn = entry.first_psn.add(k);
        debug_assert!(resend.is_some() || psn == self.psn);
        // A READ resend asks for the run of responses missing from `k` on.
        let run = match resend {
            Some(_) if entry.is_read() => {
                let mut n = 1;
                while k + n < entry.npkts && !self.got.contains(psn.add(n)) {
                    n += 1;
                }
                Some(n)
            }
            _ => None,
        };
        let (mut hdr, payload_off, payload_len, consumed, ack_req) =
            self.build(entry, k, psn, path, resend.is_some(), run);
        // Selective repeat: SEND packets start with the placement header.
        let prefix = (self.selective() && hdr.bth.opcode.is_send()).then_some(PlacementRepr {
            recv_seq: entry.recv_seq,
            offset: payload_off as u32,
        });
        let pre = prefix.map_or(0, |p| p.buffer_len());
        let sges = &entry.wqe.sg_list;
        let emitted = emit_packet(&mut hdr, pre + payload_len, buf, |out| {
            if let Some(p) = prefix {
                p.emit(&mut placement::Packet::new_unchecked(&mut out[..pre]));
            }
            gather(mem, sges, payload_off, &mut out[pre..])
        });
        let n = match emitted {
            Ok(Some(n)) => n,
            Ok(None) => return Ok(None),
            Err(_) => {
                self.complete_in_error(idx, WcStatus::LocProtErr);
                return Err(Fatal);
            }
        };
        // Bookkeeping for the packet just built.
        self.count_sent(now, psn, payload_len, ctr);
        if resend.is_some() && !self.timer_marked.contains(psn) {
            ctr.fast_retransmits += 1;
        }
        if resend.is_some() {
            self.resend.advance(self.comp_psn);
            self.resent.advance(self.comp_psn);
            let seq = self.retx_seq_next;
            self.retx_seq_next = seq.wrapping_add(1);
            if run.is_some() {
                if let Some(t) = self.reread_rto_ns() {
                    self.reread_timer.arm_if_idle(now.add_nanos(t));
                }
            }
            for i in 0..run.unwrap_or(1) {
                let q = psn.add(i);
                self.resend.remove(q);
                self.timer_marked.remove(q);
                self.resent.insert(q);
                self.retx_mark[(q.value() % SR_WINDOW) as usize] = self.psn_hi;
                self.retx_seq[(q.value() % SR_WINDOW) as usize] = seq;
                self.sent_at[(q.value() % SR_WINDOW) as usize] = now;
            }
        } else {
            self.advance_past(psn, consumed, ack_req);
            if k + consumed >= deque_get(&self.sq, idx).map_or(0, |e| e.npkts) {
                self.cur_idx += 1;
                self.cur_pkt = 0;
            } else {
                self.cur_pkt += consumed;
            }
        }
        self.arm_retrans_timer(now);
        Ok(Some(n))
    }

    /// Counts packet `psn`, with `payload_len` bytes of payload, as sent at `now` (a resend when
    /// it is before the highest PSN sent).
    pub(super) fn count_sent(
        &mut self,
        now: super::Instant,
        psn: Psn,
        payload_len: usize,
        ctr: &mut RcCounters,
    ) {
        ctr.tx_packets += 1;
        ctr.tx_payload_bytes += payload_len as u64;
        if psn.before(self.psn_hi) {
            ctr.retransmitted_packets += 1;
        }
        self.sent_at[(psn.value() % SR_WINDOW) as usize] = now;
    }

    /// Moves the cursor's PSN past the new packet `psn`, which took `consumed` PSNs and asked
    /// for an ACK or not (the AckReq cadence counts from the last that did).
    pub(super) fn advance_past(&mut self, psn: Psn, consumed: u32, ack_req: bool) {
        self.noack_pkts = if ack_req { 0 } else { self.noack_pkts + 1 };
        self.psn = psn.add(consumed);
        if self.psn.after(self.psn_hi) {
            self.psn_hi = self.psn;
        }
    }

    /// Starts the retransmit timer unless it runs (or no timeout is configured).
    pub(super) fn arm_retrans_timer(&mut self, now: super::Instant) {
        if !self.retrans_timer.is_armed() {
            if let Some(t) = self.rto_ns() {
                self.retrans_timer.arm(now.add_nanos(t));
            }
        }
    }

    /// Headers of packet `k` (PSN `psn`) of `entry`: (headers, payload offset in the message,
    /// payload length, PSNs consumed, AckReq). Resends in selective mode always ask for an ACK;
    /// a READ with `run` asks for that many responses from `k` (else the whole tail).
    fn build(
        &self,
        entry: &SqEntry,
        k: u32,
        psn: Psn,
        path: &Path,
        resend: bool,
        run: Option<u32>,
    ) -> (TransportRepr, u64, usize, u32, bool) {
        let mtu = self.mtu;
        let wqe = &entry.wqe;
        if entry.is_read() {
            let skip = (k as u64 * mtu.bytes() as u64).min(entry.len as u64);
            let tail = entry.len - skip as u32;
            let dma_len = match run {
                Some(n) => tail.min((n as u64 * mtu.bytes() as u64).min(u32::MAX as u64) as u32),
                None => tail,
            };
            let mut hdr = TransportRepr::new(path.bth(Opcode::RcRdmaReadRequest, psn, true, false));
            hdr.reth = Some(RethRepr {
                va: wqe.remote_addr.wrapping_add(skip),
                rkey: wqe.rkey,
                dma_len,
            });
            return (hdr, 0, 0, entry.npkts - k, true);
        }
        if let Some(op) = wqe.opcode.atomic_op() {
            let (opcode, swap_add, compare) = match op {
                super::memory::AtomicOp::CompareSwap { compare, swap } => {
                    (Opcode::RcCompareSwap, swap, compare)
                }
                super::memory::AtomicOp::FetchAdd { add } => (Opcode::RcFetchAdd, add, 0),
            };
            let mut hdr = TransportRepr::new(path.bth(opcode, psn, true, false));
            hdr.atomic_eth = Some(AtomicEthRepr {
                va: wqe.remote_addr,
                rkey: wqe.rkey,
                swap_add,
                compare,
            });
            return (hdr, 0, 0, 1, true);
        }
        let n = entry.npkts;
        let (first, last) = (k == 0, k + 1 == n);
        let imm = wqe.opcode.has_imm();
        let off = k as u64 * mtu.bytes() as u64;
        let seg = mtu.segment_len(entry.len, k);
        let ack_req =
            last || self.noack_pkts + 1 >= MAX_PKTS_PER_ACK || (resend && self.selective());
        let solicited = last && wqe.solicited;
        if entry.split && imm && last {
            // Selective repeat, the last packet of a split WRITE with immediate: an
            // RDMA_WRITE_ONLY_WITH_IMMEDIATE whose RETH names the whole message (the DMA
            // length the receive completion reports) and whose payload is its last bytes; it
            // consumes the receive WQE and completes it once every earlier PSN is executed.
            let mut hdr = TransportRepr::new(path.bth(
                Opcode::RcRdmaWriteOnlyWithImmediate,
                psn,
                ack_req,
                solicited,
            ));
            hdr.reth = Some(RethRepr {
                va: wqe.remote_addr,
                rkey: wqe.rkey,
                dma_len: entry.len,
            });
            hdr.imm = Some(wqe.imm);
            return (hdr, off, seg as usize, 1, ack_req);
        }
        if entry.split {
            // Selective repeat: every packet an RDMA_WRITE_ONLY with its own RETH.
            let mut hdr =
                TransportRepr::new(path.bth(Opcode::RcRdmaWriteOnly, psn, ack_req, false));
            hdr.reth = Some(RethRepr {
                va: wqe.remote_addr.wrapping_add(off),
                rkey: wqe.rkey,
                dma_len: seg,
            });
            return (hdr, off, seg as usize, 1, ack_req);
        }
        let opcode = data_opcode(wqe.opcode.is_write(), first, last, imm);
        let mut hdr = TransportRepr::new(path.bth(opcode, psn, ack_req, solicited));
        if wqe.opcode.is_write() && first {
            hdr.reth = Some(RethRepr {
                va: wqe.remote_addr,
                rkey: wqe.rkey,
                dma_len: entry.len,
            });
        }
        if imm && last {
            hdr.imm = Some(wqe.imm);
        }
        (hdr, off, seg as usize, 1, ack_req)
    }

    /// Moves the cursor back to the oldest unacknowledged PSN (go-back-N).
    pub(crate) fn rewind(&mut self) {
        self.cur_idx = 0;
        self.psn = self.comp_psn;
        self.cur_pkt = match self.sq.front() {
            Some(head) => self.comp_psn.distance_from(head.first_psn),
            None => 0,
        };
    }

    /// After acknowledgements moved `comp_psn` past the cursor (late ACKs after a rewind), moves
    /// the cursor forward to `comp_psn`.
    pub(crate) fn sync_cursor(&mut self) {
        if self.psn.before(self.comp_psn) {
            self.rewind();
        }
    }

    /// Removes the head WQE (completed), keeping the cursor on the same WQE.
    pub(crate) fn pop_head(&mut self) -> Option<SqEntry> {
        let e = self.sq.pop_front()?;
        self.rd_atomics -= u32::from(e.is_rd_atomic());
        if self.cur_idx > 0 {
            self.cur_idx -= 1;
        } else {
            // The cursor was rewound onto the popped WQE: continue with the next one.
            self.cur_pkt = 0;
            self.psn = e.end_psn();
        }
        Some(e)
    }

    /// Completes the head WQE successfully (a completion only when signaled).
    pub(crate) fn complete_head_ok(&mut self) {
        if let Some(e) = self.pop_head() {
            if e.wqe.signaled {
                let wc = WorkCompletion {
                    wr_id: e.wqe.wr_id,
                    status: WcStatus::Success,
                    opcode: e.wc_opcode(),
                    byte_len: e.len,
                    imm_data: None,
                    qp_num: self.local_qpn,
                };
                // Cannot fail: the entry's slot is accounted in `has_room`.
                let _ = self.cq.push_back(wc);
            }
        }
    }

    /// Completes WQE `failed` with `status`, every other queued WQE with `WrFlushErr`, in queue
    /// order, and stops all transport activity (the QP is going to the Error state).
    pub(crate) fn complete_in_error(&mut self, failed: usize, status: WcStatus) {
        let mut i = 0;
        while let Some(e) = self.sq.pop_front() {
            self.rd_atomics -= u32::from(e.is_rd_atomic());
            let wc = WorkCompletion {
                wr_id: e.wqe.wr_id,
                status: if i == failed {
                    status
                } else {
                    WcStatus::WrFlushErr
                },
                opcode: e.wc_opcode(),
                byte_len: 0,
                imm_data: None,
                qp_num: self.local_qpn,
            };
            let _ = self.cq.push_back(wc);
            i += 1;
        }
        self.cur_idx = 0;
        self.cur_pkt = 0;
        self.retrans_timer.stop();
        self.rnr_timer.stop();
        self.reread_timer.stop();
        self.reorder_timer.stop();
        self.read_suspect = None;
        self.resend.clear();
        self.sacked.clear();
        self.got.clear();
    }

    /// Flushes every queued WQE with `WrFlushErr` (QP to Error).
    pub(crate) fn flush(&mut self) {
        self.complete_in_error(usize::MAX, WcStatus::WrFlushErr);
    }

    /// The `WrFlushErr` completion of a WQE posted while the QP is in Error, if there is room.
    pub(crate) fn flush_posted(&mut self, wqe: &SendWqe) -> Result<(), PostError> {
        if !self.has_room() {
            return Err(PostError::QueueFull);
        }
        let opcode = wc_opcode(wqe.opcode);
        let _ = self.cq.push_back(WorkCompletion {
            wr_id: wqe.wr_id,
            status: WcStatus::WrFlushErr,
            opcode,
            byte_len: 0,
            imm_data: None,
            qp_num: self.local_qpn,
        });
        Ok(())
    }

    /// Mutable access to queued WQE `i`.
    pub(crate) fn entry_mut(&mut self, i: usize) -> Option<&mut SqEntry> {
        deque_get_mut(&mut self.sq, i)
    }
}

/// `true` when the `a_len` bytes at `a` and the `b_len` bytes at `b` share a byte (remote
/// virtual addresses; empty ranges share none).
fn overlaps(a: u64, a_len: u32, b: u64, b_len: u32) -> bool {
    let (a_end, b_end) = (
        a.saturating_add(u64::from(a_len)),
        b.saturating_add(u64::from(b_len)),
    );
    a_len > 0 && b_len > 0 && a < b_end && b < a_end
}

/// The opcode of a SEND or WRITE packet by its position in the message
/// (IBTA vol. 1 Table 38; "with immediate" only on LAST/ONLY).
pub(crate) fn data_opcode(write: bool, first: bool, last: bool, imm: bool) -> Opcode {
    use Opcode::*;
    match (write, first, last, imm) {
        (false, true, true, false) => RcSendOnly,
        (false, true, true, true) => RcSendOnlyWithImmediate,
        (false, true, false, _) => RcSendFirst,
        (false, false, false, _) => RcSendMiddle,
        (false, false, true, false) => RcSendLast,
        (false, false, true, true) => RcSendLastWithImmediate,
        (true, true, true, false) => RcRdmaWriteOnly,
        (true, true, true, true) => RcRdmaWriteOnlyWithImmediate,
        (true, true, false, _) => RcRdmaWriteFirst,
        (true, false, false, _) => RcRdmaWriteMiddle,
        (true, false, true, false) => RcRdmaWriteLast,
        (true, false, true, true) => RcRdmaWriteLastWithImmediate,
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn opcode_table() {
        // Header sets of the chosen opcodes agree with IBTA Table 38 via the wire layer.
        for write in [false, true] {
            for imm in [false, true] {
                for (first, last) in [(true, true), (true, false), (false, false), (false, true)] {
                    let op = data_opcode(write, first, last, imm);
                    let hs = op.header_set().unwrap();
                    assert_eq!(op.is_write(), write);
                    assert_eq!(op.is_send(), !write);
                    assert_eq!(hs.reth, write && first, "{op:?}");
                    assert_eq!(hs.immdt, imm && last, "{op:?}");
                    assert_eq!(op.is_first(), first && !last);
                    assert_eq!(op.is_last(), last && !first);
                    assert_eq!(op.is_only(), first && last);
                }
            }
        }
    }
}
