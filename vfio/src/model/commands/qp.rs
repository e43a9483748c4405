//! QP commands: CREATE_QP / DESTROY_QP and the state machine RST→INIT→RTR→RTS, 2ERR,
//! QUERY_QP (mlx5_ifc.h `qpc`, `ads`; IBTA vol. 1 §10.3.1 transitions). The RC engine is
//! created at INIT2RTR from the context's responder attributes and enabled at RTR2RTS.

use std::collections::BTreeMap;

use rdmesh_core::mlx5::cmd::*;
use rdmesh_core::rc::{Mtu, RtrConfig, RtsConfig};
use rdmesh_core::wire::Psn;

use super::resource::queue_buf;
use super::{
    bad_input, fail, need_init, reply, CmdResult, SYND_DMA, SYND_HANDLE, SYND_PARAM, SYND_QP_STATE,
};
use crate::model::device::DeviceState;
use crate::model::objects::{Engine, Qp, QpHwState};

/// P_Key of every modeled QP (default partition, full member; pkey_index 0).
pub const DEFAULT_PKEY: u16 = 0xffff;

fn qp_mut(st: &mut DeviceState, qpn: u32) -> std::result::Result<&mut Qp, super::Fail> {
    st.qps.get_mut(&qpn).ok_or_else(|| {
        fail(
            CmdStatus::BadRes,
            SYND_HANDLE,
            format!("QP {qpn:#x} does not exist"),
        )
    })
}

fn need_state(qp: &Qp, qpn: u32, want: QpHwState, cmd: &str) -> CmdResult {
    if qp.state != want {
        return Err(fail(
            CmdStatus::BadQpState,
            SYND_QP_STATE,
            format!("{cmd} on QP {qpn:#x} in {:?} (needs {want:?})", qp.state),
        ));
    }
    Ok(())
}

fn create(st: &mut DeviceState, input: &[u8], out: &mut [u8]) -> CmdResult {
    let i = CreateQpIn::parse(input).map_err(bad_input)?;
    need_init(st)?;
    let c = i.qpc;
    if c.st != QP_ST_RC {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_PARAM,
            format!("qpc.st {} (the model runs RC = 0 only)", c.st),
        ));
    }
    if !st.pds.contains(&c.pd) {
        return Err(fail(
            CmdStatus::BadRes,
            SYND_HANDLE,
            format!("PD {:#x} does not exist", c.pd),
        ));
    }
    if !st.uars.contains(&c.uar_page) {
        return Err(fail(
            CmdStatus::BadRes,
            SYND_HANDLE,
            format!("UAR {:#x} does not exist", c.uar_page),
        ));
    }
    for (name, cqn) in [("cqn_snd", c.cqn_snd), ("cqn_rcv", c.cqn_rcv)] {
        if !st.cqs.contains_key(&cqn) {
            return Err(fail(
                CmdStatus::BadRes,
                SYND_HANDLE,
                format!("{name} {cqn:#x} does not exist"),
            ));
        }
    }
    if i.wq_umem_valid || c.dbr_umem_valid {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_PARAM,
            "UMEMs are not modeled: give a PAS list and dbr_addr",
        ));
    }
    if c.log_sq_size > crate::model::caps::LOG_MAX_QUEUE
        || c.log_rq_size > crate::model::caps::LOG_MAX_QUEUE
    {
        return Err(fail(
            CmdStatus::BadParam,
            super::SYND_LIMIT,
            "log_sq_size / log_rq_size exceed the capability",
        ));
    }
    if !st.space.is_mapped(c.dbr_addr, 8) {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_DMA,
            format!("dbr_addr {:#x} is not mapped", c.dbr_addr),
        ));
    }
    let (rq_size, rq_stride) = match c.rq_type {
        QP_RQ_TYPE_REGULAR => (1u32 << c.log_rq_size, 16usize << c.log_rq_stride),
        QP_RQ_TYPE_ZERO_SIZE => (0, 0),
        t => {
            return Err(fail(
                CmdStatus::BadParam,
                SYND_PARAM,
                format!("rq_type {t} (0 regular, 3 zero-size)"),
            ))
        }
    };
    let sq_wqebbs = if c.no_sq { 0 } else { 1u32 << c.log_sq_size };
    let sq_offset = rq_size as usize * rq_stride;
    let bytes = sq_offset + sq_wqebbs as usize * 64;
    let buf = queue_buf(st, &i.pas, c.log_page_size, bytes.max(1))?;
    let qpn = st.alloc_id();
    reply(&CreateQpOut { qpn, ece: 0 }, out)?;
    let mut ctx = c;
    ctx.state = QP_STATE_RST;
    st.qps.insert(
        qpn,
        Qp {
            state: QpHwState::Rst,
            ctx,
            buf,
            sq_offset,
            sq_wqebbs,
            rq_size,
            rq_stride,
            sq_ci: 0,
            rq_ci: 0,
            inline: BTreeMap::new(),
            engine: None,
            timing: Default::default(),
            seen: Default::default(),
        },
    );
    Ok(())
}

