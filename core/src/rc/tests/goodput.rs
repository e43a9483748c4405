//! Goodput of the recovery modes in virtual time: two QPs joined by a link with a finite rate
//! and a delay, random loss in both directions, a requester that keeps its send queue full
//! (as `rdmesh bench` does) and a responder whose receive WQEs are reposted as they complete.
//! What it measures is the protocol alone — no host threads, syscalls or scheduler — so it
//! shows whether a recovery mode keeps the line busy, for WRITE, SEND and READ. A host thread
//! that sleeps when its queue runs dry is modelled by `wake_ns`: a packet put on an idle link
//! waits that long first.
//!
//! The table in docs/reliability.md ("Virtual time"): `cargo test --release -p rdmesh-core
//! --lib goodput_table -- --ignored --nocapture`, with `SIM_DELAY`, `SIM_WAKE` (ns),
//! `SIM_RATE` (bytes/µs), `SIM_INFLIGHT`, `SIM_STALL` / `SIM_STALL_EVERY` (ns: host stalls of
//! that length, that often on average) to change the link, and `SIM_READ_EVERY` (every n-th
//! message a READ) to mix READs into the queue, `SIM_RD` (READs the requester keeps
//! outstanding, `max_rd_atomic`, default 16) and `SIM_OPS` (`read`, `write`, `send`, `imm`,
//! comma-separated: the operations of the table, default all).

use std::collections::VecDeque;

use super::*;

const KEY_A: u32 = 0xa1;
const KEY_B: u32 = 0xb1;
const BASE_A: u64 = 0x10_0000;
const BASE_B: u64 = 0x9000_0000;

/// What one simulated run does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Link {
    /// Operation: `SendOpcode::RdmaWrite`, `Send`, `RdmaRead` or `RdmaWriteWithImm`.
    pub(crate) op: SendOpcode,
    /// Message size in bytes.
    pub(crate) size: u32,
    /// Loss probability per packet, in parts per million, each direction.
    pub(crate) loss_ppm: u32,
    /// Link rate in bytes per microsecond (both directions).
    pub(crate) bytes_per_us: u64,
    /// One-way delay, ns.
    pub(crate) delay_ns: u64,
    /// Extra delay of a packet put on an idle link (a host thread waking up), ns.
    pub(crate) wake_ns: u64,
    /// Send WQEs kept posted.
    pub(crate) depth: usize,
    /// Receive WQEs kept posted at the responder.
    pub(crate) rx_depth: usize,
    /// How long the run lasts, ns of virtual time.
    pub(crate) duration_ns: u64,
    /// Host stalls: each side's host stops (no receive, send or timer) for this long, ns
    /// (0: never) — a thread descheduled on a loaded machine...
    pub(crate) stall_ns: u64,
    /// ... on average this often (uniformly 0..2× apart), ns.
    pub(crate) stall_every_ns: u64,
    pub(crate) seed: u64,
}

