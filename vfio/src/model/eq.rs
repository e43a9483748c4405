//! Event queues from the device side: writing an EQE with the owner-bit protocol (owner =
//! bit log2(nent) of the producer index, buffers initialised to owner 1 by software;
//! rdma-core mlx5_vfio.c `init_eq_buf`), overrun detection against the consumer index of the
//! EQ doorbell, and the interrupt of an armed EQ.

use rdmesh_core::mlx5::cmd::eqe::{self, Eqe};
use rdmesh_core::mlx5::cmd::EqeRepr;

use super::device::DeviceState;

/// Writes `ev` to the EQ that should receive it: for a completion the CQ's EQ, otherwise the
/// lowest-numbered EQ whose event mask has the type. No EQ: nothing (the driver polls).
pub fn post_event(st: &mut DeviceState, ev: EqeRepr) {
    let t = u8::from(ev.event_type());
    let eqn = match ev {
        EqeRepr::Comp { cqn } => st.cqs.get(&cqn).map(|c| c.eqn as u8),
        _ => st.eqs.iter().find(|(_, e)| e.wants(t)).map(|(n, _)| *n),
    };
    let Some(eqn) = eqn else { return };
    let Some(eq) = st.eqs.get(&eqn) else { return };
    let nent = 1u32 << eq.log_size;
    if eq.pi.wrapping_sub(eq.ci) >= nent {
        tracing::error!(eqn, "model: EQ overrun (consumer index not advanced through the EQ doorbell); event dropped");
        return;
    }
    let mut raw = [0u8; eqe::LEN];
    let owner = eqe::owner_for(eq.pi, nent);
    if ev
        .emit(&mut Eqe::new_unchecked(&mut raw[..]), owner)
        .is_err()
    {
        return;
    }
    let off = (eq.pi & (nent - 1)) as usize * eqe::LEN;
    let buf = eq.buf.clone();
    if buf.write(&st.space, off, &raw).is_err() {
        st.counters.dma_faults += 1;
        return;
    }
    st.counters.eqes_written += 1;
    let now = st.pcie.device_now();
    st.pcie
        .dma_write(now, eqe::LEN as u64, super::pcie::WriteKind::Event);
    let eq = st.eqs.get_mut(&eqn).expect("looked up above");
    eq.pi = eq.pi.wrapping_add(1);
    if eq.armed {
        eq.armed = false;
        st.interrupt();
    }
}

/// An EQ doorbell store (UAR + 0x40 arms, + 0x48 only updates): BE32 `eqn << 24 | ci`.
/// Arming with unconsumed EQEs raises the interrupt at once, as hardware does.
pub fn doorbell(st: &mut DeviceState, value: u32, arm: bool) -> bool {
    let eqn = (value >> 24) as u8;
    let Some(eq) = st.eqs.get_mut(&eqn) else {
        return false;
    };
    // 24-bit consumer index, extended against the producer index.
    let ci24 = value & 0x00ff_ffff;
    eq.ci = (eq.pi & !0x00ff_ffff) | ci24;
    if eq.ci > eq.pi {
        eq.ci = eq.ci.wrapping_sub(1 << 24);
    }
    if arm {
        if eq.ci != eq.pi {
            eq.armed = false;
            st.interrupt();
        } else {
            eq.armed = true;
        }
    }
    true
}
