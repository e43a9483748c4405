//! Typed inputs and outputs of the counter commands: Q counters (ALLOC_Q_COUNTER,
//! DEALLOC_Q_COUNTER, QUERY_Q_COUNTER: a counter set that QPs name in `qpc.counter_set_id`),
//! the vport traffic counters (QUERY_VPORT_COUNTER) and the congestion-control counters
//! (QUERY_CONG_STATISTICS: CNPs handled by the reaction point, sent by the notification point).
//! Linux reads the same commands for `rdma statistic` and the `hw_counters` of mlx5_ib
//! (`drivers/infiniband/hw/mlx5/counters.c`).

use super::layout::*;
use super::Opcode;

command! {
    /// ALLOC_Q_COUNTER input (0x771).
    pub struct AllocQCounterIn : in alloc_q_counter_in (alloc_q_counter_out), AllocQCounter {
        /// User context id (0: the driver's own).
        uid: u16 = UID,
    }
}
command! {
    /// ALLOC_Q_COUNTER output: the new counter set.
    pub struct AllocQCounterOut : out alloc_q_counter_out, AllocQCounter {
        /// Counter set id (8 bits).
        counter_set_id: u8 = COUNTER_SET_ID,
    }
}
command! {
    /// DEALLOC_Q_COUNTER input (0x772).
    pub struct DeallocQCounterIn : in dealloc_q_counter_in (dealloc_q_counter_out), DeallocQCounter {
        /// Counter set id.
        counter_set_id: u8 = COUNTER_SET_ID,
    }
}
command! {
    /// DEALLOC_Q_COUNTER output.
    pub struct DeallocQCounterOut : out dealloc_q_counter_out, DeallocQCounter {}
}
command! {
    /// QUERY_Q_COUNTER input (0x773).
    pub struct QueryQCounterIn : in query_q_counter_in (query_q_counter_out), QueryQCounter {
        /// Zero the counters after reading them.
        clear: bool = CLEAR,
        /// Counter set id.
        counter_set_id: u8 = COUNTER_SET_ID,
    }
}
command! {
    /// QUERY_Q_COUNTER output: every counter of the set (32-bit, wrapping), named as in
    /// mlx5_ifc.h and shown by Linux under the same names (`rdma statistic`).
    pub struct QueryQCounterOut : out query_q_counter_out, QueryQCounter {
        /// RDMA WRITE requests received.
        rx_write_requests: u32 = RX_WRITE_REQUESTS,
        /// RDMA READ requests received.
        rx_read_requests: u32 = RX_READ_REQUESTS,
        /// Atomic requests received.
        rx_atomic_requests: u32 = RX_ATOMIC_REQUESTS,
        /// DCT connects received.
        rx_dct_connect: u32 = RX_DCT_CONNECT,
        /// Packets dropped for lack of a receive WQE (RNR NAKs sent).
        out_of_buffer: u32 = OUT_OF_BUFFER,
        /// Out-of-sequence requests received (PSN sequence errors as responder).
        out_of_sequence: u32 = OUT_OF_SEQUENCE,
        /// Duplicate requests received.
        duplicate_request: u32 = DUPLICATE_REQUEST,
        /// RNR NAK retries exhausted.
        rnr_nak_retry_err: u32 = RNR_NAK_RETRY_ERR,
        /// PSN sequence error NAKs received.
        packet_seq_err: u32 = PACKET_SEQ_ERR,
        /// Implied NAKs (a READ/atomic response skipped PSNs).
        implied_nak_seq_err: u32 = IMPLIED_NAK_SEQ_ERR,
        /// Local ACK timeouts.
        local_ack_timeout_err: u32 = LOCAL_ACK_TIMEOUT_ERR,
        /// Responder local length errors.
        resp_local_length_error: u32 = RESP_LOCAL_LENGTH_ERROR,
        /// Requester local length errors.
        req_local_length_error: u32 = REQ_LOCAL_LENGTH_ERROR,
        /// Responder local QP operation errors.
        resp_local_qp_error: u32 = RESP_LOCAL_QP_ERROR,
        /// Local operation errors.
        local_operation_error: u32 = LOCAL_OPERATION_ERROR,
        /// Responder local protection errors.
        resp_local_protection: u32 = RESP_LOCAL_PROTECTION,
        /// Requester local protection errors.
        req_local_protection: u32 = REQ_LOCAL_PROTECTION,
        /// Responder error CQEs.
        resp_cqe_error: u32 = RESP_CQE_ERROR,
        /// Requester error CQEs.
        req_cqe_error: u32 = REQ_CQE_ERROR,
        /// Memory window bind errors.
        req_mw_binding: u32 = REQ_MW_BINDING,
        /// Bad responses.
        req_bad_response: u32 = REQ_BAD_RESPONSE,
        /// Invalid-request NAKs received.
        req_remote_invalid_request: u32 = REQ_REMOTE_INVALID_REQUEST,
        /// Invalid requests received.
        resp_remote_invalid_request: u32 = RESP_REMOTE_INVALID_REQUEST,
        /// Remote access error NAKs received.
        req_remote_access_errors: u32 = REQ_REMOTE_ACCESS_ERRORS,
        /// Remote access errors answered.
        resp_remote_access_errors: u32 = RESP_REMOTE_ACCESS_ERRORS,
        /// Remote operation error NAKs received.
        req_remote_operation_errors: u32 = REQ_REMOTE_OPERATION_ERRORS,
        /// Transport retries exhausted.
        req_transport_retries_exceeded: u32 = REQ_TRANSPORT_RETRIES_EXCEEDED,
        /// CQ overflows.
        cq_overflow: u32 = CQ_OVERFLOW,
        /// Responder flush-error CQEs.
        resp_cqe_flush_error: u32 = RESP_CQE_FLUSH_ERROR,
        /// Requester flush-error CQEs.
        req_cqe_flush_error: u32 = REQ_CQE_FLUSH_ERROR,
        /// Adaptive retransmissions.
        roce_adp_retrans: u32 = ROCE_ADP_RETRANS,
        /// Adaptive retransmission timeouts.
        roce_adp_retrans_to: u32 = ROCE_ADP_RETRANS_TO,
        /// Slow restarts.
        roce_slow_restart: u32 = ROCE_SLOW_RESTART,
        /// Slow-restart CNPs.
        roce_slow_restart_cnps: u32 = ROCE_SLOW_RESTART_CNPS,
        /// Slow-restart transitions.
        roce_slow_restart_trans: u32 = ROCE_SLOW_RESTART_TRANS,
    }
}

