//! The device model on a real link (`--provider model`): the model's port sends and receives
//! RoCEv2 through a UDP socket. Two model-backed devices talk over loopback, a model-backed
//! device talks to the soft provider, every transition of the RC table works on the vfio
//! provider (RESET from ERR included), and the device's own counters (Q counters per QP, vport
//! and congestion counters per port) count what was sent.

use std::net::IpAddr;
use std::time::Duration;

use rdmesh_host::verbs::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, QpAttr, QpCap, QpState,
    QueuePair, RecvWr, SendWr, Sge, SoftConfig, WcOpcode, WcStatus, WrOpcode,
};
use rdmesh_host::vfio_provider::ModelPortConfig;

const WAIT: Duration = Duration::from_secs(10);

struct End {
    dev: Device,
    cq: CompletionQueue,
    qp: QueuePair,
    mr: MemoryRegion,
}

fn lo(last: u8) -> IpAddr {
    format!("127.0.97.{last}").parse().unwrap()
}

fn model(ip: IpAddr, ce_every: u32) -> Device {
    let mut c = ModelPortConfig::new(ip);
    c.udp_port = 0;
    c.faults.ce_mark_every = ce_every;
    Device::open_model(c).unwrap()
}

fn soft(ip: IpAddr) -> Device {
    Device::open_soft(SoftConfig {
        udp_port: 0,
        ..SoftConfig::new(ip)
    })
    .unwrap()
}

fn end(dev: Device) -> End {
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(512).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    let mr = pd.register(1 << 20, AccessFlags::ALL).unwrap();
    End { dev, cq, qp, mr }
}

fn to_init(e: &End) {
    e.qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(AccessFlags::ALL),
        ..Default::default()
    })
    .unwrap();
}

fn connect_one(me: &End, peer: &End, psn: u32) {
    let p = peer.dev.local_addr();
    if let Some(mac) = peer.dev.mac() {
        me.dev.set_neighbor(p.ip(), mac);
    }
    me.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AhAttr {
                dgid: p.ip(),
                udp_port: p.port(),
            }),
            path_mtu: Some(Mtu::Mtu1024),
            dest_qp_num: Some(peer.qp.qp_num()),
            rq_psn: Some(psn),
            max_dest_rd_atomic: Some(4),
            min_rnr_timer: Some(1),
            ..Default::default()
        })
        .unwrap();
    me.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(4),
            ..Default::default()
        })
        .unwrap();
}

fn connect(a: &End, b: &End, psn: u32) {
    to_init(a);
    to_init(b);
    connect_one(a, b, psn);
    connect_one(b, a, psn);
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sge(mr: &MemoryRegion, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.addr() + off,
        length: len,
        lkey: mr.lkey(),
    }
}

fn wait_ok(e: &End, wr_id: u64, op: WcOpcode) {
    let wc = e.cq.wait_one(WAIT).expect("completion");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, op),
        "{wc:?}"
    );
}

/// WRITE a → b, READ it back into a, SEND b → a; every byte checked.
fn traffic(a: &End, b: &End, len: usize, seed: u8) {
    let data = pattern(len, seed);
    a.mr.write(0, &data).unwrap();
    a.qp.post_send(&[SendWr::new(
        1,
        WrOpcode::RdmaWrite {
            remote_addr: b.mr.addr() + 64,
            rkey: b.mr.rkey(),
        },
        vec![sge(&a.mr, 0, len as u32)],
    )])
    .unwrap();
    wait_ok(a, 1, WcOpcode::RdmaWrite);
    let mut got = vec![0u8; len];
    b.mr.read(64, &mut got).unwrap();
    assert!(got == data, "WRITE data differs");

    a.qp.post_send(&[SendWr::new(
        2,
        WrOpcode::RdmaRead {
            remote_addr: b.mr.addr() + 64,
            rkey: b.mr.rkey(),
        },
        vec![sge(&a.mr, 300_000, len as u32)],
    )])
    .unwrap();
    wait_ok(a, 2, WcOpcode::RdmaRead);
    a.mr.read(300_000, &mut got).unwrap();
    assert!(got == data, "READ data differs");

    a.qp.post_recv(&[RecvWr {
        wr_id: 3,
        sg_list: vec![sge(&a.mr, 600_000, len as u32)],
    }])
    .unwrap();
    let msg = pattern(len, seed ^ 0x55);
    b.mr.write(700_000, &msg).unwrap();
    b.qp.post_send(&[SendWr::new(
        4,
        WrOpcode::SendWithImm(0xabcd),
        vec![sge(&b.mr, 700_000, len as u32)],
    )])
    .unwrap();
    wait_ok(b, 4, WcOpcode::Send);
    let wc = a.cq.wait_one(WAIT).expect("receive completion");
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (3, WcStatus::Success, len as u32)
    );
    assert_eq!(wc.imm_data, Some(0xabcd));
    a.mr.read(600_000, &mut got).unwrap();
    assert!(got == msg, "SEND data differs");
}

