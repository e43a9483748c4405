//! The RC completer: the requester's half that consumes ACKs, NAKs and RDMA READ responses,
//! retires send WQEs, and runs the retransmit and RNR timers.
//!
//! Rules (IBTA vol. 1 §9.7.5.2 "Requester: responses", §9.7.6 timers; as implemented by
//! Linux rxe_comp.c):
//! - An ACK is cumulative: it acknowledges every PSN up to and including its own; SEND/WRITE WQEs
//!   whose last PSN it covers complete (coalesced ACKs).
//! - A READ completes only through its responses, which must arrive in PSN order; a response or
//!   ACK with a PSN past an incomplete READ is an implied NAK and starts a retry. Out-of-order
//!   responses inside the READ's range are dropped (recovery by the timer).
//! - An atomic completes through its ATOMIC_ACKNOWLEDGE (same PSN): the original value from the
//!   AtomicAckETH (big-endian on the wire) is written to the WQE's 8-byte local buffer in native
//!   byte order; like a READ, an ACK past it is an implied NAK.
//! - NAK "PSN sequence error" implicitly acknowledges the PSNs before it and starts a go-back-N
//!   retry from it; the retry counter is decremented, `RetryExcErr` at 0.
//! - RNR NAK: wait the RNR timer, then resend from its PSN; `rnr_retry` 7 = infinite, else
//!   decremented, `RnrRetryExcErr` at 0.
//! - End-to-end credits (IBTA vol. 1 §9.7.7.2): every ACK-kind AETH's credit code says how
//!   many receive WQEs the responder has for the messages after its MSN; a SEND or WRITE
//!   with immediate starts only within them plus one (the message that learns of new ones,
//!   or draws an RNR NAK). Code 0x1F, rxe's, means no limit.
//! - NAK invalid request / remote access / remote operational error complete the WQE with
//!   `RemInvReqErr` / `RemAccessErr` / `RemOpErr`; the QP goes to Error.
//! - Retransmit timer: 4.096 µs · 2^timeout after the last progress while PSNs are outstanding;
//!   expiry retries (`RetryExcErr` when `retry_cnt` is used up).
//! - Selective repeat (`recovery.rs`): SACK blocks and out-of-order READ responses (placed
//!   on arrival) feed a scoreboard; a PSN is resent once the peer holds one [`DUP_THRESH`]
//!   beyond it (fast retransmit) — a READ response also once anything beyond it arrived a
//!   reorder window ago (`Requester::reorder_window_ns`, RACK), a re-READ's run again once something sent after it or a later re-READ was answered or
//!   the re-READ timer finds it overdue —, a NAK without SACK block (the responder dropped packets it
//!   could not hold) every undelivered request PSN, RNR NAKs and timeouts mark PSNs to resend
//!   instead of rewinding the cursor; the timer follows the round-trip time (see
//!   `Requester::rto_ns`).

use super::completion::WcStatus;
use super::counters::RcCounters;
use super::memory::{scatter, MemoryAccess};
use super::psn_bits::Mask;
use super::recovery::{DUP_THRESH, RTO_LOW_PACKETS, SR_WINDOW};
use super::requester::Requester;
use super::timer::{ack_timeout_ns, rnr_delay_ns, Instant};
use super::Fatal;
use crate::wire::aeth::{credit_count, MAX_MSN};
use crate::wire::{sack, AethRepr, NakCode, Opcode, Psn, SackRepr, Syndrome, TransportRepr};

/// Outcome of acknowledging every PSN before some point.
#[derive(Debug, Clone, Copy, Default)]
struct AckWalk {
    /// `comp_psn` moved forward.
    progressed: bool,
    /// An incomplete READ/atomic starts before the point: `comp_psn` stopped at its next
    /// response.
    blocked_by_read: bool,
}

impl<const SQ: usize> Requester<SQ> {
    /// `true` while some sent PSN is unacknowledged.
    pub(crate) fn outstanding(&self) -> bool {
        self.comp_psn != self.psn_hi
    }

    /// `true` when `psn` was sent and is not yet acknowledged: `comp_psn <= psn < psn_hi`.
    fn in_flight(&self, psn: Psn) -> bool {
        psn.distance_from(self.comp_psn) < self.psn_hi.distance_from(self.comp_psn)
    }

