//! Selective repeat against go-back-N on the same losses: what each resends, that data still
//! lands exactly once, the self-placing WRITE_ONLY wire scheme, the ordering rule for splitting
//! WRITEs, the in-flight cap, and when the mode may be chosen.

use super::*;
use crate::rc::recovery::{DUP_THRESH, REORDER_WINDOW_MIN_NS, SACK_EVERY};
use crate::wire::RethRepr;

const KEY_A: u32 = 0xa4;
const KEY_B: u32 = 0xb4;
const BASE_A: u64 = 0x1_0000;
const BASE_B: u64 = 0x90_0000;

fn pair(recovery: Recovery, len: usize) -> Pair {
    let mut p = Pair::new_in(recovery, Mtu::Mtu256, 100, 7000);
    p.mem_a.add(KEY_A, BASE_A, len, Access::ALL, pattern(9));
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

/// Drops, among A→B packets, the first transmission of each PSN `pred` selects.
fn drop_first_ab(
    mut pred: impl FnMut(u32) -> bool,
) -> impl FnMut(Dir, &TransportRepr, &[u8]) -> Fate {
    let mut seen: Vec<u32> = Vec::new();
    move |dir, h, _| {
        let psn = h.bth.psn.value();
        if dir == Dir::AtoB && !seen.contains(&psn) {
            seen.push(psn);
            if pred(psn) {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    }
}

/// Data arrived intact and every byte was written exactly once.
fn assert_delivered_once(p: &Pair, len: usize) {
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, len),
        p.mem_a.bytes(KEY_A, BASE_A, len)
    );
    assert!(
        p.mem_b
            .write_counts(KEY_B, BASE_B, len)
            .iter()
            .all(|&c| c == 1),
        "each byte written once"
    );
}

#[test]
fn one_lost_packet_is_resent_alone() {
    let mut p = pair(Recovery::Selective, 2560);
    write(&mut p, 1, 0, 2560);
    let t0 = p.now;
    p.run_with(10_000, drop_first_ab(|psn| psn == 102));
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaWrite, 2560, QPN_A)]
    );
    assert_delivered_once(&p, 2560);
    let (a, b) = (p.a.counters(), p.b.counters());
    // 103..=109 placed out of order; SACKs on the first (103) and on 105, DUP_THRESH beyond
    // the hole (none for 109's AckReq: `sacks_reveal_holes_and_resends_not_every_ackreq`);
    // 102 resent once the SACK shows 105, no timer.
    assert_eq!(b.out_of_order_placed, 7);
    assert_eq!(b.out_of_sequence_requests, 7);
    assert_eq!(b.naks_sent.psn_sequence, 2);
    assert_eq!(b.sacks_sent, 2);
    assert_eq!(a.naks_received.psn_sequence, 2);
    assert_eq!(a.sacks_received, 2);
    assert_eq!(a.fast_retransmits, 1);
    assert_eq!(a.retransmitted_packets, 1);
    assert_eq!(a.timeouts, 0);
    assert_eq!(p.now, t0);
    // The MSN counts WRITE_ONLY messages: one per packet.
    assert_eq!(p.b.msn(), 10);
    // Wire: every packet an RDMA_WRITE_ONLY whose RETH places it.
    let sent: Vec<&(Dir, TransportRepr, usize)> =
        p.trace.iter().filter(|(d, _, _)| *d == Dir::AtoB).collect();
    assert_eq!(sent.len(), 11);
    for (i, (_, h, len)) in sent.into_iter().enumerate() {
        {
            assert_eq!(h.bth.opcode, Opcode::RcRdmaWriteOnly);
            let k = h.bth.psn.distance_from(Psn::new(100)) as u64;
            let reth = h.reth.unwrap();
            assert_eq!(
                (reth.va, reth.rkey, reth.dma_len),
                (BASE_B + 256 * k, KEY_B, *len as u32)
            );
            // AckReq on the last packet, and on the resend (the 11th packet).
            assert_eq!(h.bth.ack_req, k == 9 || i == 10, "psn {}", h.bth.psn);
        }
    }
}

/// A deterministic per-PSN loss pattern: about `percent` % of PSNs.
fn lossy(percent: u32) -> impl FnMut(u32) -> bool {
    move |psn| {
        let mut x = psn.wrapping_mul(0x9e37_79b9) ^ 0x5bd1_e995;
        x ^= x >> 15;
        x = x.wrapping_mul(0x2c1b_3c6d);
        x ^= x >> 12;
        x % 100 < percent
    }
}

