//! Atomics end to end: COMPARE_SWAP and FETCH_ADD through the wire layer, the original value in
//! the requester's buffer, duplicate atomics answered from the saved result, implied NAK for a
//! lost ATOMIC ACKNOWLEDGE, alignment and access errors, initiator depth and responder resources
//! shared with READs.

use super::*;
use crate::wire::AtomicEthRepr;

const KEY_A: u32 = 0xa3;
const KEY_B: u32 = 0xb3;
const BASE_A: u64 = 0x7000;
const BASE_B: u64 = 0x30_0000;

fn pair_in(recovery: Recovery, access_b: Access) -> Pair {
    let mut p = Pair::new_in(recovery, Mtu::Mtu256, 3000, 40);
    p.mem_a.add(KEY_A, BASE_A, 1024, Access::ALL, |_| 0);
    p.mem_b.add(KEY_B, BASE_B, 1024, access_b, pattern(3));
    p
}

fn pair() -> Pair {
    pair_in(Recovery::GoBackN, Access::ALL)
}

fn atomic(wr_id: u64, op: SendOpcode, local: u64, remote: u64) -> SendWqe {
    send_wqe(wr_id, op, &[sge(local, 8, KEY_A)], remote, KEY_B)
}

#[test]
fn fetch_add_and_compare_swap() {
    let mut p = pair();
    let initial = p.mem_b.u64_at(KEY_B, BASE_B);
    let add = 0x0102_0304_0506_0708;
    p.a.post_send(atomic(
        1,
        SendOpcode::AtomicFetchAndAdd { add },
        BASE_A,
        BASE_B,
    ))
    .unwrap();
    // Succeeds: the value is initial + add by then.
    p.a.post_send(atomic(
        2,
        SendOpcode::AtomicCmpAndSwp {
            compare: initial.wrapping_add(add),
            swap: 0xdead_beef,
        },
        BASE_A + 8,
        BASE_B,
    ))
    .unwrap();
    // Fails: compare does not match; nothing written.
    p.a.post_send(atomic(
        3,
        SendOpcode::AtomicCmpAndSwp {
            compare: 1,
            swap: 2,
        },
        BASE_A + 16,
        BASE_B,
    ))
    .unwrap();
    p.run();
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [
            ok_wc(1, WcOpcode::FetchAdd, 8, QPN_A),
            ok_wc(2, WcOpcode::CompSwap, 8, QPN_A),
            ok_wc(3, WcOpcode::CompSwap, 8, QPN_A)
        ]
    );
    // Original values, in native byte order, in the requester's buffers.
    assert_eq!(p.mem_a.u64_at(KEY_A, BASE_A), initial);
    assert_eq!(p.mem_a.u64_at(KEY_A, BASE_A + 8), initial.wrapping_add(add));
    assert_eq!(p.mem_a.u64_at(KEY_A, BASE_A + 16), 0xdead_beef);
    assert_eq!(p.mem_b.u64_at(KEY_B, BASE_B), 0xdead_beef);
    // Two writes (add, successful swap); the failed compare wrote nothing; neighbours untouched.
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B, 8)
        .iter()
        .all(|&c| c == 2));
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B + 8, 100)
        .iter()
        .all(|&c| c == 0));
    assert_eq!(p.b.msn(), 3);
    // On the wire: AtomicETH operands and one ATOMIC ACKNOWLEDGE per request, same PSN.
    let reqs: Vec<(Psn, AtomicEthRepr)> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::AtoB)
        .map(|(_, h, _)| (h.bth.psn, h.atomic_eth.unwrap()))
        .collect();
    assert_eq!(
        reqs,
        [
            (
                Psn::new(3000),
                AtomicEthRepr {
                    va: BASE_B,
                    rkey: KEY_B,
                    swap_add: add,
                    compare: 0
                }
            ),
            (
                Psn::new(3001),
                AtomicEthRepr {
                    va: BASE_B,
                    rkey: KEY_B,
                    swap_add: 0xdead_beef,
                    compare: initial.wrapping_add(add)
                }
            ),
            (
                Psn::new(3002),
                AtomicEthRepr {
                    va: BASE_B,
                    rkey: KEY_B,
                    swap_add: 2,
                    compare: 1
                }
            ),
        ]
    );
    let acks: Vec<(Opcode, Psn, Option<u64>, u32)> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::BtoA)
        .map(|(_, h, _)| (h.bth.opcode, h.bth.psn, h.atomic_ack, h.aeth.unwrap().msn))
        .collect();
    assert_eq!(
        acks,
        [
            (
                Opcode::RcAtomicAcknowledge,
                Psn::new(3000),
                Some(initial),
                1
            ),
            (
                Opcode::RcAtomicAcknowledge,
                Psn::new(3001),
                Some(initial.wrapping_add(add)),
                2
            ),
            (
                Opcode::RcAtomicAcknowledge,
                Psn::new(3002),
                Some(0xdead_beef),
                3
            ),
        ]
    );
    assert!(p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::AtoB)
        .all(|(_, h, _)| h.bth.ack_req));
}

