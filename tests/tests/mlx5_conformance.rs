//! rdmesh's mlx5 formats against rdma-core's `<infiniband/mlx5dv.h>` (Debian libibverbs-dev):
//! a C program (`tests/c/mlx5_harness.c`) builds the same WQEs with `mlx5dv_set_ctrl_seg`,
//! `mlx5dv_set_data_seg` and the segment structs filled field by field, in a ring with the
//! same geometry, and reads random CQEs through `struct mlx5_cqe64` / `struct mlx5_err_cqe`
//! and `mlx5dv_get_cqe_*`. Thousands of seeded random inputs; every byte and field must agree.

mod mlx5_common;

use mlx5_common::{harness, hex, run_harness, GenWr, Rng};
use rdmesh_core::mlx5::cqe::Cqe64;
use rdmesh_core::mlx5::datagram::DatagramSeg;
use rdmesh_core::mlx5::{
    decode_wqe, CqeOpcode, CqeRepr, DatagramRepr, Error, EthRepr, QpType, SplitBytes, SqWriter,
    Syndrome,
};

/// The whole ring, copied out of the writer.
fn ring_bytes(sq: &SqWriter<'_>) -> Vec<u8> {
    let mut r = vec![0u8; sq.ring_len()];
    sq.copy_ring(&mut r);
    r
}

/// The WQE at `idx` read out of the ring (wrapping), `ds * 16` bytes.
fn wqe_bytes(sq: &SqWriter<'_>, idx: u16, ds: usize) -> Vec<u8> {
    let ring = ring_bytes(sq);
    let off = sq.offset_of(idx);
    (0..ds * 16).map(|i| ring[(off + i) % ring.len()]).collect()
}

#[test]
fn send_wqes_in_a_ring_match_mlx5dv() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng::new(0x6d6c_7835_7771_6531);
    let mut input = String::new();
    let mut expect: Vec<String> = Vec::new();
    let (mut posted, mut wrapped, mut multi, mut counter_wraps, mut oversize) = (0, 0, 0, 0, 0);
    for case in 0..48 {
        let log2 = rng.below(7) as u32;
        let start: u16 = if case % 2 == 0 {
            0xffffu16.wrapping_sub(rng.below(80) as u16)
        } else {
            rng.u64() as u16
        };
        let qpn = rng.u32() & 0x00ff_ffff;
        input += &format!("ring {log2} {start} {qpn}\n");
        expect.push("ok".into());
        let mut ring = vec![0u8; 64 << log2];
        let mut sq = SqWriter::new(&mut ring, qpn, QpType::Rc)
            .unwrap()
            .with_counter(start);
        let mut last: Option<u16> = None;
        for _ in 0..90 {
            let g = GenWr::random(&mut rng);
            let wr = g.wr();
            let p = match sq.post(&wr) {
                Ok(p) => p,
                Err(Error::Oversize { ds }) => {
                    assert!(ds > 63 || ds.div_ceil(4) > sq.wqebbs() as usize, "{ds}");
                    oversize += 1;
                    continue;
                }
                Err(Error::RingFull { .. }) => {
                    sq.retire(last.unwrap()).unwrap();
                    assert_eq!(sq.outstanding(), 0);
                    sq.post(&wr).expect("empty ring takes any WQE that fits")
                }
                Err(e) => panic!("{g:?}: {e}"),
            };
            last = Some(p.wqe_index);
            posted += 1;
            let ds = p.ds as usize;
            let off = sq.offset_of(p.wqe_index);
            wrapped += usize::from(off + ds * 16 > sq.ring_len());
            multi += usize::from(p.wqebbs > 1);
            counter_wraps += usize::from(p.wqe_index.checked_add(p.wqebbs as u16).is_none());
            let bytes = wqe_bytes(&sq, p.wqe_index, ds);

            // The flat encoder and the decoder agree with the ring writer.
            let mut flat = vec![0u8; ds * 16];
            assert_eq!(
                wr.emit(QpType::Rc, p.wqe_index, qpn, &mut flat).unwrap(),
                ds * 16
            );
            assert_eq!(flat, bytes, "{g:?}");
            let ring = ring_bytes(&sq);
            let d = decode_wqe(&ring, off, QpType::Rc).unwrap();
            assert_eq!(d.ctrl, wr.ctrl(p.wqe_index, qpn, ds, 0));
            assert!(d.segments.iter().copied().eq(wr.segments()), "{g:?}");

            input += &g.c_post();
            expect.push(format!("W {} {} {}", p.wqe_index, ds, hex(&bytes)));
            expect.push(format!("D {}", hex(&sq.dbrec())));
        }
        input += "dump\n";
        expect.push(format!("R {}", hex(&ring_bytes(&sq))));
    }
    let got = run_harness(&exe, &input);
    assert_eq!(got.len(), expect.len());
    for (i, (g, e)) in got.iter().zip(&expect).enumerate() {
        assert_eq!(g, e, "output line {i} differs");
    }
    eprintln!(
        "{posted} WQEs identical ({wrapped} wrapped the ring, {multi} multi-WQEBB, \
         {counter_wraps} crossed the 16-bit counter wrap; {oversize} oversize rejected)"
    );
    assert!(posted >= 3000 && wrapped > 50 && multi > 200 && counter_wraps > 5 && oversize > 10);
}

