//! Lossless operation: segmentation, opcodes, headers, completions, MSN, PSN wrap, AckReq
//! cadence and the window.

use super::*;

const KEY_A: u32 = 0xa0;
const KEY_B: u32 = 0xb0;
const BASE_A: u64 = 0x10_0000;
const BASE_B: u64 = 0x80_0000;

fn sizes(mtu: Mtu) -> Vec<u32> {
    let m = mtu.bytes();
    vec![0, 1, 3, 255, m - 1, m, m + 1, 2 * m, 3 * m + 7, 10_000]
}

fn pair_with_memory(mtu: Mtu, len: usize) -> Pair {
    let mut p = Pair::new(mtu, 100, 5000);
    p.mem_a.add(KEY_A, BASE_A, len, Access::ALL, pattern(1));
    p.mem_b.add(KEY_B, BASE_B, len, Access::ALL, pattern(2));
    p
}

#[test]
fn write_every_size_and_mtu() {
    for mtu in Mtu::ALL {
        for len in sizes(mtu) {
            let mut p = pair_with_memory(mtu, 20_000);
            // Source split over two SGEs to exercise gathering.
            let half = len / 2;
            let sges = [
                sge(BASE_A, half, KEY_A),
                sge(BASE_A + half as u64, len - half, KEY_A),
            ];
            p.a.post_send(send_wqe(7, SendOpcode::RdmaWrite, &sges, BASE_B + 8, KEY_B))
                .unwrap();
            p.run();
            let want = p.mem_a.bytes(KEY_A, BASE_A, len as usize).to_vec();
            assert_eq!(
                p.mem_b.bytes(KEY_B, BASE_B + 8, len as usize),
                &want[..],
                "mtu {mtu:?} len {len}"
            );
            assert!(p
                .mem_b
                .write_counts(KEY_B, BASE_B + 8, len as usize)
                .iter()
                .all(|&c| c == 1));
            assert!(p
                .mem_b
                .write_counts(KEY_B, BASE_B, 8)
                .iter()
                .all(|&c| c == 0));
            assert_eq!(
                p.send_completions(Dir::AtoB),
                [ok_wc(7, WcOpcode::RdmaWrite, len, QPN_A)]
            );
            // Packet count and opcode sequence.
            let n = mtu.packets(len) as usize;
            let reqs: Vec<_> = p.trace.iter().filter(|(d, _, _)| *d == Dir::AtoB).collect();
            assert_eq!(reqs.len(), n);
            for (i, (_, h, plen)) in reqs.iter().enumerate() {
                assert_eq!(h.bth.psn, Psn::new(100 + i as u32));
                assert_eq!(h.bth.dest_qp, QPN_B);
                assert_eq!(h.bth.pkey, 0xffff);
                let op = h.bth.opcode;
                let expect = match (i == 0, i + 1 == n) {
                    (true, true) => Opcode::RcRdmaWriteOnly,
                    (true, false) => Opcode::RcRdmaWriteFirst,
                    (false, false) => Opcode::RcRdmaWriteMiddle,
                    (false, true) => Opcode::RcRdmaWriteLast,
                };
                assert_eq!(op, expect);
                assert_eq!(h.reth.is_some(), i == 0);
                if let Some(r) = h.reth {
                    assert_eq!((r.va, r.rkey, r.dma_len), (BASE_B + 8, KEY_B, len));
                }
                assert_eq!(*plen as u32, mtu.segment_len(len, i as u32));
                assert_eq!(h.bth.ack_req, i + 1 == n);
            }
            // One ACK, for the last PSN, MSN 1.
            let acks: Vec<_> = p.trace.iter().filter(|(d, _, _)| *d == Dir::BtoA).collect();
            assert_eq!(acks.len(), 1);
            assert_eq!(acks[0].1.bth.opcode, Opcode::RcAcknowledge);
            assert_eq!(acks[0].1.bth.psn, Psn::new(100 + n as u32 - 1));
            assert_eq!(acks[0].1.aeth.unwrap().msn, 1);
            // Credit code 0: B has no receive WQE posted (IBTA vol. 1 §9.7.7.2).
            assert_eq!(u8::from(acks[0].1.aeth.unwrap().syndrome), 0x00);
        }
    }
}

