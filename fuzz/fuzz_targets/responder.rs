//! Arbitrary packets, posts and timer expiries driven into one RC QP in RTS (responder and
//! completer paths). Nothing may panic; every packet the QP emits must parse as a valid
//! transport header with consistent pad; completions never outnumber posted WQEs.
//!
//! Input: a stream of commands read with `arbitrary::Unstructured`. Packet commands carry raw
//! BTH + extended headers + payload + pad bytes (no ICRC); DestQP and P_Key are forced to match
//! the QP most of the time so the fuzzer reaches the transport logic.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use rdmesh_core::rc::{Instant, Mtu, RcQp, RecvWqe, RtrConfig, RtsConfig, SendOpcode, SendWqe};
use rdmesh_core::wire::{Psn, TransportRepr};

#[path = "common/region.rs"]
mod region;
use region::{sges, Mem, LOCAL_QPN, MEM_LEN};

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let mtu = *u.choose(&Mtu::ALL)?;
    let rq_psn = Psn::new(u.arbitrary()?);
    let mut qp: RcQp<16, 16> = RcQp::new(RtrConfig {
        local_qpn: LOCAL_QPN,
        remote_qpn: 0x34,
        path_mtu: mtu,
        rq_psn,
        pkey: 0xffff,
        min_rnr_timer: u.int_in_range(0..=31)?,
        max_dest_rd_atomic: u.int_in_range(0..=20)?,
    });
    let sq_psn = Psn::new(u.arbitrary()?);
    qp.to_rts(RtsConfig {
        sq_psn,
        timeout: u.int_in_range(0..=31)?,
        retry_cnt: u.int_in_range(0..=7)?,
        rnr_retry: u.int_in_range(0..=7)?,
        max_rd_atomic: u.int_in_range(0..=20)?,
    });
    let mut mem = Mem {
        data: vec![0x5a; MEM_LEN],
        read_only: u.ratio(1, 4)?,
    };
    let mut now = Instant(0);
    let mut buf = vec![0u8; qp.max_packet_len()];
    let (mut posted_send, mut posted_recv, mut send_wcs, mut recv_wcs) = (0u64, 0u64, 0u64, 0u64);
    while !u.is_empty() {
        match u.int_in_range(0..=5u8)? {
            0 => {
                let len = u.int_in_range(0..=mtu.bytes() as usize + 40)?;
                let bytes = u.bytes(len)?;
                let Ok((mut hdr, hl)) = TransportRepr::parse(bytes) else {
                    continue;
                };
                let pad = hdr.bth.pad_cnt as usize;
                if bytes.len() - hl < pad {
                    continue;
                }
                if !u.ratio(1, 16)? {
                    hdr.bth.dest_qp = LOCAL_QPN;
                    hdr.bth.pkey = 0xffff;
                }
                if u.ratio(1, 2)? {
                    // Steer the PSN near what the QP expects or has outstanding.
                    let base = if hdr.bth.opcode.is_request() {
                        qp.rq_psn()
                    } else {
                        qp.sq_psn()
                    };
                    let delta: i8 = u.arbitrary()?;
                    hdr.bth.psn = base.add(delta as i32 as u32);
                }
                qp.handle_packet(now, &hdr, &bytes[hl..bytes.len() - pad], &mut mem);
            }
            1 => {
                for _ in 0..300 {
                    let Some(n) = qp.poll_transmit(now, &mut mem, &mut buf) else {
                        break;
                    };
                    let (hdr, hl) = TransportRepr::parse(&buf[..n]).expect("emitted packet parses");
                    assert_eq!(hdr.bth.dest_qp, 0x34);
                    assert!((n - hl) % 4 == 0 && hdr.bth.pad_cnt as usize <= n - hl);
                    assert!(n - hl - hdr.bth.pad_cnt as usize <= mtu.bytes() as usize);
                }
            }
            2 => {
                let opcode = *u.choose(&[
                    SendOpcode::Send,
                    SendOpcode::SendWithImm,
                    SendOpcode::RdmaWrite,
                    SendOpcode::RdmaWriteWithImm,
                    SendOpcode::RdmaRead,
                ])?;
                let wqe = SendWqe {
                    wr_id: posted_send,
                    opcode,
                    sg_list: sges(&mut u)?,
                    remote_addr: u.arbitrary()?,
                    rkey: u.arbitrary()?,
                    imm: u.arbitrary()?,
                    signaled: u.arbitrary()?,
                    solicited: u.arbitrary()?,
                };
                if qp.post_send(wqe).is_ok() {
                    posted_send += 1;
                }
            }
            3 => {
                let wqe = RecvWqe {
                    wr_id: posted_recv,
                    sg_list: sges(&mut u)?,
                };
                if qp.post_recv(wqe).is_ok() {
                    posted_recv += 1;
                }
            }
            4 => {
                let step: u32 = u.arbitrary()?;
                now = match qp.next_deadline() {
                    Some(d) if u.arbitrary()? => d.max(now),
                    _ => now.add_nanos(step as u64),
                };
                qp.handle_timeout(now);
            }
            _ => {
                while qp.poll_send_completion().is_some() {
                    send_wcs += 1;
                }
                while qp.poll_recv_completion().is_some() {
                    recv_wcs += 1;
                }
                assert!(send_wcs <= posted_send && recv_wcs <= posted_recv);
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