#[test]
fn random_loss_selective_resends_exactly_the_lost_packets() {
    let len = 40 * 8 * 256;
    let mut results = Vec::new();
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let mut p = pair(recovery, len);
        for i in 0..40u64 {
            write(&mut p, i, i * 8 * 256, 8 * 256);
        }
        let mut dropped = 0u64;
        let mut lose = lossy(5);
        p.run_with(
            100_000,
            drop_first_ab(|psn| {
                let d = lose(psn);
                dropped += u64::from(d);
                d
            }),
        );
        assert_eq!(p.send_completions(Dir::AtoB).len(), 40, "{recovery:?}");
        assert_delivered_once(&p, len);
        let c = *p.a.counters();
        std::println!(
            "{recovery:?}: {} packets lost of 320, {} retransmitted, {} timeouts",
            dropped,
            c.retransmitted_packets,
            c.timeouts
        );
        results.push((dropped, c.retransmitted_packets));
    }
    let (lost, gbn) = results[0];
    let (lost_sr, sr) = results[1];
    assert_eq!(lost, lost_sr, "same loss pattern");
    assert!(lost >= 8, "the pattern loses packets ({lost})");
    assert_eq!(sr, lost, "selective repeat resends each lost packet once");
    assert!(gbn > 4 * sr, "go-back-N resends far more ({gbn} vs {sr})");
}

#[test]
fn reordered_packet_is_not_resent() {
    // 102 arrives after 103. Go-back-N: B drops 103 and NAKs 102, then — 103 having been
    // dropped — NAKs 103 on 104; A goes back twice (102..=109, then 103..=109: 15 packets,
    // 8 of them duplicates at B). Selective: B keeps 103 and SACKs it; one PSN beyond 102 is
    // below DUP_THRESH, so A resends nothing.
    for (recovery, resent, dups) in [(Recovery::GoBackN, 15, 8), (Recovery::Selective, 0, 0)] {
        let mut p = pair(recovery, 2560);
        write(&mut p, 1, 0, 2560);
        while p.transmit(Dir::AtoB) {}
        p.a_to_b.swap(2, 3);
        p.run();
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [ok_wc(1, WcOpcode::RdmaWrite, 2560, QPN_A)]
        );
        assert_delivered_once(&p, 2560);
        assert_eq!(p.a.counters().retransmitted_packets, resent, "{recovery:?}");
        assert_eq!(p.b.counters().duplicate_requests, dups, "{recovery:?}");
        assert_eq!(p.a.counters().timeouts, 0);
    }
}

#[test]
fn tail_losses_recover_after_timeouts() {
    // The last 3 packets are lost: nothing follows them, so only the timer notices.
    // Go-back-N resends all 10 after one timeout; selective repeat resends the oldest
    // unacknowledged packet (a duplicate that fetches the ACK point), and after a second
    // timeout — now with only 3 PSNs in flight (RTO_low) — the 3 lost ones.
    for (recovery, resent, timeouts) in [(Recovery::GoBackN, 10, 1), (Recovery::Selective, 4, 2)] {
        let mut p = pair(recovery, 2560);
        write(&mut p, 1, 0, 2560);
        let t0 = p.now;
        p.run_with(10_000, drop_first_ab(|psn| psn >= 107));
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [ok_wc(1, WcOpcode::RdmaWrite, 2560, QPN_A)]
        );
        assert_delivered_once(&p, 2560);
        let a = p.a.counters();
        assert_eq!(a.timeouts, timeouts, "{recovery:?}");
        assert_eq!(a.retransmitted_packets, resent, "{recovery:?}");
        // No round-trip sample was taken (no ACK before the losses): the IBTA timeout.
        assert_eq!(p.now.0 - t0.0, timeouts * ack_timeout_ns(10).unwrap());
    }
}

#[test]
fn sends_after_a_hole_are_placed_not_resent() {
    // Selective: SEND packets carry a placement header, so B places 101..=107 (SEND middle
    // and last, the split WRITE, the second SEND) and SACKs on 101 (the hole) and 103
    // (DUP_THRESH beyond it); A resends 100 alone.
    for (recovery, resent, naks) in [(Recovery::GoBackN, 8, 1), (Recovery::Selective, 1, 2)] {
        let mut p = pair(recovery, 4096);
        p.b.post_recv(recv_wqe(50, &[sge(BASE_B + 2048, 1024, KEY_B)]))
            .unwrap();
        p.b.post_recv(recv_wqe(51, &[sge(BASE_B + 3072, 1024, KEY_B)]))
            .unwrap();
        // PSN 100..=102 SEND, 103..=106 WRITE, 107 SEND.
        p.a.post_send(send_wqe(
            1,
            SendOpcode::Send,
            &[sge(BASE_A + 2048, 700, KEY_A)],
            0,
            0,
        ))
        .unwrap();
        write(&mut p, 2, 0, 1024);
        p.a.post_send(send_wqe(
            3,
            SendOpcode::Send,
            &[sge(BASE_A + 3072, 100, KEY_A)],
            0,
            0,
        ))
        .unwrap();
        let t0 = p.now;
        p.run_with(10_000, drop_first_ab(|psn| psn == 100));
        // One round of resends, no timer.
        assert_eq!(p.now, t0, "{recovery:?}");
        assert_eq!(p.a.counters().timeouts, 0);
        assert_eq!(
            p.a.counters().naks_received.psn_sequence,
            naks,
            "{recovery:?}"
        );
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [
                ok_wc(1, WcOpcode::Send, 700, QPN_A),
                ok_wc(2, WcOpcode::RdmaWrite, 1024, QPN_A),
                ok_wc(3, WcOpcode::Send, 100, QPN_A)
            ]
        );
        let recvs = p.recv_completions(Dir::BtoA);
        assert_eq!(
            recvs
                .iter()
                .map(|w| (w.wr_id, w.byte_len))
                .collect::<Vec<_>>(),
            [(50, 700), (51, 100)]
        );
        assert_eq!(
            p.mem_b.bytes(KEY_B, BASE_B + 2048, 700),
            p.mem_a.bytes(KEY_A, BASE_A + 2048, 700)
        );
        assert_eq!(
            p.mem_b.bytes(KEY_B, BASE_B + 3072, 100),
            p.mem_a.bytes(KEY_A, BASE_A + 3072, 100)
        );
        assert_delivered_once(&p, 1024);
        assert_eq!(p.a.counters().retransmitted_packets, resent, "{recovery:?}");
        if recovery == Recovery::Selective {
            assert_eq!(p.b.counters().out_of_order_placed, 7);
            // Resent: the lost SEND packet only.
            let resent_psns: Vec<u32> = p
                .trace
                .iter()
                .filter(|(d, _, _)| *d == Dir::AtoB)
                .map(|(_, h, _)| h.bth.psn.value())
                .skip(8)
                .collect();
            assert_eq!(resent_psns, [100]);
        }
    }
}

