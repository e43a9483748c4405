//! Soft memory regions over memory the caller lends (`ProtectionDomain::register_lent`): RDMA
//! WRITE into, RDMA READ from, and SEND from and into lent regions between two soft QPs are
//! byte-exact; every access reaches the lent memory through a range inside the region, never
//! the whole region at once; out-of-bounds WRITEs are refused without touching it; and
//! dropping the region's last handle ends the loan.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rdmesh_host::verbs::*;

mod common;
use common::*;

/// Bytes of each lent region: 1 MiB, large enough that placement and gathering run in many
/// ranges.
const LEN: usize = 1 << 20;

fn lo(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 14, n))
}

/// What the test observes of a loan: the largest range handed out, how many, and whether
/// the loan ended (the provider dropped the memory).
#[derive(Default)]
struct Log {
    largest: AtomicUsize,
    accesses: AtomicUsize,
    out_of_bounds: AtomicBool,
    ended: AtomicBool,
}

/// A lender: a heap buffer reached only through ranges.
struct Lent {
    bytes: Box<[u8]>,
    log: Arc<Log>,
}

impl Lent {
    fn note(&self, offset: usize, len: usize) {
        self.log.largest.fetch_max(len, Ordering::Relaxed);
        self.log.accesses.fetch_add(1, Ordering::Relaxed);
        if offset + len > self.bytes.len() || len == 0 {
            self.log.out_of_bounds.store(true, Ordering::Relaxed);
        }
    }
}

impl LentMemory for Lent {
    fn addr(&self) -> u64 {
        self.bytes.as_ptr() as u64
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }

    fn range(&self, offset: usize, len: usize) -> &[u8] {
        self.note(offset, len);
        &self.bytes[offset..offset + len]
    }

    fn range_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        self.note(offset, len);
        &mut self.bytes[offset..offset + len]
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        self.log.ended.store(true, Ordering::Relaxed);
    }
}

fn lend(pd: &ProtectionDomain, fill: impl Fn(usize) -> u8) -> (MemoryRegion, Arc<Log>) {
    let log = Arc::new(Log::default());
    let bytes: Box<[u8]> = (0..LEN).map(fill).collect();
    let mr = pd
        .register_lent(
            Box::new(Lent {
                bytes,
                log: log.clone(),
            }),
            AccessFlags::ALL,
        )
        .unwrap();
    (mr, log)
}

/// One end: an owned region (for the End) on its own device, PD, CQ and QP in INIT.
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

fn pattern(seed: usize) -> impl Fn(usize) -> u8 {
    move |i| ((i.wrapping_mul(seed) >> 3) ^ i ^ seed) as u8
}

fn contents(mr: &MemoryRegion) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read(0, &mut v).unwrap();
    v
}

fn sge(mr: &MemoryRegion, offset: u64, length: u32) -> Sge {
    Sge {
        addr: mr.addr() + offset,
        length,
        lkey: mr.lkey(),
    }
}

fn ok(cq: &CompletionQueue, wr_id: u64) {
    let w = wait(cq);
    assert_eq!((w.wr_id, w.status), (wr_id, WcStatus::Success), "{w:?}");
}

