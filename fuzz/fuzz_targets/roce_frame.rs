//! Arbitrary bytes as an Ethernet frame through `RocePacket::parse`. Whatever parses must
//! re-emit (lengths, IPv4 checksum, pad and ICRC recomputed) and parse again to the same reprs
//! and payload. Under `cfg(fuzzing)` the ICRC and IPv4 checksum checks pass, so the fuzzer
//! reaches every layer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmesh_core::wire::{RocePacket, UdpChecksum};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = RocePacket::parse(data) else {
        return;
    };
    let mut buf = vec![0u8; p.frame_len()];
    let n = p
        .emit(UdpChecksum::AsGiven, &mut buf)
        .expect("a parsed frame must re-emit");
    assert_eq!(n, buf.len());
    let q = RocePacket::parse(&buf).expect("a re-emitted frame must parse");
    assert_eq!(q.repr(), p.repr());
    assert_eq!(q.payload, p.payload);
    assert_eq!(q.pad_cnt, p.pad_cnt);
    assert!(q.icrc_valid);
    // Re-emitting is a fixed point.
    let mut again = vec![0u8; q.frame_len()];
    q.emit(UdpChecksum::AsGiven, &mut again).unwrap();
    assert_eq!(again, buf);
});