#[test]
fn writes_are_split_only_when_early_placement_is_safe() {
    let mut p = pair(Recovery::Selective, 8192);
    // 1: disjoint WRITE first → split. 2: WRITE overlapping 1 → split too (the responder
    // keeps the later bytes; see `overlapping_writes_keep_the_later_bytes_under_loss`).
    // 3: READ of B's 6000..6512. 4: WRITE after the READ, to bytes it reads → not split.
    // 5: WRITE after the READ, elsewhere (2048..2560) → split.
    write(&mut p, 1, 0, 512);
    write(&mut p, 2, 256, 512);
    p.a.post_send(send_wqe(
        3,
        SendOpcode::RdmaRead,
        &[sge(BASE_A + 4096, 512, KEY_A)],
        BASE_B + 6000,
        KEY_B,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        4,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A + 6256, 512, KEY_A)],
        BASE_B + 6256,
        KEY_B,
    ))
    .unwrap();
    write(&mut p, 5, 2048, 512);
    p.run();
    assert_eq!(p.send_completions(Dir::AtoB).len(), 5);
    let ops: Vec<Opcode> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::AtoB)
        .map(|(_, h, _)| h.bth.opcode)
        .collect();
    use Opcode::*;
    assert_eq!(
        ops,
        [
            RcRdmaWriteOnly,
            RcRdmaWriteOnly,
            RcRdmaWriteOnly,
            RcRdmaWriteOnly,
            RcRdmaReadRequest,
            RcRdmaWriteFirst,
            RcRdmaWriteLast,
            RcRdmaWriteOnly,
            RcRdmaWriteOnly
        ]
    );
    // Later WRITE wins where they overlap.
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B + 256, 512),
        p.mem_a.bytes(KEY_A, BASE_A + 256, 512)
    );
    // Go-back-N never splits.
    let mut g = pair(Recovery::GoBackN, 8192);
    write(&mut g, 1, 0, 512);
    g.run();
    assert_eq!(g.count(Dir::AtoB, RcRdmaWriteFirst), 1);
}

/// Posts an RDMA WRITE (with immediate when `imm`) of `len` bytes from A's `src` offset to
/// B's `dst` offset.
fn write_from(p: &mut Pair, wr_id: u64, src: u64, dst: u64, len: u32, imm: bool) {
    let op = if imm {
        SendOpcode::RdmaWriteWithImm
    } else {
        SendOpcode::RdmaWrite
    };
    let mut w = send_wqe(
        wr_id,
        op,
        &[sge(BASE_A + src, len, KEY_A)],
        BASE_B + dst,
        KEY_B,
    );
    w.imm = 0x5eed;
    p.a.post_send(w).unwrap();
}

#[test]
fn overlapping_writes_keep_the_later_bytes_under_loss() {
    // WRITE 1 and WRITE 2 target the same 2560 bytes at B (perftest's and NCCL's buffer
    // reuse) from different source bytes. Both go out split; packet 102 of WRITE 1 is lost
    // and resent after WRITE 2's packet for the same bytes was placed: the resend must not
    // overwrite it. Then packets 111.. of WRITE 2 are lost for a while, so WRITE 1's
    // packets placed earlier are overwritten by WRITE 2's resends, as in order.
    for lost in [&[102u32][..], &[102, 111, 112, 115]] {
        let mut p = pair(Recovery::Selective, 5120);
        write_from(&mut p, 1, 0, 0, 2560, false);
        write_from(&mut p, 2, 2560, 0, 2560, false);
        let t0 = p.now;
        p.run_with(10_000, drop_first_ab(|psn| lost.contains(&psn)));
        assert_eq!(p.send_completions(Dir::AtoB).len(), 2);
        assert_eq!(
            p.mem_b.bytes(KEY_B, BASE_B, 2560),
            p.mem_a.bytes(KEY_A, BASE_A + 2560, 2560),
            "the later WRITE's bytes, lost {lost:?}"
        );
        let a = p.a.counters();
        assert_eq!(a.timeouts, 0, "{lost:?}");
        assert_eq!(a.retransmitted_packets, lost.len() as u64, "{lost:?}");
        assert_eq!(p.now, t0);
    }
}