#[test]
fn duplicate_atomic_is_answered_from_the_saved_result() {
    for recovery in [Recovery::GoBackN, Recovery::Selective] {
        let mut p = pair_in(recovery, Access::ALL);
        let initial = p.mem_b.u64_at(KEY_B, BASE_B);
        p.a.post_send(atomic(
            1,
            SendOpcode::AtomicFetchAndAdd { add: 7 },
            BASE_A,
            BASE_B,
        ))
        .unwrap();
        // Lose the first ATOMIC ACKNOWLEDGE: the requester times out and sends the atomic again.
        let mut dropped = false;
        p.run_with(10_000, |d, h, _| {
            if d == Dir::BtoA && h.bth.opcode == Opcode::RcAtomicAcknowledge && !dropped {
                dropped = true;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [ok_wc(1, WcOpcode::FetchAdd, 8, QPN_A)],
            "{recovery:?}"
        );
        // Executed once: the replay carried the saved original value.
        assert_eq!(p.mem_b.u64_at(KEY_B, BASE_B), initial.wrapping_add(7));
        assert!(p
            .mem_b
            .write_counts(KEY_B, BASE_B, 8)
            .iter()
            .all(|&c| c == 1));
        assert_eq!(p.mem_a.u64_at(KEY_A, BASE_A), initial);
        assert_eq!(p.a.counters().timeouts, 1);
        assert_eq!(p.b.counters().duplicate_requests, 1);
        assert_eq!(p.count(Dir::AtoB, Opcode::RcFetchAdd), 2);
        assert_eq!(p.count(Dir::BtoA, Opcode::RcAtomicAcknowledge), 2);
        assert_eq!(p.b.msn(), 1, "a replay is not a new message");
    }
}

#[test]
fn lost_atomic_ack_then_later_ack_is_an_implied_nak() {
    // Go-back-N resends the atomic and the WRITE behind it; selective repeat only the atomic.
    for (recovery, resent) in [(Recovery::GoBackN, 2), (Recovery::Selective, 1)] {
        let mut p = pair_in(recovery, Access::ALL);
        let initial = p.mem_b.u64_at(KEY_B, BASE_B);
        p.a.post_send(atomic(
            1,
            SendOpcode::AtomicFetchAndAdd { add: 1 },
            BASE_A,
            BASE_B,
        ))
        .unwrap();
        p.a.post_send(send_wqe(
            2,
            SendOpcode::RdmaWrite,
            &[sge(BASE_A + 64, 100, KEY_A)],
            BASE_B + 64,
            KEY_B,
        ))
        .unwrap();
        let t0 = p.now;
        let mut dropped = false;
        p.run_with(10_000, |d, h, _| {
            if d == Dir::BtoA && h.bth.opcode == Opcode::RcAtomicAcknowledge && !dropped {
                dropped = true;
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
        assert_eq!(p.now, t0, "{recovery:?}: no timer needed");
        assert_eq!(
            p.send_completions(Dir::AtoB),
            [
                ok_wc(1, WcOpcode::FetchAdd, 8, QPN_A),
                ok_wc(2, WcOpcode::RdmaWrite, 100, QPN_A)
            ]
        );
        assert_eq!(p.a.counters().implied_naks, 1);
        assert_eq!(p.a.counters().retransmitted_packets, resent, "{recovery:?}");
        assert_eq!(p.mem_b.u64_at(KEY_B, BASE_B), initial.wrapping_add(1));
        assert_eq!(p.mem_a.u64_at(KEY_A, BASE_A), initial);
        assert!(p
            .mem_b
            .write_counts(KEY_B, BASE_B, 8)
            .iter()
            .all(|&c| c == 1));
        assert!(p
            .mem_b
            .write_counts(KEY_B, BASE_B + 64, 100)
            .iter()
            .all(|&c| c == 1));
    }
}

#[test]
fn misaligned_atomic_is_an_invalid_request() {
    for off in [1u64, 4, 7] {
        let mut p = pair();
        let before = p.mem_b.bytes(KEY_B, BASE_B, 16).to_vec();
        p.a.post_send(atomic(
            1,
            SendOpcode::AtomicFetchAndAdd { add: 1 },
            BASE_A,
            BASE_B + off,
        ))
        .unwrap();
        p.a.post_send(send_wqe(
            2,
            SendOpcode::RdmaWrite,
            &[sge(BASE_A, 8, KEY_A)],
            BASE_B,
            KEY_B,
        ))
        .unwrap();
        p.run();
        assert_eq!(
            statuses(&p.send_completions(Dir::AtoB)),
            [(1, WcStatus::RemInvReqErr), (2, WcStatus::WrFlushErr)]
        );
        assert_eq!(p.mem_b.bytes(KEY_B, BASE_B, 16), &before[..]);
        assert!(p.mem_b.region(KEY_B).writes.iter().all(|&c| c == 0));
        assert!(p.mem_a.region(KEY_A).writes.iter().all(|&c| c == 0));
        assert_eq!(p.b.counters().naks_sent.invalid_request, 1);
        assert_eq!(p.a.counters().naks_received.invalid_request, 1);
        assert_eq!((p.a.state(), p.b.state()), (QpState::Error, QpState::Error));
    }
}

#[test]
fn atomic_access_violations() {
    let no_atomic = Access {
        remote_atomic: false,
        ..Access::ALL
    };
    // No REMOTE_ATOMIC on the region, wrong R_Key, past the region's end.
    for (access, rkey, va) in [
        (no_atomic, KEY_B, BASE_B),
        (Access::ALL, KEY_B + 1, BASE_B),
        (Access::ALL, KEY_B, BASE_B + 1024),
        (Access::ALL, KEY_B, BASE_B - 8),
    ] {
        let mut p = pair_in(Recovery::GoBackN, access);
        p.a.post_send(send_wqe(
            1,
            SendOpcode::AtomicCmpAndSwp {
                compare: 0,
                swap: 0,
            },
            &[sge(BASE_A, 8, KEY_A)],
            va,
            rkey,
        ))
        .unwrap();
        p.run();
        assert_eq!(
            statuses(&p.send_completions(Dir::AtoB)),
            [(1, WcStatus::RemAccessErr)]
        );
        assert!(p.mem_b.region(KEY_B).writes.iter().all(|&c| c == 0));
        assert_eq!(p.b.counters().naks_sent.remote_access, 1);
    }
}

#[test]
fn atomic_needs_an_8_byte_local_buffer() {
    let mut p = pair();
    for len in [0u32, 4, 16] {
        let w = send_wqe(
            1,
            SendOpcode::AtomicFetchAndAdd { add: 1 },
            &[sge(BASE_A, len, KEY_A)],
            BASE_B,
            KEY_B,
        );
        assert_eq!(p.a.post_send(w), Err(PostError::AtomicLength));
    }
    // Two SGEs adding up to 8 bytes are fine; the result is scattered over them.
    let initial = p.mem_b.u64_at(KEY_B, BASE_B);
    let w = send_wqe(
        2,
        SendOpcode::AtomicFetchAndAdd { add: 1 },
        &[sge(BASE_A, 3, KEY_A), sge(BASE_A + 100, 5, KEY_A)],
        BASE_B,
        KEY_B,
    );
    p.a.post_send(w).unwrap();
    p.run();
    let b = initial.to_ne_bytes();
    assert_eq!(p.mem_a.bytes(KEY_A, BASE_A, 3), &b[..3]);
    assert_eq!(p.mem_a.bytes(KEY_A, BASE_A + 100, 5), &b[3..]);
}

#[test]
fn initiator_depth_counts_reads_and_atomics() {
    let mut rts_a = rts(3000);
    rts_a.max_rd_atomic = 2;
    let mut p = Pair::with(
        rtr(QPN_A, QPN_B, Mtu::Mtu256, 40),
        rts_a,
        rtr(QPN_B, QPN_A, Mtu::Mtu256, 3000),
        rts(40),
    );
    p.mem_a.add(KEY_A, BASE_A, 1024, Access::ALL, |_| 0);
    p.mem_b.add(KEY_B, BASE_B, 1024, Access::ALL, pattern(3));
    let initial = p.mem_b.u64_at(KEY_B, BASE_B + 512);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A + 256, 300, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    for i in 0..3u64 {
        p.a.post_send(atomic(
            2 + i,
            SendOpcode::AtomicFetchAndAdd { add: 10 },
            BASE_A + 8 * i,
            BASE_B + 512,
        ))
        .unwrap();
    }
    p.a.post_send(send_wqe(
        5,
        SendOpcode::RdmaRead,
        &[sge(BASE_A + 600, 10, KEY_A)],
        BASE_B + 8,
        KEY_B,
    ))
    .unwrap();
    // A sends what it may before anything comes back: the READ and one atomic only.
    while p.transmit(Dir::AtoB) {}
    let ops: Vec<Opcode> = p.trace.iter().map(|(_, h, _)| h.bth.opcode).collect();
    assert_eq!(ops, [Opcode::RcRdmaReadRequest, Opcode::RcFetchAdd]);
    p.run();
    let wcs = p.send_completions(Dir::AtoB);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.opcode)).collect::<Vec<_>>(),
        [
            (1, WcOpcode::RdmaRead),
            (2, WcOpcode::FetchAdd),
            (3, WcOpcode::FetchAdd),
            (4, WcOpcode::FetchAdd),
            (5, WcOpcode::RdmaRead)
        ]
    );
    for i in 0..3u64 {
        assert_eq!(
            p.mem_a.u64_at(KEY_A, BASE_A + 8 * i),
            initial.wrapping_add(10 * i)
        );
    }
    assert_eq!(
        p.mem_b.u64_at(KEY_B, BASE_B + 512),
        initial.wrapping_add(30)
    );
    // Never more than 2 READ/atomic requests unanswered: replay the trace.
    let mut outstanding = 0i32;
    for (d, h, _) in &p.trace {
        match (d, h.bth.opcode) {
            (Dir::AtoB, Opcode::RcRdmaReadRequest | Opcode::RcFetchAdd) => outstanding += 1,
            (Dir::BtoA, Opcode::RcAtomicAcknowledge)
            | (Dir::BtoA, Opcode::RcRdmaReadResponseLast)
            | (Dir::BtoA, Opcode::RcRdmaReadResponseOnly) => outstanding -= 1,
            _ => {}
        }
        assert!((0..=2).contains(&outstanding));
    }
}

#[test]
fn responder_resources_are_shared_by_reads_and_atomics() {
    // The requester may have 2 outstanding, the responder keeps 1: the atomic arriving while
    // the READ is still being answered exceeds the responder's resources.
    let mut rtr_b = rtr(QPN_B, QPN_A, Mtu::Mtu256, 3000);
    rtr_b.max_dest_rd_atomic = 1;
    let mut p = Pair::with(
        rtr(QPN_A, QPN_B, Mtu::Mtu256, 40),
        rts(3000),
        rtr_b,
        rts(40),
    );
    p.mem_a.add(KEY_A, BASE_A, 1024, Access::ALL, |_| 0);
    p.mem_b.add(KEY_B, BASE_B, 1024, Access::ALL, pattern(3));
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A + 256, 600, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.a.post_send(atomic(
        2,
        SendOpcode::AtomicFetchAndAdd { add: 1 },
        BASE_A,
        BASE_B + 1000,
    ))
    .unwrap();
    while p.transmit(Dir::AtoB) {}
    // B receives both before answering anything.
    while let Some(pkt) = p.a_to_b.pop_front() {
        p.deliver(Dir::AtoB, &pkt);
    }
    p.run();
    assert_eq!(
        statuses(&p.send_completions(Dir::AtoB)),
        [(1, WcStatus::WrFlushErr), (2, WcStatus::RemInvReqErr)]
    );
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B + 1000, 8)
        .iter()
        .all(|&c| c == 0));
    assert_eq!(p.b.counters().naks_sent.invalid_request, 1);
}
