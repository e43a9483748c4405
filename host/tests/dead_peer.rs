//! A peer that disappears mid-transfer: every outstanding work request completes — the oldest
//! with RETRY_EXC_ERR, the rest with WR_FLUSH_ERR — within 1.5 × timeout × (retry_cnt + 1) of
//! the peer's end (IBTA vol. 1 §9.7.6.1.3; the retransmit timer is 4.096 µs · 2^timeout), and
//! nothing hangs. Under go-back-N and selective repeat.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use rdmesh_host::verbs::*;

mod common;
use common::*;

const TIMEOUT_CODE: u8 = 16; // 4.096 µs · 2^16 ≈ 268 ms: absolute slack against scheduling jitter
const RETRY_CNT: u8 = 3;

fn end(n: u8, recovery: Recovery) -> End {
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 12, n)))
    })
    .unwrap();
    let pd = dev.alloc_pd();
    let mr = pd.register(4 << 20, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(1024);
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    qp.set_recovery(recovery).unwrap();
    to_init(&qp, AccessFlags::ALL);
    End { dev, cq, qp, mr }
}

fn connect(a: &End, b: &End) {
    for (x, y) in [(a, b), (b, a)] {
        x.qp.modify(&rtr_attr(y, Mtu::Mtu4096, 7)).unwrap();
        // Too late once in RTR.
        assert!(x.qp.set_recovery(Recovery::GoBackN).is_err());
    }
    for x in [a, b] {
        x.qp.modify(&rts_attr(7, TIMEOUT_CODE, RETRY_CNT)).unwrap();
    }
}

fn peer_dies_mid_transfer(n: u8, recovery: Recovery) {
    let a = end(n, recovery);
    let b = end(n + 1, recovery);
    connect(&a, &b);
    let size = 64u32 << 10;
    let wrs: Vec<SendWr> = (0..64u64)
        .map(|i| {
            SendWr::new(
                i,
                WrOpcode::RdmaWrite {
                    remote_addr: b.mr.addr() + (i % 32) * u64::from(size),
                    rkey: b.mr.rkey(),
                },
                vec![Sge {
                    addr: a.mr.addr(),
                    length: size,
                    lkey: a.mr.lkey(),
                }],
            )
        })
        .collect();
    a.qp.post_send(&wrs).unwrap();
    // Let the transfer start, then the peer goes away (device, QP and socket closed).
    let first =
        a.cq.wait_one(Duration::from_secs(10))
            .expect("first completion");
    assert_eq!((first.wr_id, first.status), (0, WcStatus::Success));
    drop(b);
    let killed = Instant::now();
    let limit = Duration::from_nanos(
        (1.5 * 4096.0 * f64::from(1u32 << TIMEOUT_CODE) * f64::from(RETRY_CNT + 1)) as u64,
    );
    let mut statuses = Vec::new();
    let mut next = 1u64;
    let mut last = killed;
    while next < 64 {
        let w =
            a.cq.wait_one(limit * 4)
                .unwrap_or_else(|| panic!("{recovery:?}: WR {next} never completed (hang)"));
        assert_eq!(w.wr_id, next, "{recovery:?}: completions in order");
        statuses.push(w.status);
        last = Instant::now();
        next += 1;
    }
    let took = last - killed;
    let failed_at = statuses
        .iter()
        .position(|s| *s != WcStatus::Success)
        .expect("the dead peer must fail some WR");
    println!(
        "{recovery:?}: {} WRs succeeded after the kill, then {:?}; all done {:.1} ms after the kill (limit {:.1} ms); timeouts {}",
        failed_at,
        statuses[failed_at],
        took.as_secs_f64() * 1e3,
        limit.as_secs_f64() * 1e3,
        a.qp.counters().timeouts
    );
    assert_eq!(statuses[failed_at], WcStatus::RetryExcErr, "{recovery:?}");
    assert!(
        statuses[failed_at + 1..]
            .iter()
            .all(|s| *s == WcStatus::WrFlushErr),
        "{recovery:?}: {statuses:?}"
    );
    assert_eq!(a.qp.state(), QpState::Err);
    assert!(
        took <= limit,
        "{recovery:?}: {took:?} to fail every WR, more than {limit:?}"
    );
    // Later posts complete at once with WR_FLUSH_ERR.
    a.qp.post_send(&[SendWr::new(99, WrOpcode::Send, vec![])])
        .unwrap();
    let w = a.cq.wait_one(Duration::from_secs(1)).expect("flush");
    assert_eq!((w.wr_id, w.status), (99, WcStatus::WrFlushErr));
}

#[test]
fn dead_peer_go_back_n() {
    peer_dies_mid_transfer(1, Recovery::GoBackN);
}

#[test]
fn dead_peer_selective() {
    peer_dies_mid_transfer(3, Recovery::Selective);
}