#[test]
fn unheld_packets_are_resent_from_the_hole_without_the_timer() {
    // A WRITE behind an outstanding READ of its target is not split: its MIDDLE packets carry no address,
    // and those after a lost packet cannot be held. The responder says so with a NAK without
    // SACK, and the requester resends from the hole at once (go-back-N over what was not
    // kept), where it used to wait for the retransmit timer.
    let mut p = pair(Recovery::Selective, 5120);
    p.b.post_recv(recv_wqe(9, &[])).unwrap();
    // READ (PSN 100) of B's first 256 bytes — which the WRITE overwrites — into A beyond
    // the compared range.
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A + 2560, 256, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    write_from(&mut p, 2, 0, 0, 2560, true);
    let t0 = p.now;
    p.run_with(10_000, drop_first_ab(|psn| psn == 103));
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [
            ok_wc(1, WcOpcode::RdmaRead, 256, QPN_A),
            ok_wc(2, WcOpcode::RdmaWrite, 2560, QPN_A)
        ]
    );
    assert_eq!(p.recv_completions(Dir::BtoA).len(), 1);
    assert_delivered_once(&p, 2560);
    let (a, b) = (p.a.counters(), p.b.counters());
    assert_eq!(a.timeouts, 0);
    assert_eq!(p.now, t0);
    assert_eq!(b.out_of_order_placed, 0);
    // 103 and the 7 packets dropped behind it, each once.
    assert_eq!(a.retransmitted_packets, 8);
}

#[test]
fn write_with_immediate_is_split_and_only_the_lost_packet_is_resent() {
    // With nothing outstanding before it, a WRITE with immediate goes out split: 9
    // RDMA_WRITE_ONLY packets, then an RDMA_WRITE_ONLY_WITH_IMMEDIATE whose RETH names the
    // whole message and whose payload is its last 256 bytes. 102 is lost: the packets behind
    // it — the immediate one too — are placed on arrival, 102 alone is resent, and the
    // receive completion (after every byte) reports the whole length and the immediate data.
    // Before, the MIDDLE/LAST packets behind 102 could not be held: 8 resends.
    let mut p = pair(Recovery::Selective, 2560);
    p.b.post_recv(recv_wqe(9, &[])).unwrap();
    write_from(&mut p, 1, 0, 0, 2560, true);
    let t0 = p.now;
    p.run_with(10_000, drop_first_ab(|psn| psn == 102));
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaWrite, 2560, QPN_A)]
    );
    assert_eq!(
        p.recv_completions(Dir::BtoA),
        [WorkCompletion {
            wr_id: 9,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 2560,
            imm_data: Some(0x5eed),
            qp_num: QPN_B,
        }]
    );
    assert_delivered_once(&p, 2560);
    let (a, b) = (p.a.counters(), p.b.counters());
    assert_eq!((a.timeouts, a.retransmitted_packets), (0, 1));
    assert_eq!(b.out_of_order_placed, 7);
    assert_eq!(p.now, t0);
    let last = p
        .trace
        .iter()
        .find(|(d, h, _)| *d == Dir::AtoB && h.bth.psn.value() == 109)
        .map(|(_, h, n)| (h.bth.opcode, h.reth, h.imm, *n));
    assert_eq!(
        last,
        Some((
            Opcode::RcRdmaWriteOnlyWithImmediate,
            Some(RethRepr {
                va: BASE_B,
                rkey: KEY_B,
                dma_len: 2560
            }),
            Some(0x5eed),
            256
        ))
    );
    let onlys = p
        .trace
        .iter()
        .filter(|(d, h, _)| *d == Dir::AtoB && h.bth.opcode == Opcode::RcRdmaWriteOnly)
        .count();
    assert_eq!(onlys, 9 + 1, "9 packets and the resend of 102");
}