#[test]
fn send_every_size_and_mtu() {
    for mtu in Mtu::ALL {
        for len in sizes(mtu) {
            let mut p = pair_with_memory(mtu, 20_000);
            // Receive buffer in three SGEs, larger than the message.
            let r = [
                sge(BASE_B, 1, KEY_B),
                sge(BASE_B + 100, 3000, KEY_B),
                sge(BASE_B + 3200, 15000, KEY_B),
            ];
            p.b.post_recv(recv_wqe(99, &r)).unwrap();
            let mut w = send_wqe(5, SendOpcode::Send, &[sge(BASE_A, len, KEY_A)], 0, 0);
            w.solicited = true;
            p.a.post_send(w).unwrap();
            p.run();
            let src = p.mem_a.bytes(KEY_A, BASE_A, len as usize).to_vec();
            let mut got = Vec::new();
            got.extend_from_slice(p.mem_b.bytes(KEY_B, BASE_B, 1));
            got.extend_from_slice(p.mem_b.bytes(KEY_B, BASE_B + 100, 3000));
            got.extend_from_slice(p.mem_b.bytes(KEY_B, BASE_B + 3200, 15000));
            assert_eq!(&got[..len as usize], &src[..], "mtu {mtu:?} len {len}");
            assert_eq!(
                p.recv_completions(Dir::BtoA),
                [WorkCompletion {
                    wr_id: 99,
                    status: WcStatus::Success,
                    opcode: WcOpcode::Recv,
                    byte_len: len,
                    imm_data: None,
                    qp_num: QPN_B
                }]
            );
            assert_eq!(
                p.send_completions(Dir::AtoB),
                [ok_wc(5, WcOpcode::Send, len, QPN_A)]
            );
            let reqs: Vec<_> = p.trace.iter().filter(|(d, _, _)| *d == Dir::AtoB).collect();
            let n = reqs.len();
            assert_eq!(n as u32, mtu.packets(len));
            for (i, (_, h, _)) in reqs.iter().enumerate() {
                assert!(h.bth.opcode.is_send());
                assert!(h.reth.is_none() && h.imm.is_none());
                assert_eq!(h.bth.solicited, i + 1 == n, "SE only on the last packet");
            }
        }
    }
}

#[test]
fn read_every_size_and_mtu() {
    for mtu in Mtu::ALL {
        for len in sizes(mtu) {
            let mut p = pair_with_memory(mtu, 20_000);
            let sges = [
                sge(BASE_A + 4, len / 3, KEY_A),
                sge(BASE_A + 5000, len - len / 3, KEY_A),
            ];
            p.a.post_send(send_wqe(3, SendOpcode::RdmaRead, &sges, BASE_B + 16, KEY_B))
                .unwrap();
            p.run();
            let src = p.mem_b.bytes(KEY_B, BASE_B + 16, len as usize).to_vec();
            let mut got = p
                .mem_a
                .bytes(KEY_A, BASE_A + 4, (len / 3) as usize)
                .to_vec();
            got.extend_from_slice(
                p.mem_a
                    .bytes(KEY_A, BASE_A + 5000, (len - len / 3) as usize),
            );
            assert_eq!(got, src, "mtu {mtu:?} len {len}");
            assert_eq!(
                p.send_completions(Dir::AtoB),
                [ok_wc(3, WcOpcode::RdmaRead, len, QPN_A)]
            );
            // One request, reserving n PSNs; n responses with consecutive PSNs.
            let n = mtu.packets(len);
            assert_eq!(p.count(Dir::AtoB, Opcode::RcRdmaReadRequest), 1);
            let req = &p.trace.iter().find(|(d, _, _)| *d == Dir::AtoB).unwrap().1;
            assert!(req.bth.ack_req);
            assert_eq!(req.reth.unwrap().dma_len, len);
            let resp: Vec<_> = p.trace.iter().filter(|(d, _, _)| *d == Dir::BtoA).collect();
            assert_eq!(resp.len() as u32, n);
            for (i, (_, h, plen)) in resp.iter().enumerate() {
                let i = i as u32;
                assert_eq!(h.bth.psn, Psn::new(100 + i));
                let expect = match (i == 0, i + 1 == n) {
                    (true, true) => Opcode::RcRdmaReadResponseOnly,
                    (true, false) => Opcode::RcRdmaReadResponseFirst,
                    (false, false) => Opcode::RcRdmaReadResponseMiddle,
                    (false, true) => Opcode::RcRdmaReadResponseLast,
                };
                assert_eq!(h.bth.opcode, expect);
                assert_eq!(h.aeth.is_some(), expect != Opcode::RcRdmaReadResponseMiddle);
                if let Some(a) = h.aeth {
                    assert_eq!(a.msn, 1, "MSN counted when the READ was accepted");
                }
                assert_eq!(*plen as u32, mtu.segment_len(len, i));
            }
            // The next request uses the PSN after the reserved ones.
            assert_eq!(p.a.sq_psn(), Psn::new(100 + n));
            assert_eq!(p.b.rq_psn(), Psn::new(100 + n));
        }
    }
}