#[test]
fn write_read_and_send_through_lent_regions_are_byte_exact() {
    let (a, pd_a) = end(1);
    let (b, pd_b) = end(2);
    connect_pair(&a, &b, Mtu::Mtu4096, 100, 14, 7);
    let (lent_a, log_a) = lend(&pd_a, pattern(7));
    let (lent_b, log_b) = lend(&pd_b, |_| 0);
    assert_eq!(lent_a.len(), LEN);

    // RDMA WRITE from a's lent region into b's, at an odd offset on both sides.
    let n = (LEN - 4096) as u32;
    a.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: lent_b.addr() + 13,
            rkey: lent_b.rkey(),
        },
        vec![sge(&lent_a, 5, n)],
    )])
    .unwrap();
    ok(&a.cq, 1);
    let (sa, sb) = (contents(&lent_a), contents(&lent_b));
    assert!(sb[..13].iter().all(|&x| x == 0));
    assert_eq!(sb[13..13 + n as usize], sa[5..5 + n as usize]);
    assert!(sb[13 + n as usize..].iter().all(|&x| x == 0));

    // RDMA READ from b's lent region into a's owned one.
    a.qp.post_send(&[SendWr::new(
        2,
        WrOpcode::RdmaRead {
            remote_addr: lent_b.addr(),
            rkey: lent_b.rkey(),
        },
        vec![sge(&a.mr, 0, LEN as u32)],
    )])
    .unwrap();
    ok(&a.cq, 2);
    assert_eq!(contents(&a.mr), sb);

    // SEND from a's lent region into a receive posted on b's lent region (two SGEs).
    lent_b.with(|m| m.fill(0));
    b.qp.post_recv(&[RecvWr {
        wr_id: 3,
        sg_list: vec![
            sge(&lent_b, 0, 1000),
            sge(&lent_b, 4096, (LEN - 4096) as u32),
        ],
    }])
    .unwrap();
    let m = (LEN - 3096) as u32;
    a.qp.post_send(&[SendWr::new(4, WrOpcode::Send, vec![sge(&lent_a, 0, m)])])
        .unwrap();
    ok(&a.cq, 4);
    let w = wait(&b.cq);
    assert_eq!((w.wr_id, w.status, w.byte_len), (3, WcStatus::Success, m));
    let sb = contents(&lent_b);
    assert_eq!(sb[..1000], sa[..1000]);
    assert!(sb[1000..4096].iter().all(|&x| x == 0));
    assert_eq!(sb[4096..4096 + m as usize - 1000], sa[1000..m as usize]);

    for (what, log) in [("a", &log_a), ("b", &log_b)] {
        let largest = log.largest.load(Ordering::Relaxed);
        let count = log.accesses.load(Ordering::Relaxed);
        println!("lent region of {what}: {count} accesses, the largest {largest} bytes");
        assert!(!log.out_of_bounds.load(Ordering::Relaxed), "{what}");
        assert!(count > 2, "{what}: the transfers reached the lent memory");
    }
    // The transfers (not the test's whole-region reads) reach the memory in pieces.
    assert!(log_b.accesses.load(Ordering::Relaxed) > 10);
}

#[test]
fn out_of_bounds_and_bad_registrations_are_refused() {
    let (a, pd_a) = end(3);
    let (b, pd_b) = end(4);
    connect_pair(&a, &b, Mtu::Mtu1024, 100, 14, 7);
    let (lent_b, log_b) = lend(&pd_b, |_| 0x5a);
    let before = log_b.accesses.load(Ordering::Relaxed);
    // A WRITE that runs one byte past the lent region's end.
    a.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: lent_b.addr() + LEN as u64 - 100,
            rkey: lent_b.rkey(),
        },
        vec![sge(&a.mr, 0, 101)],
    )])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    assert_eq!(
        log_b.accesses.load(Ordering::Relaxed),
        before,
        "a refused WRITE never reaches the lent memory"
    );
    assert!(contents(&lent_b).iter().all(|&x| x == 0x5a));

    // Local access past the end.
    let e = lent_b.write(LEN - 1, &[1, 2]).unwrap_err().to_string();
    assert!(e.contains("exceeds the region"), "{e}");
    assert!(lent_b.read(LEN, &mut [0u8; 1]).is_err());
    assert!(lent_b.with_range(LEN - 1, 2, |_| ()).is_err());

    // REMOTE_WRITE without LOCAL_WRITE, as ibv_reg_mr refuses.
    let log = Arc::new(Log::default());
    let e = pd_a
        .register_lent(
            Box::new(Lent {
                bytes: vec![0; 16].into_boxed_slice(),
                log,
            }),
            AccessFlags::REMOTE_WRITE,
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("require LOCAL_WRITE"), "{e}");
}

