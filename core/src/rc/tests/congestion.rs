//! Congestion control through RcQp: CE marks → CNPs (at most one per interval, exact bytes on
//! the wire), CNPs → DCQCN rate cut → pacing of data packets, rate recovery on the timer, and
//! counters on both ends.

use super::*;
use crate::cc::{DcqcnConfig, NpConfig};
use crate::wire::{cnp, CnpRepr};

const KEY_A: u32 = 0xa5;
const KEY_B: u32 = 0xb5;
const BASE_A: u64 = 0x2_0000;
const BASE_B: u64 = 0x50_0000;

fn pair(len: usize) -> Pair {
    let mut p = Pair::new(Mtu::Mtu256, 100, 7000);
    p.mem_a.add(KEY_A, BASE_A, len, Access::ALL, pattern(2));
    p.mem_b.add(KEY_B, BASE_B, len, Access::ALL, |_| 0);
    p
}

fn write(p: &mut Pair, wr_id: u64, off: u64, len: u32) {
    p.a.post_send(send_wqe(
        wr_id,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A + off, len, KEY_A)],
        BASE_B + off,
        KEY_B,
    ))
    .unwrap();
}

/// 1 Gb/s line, timer-only increases.
fn cfg_1g() -> DcqcnConfig {
    DcqcnConfig {
        line_rate_mbps: 1_000,
        byte_reset: 0,
        ..DcqcnConfig::default()
    }
}

#[test]
fn ce_marks_make_one_cnp_per_interval() {
    let mut p = pair(4096);
    p.b.set_np_config(NpConfig {
        min_time_between_cnps_ns: 4_000,
    });
    write(&mut p, 1, 0, 2560);
    // ECT(0) is not a mark.
    p.ecn = 0b10;
    p.run();
    assert_eq!(p.b.counters().ce_marks_received, 0);
    assert!(!p.b.cnp_pending());
    // CE on everything delivered, all at the same instant: 10 marks at B, one CNP.
    write(&mut p, 2, 0, 2560);
    p.ecn = 0b11;
    p.run();
    assert_eq!(p.b.counters().ce_marks_received, 10);
    let mut buf = [0u8; 64];
    assert_eq!(
        p.b.poll_cnp(&mut buf[..27]),
        None,
        "buffer too small: stays pending"
    );
    let n = p.b.poll_cnp(&mut buf).unwrap();
    // IBTA Annex A17.9.3 / rocev2.md §1.6: opcode 0x81, BECN, DestQP = A, PSN 0, 16 zeros.
    let mut want = [0u8; 28];
    want[..12].copy_from_slice(&[0x81, 0, 0xff, 0xff, 0x40, 0, 0, QPN_A as u8, 0, 0, 0, 0]);
    assert_eq!(&buf[..n], &want);
    let c = CnpRepr::parse(&cnp::Packet::new_checked(&buf[..n]).unwrap()).unwrap();
    assert_eq!(c.dest_qp, QPN_A);
    assert_eq!(p.b.poll_cnp(&mut buf), None);
    assert_eq!(p.b.counters().cnps_sent, 1);
    // The ACKs A received were marked too: A's notification point answers B.
    assert!(p.a.counters().ce_marks_received >= 1);
    // 3.999 µs later: still inside the interval; at 4 µs: the next CNP.
    let t = p.now;
    write(&mut p, 3, 0, 256);
    p.now = t.add_nanos(3_999);
    p.run();
    assert!(!p.b.cnp_pending());
    write(&mut p, 4, 0, 256);
    p.now = t.add_nanos(4_000);
    p.run();
    assert!(p.b.cnp_pending());
}

#[test]
fn cnp_without_dcqcn_is_only_counted() {
    let mut p = pair(4096);
    p.ecn = 0b11;
    write(&mut p, 1, 0, 2560);
    let t0 = p.now;
    p.run();
    assert!(p.forward_cnp(Dir::AtoB));
    assert_eq!(p.b.counters().cnps_sent, 1);
    assert_eq!(p.a.counters().cnps_received, 1);
    assert_eq!(p.a.counters().current_rate_mbps, 0);
    assert!(p.a.dcqcn().is_none());
    write(&mut p, 2, 0, 4096);
    p.run();
    assert_eq!(p.now, t0, "nothing was paced");
}

