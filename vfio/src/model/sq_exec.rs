//! The send side of the data plane: fetching send WQEs from a QP's ring in modeled DMA
//! memory (up to the producer counter of the doorbell record, `MLX5_SND_DBR`), decoding them
//! with core's decoder, executing them with the QP's RC engine, turning the engine's packets
//! into RoCEv2 frames, and writing its completions as CQEs.
//!
//! WQE → engine: `wr_id` = WQE index | mlx5 opcode << 16, so a requester CQE carries the
//! WQE index in `wqe_counter` and the opcode in `sop_drop_qpn` bits 31..24. Inline data is
//! kept per WQE index and read through [`INLINE_LKEY`]. Unsignaled WQEs (CE = 0) complete
//! silently unless they fail; a WQE the model cannot run completes with an error CQE
//! (LOCAL_QP_OP) and moves the QP to Error, as hardware does.

use rdmesh_core::mlx5::opcode::Opcode as WqeOpcode;
use rdmesh_core::mlx5::{decode_wqe, CqeError, CqeOpcode, CqeRepr, QpType, Segment, Syndrome};
use rdmesh_core::rc::{QpState, SendOpcode, SendWqe, Sge, WcOpcode, WcStatus, WorkCompletion};

use super::counters::ModelCounters;
use super::cq_writer::write_cqe;
use super::device::DeviceState;
use super::memory::DmaSpace;
use super::mkey_access::{KeyMemory, INLINE_LKEY};
use super::objects::{Qp, QpHwState, ENGINE_SQ};
use super::pcie::{PcieState, WqeShape};

/// Runs every QP: receive WQEs in, send WQEs in, timers, packets out, completions out.
pub fn run_all(st: &mut DeviceState) {
    let now = st.now();
    let qpns: Vec<u32> = st.qps.keys().copied().collect();
    let mut cqes: Vec<(u32, CqeRepr)> = Vec::new();
    for qpn in qpns {
        run_qp(st, qpn, now, &mut cqes);
    }
    for (cqn, c) in cqes {
        write_cqe(st, cqn, c);
    }
}

fn syndrome(s: WcStatus) -> Option<Syndrome> {
    Some(match s {
        WcStatus::Success => return None,
        WcStatus::LocLenErr => Syndrome::LocalLengthErr,
        WcStatus::LocQpOpErr => Syndrome::LocalQpOpErr,
        WcStatus::LocProtErr => Syndrome::LocalProtErr,
        WcStatus::WrFlushErr => Syndrome::WrFlushErr,
        WcStatus::BadRespErr => Syndrome::BadRespErr,
        WcStatus::LocAccessErr => Syndrome::LocalAccessErr,
        WcStatus::RemInvReqErr => Syndrome::RemoteInvalReqErr,
        WcStatus::RemAccessErr => Syndrome::RemoteAccessErr,
        WcStatus::RemOpErr => Syndrome::RemoteOpErr,
        WcStatus::RetryExcErr => Syndrome::TransportRetryExcErr,
        WcStatus::RnrRetryExcErr => Syndrome::RnrRetryExcErr,
    })
}

/// A requester CQE (REQ, or REQ_ERR with a syndrome).
pub fn req_cqe(
    qpn: u32,
    wqe_index: u16,
    wqe_opcode: u8,
    byte_cnt: u32,
    syn: Option<Syndrome>,
) -> CqeRepr {
    CqeRepr {
        opcode: if syn.is_some() {
            CqeOpcode::ReqErr
        } else {
            CqeOpcode::Req
        },
        qpn,
        s_wqe_opcode: wqe_opcode,
        wqe_counter: wqe_index,
        byte_cnt,
        error: syn.map(|syndrome| CqeError {
            syndrome,
            vendor_err_synd: 0,
        }),
        ..CqeRepr::default()
    }
}

fn send_cqe(qpn: u32, wc: &WorkCompletion) -> CqeRepr {
    let byte_cnt = if matches!(
        wc.opcode,
        WcOpcode::RdmaRead | WcOpcode::CompSwap | WcOpcode::FetchAdd
    ) {
        wc.byte_len
    } else {
        0
    };
    req_cqe(
        qpn,
        wc.wr_id as u16,
        (wc.wr_id >> 16) as u8,
        byte_cnt,
        syndrome(wc.status),
    )
}

