//! Selective repeat (the rdmesh<->rdmesh extension): the SACK block parser on raw bytes, and
//! one RC QP in selective mode fed arbitrary packets — SEND packets with fuzzer-chosen
//! placement headers (receive sequence number, offset) ahead of ePSN, out-of-order READ
//! responses, ACKs/NAKs carrying fuzzer-chosen SACK blocks — plus posts and timer expiries.
//! Nothing may panic; a SACK block that parses emits the same bytes back (bit 0 clear); every
//! packet the QP emits parses, with at most PMTU + 8 payload bytes (placement header) and
//! ACKs with no payload or a valid SACK block; completions never outnumber posted WQEs.
//!
//! Input: a stream of commands read with `arbitrary::Unstructured`.
#![no_main]

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use rdmesh_core::rc::{
    Instant, Mtu, RcQp, Recovery, RecvWqe, RtrConfig, RtsConfig, SendOpcode, SendWqe,
};
use rdmesh_core::wire::{
    placement, sack, AethRepr, BthRepr, NakCode, Opcode, PlacementRepr, Psn, SackRepr, Syndrome,
    TransportRepr,
};

#[path = "common/region.rs"]
mod region;
use region::{sges, Mem, LOCAL_QPN, MEM_LEN};

/// The SACK parser on raw bytes: no panic; what parses re-emits to the same bytes.
fn sack_roundtrip(bytes: &[u8]) {
    let Ok(p) = sack::Packet::new_checked(bytes) else {
        return;
    };
    if let Ok(r) = SackRepr::parse(&p) {
        assert_eq!(r.held[0] & 1, 0);
        let mut out = [0u8; sack::HEADER_LEN];
        r.emit(&mut sack::Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..], bytes);
        if let Some(h) = r.highest() {
            assert!(r.holds(h));
        }
    }
}

fn bth(opcode: Opcode, psn: Psn, ack_req: bool) -> BthRepr {
    BthRepr {
        opcode,
        solicited: false,
        mig_req: false,
        pad_cnt: 0,
        pkey: 0xffff,
        fecn: false,
        becn: false,
        dest_qp: LOCAL_QPN,
        ack_req,
        psn,
    }
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let raw_len = u.int_in_range(0..=40)?;
    sack_roundtrip(u.bytes(raw_len)?);
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
    assert!(qp.set_recovery(Recovery::Selective));
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
    let mut pkt = vec![0u8; mtu.bytes() as usize + 64];
    while !u.is_empty() {
        match u.int_in_range(0..=8u8)? {
            6 => {
                // A SEND packet ahead of ePSN with a fuzzer-chosen placement header.
                let opcode = *u.choose(&[
                    Opcode::RcSendFirst,
                    Opcode::RcSendMiddle,
                    Opcode::RcSendLast,
                    Opcode::RcSendOnly,
                    Opcode::RcSendLastWithImmediate,
                    Opcode::RcSendOnlyWithImmediate,
                ])?;
                let ahead: u8 = u.arbitrary()?;
                let mut hdr =
                    TransportRepr::new(bth(opcode, qp.rq_psn().add(ahead as u32), u.arbitrary()?));
                if opcode.header_set().is_some_and(|h| h.immdt) {
                    hdr.imm = Some(u.arbitrary()?);
                }
                let pl = PlacementRepr {
                    recv_seq: u.int_in_range(0..=20)?,
                    offset: u.int_in_range(0..=3)? * mtu.bytes() + u.int_in_range(0..=3)?,
                };
                let len = u.int_in_range(0..=mtu.bytes() as usize + 8)?;
                let n = placement::HEADER_LEN + len;
                pl.emit(&mut placement::Packet::new_unchecked(
                    &mut pkt[..placement::HEADER_LEN],
                ));
                u.fill_buffer(&mut pkt[placement::HEADER_LEN..n])?;
                qp.handle_packet(now, &hdr, &pkt[..n], &mut mem);
            }
            7 => {
                // A READ response somewhere in the send window, out of order.
                let opcode = *u.choose(&[
                    Opcode::RcRdmaReadResponseFirst,
                    Opcode::RcRdmaReadResponseMiddle,
                    Opcode::RcRdmaReadResponseLast,
                    Opcode::RcRdmaReadResponseOnly,
                ])?;
                let back: u8 = u.arbitrary()?;
                let mut hdr = TransportRepr::new(bth(opcode, qp.sq_psn().sub(back as u32), false));
                if opcode != Opcode::RcRdmaReadResponseMiddle {
                    hdr.aeth = Some(AethRepr {
                        syndrome: Syndrome::ACK_UNLIMITED,
                        msn: 0,
                    });
                }
                let len = u.int_in_range(0..=mtu.bytes() as usize)?;
                u.fill_buffer(&mut pkt[..len])?;
                qp.handle_packet(now, &hdr, &pkt[..len], &mut mem);
            }
            8 => {
                // An ACK, or a NAK with a SACK block (possibly malformed), near the window.
                let back: u8 = u.arbitrary()?;
                let psn = qp.sq_psn().sub(back as u32);
                let mut hdr = TransportRepr::new(bth(Opcode::RcAcknowledge, psn, false));
                let nak = u.arbitrary()?;
                hdr.aeth = Some(AethRepr {
                    syndrome: if nak {
                        Syndrome::Nak(NakCode::PsnSequenceError)
                    } else {
                        Syndrome::ACK_UNLIMITED
                    },
                    msn: 0,
                });
                let block = SackRepr {
                    base: if u.ratio(7, 8)? {
                        psn
                    } else {
                        Psn::new(u.arbitrary()?)
                    },
                    held: u.arbitrary()?,
                };
                block.emit(&mut sack::Packet::new_unchecked(
                    &mut pkt[..sack::HEADER_LEN],
                ));
                if u.ratio(1, 8)? {
                    pkt[0] = u.arbitrary()?;
                }
                let len = if u.ratio(7, 8)? {
                    sack::HEADER_LEN
                } else {
                    u.int_in_range(0..=40)?
                };
                if len > sack::HEADER_LEN {
                    u.fill_buffer(&mut pkt[sack::HEADER_LEN..len])?;
                }
                qp.handle_packet(now, &hdr, &pkt[..len], &mut mem);
            }
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
                    let payload = &buf[hl..n - hdr.bth.pad_cnt as usize];
                    assert!(payload.len() <= mtu.bytes() as usize + placement::HEADER_LEN);
                    if hdr.bth.opcode == Opcode::RcAcknowledge && !payload.is_empty() {
                        let b = SackRepr::parse(&sack::Packet::new_unchecked(payload))
                            .expect("emitted SACK block parses");
                        assert_eq!(b.base, hdr.bth.psn);
                    }
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
