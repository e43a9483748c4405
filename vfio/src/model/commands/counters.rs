//! Counter commands: ALLOC/DEALLOC/QUERY_Q_COUNTER (counter sets QPs report to through
//! `qpc.counter_set_id`), QUERY_VPORT_COUNTER (RoCE traffic of the port) and
//! QUERY_CONG_STATISTICS (CNPs and ECN marks), from what [`crate::model::qcounters`] counts.

use rdmesh_core::mlx5::cmd::*;

use super::{bad_input, fail, need_init, reply, CmdResult, SYND_HANDLE, SYND_LIMIT, SYND_PARAM};
use crate::model::caps::MAX_Q_COUNTERS;
use crate::model::device::DeviceState;
use crate::model::qcounters::PortCounters;

fn set_exists(st: &DeviceState, id: u8) -> CmdResult {
    if !st.q_counters.contains_key(&id) {
        return Err(fail(
            CmdStatus::BadRes,
            SYND_HANDLE,
            format!("counter set {id} was not allocated (ALLOC_Q_COUNTER)"),
        ));
    }
    Ok(())
}

/// Checks a `counter_set_id` a QP command names: 0 (none) or an allocated set.
pub fn check_counter_set(st: &DeviceState, id: u8) -> CmdResult {
    if id == 0 {
        return Ok(());
    }
    set_exists(st, id)
}

pub fn execute(st: &mut DeviceState, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    match op {
        Opcode::AllocQCounter => {
            AllocQCounterIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let Some(id) =
                (1..=MAX_Q_COUNTERS.min(255) as u8).find(|i| !st.q_counters.contains_key(i))
            else {
                return Err(fail(
                    CmdStatus::NoRes,
                    SYND_LIMIT,
                    format!("all {MAX_Q_COUNTERS} counter sets are allocated (max_qp_cnt)"),
                ));
            };
            st.q_counters.insert(id, QueryQCounterOut::default());
            reply(&AllocQCounterOut { counter_set_id: id }, out)
        }
        Opcode::DeallocQCounter => {
            let i = DeallocQCounterIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            set_exists(st, i.counter_set_id)?;
            if st
                .qps
                .values()
                .any(|q| q.ctx.counter_set_id == i.counter_set_id)
            {
                return Err(fail(
                    CmdStatus::ResBusy,
                    super::SYND_BUSY,
                    format!("counter set {} still has QPs", i.counter_set_id),
                ));
            }
            st.q_counters.remove(&i.counter_set_id);
            reply(&DeallocQCounterOut {}, out)
        }
        Opcode::QueryQCounter => {
            let i = QueryQCounterIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            set_exists(st, i.counter_set_id)?;
            // Bring every QP's latest events into its set first.
            let DeviceState {
                qps,
                q_counters,
                port,
                ..
            } = st;
            for qp in qps.values_mut() {
                crate::model::qcounters::account(qp, q_counters, port);
            }
            let v = st.q_counters[&i.counter_set_id];
            if i.clear {
                st.q_counters.insert(i.counter_set_id, Default::default());
            }
            reply(&v, out)
        }
        Opcode::QueryVportCounter => {
            let i = QueryVportCounterIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            if i.other_vport || i.port_num > 1 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    "the model has one vport on port 1",
                ));
            }
            let p = st.port;
            if i.clear {
                let PortCounters {
                    np_ecn_marked_roce_packets,
                    np_cnp_sent,
                    rp_cnp_handled,
                    ..
                } = p;
                st.port = PortCounters {
                    np_ecn_marked_roce_packets,
                    np_cnp_sent,
                    rp_cnp_handled,
                    ..Default::default()
                };
            }
            let tc = |packets, octets| TrafficCounter { packets, octets };
            reply(
                &QueryVportCounterOut {
                    received_errors: tc(p.rx_errors, p.rx_error_octets),
                    received_ib_unicast: tc(p.rx_packets, p.rx_octets),
                    transmitted_ib_unicast: tc(p.tx_packets, p.tx_octets),
                    ..Default::default()
                },
                out,
            )
        }
        Opcode::QueryCongStatistics => {
            let i = QueryCongStatisticsIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let DeviceState {
                qps,
                q_counters,
                port,
                ..
            } = st;
            for qp in qps.values_mut() {
                crate::model::qcounters::account(qp, q_counters, port);
            }
            let p = st.port;
            if i.clear {
                st.port.np_ecn_marked_roce_packets = 0;
                st.port.np_cnp_sent = 0;
                st.port.rp_cnp_handled = 0;
            }
            reply(
                &QueryCongStatisticsOut::from_counts(
                    p.rp_cnp_handled,
                    0,
                    p.np_ecn_marked_roce_packets,
                    p.np_cnp_sent,
                ),
                out,
            )
        }
        _ => Err(fail(
            CmdStatus::BadOp,
            super::SYND_OPCODE,
            "not a counter command",
        )),
    }
}
