//! Property tests of the mlx5 formats: emit → parse round trips for every segment, and
//! encode → decode round trips of whole WQEs for every opcode and QP type, flat and in rings
//! that wrap (including the 16-bit WQE counter wrap).

use proptest::prelude::*;
use rdmesh_core::mlx5::atomic::AtomicSeg;
use rdmesh_core::mlx5::cqe::Cqe64;
use rdmesh_core::mlx5::ctrl::CtrlSeg;
use rdmesh_core::mlx5::data::DataSeg;
use rdmesh_core::mlx5::datagram::DatagramSeg;
use rdmesh_core::mlx5::eth::EthSeg;
use rdmesh_core::mlx5::inline::{self, InlineSeg};
use rdmesh_core::mlx5::raddr::RaddrSeg;
use rdmesh_core::mlx5::{
    decode_wqe, AtomicRepr, CqeRepr, CtrlRepr, DataRepr, DatagramRepr, Error, EthRepr, FmCeSe,
    Opcode, Payload, QpType, RaddrRepr, SendFlags, SendWr, Sge, SplitBytes, SqWriter, TransportSeg,
    WrOp,
};

fn ctrl_repr() -> impl Strategy<Value = CtrlRepr> {
    (
        any::<[u8; 4]>(),
        any::<u16>(),
        0u32..1 << 24,
        1u8..=63,
        any::<u8>(),
        any::<u16>(),
        any::<u32>(),
    )
        .prop_map(|(b, wqe_index, qpn, ds, signature, dci, imm)| CtrlRepr {
            opmod: b[0],
            wqe_index,
            opcode: Opcode::from(b[1]),
            qpn,
            ds,
            signature,
            dci_stream_channel_id: dci,
            fm_ce_se: FmCeSe(b[2]),
            imm,
        })
}

fn datagram() -> impl Strategy<Value = DatagramRepr> {
    (
        any::<(u64, u32, bool, u8, u8, u16)>(),
        any::<([u8; 6], u8, u8, u32, [u8; 16])>(),
    )
        .prop_map(
            |((key, dqp, ext, srsl, fl, rlid), (rmac, tclass, hop_limit, grh, rgid))| {
                DatagramRepr {
                    key,
                    dqp_dct: dqp & 0x7fff_ffff,
                    ext,
                    stat_rate_sl: srsl,
                    fl_mlid: fl,
                    rlid,
                    rmac,
                    tclass,
                    hop_limit,
                    grh_gid_fl: grh,
                    rgid,
                }
            },
        )
}

/// A work request with owned buffers.
#[derive(Debug, Clone)]
struct Case {
    qp: QpType,
    op: WrOp,
    flags: SendFlags,
    dgram: DatagramRepr,
    eth_fixed: ([u8; 4], u8, u8, u16, u32),
    eth_hdr: Vec<u8>,
    sges: Vec<Sge>,
    inline: Option<Vec<u8>>,
}

impl Case {
    fn wr(&self) -> SendWr<'_> {
        let transport = match self.qp {
            QpType::Rc | QpType::Uc => TransportSeg::None,
            QpType::Ud => TransportSeg::Datagram(self.dgram),
            QpType::RawPacket => {
                let (swp_offsets, cs_flags, swp_flags, mss, ftm) = self.eth_fixed;
                TransportSeg::Eth(EthRepr {
                    swp_offsets,
                    cs_flags,
                    swp_flags,
                    mss: if matches!(self.op, WrOp::Lso) { mss } else { 0 },
                    flow_table_metadata: ftm,
                    inline_hdr: SplitBytes::new(&self.eth_hdr),
                })
            }
        };
        SendWr {
            op: self.op,
            flags: self.flags,
            transport,
            payload: match &self.inline {
                Some(b) => Payload::Inline(b),
                None => Payload::Gather(&self.sges),
            },
        }
    }
}