fn counter(list: &[(&'static str, u64)], name: &str) -> u64 {
    list.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| *v)
        .unwrap_or_else(|| panic!("no counter {name} in {list:?}"))
}

#[test]
fn two_model_processes_worth_of_devices_talk_over_udp() {
    let a = end(model(lo(1), 0));
    let b = end(model(lo(2), 0));
    assert_eq!(a.dev.provider(), "model");
    assert_ne!(a.dev.local_addr().port(), 0);
    connect(&a, &b, 100);
    traffic(&a, &b, 200_000, 1);

    // The device's own counters: one WRITE and one READ arrived at b's QP, 200 000 bytes
    // each way in 1024-byte packets (plus ACKs).
    let qb = b.qp.hw_counters().unwrap();
    assert_eq!(counter(&qb, "rx_write_requests"), 1, "{qb:?}");
    assert_eq!(counter(&qb, "rx_read_requests"), 1, "{qb:?}");
    let pa = a.dev.hw_counters().unwrap();
    let pb = b.dev.hw_counters().unwrap();
    let packets = 200_000u64.div_ceil(1024);
    // a sent the WRITE's packets (and the READ request, ACKs); b the READ response and the
    // SEND.
    assert!(counter(&pa, "tx_packets") > packets, "{pa:?}");
    assert!(counter(&pa, "tx_bytes") > 200_000, "{pa:?}");
    assert!(counter(&pb, "tx_bytes") > 2 * 200_000, "{pb:?}");
    assert!(counter(&pb, "rx_packets") > packets, "{pb:?}");
    assert_eq!(counter(&pa, "tx_packets"), counter(&pb, "rx_packets"));
    assert_eq!(counter(&pb, "tx_packets"), counter(&pa, "rx_packets"));
    assert_eq!(a.dev.counters().tx_packets, counter(&pa, "tx_packets"));
}

#[test]
fn model_and_soft_talk_both_ways() {
    let a = end(model(lo(11), 0));
    let b = end(soft(lo(12)));
    connect(&a, &b, 5);
    traffic(&a, &b, 50_000, 2);
    traffic(&b, &a, 70_000, 3);
}

#[test]
fn every_rc_transition_and_reset_from_error() {
    let a = end(model(lo(21), 0));
    let b = end(model(lo(22), 0));
    // INIT → INIT and RTS → RTS with their optional attributes.
    to_init(&a);
    a.qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        qp_access_flags: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
        ..Default::default()
    })
    .unwrap();
    to_init(&b);
    connect_one(&a, &b, 9);
    connect_one(&b, &a, 9);
    a.qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        min_rnr_timer: Some(3),
        qp_access_flags: Some(AccessFlags::ALL),
        ..Default::default()
    })
    .unwrap();
    traffic(&a, &b, 5000, 4);

    // Into ERR: a posted receive flushes.
    b.qp.post_recv(&[RecvWr {
        wr_id: 77,
        sg_list: vec![sge(&b.mr, 0, 100)],
    }])
    .unwrap();
    b.qp.modify(&QpAttr::state(QpState::Err)).unwrap();
    let wc = b.cq.wait_one(WAIT).expect("flush completion");
    assert_eq!((wc.wr_id, wc.status), (77, WcStatus::WrFlushErr));

    // ERR → RESET → INIT → RTR → RTS on both ends, and traffic again.
    for e in [&a, &b] {
        e.qp.modify(&QpAttr::state(QpState::Reset)).unwrap();
        assert_eq!(e.qp.state(), QpState::Reset);
    }
    // A stale completion left in a's CQ before the reset is gone with it.
    connect(&a, &b, 1000);
    traffic(&a, &b, 8000, 5);
    // RESET → RESET is allowed too.
    a.qp.modify(&QpAttr::state(QpState::Reset)).unwrap();
    a.qp.modify(&QpAttr::state(QpState::Reset)).unwrap();
    // An illegal one names the transition.
    let e =
        a.qp.modify(&QpAttr::state(QpState::Rts))
            .unwrap_err()
            .to_string();
    assert!(e.contains("Reset -> Rts"), "{e}");
}

#[test]
fn cnps_sent_and_handled_on_both_ends() {
    // Every 4th data packet arrives CE-marked at each end (the model's congested-switch
    // fault): each end's notification point sends CNPs, the other's reaction point handles
    // them.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let a = end(model(lo(31), 4));
    let b = end(model(lo(32), 4));
    connect(&a, &b, 1);
    traffic(&a, &b, 64_000, 6);
    traffic(&b, &a, 64_000, 7);
    let pa = a.dev.hw_counters().unwrap();
    let pb = b.dev.hw_counters().unwrap();
    for (p, q) in [(&pa, &pb), (&pb, &pa)] {
        assert!(counter(p, "np_ecn_marked_roce_packets") > 0, "{p:?}");
        assert!(counter(p, "np_cnp_sent") > 0, "{p:?}");
        assert_eq!(
            counter(p, "np_cnp_sent"),
            counter(q, "rp_cnp_handled"),
            "{p:?} {q:?}"
        );
    }
}
