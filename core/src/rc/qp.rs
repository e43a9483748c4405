//! [`RcQp`]: one Reliable Connected queue pair — requester, completer and responder glued
//! together behind a verbs-shaped, poll-driven API.

use super::completion::{WcOpcode, WcStatus, WorkCompletion};
use super::config::{QpState, RtrConfig, RtsConfig};
use super::congestion::Congestion;
use super::counters::RcCounters;
use super::memory::MemoryAccess;
use super::packet::{max_packet_len, Path};
use super::recovery::Recovery;
use super::requester::Requester;
use super::responder::{FatalNak, Responder, WriteCursor};
use super::timer::{earliest, Instant};
use super::wqe::{PostError, RecvWqe, SendWqe};
use super::Fatal;
use crate::cc::{DcqcnConfig, Ecn, NpConfig, ReactionPoint};
use crate::wire::{cnp, CnpRepr, Opcode, Psn, Transport, TransportRepr};

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
///
/// Options: loss recovery ([`set_recovery`](Self::set_recovery), go-back-N by default), an
/// in-flight cap ([`set_max_inflight`](Self::set_max_inflight)), and congestion control: CE
/// marks passed to [`handle_packet_ecn`](Self::handle_packet_ecn) produce CNPs to collect with
/// [`poll_cnp`](Self::poll_cnp); CNPs received go to [`handle_cnp`](Self::handle_cnp), which
/// lowers the rate of the pacer once [`enable_dcqcn`](Self::enable_dcqcn) was called.
#[derive(Debug)]
pub struct RcQp<const SQ: usize, const RQ: usize> {
    state: QpState,
    path: Path,
    rtr: RtrConfig,
    req: Requester<SQ>,
    resp: Responder<RQ>,
    counters: RcCounters,
    cc: Congestion,
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
            cc: Congestion::new(),
        }
    }

    /// Chooses the loss recovery mode; both QPs of a connection must choose the same. Only
    /// allowed in RTR before any packet was received (returns `false` and changes nothing
    /// otherwise). Default: [`Recovery::GoBackN`].
    pub fn set_recovery(&mut self, recovery: Recovery) -> bool {
        if self.state != QpState::Rtr || self.counters.rx_packets != 0 {
            return false;
        }
        self.req.recovery = recovery;
        self.resp.set_recovery(recovery);
        true
    }

    /// The loss recovery mode.
    pub fn recovery(&self) -> Recovery {
        self.req.recovery
    }

    /// Caps the PSNs the requester keeps in flight (any state; clamped to 1..=128, the
    /// default 128 is [`MAX_UNACKED_PSNS`](super::MAX_UNACKED_PSNS)): in go-back-N the
    /// unacknowledged PSNs, in selective repeat the undelivered ones (unacknowledged and not
    /// held by the responder), up to [`SR_WINDOW`](super::SR_WINDOW) unacknowledged. Near one
    /// bandwidth-delay product ([`bdp_packets`](super::bdp_packets)) keeps queues short
    /// (IRN "BDP-FC"). Retransmissions are not held back by it.
    pub fn set_max_inflight(&mut self, packets: u32) {
        self.req.set_max_inflight(packets);
    }

    /// The in-flight cap in PSNs.
    pub fn max_inflight(&self) -> u32 {
        self.req.max_inflight
    }

    /// Sets the notification point's parameters (default: [`NpConfig::default`]).
    pub fn set_np_config(&mut self, cfg: NpConfig) {
        self.cc.set_np_config(cfg);
    }

    /// Enables the DCQCN reaction point and the pacer: data packets (requests and READ
    /// responses) leave at most at the DCQCN rate, starting at `cfg`'s maximum rate, with a
    /// token bucket `burst_bytes` deep (at least one [`max_packet_len`](Self::max_packet_len)
    /// is sensible; more lets the host's timer granularity be coarser). Replaces earlier
    /// DCQCN state.
    pub fn enable_dcqcn(&mut self, now: Instant, cfg: DcqcnConfig, burst_bytes: u32) {
        self.cc.enable(now, cfg, burst_bytes, &mut self.counters);
    }

    /// Disables DCQCN and pacing (CNPs received are then only counted).
    pub fn disable_dcqcn(&mut self) {
        self.cc.disable(&mut self.counters);
    }

    /// The DCQCN reaction point, when enabled: rate, target rate, α, stages.
    pub fn dcqcn(&self) -> Option<&ReactionPoint> {
        self.cc.reaction_point()
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

    /// The RDMA WRITE the responder is in the middle of, when the next in-sequence request
    /// would continue it (see [`WriteCursor`]); `None` otherwise. A request that arrives with
    /// `psn` = [`WriteCursor::psn`], opcode WRITE MIDDLE or LAST and `n` payload bytes (`n`
    /// < `remaining` for MIDDLE, `n` = `remaining` for LAST) is written at `va`.
    pub fn write_cursor(&self) -> Option<WriteCursor> {
        self.resp.write_cursor()
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
    ///
    /// With DCQCN enabled, data packets (requests, READ responses) wait for the pacer: they
    /// leave once the token bucket holds a full [`max_packet_len`](Self::max_packet_len)
    /// (or its whole depth, if smaller), and [`next_deadline`](Self::next_deadline) reports
    /// when that will be.
    #[inline]
    pub fn poll_transmit<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        mem: &mut M,
        buf: &mut [u8],
    ) -> Option<usize> {
        let paced_ok = self.cc.allows(now, self.max_packet_len() as u32);
        loop {
            let paced = self.resp.next_is_paced();
            if paced && !paced_ok {
                break;
            }
            match self
                .resp
                .poll_transmit(&self.path, mem, buf, &mut self.counters)
            {
                Ok(Some(n)) => {
                    if paced {
                        self.cc.on_sent(now, n, &mut self.counters);
                    }
                    return Some(n);
                }
                Ok(None) => break,
                Err(nak) => self.responder_failed(nak),
            }
        }
        if self.state != QpState::Rts || !paced_ok {
            return None;
        }
        match self
            .req
            .poll_transmit(now, &self.path, mem, buf, &mut self.counters)
        {
            Ok(Some(n)) => {
                self.cc.on_sent(now, n, &mut self.counters);
                Some(n)
            }
            Ok(None) => None,
            Err(Fatal) => {
                self.enter_error();
                None
            }
        }
    }

    /// Continues the request packet that [`poll_transmit`](Self::poll_transmit) just wrote
    /// into `buf[..len]` with up to `max` more full-MTU packets of the same RDMA WRITE, packet
    /// `j` (1 ..= `max`) at `buf[j * stride..j * stride + len]` (bytes; `stride - len` bytes
    /// between packets are left for the host's ICRC), and returns how many it wrote: what as
    /// many more `poll_transmit` calls would have written there, byte for byte, with the same
    /// state changes (window, PSN, AckReq cadence, counters, DCQCN pacing per packet). 0 when
    /// the next packet is not such a packet (the message's last one, another message, a
    /// resend), a response is waiting (responses go first), the QP is not in RTS, the window or
    /// the pacer holds it back, or the template is not the previous packet of the message at
    /// the cursor. A local buffer that cannot be read moves the QP to Error as in
    /// `poll_transmit`, and the packets of this call are then not to be sent (returns 0).
    #[inline]
    pub fn poll_transmit_run<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        mem: &mut M,
        buf: &mut [u8],
        len: usize,
        stride: usize,
        max: usize,
    ) -> usize {
        if self.state != QpState::Rts || self.resp.has_output() {
            return 0;
        }
        let paced = self.cc.pacer().is_some();
        let mut built = 0;
        while built < max {
            // With a pacer, one packet per call: each waits for the token bucket.
            let ask = if paced { 1 } else { max - built };
            if paced && !self.cc.allows(now, self.max_packet_len() as u32) {
                break;
            }
            let at = built * stride;
            let run = self.req.poll_transmit_run(
                now,
                mem,
                &mut buf[at..],
                len,
                stride,
                ask,
                &mut self.counters,
            );
            match run {
                Ok(0) => break,
                Ok(n) => {
                    for _ in 0..n {
                        self.cc.on_sent(now, len, &mut self.counters);
                    }
                    built += n;
                }
                Err(Fatal) => {
                    self.enter_error();
                    return 0;
                }
            }
        }
        built
    }

    /// Writes the pending CNP, if any, into `buf` and returns its length (28 bytes: BTH with
    /// opcode 0x81, BECN set, DestQP = the peer QP, P_Key of the QP, PSN 0, then 16 reserved
    /// zero bytes; no ICRC — the host appends it and sends the CNP like any RoCEv2 packet,
    /// IBTA Annex A17.9.3). `None` when no CNP is pending or `buf` is shorter than 28 bytes
    /// (the CNP then stays pending). The notification point generates at most one CNP per
    /// `min_time_between_cnps` from CE marks seen by
    /// [`handle_packet_ecn`](Self::handle_packet_ecn).
    pub fn poll_cnp(&mut self, buf: &mut [u8]) -> Option<usize> {
        if !self.cc.np.cnp_pending() || buf.len() < cnp::HEADER_LEN {
            return None;
        }
        self.cc.np.take_cnp();
        let repr = CnpRepr {
            dest_qp: self.path.remote_qpn,
            pkey: self.path.pkey,
        };
        repr.emit(&mut cnp::Packet::new_unchecked(&mut buf[..cnp::HEADER_LEN]));
        self.counters.cnps_sent += 1;
        Some(cnp::HEADER_LEN)
    }

    /// `true` while a CNP waits for [`poll_cnp`](Self::poll_cnp).
    pub fn cnp_pending(&self) -> bool {
        self.cc.np.cnp_pending()
    }

    /// A CNP addressed to this QP arrived at `now` (the host parsed BTH opcode 0x81 with this
    /// QP as DestQP): counted in `cnps_received`, and with DCQCN enabled the reaction point
    /// may cut the rate. [`handle_packet`](Self::handle_packet) routes CNPs here too.
    pub fn handle_cnp(&mut self, now: Instant) {
        if self.state != QpState::Error {
            self.cc.on_cnp(now, &mut self.counters);
        }
    }

    /// [`handle_packet`](Self::handle_packet) plus the packet's ECN codepoint (the low 2 bits
    /// of the IPv4 TOS / IPv6 Traffic Class it arrived with, e.g. from `IP_RECVTOS`): a CE
    /// mark (`0b11`) on a packet addressed to this QP is counted in `ce_marks_received` and
    /// may generate a CNP (see [`poll_cnp`](Self::poll_cnp)).
    #[inline]
    pub fn handle_packet_ecn<M: MemoryAccess + ?Sized>(
        &mut self,
        now: Instant,
        hdr: &TransportRepr,
        payload: &[u8],
        ecn: u8,
        mem: &mut M,
    ) {
        if Ecn::from_bits(ecn).is_ce()
            && self.state != QpState::Error
            && self.path.accepts(hdr)
            && hdr.bth.opcode != Opcode::Cnp
        {
            self.cc.on_ce(now, &mut self.counters);
        }
        self.handle_packet(now, hdr, payload, mem);
    }

    fn responder_failed(&mut self, nak: FatalNak) {
        self.enter_error();
        self.resp.push_fatal_nak(nak);
    }

    /// Processes one received packet: `hdr` as parsed by [`TransportRepr::parse`], `payload`
    /// the bytes after the headers with the pad (BTH.PadCnt) and ICRC removed; the ICRC must
    /// already be verified.
    ///
    /// Packets for another QPN, with a non-matching P_Key, of another transport (UC/UD) or
    /// arriving in Error are counted in `dropped_packets` and ignored. A CNP for this QP goes to
    /// [`handle_cnp`](Self::handle_cnp). Requests go to the responder (any state but Error),
    /// responses to the completer (RTS only). The packet counts as not ECN-marked; see
    /// [`handle_packet_ecn`](Self::handle_packet_ecn).
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
        if op == Opcode::Cnp && self.state != QpState::Error && self.path.accepts(hdr) {
            self.handle_cnp(now);
            return;
        }
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

    /// The earliest instant at which [`handle_timeout`](Self::handle_timeout) (then
    /// [`poll_transmit`](Self::poll_transmit)) has work: the retransmit timer (4.096 µs ·
    /// 2^timeout after the last progress while PSNs are unacknowledged), the end of an RNR
    /// wait, the DCQCN rate-increase timer, in selective repeat the re-READ timer and the
    /// end of a missing READ response's reorder window, or — while a data packet is ready
    /// but held back by the pacer — the instant the pacer lets it go. `None` when nothing is
    /// scheduled.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.state == QpState::Error {
            return None;
        }
        let rts = self.state == QpState::Rts;
        let mut d = if rts { self.req.next_deadline() } else { None };
        d = earliest(d, self.cc.next_deadline());
        // Without a pacer nothing waits for one: the requester's readiness (the window, the
        // queue, the READ depth) is not evaluated then.
        if self.cc.pacer().is_some() && (self.resp.next_is_paced() || (rts && self.req.ready())) {
            d = earliest(d, self.cc.conforming_at(self.max_packet_len() as u32));
        }
        d
    }

    /// Runs the timers that expired at `now`: an RNR wait ends (sending resumes); a retransmit
    /// timeout starts a retry (go-back-N rewind, or in selective repeat a resend of the oldest
    /// unacknowledged packet) or, with no retry left, completes the oldest WQE with
    /// `RetryExcErr`, flushes the rest and moves the QP to Error; DCQCN rate increases due by
    /// `now` run. The pacer needs no call: [`poll_transmit`](Self::poll_transmit) checks it.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.state == QpState::Error {
            return;
        }
        self.cc.handle_timeout(now, &mut self.counters);
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