#[test]
fn immediate_data_and_msn() {
    let mut p = pair_with_memory(Mtu::Mtu256, 4096);
    for i in 0..3 {
        p.b.post_recv(recv_wqe(200 + i, &[sge(BASE_B + 2048, 1024, KEY_B)]))
            .unwrap();
    }
    let mut s = send_wqe(1, SendOpcode::SendWithImm, &[sge(BASE_A, 600, KEY_A)], 0, 0);
    s.imm = 0xdead_beef;
    let mut w = send_wqe(
        2,
        SendOpcode::RdmaWriteWithImm,
        &[sge(BASE_A, 700, KEY_A)],
        BASE_B,
        KEY_B,
    );
    w.imm = 0x0102_0304;
    let mut w0 = send_wqe(3, SendOpcode::RdmaWriteWithImm, &[], BASE_B, KEY_B);
    w0.imm = 7;
    p.a.post_send(s).unwrap();
    p.a.post_send(w).unwrap();
    p.a.post_send(w0).unwrap();
    p.run();
    let rc = p.recv_completions(Dir::BtoA);
    assert_eq!(
        rc,
        [
            WorkCompletion {
                wr_id: 200,
                status: WcStatus::Success,
                opcode: WcOpcode::Recv,
                byte_len: 600,
                imm_data: Some(0xdead_beef),
                qp_num: QPN_B
            },
            WorkCompletion {
                wr_id: 201,
                status: WcStatus::Success,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: 700,
                imm_data: Some(0x0102_0304),
                qp_num: QPN_B
            },
            WorkCompletion {
                wr_id: 202,
                status: WcStatus::Success,
                opcode: WcOpcode::RecvRdmaWithImm,
                byte_len: 0,
                imm_data: Some(7),
                qp_num: QPN_B
            },
        ]
    );
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, 700),
        p.mem_a.bytes(KEY_A, BASE_A, 700)
    );
    assert_eq!(p.b.msn(), 3);
    // ImmDt only on the LAST/ONLY packets; RETH only on FIRST/ONLY.
    let imms: Vec<_> = p
        .trace
        .iter()
        .filter(|(d, h, _)| *d == Dir::AtoB && h.imm.is_some())
        .map(|(_, h, _)| h.bth.opcode)
        .collect();
    assert_eq!(
        imms,
        [
            Opcode::RcSendLastWithImmediate,
            Opcode::RcRdmaWriteLastWithImmediate,
            Opcode::RcRdmaWriteOnlyWithImmediate
        ]
    );
    // MSN in the ACKs grows per message.
    let msns: Vec<u32> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::BtoA)
        .map(|(_, h, _)| h.aeth.unwrap().msn)
        .collect();
    assert_eq!(msns, [1, 2, 3]);
    assert_eq!(p.send_completions(Dir::AtoB).len(), 3);
}