#[test]
fn sacks_reveal_holes_and_resends_not_every_ackreq() {
    // 16 WRITEs of 4 packets (PSN 100..=163, AckReq on every 4th); 100 and 120 are lost, the
    // rest arrives in order and B answers after each packet. B SACKs on 101 (the hole at
    // ePSN), 103 (DUP_THRESH beyond 100: A may resend it), 123 (the same for 120's hole,
    // above the held packets) and 155 (SACK_EVERY PSNs held since the last SACK) — not
    // on each of the 14 AckReq packets held (until 2026-11-26: 17 SACKs, about one per 16
    // packets of a 64 KiB message stream while a hole was repaired).
    let mut p = pair(Recovery::Selective, 64 * 256);
    for m in 0..16u64 {
        write(&mut p, m, m * 1024, 1024);
    }
    while p.transmit(Dir::AtoB) {}
    let pkts: Vec<Vec<u8>> = p.a_to_b.drain(..).collect();
    assert_eq!(pkts.len(), 64);
    let mut sacked_after = Vec::new();
    let deliver = |p: &mut Pair, pkt: &[u8]| -> u32 {
        let before = p.b.counters().sacks_sent;
        p.deliver(Dir::AtoB, pkt);
        while p.transmit(Dir::BtoA) {}
        p.b_to_a.clear();
        (p.b.counters().sacks_sent - before) as u32
    };
    for (i, pkt) in pkts.iter().enumerate() {
        let psn = 100 + i as u32;
        if psn == 100 || psn == 120 {
            continue;
        }
        if deliver(&mut p, pkt) > 0 {
            sacked_after.push(psn);
        }
    }
    assert_eq!(sacked_after, [101, 103, 123, 155]);
    assert_eq!(
        DUP_THRESH + SACK_EVERY,
        3 + 32,
        "the PSNs above follow the constants"
    );
    // The resend of 120 fills a hole below the highest held PSN: SACKed at once (A learns
    // its resend arrived). The resend of 100 then retires everything: one ACK.
    assert_eq!(deliver(&mut p, &pkts[20]), 1);
    let acks = p.b.counters().acks_sent;
    assert_eq!(deliver(&mut p, &pkts[0]), 0);
    assert_eq!(p.b.counters().acks_sent, acks + 1);
    assert_eq!(p.b.counters().out_of_order_placed, 63);
}

#[test]
fn in_flight_cap_bounds_unacknowledged_psns() {
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let mut p = pair(recovery, 20 * 256);
        p.a.set_max_inflight(8);
        assert_eq!(p.a.max_inflight(), 8);
        write(&mut p, 1, 0, 20 * 256);
        while p.transmit(Dir::AtoB) {}
        assert_eq!(p.a_to_b.len(), 8, "{recovery:?}");
        assert_eq!(p.a.sq_psn().distance_from(p.a.comp_psn()), 8);
        p.run();
        assert_delivered_once(&p, 20 * 256);
    }
    let mut q = Qp::new(rtr(1, 2, Mtu::Mtu256, 0));
    q.set_max_inflight(0);
    assert_eq!(q.max_inflight(), 1);
    q.set_max_inflight(1000);
    assert_eq!(q.max_inflight(), MAX_UNACKED_PSNS);
    assert_eq!(SR_WINDOW, 2 * MAX_UNACKED_PSNS);
}

#[test]
fn a_hole_does_not_stall_the_window() {
    // In-flight cap 8; PSN 100 is lost, 101..=107 arrive; B's SACKs (on 101, and on 103,
    // DUP_THRESH beyond the hole) show 101..=103 held. Selective repeat counts what the
    // responder holds as delivered: A resends 100 and sends 3 new packets (108..=110) before
    // 100 is acknowledged, so the line stays busy during the repair. Go-back-N resends
    // 100..=107 and sends nothing new.
    for (recovery, highest) in [(Recovery::GoBackN, 107), (Recovery::Selective, 110)] {
        let mut p = pair(recovery, 40 * 256);
        p.a.set_max_inflight(8);
        write(&mut p, 1, 0, 40 * 256);
        while p.transmit(Dir::AtoB) {}
        assert_eq!(p.a_to_b.len(), 8);
        p.a_to_b.pop_front(); // PSN 100 lost
        while let Some(pkt) = p.a_to_b.pop_front() {
            p.deliver(Dir::AtoB, &pkt);
        }
        while p.transmit(Dir::BtoA) {}
        while let Some(pkt) = p.b_to_a.pop_front() {
            p.deliver(Dir::BtoA, &pkt);
        }
        let before = p.trace.len();
        while p.transmit(Dir::AtoB) {}
        let sent: Vec<u32> = p.trace[before..]
            .iter()
            .filter(|(d, _, _)| *d == Dir::AtoB)
            .map(|(_, h, _)| h.bth.psn.value())
            .collect();
        assert_eq!(sent.first(), Some(&100), "{recovery:?}: the hole first");
        assert_eq!(sent.iter().max(), Some(&highest), "{recovery:?}: {sent:?}");
        assert_eq!(p.a.comp_psn(), Psn::new(100), "{recovery:?}");
        p.run();
        assert_delivered_once(&p, 40 * 256);
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [ok_wc(1, WcOpcode::RdmaWrite, 40 * 256, QPN_A)]
        );
    }
}