fn recv_cqe(qpn: u32, wc: &WorkCompletion) -> CqeRepr {
    let syn = syndrome(wc.status);
    let opcode = match (syn, wc.opcode, wc.imm_data) {
        (Some(_), _, _) => CqeOpcode::RespErr,
        (None, WcOpcode::RecvRdmaWithImm, _) => CqeOpcode::RespWrImm,
        (None, _, Some(_)) => CqeOpcode::RespSendImm,
        _ => CqeOpcode::RespSend,
    };
    CqeRepr {
        opcode,
        qpn,
        wqe_counter: wc.wr_id as u16,
        byte_cnt: wc.byte_len,
        imm_inval_pkey: wc.imm_data.unwrap_or(0),
        error: syn.map(|syndrome| CqeError {
            syndrome,
            vendor_err_synd: 0,
        }),
        ..CqeRepr::default()
    }
}

fn run_qp(
    st: &mut DeviceState,
    qpn: u32,
    now: rdmesh_core::rc::Instant,
    cqes: &mut Vec<(u32, CqeRepr)>,
) {
    let DeviceState {
        qps,
        mkeys,
        space,
        counters,
        gids,
        outbox,
        pcie,
        q_counters,
        port,
        ..
    } = st;
    let Some(qp) = qps.get_mut(&qpn) else { return };
    if qp.engine.is_none() {
        return;
    }
    super::rq_fetch::sync(qp, space, counters);
    fetch_sq(qp, qpn, space, counters, pcie, cqes);
    let cqn_snd = qp.ctx.cqn_snd;
    let cqn_rcv = qp.ctx.cqn_rcv;
    let path = qp.ctx.primary_address_path;
    let remote_qpn = qp.ctx.remote_qpn;
    let gid = gids.get(&u16::from(path.src_addr_index)).copied();
    let Qp {
        engine,
        inline,
        ctx,
        state,
        ..
    } = qp;
    let Some(engine) = engine.as_mut() else {
        return;
    };
    if engine.next_deadline().is_some_and(|d| d.0 <= now.0) {
        engine.handle_timeout(now);
    }
    let mut mem = KeyMemory {
        mkeys,
        space,
        pd: ctx.pd,
        inline,
        faults: 0,
        writes: Vec::new(),
    };
    let mut buf = vec![0u8; engine.max_packet_len()];
    while let Some(n) = engine.poll_transmit(now, &mut mem, &mut buf) {
        let Some(gid) = &gid else {
            tracing::error!(
                qpn,
                index = path.src_addr_index,
                "model: QP's source GID entry vanished; packet dropped"
            );
            continue;
        };
        let mut frame = Vec::new();
        match super::frame::build(&buf[..n], &path, gid, qpn, remote_qpn, &mut frame) {
            Ok(()) => {
                counters.frames_sent += 1;
                port.tx_packets += 1;
                port.tx_octets += frame.len() as u64;
                outbox.push(frame);
            }
            Err(e) => tracing::error!(qpn, error = %e, "model: cannot frame an engine packet"),
        }
    }
    // CNPs of the notification point (CE-marked packets received), to the QP's peer.
    while let Some(n) = engine.poll_cnp(&mut buf) {
        let Some(gid) = &gid else { break };
        let mut frame = Vec::new();
        match super::frame::build(&buf[..n], &path, gid, qpn, remote_qpn, &mut frame) {
            Ok(()) => {
                counters.frames_sent += 1;
                port.tx_packets += 1;
                port.tx_octets += frame.len() as u64;
                outbox.push(frame);
            }
            Err(e) => tracing::error!(qpn, error = %e, "model: cannot frame a CNP"),
        }
    }
    counters.dma_faults += mem.faults;
    let set_id = ctx.counter_set_id;
    while let Some(wc) = engine.poll_send_completion() {
        super::qcounters::count_completion(q_counters.get_mut(&set_id), true, wc.status);
        cqes.push((cqn_snd, send_cqe(qpn, &wc)));
    }
    while let Some(wc) = engine.poll_recv_completion() {
        super::qcounters::count_completion(q_counters.get_mut(&set_id), false, wc.status);
        cqes.push((cqn_rcv, recv_cqe(qpn, &wc)));
    }
    if engine.state() == QpState::Error && *state != QpHwState::Err {
        *state = QpHwState::Err;
        ctx.state = QpHwState::Err.code();
    }
    super::qcounters::account(qp, q_counters, port);
}

