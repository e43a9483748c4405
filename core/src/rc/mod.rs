//! RC (Reliable Connected) transport state machines: requester, completer and responder of one
//! queue pair, as a poll-driven, allocation-free [`RcQp`].
//!
//! Time is an input ([`Instant`]) and memory is reached only through the caller's
//! [`MemoryAccess`]; packets go in as parsed [`TransportRepr`](crate::wire::TransportRepr) plus
//! payload and come out as BTH + extended headers + payload + pad bytes (the caller adds the
//! ICRC, which covers its IP/UDP headers).
//!
//! Behaviour follows IBTA vol. 1 chapter 9.7 (reliable service) as the Linux rxe driver
//! implements it (rxe_req.c, rxe_comp.c, rxe_resp.c); the rules are summarised in each file:
//! - `requester.rs`: segmentation, PSNs, AckReq cadence, window, go-back-N retransmission;
//! - `completer.rs`: ACK/NAK/READ response handling, implied NAK, retransmit and RNR timers;
//! - `responder.rs`: ePSN tracking, duplicate and out-of-order handling, R_Key checks, RNR,
//!   READ responses and replay, atomics and their replay, MSN;
//! - `recovery.rs`: go-back-N (default) or IRN-style selective repeat, and its wire scheme;
//! - `congestion.rs`: ECN/CNP/DCQCN/pacing glue around [`crate::cc`].
//!
//! `docs/reliability.md` describes the whole: driving an `RcQp`, both recovery modes, atomics,
//! congestion control and the counters.
//!
//! End-to-end credits (IBTA vol. 1 §9.7.7.2) since 2026-11-28: ACKs advertise the receive WQEs
//! posted, and a SEND or WRITE with immediate starts within them plus one (`completer.rs`).
//!
//! Not implemented: SEND with invalidate, memory windows, UC/UD, shared receive queues,
//! ATOMIC WRITE and FLUSH (IBTA 1.5).

mod completer;
mod completion;
mod config;
mod congestion;
mod counters;
mod memory;
mod mtu;
mod packet;
mod psn_bits;
mod qp;
mod recovery;
mod requester;
mod responder;
mod segment_run;
mod timer;
mod wqe;

#[cfg(test)]
mod tests;

pub use completion::{WcOpcode, WcStatus, WorkCompletion};
pub use config::{QpState, RtrConfig, RtsConfig};
pub use counters::{NakCounters, RcCounters};
pub use memory::{AccessKind, AtomicOp, MemError, MemoryAccess};
pub use mtu::Mtu;
pub use packet::max_packet_len;
pub use qp::RcQp;
pub use recovery::{bdp_packets, Recovery, NEGOTIATED_RECOVERY, SR_WINDOW};
pub use requester::{MAX_PKTS_PER_ACK, MAX_UNACKED_PSNS};
pub use responder::{WriteCursor, MAX_RD_ATOMIC};
pub use timer::{ack_timeout_ns, rnr_delay_ns, Instant};
pub use wqe::{PostError, RecvWqe, SendOpcode, SendWqe, Sge, MAX_MESSAGE_LEN, MAX_SGE};

/// Internal signal: the requester hit a fatal error and already completed its WQEs; the QP must
/// move to Error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fatal;
