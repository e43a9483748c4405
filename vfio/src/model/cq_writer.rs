//! Writing CQEs (core's 64-byte CQE format) into a CQ ring with the owner-bit protocol:
//! entry `pi & (n − 1)`, owner = bit log2(n) of `pi` (rdma-core cq.c `get_sw_cqe` from the
//! device side), overrun detection against the consumer index in the CQ's doorbell record,
//! and completion events for an armed CQ.

use rdmesh_core::mlx5::cmd::EqeRepr;
use rdmesh_core::mlx5::cqe::{self, Cqe64};
use rdmesh_core::mlx5::CqeRepr;

use super::device::DeviceState;

/// CQ error syndrome "overrun" (Linux cq.c `MLX5_CQE_SYNDROME` for CQ error events).
const CQ_ERROR_OVERRUN: u8 = 1;

/// Writes `repr` (owner bit set here) as the next CQE of CQ `cqn`. Returns `false` when the
/// CQ does not exist, is full or its ring is not mapped.
pub fn write_cqe(st: &mut DeviceState, cqn: u32, mut repr: CqeRepr) -> bool {
    let Some(cq) = st.cqs.get(&cqn) else {
        return false;
    };
    let n = 1u32 << cq.log_size;
    let mut db = [0u8; 4];
    let ci = if st.space.dma_read(cq.dbr_addr, &mut db).is_ok() {
        let ci24 = u32::from_be_bytes(db) & 0x00ff_ffff;
        let mut ci = (cq.pi & !0x00ff_ffff) | ci24;
        if ci > cq.pi {
            ci = ci.wrapping_sub(1 << 24);
        }
        ci
    } else {
        cq.pi
    };
    if cq.pi.wrapping_sub(ci) >= n {
        st.counters.cq_overruns += 1;
        tracing::error!(cqn, pi = cq.pi, ci, "model: CQ overrun (consumer index in the CQ doorbell record not advanced); CQE dropped");
        super::eq::post_event(
            st,
            EqeRepr::CqError {
                cqn,
                syndrome: CQ_ERROR_OVERRUN,
            },
        );
        return false;
    }
    repr.owner = (cq.pi >> cq.log_size) & 1 == 1;
    let mut raw = [0u8; cqe::LEN];
    repr.emit(&mut Cqe64::new_unchecked(&mut raw[..]));
    let off = (cq.pi & (n - 1)) as usize * cqe::LEN;
    let buf = cq.buf.clone();
    if buf.write(&st.space, off, &raw).is_err() {
        st.counters.dma_faults += 1;
        return false;
    }
    st.counters.cqes_written += 1;
    let acked = match repr.opcode {
        rdmesh_core::mlx5::CqeOpcode::Req | rdmesh_core::mlx5::CqeOpcode::ReqErr => {
            st.qps.get(&repr.qpn).and_then(|q| {
                let n = q.timing.done.len();
                (n != 0).then(|| q.timing.done[usize::from(repr.wqe_counter) & (n - 1)])
            })
        }
        _ => None,
    };
    st.pcie.cqe(cqn, acked);
    if repr.opcode.is_error() {
        st.counters.error_cqes += 1;
    }
    let cq = st.cqs.get_mut(&cqn).expect("looked up above");
    cq.pi = cq.pi.wrapping_add(1);
    let fire = match cq.armed {
        Some(false) => true,
        Some(true) => repr.se || repr.opcode.is_error(),
        None => false,
    };
    if fire {
        cq.armed = None;
        super::eq::post_event(st, EqeRepr::Comp { cqn });
    }
    true
}

/// A CQ doorbell (UAR + 0x20): 64-bit, high BE32 `sn << 28 | cmd | ci`, low BE32 CQN
/// (rdma-core cq.c `mlx5_arm_cq`). A CQE already past `ci` raises the event at once.
pub fn arm(st: &mut DeviceState, bytes: [u8; 8]) -> bool {
    let hi = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let cqn = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) & 0x00ff_ffff;
    let Some(cq) = st.cqs.get_mut(&cqn) else {
        return false;
    };
    let solicited_only = hi & (1 << 24) != 0;
    let ci = hi & 0x00ff_ffff;
    if (cq.pi & 0x00ff_ffff) != ci {
        cq.armed = None;
        super::eq::post_event(st, EqeRepr::Comp { cqn });
    } else {
        cq.armed = Some(solicited_only);
    }
    true
}
