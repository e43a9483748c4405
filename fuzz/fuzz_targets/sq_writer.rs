//! `SqWriter` driven by arbitrary sequences of posts, retirements and doorbell batches, over
//! rings of 1–64 WQEBBs with an arbitrary starting 16-bit counter, for every QP type. It never
//! panics, never writes outside the ring (guard bytes around it stay intact), every posted WQE
//! decodes back to what was posted, and no outstanding WQE is overwritten before it is retired.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use rdmesh_core::mlx5::{
    decode_wqe, DatagramRepr, Error, EthRepr, Payload, QpType, SendFlags, SendWr, Sge, SplitBytes,
    SqWriter, TransportSeg, WrOp,
};

#[derive(Debug, Arbitrary)]
enum Action {
    Post {
        kind: u8,
        flags: (bool, bool, bool),
        a: u64,
        b: u64,
        c: u32,
        sges: Vec<(u64, u32, u32)>,
        inline: Option<Vec<u8>>,
        eth_hdr: Vec<u8>,
    },
    Retire(u8),
    TakeBatch,
}

#[derive(Debug, Arbitrary)]
struct Input {
    log2: u8,
    start: u16,
    qpn: u32,
    qp: u8,
    sig_all: bool,
    dgram: ([u8; 8], u32, u16),
    actions: Vec<Action>,
}

const GUARD: usize = 64;

fn op(qp: QpType, kind: u8, a: u64, b: u64, c: u32) -> WrOp {
    let all = [
        WrOp::Nop,
        WrOp::Send,
        WrOp::SendImm { imm: c },
        WrOp::SendInval { invalidate_rkey: c },
        WrOp::RdmaWrite { raddr: a, rkey: c },
        WrOp::RdmaWriteImm { raddr: a, rkey: c, imm: !c },
        WrOp::RdmaRead { raddr: a, rkey: c },
        WrOp::AtomicCs { raddr: a, rkey: c, compare: b, swap: !b },
        WrOp::AtomicFa { raddr: a, rkey: c, add: b },
        WrOp::Lso,
    ];
    match qp {
        QpType::Ud => [WrOp::Send, WrOp::SendImm { imm: c }][kind as usize % 2],
        QpType::RawPacket => [WrOp::Send, WrOp::Lso][kind as usize % 2],
        _ => all[kind as usize % all.len()],
    }
}

fuzz_target!(|input: Input| {
    let log2 = input.log2 % 7;
    let len = 64usize << log2;
    let qp = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::RawPacket][(input.qp & 3) as usize];
    let qpn = input.qpn & 0xff_ffff;
    let mut mem = vec![0xa5u8; len + 2 * GUARD];
    {
        let ring = &mut mem[GUARD..GUARD + len];
        let mut sq = SqWriter::new(ring, qpn, qp)
            .unwrap()
            .with_counter(input.start)
            .with_sig_all(input.sig_all);
        // Outstanding WQEs: (index, flat bytes as posted).
        let mut outstanding: Vec<(u16, Vec<u8>)> = Vec::new();
        let mut since_batch = 0u16;
        for action in input.actions.iter().take(256) {
            match action {
                Action::Post { kind, flags, a, b, c, sges, inline, eth_hdr } => {
                    let sges: Vec<Sge> = sges
                        .iter()
                        .take(70)
                        .map(|&(addr, lkey, len)| Sge { addr, lkey, len })
                        .collect();
                    let op = op(qp, *kind, *a, *b, *c);
                    let transport = match qp {
                        QpType::Rc | QpType::Uc => TransportSeg::None,
                        QpType::Ud => TransportSeg::Datagram(DatagramRepr {
                            key: u64::from_be_bytes(input.dgram.0),
                            dqp_dct: input.dgram.1 & 0xff_ffff,
                            ext: true,
                            rlid: input.dgram.2,
                            ..Default::default()
                        }),
                        QpType::RawPacket => TransportSeg::Eth(EthRepr {
                            mss: if matches!(op, WrOp::Lso) { 1448 } else { 0 },
                            inline_hdr: SplitBytes::new(eth_hdr),
                            ..Default::default()
                        }),
                    };
                    let wr = SendWr {
                        op,
                        flags: SendFlags { signaled: flags.0, solicited: flags.1, fence: flags.2 },
                        transport,
                        payload: match inline {
                            Some(b) => Payload::Inline(b),
                            None => Payload::Gather(&sges),
                        },
                    };
                    let free = sq.free();
                    match sq.post(&wr) {
                        Ok(p) => {
                            assert!(p.wqebbs as u16 <= free);
                            assert_eq!(p.ds as usize, wr.ds());
                            since_batch += 1;
                            let off = sq.offset_of(p.wqe_index);
                            let mut r = vec![0u8; sq.ring_len()];
                            sq.copy_ring(&mut r);
                            let d = decode_wqe(&r, off, qp).expect("posted WQE decodes");
                            let extra = if input.sig_all { 8 } else { 0 };
                            assert_eq!(d.ctrl, wr.ctrl(p.wqe_index, qpn, p.ds as usize, extra));
                            assert!(d.segments.iter().copied().eq(wr.segments()));
                            let bytes = (0..p.ds as usize * 16).map(|i| r[(off + i) % r.len()]).collect();
                            outstanding.push((p.wqe_index, bytes));
                        }
                        Err(Error::RingFull { needed, free: f }) => {
                            assert_eq!(f, free);
                            assert!(needed > free);
                        }
                        Err(Error::Oversize { ds }) => assert!(ds > 63 || ds.div_ceil(4) > len / 64),
                        Err(Error::Unsupported | Error::BadLength) => {}
                        Err(e) => panic!("unexpected {e:?}"),
                    }
                }
                Action::Retire(k) => {
                    if outstanding.is_empty() {
                        assert!(sq.retire(sq.pc()).is_err());
                        continue;
                    }
                    let i = *k as usize % outstanding.len();
                    let idx = outstanding[i].0;
                    sq.retire(idx).expect("outstanding WQE retires");
                    outstanding.drain(..=i);
                    assert_eq!(sq.cc(), outstanding.first().map_or(sq.pc(), |o| o.0));
                }
                Action::TakeBatch => match sq.take_batch() {
                    Some(b) => {
                        assert_eq!(b.nreq, since_batch);
                        assert_eq!(b.end_index, sq.pc());
                        since_batch = 0;
                    }
                    None => assert_eq!(since_batch, 0),
                },
            }
            // Nothing outstanding was overwritten.
            let mut r = vec![0u8; sq.ring_len()];
            sq.copy_ring(&mut r);
            for (idx, bytes) in &outstanding {
                let off = sq.offset_of(*idx);
                assert!(bytes.iter().enumerate().all(|(i, b)| r[(off + i) % r.len()] == *b));
            }
            let total: u16 = outstanding.iter().map(|(_, b)| (b.len() as u16).div_ceil(64)).sum();
            assert_eq!(total, sq.outstanding());
        }
    }
    assert!(mem[..GUARD].iter().all(|&b| b == 0xa5));
    assert!(mem[GUARD + len..].iter().all(|&b| b == 0xa5));
});