/// Result of a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Goodput {
    /// MB/s of messages completed at the requester, in virtual time.
    pub(crate) mbps: f64,
    /// Packets the link dropped (both directions).
    pub(crate) lost: u64,
    /// The requester's counters.
    pub(crate) counters_a: RcCounters,
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Runs `link` with `recovery` on both QPs.
pub(crate) fn run(recovery: Recovery, link: Link) -> Goodput {
    let slots = link.depth.max(link.rx_depth) as u64;
    let stride = u64::from(link.size);
    let mut p = Pair::with_recovery(
        recovery,
        RtrConfig {
            min_rnr_timer: 12,
            max_dest_rd_atomic: 16,
            ..rtr(QPN_A, QPN_B, Mtu::Mtu4096, 500)
        },
        RtsConfig {
            timeout: 14,
            max_rd_atomic: env("SIM_RD", 16) as u8,
            ..rts(100)
        },
        RtrConfig {
            min_rnr_timer: 12,
            max_dest_rd_atomic: 16,
            ..rtr(QPN_B, QPN_A, Mtu::Mtu4096, 100)
        },
        RtsConfig {
            timeout: 14,
            max_rd_atomic: 16,
            ..rts(500)
        },
    );
    let mi = env("SIM_INFLIGHT", 128) as u32;
    p.a.set_max_inflight(mi);
    p.b.set_max_inflight(mi);
    let len = (slots * stride) as usize;
    p.mem_a.add(KEY_A, BASE_A, len, Access::ALL, |_| 1);
    p.mem_b.add(KEY_B, BASE_B, len, Access::ALL, |_| 2);
    let mut rng = Rng(link.seed.wrapping_mul(0x2545_f491_4f6c_dd1d) ^ 0x1234_5678);
    let mut posted = 0u64;
    let mut completed = 0u64;
    let mut recv_posted = 0u64;
    let mut lost = 0u64;
    // Per direction (0: A→B, 1: B→A): when the link is free again, packets in flight with
    // their arrival time.
    let mut free_at = [p.now.0; 2];
    let mut wire: [VecDeque<(u64, Vec<u8>)>; 2] = [VecDeque::new(), VecDeque::new()];
    let end = p.now.0 + link.duration_ns;
    // Per side (0: A, 1: B): stalled until, next stall at.
    let mut stall_until = [0u64; 2];
    let mut next_stall = [u64::MAX; 2];
    // Its own generator: both modes see the same stalls.
    let mut stall_rng = Rng(link.seed ^ 0x5a11);
    if link.stall_ns > 0 {
        for n in next_stall.iter_mut() {
            *n = p.now.0 + stall_rng.next() % (2 * link.stall_every_ns).max(1);
        }
    }
    let mut buf = [0u8; 4096 + 64];
    while p.now.0 < end {
        // The applications: keep the send queue full, repost receives.
        while posted - completed < link.depth as u64 {
            let slot = posted % slots;
            let local = sge(BASE_A + slot * stride, link.size, KEY_A);
            // `SIM_READ_EVERY` = n: every n-th message is a READ (a mixed queue: WRITEs
            // behind an outstanding READ are not split).
            let op = match env("SIM_READ_EVERY", 0) {
                n if n > 0 && posted % n == 0 => SendOpcode::RdmaRead,
                _ => link.op,
            };
            p.a.post_send(send_wqe(
                posted,
                op,
                &[local],
                BASE_B + slot * stride,
                KEY_B,
            ))
            .unwrap();
            posted += 1;
        }
        for wc in p.send_completions(Dir::AtoB) {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            assert_eq!(wc.wr_id, completed, "in order");
            completed += 1;
        }
        let _ = p.recv_completions(Dir::BtoA);
        let consumes_recv = matches!(link.op, SendOpcode::Send | SendOpcode::RdmaWriteWithImm);
        while consumes_recv && (p.b.recv_queue_len() as u64) < link.rx_depth as u64 {
            let slot = recv_posted % slots;
            p.b.post_recv(recv_wqe(
                recv_posted,
                &[sge(BASE_B + slot * stride, link.size, KEY_B)],
            ))
            .unwrap();
            recv_posted += 1;
        }
        // Senders put packets on idle links.
        let now = p.now.0;
        for side in 0..2 {
            if now >= next_stall[side] {
                stall_until[side] = now + link.stall_ns;
                next_stall[side] =
                    stall_until[side] + stall_rng.next() % (2 * link.stall_every_ns).max(1);
            }
        }
        for d in 0..2 {
            while free_at[d] <= now && now >= stall_until[d] {
                let (qp, mem) = if d == 0 {
                    (&mut p.a, &mut p.mem_a)
                } else {
                    (&mut p.b, &mut p.mem_b)
                };
                let cap = qp.max_packet_len();
                let Some(n) = qp.poll_transmit(p.now, mem, &mut buf[..cap]) else {
                    break;
                };
                // 58 bytes of Ethernet/IP/UDP/ICRC around every packet.
                let t = (n as u64 + 58) * 1000 / link.bytes_per_us;
                free_at[d] = if free_at[d] < now {
                    now + link.wake_ns + t
                } else {
                    free_at[d] + t
                };
                if rng.next() % 1_000_000 < u64::from(link.loss_ppm) {
                    lost += 1;
                } else {
                    wire[d].push_back((free_at[d] + link.delay_ns, buf[..n].to_vec()));
                }
            }
        }
        // Next event.
        let mut next = u64::MAX;
        for d in 0..2 {
            if let Some((t, _)) = wire[d].front() {
                // Delivered once the receiving host runs (A→B: B, side 1).
                next = next.min((*t).max(stall_until[1 - d]));
            }
            if free_at[d] > now {
                next = next.min(free_at[d]);
            }
        }
        for (side, dl) in [p.a.next_deadline(), p.b.next_deadline()]
            .into_iter()
            .enumerate()
        {
            if let Some(dl) = dl {
                next = next.min(dl.0.max(now).max(stall_until[side]));
            }
        }
        for side in 0..2 {
            if stall_until[side] > now {
                next = next.min(stall_until[side]);
            }
            next = next.min(next_stall[side].max(now));
        }
        if next == u64::MAX {
            panic!("nothing left to happen at {now}");
        }
        p.now = Instant(next.max(now));
        // A→B packets reach B (side 1), B→A packets A (side 0), unless that host stalls.
        for ((q, dir), to) in wire.iter_mut().zip([Dir::AtoB, Dir::BtoA]).zip([1, 0]) {
            while p.now.0 >= stall_until[to] && q.front().is_some_and(|(t, _)| *t <= p.now.0) {
                let (_, pkt) = q.pop_front().unwrap();
                p.deliver(dir, &pkt);
            }
        }
        if p.now.0 >= stall_until[0] {
            p.a.handle_timeout(p.now);
        }
        if p.now.0 >= stall_until[1] {
            p.b.handle_timeout(p.now);
        }
    }
    let bytes = completed * u64::from(link.size);
    Goodput {
        mbps: bytes as f64 * 1000.0 / link.duration_ns as f64,
        lost,
        counters_a: *p.a.counters(),
    }
}