#[test]
fn recovery_is_chosen_in_rtr_before_traffic() {
    let mut q = Qp::new(rtr(1, 2, Mtu::Mtu256, 0));
    assert_eq!(q.recovery(), Recovery::GoBackN);
    assert!(q.set_recovery(Recovery::Selective));
    assert_eq!(q.recovery(), Recovery::Selective);
    q.to_rts(rts(0));
    assert!(!q.set_recovery(Recovery::GoBackN));
    assert_eq!(q.recovery(), Recovery::Selective);
    // A packet already arrived in RTR: too late as well.
    let mut r = Qp::new(rtr(1, 2, Mtu::Mtu256, 0));
    let hdr = crate::wire::CnpRepr::new(99).to_transport();
    r.handle_packet(Instant(0), &hdr, &[], &mut TestMem::default());
    assert!(!r.set_recovery(Recovery::Selective));
}

#[test]
fn out_of_order_write_with_bad_rkey_is_not_placed() {
    // A later packet of a WRITE to a region B does not have: not placed out of order, but
    // judged in sequence (NAK remote access error), nothing written.
    let mut p = pair(Recovery::Selective, 2560);
    write(&mut p, 1, 0, 512);
    p.a.post_send(send_wqe(
        2,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A + 1024, 512, KEY_A)],
        BASE_B + 1024,
        KEY_B + 1,
    ))
    .unwrap();
    p.run_with(10_000, drop_first_ab(|psn| psn == 101));
    assert_eq!(p.b.counters().out_of_order_placed, 0);
    let wcs = p.send_completions(Dir::AtoB);
    assert_eq!(
        statuses(&wcs),
        [(1, WcStatus::Success), (2, WcStatus::RemAccessErr)]
    );
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B + 512, 2048)
        .iter()
        .all(|&c| c == 0));
}

#[test]
fn read_responses_are_placed_out_of_order_and_only_the_lost_one_is_read_again() {
    // A READs 10 responses (PSN 100..=109) from B; the response at 102 is lost. Selective:
    // A places 103..=109 on arrival and asks again for 102 alone (a one-packet re-READ);
    // go-back-N re-READs the tail 102..=109.
    for (recovery, again, placed) in [(Recovery::GoBackN, 8, 0), (Recovery::Selective, 1, 7)] {
        let mut p = pair(recovery, 2560);
        // Source data on B (the pattern), destination on A (zeros).
        p.mem_b.regions.clear();
        p.mem_b.add(KEY_B, BASE_B, 2560, Access::ALL, pattern(5));
        p.mem_a.regions.clear();
        p.mem_a.add(KEY_A, BASE_A, 2560, Access::ALL, |_| 0);
        p.a.post_send(send_wqe(
            1,
            SendOpcode::RdmaRead,
            &[sge(BASE_A, 2560, KEY_A)],
            BASE_B,
            KEY_B,
        ))
        .unwrap();
        let mut seen = false;
        p.run_with(10_000, |d, h, _| {
            if d == Dir::BtoA && h.bth.psn.value() == 102 && !seen {
                seen = true;
                return Fate::Drop;
            }
            Fate::Deliver
        });
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [ok_wc(1, WcOpcode::RdmaRead, 2560, QPN_A)],
            "{recovery:?}"
        );
        assert_eq!(
            p.mem_a.bytes(KEY_A, BASE_A, 2560),
            p.mem_b.bytes(KEY_B, BASE_B, 2560)
        );
        assert!(
            p.mem_a
                .write_counts(KEY_A, BASE_A, 2560)
                .iter()
                .all(|&c| c == 1),
            "{recovery:?}: every byte placed once"
        );
        // Responses sent again by B after the loss.
        let total = p
            .trace
            .iter()
            .filter(|(d, h, _)| *d == Dir::BtoA && h.bth.opcode.is_read_response())
            .count();
        assert_eq!(total, 10 + again, "{recovery:?}");
        assert_eq!(p.a.counters().out_of_order_placed, placed, "{recovery:?}");
        if recovery == Recovery::Selective {
            // The re-READ names exactly the missing response: VA + 2·PMTU, one PMTU long.
            let rereads: Vec<RethRepr> = p
                .trace
                .iter()
                .filter(|(d, h, _)| *d == Dir::AtoB && h.bth.opcode == Opcode::RcRdmaReadRequest)
                .filter_map(|(_, h, _)| h.reth)
                .skip(1)
                .collect();
            assert_eq!(
                rereads,
                [RethRepr {
                    va: BASE_B + 512,
                    rkey: KEY_B,
                    dma_len: 256
                }]
            );
            assert_eq!(p.a.counters().fast_retransmits, 1);
            assert_eq!(p.a.counters().timeouts, 0);
        }
    }
}

