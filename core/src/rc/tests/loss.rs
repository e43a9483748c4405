//! Loss and recovery: PSN sequence NAK and go-back-N, timer retransmission with duplicate
//! re-ACKs, READ replay, implied NAK, retry exhaustion, RNR NAK handling.

use super::*;

const KEY_A: u32 = 0xa1;
const KEY_B: u32 = 0xb1;
const BASE_A: u64 = 0x1000;
const BASE_B: u64 = 0x9000;

fn pair(mtu: Mtu, len: usize) -> Pair {
    let mut p = Pair::new(mtu, 100, 7000);
    p.mem_a.add(KEY_A, BASE_A, len, Access::ALL, pattern(5));
    p.mem_b.add(KEY_B, BASE_B, len, Access::ALL, pattern(6));
    p
}

/// A link policy that drops, among packets matching `pred`, the first one of each direction and
/// PSN.
fn drop_first(
    mut pred: impl FnMut(Dir, &TransportRepr) -> bool,
) -> impl FnMut(Dir, &TransportRepr, &[u8]) -> Fate {
    let mut seen: Vec<(Dir, u32)> = Vec::new();
    move |dir, h, _| {
        let key = (dir, h.bth.psn.value());
        if pred(dir, h) && !seen.contains(&key) {
            seen.push(key);
            Fate::Drop
        } else {
            Fate::Deliver
        }
    }
}

#[test]
fn dropped_request_psn_nak_go_back_n() {
    let mut p = pair(Mtu::Mtu256, 10 * 256);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 10 * 256, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    let t0 = p.now;
    p.run_with(
        10_000,
        drop_first(|d, h| d == Dir::AtoB && h.bth.psn == Psn::new(102)),
    );
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaWrite, 2560, QPN_A)]
    );
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, 2560),
        p.mem_a.bytes(KEY_A, BASE_A, 2560)
    );
    assert!(
        p.mem_b
            .write_counts(KEY_B, BASE_B, 2560)
            .iter()
            .all(|&c| c == 1),
        "each byte written once"
    );
    let (a, b) = (p.a.counters(), p.b.counters());
    // One NAK carrying ePSN 102; the 7 later packets are dropped silently.
    assert_eq!(b.naks_sent.psn_sequence, 1);
    assert_eq!(b.out_of_sequence_requests, 7);
    assert_eq!(a.naks_received.psn_sequence, 1);
    assert_eq!(a.retransmitted_packets, 8, "go-back-N resends 102..=109");
    assert_eq!(a.timeouts, 0);
    assert_eq!(p.now, t0, "recovered without waiting for the timer");
    let nak = p
        .trace
        .iter()
        .find(|(d, h, _)| *d == Dir::BtoA && h.aeth.unwrap().syndrome.is_nak())
        .unwrap();
    assert_eq!(nak.1.bth.psn, Psn::new(102));
    assert_eq!(u8::from(nak.1.aeth.unwrap().syndrome), 0x60);
    assert_eq!(nak.1.aeth.unwrap().msn, 0);
}

#[test]
fn dropped_ack_timer_retransmit_is_not_reexecuted() {
    let mut p = pair(Mtu::Mtu256, 4096);
    p.b.post_recv(recv_wqe(50, &[sge(BASE_B + 2048, 2048, KEY_B)]))
        .unwrap();
    p.a.post_send(send_wqe(
        1,
        SendOpcode::Send,
        &[sge(BASE_A, 700, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        2,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A + 1024, 400, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    let t0 = p.now;
    // Drop every ACK of the first round.
    p.run_with(10_000, drop_first(|d, _| d == Dir::BtoA));
    let timeout = ack_timeout_ns(10).unwrap();
    assert!(
        p.now.0 >= t0.0 + timeout,
        "recovery waited for the retransmit timer"
    );
    assert_eq!(p.a.counters().timeouts, 1);
    assert_eq!(p.a.counters().retransmitted_packets, 5);
    assert_eq!(p.b.counters().duplicate_requests, 5);
    // Executed once: one receive completion, every byte written once.
    assert_eq!(p.recv_completions(Dir::BtoA).len(), 1);
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B + 2048, 700)
        .iter()
        .all(|&c| c == 1));
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B, 400)
        .iter()
        .all(|&c| c == 1));
    assert_eq!(p.b.msn(), 2);
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [
            ok_wc(1, WcOpcode::Send, 700, QPN_A),
            ok_wc(2, WcOpcode::RdmaWrite, 400, QPN_A)
        ]
    );
    // Duplicates were re-ACKed with ePSN - 1 = 104.
    let last = p
        .trace
        .iter()
        .rev()
        .find(|(d, _, _)| *d == Dir::BtoA)
        .unwrap();
    assert_eq!(last.1.bth.psn, Psn::new(104));
    assert_eq!(last.1.aeth.unwrap().msn, 2);
}