/// Moves rung send WQEs into the engine (as many as it holds).
fn fetch_sq(
    qp: &mut Qp,
    qpn: u32,
    space: &DmaSpace,
    counters: &mut ModelCounters,
    pcie: &mut PcieState,
    cqes: &mut Vec<(u32, CqeRepr)>,
) {
    if qp.sq_wqebbs == 0 {
        return;
    }
    let mut db = [0u8; 4];
    if space.dma_read(qp.ctx.dbr_addr + 4, &mut db).is_err() {
        counters.dma_faults += 1;
        return;
    }
    let pc = u32::from_be_bytes(db) as u16;
    let mask = qp.sq_wqebbs - 1;
    while qp.sq_ci != pc {
        let Some(engine) = qp.engine.as_ref() else {
            return;
        };
        if engine.state() == QpState::Rtr || engine.send_queue_len() >= ENGINE_SQ {
            return;
        }
        let index = qp.sq_ci;
        let slot = u32::from(index) & mask;
        let mut first = [0u8; 64];
        if qp
            .buf
            .read(space, qp.sq_offset + slot as usize * 64, &mut first)
            .is_err()
        {
            counters.dma_faults += 1;
            return;
        }
        let ds = usize::from(first[7] & 0x3f);
        let nbb = (ds * 16).div_ceil(64).clamp(1, 16);
        let mut wqe = vec![0u8; nbb * 64];
        wqe[..64].copy_from_slice(&first);
        for b in 1..nbb {
            let s = (slot + b as u32) & mask;
            if qp
                .buf
                .read(
                    space,
                    qp.sq_offset + s as usize * 64,
                    &mut wqe[b * 64..(b + 1) * 64],
                )
                .is_err()
            {
                counters.dma_faults += 1;
                return;
            }
        }
        counters.wqebbs_fetched += nbb as u64;
        counters.wqes_executed += 1;
        qp.sq_ci = index.wrapping_add(nbb as u16);
        let opcode_byte = first[3];
        let decoded = to_send_wqe(qp, qpn, index, &wqe);
        if let Ok(w) = &decoded {
            let shape = wqe_shape(qp, index, nbb as u16, w.as_ref());
            pcie.send_wqe(&mut qp.timing, shape);
        }
        match decoded {
            Ok(Some(w)) => {
                let engine = qp.engine.as_mut().expect("checked above");
                if let Err(e) = engine.post_send(w) {
                    tracing::warn!(qpn, index, error = %e, "model: send WQE refused by the RC engine");
                    cqes.push((
                        qp.ctx.cqn_snd,
                        req_cqe(qpn, index, opcode_byte, 0, Some(Syndrome::LocalLengthErr)),
                    ));
                    engine.to_error();
                }
            }
            Ok(None) => {
                // NOP: a CQE if signaled, nothing else.
                if first[11] & 0x0c != 0 {
                    cqes.push((qp.ctx.cqn_snd, req_cqe(qpn, index, opcode_byte, 0, None)));
                }
            }
            Err(why) => {
                tracing::warn!(qpn, index, "model: bad send WQE: {why}");
                cqes.push((
                    qp.ctx.cqn_snd,
                    req_cqe(qpn, index, opcode_byte, 0, Some(Syndrome::LocalQpOpErr)),
                ));
                if let Some(e) = qp.engine.as_mut() {
                    e.to_error();
                }
            }
        }
    }
}

