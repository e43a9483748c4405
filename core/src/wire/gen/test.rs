use super::*;
use crate::wire::{icrc, RocePacket};

fn prng_bytes(seed: u64, out: &mut [u8]) {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for b in out.iter_mut() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        *b = (s >> 32) as u8;
    }
}

fn targets() -> [Target; 5] {
    let mut ud = Target::example_v4();
    ud.qp.service = Transport::Ud;
    let mut uc = Target::example_v6();
    uc.qp.service = Transport::Uc;
    uc.qp.pmtu = 4096;
    uc.udp_checksum = UdpChecksum::Compute;
    // A read-only MR: valid frames never WRITE or use atomics on it.
    let mut ro = Target::example_v6();
    if let Some(m) = ro.mr.as_mut() {
        m.remote_write = false;
        m.remote_atomic = false;
    }
    let mut v4 = Target::example_v4();
    v4.eth.vlan = Some(crate::wire::VlanTag {
        pcp: 3,
        dei: false,
        vid: 7,
    });
    [v4, ro, ud, uc, Target::example_v4()]
}

/// Checks one generated frame against what its violation promises.
fn check(t: &Target, g: &Generated, frame: &[u8]) {
    let parsed = RocePacket::parse(frame);
    let v = g.violation;
    if !matches!(v, Violation::BadIcrc | Violation::LengthField) {
        assert_eq!(
            icrc::verify_frame(frame),
            Ok(true),
            "{v:?} ICRC over the bytes present"
        );
    }
    match v {
        Violation::None
        | Violation::PsnAhead
        | Violation::PsnBehind
        | Violation::WrongQpn
        | Violation::WrongPkey
        | Violation::OpcodeForOtherQpType
        | Violation::OutOfOrderOpcode
        | Violation::PayloadOverMtu
        | Violation::RkeyNearMr
        | Violation::VaOutOfMr
        | Violation::DmaLenMismatch
        | Violation::BadUdpChecksum
        | Violation::AccessNotGranted
        | Violation::BadIcrc => {
            let p = parsed.unwrap_or_else(|e| panic!("{v:?} {g:?}: {e:?}"));
            assert_eq!(p.icrc_valid, v != Violation::BadIcrc);
            assert_eq!(u8::from(p.transport.bth.opcode), g.opcode);
            assert_eq!(p.payload.len(), g.payload_len);
            assert_eq!(p.transport.bth.psn, g.psn);
            let b = &p.transport.bth;
            match v {
                Violation::WrongQpn => assert_ne!(b.dest_qp, t.qp.qpn),
                _ => assert_eq!(b.dest_qp, t.qp.qpn),
            }
            match v {
                Violation::WrongPkey => assert_ne!(b.pkey, t.qp.pkey),
                _ => assert_eq!(b.pkey, t.qp.pkey),
            }
            match v {
                Violation::PsnAhead => {
                    assert!(g.psn.diff(t.qp.epsn) > 0 || g.psn.diff(t.qp.epsn) == -(1 << 23))
                }
                Violation::PsnBehind => assert!(
                    g.psn.diff(t.qp.epsn) < 0
                        || g.psn.diff(t.qp.epsn) == 1 << 23
                        || g.psn.diff(t.qp.epsn) == -(1 << 23)
                ),
                _ => {}
            }
            if v == Violation::None {
                let op = b.opcode;
                assert!(!op.is_middle() && !op.is_last(), "{op:?}");
                assert_eq!(
                    op.transport(),
                    if op == Opcode::Cnp {
                        Transport::Cnp
                    } else {
                        service(t)
                    }
                );
                if op.is_request() {
                    assert_eq!(b.psn, t.qp.epsn);
                }
                if let (Some(r), Some(mr)) = (p.transport.reth, t.mr) {
                    assert_eq!(r.rkey, mr.rkey);
                    assert!(
                        r.va >= mr.va && r.va + u64::from(r.dma_len) <= mr.va + mr.len,
                        "{r:?}"
                    );
                    if op.is_write() && op.is_only() {
                        assert_eq!(r.dma_len as usize, p.payload.len());
                    }
                }
                if op.is_first() || op.is_middle() {
                    assert_eq!(p.payload.len() as u32, t.qp.pmtu);
                } else {
                    assert!(p.payload.len() as u32 <= t.qp.pmtu);
                }
                // Re-emitting gives the same bytes.
                let mut again = [0u8; MAX_FRAME_LEN];
                let n = p.emit(UdpChecksum::AsGiven, &mut again).unwrap();
                assert_eq!(&again[..n], frame);
            }
            if v == Violation::PayloadOverMtu {
                assert!(p.payload.len() as u32 > t.qp.pmtu);
            }
            if v == Violation::RkeyNearMr {
                let mr = t.mr.unwrap();
                let k = p
                    .transport
                    .reth
                    .map(|r| r.rkey)
                    .or(p.transport.atomic_eth.map(|a| a.rkey))
                    .or(p.transport.ieth)
                    .unwrap();
                assert_ne!(k, mr.rkey);
            }
            if let (Some(mr), Violation::None | Violation::AccessNotGranted) = (t.mr, v) {
                assert_eq!(
                    mr.permits(b.opcode),
                    v == Violation::None,
                    "{v:?} {:?}",
                    b.opcode
                );
            }
            if v == Violation::OpcodeForOtherQpType {
                assert_ne!(b.opcode.transport(), service(t));
            }
        }
        Violation::UnknownOpcode => {
            assert!(Opcode::from(g.opcode).header_set().is_none());
            assert_eq!(parsed.unwrap_err(), Error::UnknownOpcode);
        }
        Violation::BadTver => assert_eq!(parsed.unwrap_err(), Error::BadTver),
        Violation::TruncatedHeaders => assert_eq!(parsed.unwrap_err(), Error::Truncated),
        Violation::LengthField => {
            assert!(parsed.is_err() || parsed.unwrap().frame_len() != frame.len())
        }
        Violation::PadCntMismatch | Violation::PayloadLenWrong | Violation::ReservedBits => {
            if let Ok(p) = parsed {
                assert!(p.icrc_valid);
            }
        }
    }
}

