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
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(4 << 20, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(1024).unwrap();
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

// ------------------------------------------------------------------ peer process killed
//
// The peer runs in another process (this test binary re-run with ROLE_ENV=peer) and is
// killed with SIGKILL mid-transfer. The measuring side also runs in a process of its own
// (ROLE_ENV=requester, only this test), so that the file descriptors, threads and memory it
// counts are its own: after the failure and after every object is dropped, the process has
// the descriptors and threads it had before the device was opened (the UDP socket closed, the
// progress thread gone), the registered memory is returned (VmRSS), and the UDP address can
// be bound again.

const ROLE_ENV: &str = "RDMESH_DEAD_PEER_ROLE";
const KILL_TEST: &str = "dead_peer_process_killed_releases_everything";

fn proc_count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

fn vm_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// The peer: prints `PEER <port> <qpn> <addr> <rkey>`, reads `<port> <qpn>` of the requester,
/// connects, prints `READY`, then waits to be killed (or for stdin to close).
fn peer_main() {
    use std::io::{BufRead, Write};
    let dev = Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 12, 21)))
    })
    .unwrap();
    let pd = dev.alloc_pd().unwrap();
    let mr = pd.register(4 << 20, AccessFlags::ALL).unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    to_init(&qp, AccessFlags::ALL);
    println!(
        "PEER {} {} {} {}",
        dev.local_addr().port(),
        qp.qp_num(),
        mr.addr(),
        mr.rkey()
    );
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    let w: Vec<u32> = line
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    let me = End { dev, cq, qp, mr };
    let mut attr = rtr_attr(&me, Mtu::Mtu4096, 7);
    attr.ah_attr = Some(AhAttr {
        dgid: IpAddr::V4(Ipv4Addr::new(127, 0, 12, 20)),
        udp_port: w[0] as u16,
    });
    attr.dest_qp_num = Some(w[1]);
    me.qp.modify(&attr).unwrap();
    me.qp.modify(&rts_attr(7, TIMEOUT_CODE, RETRY_CNT)).unwrap();
    println!("READY");
    std::io::stdout().flush().unwrap();
    // Serve until killed; should the requester die first, its end of stdin closes: exit then.
    let mut rest = String::new();
    while std::io::stdin().lock().read_line(&mut rest).unwrap_or(0) > 0 {}
    drop(me);
    std::process::exit(0);
}