#[test]
fn cqes_read_like_mlx5dv() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng::new(0x6371_6573);
    let mut cqes = Vec::new();
    let mut input = String::new();
    for _ in 0..4000 {
        let mut b = rng.bytes(64);
        let opcode = match rng.below(4) {
            0 => 13,
            1 => 14,
            2 => [0u8, 1, 2, 3, 4, 5, 6, 12, 15][rng.below(9) as usize],
            _ => rng.below(16) as u8,
        };
        b[63] = (opcode << 4) | (b[63] & 0xf);
        if rng.chance(1, 2) {
            b[0x37] = [
                1u8, 2, 4, 5, 6, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22,
            ][rng.below(13) as usize];
        }
        input += &format!("cqe {}\n", hex(&b));
        cqes.push(b);
    }
    let got = run_harness(&exe, &input);
    assert_eq!(got.len(), cqes.len());
    let mut errors = 0;
    for (line, b) in got.iter().zip(&cqes) {
        let f: Vec<u64> = line
            .strip_prefix("C ")
            .unwrap()
            .split(' ')
            .map(|x| x.parse().unwrap())
            .collect();
        let v = Cqe64::new_checked(&b[..]).unwrap();
        let r = CqeRepr::parse(&v).unwrap();
        let mine = [
            u8::from(r.opcode) as u64,
            r.owner as u64,
            r.se as u64,
            u8::from(r.format) as u64,
            r.byte_cnt as u64,
            r.qpn as u64,
            r.wqe_counter as u64,
            r.imm_inval_pkey as u64,
            r.srqn_uidx as u64,
            r.flags_rqpn as u64,
            r.slid as u64,
            r.vlan_info as u64,
            r.timestamp,
            v.sop_drop_qpn() as u64,
            r.signature as u64,
            r.wqe_id as u64,
            u8::from(v.syndrome()) as u64,
            v.vendor_err_synd() as u64,
            v.sop_drop_qpn() as u64,
        ];
        assert_eq!(f, mine, "CQE {}", hex(b));
        assert_eq!(r.s_wqe_opcode as u64, f[13] >> 24);
        match r.error {
            Some(e) => {
                errors += 1;
                assert!(matches!(r.opcode, CqeOpcode::ReqErr | CqeOpcode::RespErr));
                assert_eq!(u8::from(e.syndrome) as u64, f[16]);
                assert_eq!(e.vendor_err_synd as u64, f[17]);
            }
            None => assert!(f[0] != 13 && f[0] != 14),
        }
        // Everything except the reserved bytes survives emit.
        let mut again = [0u8; 64];
        r.emit(&mut Cqe64::new_unchecked(&mut again[..]));
        let mut masked = b.clone();
        masked[1] = 0;
        masked[0x12] = 0;
        masked[0x13] = 0;
        assert_eq!(again.to_vec(), masked);
    }
    assert!(errors > 1500);
    assert_eq!(Syndrome::from(0x22), Syndrome::RemoteAbortedErr);
}

#[test]
fn datagram_and_eth_segments_match_mlx5dv() {
    let Some(exe) = harness() else { return };
    let mut rng = Rng::new(0x0064_6772_616d);
    let mut input = String::new();
    let mut expect = Vec::new();
    for _ in 0..1000 {
        let d = DatagramRepr {
            key: rng.u64(),
            dqp_dct: rng.u32() & 0x00ff_ffff,
            ext: rng.chance(1, 2),
            stat_rate_sl: rng.u32() as u8,
            fl_mlid: rng.u32() as u8,
            rlid: rng.u32() as u16,
            rmac: rng.bytes(6).try_into().unwrap(),
            tclass: rng.u32() as u8,
            hop_limit: rng.u32() as u8,
            grh_gid_fl: rng.u32(),
            rgid: rng.bytes(16).try_into().unwrap(),
        };
        input += &format!(
            "dgram {} {} {} {} {} {} {} {} {} {} {}\n",
            d.key,
            d.dqp_dct,
            d.ext as u8,
            d.stat_rate_sl,
            d.fl_mlid,
            d.rlid,
            hex(&d.rmac),
            d.tclass,
            d.hop_limit,
            d.grh_gid_fl,
            hex(&d.rgid)
        );
        let mut b = [0u8; 48];
        d.emit(&mut DatagramSeg::new_unchecked(&mut b[..]));
        assert_eq!(
            DatagramRepr::parse(&DatagramSeg::new_unchecked(&b[..])).unwrap(),
            d
        );
        expect.push(format!("G {}", hex(&b)));

        let hlen = rng.below(200) as usize;
        let hdr = rng.bytes(hlen);
        let e = EthRepr {
            cs_flags: rng.u32() as u8,
            mss: rng.u32() as u16,
            inline_hdr: SplitBytes::new(&hdr),
            ..Default::default()
        };
        input += &format!(
            "eth {} {} {}\n",
            e.cs_flags,
            e.mss,
            if hdr.is_empty() {
                "-".to_string()
            } else {
                hex(&hdr)
            }
        );
        let mut b = vec![0u8; e.buffer_len()];
        e.emit(&mut b).unwrap();
        expect.push(format!("E {}", hex(&b)));
    }
    let got = run_harness(&exe, &input);
    assert_eq!(got, expect);
}
