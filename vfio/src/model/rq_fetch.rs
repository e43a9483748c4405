//! Reading receive WQEs: the RQ producer counter is dword 0 of the QP's doorbell record
//! (`MLX5_RCV_DBR`, written by software without an MMIO); WQEs between the device's
//! consumer counter and it are read from the ring (RQ at offset 0 of the QP buffer, stride
//! `16 << log_rq_stride`) and handed to the RC engine as receive WQEs whose `wr_id` is the
//! WQE counter (what the responder CQE's `wqe_counter` carries).

use rdmesh_core::mlx5::rq::parse_recv_wqe;
use rdmesh_core::rc::{RecvWqe, Sge};

use super::counters::ModelCounters;
use super::memory::DmaSpace;
use super::objects::{Qp, ENGINE_RQ};

/// Moves newly posted receive WQEs of `qp` into its engine.
pub fn sync(qp: &mut Qp, space: &DmaSpace, counters: &mut ModelCounters) {
    if qp.rq_size == 0 {
        return;
    }
    let Some(engine) = qp.engine.as_mut() else {
        return;
    };
    let mut db = [0u8; 4];
    if space.dma_read(qp.ctx.dbr_addr, &mut db).is_err() {
        counters.dma_faults += 1;
        return;
    }
    let head = u32::from_be_bytes(db) as u16;
    let mut wqe = vec![0u8; qp.rq_stride];
    while qp.rq_ci != head && engine.recv_queue_len() < ENGINE_RQ {
        let slot = (u32::from(qp.rq_ci) & (qp.rq_size - 1)) as usize;
        if qp.buf.read(space, slot * qp.rq_stride, &mut wqe).is_err() {
            counters.dma_faults += 1;
            return;
        }
        let mut r = RecvWqe {
            wr_id: u64::from(qp.rq_ci),
            sg_list: Default::default(),
        };
        for d in parse_recv_wqe(&wqe) {
            if d.byte_count == 0 {
                continue;
            }
            let _ = r.sg_list.push(Sge {
                addr: d.addr,
                length: d.byte_count,
                lkey: d.lkey,
            });
        }
        if engine.post_recv(r).is_err() {
            return;
        }
        counters.recv_wqes_fetched += 1;
        qp.rq_ci = qp.rq_ci.wrapping_add(1);
    }
}