fn op_for(qp: QpType, k: u8, a: u64, b: u64, c: u32) -> WrOp {
    let rc = [
        WrOp::Nop,
        WrOp::Send,
        WrOp::SendImm { imm: c },
        WrOp::SendInval { invalidate_rkey: c },
        WrOp::RdmaWrite { raddr: a, rkey: c },
        WrOp::RdmaWriteImm {
            raddr: a,
            rkey: c,
            imm: !c,
        },
        WrOp::RdmaRead { raddr: a, rkey: c },
        WrOp::AtomicCs {
            raddr: a,
            rkey: c,
            compare: b,
            swap: !b,
        },
        WrOp::AtomicFa {
            raddr: a,
            rkey: c,
            add: b,
        },
    ];
    match qp {
        QpType::Rc => rc[k as usize % rc.len()],
        QpType::Uc => [rc[0], rc[1], rc[2], rc[4], rc[5]][k as usize % 5],
        QpType::Ud => [WrOp::Send, WrOp::SendImm { imm: c }][k as usize % 2],
        QpType::RawPacket => [WrOp::Send, WrOp::Lso][k as usize % 2],
    }
}

fn case() -> impl Strategy<Value = Case> {
    let qp = prop_oneof![
        4 => Just(QpType::Rc),
        1 => Just(QpType::Uc),
        1 => Just(QpType::Ud),
        1 => Just(QpType::RawPacket)
    ];
    let sge = (
        any::<u64>(),
        any::<u32>(),
        prop_oneof![Just(0u32), 1u32..4096, 1u32..0x8000_0000],
    )
        .prop_map(|(addr, lkey, len)| Sge { addr, lkey, len });
    (
        qp,
        any::<(u8, u64, u64, u32)>(),
        any::<(bool, bool, bool)>(),
        datagram(),
        any::<([u8; 4], u8, u8, u16, u32)>(),
        proptest::collection::vec(any::<u8>(), 0..120),
        proptest::collection::vec(sge, 0..12),
        proptest::option::weighted(0.4, proptest::collection::vec(any::<u8>(), 0..300)),
    )
        .prop_map(
            |(
                qp,
                (k, a, b, c),
                (signaled, solicited, fence),
                dgram,
                eth_fixed,
                eth_hdr,
                sges,
                inline,
            )| {
                let op = op_for(qp, k, a, b, c);
                let no_inline = matches!(
                    op,
                    WrOp::Nop
                        | WrOp::RdmaRead { .. }
                        | WrOp::AtomicCs { .. }
                        | WrOp::AtomicFa { .. }
                );
                Case {
                    qp,
                    op,
                    flags: SendFlags {
                        signaled,
                        solicited,
                        fence,
                    },
                    dgram,
                    eth_fixed,
                    eth_hdr,
                    sges: if matches!(op, WrOp::Nop) {
                        Vec::new()
                    } else {
                        sges
                    },
                    inline: if no_inline { None } else { inline },
                }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn ctrl_round_trip(r in ctrl_repr()) {
        let mut b = [0u8; 16];
        r.emit(&mut CtrlSeg::new_unchecked(&mut b[..]));
        prop_assert_eq!(CtrlRepr::parse(&CtrlSeg::new_unchecked(&b[..])).unwrap(), r);
    }

    #[test]
    fn fixed_segments_round_trip(raddr in any::<u64>(), rkey in any::<u32>(), bc in any::<u32>(),
                                 addr in any::<u64>(), sa in any::<u64>(), cmp in any::<u64>(),
                                 d in datagram()) {
        let mut b = [0u8; 16];
        let r = RaddrRepr { raddr, rkey };
        r.emit(&mut RaddrSeg::new_unchecked(&mut b[..]));
        prop_assert_eq!(RaddrRepr::parse(&RaddrSeg::new_unchecked(&b[..])).unwrap(), r);
        let r = DataRepr { byte_count: bc, lkey: rkey, addr };
        r.emit(&mut DataSeg::new_unchecked(&mut b[..]));
        prop_assert_eq!(DataRepr::parse(&DataSeg::new_unchecked(&b[..])).unwrap(), r);
        let r = AtomicRepr { swap_add: sa, compare: cmp };
        r.emit(&mut AtomicSeg::new_unchecked(&mut b[..]));
        prop_assert_eq!(AtomicRepr::parse(&AtomicSeg::new_unchecked(&b[..])).unwrap(), r);
        let mut g = [0u8; 48];
        d.emit(&mut DatagramSeg::new_unchecked(&mut g[..]));
        prop_assert_eq!(DatagramRepr::parse(&DatagramSeg::new_unchecked(&g[..])).unwrap(), d);
    }

    #[test]
    fn variable_segments_round_trip(payload in proptest::collection::vec(any::<u8>(), 0..=inline::MAX_INLINE_LEN),
                                    fixed in any::<([u8; 4], u8, u8, u16, u32)>()) {
        let mut b = vec![0xeeu8; 1024];
        let n = inline::emit(&payload, &mut b).unwrap();
        prop_assert_eq!(n, inline::seg_len(payload.len()));
        let s = InlineSeg::new_checked(&b[..n]).unwrap();
        prop_assert!(s.is_inline());
        prop_assert_eq!(s.payload().unwrap(), &payload[..]);
        prop_assert!(b[4 + payload.len()..n].iter().all(|&x| x == 0));
        let hdr = &payload[..payload.len().min(rdmesh_core::mlx5::eth::MAX_INLINE_HDR)];
        let e = EthRepr {
            swp_offsets: fixed.0, cs_flags: fixed.1, swp_flags: fixed.2, mss: fixed.3,
            flow_table_metadata: fixed.4, inline_hdr: SplitBytes::new(hdr),
        };
        let n = e.emit(&mut b).unwrap();
        prop_assert_eq!(EthRepr::parse(&EthSeg::new_checked(&b[..n]).unwrap()).unwrap(), e);
    }

    #[test]
    fn cqe_round_trip(mut b in any::<[u8; 64]>()) {
        b[1] = 0;
        b[0x12] = 0;
        b[0x13] = 0;
        let r = CqeRepr::parse(&Cqe64::new_unchecked(&b[..])).unwrap();
        let mut out = [0u8; 64];
        r.emit(&mut Cqe64::new_unchecked(&mut out[..]));
        prop_assert_eq!(out, b);
    }

    #[test]
    fn wqe_encode_decode_every_opcode(c in case(), idx in any::<u16>(), qpn in 0u32..1 << 24) {
        let wr = c.wr();
        let mut buf = vec![0u8; 63 * 16];
        match wr.emit(c.qp, idx, qpn, &mut buf) {
            Ok(n) => {
                let ds = n / 16;
                prop_assert_eq!(ds, wr.ds());
                let d = decode_wqe(&buf[..n], 0, c.qp).unwrap();
                prop_assert_eq!(d.ctrl, wr.ctrl(idx, qpn, ds, 0));
                prop_assert_eq!(d.ctrl.opcode, c.op.opcode());
                prop_assert!(d.segments.iter().copied().eq(wr.segments()));
                let mut again = vec![0u8; n];
                prop_assert_eq!(d.emit(&mut again).unwrap(), n);
                prop_assert_eq!(&again[..], &buf[..n]);
            }
            Err(Error::Oversize { ds }) => prop_assert!(ds > 63),
            Err(e) => prop_assert!(false, "{:?}: {}", c, e),
        }
    }

    #[test]
    fn wqes_decode_back_from_a_wrapping_ring(cases in proptest::collection::vec(case(), 1..40),
                                            log2 in 0u32..6, start in any::<u16>(), qpn in 0u32..1 << 24) {
        let mut ring = vec![0u8; 64 << log2];
        for qp in [QpType::Rc, QpType::Ud, QpType::RawPacket] {
            let mut sq = SqWriter::new(&mut ring, qpn, qp).unwrap().with_counter(start);
            let mut last = None;
            for c in cases.iter().filter(|c| c.qp == qp) {
                let wr = c.wr();
                let p = match sq.post(&wr) {
                    Ok(p) => p,
                    Err(Error::Oversize { .. }) => continue,
                    Err(Error::RingFull { .. }) => {
                        sq.retire(last.unwrap()).unwrap();
                        sq.post(&wr).unwrap()
                    }
                    Err(e) => { prop_assert!(false, "{}", e); unreachable!() }
                };
                last = Some(p.wqe_index);
                let mut ring = vec![0u8; sq.ring_len()];
                sq.copy_ring(&mut ring);
                let d = decode_wqe(&ring, sq.offset_of(p.wqe_index), qp).unwrap();
                prop_assert_eq!(d.ctrl.wqe_index, p.wqe_index);
                prop_assert_eq!(d.ctrl.ds, p.ds);
                prop_assert!(d.segments.iter().copied().eq(wr.segments()));
            }
        }
    }

    #[test]
    fn decoder_never_panics(ring in proptest::collection::vec(any::<u8>(), 0..1100), off in 0usize..1200) {
        for qp in [QpType::Rc, QpType::Uc, QpType::Ud, QpType::RawPacket] {
            let _ = decode_wqe(&ring, off, qp);
        }
    }
}