#[test]
fn duplicate_read_replays_whole_response() {
    let mut p = pair(Mtu::Mtu512, 4096);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 2000, KEY_A)],
        BASE_B + 10,
        KEY_B,
    ))
    .unwrap();
    // Lose every response of the first round.
    p.run_with(10_000, drop_first(|d, _| d == Dir::BtoA));
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaRead, 2000, QPN_A)]
    );
    assert_eq!(
        p.mem_a.bytes(KEY_A, BASE_A, 2000),
        p.mem_b.bytes(KEY_B, BASE_B + 10, 2000)
    );
    assert!(p
        .mem_a
        .write_counts(KEY_A, BASE_A, 2000)
        .iter()
        .all(|&c| c == 1));
    assert_eq!(p.a.counters().timeouts, 1);
    assert_eq!(p.b.counters().duplicate_requests, 1);
    assert_eq!(p.count(Dir::AtoB, Opcode::RcRdmaReadRequest), 2);
    assert_eq!(p.count(Dir::BtoA, Opcode::RcRdmaReadResponseFirst), 2);
    assert_eq!(p.b.msn(), 1, "a replay is not a new message");
}

#[test]
fn lost_middle_read_response_reissues_the_tail() {
    let mut p = pair(Mtu::Mtu256, 4096);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 1000, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    // 4 responses, PSN 100..=103: lose 101 once.
    p.run_with(
        10_000,
        drop_first(|d, h| d == Dir::BtoA && h.bth.psn == Psn::new(101)),
    );
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaRead, 1000, QPN_A)]
    );
    assert_eq!(
        p.mem_a.bytes(KEY_A, BASE_A, 1000),
        p.mem_b.bytes(KEY_B, BASE_B, 1000)
    );
    assert!(p
        .mem_a
        .write_counts(KEY_A, BASE_A, 1000)
        .iter()
        .all(|&c| c == 1));
    // The retry asks for the tail: PSN 101, VA + 256, 744 bytes.
    let reqs: Vec<_> = p
        .trace
        .iter()
        .filter(|(d, h, _)| *d == Dir::AtoB && h.bth.opcode == Opcode::RcRdmaReadRequest)
        .map(|(_, h, _)| (h.bth.psn.value(), h.reth.unwrap()))
        .collect();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[1].0, 101);
    assert_eq!((reqs[1].1.va, reqs[1].1.dma_len), (BASE_B + 256, 744));
    // The replay starts with FIRST at PSN 101.
    let replay: Vec<_> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::BtoA)
        .skip(4)
        .map(|(_, h, _)| (h.bth.psn.value(), h.bth.opcode))
        .collect();
    assert_eq!(
        replay,
        [
            (101, Opcode::RcRdmaReadResponseFirst),
            (102, Opcode::RcRdmaReadResponseMiddle),
            (103, Opcode::RcRdmaReadResponseLast)
        ]
    );
}

