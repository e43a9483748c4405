//! Receiving a frame from the link: parse it as RoCEv2 with core's parser, check the ICRC,
//! the destination MAC (the port's or a GID entry's) and the destination QP, then hand the
//! transport headers and payload to that QP's RC engine with memory reached through MKEYs
//! (with the IP header's ECN bits, so CE marks produce CNPs; CNPs go to the reaction point).

use rdmesh_core::wire::{IpRepr, Opcode, RocePacket};

use super::device::DeviceState;
use super::mkey_access::KeyMemory;

fn drop_frame(st: &mut DeviceState, len: usize) {
    st.counters.frames_dropped += 1;
    st.port.rx_errors += 1;
    st.port.rx_error_octets += len as u64;
}

/// Processes one received frame.
pub fn receive_frame(st: &mut DeviceState, frame: &[u8]) {
    st.counters.frames_received += 1;
    if st.faults.link_down {
        drop_frame(st, frame.len());
        return;
    }
    let Ok(pkt) = RocePacket::parse(frame) else {
        drop_frame(st, frame.len());
        tracing::debug!(
            len = frame.len(),
            "model: received frame is not RoCEv2; dropped"
        );
        return;
    };
    let mac_ok =
        pkt.eth.dst == st.cfg.mac || st.gids.values().any(|g| g.source_mac() == pkt.eth.dst);
    if !pkt.icrc_valid || !mac_ok {
        drop_frame(st, frame.len());
        tracing::debug!(icrc_valid = pkt.icrc_valid, mac_ok, "model: frame dropped");
        return;
    }
    let qpn = pkt.transport.bth.dest_qp;
    let opcode = pkt.transport.bth.opcode;
    let is_cnp = opcode == Opcode::Cnp;
    let mut ecn = match pkt.ip {
        IpRepr::V4(r) => r.ecn,
        IpRepr::V6(r) => r.traffic_class & 3,
    };
    if !is_cnp && opcode.is_request() {
        st.rx_data_frames += 1;
        let every = u64::from(st.faults.ce_mark_every);
        if every > 0 && st.rx_data_frames % every == 0 {
            ecn = 0b11;
        }
    }
    let now = st.now();
    let DeviceState {
        qps,
        mkeys,
        space,
        counters,
        pcie,
        q_counters,
        port,
        ..
    } = st;
    let Some(qp) = qps.get_mut(&qpn) else {
        counters.frames_dropped += 1;
        port.rx_errors += 1;
        port.rx_error_octets += frame.len() as u64;
        tracing::debug!(qpn, "model: frame for an unknown QPN dropped");
        return;
    };
    super::rq_fetch::sync(qp, space, counters);
    let Some(engine) = qp.engine.as_mut() else {
        counters.frames_dropped += 1;
        port.rx_errors += 1;
        port.rx_error_octets += frame.len() as u64;
        return;
    };
    port.rx_packets += 1;
    port.rx_octets += frame.len() as u64;
    if is_cnp {
        engine.handle_cnp(now);
    } else {
        super::qcounters::count_request(q_counters.get_mut(&qp.ctx.counter_set_id), opcode);
        let mut mem = KeyMemory {
            mkeys,
            space,
            pd: qp.ctx.pd,
            inline: &qp.inline,
            faults: 0,
            writes: Vec::new(),
        };
        engine.handle_packet_ecn(now, &pkt.transport, pkt.payload, ecn, &mut mem);
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
    super::qcounters::account(qp, q_counters, port);
}
