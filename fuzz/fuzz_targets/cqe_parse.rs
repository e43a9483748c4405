//! mlx5 CQEs: any 64 bytes parse (`CqeRepr::parse`), emit back to the same bytes (reserved bytes
//! aside) and parse to the same repr; a `CqReader` polling arbitrary ring contents never panics,
//! only consumes entries the ownership rule gives it, and keeps its doorbell words consistent.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdmesh_core::mlx5::cq::{ArmCmd, CqReader};
use rdmesh_core::mlx5::cqe::{Cqe64, LEN};
use rdmesh_core::mlx5::CqeRepr;

fuzz_target!(|data: &[u8]| {
    if let Ok(v) = Cqe64::new_checked(data) {
        let r = CqeRepr::parse(&v).expect("every 64 bytes are a CQE");
        let mut out = [0u8; LEN];
        r.emit(&mut Cqe64::new_unchecked(&mut out[..]));
        let again = CqeRepr::parse(&Cqe64::new_unchecked(&out[..])).unwrap();
        assert_eq!(again, r);
        for (i, (a, b)) in out.iter().zip(&data[..LEN]).enumerate() {
            if !matches!(i, 1 | 0x12 | 0x13) {
                assert_eq!(a, b, "byte {i:#x}");
            }
        }
        assert_eq!(r.op_own(), data[LEN - 1]);
        assert_eq!(r.error.is_some(), matches!(data[LEN - 1] >> 4, 13 | 14));
    }

    // data[0] picks the ring size; the rest is the ring.
    let Some((&sel, rest)) = data.split_first() else { return };
    let log = sel & 3;
    let mut cq = CqReader::new(log, 0x12345).unwrap();
    let Some(ring) = rest.get(..cq.ring_len()) else { return };
    for _ in 0..(2 * cq.entries()) {
        let before = cq.ci();
        let expect = cq.owned_by_sw(ring[cq.offset() + LEN - 1]);
        match cq.poll(ring).unwrap() {
            Some(c) => {
                assert!(expect);
                assert_eq!(cq.ci(), before + 1);
                assert_ne!(c.op_own() >> 4, 15);
            }
            None => {
                assert!(!expect);
                assert_eq!(cq.ci(), before);
                cq.consume();
            }
        }
        assert_eq!(cq.dbrec(), (cq.ci() & 0xff_ffff).to_be_bytes());
        assert_eq!(cq.arm_value(ArmCmd::Next) & 0xff_ffff, cq.ci() & 0xff_ffff);
        if sel & 0x80 != 0 {
            cq.event();
        }
    }
});
