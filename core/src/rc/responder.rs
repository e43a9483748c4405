//! The RC responder: receive queue, expected-PSN tracking, execution of SEND / RDMA WRITE /
//! RDMA READ requests, and the ACK / NAK / READ response stream.
//!
//! Rules (IBTA vol. 1 §9.7.4 "Responder", §9.7.5.1; as implemented by Linux rxe_resp.c):
//! - PSN == ePSN: execute, ePSN += 1 (READ: += the PSNs it reserves); ACK with the request's PSN
//!   when AckReq is set. PSN ahead of ePSN: one NAK "PSN sequence error" carrying ePSN, then
//!   silent drops until ePSN arrives. PSN behind (duplicate): SEND/WRITE are not executed again
//!   but re-ACKed with ePSN − 1 (C9-105); a READ is replayed from the saved responder resource
//!   covering its PSN (ring of `max_dest_rd_atomic`).
//! - SEND and WRITE with immediate consume a receive WQE; none posted → RNR NAK with the
//!   packet's PSN and `min_rnr_timer`.
//! - R_Key, range and access are checked for the whole RETH range on the first packet
//!   (`MemoryAccess::check`) before anything is written; failure → NAK remote access error,
//!   QP to Error. Sequence, opcode and length violations → NAK invalid request, QP to Error.
//!   A SEND longer than the receive buffers → `LocLenErr` receive completion + NAK invalid request.
//! - MSN counts completed messages (a READ counts when accepted, C9-148) and is carried in every
//!   AETH; every ACK-kind AETH carries end-to-end credits (IBTA vol. 1 §9.7.7.2): the receive
//!   WQEs posted beyond the MSN, rounded down to a credit code (`aeth::credit_code_for`). rxe
//!   sends 0x1F ("invalid") instead and ignores the credits it receives.
//! - READ responses: ONLY, or FIRST/MIDDLE…/LAST, one PSN each from the request PSN; AETH on
//!   FIRST/LAST/ONLY; a zero-length READ is one READ_RESPONSE_ONLY without payload.
//! - Responses leave in PSN order: ACKs queued behind READ responses wait for them, so a
//!   cumulative ACK never overtakes an unanswered READ.
//! - Atomics (IBTA vol. 1 §9.4.5, rxe_resp.c): the target VA must be 8-byte aligned (else NAK
//!   invalid request); executed through `MemoryAccess::atomic` (R_Key/range/access failure → NAK
//!   remote access error); the original value is saved in a responder resource (shared ring with
//!   READs, `max_dest_rd_atomic`) and sent in an ATOMIC_ACKNOWLEDGE; a duplicate atomic is
//!   answered from the saved value without executing again.
//! - Selective repeat (`recovery.rs`): out-of-order packets within the window are kept —
//!   split RDMA_WRITE_ONLY and SEND packets placed at once (SENDs through their placement
//!   header), READ requests and atomics deferred — and retire through the in-order path when
//!   ePSN reaches them; while anything is held, NAKs carry a SACK block naming what is held.

use heapless::Deque;

use super::completion::{WcOpcode, WcStatus, WorkCompletion};
use super::counters::RcCounters;
use super::memory::{scatter, AccessKind, AtomicOp, MemError, MemoryAccess};
use super::mtu::Mtu;
use super::packet::{deque_get, emit_packet, Path};
use super::psn_bits::PsnBits;
use super::recovery::{Recovery, DUP_THRESH, SACK_EVERY, SR_WINDOW};
use super::wqe::{RecvWqe, MAX_MESSAGE_LEN};
use crate::wire::aeth::credit_code_for;
use crate::wire::{
    placement, sack, AethRepr, NakCode, Opcode, PlacementRepr, Psn, SackRepr, Syndrome,
    TransportRepr,
};

/// Most responder resources (saved RDMA READ and atomic requests) a QP keeps; `max_dest_rd_atomic` is
/// clamped to it. ConnectX HCAs report 16 (`max_qp_rd_atom`); rxe allows 128.
pub const MAX_RD_ATOMIC: usize = 16;

/// Capacity of the response queue: every saved READ plus an ACK/NAK between each, and as
/// many partial READ replays (selective repeat).
const RESP_QUEUE: usize = 4 * MAX_RD_ATOMIC + 8;

/// Largest MSN (24 bits).
const MSN_MASK: u32 = 0x00ff_ffff;

/// A NAK the responder sends while moving the QP to the Error state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FatalNak {
    pub(crate) psn: Psn,
    pub(crate) code: NakCode,
}

/// A saved RDMA READ or atomic request (IBTA "responder resource"; rxe `struct resp_res`).
#[derive(Debug, Clone, Copy, Default)]
struct ReadResource {
    /// Atomic: the original value the ATOMIC_ACKNOWLEDGE carries (`None` for a READ).
    atomic: Option<u64>,
    valid: bool,
    first_psn: Psn,
    npkts: u32,
    va: u64,
    rkey: u32,
    len: u32,
    /// MSN carried in the responses' AETH.
    msn: u32,
    /// Response packet (PSN offset) the current reply starts at (FIRST/ONLY there).
    start: u32,
    /// Next response packet to send.
    next: u32,
    /// A reply is queued or in progress.
    queued: bool,
    /// That reply answers a duplicate request (a replay).
    replay: bool,
}

/// One entry of the outgoing response stream, in PSN order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Response {
    /// ACKNOWLEDGE packet: an ACK, RNR NAK or NAK.
    Ack {
        psn: Psn,
        syndrome: Syndrome,
        msn: u32,
        /// Selective repeat: the SACK bitmap (PSNs held from `psn` on) this NAK carries.
        sack: Option<[u128; 2]>,
    },
    /// READ responses, or the ATOMIC ACKNOWLEDGE, of resource `slot`.
    Read { slot: usize },
    /// Selective repeat: READ response packets `next..end` of resource `slot` (a re-READ of
    /// the responses the requester misses; `start` is the first, which gets FIRST/ONLY).
    ReadPart {
        slot: usize,
        start: u32,
        next: u32,
        end: u32,
    },
}

/// A packet held beyond ePSN in selective repeat: its headers, and how many payload bytes were
/// already placed (SEND, split WRITE); READ requests and atomics are executed when ePSN
/// reaches them.
#[derive(Debug, Clone, Copy)]
struct HeldPkt {
    hdr: TransportRepr,
    len: u32,
}

/// The data of a request being executed: its bytes, or (retiring a held packet) how many
/// bytes were already placed.
#[derive(Debug, Clone, Copy)]
enum Data<'a> {
    Bytes(&'a [u8]),
    Placed(usize),
}

impl Data<'_> {
    fn len(&self) -> usize {
        match self {
            Data::Bytes(b) => b.len(),
            Data::Placed(n) => *n,
        }
    }
}

/// The multi-packet message in progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    /// Between messages: the next request must be FIRST/ONLY or a READ.
    Idle,
    /// A SEND into the head receive WQE; `offset` bytes written so far.
    Send { offset: u64 },
    /// An RDMA WRITE: next byte goes to `va`; `remaining` of `total` bytes still to come.
    Write {
        va: u64,
        rkey: u32,
        remaining: u32,
        total: u32,
    },
}

