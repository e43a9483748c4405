//! RC traffic through the mlx5 VFIO driver between two modeled devices joined by an
//! in-process wire: RDMA WRITE, RDMA READ and SEND/RECV with the data verified byte for byte,
//! one send doorbell per posted batch (rdma-core `post_send_db`, 8-byte doorbell, no
//! BlueFlame), and the pcap of the traffic checked by independent oracles: the project's ICRC
//! checker (`tests/scripts/icrc_check.py`, zlib CRC-32, plus scapy when installed) and tshark's
//! InfiniBand dissector (no malformed frames; BTH opcodes and destination QPNs as expected).

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use rdmesh_core::mlx5::cqe::CqeOpcode;
use rdmesh_core::mlx5::{Payload, SendFlags, SendWr, Sge, TransportSeg, WrOp};
use rdmesh_core::rc::Mtu;
use rdmesh_tests::{assert_ok, have, need, run_bounded, scratch, workspace_root};
use rdmesh_vfio::mlx5::{
    gid_of, udp_sport_for, Access, Completion, Cq, DriverConfig, Hca, Mr, Qp, QpCaps, RcPath,
    RecvRequest, SendRequest,
};
use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelLink};

const WAIT: Duration = Duration::from_secs(10);

struct Side {
    dev: ModelDevice,
    hca: Hca,
    mr: Mr,
    cq: Cq,
    qp: Qp,
    ip: &'static str,
}

fn side(mac_last: u8, ip: &'static str) -> Side {
    let dev = ModelDevice::new(ModelConfig {
        mac: [2, 0, 0, 0, 0, mac_last],
        ..ModelConfig::default()
    });
    let hca = Hca::bring_up(
        dev.mmio(),
        dev.dma(),
        dev.interrupt(),
        DriverConfig::for_model(format!("model-{ip}")),
    )
    .unwrap();
    hca.set_gid(1, 0, gid_of(ip.parse().unwrap()), None, None)
        .unwrap();
    let pd = hca.alloc_pd().unwrap();
    let mr = Mr::register(&pd, 1 << 16, Access::ALL).unwrap();
    let cq = hca.create_cq(256).unwrap();
    let qp = Qp::create(&pd, &cq, &cq, QpCaps::default()).unwrap();
    Side {
        dev,
        hca,
        mr,
        cq,
        qp,
        ip,
    }
}

fn connect(a: &Side, b: &Side) {
    for (me, peer) in [(a, b), (b, a)] {
        let mut path = RcPath::new(
            peer.qp.qpn(),
            gid_of(peer.ip.parse().unwrap()),
            peer.hca.info().mac,
        );
        path.mtu = Mtu::Mtu1024;
        path.dscp = 26;
        path.sq_psn = 0x100;
        path.rq_psn = 0x100;
        me.qp.connect(&path).unwrap();
        assert_eq!(me.qp.query_state().unwrap(), 3, "RTS");
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn wr<'a>(op: WrOp, sges: &'a [Sge], signaled: bool) -> SendWr<'a> {
    SendWr {
        op,
        flags: SendFlags {
            signaled,
            ..Default::default()
        },
        transport: TransportSeg::None,
        payload: Payload::Gather(sges),
    }
}

fn one_ok(cq: &Cq, wr_id: u64, opcode: CqeOpcode) -> Completion {
    let c = cq.poll_n(1, WAIT).unwrap();
    assert_eq!(c.len(), 1);
    let c = c[0];
    assert!(c.is_ok(), "{c:?}");
    assert_eq!(c.wr_id, wr_id, "{c:?}");
    assert_eq!(c.opcode, opcode, "{c:?}");
    c
}

