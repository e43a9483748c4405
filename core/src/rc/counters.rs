//! Per-QP transport counters (the RC subset of Linux rxe `rxe_hw_counters.c` and mlx5
//! `rdma statistic` names: retransmits, NAKs sent/received, duplicates, timeouts).

/// NAKs of each kind, sent or received (syndromes of IBTA vol. 1 Tables 43–44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct NakCounters {
    /// PSN sequence error NAKs (0x60).
    pub psn_sequence: u64,
    /// RNR NAKs (0x20 | timer).
    pub rnr: u64,
    /// Invalid request NAKs (0x61).
    pub invalid_request: u64,
    /// Remote access error NAKs (0x62).
    pub remote_access: u64,
    /// Remote operational error NAKs (0x63) and any other NAK code.
    pub remote_operational: u64,
}

/// Counters of one RC QP. All count events since the QP was created and never wrap in practice
/// (u64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RcCounters {
    /// Packets produced by `poll_transmit` (requests and responses).
    pub tx_packets: u64,
    /// Payload bytes in those packets (no headers, no pad).
    pub tx_payload_bytes: u64,
    /// Packets passed to `handle_packet`.
    pub rx_packets: u64,
    /// Payload bytes in those packets.
    pub rx_payload_bytes: u64,
    /// Request packets sent again (PSN already sent once): go-back-N and timer retries.
    pub retransmitted_packets: u64,
    /// Retransmit-timer expiries with PSNs outstanding (each starts a retry or ends in
    /// `RetryExcErr`).
    pub timeouts: u64,
    /// Retries started for any reason (timeout, PSN sequence NAK, implied NAK, RNR NAK).
    pub retries: u64,
    /// READ responses or ACKs with a later PSN while a READ was incomplete (implied NAK).
    pub implied_naks: u64,
    /// ACKNOWLEDGE packets with an ACK syndrome sent (READ responses are not counted here).
    pub acks_sent: u64,
    /// ACKNOWLEDGE packets with an ACK syndrome received.
    pub acks_received: u64,
    /// NAKs sent by the responder.
    pub naks_sent: NakCounters,
    /// NAKs received by the requester.
    pub naks_received: NakCounters,
    /// Requests received with a PSN behind the expected PSN (re-ACKed or READ replayed).
    pub duplicate_requests: u64,
    /// Requests received ahead of the expected PSN (one PSN NAK, then silently dropped).
    pub out_of_sequence_requests: u64,
    /// Responses (ACK, NAK, READ response) received that matched no outstanding PSN.
    pub ghost_responses: u64,
    /// Packets dropped before any transport processing: wrong DestQP, P_Key mismatch, non-RC
    /// opcode, missing extended header, QP state, or the response queue was full.
    pub dropped_packets: u64,
}