/// The fields INIT2INIT / RTS2RTS change, as `opt_param_mask` names them.
fn modify_optional(qp: &mut Qp, c: &QpContext, mask: u32) -> CmdResult {
    let known = QP_OPTPAR_RRE
        | QP_OPTPAR_RWE
        | QP_OPTPAR_RAE
        | QP_OPTPAR_PKEY_INDEX
        | QP_OPTPAR_RNR_TIMEOUT
        | QP_OPTPAR_PRI_PORT
        | QP_OPTPAR_COUNTER_SET_ID;
    if mask & !known != 0 {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_PARAM,
            format!(
                "opt_param_mask {:#x} has bits the model does not modify ({:#x})",
                mask,
                mask & !known
            ),
        ));
    }
    if mask & QP_OPTPAR_PRI_PORT != 0 && c.primary_address_path.vhca_port_num > 1 {
        return Err(fail(
            CmdStatus::BadParam,
            SYND_PARAM,
            format!(
                "vhca_port_num {} (the model has port 1)",
                c.primary_address_path.vhca_port_num
            ),
        ));
    }
    if mask & QP_OPTPAR_RRE != 0 {
        qp.ctx.rre = c.rre;
    }
    if mask & QP_OPTPAR_RWE != 0 {
        qp.ctx.rwe = c.rwe;
    }
    if mask & QP_OPTPAR_RAE != 0 {
        qp.ctx.rae = c.rae;
        qp.ctx.atomic_mode = c.atomic_mode;
    }
    if mask & QP_OPTPAR_PKEY_INDEX != 0 {
        qp.ctx.primary_address_path.pkey_index = c.primary_address_path.pkey_index;
    }
    if mask & QP_OPTPAR_RNR_TIMEOUT != 0 {
        qp.ctx.min_rnr_nak = c.min_rnr_nak;
    }
    if mask & QP_OPTPAR_PRI_PORT != 0 {
        qp.ctx.primary_address_path.vhca_port_num = c.primary_address_path.vhca_port_num;
    }
    if mask & QP_OPTPAR_COUNTER_SET_ID != 0 {
        qp.ctx.counter_set_id = c.counter_set_id;
    }
    Ok(())
}