#[test]
fn rc_write_read_send_through_the_vfio_driver() {
    let dir = scratch("model_rc_traffic");
    let pcap = dir.join("model_rc.pcap");
    let a = side(1, "10.0.0.1");
    let b = side(2, "10.0.0.2");
    let link = ModelLink::connect(&a.dev, &b.dev, Some(&pcap)).unwrap();
    connect(&a, &b);
    a.dev.reset_counters();

    // RDMA WRITE of 10000 bytes (10 packets at MTU 1024), a → b.
    let data = pattern(10_000, 7);
    a.mr.write(0, &data).unwrap();
    let sge = [Sge {
        addr: a.mr.addr(),
        lkey: a.mr.lkey(),
        len: data.len() as u32,
    }];
    a.qp.post_send(&[SendRequest {
        wr_id: 1,
        wr: wr(
            WrOp::RdmaWrite {
                raddr: b.mr.addr() + 100,
                rkey: b.mr.rkey(),
            },
            &sge,
            true,
        ),
    }])
    .unwrap();
    let c = one_ok(&a.cq, 1, CqeOpcode::Req);
    assert!(c.send);
    let mut got = vec![0u8; data.len()];
    b.mr.read(100, &mut got).unwrap();
    assert_eq!(got, data, "RDMA WRITE data");
    let cnt = a.dev.counters();
    assert_eq!(cnt.send_doorbells, 1);
    assert_eq!(
        cnt.mmio_writes64, 1,
        "one 8-byte doorbell, no BlueFlame copy"
    );
    assert_eq!(cnt.blueflame_writes, 0);

    // RDMA READ of 5000 bytes, b's memory into a's.
    let remote = pattern(5000, 99);
    b.mr.write(20_000, &remote).unwrap();
    let sge = [Sge {
        addr: a.mr.addr() + 30_000,
        lkey: a.mr.lkey(),
        len: remote.len() as u32,
    }];
    a.qp.post_send(&[SendRequest {
        wr_id: 2,
        wr: wr(
            WrOp::RdmaRead {
                raddr: b.mr.addr() + 20_000,
                rkey: b.mr.rkey(),
            },
            &sge,
            true,
        ),
    }])
    .unwrap();
    let c = one_ok(&a.cq, 2, CqeOpcode::Req);
    assert_eq!(c.byte_len, remote.len() as u32);
    let mut got = vec![0u8; remote.len()];
    a.mr.read(30_000, &mut got).unwrap();
    assert_eq!(got, remote, "RDMA READ data");

    // SEND of 3000 bytes into a posted receive.
    let recv_sge = [Sge {
        addr: b.mr.addr() + 40_000,
        lkey: b.mr.lkey(),
        len: 4096,
    }];
    b.qp.post_recv(&[RecvRequest {
        wr_id: 77,
        sges: &recv_sge,
    }])
    .unwrap();
    let msg = pattern(3000, 200);
    a.mr.write(50_000, &msg).unwrap();
    let sge = [Sge {
        addr: a.mr.addr() + 50_000,
        lkey: a.mr.lkey(),
        len: msg.len() as u32,
    }];
    a.qp.post_send(&[SendRequest {
        wr_id: 3,
        wr: wr(WrOp::Send, &sge, true),
    }])
    .unwrap();
    one_ok(&a.cq, 3, CqeOpcode::Req);
    let r = one_ok(&b.cq, 77, CqeOpcode::RespSend);
    assert!(!r.send);
    assert_eq!(r.byte_len, msg.len() as u32);
    let mut got = vec![0u8; msg.len()];
    b.mr.read(40_000, &mut got).unwrap();
    assert_eq!(got, msg, "SEND data");

    // A batch of 16 WRITEs, only the last signaled: one doorbell for the batch, one CQE,
    // and the ring retires all 16.
    a.dev.reset_counters();
    let chunks: Vec<[Sge; 1]> = (0..16)
        .map(|i| {
            [Sge {
                addr: a.mr.addr() + i * 256,
                lkey: a.mr.lkey(),
                len: 256,
            }]
        })
        .collect();
    let reqs: Vec<SendRequest<'_>> = chunks
        .iter()
        .enumerate()
        .map(|(i, s)| SendRequest {
            wr_id: 100 + i as u64,
            wr: wr(
                WrOp::RdmaWrite {
                    raddr: b.mr.addr() + 60_000 + i as u64 * 256,
                    rkey: b.mr.rkey(),
                },
                s,
                i == 15,
            ),
        })
        .collect();
    a.qp.post_send(&reqs).unwrap();
    one_ok(&a.cq, 115, CqeOpcode::Req);
    let cnt = a.dev.counters();
    assert_eq!(cnt.send_doorbells, 1, "{cnt:?}");
    assert_eq!(cnt.wqes_executed, 16, "{cnt:?}");
    assert_eq!(cnt.cqes_written, 1, "{cnt:?}");
    let mut got = vec![0u8; 4096];
    b.mr.read(60_000, &mut got).unwrap();
    assert_eq!(got, data[..4096], "batched WRITE data");

    // The ring wraps: 300 more signaled WRITEs through a 256-WQEBB send queue.
    for round in 0..30u64 {
        let reqs: Vec<SendRequest<'_>> = (0..10)
            .map(|i| SendRequest {
                wr_id: 1000 + round * 10 + i,
                wr: wr(
                    WrOp::RdmaWrite {
                        raddr: b.mr.addr() + 64_000,
                        rkey: b.mr.rkey(),
                    },
                    &chunks[0],
                    true,
                ),
            })
            .collect();
        a.qp.post_send(&reqs).unwrap();
        let c = a.cq.poll_n(10, WAIT).unwrap();
        let ids: Vec<u64> = c.iter().map(|c| c.wr_id).collect();
        assert_eq!(
            ids,
            (0..10).map(|i| 1000 + round * 10 + i).collect::<Vec<_>>()
        );
    }

    assert!(link.frames() > 20, "{} frames", link.frames());
    // Each side's frames leave from its GID (SET_ROCE_ADDRESS) with the UDP source port
    // Linux derives from the QPN pair (the address path's `udp_sport`).
    let sports = [
        (a.ip.to_string(), udp_sport_for(a.qp.qpn(), b.qp.qpn())),
        (b.ip.to_string(), udp_sport_for(b.qp.qpn(), a.qp.qpn())),
    ];
    drop(link);
    drop((a, b));
    check_pcap(&pcap, &sports);
}

