//! The device's own counters (Linux `drivers/infiniband/hw/mlx5/counters.c`): Q counter sets
//! (ALLOC_Q_COUNTER; each QP gets its own at creation and names it in `counter_set_id`, as
//! `rdma statistic qp set ... auto type qp on` does), the vport traffic counters
//! (QUERY_VPORT_COUNTER: RoCE packets and bytes each way) and the congestion counters
//! (QUERY_CONG_STATISTICS: CNPs handled and sent, ECN-marked packets).

use rdmesh_core::mlx5::cmd::{
    AllocQCounterIn, AllocQCounterOut, DeallocQCounterIn, Opcode, QueryCongStatisticsIn,
    QueryCongStatisticsOut, QueryQCounterIn, QueryQCounterOut, QueryVportCounterIn,
    QueryVportCounterOut,
};

use std::sync::{Arc, Weak};

use super::cmdif::parse_err;
use super::hca::{Core, Hca};
use super::hw::Hw;
use super::{DriverError, Result};

/// Port-wide counters of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortCounters {
    /// RoCE packets sent (`transmitted_ib_unicast.packets`).
    pub tx_packets: u64,
    /// Their bytes on the wire.
    pub tx_bytes: u64,
    /// RoCE packets received (`received_ib_unicast.packets`).
    pub rx_packets: u64,
    /// Their bytes on the wire.
    pub rx_bytes: u64,
    /// Packets received with errors (`received_errors.packets`).
    pub rx_errors: u64,
    /// CNPs the reaction point handled (`rp_cnp_handled`).
    pub rp_cnp_handled: u64,
    /// CNPs received while the reaction point was off (`rp_cnp_ignored`).
    pub rp_cnp_ignored: u64,
    /// ECN-marked RoCE packets received (`np_ecn_marked_roce_packets`).
    pub np_ecn_marked_roce_packets: u64,
    /// CNPs sent (`np_cnp_sent`).
    pub np_cnp_sent: u64,
}

impl PortCounters {
    /// `(name, value)` pairs under the Linux names (`rdma statistic`, ethtool).
    pub fn named(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("tx_packets", self.tx_packets),
            ("tx_bytes", self.tx_bytes),
            ("rx_packets", self.rx_packets),
            ("rx_bytes", self.rx_bytes),
            ("rx_errors", self.rx_errors),
            ("rp_cnp_handled", self.rp_cnp_handled),
            ("rp_cnp_ignored", self.rp_cnp_ignored),
            (
                "np_ecn_marked_roce_packets",
                self.np_ecn_marked_roce_packets,
            ),
            ("np_cnp_sent", self.np_cnp_sent),
        ]
    }
}

/// The counters of a Q counter set as `(name, value)` pairs (mlx5_ifc.h / `rdma statistic`
/// names).
pub fn q_counters_named(q: &QueryQCounterOut) -> Vec<(&'static str, u64)> {
    let v = |x: u32| u64::from(x);
    vec![
        ("rx_write_requests", v(q.rx_write_requests)),
        ("rx_read_requests", v(q.rx_read_requests)),
        ("rx_atomic_requests", v(q.rx_atomic_requests)),
        ("out_of_buffer", v(q.out_of_buffer)),
        ("out_of_sequence", v(q.out_of_sequence)),
        ("duplicate_request", v(q.duplicate_request)),
        ("rnr_nak_retry_err", v(q.rnr_nak_retry_err)),
        ("packet_seq_err", v(q.packet_seq_err)),
        ("implied_nak_seq_err", v(q.implied_nak_seq_err)),
        ("local_ack_timeout_err", v(q.local_ack_timeout_err)),
        (
            "req_transport_retries_exceeded",
            v(q.req_transport_retries_exceeded),
        ),
        (
            "req_remote_invalid_request",
            v(q.req_remote_invalid_request),
        ),
        ("req_remote_access_errors", v(q.req_remote_access_errors)),
        (
            "req_remote_operation_errors",
            v(q.req_remote_operation_errors),
        ),
        (
            "resp_remote_invalid_request",
            v(q.resp_remote_invalid_request),
        ),
        ("resp_remote_access_errors", v(q.resp_remote_access_errors)),
        ("req_cqe_error", v(q.req_cqe_error)),
        ("resp_cqe_error", v(q.resp_cqe_error)),
        ("req_cqe_flush_error", v(q.req_cqe_flush_error)),
        ("resp_cqe_flush_error", v(q.resp_cqe_flush_error)),
        ("resp_local_length_error", v(q.resp_local_length_error)),
        ("req_local_length_error", v(q.req_local_length_error)),
        ("local_operation_error", v(q.local_operation_error)),
        ("resp_local_qp_error", v(q.resp_local_qp_error)),
        ("req_local_protection", v(q.req_local_protection)),
        ("resp_local_protection", v(q.resp_local_protection)),
        ("req_bad_response", v(q.req_bad_response)),
        ("cq_overflow", v(q.cq_overflow)),
    ]
}

fn query_q_counter(hw: &mut Hw, id: u8) -> Result<QueryQCounterOut> {
    let what = format!("Q counter set {id}");
    let out = hw.exec(
        &QueryQCounterIn {
            clear: false,
            counter_set_id: id,
        },
        0,
        &what,
    )?;
    QueryQCounterOut::parse(&out).map_err(|e| parse_err(hw.name(), Opcode::QueryQCounter, e, &what))
}