#[test]
fn ack_past_incomplete_read_is_an_implied_nak() {
    let mut p = pair(Mtu::Mtu256, 4096);
    p.b.post_recv(recv_wqe(9, &[sge(BASE_B + 2048, 100, KEY_B)]))
        .unwrap();
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 600, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        2,
        SendOpcode::Send,
        &[sge(BASE_A + 1024, 50, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    let t0 = p.now;
    p.run_with(
        10_000,
        drop_first(|d, h| d == Dir::BtoA && h.bth.opcode.is_read_response()),
    );
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [
            ok_wc(1, WcOpcode::RdmaRead, 600, QPN_A),
            ok_wc(2, WcOpcode::Send, 50, QPN_A)
        ]
    );
    assert_eq!(p.a.counters().implied_naks, 1);
    assert_eq!(p.a.counters().timeouts, 0);
    assert_eq!(p.now, t0);
    assert_eq!(
        p.recv_completions(Dir::BtoA).len(),
        1,
        "the SEND executed once"
    );
}

#[test]
fn retry_exhaustion_then_flush() {
    let mut p = pair(Mtu::Mtu1024, 4096);
    let mut cfg = rts(100);
    cfg.retry_cnt = 3;
    cfg.timeout = 8;
    p.a = Qp::new(rtr(QPN_A, QPN_B, Mtu::Mtu1024, 7000));
    p.a.to_rts(cfg);
    for i in 0..3 {
        p.a.post_send(send_wqe(
            i,
            SendOpcode::RdmaWrite,
            &[sge(BASE_A, 100, KEY_A)],
            BASE_B,
            KEY_B,
        ))
        .unwrap();
    }
    let t0 = p.now;
    p.run_with(10_000, |d, _, _| {
        if d == Dir::AtoB {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let wcs = p.send_completions(Dir::AtoB);
    let st = statuses(&wcs);
    assert_eq!(
        st,
        [
            (0, WcStatus::RetryExcErr),
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.a.state(), QpState::Error);
    let c = p.a.counters();
    assert_eq!((c.timeouts, c.retries), (4, 3));
    // 3 original packets, then 3 retries of all 3.
    assert_eq!(c.tx_packets, 12);
    assert_eq!(p.now.0 - t0.0, 4 * ack_timeout_ns(8).unwrap());
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B, 100)
        .iter()
        .all(|&c| c == 0));
}

#[test]
fn rnr_nak_waits_then_succeeds() {
    let mut p = pair(Mtu::Mtu256, 4096);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::Send,
        &[sge(BASE_A, 500, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    assert!(p.transmit(Dir::AtoB) && p.transmit(Dir::AtoB));
    for _ in 0..2 {
        let pkt = p.a_to_b.pop_front().unwrap();
        p.deliver(Dir::AtoB, &pkt);
    }
    // One RNR NAK for PSN 100 (min_rnr_timer 1 = 10 µs); PSN 101 dropped silently.
    assert!(p.transmit(Dir::BtoA));
    assert!(!p.transmit(Dir::BtoA));
    let (_, nak, _) = *p.trace.last().unwrap();
    assert_eq!(nak.bth.psn, Psn::new(100));
    assert_eq!(u8::from(nak.aeth.unwrap().syndrome), 0x21);
    assert_eq!(p.b.counters().out_of_sequence_requests, 1);
    let pkt = p.b_to_a.pop_front().unwrap();
    p.deliver(Dir::BtoA, &pkt);
    assert_eq!(p.a.next_deadline(), Some(p.now.add_nanos(10_000)));
    assert!(
        !p.transmit(Dir::AtoB),
        "nothing is sent during the RNR wait"
    );
    p.a.handle_timeout(p.now.add_nanos(9_999));
    assert!(!p.transmit(Dir::AtoB));
    p.b.post_recv(recv_wqe(7, &[sge(BASE_B, 600, KEY_B)]))
        .unwrap();
    p.run();
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::Send, 500, QPN_A)]
    );
    assert_eq!(p.recv_completions(Dir::BtoA)[0].byte_len, 500);
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, 500),
        p.mem_a.bytes(KEY_A, BASE_A, 500)
    );
    assert_eq!(
        p.b.counters().naks_sent,
        NakCounters {
            rnr: 1,
            ..Default::default()
        }
    );
    assert_eq!(p.a.counters().naks_received.rnr, 1);
    assert_eq!(p.a.counters().timeouts, 0);
}

