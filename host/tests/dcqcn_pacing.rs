//! The DCQCN pacer of the soft provider delivers its rate: with DCQCN enabled and no congestion
//! (no CE marks, so no CNPs and no rate cut), a loopback RDMA WRITE stream runs at about the
//! configured line rate — not above it (the pacer limits), and not far below it.
//!
//! Regression: the progress thread used to wait for the pacer only through the socket's
//! SO_RCVTIMEO, which the kernel counts in jiffies (4 ms at HZ=250, so 4–8 ms per wait), and
//! sent one bucket (line rate × 100 µs, at least two packets) per wake-up: 200 Mb/s came out
//! as about 8 Mb/s. The bounds are generous (20 % and 110 % of the line rate) so that a loaded
//! machine does not fail them — a 2-core VM compiling beside the test measured 64.5 Mb/s once,
//! a quiet one 197–199 — while the bug stays five times below the lower one.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use rdmesh_core::cc::DcqcnConfig;
use rdmesh_host::verbs::*;

mod common;
use common::*;

const LINE_RATE_MBPS: u64 = 200;
/// 64 KiB RDMA WRITEs.
const MSG_BYTES: u64 = 64 << 10;
/// 600 · 64 KiB = 39.3 MB: 1.57 s at 200 Mb/s.
const MESSAGES: u64 = 600;

fn end(n: u8, dcqcn: bool) -> End {
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        dcqcn: dcqcn.then(|| DcqcnConfig {
            line_rate_mbps: LINE_RATE_MBPS,
            ..Default::default()
        }),
        ..SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 31, n)))
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(4 << 20, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    to_init(&qp, AccessFlags::ALL);
    End { dev, cq, qp, mr }
}

#[test]
fn paced_write_stream_reaches_the_line_rate_without_timeouts() {
    let a = end(1, true);
    let b = end(2, false);
    // Local ACK timeout 16: 4.096 µs · 2^16 = 268 ms; 7 retries.
    connect_pair(&a, &b, Mtu::Mtu4096, 100, 16, 7);
    a.mr.with(|m| {
        for (i, x) in m.iter_mut().enumerate() {
            *x = (i * 13 + 5) as u8;
        }
    });
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    while done < MESSAGES {
        while posted < MESSAGES && posted - done < 32 {
            let off = (posted % 64) * MSG_BYTES;
            a.qp.post_send(&[SendWr::new(
                posted,
                WrOpcode::RdmaWrite {
                    remote_addr: b.mr.addr() + off,
                    rkey: b.mr.rkey(),
                },
                vec![Sge {
                    addr: a.mr.addr() + off,
                    length: MSG_BYTES as u32,
                    lkey: a.mr.lkey(),
                }],
            )])
            .unwrap();
            posted += 1;
        }
        let w =
            a.cq.wait_one(Duration::from_secs(60))
                .expect("a completion within 60 s");
        assert_eq!((w.wr_id, w.status), (done, WcStatus::Success));
        done += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let goodput_mbps = (MESSAGES * MSG_BYTES * 8) as f64 / secs / 1e6;
    let sq = a.qp.counters();
    println!(
        "{MESSAGES} × 64 KiB in {secs:.3} s: goodput {goodput_mbps:.1} Mb/s at line rate {LINE_RATE_MBPS} Mb/s; timeouts {} retransmitted {} rate {} Mb/s",
        sq.timeouts, sq.retransmitted_packets, sq.current_rate_mbps
    );
    let n = (64 * MSG_BYTES) as usize;
    let src = a.mr.with(|m| m[..n].to_vec());
    assert!(b.mr.with(|m| m[..n] == src[..]), "written bytes differ");
    // No congestion: the rate never moved.
    assert_eq!(sq.rate_decreases, 0);
    assert_eq!(sq.lowest_rate_mbps, LINE_RATE_MBPS);
    // Goodput counts payload only (headers add under 1 % at 4096-byte packets).
    assert!(
        goodput_mbps >= LINE_RATE_MBPS as f64 * 0.2,
        "goodput {goodput_mbps:.1} Mb/s is below a fifth of the DCQCN line rate {LINE_RATE_MBPS} Mb/s: the pacer is not woken at its send times"
    );
    assert!(
        goodput_mbps <= LINE_RATE_MBPS as f64 * 1.1,
        "goodput {goodput_mbps:.1} Mb/s exceeds the DCQCN line rate {LINE_RATE_MBPS} Mb/s: the pacer does not limit"
    );
    // Packets queued behind the pacer do not count against the retransmit timer.
    assert_eq!(sq.timeouts, 0, "spurious retransmit timeouts");
    assert_eq!(sq.retransmitted_packets, 0);
}