fn env(k: &str, d: u64) -> u64 {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

fn link(op: SendOpcode, loss_ppm: u32, seed: u64) -> Link {
    Link {
        op,
        size: 65536,
        loss_ppm,
        // 10 Gb/s, 20 µs each way: a bandwidth-delay product of ~12 packets.
        bytes_per_us: env("SIM_RATE", 1250),
        delay_ns: env("SIM_DELAY", 20_000),
        wake_ns: env("SIM_WAKE", 0),
        depth: 32,
        rx_depth: 32,
        duration_ns: 200_000_000,
        stall_ns: env("SIM_STALL", 0),
        stall_every_ns: env("SIM_STALL_EVERY", 20_000_000),
        seed,
    }
}

/// The table behind docs/reliability.md's simulated goodput: `cargo test -p rdmesh-core
/// --lib goodput_table -- --ignored --nocapture`.
#[test]
#[ignore]
fn goodput_table() {
    let ops = std::env::var("SIM_OPS").unwrap_or_else(|_| "write,send,read,imm".into());
    for op in [
        SendOpcode::RdmaWrite,
        SendOpcode::Send,
        SendOpcode::RdmaRead,
        SendOpcode::RdmaWriteWithImm,
    ] {
        let name = match op {
            SendOpcode::RdmaWrite => "write",
            SendOpcode::Send => "send",
            SendOpcode::RdmaRead => "read",
            _ => "imm",
        };
        if !ops.split(',').any(|o| o == name) {
            continue;
        }
        let base = run(Recovery::Selective, link(op, 0, 1)).mbps;
        let base_gbn = run(Recovery::GoBackN, link(op, 0, 1)).mbps;
        std::println!("{op:?} loss-free: selective {base:.0} go-back-N {base_gbn:.0} MB/s");
        for ppm in [1_000, 10_000, 50_000] {
            for rec in [Recovery::GoBackN, Recovery::Selective] {
                let r = run(rec, link(op, ppm, 1));
                let c = r.counters_a;
                std::println!(
                    "  {op:?} {:.1}% {rec:?}: {:.0} MB/s ({:.2}x) lost {} retx {} timeouts {} fast {} rnr {}",
                    ppm as f64 / 10_000.0,
                    r.mbps,
                    r.mbps / base,
                    r.lost,
                    c.retransmitted_packets,
                    c.timeouts,
                    c.fast_retransmits,
                    c.naks_received.rnr,
                );
            }
        }
    }
}

/// Selective repeat keeps the line busy at 1 % loss for WRITE, SEND and READ — with and without
/// hosts that sleep when idle — and loses nothing when nothing is lost.
#[test]
fn selective_repeat_keeps_the_line_busy() {
    for wake_ns in [0, 200_000] {
        for op in [
            SendOpcode::RdmaWrite,
            SendOpcode::Send,
            SendOpcode::RdmaRead,
        ] {
            let l = |loss_ppm| Link {
                wake_ns,
                duration_ns: 50_000_000,
                ..link(op, loss_ppm, 3)
            };
            let free = run(Recovery::Selective, l(0)).mbps;
            let free_gbn = run(Recovery::GoBackN, l(0)).mbps;
            let sr = run(Recovery::Selective, l(10_000));
            let gbn = run(Recovery::GoBackN, l(10_000)).mbps;
            let what = std::format!(
                "{op:?}, wake {wake_ns} ns: loss-free {free:.0} (go-back-N {free_gbn:.0}), 1 %: selective {:.0}, go-back-N {gbn:.0} MB/s",
                sr.mbps
            );
            std::println!("{what}");
            assert!(free >= 0.99 * free_gbn, "{what}");
            assert!(sr.mbps >= 0.9 * free, "{what}");
            assert!(sr.mbps >= gbn, "{what}");
            let c = sr.counters_a;
            assert!(c.retransmitted_packets <= sr.lost, "{what}: {c:?}");
        }
    }
}