/// The RDMA WRITE a responder is in the middle of (after its FIRST packet): where the payload
/// of the next in-sequence request goes if that request continues it. A host that receives
/// into memory directly places WRITE MIDDLE/LAST payload here before handing the packets in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WriteCursor {
    /// The PSN expected next (ePSN).
    pub psn: Psn,
    /// R_Key of the WRITE (from its RETH; access already checked for the whole message).
    pub rkey: u32,
    /// Virtual address of the next payload byte.
    pub va: u64,
    /// Payload bytes of the message still to come.
    pub remaining: u32,
}

/// Responder state of one QP.
#[derive(Debug)]
pub(crate) struct Responder<const RQ: usize> {
    /// Posted receive WQEs; the front one is in use while a SEND is in progress.
    pub(crate) rq: Deque<RecvWqe, RQ>,
    /// Receive completions not yet polled (`rq.len() + cq.len() <= RQ`).
    pub(crate) cq: Deque<WorkCompletion, RQ>,
    local_qpn: u32,
    mtu: Mtu,
    min_rnr_timer: u8,
    max_dest_rd_atomic: usize,
    /// Expected PSN of the next request.
    epsn: Psn,
    /// Message sequence number (24 bits).
    msn: u32,
    /// A PSN sequence NAK (or RNR NAK) was sent; out-of-order requests are dropped silently
    /// until ePSN arrives (rxe `sent_psn_nak`).
    nak_sent: bool,
    msg: Message,
    resources: [ReadResource; MAX_RD_ATOMIC],
    /// Ring index of the next resource to (re)use.
    res_next: usize,
    out: Deque<Response, RESP_QUEUE>,
    /// Loss recovery mode (fixed before any request arrives).
    recovery: Recovery,
    /// Selective repeat: PSNs held beyond ePSN (placed, or deferred READ/atomic with the
    /// PSNs they reserve).
    held: PsnBits,
    /// Selective repeat: the held packets, by `psn % SR_WINDOW`.
    held_pkts: [Option<HeldPkt>; SR_WINDOW as usize],
    /// Receive WQEs consumed so far (wrapping): the receive sequence number of `rq.front()`.
    recv_consumed: u32,
    /// Selective repeat: PSNs held since the last SACK was queued.
    held_since_sack: u32,
    /// Selective repeat: the first PSN held beyond a hole that opened above the held packets
    /// (the packet that opened it) and that no SACK with [`DUP_THRESH`] PSNs held from it on
    /// has shown yet: the SACK that lets the requester count that hole as lost is due once
    /// the highest held PSN is `DUP_THRESH - 1` beyond it.
    gap_at: Option<Psn>,
    /// Selective repeat: since ePSN last moved, a packet within the window arrived that could
    /// not be held and a NAK without SACK block went out for it (see `out_of_order`).
    unheld_nak_sent: bool,
}

/// Outcome of executing one in-sequence request.
type Exec = Result<(), FatalNak>;

impl<const RQ: usize> Responder<RQ> {
    /// The WRITE in progress, when the next in-sequence packet would continue it: `None`
    /// between messages, after a NAK, and while selective repeat holds packets past ePSN
    /// (their bytes may already be placed further on).
    pub(crate) fn write_cursor(&self) -> Option<WriteCursor> {
        if self.nak_sent || self.held.bits() != [0; 2] {
            return None;
        }
        match self.msg {
            Message::Write {
                va,
                rkey,
                remaining,
                ..
            } => Some(WriteCursor {
                psn: self.epsn,
                rkey,
                va,
                remaining,
            }),
            _ => None,
        }
    }

    pub(crate) fn new(
        local_qpn: u32,
        mtu: Mtu,
        rq_psn: Psn,
        min_rnr_timer: u8,
        max_dest_rd_atomic: u8,
    ) -> Self {
        Responder {
            rq: Deque::new(),
            cq: Deque::new(),
            local_qpn,
            mtu,
            min_rnr_timer: min_rnr_timer & 0x1f,
            max_dest_rd_atomic: (max_dest_rd_atomic as usize).min(MAX_RD_ATOMIC),
            epsn: rq_psn,
            msn: 0,
            nak_sent: false,
            msg: Message::Idle,
            resources: [ReadResource::default(); MAX_RD_ATOMIC],
            res_next: 0,
            out: Deque::new(),
            recovery: Recovery::GoBackN,
            held: PsnBits::default(),
            held_pkts: [None; SR_WINDOW as usize],
            recv_consumed: 0,
            held_since_sack: 0,
            gap_at: None,
            unheld_nak_sent: false,
        }
    }

    fn selective(&self) -> bool {
        self.recovery == Recovery::Selective
    }

    /// Sets the loss recovery mode (before traffic).
    pub(crate) fn set_recovery(&mut self, recovery: Recovery) {
        self.recovery = recovery;
        self.held.advance(self.epsn);
        self.held.clear();
        self.held_pkts = [None; SR_WINDOW as usize];
    }

    /// Whether a response (ACK, NAK, READ response, atomic ACK) waits to be sent.
    pub(crate) fn has_output(&self) -> bool {
        !self.out.is_empty()
    }

    /// `true` when the next response to send carries READ data (subject to pacing); ACKs,
    /// NAKs and atomic ACKs are not paced.
    pub(crate) fn next_is_paced(&self) -> bool {
        match self.out.front() {
            Some(Response::Read { slot }) => self.resources[*slot].atomic.is_none(),
            Some(Response::ReadPart { .. }) => true,
            _ => false,
        }
    }

    /// The PSN the responder expects next.
    pub(crate) fn epsn(&self) -> Psn {
        self.epsn
    }

    /// The current MSN.
    pub(crate) fn msn(&self) -> u32 {
        self.msn
    }

    /// Room for one more receive WQE, counting completions not yet polled.
    pub(crate) fn has_room(&self) -> bool {
        self.rq.len() + self.cq.len() < RQ
    }

    fn push_recv_completion(&mut self, wc: WorkCompletion) {
        // Cannot fail: the WQE's slot is accounted in `has_room`.
        let _ = self.cq.push_back(wc);
    }

    /// Pops the head receive WQE and completes it.
    fn complete_recv(
        &mut self,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
    ) {
        if let Some(r) = self.rq.pop_front() {
            self.recv_consumed = self.recv_consumed.wrapping_add(1);
            self.push_recv_completion(WorkCompletion {
                wr_id: r.wr_id,
                status,
                opcode,
                byte_len: if status == WcStatus::Success {
                    byte_len
                } else {
                    0
                },
                imm_data: if status == WcStatus::Success {
                    imm
                } else {
                    None
                },
                qp_num: self.local_qpn,
            });
        }
    }

    /// Flushes every receive WQE with `WrFlushErr` and forgets all transport state (QP to Error).
    pub(crate) fn flush(&mut self) {
        while let Some(r) = self.rq.pop_front() {
            self.push_recv_completion(WorkCompletion {
                wr_id: r.wr_id,
                status: WcStatus::WrFlushErr,
                opcode: WcOpcode::Recv,
                byte_len: 0,
                imm_data: None,
                qp_num: self.local_qpn,
            });
        }
        self.out.clear();
        self.msg = Message::Idle;
        for r in self.resources.iter_mut() {
            r.valid = false;
            r.queued = false;
        }
        self.held.clear();
        self.held_pkts = [None; SR_WINDOW as usize];
    }