ifc_struct! {
    /// A packets/octets pair (mlx5_ifc.h `traffic_counter_bits`).
    pub struct TrafficCounter : traffic_counter {
        /// Packets.
        packets: u64 = PACKETS,
        /// Bytes on the wire.
        octets: u64 = OCTETS,
    }
}

command! {
    /// QUERY_VPORT_COUNTER input (0x770).
    pub struct QueryVportCounterIn : in query_vport_counter_in (query_vport_counter_out), QueryVportCounter {
        /// Another vport than the caller's (eswitch manager only).
        other_vport: bool = OTHER_VPORT,
        /// Port number.
        port_num: u8 = PORT_NUM,
        /// Vport number (with `other_vport`).
        vport_number: u16 = VPORT_NUMBER,
        /// Zero the counters after reading them.
        clear: bool = CLEAR,
    }
}
command! {
    /// QUERY_VPORT_COUNTER output: traffic per class. RoCE traffic counts as "IB unicast"
    /// (Linux ethtool `rx_vport_rdma_unicast_packets` reads `received_ib_unicast`).
    pub struct QueryVportCounterOut : out query_vport_counter_out, QueryVportCounter {
        /// Received with errors.
        received_errors: TrafficCounter = RECEIVED_ERRORS,
        /// Transmit errors.
        transmit_errors: TrafficCounter = TRANSMIT_ERRORS,
        /// RDMA (RoCE) unicast received.
        received_ib_unicast: TrafficCounter = RECEIVED_IB_UNICAST,
        /// RDMA (RoCE) unicast transmitted.
        transmitted_ib_unicast: TrafficCounter = TRANSMITTED_IB_UNICAST,
        /// RDMA multicast received.
        received_ib_multicast: TrafficCounter = RECEIVED_IB_MULTICAST,
        /// RDMA multicast transmitted.
        transmitted_ib_multicast: TrafficCounter = TRANSMITTED_IB_MULTICAST,
        /// Ethernet broadcast received.
        received_eth_broadcast: TrafficCounter = RECEIVED_ETH_BROADCAST,
        /// Ethernet broadcast transmitted.
        transmitted_eth_broadcast: TrafficCounter = TRANSMITTED_ETH_BROADCAST,
        /// Ethernet unicast received.
        received_eth_unicast: TrafficCounter = RECEIVED_ETH_UNICAST,
        /// Ethernet unicast transmitted.
        transmitted_eth_unicast: TrafficCounter = TRANSMITTED_ETH_UNICAST,
        /// Ethernet multicast received.
        received_eth_multicast: TrafficCounter = RECEIVED_ETH_MULTICAST,
        /// Ethernet multicast transmitted.
        transmitted_eth_multicast: TrafficCounter = TRANSMITTED_ETH_MULTICAST,
    }
}