#[test]
fn psn_wraps_around_2_pow_24() {
    let start = (1 << 24) - 20;
    let mut p = Pair::new(Mtu::Mtu256, start, (1 << 24) - 3);
    p.mem_a
        .add(KEY_A, BASE_A, 40 * 256, Access::ALL, pattern(3));
    p.mem_b
        .add(KEY_B, BASE_B, 40 * 256, Access::ALL, pattern(4));
    // WRITE A→B across the wrap, then READ back across it again; B→A traffic wraps too.
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 40 * 256, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.run();
    assert_eq!(p.a.sq_psn(), Psn::new(20));
    assert_eq!(p.b.rq_psn(), Psn::new(20));
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, 40 * 256),
        p.mem_a.bytes(KEY_A, BASE_A, 40 * 256)
    );
    p.mem_b.regions[0]
        .data
        .iter_mut()
        .enumerate()
        .for_each(|(i, b)| *b = pattern(9)(i));
    p.a.post_send(send_wqe(
        2,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 30 * 256, KEY_A)],
        BASE_B + 256,
        KEY_B,
    ))
    .unwrap();
    for i in 0..4u32 {
        let off = i as u64 * 512;
        p.b.post_send(send_wqe(
            10 + i as u64,
            SendOpcode::RdmaWrite,
            &[sge(BASE_B + 8192 + off, 512, KEY_B)],
            BASE_A + 8192 + off,
            KEY_A,
        ))
        .unwrap();
    }
    p.run();
    assert_eq!(p.a.sq_psn(), Psn::new(50));
    assert_eq!(p.b.sq_psn(), Psn::new(5));
    assert_eq!(p.send_completions(Dir::AtoB).len(), 2);
    assert_eq!(p.send_completions(Dir::BtoA).len(), 4);
    assert_eq!(
        p.mem_a.bytes(KEY_A, BASE_A, 30 * 256),
        p.mem_b.bytes(KEY_B, BASE_B + 256, 30 * 256)
    );
    assert_eq!(
        p.mem_a.bytes(KEY_A, BASE_A + 8192, 2048),
        p.mem_b.bytes(KEY_B, BASE_B + 8192, 2048)
    );
    let psns: Vec<u32> = p
        .trace
        .iter()
        .filter(|(d, h, _)| *d == Dir::AtoB && h.bth.opcode.is_write())
        .map(|(_, h, _)| h.bth.psn.value())
        .collect();
    assert_eq!(psns[19], 0xff_ffff);
    assert_eq!(psns[20], 0);
}

#[test]
fn ack_req_cadence() {
    // 200 packets of 256 bytes: AckReq on every 64th packet and on the last.
    let mut p = pair_with_memory(Mtu::Mtu256, 200 * 256);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 200 * 256, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.run();
    let flagged: Vec<usize> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::AtoB)
        .enumerate()
        .filter(|(_, (_, h, _))| h.bth.ack_req)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(flagged, [63, 127, 191, 199]);
    // B ACKed exactly those PSNs.
    let acked: Vec<u32> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::BtoA)
        .map(|(_, h, _)| h.bth.psn.value() - 100)
        .collect();
    assert_eq!(acked, [63, 127, 191, 199]);
    // Several short messages: every last packet asks for an ACK.
    let mut p = pair_with_memory(Mtu::Mtu256, 4096);
    for i in 0..5 {
        p.a.post_send(send_wqe(
            i,
            SendOpcode::RdmaWrite,
            &[sge(BASE_A, 300, KEY_A)],
            BASE_B,
            KEY_B,
        ))
        .unwrap();
    }
    p.run();
    let flags: Vec<bool> = p
        .trace
        .iter()
        .filter(|(d, _, _)| *d == Dir::AtoB)
        .map(|(_, h, _)| h.bth.ack_req)
        .collect();
    assert_eq!(flags, [false, true].repeat(5));
}