    /// Queues the NAK that accompanies the move to Error.
    pub(crate) fn push_fatal_nak(&mut self, nak: FatalNak) {
        let _ = self.out.push_back(Response::Ack {
            psn: nak.psn,
            syndrome: Syndrome::Nak(nak.code),
            msn: self.msn,
            sack: None,
        });
    }

    /// The ACK syndrome with this QP's end-to-end credits (IBTA vol. 1 §9.7.7.2): the receive
    /// WQEs posted and not yet consumed in sequence, rounded down to a credit code. Every
    /// ACK-kind AETH carries it — ACKNOWLEDGE, READ response first/last/only, ATOMIC
    /// ACKNOWLEDGE — so that a requester never reads 0x1F ("no flow control") from rdmesh.
    pub(crate) fn ack_syndrome(&self) -> Syndrome {
        Syndrome::Ack {
            credit: credit_code_for(self.rq.len() as u32),
        }
    }

    /// Queues an ACK/NAK, merging it into a trailing ACK (ACKs are cumulative). An ACK's
    /// `syndrome` is [`Self::ack_syndrome`], built by the caller just before.
    fn push_ack(&mut self, psn: Psn, syndrome: Syndrome) {
        let item = Response::Ack {
            psn,
            syndrome,
            msn: self.msn,
            sack: None,
        };
        if syndrome.is_ack() {
            if let Some(Response::Ack { syndrome: s, .. }) = self.out.back() {
                if s.is_ack() {
                    self.out.pop_back();
                }
            }
        }
        let _ = self.out.push_back(item);
    }

    /// Selective repeat: queues a NAK "PSN sequence error" for ePSN with a SACK block of the
    /// held PSNs, replacing a trailing ACK or SACK (both are cumulative and older).
    fn push_sack(&mut self) {
        self.held.advance(self.epsn);
        self.held_since_sack = 0;
        self.nak_sent = true;
        if let Some(Response::Ack { syndrome, sack, .. }) = self.out.back() {
            if syndrome.is_ack() || sack.is_some() {
                self.out.pop_back();
            }
        }
        // Bit 0 (ePSN) stays clear: a packet held there waits for its resend (RNR).
        let mut bits = self.held.bits();
        bits[0] &= !1;
        let _ = self.out.push_back(Response::Ack {
            psn: self.epsn,
            syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
            msn: self.msn,
            sack: Some(bits),
        });
    }

    fn fatal(psn: Psn, code: NakCode) -> Exec {
        Err(FatalNak { psn, code })
    }

