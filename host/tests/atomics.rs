//! Atomics (COMPARE_SWAP, FETCH_ADD) through the verbs API over the soft provider on loopback:
//! the returned original values and the target memory are checked against a `u64` model; a
//! misaligned target completes with REM_INV_REQ_ERR, a region without REMOTE_ATOMIC with
//! REM_ACCESS_ERR, and in both cases the target region stays byte-for-byte unchanged.

use std::net::{IpAddr, Ipv4Addr};

use rdmesh_host::verbs::*;

mod common;
use common::*;

fn lo(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 10, n))
}

fn end(addr: IpAddr, access: AccessFlags) -> End {
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(addr)
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(4096, access).unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    to_init(&qp, access);
    End { dev, cq, qp, mr }
}

fn connect(a: &End, b: &End) {
    connect_pair(a, b, Mtu::Mtu1024, 0xfffffe, 14, 7);
}

fn local8(e: &End, off: u64) -> Vec<Sge> {
    vec![Sge {
        addr: e.mr.addr() + off,
        length: 8,
        lkey: e.mr.lkey(),
    }]
}

fn read_u64(mr: &MemoryRegion, off: usize) -> u64 {
    mr.with(|m| u64::from_ne_bytes(m[off..off + 8].try_into().unwrap()))
}

#[test]
fn fetch_add_and_compare_swap_return_the_original_value() {
    let a = end(lo(1), AccessFlags::ALL);
    let b = end(lo(2), AccessFlags::ALL);
    connect(&a, &b);
    let start = 0xffff_ffff_ffff_fff0u64; // the adds wrap past 2^64
    b.mr.write(64, &start.to_ne_bytes()).unwrap();
    let target = b.mr.addr() + 64;
    let rkey = b.mr.rkey();
    let mut model = start;
    // A sequence of fetch-adds and compare-swaps (some matching, some not), each completing
    // with the model's value before the operation.
    let ops: [(bool, u64, u64); 8] = [
        (true, 7, 0),
        (true, 0x20, 0),
        (false, 0, 1234),      // compare fails: nothing written
        (false, 0x17, 0xdead), // start + 7 + 0x20 wraps to 0x17: swap happens
        (true, 1, 0),
        (false, 0xdeae, u64::MAX), // matches
        (true, 2, 0),              // wraps to 1
        (false, 5, 6),             // compare fails
    ];
    for (i, &(is_add, x, y)) in ops.iter().enumerate() {
        let wr_id = 100 + i as u64;
        let local = i as u64 * 8;
        let opcode = if is_add {
            WrOpcode::FetchAdd {
                remote_addr: target,
                rkey,
                add: x,
            }
        } else {
            WrOpcode::CompareSwap {
                remote_addr: target,
                rkey,
                compare: x,
                swap: y,
            }
        };
        a.qp.post_send(&[SendWr::new(wr_id, opcode, local8(&a, local))])
            .unwrap();
        let w = wait(&a.cq);
        let expect_op = if is_add {
            WcOpcode::FetchAdd
        } else {
            WcOpcode::CompSwap
        };
        assert_eq!(
            (w.wr_id, w.status, w.opcode, w.byte_len),
            (wr_id, WcStatus::Success, expect_op, 8),
            "op {i}"
        );
        assert_eq!(
            read_u64(&a.mr, local as usize),
            model,
            "original value, op {i}"
        );
        model = if is_add {
            model.wrapping_add(x)
        } else if model == x {
            y
        } else {
            model
        };
        assert_eq!(read_u64(&b.mr, 64), model, "target after op {i}");
    }
    assert_eq!(model, 1, "the sequence above ends at 1 (model self-check)");
    // The bytes around the target are untouched.
    b.mr.with(|m| {
        assert!(m[..64].iter().all(|&x| x == 0));
        assert!(m[72..].iter().all(|&x| x == 0));
    });
    // A burst of 32 pipelined fetch-adds: every original value is distinct and the sum is exact.
    let wrs: Vec<SendWr> = (0..32u64)
        .map(|i| {
            SendWr::new(
                1000 + i,
                WrOpcode::FetchAdd {
                    remote_addr: target,
                    rkey,
                    add: 3,
                },
                local8(&a, 512 + i * 8),
            )
        })
        .collect();
    a.qp.post_send(&wrs).unwrap();
    for i in 0..32u64 {
        let w = wait(&a.cq);
        assert_eq!((w.wr_id, w.status), (1000 + i, WcStatus::Success));
    }
    let mut olds: Vec<u64> = (0..32).map(|i| read_u64(&a.mr, 512 + i * 8)).collect();
    olds.sort_unstable();
    let expect: Vec<u64> = (0..32).map(|i| 1 + 3 * i).collect();
    assert_eq!(olds, expect);
    assert_eq!(read_u64(&b.mr, 64), 1 + 3 * 32);
}

#[test]
fn misaligned_target_is_an_error_completion_and_writes_nothing() {
    let a = end(lo(3), AccessFlags::ALL);
    let b = end(lo(4), AccessFlags::ALL);
    connect(&a, &b);
    b.mr.write(0, &[0x5a; 4096]).unwrap();
    a.qp.post_send(&[
        SendWr::new(
            1,
            WrOpcode::FetchAdd {
                remote_addr: b.mr.addr() + 12,
                rkey: b.mr.rkey(),
                add: 1,
            },
            local8(&a, 0),
        ),
        SendWr::new(
            2,
            WrOpcode::FetchAdd {
                remote_addr: b.mr.addr() + 16,
                rkey: b.mr.rkey(),
                add: 1,
            },
            local8(&a, 8),
        ),
    ])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemInvReqErr));
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (2, WcStatus::WrFlushErr));
    assert_eq!(a.qp.state(), QpState::Err);
    assert!(b.mr.with(|m| m.iter().all(|&x| x == 0x5a)));
}

#[test]
fn region_without_remote_atomic_gives_rem_access_err_and_stays_unchanged() {
    let a = end(lo(5), AccessFlags::ALL);
    let b = end(
        lo(6),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE,
    );
    connect(&a, &b);
    b.mr.write(0, &[0x33; 4096]).unwrap();
    a.qp.post_send(&[SendWr::new(
        7,
        WrOpcode::CompareSwap {
            remote_addr: b.mr.addr() + 8,
            rkey: b.mr.rkey(),
            compare: u64::from_ne_bytes([0x33; 8]),
            swap: 0,
        },
        local8(&a, 0),
    )])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (7, WcStatus::RemAccessErr));
    assert_eq!(a.qp.state(), QpState::Err);
    assert!(b.mr.with(|m| m.iter().all(|&x| x == 0x33)));
    // A local buffer that is not 8 bytes is refused at post time.
    let c = end(lo(7), AccessFlags::ALL);
    let d = end(lo(8), AccessFlags::ALL);
    connect(&c, &d);
    let e =
        c.qp.post_send(&[SendWr::new(
            9,
            WrOpcode::FetchAdd {
                remote_addr: d.mr.addr(),
                rkey: d.mr.rkey(),
                add: 1,
            },
            vec![Sge {
                addr: c.mr.addr(),
                length: 4,
                lkey: c.mr.lkey(),
            }],
        )])
        .unwrap_err()
        .to_string();
    assert!(e.contains("wr_id 9"), "{e}");
}