#[test]
fn rnr_on_write_with_immediate_and_infinite_retry() {
    let mut p = pair(Mtu::Mtu256, 4096);
    let mut w = send_wqe(
        1,
        SendOpcode::RdmaWriteWithImm,
        &[sge(BASE_A, 600, KEY_A)],
        BASE_B,
        KEY_B,
    );
    w.imm = 42;
    p.a.post_send(w).unwrap();
    // rnr_retry = 7 is infinite: 20 RNR NAKs, each for the LAST packet (PSN 102) only.
    for round in 1..=20u64 {
        p.settle();
        assert_eq!(p.a.counters().naks_received.rnr, round);
        assert_eq!(p.a.state(), QpState::Rts);
        assert!(p.fire_timer());
    }
    p.b.post_recv(recv_wqe(3, &[])).unwrap();
    p.run();
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaWrite, 600, QPN_A)]
    );
    assert_eq!(
        p.recv_completions(Dir::BtoA),
        [WorkCompletion {
            wr_id: 3,
            status: WcStatus::Success,
            opcode: WcOpcode::RecvRdmaWithImm,
            byte_len: 600,
            imm_data: Some(42),
            qp_num: QPN_B
        }]
    );
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B, 600)
        .iter()
        .all(|&c| c == 1));
    let resent: Vec<u32> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::AtoB)
        .map(|(_, h, _)| h.bth.psn.value())
        .collect();
    assert_eq!(&resent[..3], [100, 101, 102]);
    assert!(resent[3..].iter().all(|&x| x == 102));
}

#[test]
fn rnr_retry_exhaustion() {
    let mut p = pair(Mtu::Mtu256, 4096);
    let mut cfg = rts(100);
    cfg.rnr_retry = 2;
    p.a = Qp::new(rtr(QPN_A, QPN_B, Mtu::Mtu256, 7000));
    p.a.to_rts(cfg);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::Send,
        &[sge(BASE_A, 10, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        2,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 10, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.run();
    let st = statuses(&p.send_completions(Dir::AtoB));
    assert_eq!(
        st,
        [(1, WcStatus::RnrRetryExcErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(
        p.a.counters().naks_received.rnr,
        3,
        "initial try + 2 retries"
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(
        p.b.state(),
        QpState::Rts,
        "RNR is not an error for the responder"
    );
}

#[test]
fn stale_duplicate_read_does_not_block_new_reads() {
    // max_dest_rd_atomic = 4: the fifth READ reuses the resource of the first.
    let mut p = pair(Mtu::Mtu256, 8192);
    p.a.post_send(send_wqe(
        0,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 300, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    assert!(p.transmit(Dir::AtoB));
    let first_read = p.a_to_b.front().unwrap().clone();
    p.settle();
    assert_eq!(p.send_completions(Dir::AtoB).len(), 1);
    // A late duplicate of the first READ arrives: B queues a replay but does not send it yet.
    p.deliver(Dir::AtoB, &first_read);
    for i in 1..=4u64 {
        let off = i * 1024;
        p.a.post_send(send_wqe(
            i,
            SendOpcode::RdmaRead,
            &[sge(BASE_A + off, 300, KEY_A)],
            BASE_B + off,
            KEY_B,
        ))
        .unwrap();
    }
    while p.transmit(Dir::AtoB) {}
    while let Some(pkt) = p.a_to_b.pop_front() {
        p.deliver(Dir::AtoB, &pkt);
    }
    p.run();
    let wcs = p.send_completions(Dir::AtoB);
    assert_eq!(wcs.len(), 4);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(p.b.state(), QpState::Rts);
    assert_eq!(p.b.counters().naks_sent, NakCounters::default());
    for i in 1..=4u64 {
        let off = i * 1024;
        assert_eq!(
            p.mem_a.bytes(KEY_A, BASE_A + off, 300),
            p.mem_b.bytes(KEY_B, BASE_B + off, 300)
        );
    }
}
