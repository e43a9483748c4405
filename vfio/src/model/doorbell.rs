//! Stores to UAR pages (BAR0 + uar_index · 4096; Linux doorbell.h, rdma-core mlx5.h):
//! the CQ doorbell at 0x20, the EQ doorbells at 0x40 (arm) and 0x48 (update), and the four
//! BlueFlame/doorbell registers at 0x800 + k · 512, each two 256-byte halves used
//! alternately. An 8-byte store at the start of a half is the send doorbell (the first 8
//! bytes of the last control segment: `opmod_idx_opcode`, `qpn_ds`); further stores into the
//! half are the rest of a BlueFlame copy, which the model counts but does not use (it always
//! fetches the WQE from memory, which rdma-core also writes).

use rdmesh_core::mlx5::cmd::eqe::{EQ_DOORBELL_ARM_OFFSET, EQ_DOORBELL_UPDATE_OFFSET};
use rdmesh_core::mlx5::doorbell::{BLUEFLAME_BUFFER_SIZE, UAR_BF_OFFSET, UAR_CQ_DOORBELL_OFFSET};

use super::caps::LOG_BF_REG_SIZE;
use super::device::DeviceState;
use super::pcie::{DoorbellSeen, MmioArrival};

/// End of the BlueFlame registers in a UAR page.
const BF_END: usize = UAR_BF_OFFSET as usize + 4 * (1 << LOG_BF_REG_SIZE);

/// A 64-bit store of `bytes` (memory order) at `off` of UAR `uar`. Returns whether the
/// device may have work to do.
pub fn write64(st: &mut DeviceState, uar: u32, off: usize, bytes: [u8; 8]) -> bool {
    let arrival = st.pcie.arrival.take();
    if off == UAR_CQ_DOORBELL_OFFSET as usize {
        st.pcie.mmio_other(8);
        st.counters.cq_doorbells += 1;
        if !super::cq_writer::arm(st, bytes) {
            st.counters.bad_doorbells += 1;
            tracing::warn!(uar, "model: CQ doorbell for an unknown CQN");
        }
        return true;
    }
    if (UAR_BF_OFFSET as usize..BF_END).contains(&off) {
        if (off - UAR_BF_OFFSET as usize) % BLUEFLAME_BUFFER_SIZE as usize != 0 {
            st.counters.blueflame_writes += 1;
            if arrival.is_none() {
                // A BlueFlame copy not sent as one burst: each store is its own TLP.
                st.pcie.mmio_other(8);
            }
            return false;
        }
        st.counters.send_doorbells += 1;
        let (at, bf) = match arrival {
            Some(MmioArrival::BlueFlame(at)) => (at, true),
            Some(MmioArrival::Doorbell(at)) => (at, false),
            None => (st.pcie.mmio_doorbell(), false),
        };
        let qpn = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]) >> 8;
        let index = u16::from_be_bytes([bytes[1], bytes[2]]);
        let ds = usize::from(bytes[7] & 0x3f);
        let seen = DoorbellSeen {
            end: index.wrapping_add(((ds * 16).div_ceil(64)).max(1) as u16),
            at,
            bf_index: bf.then_some(index),
        };
        match st.qps.get_mut(&qpn) {
            Some(qp) if qp.ctx.uar_page == uar => qp.timing.doorbells.push_back(seen),
            Some(qp) => {
                st.counters.bad_doorbells += 1;
                tracing::warn!(
                    qpn,
                    uar,
                    qp_uar = qp.ctx.uar_page,
                    "model: send doorbell rung on a UAR page the QP was not created with"
                );
            }
            None => {
                st.counters.bad_doorbells += 1;
                tracing::warn!(qpn, uar, "model: send doorbell for an unknown QPN");
            }
        }
        return true;
    }
    if off == EQ_DOORBELL_ARM_OFFSET || off == EQ_DOORBELL_UPDATE_OFFSET {
        // A 64-bit store here carries the 32-bit register in its first four bytes.
        let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        st.pcie.mmio_other(8);
        return write32(st, uar, off, v);
    }
    st.counters.bad_doorbells += 1;
    tracing::warn!(
        uar,
        offset = off,
        "model: 64-bit store to an unused UAR offset"
    );
    false
}

/// A 32-bit store of the register value `value` (host order of the big-endian register) at
/// `off` of UAR `uar`.
pub fn write32(st: &mut DeviceState, uar: u32, off: usize, value: u32) -> bool {
    if off == EQ_DOORBELL_ARM_OFFSET || off == EQ_DOORBELL_UPDATE_OFFSET {
        st.counters.eq_doorbells += 1;
        if !super::eq::doorbell(st, value, off == EQ_DOORBELL_ARM_OFFSET) {
            st.counters.bad_doorbells += 1;
            tracing::warn!(
                uar,
                eqn = value >> 24,
                "model: EQ doorbell for an unknown EQN"
            );
        }
        return true;
    }
    st.counters.bad_doorbells += 1;
    tracing::warn!(
        uar,
        offset = off,
        "model: 32-bit store to a UAR offset that takes none (doorbells are single 64-bit stores)"
    );
    false
}