command! {
    /// QUERY_CONG_STATISTICS input (0x826).
    pub struct QueryCongStatisticsIn : in query_cong_statistics_in (query_cong_statistics_out), QueryCongStatistics {
        /// Zero the counters after reading them.
        clear: bool = CLEAR,
    }
}
command! {
    /// QUERY_CONG_STATISTICS output: DCQCN counters, 64-bit values in high/low halves (use
    /// [`QueryCongStatisticsOut::rp_cnp_handled`] and friends).
    pub struct QueryCongStatisticsOut : out query_cong_statistics_out, QueryCongStatistics {
        /// Flows the reaction point currently rate-limits.
        rp_cur_flows: u32 = RP_CUR_FLOWS,
        /// Flows summed.
        sum_flows: u32 = SUM_FLOWS,
        /// CNPs received and ignored (reaction point off), high half.
        rp_cnp_ignored_high: u32 = RP_CNP_IGNORED_HIGH,
        /// Low half.
        rp_cnp_ignored_low: u32 = RP_CNP_IGNORED_LOW,
        /// CNPs received and handled by the reaction point, high half.
        rp_cnp_handled_high: u32 = RP_CNP_HANDLED_HIGH,
        /// Low half.
        rp_cnp_handled_low: u32 = RP_CNP_HANDLED_LOW,
        /// Time stamp, high half.
        time_stamp_high: u32 = TIME_STAMP_HIGH,
        /// Low half.
        time_stamp_low: u32 = TIME_STAMP_LOW,
        /// Accumulation period.
        accumulators_period: u32 = ACCUMULATORS_PERIOD,
        /// ECN-marked RoCE packets the notification point received, high half.
        np_ecn_marked_roce_packets_high: u32 = NP_ECN_MARKED_ROCE_PACKETS_HIGH,
        /// Low half.
        np_ecn_marked_roce_packets_low: u32 = NP_ECN_MARKED_ROCE_PACKETS_LOW,
        /// CNPs the notification point sent, high half.
        np_cnp_sent_high: u32 = NP_CNP_SENT_HIGH,
        /// Low half.
        np_cnp_sent_low: u32 = NP_CNP_SENT_LOW,
    }
}

fn join(h: u32, l: u32) -> u64 {
    u64::from(h) << 32 | u64::from(l)
}

fn split(v: u64) -> (u32, u32) {
    ((v >> 32) as u32, v as u32)
}

impl QueryCongStatisticsOut {
    /// CNPs the reaction point handled.
    pub fn rp_cnp_handled(&self) -> u64 {
        join(self.rp_cnp_handled_high, self.rp_cnp_handled_low)
    }
    /// CNPs received while the reaction point was off.
    pub fn rp_cnp_ignored(&self) -> u64 {
        join(self.rp_cnp_ignored_high, self.rp_cnp_ignored_low)
    }
    /// ECN-marked packets the notification point received.
    pub fn np_ecn_marked_roce_packets(&self) -> u64 {
        join(
            self.np_ecn_marked_roce_packets_high,
            self.np_ecn_marked_roce_packets_low,
        )
    }
    /// CNPs the notification point sent.
    pub fn np_cnp_sent(&self) -> u64 {
        join(self.np_cnp_sent_high, self.np_cnp_sent_low)
    }
    /// The output for these 64-bit values (the device side).
    pub fn from_counts(
        rp_cnp_handled: u64,
        rp_cnp_ignored: u64,
        np_ecn_marked_roce_packets: u64,
        np_cnp_sent: u64,
    ) -> QueryCongStatisticsOut {
        let (rp_cnp_handled_high, rp_cnp_handled_low) = split(rp_cnp_handled);
        let (rp_cnp_ignored_high, rp_cnp_ignored_low) = split(rp_cnp_ignored);
        let (np_ecn_marked_roce_packets_high, np_ecn_marked_roce_packets_low) =
            split(np_ecn_marked_roce_packets);
        let (np_cnp_sent_high, np_cnp_sent_low) = split(np_cnp_sent);
        QueryCongStatisticsOut {
            rp_cnp_handled_high,
            rp_cnp_handled_low,
            rp_cnp_ignored_high,
            rp_cnp_ignored_low,
            np_ecn_marked_roce_packets_high,
            np_ecn_marked_roce_packets_low,
            np_cnp_sent_high,
            np_cnp_sent_low,
            ..Default::default()
        }
    }
}