/// What the timing model needs of one WQE (`None`: a NOP).
fn wqe_shape(qp: &Qp, index: u16, wqebbs: u16, w: Option<&SendWqe>) -> WqeShape {
    let mtu = 128u64 << qp.ctx.mtu.clamp(1, 5);
    let mut s = WqeShape {
        index,
        wqebbs,
        ring_wqebbs: qp.sq_wqebbs,
        gather_bytes: 0,
        wire_bytes: 0,
        first_extra: 0,
        response_bytes: 0,
        mtu,
        nop: true,
    };
    let Some(w) = w else { return s };
    s.nop = false;
    let len: u64 = w.sg_list.iter().map(|g| u64::from(g.length)).sum();
    let gather: u64 = w
        .sg_list
        .iter()
        .filter(|g| g.lkey != INLINE_LKEY)
        .map(|g| u64::from(g.length))
        .sum();
    match w.opcode {
        SendOpcode::Send | SendOpcode::SendWithImm => {
            s.gather_bytes = gather;
            s.wire_bytes = len;
        }
        SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm => {
            s.gather_bytes = gather;
            s.wire_bytes = len;
            s.first_extra = 16;
        }
        SendOpcode::RdmaRead => {
            s.first_extra = 16;
            s.response_bytes = len;
        }
        _ => {
            s.first_extra = 28;
            s.response_bytes = 8;
        }
    }
    s
}

/// Decodes one WQE into the engine's form; `Ok(None)` for a NOP.
fn to_send_wqe(qp: &mut Qp, qpn: u32, index: u16, wqe: &[u8]) -> Result<Option<SendWqe>, String> {
    let w = decode_wqe(wqe, 0, QpType::Rc).map_err(|e| format!("does not decode: {e:?}"))?;
    let c = w.ctrl;
    if c.wqe_index != index {
        return Err(format!(
            "control segment index {} where the device expected {index}",
            c.wqe_index
        ));
    }
    if c.qpn != qpn {
        return Err(format!(
            "control segment QPN {:#x} rung on QP {qpn:#x}",
            c.qpn
        ));
    }
    let mut raddr = None;
    let mut atomic = None;
    let mut sges: Vec<Sge> = Vec::new();
    let mut inline = Vec::new();
    for s in &w.segments {
        match s {
            Segment::Raddr(r) => raddr = Some(*r),
            Segment::Atomic(a) => atomic = Some(*a),
            Segment::Data(d) => {
                if d.byte_count != 0 {
                    sges.push(Sge {
                        addr: d.addr,
                        length: d.byte_count,
                        lkey: d.lkey,
                    });
                }
            }
            Segment::Inline(b) => inline.extend(b.iter()),
            other => return Err(format!("segment {other:?} not valid on an RC send queue")),
        }
    }
    if !inline.is_empty() {
        sges.push(Sge {
            addr: u64::from(index) << 32,
            length: inline.len() as u32,
            lkey: INLINE_LKEY,
        });
        qp.inline.insert(index, inline);
    }
    let r = raddr.unwrap_or_default();
    let opcode = match c.opcode {
        WqeOpcode::Nop => return Ok(None),
        WqeOpcode::Send => SendOpcode::Send,
        WqeOpcode::SendImm => SendOpcode::SendWithImm,
        WqeOpcode::RdmaWrite => SendOpcode::RdmaWrite,
        WqeOpcode::RdmaWriteImm => SendOpcode::RdmaWriteWithImm,
        WqeOpcode::RdmaRead => SendOpcode::RdmaRead,
        WqeOpcode::AtomicCs => {
            let a = atomic.ok_or("atomic WQE without an atomic segment")?;
            SendOpcode::AtomicCmpAndSwp {
                compare: a.compare,
                swap: a.swap_add,
            }
        }
        WqeOpcode::AtomicFa => {
            let a = atomic.ok_or("atomic WQE without an atomic segment")?;
            SendOpcode::AtomicFetchAndAdd { add: a.swap_add }
        }
        o => return Err(format!("opcode {o:?} is not modeled")),
    };
    let mut sg_list: heapless::Vec<Sge, { rdmesh_core::rc::MAX_SGE }> = heapless::Vec::new();
    for s in sges {
        sg_list
            .push(s)
            .map_err(|_| "more gather entries than the engine takes")?;
    }
    Ok(Some(SendWqe {
        wr_id: u64::from(index) | u64::from(u8::from(c.opcode)) << 16,
        opcode,
        sg_list,
        remote_addr: r.raddr,
        rkey: r.rkey,
        imm: c.imm,
        signaled: c.fm_ce_se.signaled(),
        solicited: c.fm_ce_se.solicited(),
    }))
}
