//! Remote access violations the responder must refuse without touching memory (IBTA vol. 1
//! §9.7.4.1.4 / §10.6.3.3: an R_Key that names no valid region of the QP's PD is a remote access
//! error): an rkey of a deregistered region, and an rkey of a region registered on another PD
//! of the same device. The requester's WR completes with REM_ACCESS_ERR, its QP moves to ERR,
//! the WRs behind it flush, and the targeted bytes stay as they were.
//!
//! (Wrong rkey bits, out-of-bounds addresses and missing access flags are in `verbs.rs`.)

use std::net::{IpAddr, Ipv4Addr};

use rdmesh_host::verbs::*;

mod common;
use common::*;

const LEN: usize = 64 << 10;

fn lo(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 13, n))
}

/// One end: device, PD, the QP's own region, CQ and QP (in INIT, all remote access allowed).
fn end(n: u8) -> (End, ProtectionDomain) {
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(lo(n))
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(LEN, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(64).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    to_init(&qp, AccessFlags::ALL);
    (End { dev, cq, qp, mr }, pd)
}

fn pair(n: u8) -> (End, End, ProtectionDomain) {
    let (a, _) = end(n);
    let (b, pd_b) = end(n + 1);
    connect_pair(&a, &b, Mtu::Mtu1024, 100, 14, 7);
    (a, b, pd_b)
}

fn fill(mr: &MemoryRegion, byte: u8) {
    mr.with(|m| m.fill(byte));
}

fn all(mr: &MemoryRegion, byte: u8) -> bool {
    mr.with(|m| m.iter().all(|&x| x == byte))
}

/// Posts `op` (4000 bytes from/to a's region) then a SEND behind it; expects REM_ACCESS_ERR
/// for the first, WR_FLUSH_ERR for the second, and a's QP in ERR.
fn expect_access_error(a: &End, op: WrOpcode, what: &str) {
    let sge = Sge {
        addr: a.mr.addr(),
        length: 4000,
        lkey: a.mr.lkey(),
    };
    a.qp.post_send(&[
        SendWr::new(1, op, vec![sge]),
        SendWr::new(2, WrOpcode::Send, vec![]),
    ])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr), "{what}");
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (2, WcStatus::WrFlushErr), "{what}");
    assert_eq!(a.qp.state(), QpState::Err, "{what}");
    let c = a.qp.counters();
    assert!(
        c.naks_received.remote_access >= 1 || c.naks_received.invalid_request >= 1,
        "{what}: the responder must NAK ({c:?})"
    );
    println!(
        "{what}: REM_ACCESS_ERR, next WR flushed, NAKs received {:?}",
        c.naks_received
    );
}

/// A region registered, then deregistered (last handle dropped): its rkey must not resolve,
/// even when a new region of the same size is registered at the same address afterwards.
fn deregistered(n: u8, read: bool) {
    let (a, b, pd_b) = pair(n);
    let gone = pd_b.register(LEN, AccessFlags::ALL).unwrap();
    let (stale_rkey, stale_addr) = (gone.rkey(), gone.addr());
    drop(gone);
    // The allocator usually hands the same block to the next region of the same size: the
    // stale rkey must still name nothing.
    let fresh = pd_b.register(LEN, AccessFlags::ALL).unwrap();
    assert_ne!(fresh.rkey(), stale_rkey, "keys are never reused");
    fill(&fresh, 0x5a);
    fill(&b.mr, 0x5a);
    fill(&a.mr, 0xc3);
    let op = if read {
        WrOpcode::RdmaRead {
            remote_addr: stale_addr,
            rkey: stale_rkey,
        }
    } else {
        WrOpcode::RdmaWrite {
            remote_addr: stale_addr,
            rkey: stale_rkey,
        }
    };
    let what = format!(
        "{} with the rkey {stale_rkey:#x} of a deregistered MR (new MR {} at the same address)",
        if read { "RDMA READ" } else { "RDMA WRITE" },
        if fresh.addr() == stale_addr {
            "registered"
        } else {
            "not"
        }
    );
    expect_access_error(&a, op, &what);
    assert!(all(&fresh, 0x5a), "{what}: the new region changed");
    assert!(all(&b.mr, 0x5a), "{what}: the peer's other region changed");
    assert!(
        all(&a.mr, 0xc3),
        "{what}: the requester's buffer changed (no READ data may land)"
    );
}

/// A region of another PD of the same device: the QP (on PD A) must not reach it.
fn other_pd(n: u8, op: &str) {
    let (a, b, _pd_b) = pair(n);
    let pd_other = b.dev.alloc_pd().unwrap();
    let foreign = pd_other.register(LEN, AccessFlags::ALL).unwrap();
    fill(&foreign, 0x77);
    fill(&a.mr, 0x11);
    let before_b = b.mr.with(|m| m.to_vec());
    let (remote_addr, rkey) = (foreign.addr(), foreign.rkey());
    let wr = match op {
        "write" => WrOpcode::RdmaWrite { remote_addr, rkey },
        "read" => WrOpcode::RdmaRead { remote_addr, rkey },
        _ => unreachable!(),
    };
    let what = format!("RDMA {op} to an MR (rkey {rkey:#x}) of another PD on the same device");
    expect_access_error(&a, wr, &what);
    assert!(
        all(&foreign, 0x77),
        "{what}: the foreign MR must be byte-for-byte unchanged"
    );
    assert!(all(&a.mr, 0x11), "{what}: no READ data may land");
    assert!(
        b.mr.with(|m| m == &before_b[..]),
        "{what}: b's own MR changed"
    );
}

/// Atomics against a foreign PD's region are refused the same way, the 8 bytes unchanged.
#[test]
fn atomic_to_mr_of_another_pd_is_refused() {
    let (a, b, _pd_b) = pair(21);
    let pd_other = b.dev.alloc_pd().unwrap();
    let foreign = pd_other.register(LEN, AccessFlags::ALL).unwrap();
    fill(&foreign, 0x77);
    let sge = Sge {
        addr: a.mr.addr(),
        length: 8,
        lkey: a.mr.lkey(),
    };
    a.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::FetchAdd {
            remote_addr: foreign.addr(),
            rkey: foreign.rkey(),
            add: 1,
        },
        vec![sge],
    )])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    assert!(all(&foreign, 0x77));
}

#[test]
fn write_with_rkey_of_deregistered_mr_is_refused() {
    deregistered(1, false);
}

#[test]
fn read_with_rkey_of_deregistered_mr_is_refused() {
    deregistered(3, true);
}

#[test]
fn write_to_mr_of_another_pd_is_refused() {
    other_pd(5, "write");
}

#[test]
fn read_from_mr_of_another_pd_is_refused() {
    other_pd(7, "read");
}