#[test]
fn every_violation_and_opcode_is_generated_and_checks() {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let mut data = [0u8; 256];
    let mut seen_v = [0u32; 21];
    let mut seen_op = [false; 256];
    for (ti, t) in targets().iter().enumerate() {
        for i in 0..4000u64 {
            prng_bytes(i * 4 + ti as u64, &mut data);
            let g = generate(&mut Entropy::new(&data), t, &mut buf).unwrap();
            check(t, &g, &buf[..g.len]);
            let vi = Violation::ALL
                .iter()
                .position(|&x| x == g.violation)
                .unwrap();
            seen_v[vi] += 1;
            seen_op[usize::from(g.opcode)] = true;
        }
    }
    for (i, n) in seen_v.iter().enumerate() {
        if Violation::ALL[i] == Violation::AccessNotGranted {
            continue; // the example targets' MRs allow everything
        }
        assert!(*n > 20, "{:?} generated {n} times", Violation::ALL[i]);
    }
    for op in KNOWN_OPCODES {
        assert!(seen_op[usize::from(op)], "opcode {op:#04x} never generated");
    }
}

#[test]
fn forced_violations_for_every_target() {
    let mut buf = [0u8; MAX_FRAME_LEN];
    let mut data = [0u8; 128];
    for t in targets() {
        for v in Violation::ALL {
            if !v.applies_to(&t) {
                continue;
            }
            for i in 0..200u64 {
                prng_bytes(i + 7, &mut data);
                let g = generate_violation(&mut Entropy::new(&data), &t, v, &mut buf).unwrap();
                assert_eq!(g.violation, v);
                check(&t, &g, &buf[..g.len]);
            }
        }
    }
}

#[test]
fn empty_input_is_a_valid_frame() {
    let t = Target::example_v4();
    let mut buf = [0u8; MAX_FRAME_LEN];
    let g = generate(&mut Entropy::new(&[]), &t, &mut buf).unwrap();
    assert_eq!(g.violation, Violation::None);
    let p = RocePacket::parse(&buf[..g.len]).unwrap();
    assert!(p.icrc_valid);
    assert_eq!(p.transport.bth.dest_qp, 0x11);
}

#[test]
fn small_buffer_is_an_error_not_a_panic() {
    let t = Target::example_v4();
    let mut buf = [0u8; 80];
    let mut data = [0u8; 64];
    for i in 0..500 {
        prng_bytes(i, &mut data);
        if let Ok(g) = generate(&mut Entropy::new(&data), &t, &mut buf) {
            assert!(g.len <= 80);
        }
    }
}

/// With `whole_frame: false` only the UDP payload is sent: its ICRC must verify against the
/// headers a kernel UDP socket writes (IPv4 ID 0, DF), and no IP/UDP violation is chosen.
#[test]
fn udp_socket_frames_verify_with_the_socket_context() {
    let mut t = Target::example_v4();
    t.whole_frame = false;
    let crate::wire::IpRepr::V4(ip) = t.ip else {
        unreachable!()
    };
    let ctx = crate::wire::IcrcContext::for_udp_socket_v4(ip.src, ip.dst, t.src_port, t.dst_port);
    let ib_at = 14 + 20 + 8;
    let mut buf = [0u8; MAX_FRAME_LEN];
    let mut data = [0u8; 128];
    for i in 0..3000 {
        prng_bytes(i + 99, &mut data);
        let g = generate(&mut Entropy::new(&data), &t, &mut buf).unwrap();
        assert!(!matches!(
            g.violation,
            Violation::LengthField | Violation::BadUdpChecksum
        ));
        assert_eq!(
            ctx.verify(&buf[ib_at..g.len]),
            g.violation != Violation::BadIcrc,
            "{g:?}"
        );
    }
}
