//! End-to-end credits (IBTA vol. 1 §9.7.7.2): the responder's ACKs advertise its posted
//! receive WQEs, and the requester starts a SEND or WRITE with immediate only within them plus
//! one probing message; WRITEs and READs never wait; rxe's code 0x1F lifts the limit.

use super::*;
use crate::wire::Syndrome;

const KEY_A: u32 = 0xa1;
const KEY_B: u32 = 0xb1;
const BASE_A: u64 = 0x1000;
const BASE_B: u64 = 0x9000;

fn pair_in(recovery: Recovery) -> Pair {
    let mut p = Pair::new_in(recovery, Mtu::Mtu256, 100, 7000);
    p.mem_a.add(KEY_A, BASE_A, 8192, Access::ALL, pattern(4));
    p.mem_b.add(KEY_B, BASE_B, 8192, Access::ALL, |_| 0);
    p
}

fn send(p: &mut Pair, i: u64) {
    p.a.post_send(send_wqe(
        i,
        SendOpcode::Send,
        &[sge(BASE_A + 100 * i, 100, KEY_A)],
        0,
        0,
    ))
    .unwrap();
}

fn recv(p: &mut Pair, i: u64) {
    p.b.post_recv(recv_wqe(i, &[sge(BASE_B + 100 * i, 100, KEY_B)]))
        .unwrap();
}

/// Packets A has ready now, moved onto the link.
fn burst(p: &mut Pair) -> usize {
    let mut n = 0;
    while p.transmit(Dir::AtoB) {
        n += 1;
    }
    n
}

/// The syndrome of the last packet B sent.
fn last_syndrome(p: &Pair) -> Syndrome {
    let (_, h, _) = p
        .trace
        .iter()
        .rev()
        .find(|(d, _, _)| *d == Dir::BtoA)
        .expect("B answered");
    h.aeth.expect("an AETH").syndrome
}

#[test]
fn sends_wait_for_credits_and_one_message_probes() {
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let mut p = pair_in(recovery);
        recv(&mut p, 0);
        recv(&mut p, 1);
        send(&mut p, 0);
        p.settle();
        // MSN 1, one receive WQE left: credit code 1.
        assert_eq!(
            last_syndrome(&p),
            Syndrome::Ack { credit: 1 },
            "{recovery:?}"
        );
        for i in 1..6 {
            send(&mut p, i);
        }
        // The credited SEND and one beyond it; the other three wait.
        assert_eq!(burst(&mut p), 2, "{recovery:?}");
        p.settle();
        assert_eq!(p.a.counters().naks_received.rnr, 1, "{recovery:?}");
        assert_eq!(p.b.counters().out_of_sequence_requests, 0, "{recovery:?}");
        for i in 2..6 {
            recv(&mut p, i);
        }
        p.run();
        let done = statuses(&p.send_completions(Dir::AtoB));
        assert_eq!(
            done,
            (0..6).map(|i| (i, WcStatus::Success)).collect::<Vec<_>>(),
            "{recovery:?}"
        );
        assert_eq!(p.recv_completions(Dir::BtoA).len(), 6, "{recovery:?}");
        assert_eq!(
            p.mem_b.bytes(KEY_B, BASE_B, 600),
            p.mem_a.bytes(KEY_A, BASE_A, 600),
            "{recovery:?}"
        );
        // One stall: SEND 3 (4 and 5 behind it) waited until the ACK after the RNR wait.
        assert_eq!(p.a.counters().credit_waits, 1, "{recovery:?}");
        // Only the probing SEND was sent twice; one RNR NAK in all.
        assert_eq!(p.a.counters().retransmitted_packets, 1, "{recovery:?}");
        assert_eq!(p.a.counters().naks_received.rnr, 1, "{recovery:?}");
        assert_eq!(p.a.counters().timeouts, 0, "{recovery:?}");
    }
}

#[test]
fn writes_do_not_wait_for_credits_and_split_writes_count_per_packet() {
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let mut p = pair_in(recovery);
        let write = |p: &mut Pair, id: u64, imm: bool| {
            let op = if imm {
                SendOpcode::RdmaWriteWithImm
            } else {
                SendOpcode::RdmaWrite
            };
            p.a.post_send(send_wqe(
                id,
                op,
                &[sge(BASE_A, 600, KEY_A)],
                BASE_B + 1024 * id,
                KEY_B,
            ))
            .unwrap();
        };
        recv(&mut p, 0);
        // A 3-packet WRITE: one message, or three RDMA_WRITE_ONLY messages in selective repeat.
        write(&mut p, 0, false);
        p.settle();
        let msn = if recovery == Recovery::Selective {
            3
        } else {
            1
        };
        let (_, ack, _) = *p.trace.last().unwrap();
        assert_eq!(ack.aeth.unwrap().msn, msn, "{recovery:?}");
        assert_eq!(
            last_syndrome(&p),
            Syndrome::Ack { credit: 1 },
            "{recovery:?}"
        );
        // Credits 1 after that MSN: WRITEs go whatever the credits, the first WRITE with
        // immediate uses the receive WQE, the second probes, the third waits.
        write(&mut p, 1, false);
        write(&mut p, 2, true);
        write(&mut p, 3, true);
        write(&mut p, 4, true);
        write(&mut p, 5, false);
        assert_eq!(burst(&mut p), 9, "{recovery:?}");
        assert_eq!(
            p.a.counters().credit_waits,
            1,
            "{recovery:?}: the third one"
        );
        recv(&mut p, 1);
        recv(&mut p, 2);
        p.run();
        assert_eq!(p.send_completions(Dir::AtoB).len(), 6, "{recovery:?}");
        assert_eq!(p.recv_completions(Dir::BtoA).len(), 3, "{recovery:?}");
        assert!(
            p.a.counters().naks_received.rnr <= 1,
            "{recovery:?}: only the probe may meet an empty receive queue"
        );
    }
}

