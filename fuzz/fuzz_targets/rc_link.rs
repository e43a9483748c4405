//! Two RC QPs back to back through a fuzzer-driven link: either loss recovery mode, an
//! in-flight cap, optional DCQCN pacing, posts of every send opcode (atomics included) with
//! arbitrary addresses and keys, receive posts, drops, duplicates, reordering, CE marks,
//! CNPs and timer expiries. Nothing may panic; every packet either QP emits (CNPs included)
//! must parse with consistent pad; completions never outnumber posted WQEs; a QP in RTS keeps
//! its send queue within its capacity.
//!
//! Input: a stream of commands read with `arbitrary::Unstructured`.
#![no_main]

use std::collections::VecDeque;

use arbitrary::{Result, Unstructured};
use libfuzzer_sys::fuzz_target;
use rdmesh_core::cc::DcqcnConfig;
use rdmesh_core::rc::{
    Instant, Mtu, RcQp, Recovery, RecvWqe, RtrConfig, RtsConfig, SendOpcode, SendWqe, Sge,
};
use rdmesh_core::wire::{placement, sack, Opcode, Psn, SackRepr, TransportRepr};

#[path = "common/region.rs"]
mod region;
use region::{Mem, BASE, KEY, MEM_LEN};

type Qp = RcQp<16, 16>;

struct Side {
    qp: Qp,
    mem: Mem,
    posted_send: u64,
    posted_recv: u64,
    send_wcs: u64,
    recv_wcs: u64,
}

fn sges(u: &mut Unstructured, atomic: bool) -> Result<heapless::Vec<Sge, 16>> {
    let mut v = heapless::Vec::new();
    if atomic && u.ratio(7, 8)? {
        let _ = v.push(Sge {
            addr: BASE + u.int_in_range(0..=MEM_LEN as u64 - 8)?,
            length: 8,
            lkey: KEY,
        });
        return Ok(v);
    }
    for _ in 0..u.int_in_range(0..=2)? {
        let _ = v.push(Sge {
            addr: BASE + u.int_in_range(0..=MEM_LEN as u64)?,
            length: u.int_in_range(0..=6000)?,
            lkey: if u.ratio(1, 16)? { 99 } else { KEY },
        });
    }
    Ok(v)
}

/// Payload at most PMTU — plus, in selective repeat, a SEND packet's 8-byte placement header —
/// and an ACKNOWLEDGE's payload empty or (selective repeat) a SACK block that parses with the
/// ACK's PSN as base.
fn check_packet(pkt: &[u8], mtu: Mtu, recovery: Recovery) {
    let (hdr, hl) = TransportRepr::parse(pkt).expect("emitted packet parses");
    assert!((pkt.len() - hl) & 3 == 0 && hdr.bth.pad_cnt as usize <= pkt.len() - hl);
    let payload = &pkt[hl..pkt.len() - hdr.bth.pad_cnt as usize];
    let selective = recovery == Recovery::Selective;
    let extra = if selective && hdr.bth.opcode.is_send() {
        placement::HEADER_LEN
    } else {
        0
    };
    assert!(payload.len() <= mtu.bytes() as usize + extra);
    if hdr.bth.opcode == Opcode::RcAcknowledge && !payload.is_empty() {
        assert!(selective);
        let b = SackRepr::parse(&sack::Packet::new_unchecked(payload)).expect("SACK parses");
        assert_eq!(b.base, hdr.bth.psn);
    }
}