fn requester_main() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let mut peer = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", KILL_TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE_ENV, "peer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut peer_in = peer.stdin.take().unwrap();
    let mut peer_out = BufReader::new(peer.stdout.take().unwrap());
    let mut expect = |prefix: &str| -> String {
        let mut l = String::new();
        loop {
            l.clear();
            assert!(peer_out.read_line(&mut l).unwrap() > 0, "the peer exited");
            // libtest may print "test NAME ... " before the peer's first line.
            if let Some(at) = l.find(prefix) {
                return l[at..].trim().to_string();
            }
        }
    };
    let info: Vec<u64> = expect("PEER ")
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    // Baseline: the descriptors (pipes to the peer included), threads and memory before the
    // device exists.
    let (fds0, threads0, rss0) = (
        proc_count("/proc/self/fd"),
        proc_count("/proc/self/task"),
        vm_rss_kib(),
    );
    let local;
    {
        let dev = Device::open_soft(SoftConfig {
            udp_port: 0,
            ..SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 12, 20)))
        })
        .unwrap();
        local = dev.local_addr();
        let pd = dev.alloc_pd().unwrap();
        let mr = pd.register(64 << 20, AccessFlags::ALL).unwrap();
        mr.with(|m| m.fill(0x3c));
        let cq = dev.create_cq(1024).unwrap();
        let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
        to_init(&qp, AccessFlags::ALL);
        let (fds1, threads1, rss1) = (
            proc_count("/proc/self/fd"),
            proc_count("/proc/self/task"),
            vm_rss_kib(),
        );
        assert!(
            fds1 > fds0 && threads1 > threads0,
            "the device holds a socket and a thread"
        );
        assert!(rss1 >= rss0 + 60 * 1024, "the 64 MiB region is resident");
        writeln!(peer_in, "{} {}", local.port(), qp.qp_num()).unwrap();
        let mut attr = QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AhAttr {
                dgid: IpAddr::V4(Ipv4Addr::new(127, 0, 12, 21)),
                udp_port: info[0] as u16,
            }),
            dest_qp_num: Some(info[1] as u32),
            ..QpAttr::default()
        };
        let template = End { dev, cq, qp, mr };
        let r = rtr_attr(&template, Mtu::Mtu4096, 7);
        attr.path_mtu = r.path_mtu;
        attr.rq_psn = r.rq_psn;
        attr.max_dest_rd_atomic = r.max_dest_rd_atomic;
        attr.min_rnr_timer = r.min_rnr_timer;
        let a = template;
        a.qp.modify(&attr).unwrap();
        a.qp.modify(&rts_attr(7, TIMEOUT_CODE, RETRY_CNT)).unwrap();
        expect("READY");
        let size = 64u32 << 10;
        let wrs: Vec<SendWr> = (0..64u64)
            .map(|i| {
                SendWr::new(
                    i,
                    WrOpcode::RdmaWrite {
                        remote_addr: info[2] + (i % 32) * u64::from(size),
                        rkey: info[3] as u32,
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
        let first =
            a.cq.wait_one(Duration::from_secs(10))
                .expect("first completion");
        assert_eq!((first.wr_id, first.status), (0, WcStatus::Success));
        peer.kill().unwrap();
        let killed = Instant::now();
        peer.wait().unwrap();
        let limit = Duration::from_nanos(
            (1.5 * 4096.0 * f64::from(1u32 << TIMEOUT_CODE) * f64::from(RETRY_CNT + 1)) as u64,
        );
        let mut statuses = Vec::new();
        for next in 1..64u64 {
            let w = a.cq.wait_one(limit * 4).unwrap_or_else(|| {
                panic!("WR {next} never completed after the peer process was killed (hang)")
            });
            assert_eq!(w.wr_id, next, "completions in order");
            statuses.push(w.status);
        }
        let took = killed.elapsed();
        let failed_at = statuses
            .iter()
            .position(|s| *s != WcStatus::Success)
            .expect("the killed peer must fail some WR");
        assert_eq!(statuses[failed_at], WcStatus::RetryExcErr);
        assert!(statuses[failed_at + 1..]
            .iter()
            .all(|s| *s == WcStatus::WrFlushErr));
        assert!(
            took <= limit,
            "{took:?} to fail every WR, more than {limit:?}"
        );
        println!(
            "peer process killed: {failed_at} WRs succeeded after the kill, then RETRY_EXC_ERR and {} WR_FLUSH_ERR, all within {:.1} ms (limit {:.1} ms); before: {fds0} fds, {threads0} threads, VmRSS {rss0} KiB; with the device: {fds1} fds, {threads1} threads, VmRSS {rss1} KiB",
            63 - failed_at - 1,
            took.as_secs_f64() * 1e3,
            limit.as_secs_f64() * 1e3
        );
        assert_eq!(a.qp.state(), QpState::Err);
        // Everything dropped at the end of this block: QP, CQ, MR, PD, device.
    }
    // The progress thread notices within its receive timeout; allow 2 s on a loaded machine.
    let start = Instant::now();
    let (mut fds2, mut threads2, mut rss2);
    loop {
        fds2 = proc_count("/proc/self/fd");
        threads2 = proc_count("/proc/self/task");
        rss2 = vm_rss_kib();
        if (fds2 <= fds0 && threads2 <= threads0) || start.elapsed() > Duration::from_secs(2) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "after dropping everything: {fds2} fds, {threads2} threads, VmRSS {rss2} KiB (took {:.1} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );
    assert_eq!(fds2, fds0, "file descriptors leaked");
    assert_eq!(threads2, threads0, "the progress thread did not exit");
    assert!(rss2 < rss0 + 16 * 1024, "the 64 MiB region was not freed");
    std::net::UdpSocket::bind(local).expect("the device's UDP address can be bound again");
    drop(peer_in);
}

#[test]
fn dead_peer_process_killed_releases_everything() {
    match std::env::var(ROLE_ENV).as_deref() {
        Ok("peer") => peer_main(),
        Ok("requester") => requester_main(),
        _ => {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", KILL_TEST, "--nocapture", "--test-threads=1"])
                .env(ROLE_ENV, "requester")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            println!("{text}");
            assert!(
                out.status.success() && text.contains("after dropping everything"),
                "the requester process failed:\n{text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
