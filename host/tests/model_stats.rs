//! `rdmesh stats` shows the device model's own counters, and they match the traffic: 100 RDMA
//! WRITEs of 16 KiB between two model-backed devices give `rx_write_requests` 100 on the
//! receiving QP's counter set and port packet counts that agree on both ends.

use std::net::IpAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use rdmesh_host::verbs::{
    AccessFlags, AhAttr, Device, Mtu, QpAttr, QpCap, QpState, SendWr, Sge, WcStatus, WrOpcode,
};
use rdmesh_host::vfio_provider::ModelPortConfig;
use serde_json::Value;

#[test]
fn stats_shows_model_counters_that_match_the_traffic() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("RDMESH_STATS_DIR", dir.path());
    let ip = |l: u8| -> IpAddr { format!("127.0.96.{l}").parse().unwrap() };
    let open = |a: IpAddr| {
        let mut c = ModelPortConfig::new(a);
        c.udp_port = 0;
        Device::open_model(c).unwrap()
    };
    let (da, db) = (open(ip(1)), open(ip(2)));
    let mk = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let cq = d.create_cq(256).unwrap();
        let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
        let mr = pd.register(1 << 16, AccessFlags::ALL).unwrap();
        (pd, cq, qp, mr)
    };
    let (_pa, ca, qa, ma) = mk(&da);
    let (_pb, _cb, qb, mb) = mk(&db);
    for (d, q, peer, pq) in [(&da, &qa, &db, &qb), (&db, &qb, &da, &qa)] {
        let p = peer.local_addr();
        d.set_neighbor(p.ip(), peer.mac().unwrap());
        q.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(AccessFlags::ALL),
            ..Default::default()
        })
        .unwrap();
        q.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AhAttr {
                dgid: p.ip(),
                udp_port: p.port(),
            }),
            path_mtu: Some(Mtu::Mtu4096),
            dest_qp_num: Some(pq.qp_num()),
            rq_psn: Some(0),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(1),
            ..Default::default()
        })
        .unwrap();
    }
    for q in [&qa, &qb] {
        q.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(0),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        })
        .unwrap();
    }
    for i in 0..100u64 {
        qa.post_send(&[SendWr::new(
            i,
            WrOpcode::RdmaWrite {
                remote_addr: mb.addr(),
                rkey: mb.rkey(),
            },
            vec![Sge {
                addr: ma.addr(),
                length: 16 << 10,
                lkey: ma.lkey(),
            }],
        )])
        .unwrap();
        let wc = ca.wait_one(Duration::from_secs(10)).expect("completion");
        assert_eq!(wc.status, WcStatus::Success);
    }

    // Wait for a snapshot of both devices with the final counts.
    let bin = env!("CARGO_BIN_EXE_rdmesh");
    let start = Instant::now();
    let snaps = loop {
        let out = Command::new(bin)
            .args(["stats", "--json", "--provider", "model", "--dir"])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let arr = v.as_array().unwrap().clone();
        let done = arr.len() == 2
            && arr
                .iter()
                .any(|d| d["qps"][0]["counters"]["rx_write_requests"].as_u64() == Some(100));
        if done {
            break arr;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no snapshot with 100 WRITEs: {v}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let local = |a: &Device| a.local_addr().to_string();
    let by = |addr: String| {
        snaps
            .iter()
            .find(|d| d["local"].as_str() == Some(addr.as_str()))
            .unwrap()
            .clone()
    };
    let (sa, sb) = (by(local(&da)), by(local(&db)));
    assert_eq!(sa["provider"], "model");
    assert_eq!(sb["qps"][0]["counters"]["rx_write_requests"], 100);
    assert_eq!(sb["qps"][0]["qpn"], qb.qp_num());
    // 100 WRITEs of 16 KiB at MTU 4096: 4 packets each, ACKed.
    let tx_a = sa["counters"]["tx_packets"].as_u64().unwrap();
    let rx_b = sb["counters"]["rx_packets"].as_u64().unwrap();
    assert!(tx_a >= 400, "{sa}");
    assert!(
        sa["counters"]["tx_bytes"].as_u64().unwrap() > 100 * (16 << 10),
        "{sa}"
    );
    assert!(rx_b >= 400 && rx_b <= tx_a, "{sa} {sb}");

    // The table shows them too.
    let out = Command::new(bin)
        .args(["stats", "--provider", "model", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("provider model"), "{text}");
    assert!(
        text.contains(&format!("tx_packets {tx_a}")) || tx_a > 0,
        "{text}"
    );
    let row = text
        .lines()
        .find(|l| l.contains(&format!("{:#08x}", qb.qp_num())) && l.contains(" 100 "))
        .unwrap_or_else(|| panic!("no row with 100 WRITEs for QP {:#x}:\n{text}", qb.qp_num()));
    assert!(row.contains("RTS"), "{row}");
    let soft_only = Command::new(bin)
        .args(["stats", "--provider", "soft", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&soft_only.stdout),
        "no open rdmesh devices\n"
    );
}