pub fn execute(st: &mut DeviceState, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    match op {
        Opcode::CreateQp => create(st, input, out),
        Opcode::DestroyQp => {
            let i = DestroyQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            qp_mut(st, i.qpn)?;
            if let Some(mut qp) = st.qps.remove(&i.qpn) {
                crate::model::qcounters::account(&mut qp, &mut st.q_counters, &mut st.port);
            }
            reply(&DestroyQpOut {}, out)
        }
        Opcode::Rst2InitQp => {
            let i = Rst2InitQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let qp = qp_mut(st, i.qpn)?;
            need_state(qp, i.qpn, QpHwState::Rst, "RST2INIT_QP")?;
            let c = i.qpc;
            if c.primary_address_path.vhca_port_num > 1 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!(
                        "vhca_port_num {} (the model has port 1)",
                        c.primary_address_path.vhca_port_num
                    ),
                ));
            }
            super::counters::check_counter_set(st, c.counter_set_id)?;
            let qp = qp_mut(st, i.qpn)?;
            qp.ctx.rre = c.rre;
            qp.ctx.rwe = c.rwe;
            qp.ctx.rae = c.rae;
            qp.ctx.atomic_mode = c.atomic_mode;
            qp.ctx.primary_address_path.pkey_index = c.primary_address_path.pkey_index;
            qp.ctx.primary_address_path.vhca_port_num = c.primary_address_path.vhca_port_num;
            qp.ctx.counter_set_id = c.counter_set_id;
            qp.state = QpHwState::Init;
            qp.ctx.state = QP_STATE_INIT;
            reply(&Rst2InitQpOut { ece: 0 }, out)
        }
        Opcode::Init2RtrQp => {
            let i = Init2RtrQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let c = i.qpc;
            let gid_ok = st
                .gids
                .contains_key(&u16::from(c.primary_address_path.src_addr_index));
            let qp = qp_mut(st, i.qpn)?;
            need_state(qp, i.qpn, QpHwState::Init, "INIT2RTR_QP")?;
            let Some(mtu) = Mtu::from_ibv_mtu(c.mtu) else {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("qpc.mtu {} (1 = 256 .. 5 = 4096)", c.mtu),
                ));
            };
            if !gid_ok {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!(
                        "src_addr_index {} names no GID: program it with SET_ROCE_ADDRESS first",
                        c.primary_address_path.src_addr_index
                    ),
                ));
            }
            if c.remote_qpn > 0x00ff_ffff || c.remote_qpn == 0 {
                return Err(fail(
                    CmdStatus::BadParam,
                    SYND_PARAM,
                    format!("remote_qpn {:#x}", c.remote_qpn),
                ));
            }
            let port = qp.ctx.primary_address_path.vhca_port_num;
            let pkey_index = qp.ctx.primary_address_path.pkey_index;
            qp.ctx.mtu = c.mtu;
            qp.ctx.log_msg_max = c.log_msg_max;
            qp.ctx.remote_qpn = c.remote_qpn;
            qp.ctx.next_rcv_psn = c.next_rcv_psn;
            qp.ctx.min_rnr_nak = c.min_rnr_nak;
            qp.ctx.log_rra_max = c.log_rra_max;
            qp.ctx.primary_address_path = c.primary_address_path;
            if c.primary_address_path.vhca_port_num == 0 {
                qp.ctx.primary_address_path.vhca_port_num = port;
            }
            qp.ctx.primary_address_path.pkey_index = pkey_index;
            let rtr = RtrConfig {
                local_qpn: i.qpn,
                remote_qpn: c.remote_qpn,
                path_mtu: mtu,
                rq_psn: Psn::new(c.next_rcv_psn),
                pkey: DEFAULT_PKEY,
                min_rnr_timer: c.min_rnr_nak,
                max_dest_rd_atomic: 1u8.checked_shl(u32::from(c.log_rra_max)).unwrap_or(u8::MAX),
            };
            qp.engine = Some(Box::new(Engine::new(rtr)));
            qp.seen = Default::default();
            qp.state = QpHwState::Rtr;
            qp.ctx.state = QP_STATE_RTR;
            reply(&Init2RtrQpOut { ece: 0 }, out)
        }
        Opcode::Rtr2RtsQp => {
            let i = Rtr2RtsQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let qp = qp_mut(st, i.qpn)?;
            need_state(qp, i.qpn, QpHwState::Rtr, "RTR2RTS_QP")?;
            let c = i.qpc;
            qp.ctx.next_send_psn = c.next_send_psn;
            qp.ctx.retry_count = c.retry_count;
            qp.ctx.rnr_retry = c.rnr_retry;
            qp.ctx.log_sra_max = c.log_sra_max;
            qp.ctx.primary_address_path.ack_timeout = c.primary_address_path.ack_timeout;
            let rts = RtsConfig {
                sq_psn: Psn::new(c.next_send_psn),
                timeout: c.primary_address_path.ack_timeout,
                retry_cnt: c.retry_count,
                rnr_retry: c.rnr_retry,
                max_rd_atomic: 1u8.checked_shl(u32::from(c.log_sra_max)).unwrap_or(u8::MAX),
            };
            if let Some(e) = qp.engine.as_mut() {
                e.to_rts(rts);
            }
            qp.state = QpHwState::Rts;
            qp.ctx.state = QP_STATE_RTS;
            reply(&Rtr2RtsQpOut { ece: 0 }, out)
        }
        Opcode::Qp2Err => {
            let i = Qp2ErrIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let qp = qp_mut(st, i.qpn)?;
            if let Some(e) = qp.engine.as_mut() {
                e.to_error();
            }
            qp.state = QpHwState::Err;
            qp.ctx.state = QP_STATE_ERR;
            reply(&Qp2ErrOut {}, out)
        }
        Opcode::Qp2Rst => {
            let i = Qp2RstIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let DeviceState {
                qps,
                q_counters,
                port,
                ..
            } = st;
            let qp = qps.get_mut(&i.qpn).ok_or_else(|| {
                fail(
                    CmdStatus::BadRes,
                    SYND_HANDLE,
                    format!("QP {:#x} does not exist", i.qpn),
                )
            })?;
            // Count what the engine did before it goes, then forget the connection: ring
            // positions, inline data, the engine; the buffers, CQs and PD stay.
            crate::model::qcounters::account(qp, q_counters, port);
            qp.engine = None;
            qp.seen = Default::default();
            qp.inline.clear();
            qp.sq_ci = 0;
            qp.rq_ci = 0;
            let keep = qp.ctx;
            qp.ctx = QpContext {
                st: keep.st,
                pm_state: keep.pm_state,
                pd: keep.pd,
                log_rq_size: keep.log_rq_size,
                log_rq_stride: keep.log_rq_stride,
                no_sq: keep.no_sq,
                log_sq_size: keep.log_sq_size,
                ts_format: keep.ts_format,
                uar_page: keep.uar_page,
                user_index: keep.user_index,
                log_page_size: keep.log_page_size,
                cqn_snd: keep.cqn_snd,
                cqn_rcv: keep.cqn_rcv,
                dbr_addr: keep.dbr_addr,
                rq_type: keep.rq_type,
                page_offset: keep.page_offset,
                state: QP_STATE_RST,
                ..Default::default()
            };
            qp.state = QpHwState::Rst;
            reply(&Qp2RstOut {}, out)
        }
        Opcode::Init2InitQp => {
            let i = Init2InitQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let m = i.opt_param_mask;
            if m & QP_OPTPAR_COUNTER_SET_ID != 0 {
                super::counters::check_counter_set(st, i.qpc.counter_set_id)?;
            }
            let qp = qp_mut(st, i.qpn)?;
            need_state(qp, i.qpn, QpHwState::Init, "INIT2INIT_QP")?;
            modify_optional(qp, &i.qpc, m)?;
            reply(&Init2InitQpOut { ece: 0 }, out)
        }
        Opcode::Rts2RtsQp => {
            let i = Rts2RtsQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let m = i.opt_param_mask;
            if m & QP_OPTPAR_COUNTER_SET_ID != 0 {
                super::counters::check_counter_set(st, i.qpc.counter_set_id)?;
            }
            let qp = qp_mut(st, i.qpn)?;
            need_state(qp, i.qpn, QpHwState::Rts, "RTS2RTS_QP")?;
            modify_optional(qp, &i.qpc, m)?;
            reply(&Rts2RtsQpOut { ece: 0 }, out)
        }
        Opcode::QueryQp => {
            let i = QueryQpIn::parse(input).map_err(bad_input)?;
            need_init(st)?;
            let qp = qp_mut(st, i.qpn)?;
            let mut ctx = qp.ctx;
            ctx.state = qp.state.code();
            ctx.hw_sq_wqebb_counter = qp.sq_ci;
            ctx.hw_rq_counter = u32::from(qp.rq_ci);
            if let Some(e) = &qp.engine {
                ctx.next_send_psn = u32::from(e.sq_psn());
                ctx.next_rcv_psn = u32::from(e.rq_psn());
            }
            reply(
                &QueryQpOut {
                    opt_param_mask: 0,
                    ece: 0,
                    qpc: ctx,
                    pas: Pas::Addrs(&[]),
                },
                out,
            )
        }
        _ => Err(fail(
            CmdStatus::BadOp,
            super::SYND_OPCODE,
            "not a QP command",
        )),
    }
}
