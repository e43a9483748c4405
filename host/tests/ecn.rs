//! ECN and DCQCN through the soft provider on loopback: the sender marks its packets ECT(0),
//! the receiver's impairment layer turns a share of the ECN-capable packets it receives into
//! CE (as a congested switch would), the receiver's notification point answers with CNPs, the
//! sender receives them and its DCQCN reaction point cuts the rate. A control run without CE
//! marks sends no CNP and keeps the line rate. All data still arrives intact.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use rdmesh_core::cc::DcqcnConfig;
use rdmesh_host::soft::Impairment;
use rdmesh_host::verbs::*;

mod common;
use common::*;

const LINE_RATE_MBPS: u64 = 10_000;

fn end(n: u8, impair: Option<Impairment>, dcqcn: bool) -> End {
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        impair,
        dcqcn: dcqcn.then(|| DcqcnConfig {
            line_rate_mbps: LINE_RATE_MBPS,
            ..Default::default()
        }),
        ..SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 11, n)))
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(4 << 20, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    to_init(&qp, AccessFlags::ALL);
    End { dev, cq, qp, mr }
}

fn connect(a: &End, b: &End) {
    connect_pair(a, b, Mtu::Mtu4096, 100, 14, 7);
}

/// Writes `count` messages of 64 KiB from `a` into `b` and checks the bytes.
fn write_all(a: &End, b: &End, count: u64) {
    let size = 64u64 << 10;
    a.mr.with(|m| {
        for (i, x) in m.iter_mut().enumerate() {
            *x = (i * 7 + 3) as u8;
        }
    });
    let mut posted = 0;
    let mut done = 0;
    while done < count {
        while posted < count && posted - done < 32 {
            let off = (posted % 64) * size;
            a.qp.post_send(&[SendWr::new(
                posted,
                WrOpcode::RdmaWrite {
                    remote_addr: b.mr.addr() + off,
                    rkey: b.mr.rkey(),
                },
                vec![Sge {
                    addr: a.mr.addr() + off,
                    length: size as u32,
                    lkey: a.mr.lkey(),
                }],
            )])
            .unwrap();
            posted += 1;
        }
        let w =
            a.cq.wait_one(Duration::from_secs(20))
                .expect("a completion within 20 s");
        assert_eq!((w.wr_id, w.status), (done, WcStatus::Success));
        done += 1;
    }
    let n = (count.min(64) * size) as usize;
    let src = a.mr.with(|m| m[..n].to_vec());
    assert!(b.mr.with(|m| m[..n] == src[..]), "written bytes differ");
}

#[test]
fn ce_marks_make_cnps_and_the_sender_slows_down() {
    let ce: Impairment = "ce=20%,seed=5".parse().unwrap();
    let a = end(1, None, true);
    let b = end(2, Some(ce), false);
    connect(&a, &b);
    let t = Instant::now();
    write_all(&a, &b, 200);
    let elapsed = t.elapsed();
    let (rq, rd) = (b.qp.counters(), b.dev.counters());
    // Every CNP the receiver sent reaches the sender (loopback; CNPs are not impaired).
    let deadline = Instant::now() + Duration::from_secs(5);
    while a.dev.counters().cnp_received < rq.cnps_sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (sq, sd) = (a.qp.counters(), a.dev.counters());
    let min_rate = sq.lowest_rate_mbps;
    println!(
        "CE run: {:.2} s; receiver: ce_marked {} ce_marks_received {} cnps_sent {}; sender: device cnp_received {} qp cnps_received {} rate_decreases {} lowest rate {} Mb/s, final rate {} Mb/s",
        elapsed.as_secs_f64(),
        rd.impair.ce_marked,
        rq.ce_marks_received,
        rq.cnps_sent,
        sd.cnp_received,
        sq.cnps_received,
        sq.rate_decreases,
        min_rate,
        sq.current_rate_mbps
    );
    // CE marks only land on ECN-capable packets: marks prove the sender sent ECT.
    assert!(rd.impair.ce_marked > 0);
    // Every mark on a data packet reached the notification point.
    assert_eq!(rq.ce_marks_received, rd.impair.ce_marked);
    // At most one CNP per mark, at least one.
    assert!(rq.cnps_sent > 0 && rq.cnps_sent <= rq.ce_marks_received);
    assert_eq!(sd.cnp_received, rq.cnps_sent);
    assert_eq!(sq.cnps_received, rq.cnps_sent);
    assert!(sq.rate_decreases > 0);
    // The rate fell well below the line rate during the run (it recovers between CNPs).
    assert!(
        min_rate > 0 && min_rate < LINE_RATE_MBPS * 9 / 10,
        "lowest rate {min_rate} Mb/s after {} CNPs",
        sq.cnps_received
    );
    // The receiver's own QP got no CNPs and did not slow down.
    assert_eq!(rq.cnps_received, 0);
}

#[test]
fn without_ce_marks_there_are_no_cnps_and_the_rate_stays() {
    let a = end(3, None, true);
    let b = end(4, None, false);
    connect(&a, &b);
    write_all(&a, &b, 100);
    let (sq, sd, rq) = (a.qp.counters(), a.dev.counters(), b.qp.counters());
    assert_eq!(sq.lowest_rate_mbps, LINE_RATE_MBPS);
    println!(
        "control run: cnps_sent {} cnp_received {} rate {} Mb/s",
        rq.cnps_sent, sd.cnp_received, sq.current_rate_mbps
    );
    assert_eq!(rq.ce_marks_received, 0);
    assert_eq!(rq.cnps_sent, 0);
    assert_eq!(sd.cnp_received, 0);
    assert_eq!(sq.rate_decreases, 0);
    assert_eq!(sq.current_rate_mbps, LINE_RATE_MBPS);
}
