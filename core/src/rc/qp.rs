//! [`RcQp`]: one Reliable Connected queue pair — requester, completer and responder glued
//! together behind a verbs-shaped, poll-driven API.

use super::completion::{WcOpcode, WcStatus, WorkCompletion};
use super::config::{QpState, RtrConfig, RtsConfig};
use super::counters::RcCounters;
use super::memory::MemoryAccess;
use super::packet::{max_packet_len, Path};
use super::requester::Requester;
use super::responder::{FatalNak, Responder};
use super::timer::Instant;
use super::wqe::{PostError, RecvWqe, SendWqe};
use super::Fatal;
use crate::wire::{Opcode, Psn, Transport, TransportRepr};

/// One RC queue pair's transport state, with fixed capacities: `SQ` send WQEs and `RQ` receive
/// WQEs (each including completions not yet polled).
///
/// The caller owns all I/O and time:
/// - feed every received, ICRC-verified packet to [`handle_packet`](Self::handle_packet);
/// - call [`poll_transmit`](Self::poll_transmit) until it returns `None` after every event
///   (post, packet, timeout), append the ICRC and send each packet;
/// - call [`handle_timeout`](Self::handle_timeout) once [`next_deadline`](Self::next_deadline)
///   has passed;
/// - drain [`poll_send_completion`](Self::poll_send_completion) and
///   [`poll_recv_completion`](Self::poll_recv_completion).
///
/// State machine: created in RTR (responder active), [`to_rts`](Self::to_rts) enables the
/// requester, any fatal error (or [`to_error`](Self::to_error)) moves to Error and flushes every
/// outstanding WQE with `WrFlushErr` (IBTA vol. 1 §10.3.1, §10.8.3.3).
#[derive(Debug)]
pub struct RcQp<const SQ: usize, const RQ: usize> {
    state: QpState,
    path: Path,
    rtr: RtrConfig,
    req: Requester<SQ>,
    resp: Responder<RQ>,
    counters: RcCounters,
}

impl<const SQ: usize, const RQ: usize> RcQp<SQ, RQ> {
    /// A QP in RTR with the given responder attributes: it accepts receive WQEs and incoming
    /// requests; the requester stays idle until [`to_rts`](Self::to_rts).
    pub fn new(rtr: RtrConfig) -> Self {
        let path = Path {
            local_qpn: rtr.local_qpn & 0x00ff_ffff,
            remote_qpn: rtr.remote_qpn & 0x00ff_ffff,
            mtu: rtr.path_mtu,
            pkey: rtr.pkey,
        };
        RcQp {
            state: QpState::Rtr,
            path,
            rtr,
            req: Requester::new(path.local_qpn, rtr.path_mtu),
            resp: Responder::new(
                path.local_qpn,
                rtr.path_mtu,
                rtr.rq_psn,
                rtr.min_rnr_timer,
                rtr.max_dest_rd_atomic,
            ),
            counters: RcCounters::default(),
        }
    }

    /// RTR→RTS: sets the requester attributes (first PSN, timers, retry counts, initiator
    /// depth). Ignored unless the QP is in RTR (the host validates transitions).
    pub fn to_rts(&mut self, rts: RtsConfig) {
        if self.state == QpState::Rtr {
            self.req.configure(rts);
            self.state = QpState::Rts;
        }
    }

    /// Moves the QP to Error: every queued send and receive WQE completes with `WrFlushErr`
    /// (in posting order), timers stop and nothing more is sent or accepted.
    pub fn to_error(&mut self) {
        self.enter_error();
    }

    fn enter_error(&mut self) {
        self.state = QpState::Error;
        self.req.flush();
        self.resp.flush();
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.state
    }

    /// The RTR attributes the QP was created with.
    pub fn rtr_config(&self) -> &RtrConfig {
        &self.rtr
    }

    /// The RTS attributes (meaningful once in RTS).
    pub fn rts_config(&self) -> &RtsConfig {
        &self.req.rts
    }

    /// Size in bytes of the buffer [`poll_transmit`](Self::poll_transmit) needs for any packet
    /// of this QP: path MTU + 35 (BTH 12, RETH 16, ImmDt 4, pad up to 3). No ICRC.
    pub fn max_packet_len(&self) -> usize {
        max_packet_len(self.path.mtu)
    }

    /// The PSN the requester sends next (new or retransmitted packet).
    pub fn sq_psn(&self) -> Psn {
        self.req.psn
    }

    /// The PSN the responder expects next (ePSN).
    pub fn rq_psn(&self) -> Psn {
        self.resp.epsn()
    }

    /// The responder's message sequence number (24 bits): messages completed.
    pub fn msn(&self) -> u32 {
        self.resp.msn()
    }

    /// Send WQEs posted and not yet completed.
    pub fn send_queue_len(&self) -> usize {
        self.req.sq.len()
    }

    /// Receive WQEs posted and not yet consumed.
    pub fn recv_queue_len(&self) -> usize {
        self.resp.rq.len()
    }

    /// Posts a send WQE (`ibv_post_send`). In Error the WQE completes at once with `WrFlushErr`.
    ///
    /// # Errors
    /// - [`PostError::InvalidState`] in RTR (sends need RTS);
    /// - [`PostError::QueueFull`] when `SQ` WQEs and unpolled send completions are held;
    /// - [`PostError::MessageTooLong`] when the SGEs add up to more than 2^31 bytes (or a READ
    ///   would reserve more than 2^22 PSNs).
    pub fn post_send(&mut self, wqe: SendWqe) -> Result<(), PostError> {
        match self.state {
            QpState::Rtr => Err(PostError::InvalidState),
            QpState::Rts => self.req.post(wqe),
            QpState::Error => self.req.flush_posted(&wqe),
        }
    }