#[test]
fn window_stalls_at_128_unacked_psns() {
    let mut p = pair_with_memory(Mtu::Mtu256, 300 * 256);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 300 * 256, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    // Nothing comes back: A sends exactly 128 packets, then stalls.
    let mut sent = 0;
    while p.transmit(Dir::AtoB) {
        sent += 1;
    }
    assert_eq!(sent, MAX_UNACKED_PSNS as usize);
    assert!(!p.transmit(Dir::AtoB));
    // Deliver the first 64 (the 64th asks for an ACK): the ACK opens the window by 64.
    for _ in 0..64 {
        let pkt = p.a_to_b.pop_front().unwrap();
        p.deliver(Dir::AtoB, &pkt);
    }
    assert!(p.transmit(Dir::BtoA));
    let ack = p.b_to_a.pop_front().unwrap();
    p.deliver(Dir::BtoA, &ack);
    assert_eq!(p.a.comp_psn(), Psn::new(164));
    let mut more = 0;
    while p.transmit(Dir::AtoB) {
        more += 1;
    }
    assert_eq!(more, 64);
    p.run();
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(1, WcOpcode::RdmaWrite, 300 * 256, QPN_A)]
    );
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B, 300 * 256)
        .iter()
        .all(|&c| c == 1));
}

#[test]
fn unsignaled_completions() {
    let mut p = pair_with_memory(Mtu::Mtu1024, 4096);
    for i in 0..4u64 {
        let mut w = send_wqe(
            i,
            SendOpcode::RdmaWrite,
            &[sge(BASE_A, 100, KEY_A)],
            BASE_B,
            KEY_B,
        );
        w.signaled = i % 2 == 1;
        p.a.post_send(w).unwrap();
    }
    let mut r = send_wqe(
        9,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 100, KEY_A)],
        BASE_B,
        KEY_B,
    );
    r.signaled = false;
    p.a.post_send(r).unwrap();
    p.run();
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [
            ok_wc(1, WcOpcode::RdmaWrite, 100, QPN_A),
            ok_wc(3, WcOpcode::RdmaWrite, 100, QPN_A)
        ]
    );
    assert_eq!(p.a.send_queue_len(), 0);
    // An unsignaled WQE that fails still completes (with its error).
    let mut bad = send_wqe(
        10,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 100, KEY_A)],
        BASE_B,
        0xbad,
    );
    bad.signaled = false;
    p.a.post_send(bad).unwrap();
    p.run();
    let wcs = p.send_completions(Dir::AtoB);
    assert_eq!(wcs.len(), 1);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (10, WcStatus::RemAccessErr));
}

#[test]
fn zero_length_read_is_one_response_only() {
    let mut p = pair_with_memory(Mtu::Mtu512, 64);
    // Zero length: the R_Key is not even validated (IBTA §9.7.4.1.4).
    p.a.post_send(send_wqe(4, SendOpcode::RdmaRead, &[], 0xdead_0000, 0x1234))
        .unwrap();
    p.run();
    let resp: Vec<_> = p.trace.iter().filter(|(d, _, _)| *d == Dir::BtoA).collect();
    assert_eq!(resp.len(), 1);
    assert_eq!(resp[0].1.bth.opcode, Opcode::RcRdmaReadResponseOnly);
    assert_eq!(resp[0].2, 0);
    assert_eq!(
        p.send_completions(Dir::AtoB),
        [ok_wc(4, WcOpcode::RdmaRead, 0, QPN_A)]
    );
}

#[test]
fn pipelined_reads_sends_and_writes_complete_in_order() {
    let mut p = pair_with_memory(Mtu::Mtu256, 16384);
    for i in 0..6 {
        p.b.post_recv(recv_wqe(
            100 + i,
            &[sge(BASE_B + 8192 + i * 800, 800, KEY_B)],
        ))
        .unwrap();
    }
    let mut want = Vec::new();
    for i in 0..18u64 {
        let (op, wc) = match i % 3 {
            0 => (SendOpcode::RdmaRead, WcOpcode::RdmaRead),
            1 => (SendOpcode::Send, WcOpcode::Send),
            _ => (SendOpcode::RdmaWrite, WcOpcode::RdmaWrite),
        };
        let len = 100 + 37 * i as u32;
        let off = i * 220;
        p.a.post_send(send_wqe(
            i,
            op,
            &[sge(BASE_A + off, len, KEY_A)],
            BASE_B + off,
            KEY_B,
        ))
        .unwrap();
        want.push(ok_wc(i, wc, len, QPN_A));
    }
    p.run();
    assert_eq!(p.send_completions(Dir::AtoB), want);
    assert_eq!(p.recv_completions(Dir::BtoA).len(), 6);
    assert_eq!(p.b.msn(), 18);
}