    /// Processes one response packet (ACKNOWLEDGE or READ response) addressed to this QP.
    ///
    /// # Errors
    /// [`Fatal`] once the WQEs were completed in error (QP must go to Error).
    pub(crate) fn handle_response<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        hdr: &TransportRepr,
        payload: &[u8],
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let psn = hdr.bth.psn;
        self.now = now;
        if let Some(AethRepr {
            syndrome: Syndrome::Ack { credit },
            msn,
        }) = hdr.aeth
        {
            // Also from a duplicate: its credits may be newer than the last ACK's.
            self.on_credits(msn, credit);
        }
        if !self.in_flight(psn) {
            ctr.ghost_responses += 1;
            return Ok(());
        }
        if self.selective() {
            let r = self.handle_response_inner(now, hdr, payload, mem, ctr);
            if r.is_ok() && self.outstanding() && self.undelivered() <= RTO_LOW_PACKETS {
                // Few packets left in flight: too few follow a loss to reveal it, so the
                // timer runs with RTO_low from the latest arrival (IRN).
                if let Some(t) = self.rto_ns().map(|t| now.add_nanos(t)) {
                    if self.retrans_timer.deadline().map_or(true, |d| d > t)
                        && !self.rnr_timer.is_armed()
                    {
                        self.retrans_timer.arm(t);
                    }
                }
            }
            return r;
        }
        self.handle_response_inner(now, hdr, payload, mem, ctr)
    }

    fn handle_response_inner<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        hdr: &TransportRepr,
        payload: &[u8],
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let psn = hdr.bth.psn;
        let opcode = hdr.bth.opcode;
        if opcode.is_read_response() {
            return self.on_read_response(now, psn, opcode, payload, mem, ctr);
        }
        if opcode == Opcode::RcAtomicAcknowledge {
            return match (hdr.aeth, hdr.atomic_ack) {
                (Some(a), Some(orig)) if a.syndrome.is_ack() => {
                    self.on_atomic_ack(now, psn, orig, mem, ctr)
                }
                _ => {
                    ctr.ghost_responses += 1;
                    Ok(())
                }
            };
        }
        let Some(aeth) = hdr.aeth.filter(|_| opcode == Opcode::RcAcknowledge) else {
            ctr.ghost_responses += 1;
            return Ok(());
        };
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                ctr.acks_received += 1;
                if self.selective() && self.resent.is_empty() {
                    // Karn: only while nothing is resent (an ACK that a resend triggered, or
                    // that retires packets held behind a hole, would time the recovery).
                    let sent = self.sent_at[(psn.value() % SR_WINDOW) as usize];
                    self.rtt_sample(now.0.saturating_sub(sent.0));
                }
                self.on_ack(now, psn, ctr)
            }
            Syndrome::RnrNak { timer } => {
                ctr.naks_received.rnr += 1;
                self.on_rnr_nak(now, psn, timer, ctr)
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                ctr.naks_received.psn_sequence += 1;
                let block = sack::Packet::new_checked(payload)
                    .and_then(|p| SackRepr::parse(&p))
                    .ok()
                    .filter(|b| self.selective() && b.base == psn);
                if block.is_some() {
                    ctr.sacks_received += 1;
                }
                self.on_sequence_nak(now, psn, block, ctr)
            }
            Syndrome::Nak(code) => {
                let status = match code {
                    NakCode::InvalidRequest | NakCode::InvalidRdRequest => {
                        ctr.naks_received.invalid_request += 1;
                        WcStatus::RemInvReqErr
                    }
                    NakCode::RemoteAccessError => {
                        ctr.naks_received.remote_access += 1;
                        WcStatus::RemAccessErr
                    }
                    NakCode::RemoteOperationalError => {
                        ctr.naks_received.remote_operational += 1;
                        WcStatus::RemOpErr
                    }
                    _ => {
                        ctr.naks_received.remote_operational += 1;
                        WcStatus::BadRespErr
                    }
                };
                self.on_fatal_nak(psn, status)
            }
            Syndrome::Reserved(_) => {
                ctr.ghost_responses += 1;
                Ok(())
            }
        }
    }

    /// End-to-end credits from an ACK-kind AETH (IBTA vol. 1 §9.7.7.2): `credit` (a credit
    /// code) receive WQEs are posted at the responder for the messages after MSN `msn`.
    /// Moves [`Requester::recv_limit`] up to the receive sequence number of message `msn + 1`
    /// plus that count, never down (an older ACK that arrives late); code 0x1F removes the
    /// limit. An MSN older than every WQE left (their receive counts are gone) is ignored.
    fn on_credits(&mut self, msn: u32, credit: u8) {
        let Some(count) = credit_count(credit) else {
            self.recv_limit = None;
            return;
        };
        let next = (msn + 1) & MAX_MSN;
        let mut base = None;
        for e in self.sq.iter() {
            let d = next.wrapping_sub(e.ssn) & MAX_MSN;
            if d < e.wire_messages() {
                base = Some(e.recv_seq);
                break;
            }
            if d > MAX_MSN / 2 {
                // `e` starts after message `next`, which was retired already.
                return;
            }
        }
        let base = match base {
            Some(b) => b,
            None if next == self.ssn_next => self.recv_seq_next,
            None => return,
        };
        let limit = base.wrapping_add(count);
        match self.recv_limit {
            Some(l) if (limit.wrapping_sub(l) as i32) <= 0 => {}
            _ => self.recv_limit = Some(limit),
        }
    }

    /// Retires SEND/WRITE WQEs that end at or before `end` and moves `comp_psn` up to `end`,
    /// stopping at an incomplete READ/atomic (`ack_hi` remembers `end` for after it).
    fn ack_before(&mut self, end: Psn) -> AckWalk {
        if end.after(self.ack_hi) && !end.after(self.psn_hi) {
            self.ack_hi = end;
        }
        let mut walk = AckWalk::default();
        while let Some(head) = self.sq.front() {
            if !head.first_psn.before(end) {
                break;
            }
            if head.is_rd_atomic() {
                walk.blocked_by_read = true;
                break;
            }
            let head_end = head.end_psn();
            if !end.before(head_end) {
                self.comp_psn = head_end;
                walk.progressed = true;
                self.complete_head_ok();
            } else {
                if end.after(self.comp_psn) {
                    self.comp_psn = end;
                    walk.progressed = true;
                }
                break;
            }
        }
        if self.sq.is_empty() && end.after(self.comp_psn) {
            self.comp_psn = end;
            walk.progressed = true;
        }
        walk
    }

    /// Bookkeeping after `comp_psn` moved: retry counters, retransmit timer, cursor; in
    /// selective repeat after a timeout, the resend of the new ACK point.
    fn on_progress(&mut self, now: Instant) {
        if self.selective() {
            self.complete_ready_heads();
        }
        // Keep `ack_hi` at or after `comp_psn`, so that it never looks ahead after a wrap.
        if self.comp_psn.after(self.ack_hi) {
            self.ack_hi = self.comp_psn;
        }
        self.reset_retry_counters();
        self.backoff = 0;
        if !self.outstanding() {
            self.retrans_timer.stop();
        } else if let Some(t) = self.rto_ns() {
            if !self.rnr_timer.is_armed() {
                self.retrans_timer.arm(now.add_nanos(t));
            }
        }
        if self.selective() {
            self.advance_scoreboard();
        } else {
            self.sync_cursor();
        }
    }

    /// Selective repeat: moves every scoreboard bitmap's window to `comp_psn`.
    fn advance_scoreboard(&mut self) {
        let c = self.comp_psn;
        self.resend.advance(c);
        self.resent.advance(c);
        self.sacked.advance(c);
        self.got.advance(c);
        self.timer_marked.advance(c);
    }

    /// Selective repeat: marks for resending the PSNs that count as lost. A PSN is delivered
    /// when the responder holds it (SACK), an ACK covered it (SEND/WRITE), or — READ — its
    /// response arrived. An undelivered PSN is lost once something at least [`DUP_THRESH`]
    /// PSNs beyond it arrived (the highest SACKed PSN, READ response, or acknowledged PSN, or
    /// `hint`); a PSN already resent only once that far beyond what was new when it was
    /// resent. With `timeout`, the oldest undelivered PSN, and
    /// with few in flight every undelivered PSN count as lost (the SACK that answers the resend
    /// reveals the rest).
    fn detect_losses(&mut self, hint: Option<Psn>, timeout: bool) {
        self.advance_scoreboard();
        let c = self.comp_psn;
        let out = self.psn_hi.distance_from(c).min(SR_WINDOW);
        if out == 0 {
            self.read_suspect = None;
            self.reorder_timer.stop();
            return;
        }
        let mut hi = self.ack_hi.sub(1);
        for h in [self.sacked.highest(), self.got.highest(), hint]
            .into_iter()
            .flatten()
        {
            if h.after(hi) {
                hi = h;
            }
        }
        let few = self.psn_hi.distance_from(c) <= RTO_LOW_PACKETS;
        // The window as offsets from `c`, a whole bitmap per step (this runs for every READ
        // response that arrives behind a hole): which PSNs belong to READs and atomics...
        let (reads, atomics) = self.rd_atomic_masks(c);
        // ... and which were delivered. A READ/atomic the responder holds (deferred) is
        // SACKed; once it executed (ePSN past it), only its response counts.
        let acked = if self.ack_hi.after(c) {
            Mask::range(0, self.ack_hi.distance_from(c))
        } else {
            Mask::default()
        };
        let sacked = self.sacked.mask_from(c);
        let held = sacked & !acked;
        let rd = reads | atomics;
        let delivered = (reads & self.got.mask_from(c)) | (rd & held) | (!rd & (sacked | acked));
        let undelivered = Mask::range(0, out) & !delivered;
        let mut lost = Mask::default();
        if timeout {
            if few {
                lost = undelivered;
            } else if let Some(i) = undelivered.lowest() {
                lost = Mask::range(i, i + 1);
            }
        } else {
            let resent = self.resent.mask_from(c);
            let mut suspects = Mask::default();
            if hi == c || hi.after(c) {
                // Never resent: lost once something DUP_THRESH beyond arrived. A READ
                // response with anything beyond it (the responder sends its responses, and
                // every ACK/SACK after them, in PSN order: IRN's READ (N)ACK) was lost or
                // overtaken: with fewer than DUP_THRESH beyond, lost once the reorder window
                // passed (RACK, RFC 8985) — counting it lost at once re-READ every response
                // a reordering path overtook (3.1 resends per lost packet at 1 % loss and
                // 1 % reordering).
                let h = hi.distance_from(c) + 1;
                let fresh = undelivered & !resent;
                let by_count = Mask::range(0, h.saturating_sub(DUP_THRESH));
                lost = fresh & by_count;
                suspects = fresh & reads & Mask::range(0, h - 1) & !by_count;
            }
            lost = lost | self.reorder_window(c, suspects);
            let beyond = |p: Psn, thresh: u32| hi.after(p) && hi.distance_from(p) >= thresh;
            let rr_rto = self.reread_rto_ns();
            let mut due: Option<Instant> = None;
            for i in (undelivered & resent).ones() {
                let q = c.add(i);
                let slot = (q.value() % SR_WINDOW) as usize;
                let again = if reads.has(i) {
                    // A re-READ PSN is lost again once anything the requester sent after the
                    // re-READ was answered (the responder saw the re-READ first and answers
                    // it ahead of its queue), a later re-READ or a later PSN of the same run
                    // was answered (re-READs are answered in order), or its answer is
                    // overdue (`reread_timer`; RACK's idea, RFC 8985).
                    let seq = self.retx_seq[slot];
                    let later = self.reread_seen.is_some_and(|(s, p)| {
                        let d = s.wrapping_sub(seq) as i32;
                        d > 0 || (d == 0 && p.after(q))
                    });
                    let at = rr_rto.map(|t| self.sent_at[slot].add_nanos(t));
                    let overdue = at.is_some_and(|t| t <= self.now);
                    let again = !hi.before(self.retx_mark[slot]) || later || overdue;
                    if !again {
                        due = super::timer::earliest(due, at);
                    }
                    again
                } else {
                    // DUP_THRESH beyond what was new at the resend. (No timer rule: a packet
                    // the responder could not place for want of a receive WQE would be
                    // resent over and over.)
                    beyond(self.retx_mark[slot], DUP_THRESH)
                };
                if again {
                    lost = lost | Mask::range(i, i + 1);
                }
            }
            match due {
                Some(t) => self.reread_timer.arm(t),
                None => self.reread_timer.stop(),
            }
        }
        for i in (lost & !self.resend.mask_from(c)).ones() {
            let q = c.add(i);
            if timeout {
                self.timer_marked.insert(q);
            }
            self.resend.insert(q);
        }
    }

    /// Selective repeat: which PSNs of `[c, psn_hi)` (offsets from `c` = `comp_psn`) belong to
    /// READs and which to atomics. Kept for as long as `comp_psn` and `psn_hi` stay: the
    /// entries sent are fixed then (new WQEs are appended after `psn_hi`, completed ones end at
    /// or before `comp_psn`). Behind a hole `detect_losses` runs for every READ response that
    /// arrives while neither moves — 15 of 16 responses of a 64 KiB READ stream — and the walk
    /// over the send queue was about half of its time (`perf`, READ at 1 % loss:
    /// `detect_losses` 4.4 % of all samples, docs/reliability.md).
    fn rd_atomic_masks(&mut self, c: Psn) -> (Mask, Mask) {
        if let Some((at, hi, reads, atomics)) = self.rd_masks {
            if at == c && hi == self.psn_hi {
                // The model-checking properties (`tests::property`) check the cache on every
                // use.
                #[cfg(test)]
                assert_eq!(
                    (reads, atomics),
                    self.rd_atomic_walk(c),
                    "stale READ/atomic masks"
                );
                return (reads, atomics);
            }
        }
        let masks = self.rd_atomic_walk(c);
        self.rd_masks = Some((c, self.psn_hi, masks.0, masks.1));
        masks
    }

    /// [`Self::rd_atomic_masks`] without the cache: one walk over the send queue.
    fn rd_atomic_walk(&self, c: Psn) -> (Mask, Mask) {
        let (mut reads, mut atomics) = (Mask::default(), Mask::default());
        for e in self.sq.iter() {
            if !e.first_psn.before(self.psn_hi) {
                break;
            }
            if !e.is_rd_atomic() || !e.end_psn().after(c) {
                continue;
            }
            let lo = if e.first_psn.after(c) {
                e.first_psn.distance_from(c)
            } else {
                0
            };
            let m = Mask::range(lo, e.end_psn().distance_from(c));
            if e.is_read() {
                reads = reads | m;
            } else {
                atomics = atomics | m;
            }
        }
        (reads, atomics)
    }

    /// Selective repeat: the READ responses of `suspects` (offsets from `c`: missing, with
    /// fewer than `DUP_THRESH` PSNs beyond them arrived) that count as lost because the reorder
    /// window passed since the lowest of them was first seen missing (`read_suspect`); arms
    /// the reorder timer for the rest.
    fn reorder_window(&mut self, c: Psn, suspects: Mask) -> Mask {
        let Some(i) = suspects.lowest() else {
            self.read_suspect = None;
            self.reorder_timer.stop();
            return Mask::default();
        };
        let q = c.add(i);
        let since = match self.read_suspect {
            Some((p, t)) if p == q => t,
            _ => self.now,
        };
        let at = since.add_nanos(self.reorder_window_ns());
        if at <= self.now {
            self.read_suspect = None;
            self.reorder_timer.stop();
            suspects
        } else {
            self.read_suspect = Some((q, since));
            self.reorder_timer.arm(at);
            Mask::default()
        }
    }

    /// Selective repeat, on a NAK without SACK block: marks for resending every request PSN
    /// sent and not delivered (not acknowledged, not held by the responder), not resent yet.
    /// READ responses are left to the usual rules: they stream from the responder in order.
    fn mark_unheld_lost(&mut self) {
        self.advance_scoreboard();
        let c = self.comp_psn;
        for e in self.sq.iter() {
            if !e.first_psn.before(self.psn_hi) {
                break;
            }
            if e.is_read() {
                continue;
            }
            let n = if e.is_atomic() { 1 } else { e.npkts };
            for k in 0..n {
                let q = e.first_psn.add(k);
                if q.before(c) || q.before(self.ack_hi) {
                    continue;
                }
                if !q.before(self.psn_hi) {
                    break;
                }
                if !self.sacked.contains(q) && !self.resent.contains(q) {
                    self.resend.insert(q);
                }
            }
        }
    }

    fn on_ack(&mut self, now: Instant, psn: Psn, ctr: &mut RcCounters) -> Result<(), Fatal> {
        let walk = self.ack_before(psn.add(1));
        if walk.progressed {
            self.on_progress(now);
        }
        if walk.blocked_by_read {
            let implied = self.sq.front().is_some_and(|h| psn.after(h.last_psn()));
            if implied {
                ctr.implied_naks += 1;
                return self.implied_nak(ctr);
            }
        }
        Ok(())
    }

    /// The responder is past the head READ/atomic without having answered it (its responses
    /// were lost): go-back-N retry, or in selective repeat a resend of that request alone.
    fn implied_nak(&mut self, ctr: &mut RcCounters) -> Result<(), Fatal> {
        if !self.selective() {
            return self.retry_on_nak(ctr);
        }
        // Responses leave the responder in PSN order: what the head still misses was lost
        // (or overtaken) — resend its first missing PSN now, unless already resent.
        self.advance_scoreboard();
        if let Some(h) = self.sq.front() {
            let mut q = h.request_psn();
            while h.contains(q) && self.got.contains(q) {
                q = q.add(1);
            }
            if h.contains(q) && !self.resent.contains(q) && !self.resend.contains(q) {
                self.resend.insert(q);
            }
        }
        self.detect_losses(None, false);
        Ok(())
    }

    fn on_sequence_nak(
        &mut self,
        now: Instant,
        psn: Psn,
        block: Option<SackRepr>,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let walk = self.ack_before(psn);
        if walk.progressed {
            self.on_progress(now);
        }
        if self.selective() {
            self.advance_scoreboard();
            if let Some(b) = block {
                self.sacked.insert_bits_at(b.base, b.held);
            }
        }
        if self.rnr_timer.is_armed() && psn == self.comp_psn {
            // Follows an RNR NAK for the same PSN: the RNR wait already covers it.
            return Ok(());
        }
        if self.selective() {
            if block.is_some() {
                self.detect_losses(None, false);
            } else {
                // A NAK without SACK block: the responder lacks `psn` and dropped a later
                // packet it could not hold (a WRITE packet without its own RETH, a SEND before
                // its receive WQE, a WRITE behind a READ): every PSN sent and not known to be
                // delivered counts as lost — go-back-N over what the responder did not keep,
                // at once; PSNs already resent only by the usual rule.
                self.mark_unheld_lost();
            }
            return Ok(());
        }
        self.retry_on_nak(ctr)
    }

    fn on_rnr_nak(
        &mut self,
        now: Instant,
        psn: Psn,
        timer: u8,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let walk = self.ack_before(psn);
        if walk.progressed {
            self.on_progress(now);
        }
        if self.rts.rnr_retry != 7 {
            if self.rnr_left == 0 {
                self.complete_in_error(0, WcStatus::RnrRetryExcErr);
                return Err(Fatal);
            }
            self.rnr_left -= 1;
        }
        ctr.retries += 1;
        if self.selective() {
            // Resend the NAKed packet after the wait; what the responder could not keep
            // behind it shows up in its SACKs.
            self.advance_scoreboard();
            self.resent.clear();
            // Not executed, whatever an earlier SACK said (a held WRITE with immediate that
            // found no receive WQE in sequence stays held there, waiting for this resend).
            self.sacked.remove(psn);
            self.resend.insert(psn);
            self.mark_rest_of_message(psn);
        } else {
            self.rewind();
        }
        self.retrans_timer.stop();
        self.rnr_timer.arm(now.add_nanos(rnr_delay_ns(timer)));
        Ok(())
    }

    /// Selective repeat, after an RNR NAK for `psn`: marks for resending the packets of the
    /// same SEND sent after it and not held by the responder. A SEND packet cannot be held
    /// without its receive WQE, so the responder dropped them, and its NAK naming them came
    /// during the RNR wait, which ignores NAKs for the same PSN: without this they waited for
    /// the retransmit timer. (A WRITE with immediate's RNR NAK is for its last packet.)
    fn mark_rest_of_message(&mut self, psn: Psn) {
        let Some(e) = self.sq.iter().find(|e| e.contains(psn)) else {
            return;
        };
        if e.is_rd_atomic() {
            return;
        }
        let end = e.end_psn();
        let mut q = psn.add(1);
        while q.before(end) && q.before(self.psn_hi) {
            if !self.sacked.contains(q) {
                self.resend.insert(q);
            }
            q = q.add(1);
        }
    }

    fn on_fatal_nak(&mut self, psn: Psn, status: WcStatus) -> Result<(), Fatal> {
        // PSNs before the NAK were executed: their SEND/WRITE WQEs complete successfully.
        self.ack_before(psn);
        let failed = self.sq.iter().position(|e| e.contains(psn)).unwrap_or(0);
        self.complete_in_error(failed, status);
        Err(Fatal)
    }

    fn on_read_response<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        psn: Psn,
        opcode: Opcode,
        payload: &[u8],
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        if self.selective() {
            return self.on_read_response_selective(now, psn, payload, mem, ctr);
        }
        // A response implicitly acknowledges every earlier PSN.
        let walk = self.ack_before(psn);
        let mut progressed = walk.progressed;
        let Some(head) = self.sq.front() else {
            ctr.ghost_responses += 1;
            return Ok(());
        };
        if head.is_atomic() && psn.after(head.last_psn()) {
            // The responder is past the head atomic: its ATOMIC ACKNOWLEDGE was lost.
            ctr.implied_naks += 1;
            let result = self.implied_nak(ctr);
            if progressed && result.is_ok() {
                self.on_progress(now);
            }
            return result;
        }
        if !head.is_read() {
            // The PSN belongs to a SEND/WRITE/atomic: not a valid READ response.
            ctr.ghost_responses += 1;
            if progressed {
                self.on_progress(now);
            }
            return Ok(());
        }
        let expected = head.first_psn.add(head.read_done);
        let mut result = Ok(());
        if psn == expected {
            let k = head.read_done;
            let n = head.npkts;
            let seg = self.mtu.segment_len(head.len, k) as usize;
            let ends = matches!(
                opcode,
                Opcode::RcRdmaReadResponseLast | Opcode::RcRdmaReadResponseOnly
            );
            if payload.len() != seg || ends != (k + 1 == n) {
                self.complete_in_error(0, WcStatus::BadRespErr);
                return Err(Fatal);
            }
            let off = k as u64 * self.mtu.bytes() as u64;
            if scatter(mem, &head.wqe.sg_list, off, payload).is_err() {
                self.complete_in_error(0, WcStatus::LocProtErr);
                return Err(Fatal);
            }
            if let Some(h) = self.entry_mut(0) {
                h.read_done += 1;
            }
            self.comp_psn = psn.add(1);
            progressed = true;
            if k + 1 == n {
                self.complete_read_head();
            }
        } else if psn.after(head.last_psn()) {
            // The responder is past this READ: its responses were lost (implied NAK).
            ctr.implied_naks += 1;
            result = self.implied_nak(ctr);
        } else {
            // Out of order inside the READ's range (a response was lost) or a duplicate.
            ctr.ghost_responses += 1;
        }
        if progressed && result.is_ok() {
            self.on_progress(now);
        }
        result
    }

    /// Selective repeat: a READ response for any outstanding READ is placed on arrival (the
    /// PSN gives its offset); the head READs complete as their responses fill in, and holes
    /// behind it count as lost by the [`DUP_THRESH`] rule.
    fn on_read_response_selective<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        psn: Psn,
        payload: &[u8],
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let walk = self.ack_before(psn);
        let mut progressed = walk.progressed;
        self.advance_scoreboard();
        if let Some(head) = self.sq.front() {
            if head.is_atomic() && psn.after(head.last_psn()) {
                // The responder is past the head atomic: its ATOMIC ACKNOWLEDGE was lost.
                ctr.implied_naks += 1;
                self.detect_losses(Some(psn), false);
                if progressed {
                    self.on_progress(now);
                }
                return Ok(());
            }
        }
        let Some(i) = self.sq.iter().position(|e| e.contains(psn)) else {
            ctr.ghost_responses += 1;
            return Ok(());
        };
        let Some(e) = super::packet::deque_get(&self.sq, i) else {
            return Ok(());
        };
        if !e.is_read() {
            ctr.ghost_responses += 1;
            if progressed {
                self.on_progress(now);
            }
            return Ok(());
        }
        let k = psn.distance_from(e.first_psn);
        let expected = k == e.read_done && i == 0;

        if k < e.read_done || self.got.contains(psn) {
            ctr.duplicates_dropped += 1;
            return Ok(());
        }
        if !expected && psn.distance_from(self.comp_psn) >= SR_WINDOW {
            // Beyond the scoreboard (a READ of more than 128 responses): treated as lost.
            ctr.ghost_responses += 1;
            return Ok(());
        }
        if payload.len() != self.mtu.segment_len(e.len, k) as usize {
            self.complete_in_error(i, WcStatus::BadRespErr);
            return Err(Fatal);
        }
        let off = k as u64 * self.mtu.bytes() as u64;
        if scatter(mem, &e.wqe.sg_list, off, payload).is_err() {
            self.complete_in_error(i, WcStatus::LocProtErr);
            return Err(Fatal);
        }
        let slot = (psn.value() % SR_WINDOW) as usize;
        if self.resent.contains(psn) {
            // The answer to a re-READ: the first of its run to arrive times the re-READ.
            let seq = self.retx_seq[slot];
            let newer = self.reread_seen.map_or(true, |(s, _)| s != seq);
            if newer {
                self.reread_sample(now.0.saturating_sub(self.sent_at[slot].0));
            }
            let later = self.reread_seen.map_or(true, |(s, p)| {
                let d = seq.wrapping_sub(s) as i32;
                d > 0 || (d == 0 && psn.after(p))
            });
            if later {
                self.reread_seen = Some((seq, psn));
            }
            self.reread_backoff = 0;
        }
        if k == 0 && self.resent.is_empty() {
            // The first response of a READ sent once: a round-trip sample (Karn).
            let sent = self.sent_at[(psn.value() % SR_WINDOW) as usize];
            self.rtt_sample(now.0.saturating_sub(sent.0));
        }
        if expected {
            if let Some(h) = self.entry_mut(0) {
                h.read_done += 1;
            }
            self.comp_psn = psn.add(1);
            progressed = true;
            self.got.advance(self.comp_psn);
        } else {
            self.got.insert(psn);
            ctr.out_of_order_placed += 1;
        }
        progressed |= self.complete_ready_heads();
        if progressed {
            self.on_progress(now);
        }
        if !expected || self.got.highest().is_some() {
            self.detect_losses(Some(psn), false);
        }
        Ok(())
    }

    /// An ATOMIC ACKNOWLEDGE: completes the head atomic when the PSN is its own (writing the
    /// original value into its local buffer); a later PSN is an implied NAK for an incomplete
    /// READ/atomic at the head.
    fn on_atomic_ack<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        psn: Psn,
        orig: u64,
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let walk = self.ack_before(psn);
        let mut progressed = walk.progressed;
        let Some(head) = self.sq.front() else {
            ctr.ghost_responses += 1;
            return Ok(());
        };
        let mut result = Ok(());
        let head_is_it = head.is_atomic() && head.first_psn == psn;
        let implied = head.is_rd_atomic() && psn.after(head.last_psn());
        if self.selective() && !head_is_it {
            // Selective repeat: an atomic behind an incomplete READ/atomic keeps its answer
            // (original value written to its buffer now) and completes once it is the head.
            let found = self
                .sq
                .iter()
                .position(|e| e.is_atomic() && e.first_psn == psn && !e.atomic_done);
            if let Some(i) = found {
                let sges = self.sq.iter().nth(i).map(|e| e.wqe.sg_list.clone());
                if let Some(sges) = sges {
                    if scatter(mem, &sges, 0, &orig.to_ne_bytes()).is_err() {
                        self.complete_in_error(i, WcStatus::LocProtErr);
                        return Err(Fatal);
                    }
                }
                if let Some(e) = self.entry_mut(i) {
                    e.atomic_done = true;
                }
                ctr.out_of_order_placed += 1;
            } else {
                ctr.duplicates_dropped += 1;
            }
            if implied {
                ctr.implied_naks += 1;
                self.detect_losses(Some(psn), false);
            }
        } else if head_is_it {
            let Some(head) = self.sq.front() else {
                return Ok(());
            };
            if scatter(mem, &head.wqe.sg_list, 0, &orig.to_ne_bytes()).is_err() {
                self.complete_in_error(0, WcStatus::LocProtErr);
                return Err(Fatal);
            }
            self.comp_psn = psn.add(1);
            progressed = true;
            self.complete_head_ok();
            self.ack_remembered();
        } else if implied {
            ctr.implied_naks += 1;
            result = self.implied_nak(ctr);
        } else {
            ctr.ghost_responses += 1;
        }
        if progressed && result.is_ok() {
            self.on_progress(now);
        }
        result
    }

    /// Selective repeat: completes the head READs whose responses are all in and the head
    /// atomics whose answer arrived early, in order. `true` when `comp_psn` moved.
    fn complete_ready_heads(&mut self) -> bool {
        let mut moved = false;
        while let Some(head) = self.sq.front() {
            if head.is_atomic() && head.atomic_done {
                self.comp_psn = head.end_psn();
                moved = true;
                self.complete_head_ok();
                self.ack_remembered();
                continue;
            }
            if !head.is_read() {
                break;
            }
            let mut done = head.read_done;
            while done < head.npkts && self.got.contains(head.first_psn.add(done)) {
                done += 1;
            }
            let (first, n) = (head.first_psn, head.npkts);
            if done > head.read_done {
                if let Some(h) = self.entry_mut(0) {
                    h.read_done = done;
                }
                self.comp_psn = first.add(done);
                moved = true;
            }
            if done < n {
                break;
            }
            self.complete_read_head();
        }
        moved
    }

    /// Completes the head READ, whose last response just arrived.
    fn complete_read_head(&mut self) {
        self.complete_head_ok();
        self.ack_remembered();
    }

    /// After a READ/atomic completed: the SEND/WRITE WQEs behind it that an earlier ACK already
    /// acknowledged complete now.
    fn ack_remembered(&mut self) {
        if self.ack_hi.after(self.comp_psn) {
            self.ack_before(self.ack_hi);
        }
    }

    /// A retry requested by a PSN sequence NAK or an implied NAK: ignored while a retry started
    /// earlier has not made progress yet (the NAK answers packets sent before that rewind).
    fn retry_on_nak(&mut self, ctr: &mut RcCounters) -> Result<(), Fatal> {
        if self.retry_started {
            return Ok(());
        }
        self.retry(ctr)
    }

    /// Go-back-N retry from `comp_psn`, spending one transport retry.
    ///
    /// # Errors
    /// [`Fatal`] after completing the oldest WQE with `RetryExcErr` when no retry is left.
    fn retry(&mut self, ctr: &mut RcCounters) -> Result<(), Fatal> {
        if self.retry_left == 0 {
            self.complete_in_error(0, WcStatus::RetryExcErr);
            return Err(Fatal);
        }
        self.retry_left -= 1;
        self.retry_started = true;
        ctr.retries += 1;
        self.rewind();
        // Re-armed by the first retransmitted packet.
        self.retrans_timer.stop();
        Ok(())
    }

    /// The earliest timer deadline, if any.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let d = super::timer::earliest(self.retrans_timer.deadline(), self.rnr_timer.deadline());
        let d = super::timer::earliest(d, self.reorder_timer.deadline());
        super::timer::earliest(d, self.reread_timer.deadline())
    }

    /// Runs expired timers.
    ///
    /// # Errors
    /// [`Fatal`] when the retransmit timer expired with no retry left.
    pub(crate) fn handle_timeout(
        &mut self,
        now: Instant,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        // RNR wait over: the cursor already points at the NAKed PSN; sending resumes. The
        // retransmit timer runs again (an ACK during the wait may have left nothing to send).
        self.now = now;
        if self.rnr_timer.expire(now) && self.outstanding() {
            if let Some(t) = self.rto_ns() {
                self.retrans_timer.arm_if_idle(now.add_nanos(t));
            }
        }
        if self.reorder_timer.expire(now) && self.outstanding() && !self.rnr_timer.is_armed() {
            // A missing READ response's reorder window passed: it counts as lost now. Its
            // re-READ is a fast retransmit: the retransmit timer (RTO_low, armed at the last
            // arrival) restarts, so that the re-READ timer, not a timeout, answers a lost
            // re-READ. Bounded: each expiry that marks something needs a READ response
            // missing and not yet re-READ.
            let before = self.resend.first_from(self.comp_psn).is_some();
            self.detect_losses(None, false);
            if !before && self.resend.first_from(self.comp_psn).is_some() {
                if let (Some(d), Some(t)) = (self.retrans_timer.deadline(), self.rto_ns()) {
                    if d < now.add_nanos(t) {
                        self.retrans_timer.arm(now.add_nanos(t));
                    }
                }
            }
        }
        let mut asked_again = false;
        if self.reread_timer.expire(now) && self.outstanding() && !self.rnr_timer.is_armed() {
            // A re-READ's answer is overdue: ask again (a fast retransmit, not a timeout),
            // waiting twice as long next time until an answer arrives.
            self.detect_losses(None, false);
            self.reread_backoff += 1;
            asked_again = self.resend.first_from(self.comp_psn).is_some();
        }
        if asked_again
            && self.reread_backoff <= 1
            && self.retrans_timer.deadline().is_some_and(|d| d <= now)
        {
            // The retransmit timer expires at the same time: the re-READ just marked is the
            // better answer; the timer runs again from now — once per answer (a READ response
            // resets the backoff). Deferring it every time livelocked a queue of atomics and
            // a READ whose re-asks never got an answer: the timeout must come eventually
            // (`property::atomics_then_an_empty_read_settle_after_timeouts`).
            if let Some(t) = self.rto_ns() {
                self.retrans_timer.arm(now.add_nanos(t));
            }
        }
        if self.retrans_timer.expire(now) && self.outstanding() && !self.rnr_timer.is_armed() {
            ctr.timeouts += 1;
            if self.selective() {
                self.selective_timeout(ctr)?;
                // Keep the timer running even when nothing is marked for resending.
                if let Some(t) = self.rto_ns() {
                    self.retrans_timer.arm(now.add_nanos(t));
                }
                return Ok(());
            }
            return self.retry(ctr);
        }
        Ok(())
    }

    /// Selective repeat: a retransmit timeout spends a retry, starts a new resend episode
    /// from the oldest unacknowledged PSN and enters recovery until everything sent so far is
    /// acknowledged.
    fn selective_timeout(&mut self, ctr: &mut RcCounters) -> Result<(), Fatal> {
        // Timeouts shorter than the Local ACK Timeout (round-trip based) back off without
        // spending `retry_cnt`; at the Local ACK Timeout each spends one, as in IBTA.
        let ibta = ack_timeout_ns(self.rts.timeout);
        if self.rto_ns() < ibta {
            self.backoff += 1;
        } else {
            if self.retry_left == 0 {
                self.complete_in_error(0, WcStatus::RetryExcErr);
                return Err(Fatal);
            }
            self.retry_left -= 1;
        }
        ctr.retries += 1;
        self.advance_scoreboard();
        self.resent.clear();
        // What the responder held may have moved on (executed, or its reply lost): after a
        // timeout only fresh SACKs count (RFC 6675 §5.1: SACK information is advisory).
        self.sacked.clear();
        self.detect_losses(None, true);
        Ok(())
    }
}
