//! The structure-aware generator (`rdmesh_core::wire::gen`, feature `arbitrary`) driven by
//! libFuzzer: an arbitrary `Target` (addresses, QP, MR) and decision bytes. Checks the
//! generator's promises with rdmesh's own parser: it never panics; a frame meant to be valid
//! parses, carries the ICRC `icrc::compute_frame` computes (verification is skipped under
//! `cfg(fuzzing)`, computation is not), names the target's QPN and P_Key, and re-emits byte
//! for byte; a `bad-icrc` frame's trailer differs from the computed ICRC.
//!
//! This is also the template for fuzzing a parser of your own: replace the checks with a call
//! into it (docs/fuzzing.md).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmesh_core::wire::gen::{generate, Entropy, Target, Violation, MAX_FRAME_LEN};
use rdmesh_core::wire::udp::ROCE_V2_PORT;
use rdmesh_core::wire::{icrc, RocePacket, UdpChecksum};

fuzz_target!(|input: (Target, &[u8])| {
    let (target, decisions) = input;
    let mut buf = vec![0u8; MAX_FRAME_LEN];
    let Ok(g) = generate(&mut Entropy::new(decisions), &target, &mut buf) else {
        return;
    };
    let frame = &buf[..g.len];
    let wire = icrc::from_wire(frame[g.len - 4..].try_into().unwrap());
    let computed = icrc::compute_frame(frame);
    match g.violation {
        Violation::None if target.dst_port == ROCE_V2_PORT => {
            let p = RocePacket::parse(frame).expect("a valid generated frame parses");
            assert_eq!(computed, Ok(wire), "ICRC of a valid frame");
            assert_eq!(p.transport.bth.dest_qp, target.qp.qpn & 0xff_ffff);
            assert_eq!(p.transport.bth.pkey, target.qp.pkey);
            assert_eq!(u8::from(p.transport.bth.opcode), g.opcode);
            assert_eq!(p.payload.len(), g.payload_len);
            let mut again = vec![0u8; p.frame_len()];
            let checksum = match target.udp_checksum {
                UdpChecksum::Compute => UdpChecksum::Compute,
                _ => UdpChecksum::AsGiven,
            };
            let n = p.emit(checksum, &mut again).expect("re-emit");
            assert_eq!(&again[..n], frame, "re-emitting a valid frame is byte-exact");
        }
        Violation::BadIcrc => {
            if let Ok(c) = computed {
                assert_ne!(c, wire, "a bad-icrc frame has a wrong ICRC");
            }
        }
        Violation::LengthField => {}
        _ => {
            if let Ok(c) = computed {
                assert_eq!(c, wire, "{:?} keeps the ICRC", g.violation);
            }
        }
    }
});