#[test]
fn post_rules() {
    let mut qp = Qp::new(rtr(1, 2, Mtu::Mtu1024, 0));
    let w = send_wqe(1, SendOpcode::Send, &[], 0, 0);
    assert_eq!(qp.post_send(w.clone()), Err(PostError::InvalidState));
    assert_eq!(qp.state(), QpState::Rtr);
    qp.post_recv(recv_wqe(1, &[])).unwrap();
    qp.to_rts(rts(0));
    assert_eq!(qp.state(), QpState::Rts);
    let big = send_wqe(
        2,
        SendOpcode::RdmaWrite,
        &[sge(0, u32::MAX, 1), sge(0, 2, 1)],
        0,
        0,
    );
    assert_eq!(qp.post_send(big), Err(PostError::MessageTooLong));
    for i in 0..64 {
        qp.post_send(send_wqe(i, SendOpcode::Send, &[], 0, 0))
            .unwrap();
    }
    assert_eq!(qp.post_send(w.clone()), Err(PostError::QueueFull));
    qp.to_error();
    assert_eq!(qp.state(), QpState::Error);
    // All 64 flushed; the queue stays full until they are polled.
    assert_eq!(qp.post_send(w.clone()), Err(PostError::QueueFull));
    let flushed: Vec<_> = core::iter::from_fn(|| qp.poll_send_completion()).collect();
    assert_eq!(flushed.len(), 64);
    assert!(flushed
        .iter()
        .enumerate()
        .all(|(i, wc)| wc.wr_id == i as u64 && wc.status == WcStatus::WrFlushErr));
    let rf: Vec<_> = core::iter::from_fn(|| qp.poll_recv_completion()).collect();
    assert_eq!(rf.len(), 1);
    assert_eq!(
        (rf[0].status, rf[0].opcode),
        (WcStatus::WrFlushErr, WcOpcode::Recv)
    );
    // Posting in Error completes immediately with a flush error.
    qp.post_send(w).unwrap();
    qp.post_recv(recv_wqe(5, &[])).unwrap();
    assert_eq!(
        qp.poll_send_completion().unwrap().status,
        WcStatus::WrFlushErr
    );
    assert_eq!(qp.poll_recv_completion().unwrap().wr_id, 5);
    let mut mem = TestMem::default();
    let mut buf = [0u8; 2048];
    assert_eq!(qp.poll_transmit(Instant(0), &mut mem, &mut buf), None);
    assert_eq!(qp.next_deadline(), None);
}

#[test]
fn foreign_packets_are_dropped() {
    let mut p = pair_with_memory(Mtu::Mtu256, 1024);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 10, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    assert!(p.transmit(Dir::AtoB));
    let pkt = p.a_to_b.pop_front().unwrap();
    let (hdr, payload) = parse(&pkt);
    let mut wrong_qp = hdr;
    wrong_qp.bth.dest_qp = 0x99;
    let mut wrong_pkey = hdr;
    wrong_pkey.bth.pkey = 0x8001;
    let mut uc = hdr;
    uc.bth.opcode = Opcode::UcRdmaWriteOnly;
    for h in [wrong_qp, wrong_pkey, uc] {
        p.b.handle_packet(p.now, &h, payload, &mut p.mem_b);
    }
    assert_eq!(p.b.counters().dropped_packets, 3);
    assert!(p
        .mem_b
        .write_counts(KEY_B, BASE_B, 10)
        .iter()
        .all(|&c| c == 0));
    p.deliver(Dir::AtoB, &pkt);
    p.run();
    assert_eq!(
        p.mem_b.bytes(KEY_B, BASE_B, 10),
        p.mem_a.bytes(KEY_A, BASE_A, 10)
    );
}