#[test]
fn read_and_atomic_behind_a_hole_are_deferred_and_executed_once() {
    // PSN 100 (a WRITE_ONLY) is lost; the READ at 101 and the FETCH_ADD at 102 arrive out of
    // order. Selective: B defers both (their headers wait in the window), SACKs them, and
    // executes them in order once 100 is resent; A resends 100 only.
    let mut p = pair(Recovery::Selective, 4096);
    p.mem_b.add(0xc0, 0xc000_0000, 8, Access::ALL, |_| 0);
    let before = p.mem_b.u64_at(0xc0, 0xc000_0000);
    write(&mut p, 1, 0, 200);
    p.a.post_send(send_wqe(
        2,
        SendOpcode::RdmaRead,
        &[sge(BASE_A + 1024, 256, KEY_A)],
        BASE_B + 2048,
        KEY_B,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        3,
        SendOpcode::AtomicFetchAndAdd { add: 5 },
        &[sge(BASE_A + 3000, 8, KEY_A)],
        0xc000_0000,
        0xc0,
    ))
    .unwrap();
    // Posted after the atomic, so not split; it completes last.
    write(&mut p, 4, 3072, 100);
    p.run_with(10_000, drop_first_ab(|psn| psn == 100));
    let wcs = p.send_completions(Dir::AtoB);
    assert_eq!(
        statuses(&wcs),
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success)
        ]
    );
    assert_eq!(p.mem_b.u64_at(0xc0, 0xc000_0000), before.wrapping_add(5));
    assert!(p
        .mem_b
        .write_counts(0xc0, 0xc000_0000, 8)
        .iter()
        .all(|&c| c == 1));
    assert_eq!(
        p.mem_a.bytes(KEY_A, BASE_A + 1024, 256),
        p.mem_b.bytes(KEY_B, BASE_B + 2048, 256)
    );
    let (a, b) = (p.a.counters(), p.b.counters());
    assert_eq!(a.retransmitted_packets, 1, "only the lost WRITE packet");
    assert_eq!(
        b.out_of_order_placed, 3,
        "READ, atomic and the last WRITE held"
    );
    assert!(b.sacks_sent >= 1 && a.sacks_received >= 1);
    assert_eq!(a.timeouts, 0);
    assert_eq!(p.count(Dir::AtoB, Opcode::RcFetchAdd), 1, "never resent");
}

/// A selective-repeat pair (MTU 256) with a READ of 2560 bytes (10 responses, PSN
/// 100..=109) from B's pattern into A's zeros posted, nothing sent yet.
fn posted_read_of_ten() -> Pair {
    let mut p = pair(Recovery::Selective, 2560);
    p.mem_b.regions.clear();
    p.mem_b.add(KEY_B, BASE_B, 2560, Access::ALL, pattern(5));
    p.mem_a.regions.clear();
    p.mem_a.add(KEY_A, BASE_A, 2560, Access::ALL, |_| 0);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 2560, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p
}

/// The READ of [`posted_read_of_ten`] completed once, with B's bytes in A's region.
fn read_of_ten_arrived(p: &mut Pair) {
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaRead, 2560, QPN_A)]
    );
    assert_eq!(
        p.mem_a.bytes(KEY_A, BASE_A, 2560),
        p.mem_b.bytes(KEY_B, BASE_B, 2560)
    );
}

/// A READ of 10 responses (PSN 100..=109, MTU 256) from B's pattern into A's zeros, with
/// B→A packets dropped by `drop_nth(psn, nth transmission of that PSN)`; returns the pair
/// after the link settled.
fn read_with_drops(drop_nth: impl Fn(u32, usize) -> bool) -> Pair {
    let mut p = posted_read_of_ten();
    let mut sent = std::collections::HashMap::<u32, usize>::new();
    p.run_with(10_000, |d, h, _| {
        if d == Dir::BtoA && h.bth.opcode.is_read_response() {
            let psn = h.bth.psn.value();
            let n = sent.entry(psn).or_insert(0);
            *n += 1;
            if drop_nth(psn, *n) {
                return Fate::Drop;
            }
        }
        Fate::Deliver
    });
    read_of_ten_arrived(&mut p);
    assert!(
        p.mem_a
            .write_counts(KEY_A, BASE_A, 2560)
            .iter()
            .all(|&c| c == 1),
        "every byte placed once"
    );
    p
}

#[test]
fn lost_re_read_answers_are_asked_for_again_without_the_retransmit_timeout() {
    // 102 and 105 lost, then the answer to the re-READ of 102: the answer to the later
    // re-READ (105) arrives first — B answers re-READs in the order they came — so 102 is
    // read a third time at once. Before: the timeout (nothing new was sent after the
    // re-READs, and no time passes while the responses arrive).
    let p = read_with_drops(|psn, n| (psn == 102 && n <= 2) || (psn == 105 && n == 1));
    let a = p.a.counters();
    assert_eq!((a.fast_retransmits, a.timeouts), (3, 0), "{a:?}");
    let t_seq = p.now;

    // 108 lost (109 reveals it), then the answer to its re-READ: nothing follows, so the
    // re-READ timer asks again (RTO_low before any re-READ was timed) — no retransmit
    // timeout, no retry spent.
    let p = read_with_drops(|psn, n| psn == 108 && n <= 2);
    let a = p.a.counters();
    assert_eq!(
        (a.fast_retransmits, a.timeouts, a.retries),
        (2, 0, 0),
        "{a:?}"
    );
    assert!(p.now > t_seq, "waited for the re-READ timer");
}