fn run(data: &[u8]) -> Result<()> {
    let mut u = Unstructured::new(data);
    let mtu = *u.choose(&Mtu::ALL)?;
    let recovery = if u.arbitrary()? {
        Recovery::Selective
    } else {
        Recovery::GoBackN
    };
    let (psn_a, psn_b) = (Psn::new(u.arbitrary()?), Psn::new(u.arbitrary()?));
    let inflight: u32 = u.int_in_range(1..=130)?;
    let dcqcn: bool = u.arbitrary()?;
    let mut now = Instant(1_000_000);
    let mut sides: Vec<Side> = (0..2u32)
        .map(|i| {
            let mut qp = Qp::new(RtrConfig {
                local_qpn: 0x10 + i,
                remote_qpn: 0x11 - i,
                path_mtu: mtu,
                rq_psn: if i == 0 { psn_b } else { psn_a },
                pkey: 0xffff,
                min_rnr_timer: 1,
                max_dest_rd_atomic: 4,
            });
            assert!(qp.set_recovery(recovery));
            qp.to_rts(RtsConfig {
                sq_psn: if i == 0 { psn_a } else { psn_b },
                timeout: 8,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 4,
            });
            qp.set_max_inflight(inflight);
            if dcqcn {
                let cfg = DcqcnConfig {
                    line_rate_mbps: 10_000,
                    ..DcqcnConfig::default()
                };
                let burst = qp.max_packet_len() as u32;
                qp.enable_dcqcn(now, cfg, burst);
            }
            Side {
                qp,
                mem: Mem {
                    data: vec![0x5a; MEM_LEN],
                    read_only: false,
                },
                posted_send: 0,
                posted_recv: 0,
                send_wcs: 0,
                recv_wcs: 0,
            }
        })
        .collect();
    let mut links: [VecDeque<Vec<u8>>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut buf = vec![0u8; sides[0].qp.max_packet_len()];
    while !u.is_empty() {
        let s: usize = u.int_in_range(0..=1)?;
        match u.int_in_range(0..=5u8)? {
            0 => {
                // Transmit up to 200 packets (and any CNP) from side s.
                let side = &mut sides[s];
                for _ in 0..200 {
                    let Some(n) = side.qp.poll_transmit(now, &mut side.mem, &mut buf) else {
                        break;
                    };
                    check_packet(&buf[..n], mtu, recovery);
                    links[s].push_back(buf[..n].to_vec());
                }
                if let Some(n) = side.qp.poll_cnp(&mut buf) {
                    check_packet(&buf[..n], mtu, recovery);
                    links[s].push_back(buf[..n].to_vec());
                }
            }
            1 => {
                // Deliver (or drop / duplicate / mark CE) packet idx of link s to the other side.
                if links[s].is_empty() {
                    continue;
                }
                let idx = u.int_in_range(0..=links[s].len() - 1)?;
                let fate = u.int_in_range(0..=9u8)?;
                let pkt = if fate == 1 {
                    links[s][idx].clone()
                } else {
                    links[s].remove(idx).expect("in range")
                };
                if fate == 0 {
                    continue;
                }
                let (hdr, hl) = TransportRepr::parse(&pkt).expect("parses");
                let pad = hdr.bth.pad_cnt as usize;
                let ecn = if fate == 2 { 0b11 } else { 0b10 };
                let dst = &mut sides[1 - s];
                dst.qp
                    .handle_packet_ecn(now, &hdr, &pkt[hl..pkt.len() - pad], ecn, &mut dst.mem);
            }
            2 => {
                let opcode = match u.int_in_range(0..=6u8)? {
                    0 => SendOpcode::Send,
                    1 => SendOpcode::SendWithImm,
                    2 => SendOpcode::RdmaWrite,
                    3 => SendOpcode::RdmaWriteWithImm,
                    4 => SendOpcode::RdmaRead,
                    5 => SendOpcode::AtomicCmpAndSwp {
                        compare: u.arbitrary()?,
                        swap: u.arbitrary()?,
                    },
                    _ => SendOpcode::AtomicFetchAndAdd {
                        add: u.arbitrary()?,
                    },
                };
                let remote_addr = if u.ratio(7, 8)? {
                    BASE + u.int_in_range(0..=MEM_LEN as u64 / 8)? * 8
                } else {
                    u.arbitrary()?
                };
                let side = &mut sides[s];
                let wqe = SendWqe {
                    wr_id: side.posted_send,
                    opcode,
                    sg_list: sges(&mut u, opcode.is_atomic())?,
                    remote_addr,
                    rkey: if u.ratio(15, 16)? { KEY } else { 3 },
                    imm: u.arbitrary()?,
                    signaled: u.arbitrary()?,
                    solicited: u.arbitrary()?,
                };
                if side.qp.post_send(wqe).is_ok() {
                    side.posted_send += 1;
                }
            }
            3 => {
                let side = &mut sides[s];
                let wqe = RecvWqe {
                    wr_id: side.posted_recv,
                    sg_list: sges(&mut u, false)?,
                };
                if side.qp.post_recv(wqe).is_ok() {
                    side.posted_recv += 1;
                }
            }
            4 => {
                let step: u32 = u.arbitrary()?;
                let next = sides.iter().filter_map(|x| x.qp.next_deadline()).min();
                now = match next {
                    Some(d) if u.arbitrary()? => d.max(now),
                    _ => now.add_nanos(step as u64),
                };
                for side in sides.iter_mut() {
                    side.qp.handle_timeout(now);
                }
            }
            _ => {
                for side in sides.iter_mut() {
                    while side.qp.poll_send_completion().is_some() {
                        side.send_wcs += 1;
                    }
                    while side.qp.poll_recv_completion().is_some() {
                        side.recv_wcs += 1;
                    }
                    assert!(side.send_wcs <= side.posted_send);
                    assert!(side.recv_wcs <= side.posted_recv);
                    assert!(side.qp.send_queue_len() <= 16 && side.qp.recv_queue_len() <= 16);
                }
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(data);
});