    /// Posts a receive WQE (`ibv_post_recv`); accepted in RTR and RTS. In Error the WQE
    /// completes at once with `WrFlushErr`.
    ///
    /// # Errors
    /// [`PostError::QueueFull`] when `RQ` WQEs and unpolled receive completions are held.
    pub fn post_recv(&mut self, wqe: RecvWqe) -> Result<(), PostError> {
        if !self.resp.has_room() {
            return Err(PostError::QueueFull);
        }
        if self.state == QpState::Error {
            let _ = self.resp.cq.push_back(WorkCompletion {
                wr_id: wqe.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm_data: None,
                qp_num: self.path.local_qpn,
            });
            return Ok(());
        }
        self.resp
            .rq
            .push_back(wqe)
            .map_err(|_| PostError::QueueFull)
    }

    /// Writes the next packet to send into `buf` and returns its length, or `None` when nothing
    /// is ready (nothing posted, window full, waiting for an RNR delay, or `buf` shorter than
    /// [`max_packet_len`](Self::max_packet_len)).
    ///
    /// Responses (ACK/NAK, READ responses) come before requests (new or retransmitted). The
    /// packet is BTH + extended headers + payload + pad, with BTH.PadCnt set, P_Key and DestQP
    /// from the RTR attributes; no ICRC (the host appends it over its IP/UDP headers, IBTA
    /// vol. 1 Annex A17). Request payloads are gathered from the WQE's SGEs with
    /// `AccessKind::LocalRead`; a failure completes that WQE with `LocProtErr` and moves the
    /// QP to Error. READ response payloads are read with `AccessKind::RemoteRead`.
    pub fn poll_transmit<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<usize> {
        loop {
            match self
                .resp
                .poll_transmit(&self.path, mem, buf, &mut self.counters)
            {
                Ok(Some(n)) => return Some(n),
                Ok(None) => break,
                Err(nak) => self.responder_failed(nak),
            }
        }
        if self.state != QpState::Rts {
            return None;
        }
        match self
            .req
            .poll_transmit(now, &self.path, mem, buf, &mut self.counters)
        {
            Ok(n) => n,
            Err(Fatal) => {
                self.enter_error();
                None
            }
        }
    }

    fn responder_failed(&mut self, nak: FatalNak) {
        self.enter_error();
        self.resp.push_fatal_nak(nak);
    }

    /// Processes one received packet: `hdr` as parsed by [`TransportRepr::parse`], `payload`
    /// the bytes after the headers with the pad (BTH.PadCnt) and ICRC removed; the ICRC must
    /// already be verified.
    ///
    /// Packets for another QPN, with a non-matching P_Key, of another transport (UC/UD/CNP) or
    /// arriving in Error are counted in `dropped_packets` and ignored. Requests go to the
    /// responder (any state but Error), responses to the completer (RTS only).
    pub fn handle_packet<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        hdr: &TransportRepr,
        payload: &[u8],
        mem: &mut M,
    ) {
        self.counters.rx_packets += 1;
        self.counters.rx_payload_bytes += payload.len() as u64;
        let op = hdr.bth.opcode;
        if self.state == QpState::Error
            || !self.path.accepts(hdr)
            || op.transport() != Transport::Rc
            || op.header_set().is_none()
        {
            self.counters.dropped_packets += 1;
            return;
        }
        let is_response = op.is_read_response()
            || matches!(op, Opcode::RcAcknowledge | Opcode::RcAtomicAcknowledge);
        if is_response {
            if self.state != QpState::Rts {
                self.counters.dropped_packets += 1;
                return;
            }
            if self
                .req
                .handle_response(now, hdr, payload, mem, &mut self.counters)
                .is_err()
            {
                self.enter_error();
            }
        } else if let Err(nak) = self
            .resp
            .handle_request(hdr, payload, mem, &mut self.counters)
        {
            self.responder_failed(nak);
        }
    }

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) has work: the
    /// retransmit timer (4.096 µs · 2^timeout after the last progress while PSNs are
    /// unacknowledged) or the end of an RNR wait. `None` when no timer runs.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.state == QpState::Rts {
            self.req.next_deadline()
        } else {
            None
        }
    }

    /// Runs the timers that expired at `now`: an RNR wait ends (sending resumes); a retransmit
    /// timeout starts a go-back-N retry or, with no retry left, completes the oldest WQE with
    /// `RetryExcErr`, flushes the rest and moves the QP to Error.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state != QpState::Rts {
            return;
        }
        if self.req.handle_timeout(now, &mut self.counters).is_err() {
            self.enter_error();
        }
    }

    /// The oldest unpolled send completion (in posting order). Successful unsignaled WQEs
    /// produce none; errors always do.
    pub fn poll_send_completion(&mut self) -> Option<WorkCompletion> {
        self.req.cq.pop_front()
    }

    /// The oldest unpolled receive completion (in posting order).
    pub fn poll_recv_completion(&mut self) -> Option<WorkCompletion> {
        self.resp.cq.pop_front()
    }

    /// Transport counters.
    pub fn counters(&self) -> &RcCounters {
        &self.counters
    }
}

#[cfg(test)]
impl<const SQ: usize, const RQ: usize> RcQp<SQ, RQ> {
    /// Test hook: the requester's oldest unacknowledged PSN.
    pub(crate) fn comp_psn(&self) -> Psn {
        self.req.comp_psn
    }
}
