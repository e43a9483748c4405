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
//! - NAK "PSN sequence error" implicitly acknowledges the PSNs before it and starts a go-back-N
//!   retry from it; the retry counter is decremented, `RetryExcErr` at 0.
//! - RNR NAK: wait the RNR timer, then resend from its PSN; `rnr_retry` 7 = infinite, else
//!   decremented, `RnrRetryExcErr` at 0.
//! - NAK invalid request / remote access / remote operational error complete the WQE with
//!   `RemInvReqErr` / `RemAccessErr` / `RemOpErr`; the QP goes to Error.
//! - Retransmit timer: 4.096 µs · 2^timeout after the last progress while PSNs are outstanding;
//!   expiry retries (`RetryExcErr` when `retry_cnt` is used up).

use super::completion::{WcOpcode, WcStatus, WorkCompletion};
use super::counters::RcCounters;
use super::memory::{scatter, MemoryAccess};
use super::requester::Requester;
use super::timer::{ack_timeout_ns, rnr_delay_ns, Instant};
use super::Fatal;
use crate::wire::{NakCode, Opcode, Psn, Syndrome, TransportRepr};

/// Outcome of acknowledging every PSN before some point.
#[derive(Debug, Clone, Copy, Default)]
struct AckWalk {
    /// `comp_psn` moved forward.
    progressed: bool,
    /// An incomplete READ starts before the point: `comp_psn` stopped at its next response.
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
        let opcode = hdr.bth.opcode;
        if !self.in_flight(psn) {
            ctr.ghost_responses += 1;
            return Ok(());
        }
        if opcode.is_read_response() {
            return self.on_read_response(now, psn, opcode, payload, mem, ctr);
        }
        let Some(aeth) = hdr.aeth.filter(|_| opcode == Opcode::RcAcknowledge) else {
            // ATOMIC ACKNOWLEDGE: this requester never sends atomics.
            ctr.ghost_responses += 1;
            return Ok(());
        };
        match aeth.syndrome {
            Syndrome::Ack { .. } => {
                ctr.acks_received += 1;
                self.on_ack(now, psn, ctr)
            }
            Syndrome::RnrNak { timer } => {
                ctr.naks_received.rnr += 1;
                self.on_rnr_nak(now, psn, timer, ctr)
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                ctr.naks_received.psn_sequence += 1;
                self.on_sequence_nak(now, psn, ctr)
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

    /// Retires SEND/WRITE WQEs that end at or before `end` and moves `comp_psn` up to `end`,
    /// stopping at an incomplete READ.
    fn ack_before(&mut self, end: Psn) -> AckWalk {
        let mut walk = AckWalk::default();
        while let Some(head) = self.sq.front() {
            if !head.first_psn.before(end) {
                break;
            }
            if head.is_read() {
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

    /// Bookkeeping after `comp_psn` moved: retry counters, retransmit timer, cursor.
    fn on_progress(&mut self, now: Instant) {
        self.reset_retry_counters();
        if !self.outstanding() {
            self.retrans_timer.stop();
        } else if let Some(t) = ack_timeout_ns(self.rts.timeout) {
            if !self.rnr_timer.is_armed() {
                self.retrans_timer.arm(now.add_nanos(t));
            }
        }
        self.sync_cursor();
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
                return self.retry_on_nak(ctr);
            }
        }
        Ok(())
    }

    fn on_sequence_nak(
        &mut self,
        now: Instant,
        psn: Psn,
        ctr: &mut RcCounters,
    ) -> Result<(), Fatal> {
        let walk = self.ack_before(psn);
        if walk.progressed {
            self.on_progress(now);
        }
        if self.rnr_timer.is_armed() && psn == self.comp_psn {
            // Follows an RNR NAK for the same PSN: the RNR wait already covers it.
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
        self.rewind();
        self.retrans_timer.stop();
        self.rnr_timer.arm(now.add_nanos(rnr_delay_ns(timer)));
        Ok(())
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
        // A response implicitly acknowledges every earlier PSN.
        let walk = self.ack_before(psn);
        let mut progressed = walk.progressed;
        let Some(head) = self.sq.front() else {
            ctr.ghost_responses += 1;
            return Ok(());
        };
        if !head.is_read() {
            // The PSN belongs to a SEND/WRITE: not a valid READ response.
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
            result = self.retry_on_nak(ctr);
        } else {
            // Out of order inside the READ's range (a response was lost) or a duplicate.
            ctr.ghost_responses += 1;
        }
        if progressed && result.is_ok() {
            self.on_progress(now);
        }
        result
    }

    /// Completes the head READ, whose last response just arrived.
    fn complete_read_head(&mut self) {
        if let Some(e) = self.pop_head() {
            if e.wqe.signaled {
                let _ = self.cq.push_back(WorkCompletion {
                    wr_id: e.wqe.wr_id,
                    status: WcStatus::Success,
                    opcode: WcOpcode::RdmaRead,
                    byte_len: e.len,
                    imm_data: None,
                    qp_num: self.local_qpn,
                });
            }
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
        super::timer::earliest(self.retrans_timer.deadline(), self.rnr_timer.deadline())
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
        // RNR wait over: the cursor already points at the NAKed PSN; sending resumes.
        let _ = self.rnr_timer.expire(now);
        if self.retrans_timer.expire(now) && self.outstanding() && !self.rnr_timer.is_armed() {
            ctr.timeouts += 1;
            return self.retry(ctr);
        }
        Ok(())
    }
}