fn check_pcap(pcap: &std::path::Path, sports: &[(String, u16)]) {
    let mut check = Command::new("python3");
    check
        .arg(workspace_root().join("tests/scripts/icrc_check.py"))
        .arg(pcap);
    if Command::new("python3")
        .args(["-c", "import scapy.contrib.roce"])
        .status()
        .is_ok_and(|s| s.success())
    {
        check.arg("--scapy");
    }
    let out = assert_ok(
        &run_bounded(check, Duration::from_secs(120)),
        "independent ICRC check",
    );
    assert!(out.contains("bad=0"), "{out}");
    let roce: u64 = out
        .split_whitespace()
        .find_map(|w| w.strip_prefix("roce="))
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(roce > 20, "{out}");

    if !need(have("tshark", &["--version"]), "tshark") {
        return;
    }
    let mut t = Command::new("tshark");
    t.arg("-r").arg(pcap).args([
        "-d",
        "udp.port==4791,infiniband",
        "-T",
        "fields",
        "-E",
        "separator=;",
        "-e",
        "infiniband.bth.opcode",
        "-e",
        "infiniband.bth.destqp",
        "-e",
        "_ws.malformed",
        "-e",
        "ip.dsfield.dscp",
        "-e",
        "ip.src",
        "-e",
        "udp.srcport",
    ]);
    let out = assert_ok(&run_bounded(t, Duration::from_secs(120)), "tshark");
    let mut opcodes = BTreeSet::new();
    let mut lines = 0;
    for l in out.lines() {
        let f: Vec<&str> = l.split(';').collect();
        assert_eq!(f.len(), 6, "{l}");
        let want = sports
            .iter()
            .find(|(ip, _)| ip == f[4])
            .unwrap_or_else(|| panic!("frame from an address no GID names: {l}"));
        assert_eq!(f[5], want.1.to_string(), "UDP source port: {l}");
        assert!(f[2].is_empty(), "malformed frame: {l}");
        assert!(!f[0].is_empty(), "not decoded as InfiniBand: {l}");
        assert_eq!(f[3], "26", "DSCP from the address path: {l}");
        opcodes.insert(f[0].parse::<u32>().unwrap());
        lines += 1;
    }
    assert_eq!(lines as u64, roce);
    // RC SEND first/last, WRITE first/middle/last/only, READ request and responses, ACK.
    for op in [0u32, 2, 6, 7, 8, 10, 12, 13, 14, 15, 17] {
        assert!(
            opcodes.contains(&op),
            "BTH opcode {op} missing: {opcodes:?}"
        );
    }
}

mod through_host_verbs {
    //! The same traffic through rdmesh-host's verbs API with the vfio provider
    //! (`Device::open_vfio_model`): the API the mesh transport uses, on hardware-style QPs.

    use std::net::IpAddr;
    use std::time::Duration;