#[test]
fn cnp_cuts_the_rate_and_the_pacer_spaces_packets() {
    let mut p = pair(64 * 256);
    let burst = p.a.max_packet_len() as u32;
    p.a.enable_dcqcn(p.now, cfg_1g(), burst);
    assert_eq!(p.a.counters().current_rate_mbps, 1_000);
    // A CE-marked packet at A → CNP from A → B... here: B marks, A reacts.
    p.ecn = 0b11;
    write(&mut p, 1, 0, 256);
    p.run();
    p.ecn = 0;
    assert!(p.forward_cnp(Dir::AtoB));
    // 1_000_000 kb/s − 1_000_000 · 1023 >> 11 (499_511) = 500_489 kb/s.
    let rate = 500_489u64;
    assert_eq!(p.a.dcqcn().unwrap().rate_kbps(), rate);
    assert_eq!(p.a.counters().current_rate_mbps, 500);
    assert_eq!(p.a.counters().rate_decreases, 1);
    assert_eq!(p.a.counters().cnps_received, 1);
    // 40 packets: the pacer holds each until the bucket has a full max-size packet's tokens.
    // (10 µs first: the bucket refills from the first WRITE.)
    p.now = p.now.add_nanos(10_000);
    let t0 = p.now;
    let first = p.times.len();
    write(&mut p, 2, 0, 40 * 256);
    p.run();
    assert_eq!(p.send_completions(Dir::AtoB).len(), 2);
    let sent: Vec<(Instant, usize)> = p
        .times
        .iter()
        .zip(&p.trace)
        .skip(first)
        .filter(|(_, (d, _, _))| *d == Dir::AtoB)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(sent.len(), 40);
    assert_eq!(
        sent[0].0, t0,
        "a full bucket lets the first packet go at once"
    );
    // Bytes sent after the first packet, at 500_489 kb/s (1 kb/s = 1 µbit/ns):
    // they needed at least (bytes − burst) of tokens and at most bytes + one packet.
    let bytes: u64 = sent[1..].iter().map(|&(_, n)| n as u64).sum();
    let elapsed = sent[39].0 .0 - t0.0;
    let lo = (bytes - u64::from(burst)) * 8_000_000 / rate;
    let hi = (bytes + u64::from(burst)) * 8_000_000 / rate + 40;
    assert!(
        (lo..=hi).contains(&elapsed),
        "{elapsed} ns for {bytes} B at {rate} kb/s: expected {lo}..={hi}"
    );
    // Packet spacing never beats the rate: each gap ≥ (packet − slack) · 8 / rate.
    for w in sent.windows(2) {
        let gap = w[1].0 .0 - w[0].0 .0;
        assert!(
            gap * rate >= (w[0].1 as u64 - 7) * 8_000_000,
            "gap {gap} ns"
        );
    }
    assert_delivered(&p, 40 * 256);
}

fn assert_delivered(p: &Pair, len: usize) {
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, len),
        p.mem_a.bytes(KEY_A, BASE_A, len)
    );
}

#[test]
fn rate_recovers_on_the_timer_and_the_deadline_says_when() {
    let mut p = pair(4096);
    p.a.enable_dcqcn(p.now, cfg_1g(), 4096);
    let t0 = p.now;
    p.a.handle_cnp(t0);
    assert_eq!(p.a.counters().current_rate_mbps, 500);
    // Idle QP: the only deadline is DCQCN's increase timer, 300 µs after the cut.
    assert_eq!(p.a.next_deadline(), Some(t0.add_nanos(300_000)));
    p.a.handle_timeout(t0.add_nanos(300_000));
    // Fast recovery: ⌈(1_000_000 + 500_489) / 2⌉ = 750_245 kb/s.
    assert_eq!(p.a.dcqcn().unwrap().rate_kbps(), 750_245);
    assert_eq!(p.a.counters().current_rate_mbps, 750);
    // Until line rate again; then no deadline.
    let mut steps = 1;
    while let Some(d) = p.a.next_deadline() {
        p.a.handle_timeout(d);
        steps += 1;
        assert!(steps < 40);
    }
    assert_eq!(p.a.counters().current_rate_mbps, 1_000);
    p.a.disable_dcqcn();
    assert_eq!(p.a.counters().current_rate_mbps, 0);
}

#[test]
fn pacer_deadline_while_blocked() {
    let mut p = pair(64 * 256);
    // 8 Mb/s = 1 byte/µs, bucket of one max-size packet (291 B).
    p.a.enable_dcqcn(
        p.now,
        DcqcnConfig {
            line_rate_mbps: 8,
            ..cfg_1g()
        },
        291,
    );
    write(&mut p, 1, 0, 4 * 256);
    let t0 = p.now;
    assert!(p.transmit(Dir::AtoB));
    // WRITE_FIRST: 12 + 16 + 256 = 284 bytes; 7 left, 284 missing = 284 µs.
    assert!(!p.transmit(Dir::AtoB));
    assert_eq!(p.a.next_deadline(), Some(t0.add_nanos(284_000)));
    p.now = t0.add_nanos(283_999);
    assert!(!p.transmit(Dir::AtoB));
    p.now = t0.add_nanos(284_000);
    assert!(p.transmit(Dir::AtoB));
    assert!(!p.transmit(Dir::AtoB), "blocked again");
    // ACKs are never paced: B writes to A, and A answers at once although its pacer holds.
    p.b.post_send(send_wqe(
        9,
        SendOpcode::RdmaWrite,
        &[sge(BASE_B, 16, KEY_B)],
        BASE_A + 8192,
        KEY_A,
    ))
    .unwrap();
    assert!(p.transmit(Dir::BtoA));
    let pkt = p.b_to_a.pop_front().unwrap();
    p.deliver(Dir::BtoA, &pkt);
    let before = p.trace.len();
    assert!(p.transmit(Dir::AtoB));
    assert_eq!(p.trace[before].1.bth.opcode, Opcode::RcAcknowledge);
    assert!(!p.transmit(Dir::AtoB), "data still held");
}