    /// Processes one request packet addressed to this QP (any state but Error).
    ///
    /// # Errors
    /// [`FatalNak`]: the QP must go to Error and send that NAK; a receive WQE involved has
    /// already been completed with its error status.
    pub(crate) fn handle_request<M: MemoryAccess + ?Sized>(
        &mut self,
        hdr: &TransportRepr,
        payload: &[u8],
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Exec {
        if self.out.is_full() {
            // No room to answer: behave as if the packet was lost (the requester retries).
            ctr.dropped_packets += 1;
            return Ok(());
        }
        let psn = hdr.bth.psn;
        let d = psn.diff(self.epsn);
        let selective = self.selective();
        // Selective repeat: every SEND packet starts with a placement header.
        let (payload, placement) = if selective && hdr.bth.opcode.is_send() {
            match placement::Packet::new_checked(payload) {
                Ok(p) => (p.payload(), PlacementRepr::parse(&p).ok()),
                Err(_) if d == 0 => return Self::fatal(psn, NakCode::InvalidRequest),
                Err(_) => {
                    ctr.dropped_packets += 1;
                    return Ok(());
                }
            }
        } else {
            (payload, None)
        };
        if d > 0 {
            if selective {
                return self.out_of_order(hdr, payload, placement, d as u32, mem, ctr);
            }
            ctr.out_of_sequence_requests += 1;
            if !self.nak_sent {
                self.nak_sent = true;
                self.push_ack(self.epsn, Syndrome::Nak(NakCode::PsnSequenceError));
            }
            return Ok(());
        }
        if d < 0 {
            ctr.duplicate_requests += 1;
            match hdr.bth.opcode {
                Opcode::RcRdmaReadRequest => self.replay_read(hdr, ctr),
                Opcode::RcCompareSwap | Opcode::RcFetchAdd => self.replay_atomic(hdr, ctr),
                _ if selective && self.held.first_from(self.epsn).is_some() => self.push_sack(),
                _ => self.push_ack(self.epsn.sub(1), self.ack_syndrome()),
            }
            return Ok(());
        }
        if selective {
            // The resend of a held packet that could not execute in sequence (RNR, see
            // `retire_held`): its data is already in place.
            self.held.advance(self.epsn);
            let slot = (psn.value() % SR_WINDOW) as usize;
            if self.held.contains(psn) {
                if let Some(h) = self.held_pkts[slot].filter(|h| h.hdr.bth.psn == psn) {
                    self.held_pkts[slot] = None;
                    self.execute(&h.hdr, Data::Placed(h.len as usize), mem)?;
                    if self.epsn == psn {
                        // RNR again: still held.
                        self.held_pkts[slot] = Some(h);
                        return Ok(());
                    }
                    return self.retire_held(mem);
                }
            }
        }
        self.execute(hdr, Data::Bytes(payload), mem)?;
        if selective {
            return self.retire_held(mem);
        }
        Ok(())
    }

    /// Selective repeat: a request ahead of ePSN. Kept when it can be (see [`Self::hold`]);
    /// a second copy of a held packet is dropped. A SACK is queued when it tells the
    /// requester something it acts on (IRN, Mittal et al. SIGCOMM 2018 §3.2: the receiver's
    /// NACK/SACK drives loss recovery; RFC 6675 §5's DupThresh):
    /// - on the first out-of-order arrival after ePSN moved (the hole at ePSN);
    /// - once the highest held PSN is [`DUP_THRESH`] − 1 beyond the packet that opened a
    ///   hole (the hole at ePSN, or a new one above the held packets): from that SACK the
    ///   requester counts the hole as lost and resends it;
    /// - for a packet below the highest held PSN (a resend filling a hole, or a reordered
    ///   packet): the requester learns at once that its resend arrived;
    /// - every [`SACK_EVERY`] PSNs held since the last SACK, so that what the responder
    ///   holds leaves the requester's in-flight count at about the loss-free ACK cadence.
    ///
    /// Not for every AckReq packet beyond the held ones (until 2026-11-26 each one drew a
    /// SACK: a 64 KiB WRITE or SEND stream asks for an ACK at every message end, 16 packets,
    /// so a loss episode drew a SACK per 16 packets held — 4.3–4.8 SACKs per lost packet at
    /// 1 % loss, each a datagram and a wake-up through both hosts).
    fn out_of_order<M: MemoryAccess + ?Sized>(
        &mut self,
        hdr: &TransportRepr,
        payload: &[u8],
        placement: Option<PlacementRepr>,
        d: u32,
        mem: &mut M,
        ctr: &mut RcCounters,
    ) -> Exec {
        let psn = hdr.bth.psn;
        self.held.advance(self.epsn);
        if self.held.contains(psn) {
            ctr.duplicate_requests += 1;
            ctr.duplicates_dropped += 1;
            return Ok(());
        }
        ctr.out_of_sequence_requests += 1;
        // One past the highest PSN held (ePSN when nothing is): what arrives above it opens
        // a hole, what arrives below it fills one.
        let top = match self.held.highest() {
            Some(h) => h.add(1),
            None => {
                self.gap_at = None;
                self.epsn
            }
        };
        let mut unheld = false;
        let mut fills = false;
        let mut gap_due = false;
        if d < SR_WINDOW {
            let span = self.hold(hdr, payload, placement, d, mem);
            if span > 0 {
                ctr.out_of_order_placed += 1;
                // PSNs, as the requester counts what is in flight (a READ request holds
                // its whole reservation).
                self.held_since_sack += span;
                // A hole opened earlier may be revealed by this packet, the one it opens
                // (a READ reserving DUP_THRESH PSNs) too.
                gap_due = self.gap_at.is_some_and(|g| self.gap_revealed(g));
                if psn.before(top) {
                    fills = true;
                } else if psn.after(top) {
                    self.gap_at = Some(psn);
                    gap_due |= self.gap_revealed(psn);
                }
            } else {
                unheld = true;
            }
        }
        if !self.nak_sent || gap_due || fills || self.held_since_sack >= SACK_EVERY {
            if self.gap_at.is_some_and(|g| self.gap_revealed(g)) {
                self.gap_at = None;
            }
            self.push_sack();
        }
        if unheld && !self.unheld_nak_sent {
            // Dropped a packet the requester sent after the hole: tell it at once (a NAK
            // without SACK block, after the SACK), so it resends from the hole everything
            // not held — go-back-N over what could not be kept — instead of waiting for the
            // timer (nothing held beyond the hole would reveal the loss).
            self.unheld_nak_sent = true;
            let _ = self.out.push_back(Response::Ack {
                psn: self.epsn,
                syndrome: Syndrome::Nak(NakCode::PsnSequenceError),
                msn: self.msn,
                sack: None,
            });
        }
        Ok(())
    }

    /// Selective repeat: whether a SACK now shows the hole below `gap_at` (the first PSN held
    /// after it) as lost to the requester — something held [`DUP_THRESH`] PSNs beyond the
    /// hole's last PSN, `gap_at - 1` (the requester's rule, `Requester::detect_losses`).
    fn gap_revealed(&self, gap_at: Psn) -> bool {
        match self.held.highest() {
            Some(h) if gap_at.after(self.epsn) && !h.before(gap_at) => {
                h.distance_from(gap_at) + 1 >= DUP_THRESH
            }
            _ => false,
        }
    }

    /// Selective repeat: keeps the out-of-order request `hdr` (`d` PSNs ahead of ePSN):
    /// places a split RDMA_WRITE_ONLY at its RETH address or a SEND packet in the receive WQE
    /// its placement header names, or defers a READ request / atomic to be executed in order.
    /// Returns the PSNs it now holds (a READ's whole reservation, else 1); 0 (nothing
    /// changed) when it cannot: any other opcode, a check that fails (it is then judged again
    /// in sequence), a receive WQE not posted yet, a READ reserving PSNs beyond the window.
    fn hold<M: MemoryAccess + ?Sized>(
        &mut self,
        hdr: &TransportRepr,
        payload: &[u8],
        placement: Option<PlacementRepr>,
        d: u32,
        mem: &mut M,
    ) -> u32 {
        let op = hdr.bth.opcode;
        let span = match op {
            Opcode::RcRdmaWriteOnly | Opcode::RcRdmaWriteOnlyWithImmediate => {
                if !self.place_write_only(hdr, payload, mem) {
                    return 0;
                }
                1
            }
            Opcode::RcSendFirst
            | Opcode::RcSendMiddle
            | Opcode::RcSendLast
            | Opcode::RcSendLastWithImmediate
            | Opcode::RcSendOnly
            | Opcode::RcSendOnlyWithImmediate => {
                let Some(pl) = placement else {
                    return 0;
                };
                if !self.place_send(op, pl, payload, mem) {
                    return 0;
                }
                1
            }
            Opcode::RcRdmaReadRequest => match hdr.reth {
                Some(reth) if reth.dma_len as u64 <= MAX_MESSAGE_LEN => {
                    let n = self.mtu.packets(reth.dma_len);
                    if d.saturating_add(n) > SR_WINDOW {
                        return 0;
                    }
                    n
                }
                _ => return 0,
            },
            Opcode::RcCompareSwap | Opcode::RcFetchAdd if hdr.atomic_eth.is_some() => 1,
            _ => return 0,
        };
        let psn = hdr.bth.psn;
        for i in 0..span {
            self.held.insert(psn.add(i));
        }
        self.held_pkts[(psn.value() % SR_WINDOW) as usize] = Some(HeldPkt {
            hdr: *hdr,
            len: payload.len() as u32,
        });
        span
    }

    /// Selective repeat: places an out-of-order SEND packet's data in the receive WQE its
    /// placement header names, at its offset. `false` (nothing written) when that WQE is not
    /// posted, the data does not fit, or the length breaks the opcode's rule.
    fn place_send<M: MemoryAccess + ?Sized>(
        &self,
        op: Opcode,
        pl: PlacementRepr,
        data: &[u8],
        mem: &mut M,
    ) -> bool {
        if !self.length_ok(op, data.len()) {
            return false;
        }
        let idx = pl.recv_seq.wrapping_sub(self.recv_consumed) as usize;
        let Some(recv) = deque_get(&self.rq, idx) else {
            return false;
        };
        if pl.offset as u64 + data.len() as u64 > recv.length() {
            return false;
        }
        data.is_empty() || scatter(mem, &recv.sg_list, pl.offset as u64, data).is_ok()
    }

    /// Executes the in-sequence request `hdr` (PSN == ePSN).
    fn execute<M: MemoryAccess + ?Sized>(
        &mut self,
        hdr: &TransportRepr,
        payload: Data<'_>,
        mem: &mut M,
    ) -> Exec {
        let psn = hdr.bth.psn;
        self.nak_sent = false;
        self.unheld_nak_sent = false;
        let op = hdr.bth.opcode;
        let in_send = matches!(self.msg, Message::Send { .. });
        let in_write = matches!(self.msg, Message::Write { .. });
        let idle = self.msg == Message::Idle;
        // Opcode sequence (IBTA vol. 1 §9.7.4.1.3, C9-88 ff.): FIRST/ONLY only between messages,
        // MIDDLE/LAST only continuing a message of the same kind.
        let seq_ok = if op.is_send() {
            if op.is_first() || op.is_only() {
                idle
            } else {
                in_send
            }
        } else if op.is_write() {
            if op.is_first() || op.is_only() {
                idle
            } else {
                in_write
            }
        } else {
            idle
        };
        if !seq_ok {
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        match op {
            Opcode::RcSendFirst
            | Opcode::RcSendMiddle
            | Opcode::RcSendLast
            | Opcode::RcSendLastWithImmediate
            | Opcode::RcSendOnly
            | Opcode::RcSendOnlyWithImmediate => self.exec_send(hdr, payload, mem),
            Opcode::RcRdmaWriteFirst
            | Opcode::RcRdmaWriteMiddle
            | Opcode::RcRdmaWriteLast
            | Opcode::RcRdmaWriteLastWithImmediate
            | Opcode::RcRdmaWriteOnly
            | Opcode::RcRdmaWriteOnlyWithImmediate => self.exec_write(hdr, payload, mem),
            Opcode::RcRdmaReadRequest => self.exec_read(hdr, mem),
            Opcode::RcCompareSwap | Opcode::RcFetchAdd => self.exec_atomic(hdr, mem),
            // SEND with invalidate, FLUSH, ATOMIC WRITE: not supported by this responder.
            _ => Self::fatal(psn, NakCode::InvalidRequest),
        }
    }

    /// Selective repeat: checks and places an out-of-order RDMA_WRITE_ONLY at its RETH address
    /// (the last packet of a split WRITE with immediate at the end of its RETH's range; the
    /// receive WQE is consumed when it retires in sequence), under the ordering rule of [`Self::write_ordered`]. `false` (nothing
    /// written) when anything is wrong with it; it is then handled like any lost packet and
    /// judged again when it arrives in sequence.
    fn place_write_only<M: MemoryAccess + ?Sized>(
        &self,
        hdr: &TransportRepr,
        payload: &[u8],
        mem: &mut M,
    ) -> bool {
        let Some(reth) = hdr.reth else {
            return false;
        };
        if payload.len() > self.mtu.bytes() as usize
            || (payload.len() as u32 != reth.dma_len && !self.split_imm_tail(hdr, payload.len()))
        {
            return false;
        }
        if hdr.imm.is_some()
            && reth.dma_len > 0
            && mem
                .check(
                    reth.rkey,
                    reth.va,
                    u64::from(reth.dma_len),
                    AccessKind::RemoteWrite,
                )
                .is_err()
        {
            // The whole message's range, as in sequence (judged again there).
            return false;
        }
        let va = reth
            .va
            .wrapping_add(u64::from(reth.dma_len) - payload.len() as u64);
        // The write checks key, range and access before copying anything.
        payload.is_empty()
            || self
                .write_ordered(mem, hdr.bth.psn, reth.rkey, va, payload)
                .is_ok()
    }

    /// Selective repeat: `hdr` is the last packet of a split RDMA WRITE with immediate — an
    /// RDMA_WRITE_ONLY_WITH_IMMEDIATE whose RETH names the whole message (DMA length = the
    /// message length, which the receive completion reports) and whose payload is the
    /// message's last `len` bytes (1..=PMTU, or the whole of a one-packet message).
    fn split_imm_tail(&self, hdr: &TransportRepr, len: usize) -> bool {
        let mtu = self.mtu.bytes() as u64;
        self.selective()
            && hdr.bth.opcode == Opcode::RcRdmaWriteOnlyWithImmediate
            && hdr.reth.is_some_and(|r| {
                let total = u64::from(r.dma_len);
                let last = total - (total.saturating_sub(1) / mtu) * mtu;
                total > mtu && len as u64 == last
            })
    }

    /// Writes the payload of the WRITE packet at `psn` to `(rkey, va)`, leaving out the bytes
    /// that a *later* packet the responder holds (a placed RDMA_WRITE_ONLY with the same
    /// R_Key) already wrote: in PSN order those bytes would have been overwritten by that
    /// later packet, so memory ends as if every packet had been executed in order — an
    /// earlier WRITE, or its resend, never undoes a later overlapping one. With nothing held
    /// after `psn` (every loss-free packet) this is one `MemoryAccess::write`.
    ///
    /// # Errors
    /// The [`MemError`] of the R_Key / range / access check of the whole range (made first
    /// when a part is left out) or of a write.
    fn write_ordered<M: MemoryAccess + ?Sized>(
        &self,
        mem: &mut M,
        psn: Psn,
        rkey: u32,
        va: u64,
        data: &[u8],
    ) -> Result<(), MemError> {
        let end = va.saturating_add(data.len() as u64);
        if self.held.first_from(psn.add(1)).is_none() {
            return mem.write(rkey, va, data, AccessKind::RemoteWrite);
        }
        // The held packets after `psn`, as one bitmap walk.
        let later_held = self.held.mask_from(psn.add(1));
        // From byte `from`: how far later held packets cover it, and where the next one starts.
        let later = |from: u64| -> (u64, u64) {
            let (mut covered, mut next) = (from, end);
            for q in later_held.ones().map(|i| psn.add(1 + i)) {
                if let Some(h) = &self.held_pkts[(q.value() % SR_WINDOW) as usize] {
                    match h.hdr.reth {
                        Some(r)
                            if h.hdr.bth.psn == q
                                && matches!(
                                    h.hdr.bth.opcode,
                                    Opcode::RcRdmaWriteOnly | Opcode::RcRdmaWriteOnlyWithImmediate
                                )
                                && r.rkey == rkey =>
                        {
                            // Its bytes end the RETH's range (all of it but for the last
                            // packet of a split WRITE with immediate).
                            let a1 = r.va.saturating_add(u64::from(r.dma_len));
                            let a0 = a1.saturating_sub(h.len as u64);
                            if a0 <= from && from < a1 {
                                covered = covered.max(a1);
                                if covered >= end {
                                    // Nothing from `from` on is written: `next` is moot.
                                    // (A resend into a buffer that later held WRITEs
                                    // rewrote — every message of a cycle buffer — stops
                                    // at the first of them, not after all held packets.)
                                    break;
                                }
                            } else if a0 > from && a0 < next {
                                next = a0;
                            }
                        }
                        _ => {}
                    }
                }
            }
            (covered, next)
        };
        let first = later(va);
        if first == (va, end) {
            return mem.write(rkey, va, data, AccessKind::RemoteWrite);
        }
        mem.check(rkey, va, data.len() as u64, AccessKind::RemoteWrite)?;
        let mut from = va;
        let mut known = Some(first);
        while from < end {
            let (covered, next) = known.take().unwrap_or_else(|| later(from));
            if covered > from {
                from = covered;
                continue;
            }
            let off = (from - va) as usize;
            let n = (next - from) as usize;
            mem.write(rkey, from, &data[off..off + n], AccessKind::RemoteWrite)?;
            from = next;
        }
        Ok(())
    }

    /// Selective repeat, after an in-sequence request: executes the held packets ePSN now
    /// reaches, in order (placed data is not written again), then answers: a SACK for the new
    /// ePSN (once) when later packets are still held — another hole — else an ACK up to the
    /// new ePSN when anything retired (whether or not those packets asked for one: the
    /// requester learns at once that the hole closed).
    fn retire_held<M: MemoryAccess + ?Sized>(&mut self, mem: &mut M) -> Exec {
        if self.held.is_empty() {
            // Nothing held (every packet of a loss-free run): nothing to retire or report.
            return Ok(());
        }
        let mut retired = false;
        loop {
            self.held.advance(self.epsn);
            if !self.held.contains(self.epsn) {
                break;
            }
            let slot = (self.epsn.value() % SR_WINDOW) as usize;
            match self.held_pkts[slot].take() {
                Some(h) if h.hdr.bth.psn == self.epsn => {
                    let data = if h.hdr.bth.opcode.is_send() || h.hdr.bth.opcode.is_write() {
                        Data::Placed(h.len as usize)
                    } else {
                        Data::Bytes(&[])
                    };
                    self.execute(&h.hdr, data, mem)?;
                    retired = true;
                    if self.epsn == h.hdr.bth.psn {
                        // Not executed (RNR: a WRITE with immediate before its receive WQE).
                        // It stays held, its data placed; the resend after the RNR wait
                        // executes it without writing it again, and what is held behind it
                        // stays too (what the requester was told by SACKs remains true).
                        self.held_pkts[slot] = Some(h);
                        break;
                    }
                }
                _ => {
                    self.held.remove(self.epsn);
                    break;
                }
            }
        }
        self.held.advance(self.epsn);
        if self.held.first_from(self.epsn).is_some() {
            if !self.nak_sent {
                self.push_sack();
            }
        } else if retired {
            self.gap_at = None;
            self.push_ack(self.epsn.sub(1), self.ack_syndrome());
        }
        Ok(())
    }

    /// Payload length rule (rxe_resp.c `check_length`): FIRST/MIDDLE exactly PMTU, LAST
    /// 1..=PMTU, ONLY 0..=PMTU.
    fn length_ok(&self, op: Opcode, len: usize) -> bool {
        let mtu = self.mtu.bytes() as usize;
        if op.is_first() || op.is_middle() {
            len == mtu
        } else if op.is_last() {
            (1..=mtu).contains(&len)
        } else {
            len <= mtu
        }
    }

    /// RNR NAK for a request that needs a receive WQE when none is posted. Like a PSN NAK, later
    /// out-of-order packets are then dropped silently until the NAKed PSN is resent.
    fn rnr_nak(&mut self, psn: Psn) -> Exec {
        self.nak_sent = true;
        self.push_ack(
            psn,
            Syndrome::RnrNak {
                timer: self.min_rnr_timer,
            },
        );
        Ok(())
    }

    /// Finishes an in-sequence SEND/WRITE packet: ePSN, and the ACK it asked for.
    fn advance(&mut self, hdr: &TransportRepr) {
        self.epsn = hdr.bth.psn.add(1);
        if hdr.bth.ack_req {
            self.push_ack(hdr.bth.psn, self.ack_syndrome());
        }
    }

    fn bump_msn(&mut self) {
        self.msn = (self.msn + 1) & MSN_MASK;
    }

    fn exec_send<M: MemoryAccess + ?Sized>(
        &mut self,
        hdr: &TransportRepr,
        payload: Data<'_>,
        mem: &mut M,
    ) -> Exec {
        let op = hdr.bth.opcode;
        let psn = hdr.bth.psn;
        let starts = op.is_first() || op.is_only();
        let ends = op.is_last() || op.is_only();
        if starts && self.rq.is_empty() {
            return self.rnr_nak(psn);
        }
        if !self.length_ok(op, payload.len()) {
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        let offset = match self.msg {
            Message::Send { offset } => offset,
            _ => 0,
        };
        let Some(recv) = self.rq.front() else {
            return Self::fatal(psn, NakCode::InvalidRequest);
        };
        let end = offset + payload.len() as u64;
        if end > MAX_MESSAGE_LEN {
            // A message over 2^31 bytes (IBTA vol. 1 §9.4.1): not a valid request.
            self.complete_recv(WcStatus::LocLenErr, WcOpcode::Recv, 0, None);
            self.msg = Message::Idle;
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        if end > recv.length() {
            self.complete_recv(WcStatus::LocLenErr, WcOpcode::Recv, 0, None);
            self.msg = Message::Idle;
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        let scattered = match payload {
            Data::Bytes(b) => scatter(mem, &recv.sg_list, offset, b),
            Data::Placed(_) => Ok(()),
        };
        if scattered.is_err() {
            self.complete_recv(WcStatus::LocProtErr, WcOpcode::Recv, 0, None);
            self.msg = Message::Idle;
            return Self::fatal(psn, NakCode::RemoteOperationalError);
        }
        let offset = end;
        if ends {
            self.bump_msn();
            self.complete_recv(WcStatus::Success, WcOpcode::Recv, offset as u32, hdr.imm);
            self.msg = Message::Idle;
        } else {
            self.msg = Message::Send { offset };
        }
        self.advance(hdr);
        Ok(())
    }

    fn exec_write<M: MemoryAccess + ?Sized>(
        &mut self,
        hdr: &TransportRepr,
        payload: Data<'_>,
        mem: &mut M,
    ) -> Exec {
        let op = hdr.bth.opcode;
        let psn = hdr.bth.psn;
        let starts = op.is_first() || op.is_only();
        let ends = op.is_last() || op.is_only();
        let imm = hdr.imm.is_some();
        if ends && imm && self.rq.is_empty() {
            return self.rnr_nak(psn);
        }
        if !self.length_ok(op, payload.len()) {
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        let mtu = self.mtu.bytes();
        let (va, rkey, remaining, total) = if starts {
            let Some(reth) = hdr.reth else {
                return Self::fatal(psn, NakCode::InvalidRequest);
            };
            let len_ok = reth.dma_len as u64 <= MAX_MESSAGE_LEN
                && if op.is_only() {
                    payload.len() as u32 == reth.dma_len || self.split_imm_tail(hdr, payload.len())
                } else {
                    reth.dma_len > mtu
                };
            if !len_ok {
                return Self::fatal(psn, NakCode::InvalidRequest);
            }
            // IBTA vol. 1 §9.7.4.1.4: a zero-length WRITE does not validate the R_Key. A
            // WRITE_ONLY is validated by the write below (MemoryAccess checks key, range and
            // access before copying anything): one region lookup per packet, not two — every
            // packet of a split WRITE is one.
            if reth.dma_len > 0
                && !op.is_only()
                && mem
                    .check(
                        reth.rkey,
                        reth.va,
                        reth.dma_len as u64,
                        AccessKind::RemoteWrite,
                    )
                    .is_err()
            {
                return Self::fatal(psn, NakCode::RemoteAccessError);
            }
            // A split WRITE with immediate's last packet carries the message's RETH and
            // its last bytes: they go to the end of the range.
            if op.is_only() {
                let tail = u64::from(reth.dma_len) - payload.len() as u64;
                (
                    reth.va.wrapping_add(tail),
                    reth.rkey,
                    payload.len() as u32,
                    reth.dma_len,
                )
            } else {
                (reth.va, reth.rkey, reth.dma_len, reth.dma_len)
            }
        } else {
            let Message::Write {
                va,
                rkey,
                remaining,
                total,
            } = self.msg
            else {
                return Self::fatal(psn, NakCode::InvalidRequest);
            };
            let n = payload.len() as u32;
            let fits = if ends { n == remaining } else { remaining > n };
            if !fits {
                return Self::fatal(psn, NakCode::InvalidRequest);
            }
            (va, rkey, remaining, total)
        };
        let written = match payload {
            Data::Bytes(b) if !b.is_empty() => self.write_ordered(mem, psn, rkey, va, b),
            _ => Ok(()),
        };
        if written.is_err() {
            return Self::fatal(psn, NakCode::RemoteAccessError);
        }
        let n = payload.len() as u32;
        if ends {
            self.bump_msn();
            if imm {
                self.complete_recv(WcStatus::Success, WcOpcode::RecvRdmaWithImm, total, hdr.imm);
            }
            self.msg = Message::Idle;
        } else {
            self.msg = Message::Write {
                va: va.wrapping_add(n as u64),
                rkey,
                remaining: remaining - n,
                total,
            };
        }
        self.advance(hdr);
        Ok(())
    }

    fn exec_read<M: MemoryAccess + ?Sized>(&mut self, hdr: &TransportRepr, mem: &mut M) -> Exec {
        let psn = hdr.bth.psn;
        let Some(reth) = hdr.reth else {
            return Self::fatal(psn, NakCode::InvalidRequest);
        };
        if self.max_dest_rd_atomic == 0 || reth.dma_len as u64 > MAX_MESSAGE_LEN {
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        if reth.dma_len > 0
            && mem
                .check(
                    reth.rkey,
                    reth.va,
                    reth.dma_len as u64,
                    AccessKind::RemoteRead,
                )
                .is_err()
        {
            return Self::fatal(psn, NakCode::RemoteAccessError);
        }
        let slot = self.claim_resource(psn)?;
        let npkts = self.mtu.packets(reth.dma_len);
        self.bump_msn();
        self.resources[slot] = ReadResource {
            atomic: None,
            valid: true,
            first_psn: psn,
            npkts,
            va: reth.va,
            rkey: reth.rkey,
            len: reth.dma_len,
            msn: self.msn,
            start: 0,
            next: 0,
            queued: true,
            replay: false,
        };
        self.res_next = (slot + 1) % self.max_dest_rd_atomic;
        let _ = self.out.push_back(Response::Read { slot });
        self.epsn = psn.add(npkts);
        Ok(())
    }

    /// A duplicate READ request: replay the saved responses from its PSN when it matches the
    /// saved request (same R_Key, the VA/length of the not-yet-answered tail); drop it otherwise.
    fn replay_read(&mut self, hdr: &TransportRepr, ctr: &mut RcCounters) {
        let psn = hdr.bth.psn;
        let mtu = self.mtu.bytes() as u64;
        let Some(reth) = hdr.reth else {
            ctr.dropped_packets += 1;
            return;
        };
        let found = self.resources[..self.max_dest_rd_atomic]
            .iter()
            .position(|r| {
                r.valid && r.atomic.is_none() && psn.distance_from(r.first_psn) < r.npkts
            });
        let Some(slot) = found else {
            ctr.dropped_packets += 1;
            return;
        };
        let selective = self.selective();
        let r = &mut self.resources[slot];
        let k = psn.distance_from(r.first_psn);
        let skip = (k as u64 * mtu).min(r.len as u64);
        let tail = r.len as u64 - skip;
        // Selective repeat re-READs any run of responses; go-back-N always the whole tail.
        let len_ok = if selective {
            reth.dma_len as u64 <= tail && (reth.dma_len > 0 || tail == 0)
        } else {
            reth.dma_len as u64 == tail
        };
        let matches = reth.rkey == r.rkey && reth.va == r.va.wrapping_add(skip) && len_ok;
        if !matches {
            ctr.dropped_packets += 1;
            return;
        }
        if selective {
            let mut end = (k + self.mtu.packets(reth.dma_len)).min(r.npkts);
            if r.queued {
                // The reply in progress still carries what it has not sent yet.
                end = end.min(r.next);
                if k >= end {
                    return;
                }
            }
            if self.out.is_full() {
                ctr.dropped_packets += 1;
                return;
            }
            // Ahead of the queue (the requester's window is stuck until these arrive), behind
            // the re-READs queued before this one: re-READs are answered in the order they
            // arrived, so the requester reads the answer to a later one as proof that an
            // earlier answer was lost. Responses still leave before every ACK/NAK queued
            // after them.
            let lead = self
                .out
                .iter()
                .take_while(|r| matches!(r, Response::ReadPart { .. }))
                .count();
            let mut parts: heapless::Vec<Response, RESP_QUEUE> = heapless::Vec::new();
            for _ in 0..lead {
                if let Some(p) = self.out.pop_front() {
                    let _ = parts.push(p);
                }
            }
            let _ = self.out.push_front(Response::ReadPart {
                slot,
                start: k,
                next: k,
                end,
            });
            while let Some(p) = parts.pop() {
                let _ = self.out.push_front(p);
            }
            return;
        }
        r.replay = true;
        if r.queued {
            if k < r.next {
                r.start = k;
                r.next = k;
            }
        } else {
            r.start = k;
            r.next = k;
            r.queued = true;
            let _ = self.out.push_back(Response::Read { slot });
        }
    }

    /// Claims the next responder resource for a new READ/atomic at `psn`.
    ///
    /// # Errors
    /// NAK invalid request when every resource is still being answered for an original
    /// request (more READ/atomics outstanding than `max_dest_rd_atomic`, IBTA C9-150 ff.).
    fn claim_resource(&mut self, psn: Psn) -> Result<usize, FatalNak> {
        let slot = self.res_next;
        if self.resources[slot].queued {
            if !self.resources[slot].replay {
                return Err(FatalNak {
                    psn,
                    code: NakCode::InvalidRequest,
                });
            }
            // A replay for a stale duplicate: the requester has completed that request (it
            // only reuses the slot within its max_rd_atomic), so the replay is useless.
            self.cancel_reply(slot);
        } else if self.selective() {
            // Partial re-READs of the old request in the slot are stale too.
            self.cancel_reply(slot);
        }
        Ok(slot)
    }

    fn exec_atomic<M: MemoryAccess + ?Sized>(&mut self, hdr: &TransportRepr, mem: &mut M) -> Exec {
        let psn = hdr.bth.psn;
        let Some(a) = hdr.atomic_eth else {
            return Self::fatal(psn, NakCode::InvalidRequest);
        };
        if self.max_dest_rd_atomic == 0 || a.va % 8 != 0 {
            return Self::fatal(psn, NakCode::InvalidRequest);
        }
        let op = if hdr.bth.opcode == Opcode::RcCompareSwap {
            AtomicOp::CompareSwap {
                compare: a.compare,
                swap: a.swap_add,
            }
        } else {
            AtomicOp::FetchAdd { add: a.swap_add }
        };
        let slot = self.claim_resource(psn)?;
        let Ok(orig) = mem.atomic(a.rkey, a.va, op) else {
            return Self::fatal(psn, NakCode::RemoteAccessError);
        };
        self.bump_msn();
        self.resources[slot] = ReadResource {
            atomic: Some(orig),
            valid: true,
            first_psn: psn,
            npkts: 1,
            va: a.va,
            rkey: a.rkey,
            len: 8,
            msn: self.msn,
            start: 0,
            next: 0,
            queued: true,
            replay: false,
        };
        self.res_next = (slot + 1) % self.max_dest_rd_atomic;
        let _ = self.out.push_back(Response::Read { slot });
        self.epsn = psn.add(1);
        Ok(())
    }

    /// A duplicate atomic: answer it again from the saved original value when a resource
    /// holds an atomic with its PSN, R_Key and VA; drop it otherwise (rxe_resp.c).
    fn replay_atomic(&mut self, hdr: &TransportRepr, ctr: &mut RcCounters) {
        let psn = hdr.bth.psn;
        let found = hdr.atomic_eth.and_then(|a| {
            self.resources[..self.max_dest_rd_atomic]
                .iter()
                .position(|r| {
                    r.valid
                        && r.atomic.is_some()
                        && r.first_psn == psn
                        && r.rkey == a.rkey
                        && r.va == a.va
                })
        });
        let Some(slot) = found else {
            ctr.dropped_packets += 1;
            return;
        };
        let r = &mut self.resources[slot];
        r.replay = true;
        if !r.queued {
            r.start = 0;
            r.next = 0;
            r.queued = true;
            let _ = self.out.push_back(Response::Read { slot });
        }
    }

    /// Removes the queued reply of resource `slot` from the response stream.
    fn cancel_reply(&mut self, slot: usize) {
        let mut kept: Deque<Response, RESP_QUEUE> = Deque::new();
        while let Some(item) = self.out.pop_front() {
            let mine = match item {
                Response::Read { slot: s } | Response::ReadPart { slot: s, .. } => s == slot,
                Response::Ack { .. } => false,
            };
            if !mine {
                let _ = kept.push_back(item);
            }
        }
        self.out = kept;
        self.resources[slot].queued = false;
    }

    /// Builds the next response packet, if any.
    ///
    /// # Errors
    /// [`FatalNak`] when the memory of a READ being answered can no longer be read (the R_Key
    /// was checked on arrival; the region went away since).
    pub(crate) fn poll_transmit<M: MemoryAccess + ?Sized>(
        &mut self,
        path: &Path,
        mem: &mut M,
        buf: &mut [u8],
        ctr: &mut RcCounters,
    ) -> Result<Option<usize>, FatalNak> {
        let Some(&item) = self.out.front() else {
            return Ok(None);
        };
        match item {
            Response::Ack {
                psn,
                syndrome,
                msn,
                sack: sack_bits,
            } => {
                let mut hdr =
                    TransportRepr::new(path.bth(Opcode::RcAcknowledge, psn, false, false));
                hdr.aeth = Some(AethRepr { syndrome, msn });
                let block = sack_bits.map(|held| SackRepr { base: psn, held });
                let len = block.map_or(0, |b| b.buffer_len());
                let Ok(Some(n)) = emit_packet::<()>(&mut hdr, len, buf, |out| {
                    if let Some(b) = block {
                        b.emit(&mut sack::Packet::new_unchecked(out));
                    }
                    Ok(())
                }) else {
                    return Ok(None);
                };
                self.out.pop_front();
                ctr.tx_packets += 1;
                if block.is_some() {
                    ctr.sacks_sent += 1;
                }
                match syndrome {
                    Syndrome::Ack { .. } => ctr.acks_sent += 1,
                    Syndrome::RnrNak { .. } => ctr.naks_sent.rnr += 1,
                    Syndrome::Nak(NakCode::PsnSequenceError) => ctr.naks_sent.psn_sequence += 1,
                    Syndrome::Nak(NakCode::InvalidRequest) => ctr.naks_sent.invalid_request += 1,
                    Syndrome::Nak(NakCode::RemoteAccessError) => ctr.naks_sent.remote_access += 1,
                    _ => ctr.naks_sent.remote_operational += 1,
                }
                Ok(Some(n))
            }
            Response::Read { slot } if self.resources[slot].atomic.is_some() => {
                let r = self.resources[slot];
                let mut hdr = TransportRepr::new(path.bth(
                    Opcode::RcAtomicAcknowledge,
                    r.first_psn,
                    false,
                    false,
                ));
                hdr.aeth = Some(AethRepr {
                    syndrome: self.ack_syndrome(),
                    msn: r.msn,
                });
                hdr.atomic_ack = r.atomic;
                let Ok(Some(n)) = emit_packet::<()>(&mut hdr, 0, buf, |_| Ok(())) else {
                    return Ok(None);
                };
                self.resources[slot].queued = false;
                self.out.pop_front();
                ctr.tx_packets += 1;
                Ok(Some(n))
            }
            Response::Read { slot } => {
                let r = self.resources[slot];
                let Some(n) =
                    self.emit_read_response(&r, r.next, r.start, r.npkts, path, mem, buf, ctr)?
                else {
                    return Ok(None);
                };
                let res = &mut self.resources[slot];
                res.next += 1;
                if res.next == res.npkts {
                    res.queued = false;
                    self.out.pop_front();
                }
                Ok(Some(n))
            }
            Response::ReadPart {
                slot,
                start,
                next,
                end,
            } => {
                let r = self.resources[slot];
                let Some(n) = self.emit_read_response(&r, next, start, end, path, mem, buf, ctr)?
                else {
                    return Ok(None);
                };
                if next + 1 >= end {
                    self.out.pop_front();
                } else if let Some(Response::ReadPart { next, .. }) = self.out.front_mut() {
                    *next += 1;
                }
                Ok(Some(n))
            }
        }
    }

    /// Emits READ response packet `k` of resource `r` as part of the reply covering packets
    /// `start..end` (FIRST/ONLY at `start`, LAST at `end - 1`, AETH on those).
    ///
    /// # Errors
    /// [`FatalNak`] when the memory can no longer be read.
    #[allow(clippy::too_many_arguments)]
    fn emit_read_response<M: MemoryAccess + ?Sized>(
        &self,
        r: &ReadResource,
        k: u32,
        start: u32,
        end: u32,
        path: &Path,
        mem: &mut M,
        buf: &mut [u8],
        ctr: &mut RcCounters,
    ) -> Result<Option<usize>, FatalNak> {
        let (rel, total) = (k - start, end - start);
        let opcode = if total == 1 {
            Opcode::RcRdmaReadResponseOnly
        } else if rel == 0 {
            Opcode::RcRdmaReadResponseFirst
        } else if rel + 1 == total {
            Opcode::RcRdmaReadResponseLast
        } else {
            Opcode::RcRdmaReadResponseMiddle
        };
        let psn = r.first_psn.add(k);
        let mut hdr = TransportRepr::new(path.bth(opcode, psn, false, false));
        if opcode != Opcode::RcRdmaReadResponseMiddle {
            hdr.aeth = Some(AethRepr {
                syndrome: self.ack_syndrome(),
                msn: r.msn,
            });
        }
        let seg = self.mtu.segment_len(r.len, k) as usize;
        let va = r.va.wrapping_add(k as u64 * self.mtu.bytes() as u64);
        let rkey = r.rkey;
        let emitted = emit_packet(&mut hdr, seg, buf, |out| {
            if out.is_empty() {
                Ok(())
            } else {
                mem.read(rkey, va, out, AccessKind::RemoteRead)
            }
        });
        match emitted {
            Ok(Some(n)) => {
                ctr.tx_packets += 1;
                ctr.tx_payload_bytes += seg as u64;
                Ok(Some(n))
            }
            Ok(None) => Ok(None),
            Err(_) => Err(FatalNak {
                psn,
                code: NakCode::RemoteAccessError,
            }),
        }
    }
}
