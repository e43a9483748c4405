//! The verbs API over the soft provider, end to end on loopback: QP transitions and their
//! errors, WRITE/SEND/READ with immediate data, remote-access violations, ICRC drops.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::Duration;

use rdmesh_host::verbs::*;
use rdmesh_host::Error;

mod common;
use common::*;

fn lo(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 9, n))
}

fn end(addr: IpAddr, access: AccessFlags, len: usize) -> End {
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(addr)
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(len, access).unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    to_init(&qp, access);
    End { dev, cq, qp, mr }
}

fn rtr(to: &End) -> QpAttr {
    // rq_psn wraps past 2^24 within the first messages.
    rtr_attr(to, Mtu::Mtu1024, 0xfffff0)
}

fn rts(timeout: u8) -> QpAttr {
    rts_attr(0xfffff0, timeout, 3)
}

fn pair(n: u8, access: AccessFlags) -> (End, End) {
    let a = end(lo(n), access, 1 << 20);
    let b = end(lo(n + 1), access, 1 << 20);
    a.qp.modify(&rtr(&b)).unwrap();
    b.qp.modify(&rtr(&a)).unwrap();
    a.qp.modify(&rts(12)).unwrap();
    b.qp.modify(&rts(12)).unwrap();
    (a, b)
}

const RW: AccessFlags = AccessFlags::ALL;

#[test]
fn transitions_name_what_is_missing() {
    let a = end(lo(1), RW, 4096);
    let mut attr = rtr(&a);
    attr.rq_psn = None;
    attr.min_rnr_timer = None;
    let e = a.qp.modify(&attr).unwrap_err().to_string();
    assert!(
        e.contains("rq_psn") && e.contains("min_rnr_timer") && e.contains("missing"),
        "{e}"
    );
    let mut attr = rtr(&a);
    attr.sq_psn = Some(1);
    let e = a.qp.modify(&attr).unwrap_err().to_string();
    assert!(e.contains("sq_psn") && e.contains("not allowed"), "{e}");
    let e = a.qp.modify(&rts(1)).unwrap_err().to_string();
    assert!(e.contains("Init -> Rts"), "{e}");
    let mut attr = rtr(&a);
    attr.retry_cnt = None;
    attr.path_mtu = Some(Mtu::Mtu4096);
    // Loopback's MTU is 65536: 4096 fits; a bad retry value in RTS is refused by range.
    a.qp.modify(&attr).unwrap();
    let mut r = rts(1);
    r.retry_cnt = Some(9);
    let e = a.qp.modify(&r).unwrap_err().to_string();
    assert!(e.contains("retry_cnt = 9"), "{e}");
    let e =
        a.qp.post_send(&[SendWr::new(5, WrOpcode::Send, vec![])])
            .unwrap_err()
            .to_string();
    assert!(e.contains("RTS") && e.contains("wr_id 5"), "{e}");
}

#[test]
fn write_send_read_with_immediate() {
    let (a, b) = pair(3, RW);
    let msg: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    a.mr.write(0, &msg).unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 77,
        sg_list: vec![Sge {
            addr: b.mr.addr() + 8192,
            length: 8192,
            lkey: b.mr.lkey(),
        }],
    }])
    .unwrap();
    b.qp.post_recv(&[RecvWr {
        wr_id: 78,
        sg_list: vec![Sge {
            addr: b.mr.addr() + 65536,
            length: 16,
            lkey: b.mr.lkey(),
        }],
    }])
    .unwrap();
    let sge = Sge {
        addr: a.mr.addr(),
        length: 5000,
        lkey: a.mr.lkey(),
    };
    a.qp.post_send(&[
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr() + 100,
                rkey: b.mr.rkey(),
            },
            vec![sge],
        ),
        SendWr::new(2, WrOpcode::SendWithImm(0xdeadbeef), vec![sge]),
        SendWr::new(
            3,
            WrOpcode::RdmaWriteWithImm {
                remote_addr: b.mr.addr() + 20000,
                rkey: b.mr.rkey(),
                imm: 0x1234,
            },
            vec![sge],
        ),
    ])
    .unwrap();
    let got: Vec<_> = (0..3).map(|_| wait(&a.cq)).collect();
    assert_eq!(
        got.iter()
            .map(|w| (w.wr_id, w.status, w.opcode))
            .collect::<Vec<_>>(),
        vec![
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::RdmaWrite)
        ]
    );
    let r1 = wait(&b.cq);
    assert_eq!(
        (r1.wr_id, r1.opcode, r1.byte_len, r1.imm_data),
        (77, WcOpcode::Recv, 5000, Some(0xdeadbeef))
    );
    let r2 = wait(&b.cq);
    assert_eq!(
        (r2.wr_id, r2.opcode, r2.imm_data),
        (78, WcOpcode::RecvRdmaWithImm, Some(0x1234))
    );
    let mut back = vec![0u8; 5000];
    for off in [100usize, 8192, 20000] {
        b.mr.read(off, &mut back).unwrap();
        assert_eq!(back, msg, "data at offset {off}");
    }
    // READ it back into a's buffer at 200000.
    a.qp.post_send(&[SendWr::new(
        4,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr() + 100,
            rkey: b.mr.rkey(),
        },
        vec![Sge {
            addr: a.mr.addr() + 200000,
            length: 5000,
            lkey: a.mr.lkey(),
        }],
    )])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!(
        (w.wr_id, w.status, w.opcode, w.byte_len),
        (4, WcStatus::Success, WcOpcode::RdmaRead, 5000)
    );
    a.mr.read(200000, &mut back).unwrap();
    assert_eq!(back, msg);
    assert_eq!(
        a.dev.counters().icrc_errors + b.dev.counters().icrc_errors,
        0
    );
}

