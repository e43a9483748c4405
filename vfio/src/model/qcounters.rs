//! The device's own counters, as the firmware keeps them: Q counter sets (ALLOC_Q_COUNTER;
//! each QP names one in `qpc.counter_set_id`, QUERY_Q_COUNTER reads it), the vport traffic
//! counters (QUERY_VPORT_COUNTER: RoCE packets and bytes each way) and the congestion
//! counters (QUERY_CONG_STATISTICS: ECN-marked packets and CNPs sent by the notification
//! point, CNPs handled by the reaction point).
//!
//! A QP's events come from its RC engine's counters: after every step the model adds what
//! changed since the last step ([`account`]) to the QP's set and to the port, so a set keeps
//! counting across QPs that come and go, as the hardware's does. Request counts
//! (`rx_write_requests` ...) are taken from the opcodes of the frames the QP accepts, error
//! CQE counts from the CQEs written.

use std::collections::BTreeMap;

use rdmesh_core::mlx5::cmd::QueryQCounterOut;
use rdmesh_core::rc::{RcCounters, WcStatus};
use rdmesh_core::wire::Opcode;

use super::objects::Qp;

/// Port-wide counters (vport traffic and congestion).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// RoCE frames sent.
    pub tx_packets: u64,
    /// Bytes of those frames (Ethernet header to ICRC).
    pub tx_octets: u64,
    /// RoCE frames received and accepted (ICRC, MAC and QPN good).
    pub rx_packets: u64,
    /// Bytes of those frames.
    pub rx_octets: u64,
    /// Frames received and dropped.
    pub rx_errors: u64,
    /// Bytes of those frames.
    pub rx_error_octets: u64,
    /// ECN-marked (CE) RoCE packets received by the notification point.
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs sent by the notification point.
    pub np_cnp_sent: u64,
    /// CNPs handled by the reaction point.
    pub rp_cnp_handled: u64,
}

/// Q counter sets by id.
pub type QCounterSets = BTreeMap<u8, QueryQCounterOut>;

fn add(field: &mut u32, now: u64, seen: u64) {
    *field = field.wrapping_add(now.wrapping_sub(seen) as u32);
}

/// Adds what `qp`'s engine counted since the last call to its counter set and the port.
pub fn account(qp: &mut Qp, sets: &mut QCounterSets, port: &mut PortCounters) {
    let Some(engine) = qp.engine.as_ref() else {
        return;
    };
    let now: RcCounters = *engine.counters();
    let seen = qp.seen;
    if now == seen {
        return;
    }
    qp.seen = now;
    port.np_ecn_marked_roce_packets += now.ce_marks_received.wrapping_sub(seen.ce_marks_received);
    port.np_cnp_sent += now.cnps_sent.wrapping_sub(seen.cnps_sent);
    port.rp_cnp_handled += now.cnps_received.wrapping_sub(seen.cnps_received);
    let Some(set) = sets.get_mut(&qp.ctx.counter_set_id) else {
        return;
    };
    add(
        &mut set.out_of_sequence,
        now.out_of_sequence_requests,
        seen.out_of_sequence_requests,
    );
    add(
        &mut set.duplicate_request,
        now.duplicate_requests,
        seen.duplicate_requests,
    );
    add(
        &mut set.packet_seq_err,
        now.naks_received.psn_sequence,
        seen.naks_received.psn_sequence,
    );
    add(
        &mut set.implied_nak_seq_err,
        now.implied_naks,
        seen.implied_naks,
    );
    add(&mut set.local_ack_timeout_err, now.timeouts, seen.timeouts);
    add(
        &mut set.out_of_buffer,
        now.naks_sent.rnr,
        seen.naks_sent.rnr,
    );
    add(
        &mut set.req_remote_invalid_request,
        now.naks_received.invalid_request,
        seen.naks_received.invalid_request,
    );
    add(
        &mut set.req_remote_access_errors,
        now.naks_received.remote_access,
        seen.naks_received.remote_access,
    );
    add(
        &mut set.req_remote_operation_errors,
        now.naks_received.remote_operational,
        seen.naks_received.remote_operational,
    );
    add(
        &mut set.resp_remote_invalid_request,
        now.naks_sent.invalid_request,
        seen.naks_sent.invalid_request,
    );
    add(
        &mut set.resp_remote_access_errors,
        now.naks_sent.remote_access,
        seen.naks_sent.remote_access,
    );
}

/// Counts a request the QP accepted from the wire (`rx_write_requests`, `rx_read_requests`,
/// `rx_atomic_requests`: one per message, at its first or only packet).
pub fn count_request(set: Option<&mut QueryQCounterOut>, opcode: Opcode) {
    let Some(set) = set else { return };
    match opcode {
        Opcode::RcRdmaWriteFirst
        | Opcode::RcRdmaWriteOnly
        | Opcode::RcRdmaWriteOnlyWithImmediate => {
            set.rx_write_requests = set.rx_write_requests.wrapping_add(1)
        }
        Opcode::RcRdmaReadRequest => set.rx_read_requests = set.rx_read_requests.wrapping_add(1),
        Opcode::RcCompareSwap | Opcode::RcFetchAdd => {
            set.rx_atomic_requests = set.rx_atomic_requests.wrapping_add(1)
        }
        _ => {}
    }
}

/// Counts an error completion of a send (`requester`) or receive work request.
pub fn count_completion(set: Option<&mut QueryQCounterOut>, requester: bool, status: WcStatus) {
    let Some(set) = set else { return };
    let bump = |f: &mut u32| *f = f.wrapping_add(1);
    match status {
        WcStatus::Success => return,
        WcStatus::WrFlushErr => {
            if requester {
                bump(&mut set.req_cqe_flush_error)
            } else {
                bump(&mut set.resp_cqe_flush_error)
            }
            return;
        }
        WcStatus::RetryExcErr => bump(&mut set.req_transport_retries_exceeded),
        WcStatus::RnrRetryExcErr => bump(&mut set.rnr_nak_retry_err),
        WcStatus::LocLenErr if requester => bump(&mut set.req_local_length_error),
        WcStatus::LocLenErr => bump(&mut set.resp_local_length_error),
        WcStatus::LocProtErr if requester => bump(&mut set.req_local_protection),
        WcStatus::LocProtErr => bump(&mut set.resp_local_protection),
        WcStatus::LocQpOpErr if requester => bump(&mut set.local_operation_error),
        WcStatus::LocQpOpErr => bump(&mut set.resp_local_qp_error),
        WcStatus::BadRespErr => bump(&mut set.req_bad_response),
        _ => {}
    }
    if requester {
        bump(&mut set.req_cqe_error)
    } else {
        bump(&mut set.resp_cqe_error)
    }
}