#[test]
fn rxe_unlimited_code_lifts_the_limit() {
    for unlimited in [false, true] {
        let mut p = pair_in(Recovery::GoBackN);
        recv(&mut p, 0);
        send(&mut p, 0);
        assert!(p.transmit(Dir::AtoB));
        let pkt = p.a_to_b.pop_front().unwrap();
        p.deliver(Dir::AtoB, &pkt);
        assert!(p.transmit(Dir::BtoA));
        let ack = p.b_to_a.pop_front().unwrap();
        let (mut hdr, payload) = parse(&ack);
        assert_eq!(hdr.aeth.unwrap().syndrome, Syndrome::Ack { credit: 0 });
        if unlimited {
            // What kernel rxe sends on every ACK.
            hdr.aeth.as_mut().unwrap().syndrome = Syndrome::ACK_UNLIMITED;
        }
        p.a.handle_packet(p.now, &hdr, payload, &mut p.mem_a);
        for i in 1..5 {
            send(&mut p, i);
        }
        let expect = if unlimited { 4 } else { 1 };
        assert_eq!(burst(&mut p), expect, "unlimited {unlimited}");
    }
}

#[test]
fn a_late_ack_does_not_lower_the_limit() {
    let mut p = pair_in(Recovery::GoBackN);
    for i in 0..4 {
        recv(&mut p, i);
    }
    send(&mut p, 0);
    send(&mut p, 1);
    assert_eq!(burst(&mut p), 2);
    for _ in 0..2 {
        let pkt = p.a_to_b.pop_front().unwrap();
        p.deliver(Dir::AtoB, &pkt);
    }
    // B coalesces: one ACK (MSN 2, two receive WQEs left). Kept, delivered after a newer one.
    assert!(p.transmit(Dir::BtoA));
    let old = p.b_to_a.pop_front().unwrap();
    for i in 4..8 {
        recv(&mut p, i);
    }
    send(&mut p, 2);
    assert_eq!(burst(&mut p), 1, "no ACK seen yet: no limit");
    p.settle();
    // Now MSN 3 with five receive WQEs: limit recv_seq 3 + 4 (credit code for 5) = 7.
    let (_, h, _) = *p.trace.last().unwrap();
    assert_eq!(h.aeth.unwrap().msn, 3);
    let (hdr, payload) = parse(&old);
    assert_eq!(hdr.aeth.unwrap().msn, 2);
    p.a.handle_packet(p.now, &hdr, payload, &mut p.mem_a);
    for i in 3..12 {
        send(&mut p, i);
    }
    // Receive sequence numbers 3..=7: the late ACK (limit 2 + 2 = 4) changed nothing.
    assert_eq!(burst(&mut p), 5);
}

#[test]
fn an_rnr_nak_resends_the_whole_send_without_a_timeout() {
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let mut p = pair_in(recovery);
        // Three packets at PMTU 256, no receive WQE at B: RNR NAK for the first, the other
        // two dropped (a SEND packet cannot be held without its WQE).
        p.a.post_send(send_wqe(
            9,
            SendOpcode::Send,
            &[sge(BASE_A, 600, KEY_A)],
            0,
            0,
        ))
        .unwrap();
        p.settle();
        assert_eq!(p.a.counters().naks_received.rnr, 1, "{recovery:?}");
        p.b.post_recv(recv_wqe(1, &[sge(BASE_B, 600, KEY_B)]))
            .unwrap();
        p.run();
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [ok_wc(9, WcOpcode::Send, 600, QPN_A)],
            "{recovery:?}"
        );
        assert_eq!(
            p.mem_b.bytes(KEY_B, BASE_B, 600),
            p.mem_a.bytes(KEY_A, BASE_A, 600),
            "{recovery:?}"
        );
        let c = p.a.counters();
        assert_eq!(
            c.timeouts, 0,
            "{recovery:?}: resent after the RNR wait, not the timer"
        );
        assert_eq!(c.retransmitted_packets, 3, "{recovery:?}");
    }
}