fn port_counters(hw: &mut Hw, port: u8, cc_query_allowed: bool) -> Result<PortCounters> {
    let out = hw.exec(
        &QueryVportCounterIn {
            port_num: port,
            ..Default::default()
        },
        0,
        "vport counters",
    )?;
    let v = QueryVportCounterOut::parse(&out)
        .map_err(|e| parse_err(hw.name(), Opcode::QueryVportCounter, e, "vport counters"))?;
    let mut p = PortCounters {
        tx_packets: v.transmitted_ib_unicast.packets,
        tx_bytes: v.transmitted_ib_unicast.octets,
        rx_packets: v.received_ib_unicast.packets,
        rx_bytes: v.received_ib_unicast.octets,
        rx_errors: v.received_errors.packets,
        ..Default::default()
    };
    if cc_query_allowed {
        let out = hw.exec(
            &QueryCongStatisticsIn { clear: false },
            0,
            "congestion counters",
        )?;
        let c = QueryCongStatisticsOut::parse(&out).map_err(|e| {
            parse_err(
                hw.name(),
                Opcode::QueryCongStatistics,
                e,
                "congestion counters",
            )
        })?;
        p.rp_cnp_handled = c.rp_cnp_handled();
        p.rp_cnp_ignored = c.rp_cnp_ignored();
        p.np_ecn_marked_roce_packets = c.np_ecn_marked_roce_packets();
        p.np_cnp_sent = c.np_cnp_sent();
    }
    Ok(p)
}

/// Reads the device's counters from another thread without keeping the device alive (a
/// statistics publisher): it holds only a weak reference to the command state, so the device
/// is torn down by its last user handle as usual; afterwards every read fails with
/// [`DriverError::Closed`].
#[derive(Debug, Clone)]
pub struct CounterReader {
    core: Weak<Core>,
    cc_query_allowed: bool,
    name: String,
}

impl CounterReader {
    fn core(&self) -> Result<Arc<Core>> {
        self.core.upgrade().ok_or_else(|| DriverError::Closed {
            device: self.name.clone(),
        })
    }

    /// As [`Hca::port_counters`].
    ///
    /// # Errors
    /// [`DriverError::Closed`] once the device is gone; command errors.
    pub fn port_counters(&self, port: u8) -> Result<PortCounters> {
        let core = self.core()?;
        let mut hw = core.hw();
        port_counters(&mut hw, port, self.cc_query_allowed)
    }

    /// As [`Hca::query_q_counter`].
    ///
    /// # Errors
    /// [`DriverError::Closed`] once the device is gone; command errors.
    pub fn query_q_counter(&self, id: u8) -> Result<QueryQCounterOut> {
        let core = self.core()?;
        let mut hw = core.hw();
        query_q_counter(&mut hw, id)
    }
}

impl Hca {
    /// A [`CounterReader`] for this device.
    pub fn counter_reader(&self) -> CounterReader {
        CounterReader {
            core: Arc::downgrade(&self.inner.core),
            cc_query_allowed: self.info().caps.cc_query_allowed,
            name: self.name().to_string(),
        }
    }

    /// ALLOC_Q_COUNTER: a new counter set.
    ///
    /// # Errors
    /// [`DriverError::Config`] when the device has no counter sets (`max_qp_cnt` 0);
    /// command errors (out of sets).
    pub fn alloc_q_counter(&self) -> Result<u8> {
        if self.info().caps.max_qp_cnt == 0 {
            return Err(DriverError::config(
                self.name(),
                "the device offers no Q counter sets (max_qp_cnt 0)",
            ));
        }
        let out = self
            .inner
            .hw()
            .exec(&AllocQCounterIn { uid: 0 }, 0, "Q counter set")?;
        Ok(AllocQCounterOut::parse(&out)
            .map_err(|e| parse_err(self.name(), Opcode::AllocQCounter, e, "Q counter set"))?
            .counter_set_id)
    }

    /// DEALLOC_Q_COUNTER; a failure is logged (teardown path).
    pub fn dealloc_q_counter(&self, id: u8) {
        let what = format!("Q counter set {id}");
        if let Err(e) = self
            .inner
            .hw()
            .exec(&DeallocQCounterIn { counter_set_id: id }, 0, &what)
        {
            tracing::warn!(device = %self.name(), "DEALLOC_Q_COUNTER {what}: {e}");
        }
    }

    /// QUERY_Q_COUNTER of set `id`.
    ///
    /// # Errors
    /// Command errors.
    pub fn query_q_counter(&self, id: u8) -> Result<QueryQCounterOut> {
        query_q_counter(&mut self.inner.hw(), id)
    }

    /// QUERY_VPORT_COUNTER and (when `cc_query_allowed`) QUERY_CONG_STATISTICS of port
    /// `port`.
    ///
    /// # Errors
    /// Command errors.
    pub fn port_counters(&self, port: u8) -> Result<PortCounters> {
        port_counters(
            &mut self.inner.hw(),
            port,
            self.info().caps.cc_query_allowed,
        )
    }
}