#[test]
fn remote_access_violation_writes_nothing() {
    // b's region allows no remote write.
    let a = end(lo(5), RW, 1 << 16);
    let b = end(
        lo(6),
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        1 << 16,
    );
    a.qp.modify(&rtr(&b)).unwrap();
    b.qp.modify(&rtr(&a)).unwrap();
    a.qp.modify(&rts(12)).unwrap();
    b.qp.modify(&rts(12)).unwrap();
    a.mr.write(0, &[0xab; 3000]).unwrap();
    let sge = Sge {
        addr: a.mr.addr(),
        length: 3000,
        lkey: a.mr.lkey(),
    };
    a.qp.post_send(&[
        SendWr::new(
            1,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            vec![sge],
        ),
        SendWr::new(
            2,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr(),
                rkey: b.mr.rkey(),
            },
            vec![sge],
        ),
    ])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (2, WcStatus::WrFlushErr));
    assert_eq!(a.qp.state(), QpState::Err);
    assert!(
        b.mr.with(|m| m.iter().all(|&x| x == 0)),
        "nothing may be written"
    );
    // Out of bounds on an allowed region is refused too.
    let (c, d) = pair(7, RW);
    c.qp.post_send(&[SendWr::new(
        9,
        WrOpcode::RdmaWrite {
            remote_addr: d.mr.addr() + (1 << 20) - 10,
            rkey: d.mr.rkey(),
        },
        vec![Sge {
            addr: c.mr.addr(),
            length: 100,
            lkey: c.mr.lkey(),
        }],
    )])
    .unwrap();
    assert_eq!(wait(&c.cq).status, WcStatus::RemAccessErr);
}

#[test]
fn corrupted_icrc_is_dropped_and_counted_then_retry_recovers() {
    let (a, b) = pair(9, RW);
    // Inject a datagram with a wrong ICRC from a's address and port: b must drop and count it.
    let sock = UdpSocket::bind(SocketAddr::new(lo(11), 0)).unwrap();
    let mut pkt = vec![0u8; 16];
    pkt[0] = 0x04; // SEND_ONLY
    pkt[5..8].copy_from_slice(&b.qp.qp_num().to_be_bytes()[1..]);
    sock.send_to(&pkt, b.dev.local_addr()).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(b.dev.counters().icrc_errors, 1);
    // Normal traffic is unaffected.
    a.mr.write(0, b"hello").unwrap();
    a.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr(),
            rkey: b.mr.rkey(),
        },
        vec![Sge {
            addr: a.mr.addr(),
            length: 5,
            lkey: a.mr.lkey(),
        }],
    )])
    .unwrap();
    assert_eq!(wait(&a.cq).status, WcStatus::Success);
    let mut got = [0u8; 5];
    b.mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"hello");
}

#[test]
fn dead_peer_gives_retry_exceeded() {
    let a = end(lo(12), RW, 4096);
    let b = end(lo(13), RW, 4096);
    a.qp.modify(&rtr(&b)).unwrap();
    a.qp.modify(&rts(1)).unwrap(); // 8.192 µs timer, 3 retries
    let addr_b = b.dev.local_addr();
    drop(b);
    let _ = addr_b;
    a.qp.post_send(&[
        SendWr::new(
            1,
            WrOpcode::Send,
            vec![Sge {
                addr: a.mr.addr(),
                length: 8,
                lkey: a.mr.lkey(),
            }],
        ),
        SendWr::new(
            2,
            WrOpcode::Send,
            vec![Sge {
                addr: a.mr.addr(),
                length: 8,
                lkey: a.mr.lkey(),
            }],
        ),
    ])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RetryExcErr));
    assert_eq!(wait(&a.cq).status, WcStatus::WrFlushErr);
    assert!(a.qp.counters().timeouts >= 3);
}

#[test]
fn bad_bind_and_registration_errors_are_clear() {
    let e = Device::open_soft(SoftConfig::new("0.0.0.0".parse().unwrap()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("0.0.0.0") && e.contains("ICRC"), "{e}");
    let e = Device::open_soft(SoftConfig::new("192.0.2.1".parse().unwrap()))
        .unwrap_err()
        .to_string();
    assert!(e.contains("192.0.2.1:4791"), "{e}");
    let d = Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(lo(14))
    })
    .unwrap();
    let e = d
        .alloc_pd()
        .unwrap()
        .register(64, AccessFlags::REMOTE_WRITE)
        .unwrap_err();
    assert!(
        matches!(e, Error::Memory(_)) && e.to_string().contains("LOCAL_WRITE"),
        "{e}"
    );
}
