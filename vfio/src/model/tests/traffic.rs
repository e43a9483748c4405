use rdmesh_core::mlx5::cqe::{CqeOpcode, Syndrome};
use rdmesh_core::mlx5::{BatchPolicy, BfMode, Post, WrOp};
use rdmesh_core::wire::RocePacket;

use super::pair;

fn policy(n: u16, k: u16) -> BatchPolicy {
    BatchPolicy {
        max_batch: n,
        signal_every: k,
        inline_threshold: 0,
        bf: BfMode::Off,
    }
}

#[test]
fn rdma_write_read_send_between_two_models_with_pcap() {
    let dir = std::env::temp_dir().join(format!("rdmesh-model-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pcap = dir.join("model_rc.pcap");
    let (ha, mut a, hb, mut b, link) = pair(Some(&pcap));

    // RDMA WRITE 3000 bytes (3 packets at MTU 1024) from a's buffer to b's.
    let msg: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    a.data.write(0, &msg).unwrap();
    let mut bat = a.batcher(policy(1, 1)).unwrap();
    let sge = [a.sge(0, 3000)];
    a.post(
        &mut bat,
        &[Post::new(
            WrOp::RdmaWrite {
                raddr: b.va + 100,
                rkey: b.key,
            },
            &sge,
        )],
        true,
    )
    .unwrap();
    let cqes = a.poll().unwrap();
    assert_eq!(cqes.len(), 1, "{cqes:?}");
    assert_eq!(cqes[0].opcode, CqeOpcode::Req);
    assert_eq!(cqes[0].qpn, a.qpn);
    assert_eq!(cqes[0].wqe_counter, 0);
    assert_eq!(cqes[0].s_wqe_opcode, 0x08);
    let mut got = vec![0u8; 3000];
    b.data.read(100, &mut got).unwrap();
    assert_eq!(got, msg);

    // RDMA READ 2000 bytes of b's buffer back into a's buffer at 8192.
    let sge = [a.sge(8192, 2000)];
    a.post(
        &mut bat,
        &[Post::new(
            WrOp::RdmaRead {
                raddr: b.va + 100,
                rkey: b.key,
            },
            &sge,
        )],
        true,
    )
    .unwrap();
    let cqes = a.poll().unwrap();
    assert_eq!(cqes.len(), 1);
    assert_eq!(
        (cqes[0].opcode, cqes[0].wqe_counter, cqes[0].byte_cnt),
        (CqeOpcode::Req, 1, 2000)
    );
    let mut back = vec![0u8; 2000];
    a.data.read(8192, &mut back).unwrap();
    assert_eq!(back, msg[..2000]);

    // SEND and SEND with immediate into posted receive WQEs (no MMIO for the receives).
    let rsge = [b.sge(16384, 4096)];
    b.post_recv(&rsge).unwrap();
    let rsge2 = [b.sge(20480, 4096)];
    b.post_recv(&rsge2).unwrap();
    a.data.write(4096, b"hello, model").unwrap();
    let sge = [a.sge(4096, 12)];
    a.post(
        &mut bat,
        &[
            Post::new(WrOp::Send, &sge),
            Post::new(WrOp::SendImm { imm: 0x1234_5678 }, &sge),
        ],
        true,
    )
    .unwrap();
    let cqes = a.poll().unwrap();
    assert_eq!(
        cqes.iter().map(|c| c.wqe_counter).collect::<Vec<_>>(),
        [2, 3]
    );
    let rc = b.poll().unwrap();
    assert_eq!(rc.len(), 2, "{rc:?}");
    assert_eq!(
        (rc[0].opcode, rc[0].byte_cnt, rc[0].wqe_counter, rc[0].qpn),
        (CqeOpcode::RespSend, 12, 0, b.qpn)
    );
    assert_eq!(
        (rc[1].opcode, rc[1].imm_inval_pkey, rc[1].wqe_counter),
        (CqeOpcode::RespSendImm, 0x1234_5678, 1)
    );
    let mut s = [0u8; 12];
    b.data.read(16384, &mut s).unwrap();
    assert_eq!(&s, b"hello, model");
    b.data.read(20480, &mut s).unwrap();
    assert_eq!(&s, b"hello, model");

    // Counters: 4 doorbells (batch 1; the two sends went in one post call but ring each).
    let ca = ha.dev.counters();
    assert_eq!(ca.wqes_executed, 4);
    assert_eq!(ca.send_doorbells, 4);
    assert_eq!(ca.wqebbs_fetched, 4);
    assert_eq!(ca.cqes_written, 4);
    assert_eq!(hb.dev.counters().recv_wqes_fetched, 2);
    assert_eq!(
        ca.frames_sent + hb.dev.counters().frames_sent,
        link.frames()
    );

    // The pcap: every frame parses as RoCEv2 with a valid ICRC, in both directions.
    drop(link);
    let file = std::fs::File::open(&pcap).unwrap();
    let mut r = pcap_file::pcap::PcapReader::new(file).unwrap();
    let mut n = 0;
    let mut sports = std::collections::BTreeSet::new();
    while let Some(p) = r.next_packet() {
        let p = p.unwrap();
        let pkt = RocePacket::parse(&p.data).expect("RoCEv2 frame");
        assert!(pkt.icrc_valid, "frame {n} has a bad ICRC");
        sports.insert(pkt.udp.src_port);
        n += 1;
    }
    // WRITE 3 + ACK, READ request + 2 responses, 2 SENDs + ACKs.
    assert!(n >= 9, "{n} frames");
    assert!(
        sports.contains(&0xd123),
        "b's fixed udp_sport is used: {sports:?}"
    );
    // tshark (the independent decoder) reads every frame as InfiniBand over UDP 4791.
    if let Ok(out) = std::process::Command::new("tshark")
        .args([
            "-r",
            pcap.to_str().unwrap(),
            "-T",
            "fields",
            "-e",
            "infiniband.bth.opcode",
        ])
        .output()
    {
        let text = String::from_utf8_lossy(&out.stdout);
        let decoded = text.lines().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(decoded, n, "tshark decoded {decoded} of {n} frames: {text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_rkey_gives_error_cqe_and_flush() {
    let (_ha, mut a, _hb, b, _link) = pair(None);
    let mut bat = a.batcher(policy(2, 1)).unwrap();
    let sge = [a.sge(0, 64)];
    let bad = Post::new(
        WrOp::RdmaWrite {
            raddr: b.va,
            rkey: b.key ^ 0x100,
        },
        &sge,
    );
    let good = Post::new(
        WrOp::RdmaWrite {
            raddr: b.va,
            rkey: b.key,
        },
        &sge,
    );
    a.post(&mut bat, &[bad, good], true).unwrap();
    let c = a.poll().unwrap();
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(c[0].opcode, CqeOpcode::ReqErr);
    assert_eq!(c[0].error.unwrap().syndrome, Syndrome::RemoteAccessErr);
    assert_eq!(c[1].error.unwrap().syndrome, Syndrome::WrFlushErr);
    assert_eq!(_ha.dev.qp_state(a.qpn), Some(6));
}

#[test]
fn doorbell_batching_and_signaling_are_counted() {
    let (ha, mut a, _hb, b, _link) = pair(None);
    let sge = [a.sge(0, 64)];
    let post = Post::new(
        WrOp::RdmaWrite {
            raddr: b.va,
            rkey: b.key,
        },
        &sge,
    );
    let posts = vec![post; 64];
    let mut bat = a.batcher(policy(8, 16)).unwrap();
    ha.dev.reset_counters();
    a.post(&mut bat, &posts, true).unwrap();
    let c = ha.dev.counters();
    assert_eq!(c.send_doorbells, 8);
    assert_eq!(c.mmio_writes, 8);
    assert_eq!(c.wqes_executed, 64);
    assert_eq!(c.wqebbs_fetched, 64);
    assert_eq!(c.cqes_written, 4, "one CQE per 16 WQEs");
    let cq = a.poll().unwrap();
    assert_eq!(
        cq.iter().map(|c| c.wqe_counter).collect::<Vec<_>>(),
        [15, 31, 47, 63]
    );
    assert_eq!(
        a.sq_free(),
        256,
        "signaled CQEs retire the unsignaled WQEs before them"
    );
}

#[test]
fn armed_cq_raises_completion_event() {
    let (mut ha, mut a, _hb, b, _link) = pair(None);
    let irq = ha.dev.interrupt();
    let _ = ha.eq_events().unwrap();
    while irq.wait(std::time::Duration::ZERO) {}
    // Arm the EQ and the CQ, then complete one WQE.
    let ci = ha.dev.counters().eqes_written as u32;
    ha.bar.write32_be(
        ha.uar as usize * 4096 + 0x40,
        rdmesh_core::mlx5::cmd::eqe::eq_doorbell_value(ha.eqn, ci),
    );
    a.arm().unwrap();
    let sge = [a.sge(0, 8)];
    let mut bat = a.batcher(policy(1, 1)).unwrap();
    a.post(
        &mut bat,
        &[Post::new(
            WrOp::RdmaWrite {
                raddr: b.va,
                rkey: b.key,
            },
            &sge,
        )],
        true,
    )
    .unwrap();
    assert!(irq.wait(std::time::Duration::from_millis(10)));
    let evs = ha.eq_events().unwrap();
    assert!(
        evs.contains(&rdmesh_core::mlx5::cmd::EqeRepr::Comp { cqn: a.cqn }),
        "{evs:?}"
    );
    assert_eq!(a.poll().unwrap().len(), 1);
}

#[test]
fn unsignaled_runs_across_chunks_stay_healthy() {
    let (ha, mut a, _hb, b, _link) = pair(None);
    let sge = [a.sge(0, 64)];
    let post = Post::new(
        WrOp::RdmaWrite {
            raddr: b.va,
            rkey: b.key,
        },
        &sge,
    );
    let posts = [post; 128];
    let mut bat = a.batcher(policy(64, 16)).unwrap();
    for round in 0..20 {
        a.post(&mut bat, &posts, false).unwrap();
        let c = a.poll().unwrap();
        assert_eq!(
            c.len(),
            8,
            "round {round}: {:?} {:?}",
            c.first(),
            ha.dev.counters()
        );
        assert!(c.iter().all(|c| c.opcode == CqeOpcode::Req));
    }
    assert_eq!(ha.dev.counters().error_cqes, 0);
}

#[test]
fn every_batching_policy_runs_thousands_of_wqes_cleanly() {
    let (ha, mut a, _hb, b, _link) = pair(None);
    let sge = [a.sge(0, 64)];
    let post = Post::new(
        WrOp::RdmaWrite {
            raddr: b.va,
            rkey: b.key,
        },
        &sge,
    );
    let posts = [post; 128];
    for (n, k) in [(1, 1), (1, 16), (8, 64), (64, 1), (64, 64)] {
        let mut bat = a.batcher(policy(n, k)).unwrap();
        for round in 0..40 {
            a.post(&mut bat, &posts, false).unwrap();
            let c = a.poll().unwrap();
            assert_eq!(
                c.len(),
                128 / usize::from(k),
                "N={n} K={k} round {round}: {:?} {:?}",
                c.iter().find(|c| c.error.is_some()),
                ha.dev.counters()
            );
        }
    }
    assert_eq!(ha.dev.counters().error_cqes, 0);
}
