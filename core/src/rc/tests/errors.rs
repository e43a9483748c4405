//! Fatal errors: R_Key / bounds / access violations, receive buffer too small, local
//! protection errors, invalid requests; completions and QP states on both sides.

use super::*;

const KEY_A: u32 = 0xa2;
const KEY_B: u32 = 0xb2;
const BASE_A: u64 = 0x4000;
const BASE_B: u64 = 0x20_0000;

fn pair_access(mtu: Mtu, len: usize, access_b: Access) -> Pair {
    let mut p = Pair::new(mtu, 500, 900);
    p.mem_a.add(KEY_A, BASE_A, len, Access::ALL, pattern(7));
    p.mem_b.add(KEY_B, BASE_B, len, access_b, pattern(8));
    p
}

/// Posts a 5-packet WRITE (and a SEND behind it) that B must refuse; checks that nothing was
/// written and both QPs end in Error with the right completions.
fn refused_write(access_b: Access, remote_addr: u64, rkey: u32) {
    let mut p = pair_access(Mtu::Mtu256, 4096, access_b);
    p.b.post_recv(recv_wqe(77, &[sge(BASE_B, 100, KEY_B)]))
        .unwrap();
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 1200, KEY_A)],
        remote_addr,
        rkey,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        2,
        SendOpcode::Send,
        &[sge(BASE_A, 10, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    p.run();
    assert_eq!(
        statuses(&p.send_completions(Dir::AtoB)),
        [(1, WcStatus::RemAccessErr), (2, WcStatus::WrFlushErr)]
    );
    assert!(
        p.mem_b.region(KEY_B).writes.iter().all(|&c| c == 0),
        "nothing written"
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.b.state(), QpState::Error);
    assert_eq!(
        statuses(&p.recv_completions(Dir::BtoA)),
        [(77, WcStatus::WrFlushErr)]
    );
    assert_eq!(p.b.counters().naks_sent.remote_access, 1);
    assert_eq!(p.a.counters().naks_received.remote_access, 1);
    let nak = p.trace.iter().find(|(d, _, _)| *d == Dir::BtoA).unwrap();
    assert_eq!(u8::from(nak.1.aeth.unwrap().syndrome), 0x62);
    assert_eq!(nak.1.bth.psn, Psn::new(500));
}

#[test]
fn write_with_bad_rkey() {
    refused_write(Access::ALL, BASE_B, 0xbad);
}

#[test]
fn write_past_region_end_writes_nothing() {
    // The first 4 packets would fit; the whole RETH range does not.
    refused_write(Access::ALL, BASE_B + 4096 - 1100, KEY_B);
}

#[test]
fn write_without_remote_write_access() {
    refused_write(
        Access {
            remote_write: false,
            ..Access::ALL
        },
        BASE_B,
        KEY_B,
    );
}

#[test]
fn read_access_violations() {
    for (access, addr, key) in [
        (Access::ALL, BASE_B, 0xbad),
        (Access::ALL, BASE_B + 4000, KEY_B),
        (
            Access {
                remote_read: false,
                ..Access::ALL
            },
            BASE_B,
            KEY_B,
        ),
    ] {
        let mut p = pair_access(Mtu::Mtu1024, 4096, access);
        p.a.post_send(send_wqe(
            1,
            SendOpcode::RdmaRead,
            &[sge(BASE_A, 200, KEY_A)],
            addr,
            key,
        ))
        .unwrap();
        p.run();
        assert_eq!(
            statuses(&p.send_completions(Dir::AtoB)),
            [(1, WcStatus::RemAccessErr)]
        );
        assert_eq!(p.count(Dir::BtoA, Opcode::RcRdmaReadResponseOnly), 0);
        assert!(p.mem_a.region(KEY_A).writes.iter().all(|&c| c == 0));
        assert_eq!((p.a.state(), p.b.state()), (QpState::Error, QpState::Error));
    }
}

#[test]
fn recv_buffer_too_small() {
    let mut p = pair_access(Mtu::Mtu256, 4096, Access::ALL);
    p.b.post_recv(recv_wqe(1, &[sge(BASE_B, 600, KEY_B)]))
        .unwrap();
    p.b.post_recv(recv_wqe(2, &[sge(BASE_B + 1024, 2000, KEY_B)]))
        .unwrap();
    p.a.post_send(send_wqe(
        10,
        SendOpcode::Send,
        &[sge(BASE_A, 1000, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        11,
        SendOpcode::Send,
        &[sge(BASE_A, 10, KEY_A)],
        0,
        0,
    ))
    .unwrap();
    p.run();
    let rc = p.recv_completions(Dir::BtoA);
    assert_eq!(
        statuses(&rc),
        [(1, WcStatus::LocLenErr), (2, WcStatus::WrFlushErr)]
    );
    assert_eq!(rc[0].opcode, WcOpcode::Recv);
    assert_eq!(
        statuses(&p.send_completions(Dir::AtoB)),
        [(10, WcStatus::RemInvReqErr), (11, WcStatus::WrFlushErr)]
    );
    let nak = p.trace.iter().find(|(d, _, _)| *d == Dir::BtoA).unwrap();
    assert_eq!(u8::from(nak.1.aeth.unwrap().syndrome), 0x61);
    // The third packet (bytes 512..768) is the one that does not fit.
    assert_eq!(nak.1.bth.psn, Psn::new(502));
}

#[test]
fn local_protection_error_on_gather() {
    let mut p = pair_access(Mtu::Mtu256, 4096, Access::ALL);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 100, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    // Second WQE: the SGE runs past the end of A's region.
    p.a.post_send(send_wqe(
        2,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A + 4000, 200, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.a.post_send(send_wqe(
        3,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 100, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    assert!(p.transmit(Dir::AtoB));
    assert!(!p.transmit(Dir::AtoB));
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(
        statuses(&p.send_completions(Dir::AtoB)),
        [
            (1, WcStatus::WrFlushErr),
            (2, WcStatus::LocProtErr),
            (3, WcStatus::WrFlushErr)
        ]
    );
    assert_eq!(p.a.next_deadline(), None);
}

#[test]
fn read_into_buffer_without_local_write() {
    let mut p = Pair::new(Mtu::Mtu256, 500, 900);
    p.mem_a.add(
        KEY_A,
        BASE_A,
        4096,
        Access {
            local_write: false,
            ..Access::ALL
        },
        pattern(1),
    );
    p.mem_b.add(KEY_B, BASE_B, 4096, Access::ALL, pattern(2));
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 300, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.run();
    assert_eq!(
        statuses(&p.send_completions(Dir::AtoB)),
        [(1, WcStatus::LocProtErr)]
    );
    assert_eq!(p.a.state(), QpState::Error);
    assert_eq!(p.b.state(), QpState::Rts);
}

#[test]
fn read_without_responder_resources_is_invalid() {
    let mut rtr_b = rtr(QPN_B, QPN_A, Mtu::Mtu256, 500);
    rtr_b.max_dest_rd_atomic = 0;
    let mut p = Pair::with(
        rtr(QPN_A, QPN_B, Mtu::Mtu256, 900),
        rts(500),
        rtr_b,
        rts(900),
    );
    p.mem_a.add(KEY_A, BASE_A, 4096, Access::ALL, pattern(1));
    p.mem_b.add(KEY_B, BASE_B, 4096, Access::ALL, pattern(2));
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaRead,
        &[sge(BASE_A, 300, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    p.run();
    assert_eq!(
        statuses(&p.send_completions(Dir::AtoB)),
        [(1, WcStatus::RemInvReqErr)]
    );
    assert_eq!(p.b.counters().naks_sent.invalid_request, 1);
}

#[test]
fn opcode_sequence_violation_is_invalid_request() {
    let mut p = pair_access(Mtu::Mtu256, 4096, Access::ALL);
    p.a.post_send(send_wqe(
        1,
        SendOpcode::RdmaWrite,
        &[sge(BASE_A, 600, KEY_A)],
        BASE_B,
        KEY_B,
    ))
    .unwrap();
    assert!(p.transmit(Dir::AtoB));
    let first = p.a_to_b.pop_front().unwrap();
    // A MIDDLE packet with the expected PSN but no FIRST before it.
    let (mut hdr, payload) = parse(&first);
    hdr.bth.opcode = Opcode::RcRdmaWriteMiddle;
    hdr.reth = None;
    p.b.handle_packet(p.now, &hdr, payload, &mut p.mem_b);
    assert_eq!(p.b.state(), QpState::Error);
    assert!(p.transmit(Dir::BtoA));
    let (_, nak, _) = p.trace.last().unwrap();
    assert_eq!(u8::from(nak.aeth.unwrap().syndrome), 0x61);
    assert!(!p.transmit(Dir::BtoA), "nothing after the fatal NAK");
    assert!(p.mem_b.region(KEY_B).writes.iter().all(|&c| c == 0));
}