    use rdmesh_host::verbs::{
        AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, Mtu, QpAttr, QpCap, QpState,
        QueuePair, RecvWr, SendWr, Sge, WcOpcode, WcStatus, WrOpcode,
    };
    use rdmesh_host::vfio_provider::VfioConfig;
    use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelLink};

    struct End {
        model: ModelDevice,
        dev: Device,
        cq: CompletionQueue,
        qp: QueuePair,
        mr: MemoryRegion,
        ip: IpAddr,
    }

    fn end(mac_last: u8, ip: &str) -> End {
        let model = ModelDevice::new(ModelConfig {
            mac: [2, 0, 0, 0, 0, mac_last],
            ..ModelConfig::default()
        });
        let ip: IpAddr = ip.parse().unwrap();
        let dev = Device::open_vfio_model(&model, &format!("model{mac_last}"), VfioConfig::new(ip))
            .unwrap();
        assert_eq!(dev.provider(), "vfio");
        assert_eq!(dev.mac(), Some([2, 0, 0, 0, 0, mac_last]));
        let pd = dev.alloc_pd().unwrap();
        let cq = dev.create_cq(256).unwrap();
        let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
        let mr = pd.register(1 << 16, AccessFlags::ALL).unwrap();
        End {
            model,
            dev,
            cq,
            qp,
            mr,
            ip,
        }
    }

    fn connect(a: &End, b: &End) {
        for (me, peer) in [(a, b), (b, a)] {
            me.dev.set_neighbor(peer.ip, peer.dev.mac().unwrap());
            me.qp
                .modify(&QpAttr {
                    qp_state: Some(QpState::Init),
                    pkey_index: Some(0),
                    port_num: Some(1),
                    qp_access_flags: Some(AccessFlags::ALL),
                    ..Default::default()
                })
                .unwrap();
            me.qp
                .modify(&QpAttr {
                    qp_state: Some(QpState::Rtr),
                    ah_attr: Some(AhAttr::new(peer.ip)),
                    path_mtu: Some(Mtu::Mtu2048),
                    dest_qp_num: Some(peer.qp.qp_num()),
                    rq_psn: Some(7),
                    max_dest_rd_atomic: Some(4),
                    min_rnr_timer: Some(1),
                    ..Default::default()
                })
                .unwrap();
        }
        for me in [a, b] {
            me.qp
                .modify(&QpAttr {
                    qp_state: Some(QpState::Rts),
                    sq_psn: Some(7),
                    timeout: Some(14),
                    retry_cnt: Some(7),
                    rnr_retry: Some(7),
                    max_rd_atomic: Some(4),
                    ..Default::default()
                })
                .unwrap();
            assert_eq!(me.qp.state(), QpState::Rts);
            assert_eq!(me.model.qp_state(me.qp.qp_num()), Some(3));
        }
    }

    fn sge(mr: &MemoryRegion, off: u64, len: u32) -> Sge {
        Sge {
            addr: mr.addr() + off,
            length: len,
            lkey: mr.lkey(),
        }
    }

    #[test]
    fn write_read_send_through_the_vfio_provider() {
        let a = end(1, "10.1.0.1");
        let b = end(2, "10.1.0.2");
        let _link = ModelLink::connect(&a.model, &b.model, None).unwrap();
        connect(&a, &b);
        let wait = Duration::from_secs(10);

        // WRITE 6000 bytes.
        let data = super::pattern(6000, 3);
        a.mr.write(0, &data).unwrap();
        a.qp.post_send(&[SendWr::new(
            11,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr() + 8,
                rkey: b.mr.rkey(),
            },
            vec![sge(&a.mr, 0, 6000)],
        )])
        .unwrap();
        let wc = a.cq.wait_one(wait).expect("WRITE completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (11, WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let mut got = vec![0u8; 6000];
        b.mr.read(8, &mut got).unwrap();
        assert_eq!(got, data);

        // READ it back into a's region at 10000.
        a.qp.post_send(&[SendWr::new(
            12,
            WrOpcode::RdmaRead {
                remote_addr: b.mr.addr() + 8,
                rkey: b.mr.rkey(),
            },
            vec![sge(&a.mr, 10_000, 6000)],
        )])
        .unwrap();
        let wc = a.cq.wait_one(wait).expect("READ completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (12, WcStatus::Success, WcOpcode::RdmaRead)
        );
        let got = a.mr.with(|m| m[10_000..16_000].to_vec());
        assert_eq!(got, data);

        // SEND with immediate into a posted receive.
        b.qp.post_recv(&[RecvWr {
            wr_id: 21,
            sg_list: vec![sge(&b.mr, 30_000, 4096)],
        }])
        .unwrap();
        let msg = super::pattern(2500, 9);
        a.mr.with(|m| m[20_000..22_500].copy_from_slice(&msg));
        a.qp.post_send(&[SendWr::new(
            13,
            WrOpcode::SendWithImm(0xfeed_beef),
            vec![sge(&a.mr, 20_000, 2500)],
        )])
        .unwrap();
        let wc = a.cq.wait_one(wait).expect("SEND completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (13, WcStatus::Success, WcOpcode::Send)
        );
        let wc = b.cq.wait_one(wait).expect("receive completion");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (21, WcStatus::Success, WcOpcode::Recv)
        );
        assert_eq!(wc.byte_len, 2500);
        assert_eq!(wc.imm_data, Some(0xfeed_beef));
        let mut got = vec![0u8; 2500];
        b.mr.read(30_000, &mut got).unwrap();
        assert_eq!(got, msg);

        // A remote access outside the region fails with a remote access error, not a hang.
        a.qp.post_send(&[SendWr::new(
            14,
            WrOpcode::RdmaWrite {
                remote_addr: b.mr.addr() + (1 << 16),
                rkey: b.mr.rkey(),
            },
            vec![sge(&a.mr, 0, 64)],
        )])
        .unwrap();
        let wc = a.cq.wait_one(wait).expect("error completion");
        assert_eq!(
            (wc.wr_id, wc.status),
            (14, WcStatus::RemAccessErr),
            "{wc:?}"
        );
    }
}
