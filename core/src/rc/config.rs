//! QP attributes for the RTR and RTS transitions and the QP state (IBTA vol. 1 §10.3.1,
//! Table 91 "QP state transition properties"; libibverbs `struct ibv_qp_attr`).

use super::mtu::Mtu;
use crate::wire::Psn;

/// Attributes set on INIT→RTR: everything the responder needs (libibverbs
/// `IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
/// IBV_QP_MIN_RNR_TIMER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtrConfig {
    /// This QP's number (24 bits); packets whose BTH DestQP differs are dropped.
    pub local_qpn: u32,
    /// The peer QP's number (24 bits), written as BTH DestQP in every packet sent.
    pub remote_qpn: u32,
    /// Path MTU: payload bytes per packet.
    pub path_mtu: Mtu,
    /// First PSN the responder expects (`rq_psn`).
    pub rq_psn: Psn,
    /// P_Key written into every BTH and matched on receive (0xFFFF = default partition, full
    /// member; matching rule of rxe_verbs.h `pkey_match`: low 15 bits equal and non-zero, at
    /// least one side a full member).
    pub pkey: u16,
    /// RNR NAK timer code (5 bits, IBTA Table 45) sent in RNR NAKs when no receive WQE is posted.
    pub min_rnr_timer: u8,
    /// Responder resources: RDMA READs and atomics the peer may have outstanding together
    /// (`max_dest_rd_atomic`). 0 makes every incoming READ/atomic a NAK "invalid request"
    /// (rxe_resp.c `check_resource`); values above [`MAX_RD_ATOMIC`](super::MAX_RD_ATOMIC) are
    /// clamped to it.
    pub max_dest_rd_atomic: u8,
}

/// Attributes set on RTR→RTS: everything the requester needs (libibverbs `IBV_QP_SQ_PSN |
/// IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RtsConfig {
    /// First PSN the requester sends (`sq_psn`).
    pub sq_psn: Psn,
    /// Local ACK timeout exponent (5 bits): the retransmit timer is 4.096 µs · 2^timeout;
    /// 0 disables it (IBTA vol. 1 §9.7.6.1.1; see [`ack_timeout_ns`](super::ack_timeout_ns)).
    pub timeout: u8,
    /// Transport retries after a timeout or PSN sequence NAK before completing with
    /// `RetryExcErr` (3 bits, 0..=7; IBTA: 7 is 7 retries, not infinite).
    pub retry_cnt: u8,
    /// Retries after an RNR NAK before completing with `RnrRetryExcErr` (3 bits; 7 = infinite,
    /// IBTA vol. 1 §9.7.5.2.8).
    pub rnr_retry: u8,
    /// Initiator depth: RDMA READs and atomics this QP may have outstanding together
    /// (`max_rd_atomic`). 0 is treated as 1 so that they still progress one at a time.
    pub max_rd_atomic: u8,
}

/// The states an [`RcQp`](super::RcQp) can be in (the subset of IBTA vol. 1 §10.3.1 that has a
/// transport state machine; RESET and INIT live in the host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum QpState {
    /// Ready To Receive: the responder works, the requester is idle.
    Rtr,
    /// Ready To Send: requester and responder work.
    Rts,
    /// Error: all WQEs are flushed with `WrFlushErr`; nothing is sent except a NAK that caused
    /// the transition.
    Error,
}