#[test]
fn the_last_handle_ends_the_loan_and_the_rkey_dies() {
    let (a, _pd_a) = end(5);
    let (b, pd_b) = end(6);
    connect_pair(&a, &b, Mtu::Mtu1024, 100, 14, 7);
    let (lent_b, log_b) = lend(&pd_b, |_| 0);
    let (rkey, addr) = (lent_b.rkey(), lent_b.addr());
    let other = lent_b.clone();
    drop(lent_b);
    assert!(
        !log_b.ended.load(Ordering::Relaxed),
        "a handle is left: still registered"
    );
    other.write(0, &[1]).unwrap();
    drop(other);
    assert!(
        log_b.ended.load(Ordering::Relaxed),
        "the provider dropped the lent memory"
    );
    let accesses = log_b.accesses.load(Ordering::Relaxed);
    a.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![sge(&a.mr, 0, 64)],
    )])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (1, WcStatus::RemAccessErr));
    assert_eq!(log_b.accesses.load(Ordering::Relaxed), accesses);
    drop(b);
}

/// A zero-length loan registers and answers zero-length accesses without reaching the memory.
#[test]
fn an_empty_loan() {
    let (_a, pd) = end(7);
    let log = Arc::new(Log::default());
    let mr = pd
        .register_lent(
            Box::new(Lent {
                bytes: Box::new([]),
                log: log.clone(),
            }),
            AccessFlags::ALL,
        )
        .unwrap();
    assert!(mr.is_empty());
    mr.write(0, &[]).unwrap();
    assert_eq!(mr.with(|b| b.len()), 0);
    assert_eq!(log.accesses.load(Ordering::Relaxed), 0);
}

/// One lent region in the PDs of two devices: the QPs of both find it by the same keys, and
/// dropping it removes it from both.
#[test]
fn one_lent_region_on_two_devices() {
    let (a, pd_a) = end(8);
    let (b, pd_b) = end(9);
    connect_pair(&a, &b, Mtu::Mtu4096, 100, 14, 7);
    let log = Arc::new(Log::default());
    let shared = ProtectionDomain::register_lent_on(
        &[&pd_a, &pd_b, &pd_a],
        Box::new(Lent {
            bytes: (0..LEN).map(pattern(3)).collect(),
            log: log.clone(),
        }),
        AccessFlags::ALL,
    )
    .unwrap();
    let before = contents(&shared);
    // b gathers from it (lkey in b's PD) into a's region.
    b.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: a.mr.addr(),
            rkey: a.mr.rkey(),
        },
        vec![sge(&shared, 0, LEN as u32)],
    )])
    .unwrap();
    ok(&b.cq, 1);
    assert_eq!(contents(&a.mr), before);
    // b writes into it through a's QP (rkey in a's PD).
    b.mr.with(|m| m.fill(0x77));
    b.qp.post_send(&[SendWr::new(
        2,
        WrOpcode::RdmaWrite {
            remote_addr: shared.addr() + 100,
            rkey: shared.rkey(),
        },
        vec![sge(&b.mr, 0, 5000)],
    )])
    .unwrap();
    ok(&b.cq, 2);
    let after = contents(&shared);
    assert!(after[100..5100].iter().all(|&x| x == 0x77));
    assert_eq!(after[..100], before[..100]);
    assert_eq!(after[5100..], before[5100..]);
    let (rkey, addr) = (shared.rkey(), shared.addr());
    drop(shared);
    assert!(log.ended.load(Ordering::Relaxed));
    // a's WRITE resolves the rkey in b's PD: gone there (and the loan ended, so in a's too).
    a.qp.post_send(&[SendWr::new(
        3,
        WrOpcode::RdmaWrite {
            remote_addr: addr,
            rkey,
        },
        vec![sge(&a.mr, 0, 64)],
    )])
    .unwrap();
    let w = wait(&a.cq);
    assert_eq!((w.wr_id, w.status), (3, WcStatus::RemAccessErr), "{w:?}");
}