/// A READ of 10 responses (PSN 100..=109) whose responses leave B in the order of
/// `order` (indices into the 10); returns the pair after the link settled, checked.
fn read_reordered(order: &[usize]) -> Pair {
    let mut p = posted_read_of_ten();
    while p.transmit(Dir::AtoB) {}
    let req = p.a_to_b.pop_front().expect("the READ request");
    p.deliver(Dir::AtoB, &req);
    while p.transmit(Dir::BtoA) {}
    assert_eq!(p.b_to_a.len(), 10);
    let sent: Vec<Vec<u8>> = p.b_to_a.drain(..).collect();
    p.b_to_a.extend(order.iter().map(|&i| sent[i].clone()));
    p.run();
    read_of_ten_arrived(&mut p);
    p
}

#[test]
fn overtaken_read_responses_are_not_read_again() {
    // 102 arrives after 103, then after 103 and 104: fewer than DUP_THRESH PSNs beyond a
    // missing response arrived before it did, so A asks for nothing again and B sends each
    // response once. Before the reorder window (2026-11-26), a missing READ response counted
    // as lost as soon as anything beyond it arrived: one re-READ and a duplicate response
    // per overtaken response (3.1 resends per lost packet with 1 % loss and 1 % reordering).
    for order in [
        &[0, 1, 3, 2, 4, 5, 6, 7, 8, 9][..],
        &[0, 1, 3, 4, 2, 5, 6, 7, 8, 9],
        &[0, 1, 2, 3, 4, 5, 6, 7, 9, 8],
    ] {
        let p = read_reordered(order);
        let a = p.a.counters();
        assert_eq!(
            (a.retransmitted_packets, a.timeouts, a.duplicates_dropped),
            (0, 0, 0),
            "{order:?}: {a:?}"
        );
        assert!(
            p.mem_a
                .write_counts(KEY_A, BASE_A, 2560)
                .iter()
                .all(|&c| c == 1),
            "{order:?}: every byte placed once"
        );
        assert_eq!(p.count(Dir::BtoA, Opcode::RcRdmaReadResponseMiddle), 8);
    }
}

#[test]
fn missing_read_response_counts_as_lost_after_dup_thresh_or_the_reorder_window() {
    // 102 lost: 105, DUP_THRESH beyond it, reveals the loss at once — one re-READ, no time
    // passes.
    let t0 = Instant(1_000_000);
    // When A sent its re-READs.
    let rereads = |p: &Pair| -> Vec<u64> {
        p.trace
            .iter()
            .zip(&p.times)
            .filter(|((d, h, _), _)| *d == Dir::AtoB && h.bth.opcode == Opcode::RcRdmaReadRequest)
            .skip(1)
            .map(|(_, (t, _))| t.0 - t0.0)
            .collect()
    };
    let p = read_with_drops(|psn, n| psn == 102 && n == 1);
    let a = p.a.counters();
    assert_eq!((a.fast_retransmits, a.timeouts), (1, 0), "{a:?}");
    assert_eq!(rereads(&p), [0], "re-READ at once");
    // 108 lost: only 109 follows it, so the reorder window (no round trip measured: its
    // floor) decides — one re-READ after REORDER_WINDOW_MIN_NS, long before RTO_low, no
    // timeout, no retry spent.
    let p = read_with_drops(|psn, n| psn == 108 && n == 1);
    let a = p.a.counters();
    assert_eq!(
        (a.fast_retransmits, a.timeouts, a.retries),
        (1, 0, 0),
        "{a:?}"
    );
    assert_eq!(rereads(&p), [REORDER_WINDOW_MIN_NS]);
}

#[test]
fn held_write_with_immediate_waits_out_rnr_without_writing_twice() {
    // The split WRITE with immediate of the test above, 102 lost, and no receive WQE posted:
    // when the resend of 102 fills the hole, the held immediate packet (109, data placed)
    // cannot complete — RNR NAK. It stays held; once a receive WQE is posted, its resend
    // completes the message without writing the bytes again, and nothing else is resent.
    let mut p = pair(Recovery::Selective, 2560);
    write_from(&mut p, 1, 0, 0, 2560, true);
    while p.transmit(Dir::AtoB) {}
    let at = p
        .a_to_b
        .iter()
        .position(|pkt| parse(pkt).0.bth.psn.value() == 102)
        .unwrap();
    p.a_to_b.remove(at);
    p.settle();
    assert_eq!(p.b.counters().naks_sent.rnr, 1);
    assert!(p.send_completions(Dir::AtoB).is_empty());
    p.b.post_recv(recv_wqe(9, &[])).unwrap();
    p.run();
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaWrite, 2560, QPN_A)]
    );
    let wcs = p.recv_completions(Dir::BtoA);
    assert_eq!(
        wcs.iter()
            .map(|w| (w.byte_len, w.imm_data))
            .collect::<Vec<_>>(),
        [(2560, Some(0x5eed))]
    );
    assert_delivered_once(&p, 2560);
    let a = p.a.counters();
    assert_eq!(
        (a.retransmitted_packets, a.timeouts),
        (2, 0),
        "102, then 109 after the RNR wait"
    );
}
