//! Receiving a frame from the link: parse it as RoCEv2 with core's parser, check the ICRC,
//! the destination MAC (the port's or a GID entry's) and the destination QP, then hand the
//! transport headers and payload to that QP's RC engine with memory reached through MKEYs.

use rdmesh_core::wire::RocePacket;

use super::device::DeviceState;
use super::mkey_access::KeyMemory;

/// Processes one received frame.
pub fn receive_frame(st: &mut DeviceState, frame: &[u8]) {
    st.counters.frames_received += 1;
    if st.faults.link_down {
        st.counters.frames_dropped += 1;
        return;
    }
    let Ok(pkt) = RocePacket::parse(frame) else {
        st.counters.frames_dropped += 1;
        tracing::debug!(
            len = frame.len(),
            "model: received frame is not RoCEv2; dropped"
        );
        return;
    };
    let mac_ok =
        pkt.eth.dst == st.cfg.mac || st.gids.values().any(|g| g.source_mac() == pkt.eth.dst);
    if !pkt.icrc_valid || !mac_ok {
        st.counters.frames_dropped += 1;
        tracing::debug!(icrc_valid = pkt.icrc_valid, mac_ok, "model: frame dropped");
        return;
    }
    let qpn = pkt.transport.bth.dest_qp;
    let now = st.now();
    let DeviceState {
        qps,
        mkeys,
        space,
        counters,
        pcie,
        ..
    } = st;
    let Some(qp) = qps.get_mut(&qpn) else {
        counters.frames_dropped += 1;
        tracing::debug!(qpn, "model: frame for an unknown QPN dropped");
        return;
    };
    super::rq_fetch::sync(qp, space, counters);
    let Some(engine) = qp.engine.as_mut() else {
        counters.frames_dropped += 1;
        return;
    };
    let mut mem = KeyMemory {
        mkeys,
        space,
        pd: qp.ctx.pd,
        inline: &qp.inline,
        faults: 0,
        writes: Vec::new(),
    };
    engine.handle_packet(now, &pkt.transport, pkt.payload, &mut mem);
    counters.dma_faults += mem.faults;
    // Payload placed for a request (a READ response's placement is timed with its WQE).
    let op = u8::from(pkt.transport.bth.opcode) & 0x1f;
    if !(13..=18).contains(&op) {
        let t = pcie.device_now();
        for n in mem.writes {
            pcie.dma_write(t, n as u64, super::pcie::WriteKind::Data);
        }
    }
}
