//! The mlx5 send-WQE decoder over arbitrary ring bytes and offsets, for every QP type: it never
//! panics, and whatever it accepts re-encodes (`WqeRepr::emit`) into a flat WQE that decodes to
//! the same control segment and segments.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmesh_core::mlx5::{decode_wqe, QpType, MAX_DS};

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let qp = [QpType::Rc, QpType::Uc, QpType::Ud, QpType::RawPacket][(data[0] & 3) as usize];
    let ring = &data[2..];
    let offset = (data[1] as usize) * 16;
    let Ok(w) = decode_wqe(ring, offset, qp) else { return };
    assert!(w.ctrl.ds >= 1 && w.ctrl.ds as usize <= MAX_DS);
    let mut flat = vec![0u8; w.buffer_len()];
    let n = w.emit(&mut flat).expect("a decoded WQE re-encodes");
    assert_eq!(n, w.ctrl.ds as usize * 16);
    let again = decode_wqe(&flat, 0, qp).expect("the re-encoded WQE decodes");
    assert_eq!(again.ctrl, w.ctrl);
    assert_eq!(again.segments, w.segments);
});
