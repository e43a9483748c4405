//! A transfer on the device model whose peer process is killed midway: this end's work fails
//! (transport retries exceeded), and closing the device returns every page to the host (the
//! firmware holds none, nothing stays mapped) and leaves no thread behind (the driver's event
//! thread, the model port's receive thread and the stats publisher all stop).
//!
//! The peer is `rdmesh pingpong --provider model` in a child process (rc_pingpong's
//! out-of-band exchange, which this test speaks itself); it is killed with SIGKILL.

use std::io::{Read, Write};
use std::net::{IpAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rdmesh_host::cli::pingpong::{Dest, DONE, MSG_LEN};
use rdmesh_host::verbs::{
    AccessFlags, AhAttr, Device, Mtu, QpAttr, QpCap, QpState, RecvWr, SendWr, Sge, WcOpcode,
    WcStatus, WrOpcode,
};
use rdmesh_host::vfio_provider::ModelPortConfig;
use rdmesh_tests::{free_tcp_port, rdmesh_bin};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn killed_peer_mid_transfer_pages_returned_no_thread_left() {
    let before = threads();
    let (me, peer): (IpAddr, IpAddr) =
        ("127.0.99.1".parse().unwrap(), "127.0.99.2".parse().unwrap());
    let port = free_tcp_port();
    let mut child = Command::new(rdmesh_bin())
        .args([
            "pingpong",
            "-p",
            &port.to_string(),
            "--provider",
            "model",
            "--bind",
        ])
        .arg(peer.to_string())
        .args([
            "--no-raw-rx",
            "-n",
            "100000",
            "-s",
            "4096",
            "--timeout",
            "30",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the peer");

    let dev = Device::open_model(ModelPortConfig::new(me)).unwrap();
    let model = dev.model().unwrap();
    assert!(threads() >= before + 2, "event and port threads run");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(1024).unwrap();
    let qp = pd
        .create_qp(
            &cq,
            &cq,
            QpCap {
                max_send_wr: 16,
                max_recv_wr: 512,
                max_sge: 1,
            },
        )
        .unwrap();
    let mr = pd.register(4096 * 513, AccessFlags::LOCAL_WRITE).unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(AccessFlags::NONE),
        ..Default::default()
    })
    .unwrap();
    for i in 0..500u64 {
        qp.post_recv(&[RecvWr {
            wr_id: 1000 + i,
            sg_list: vec![Sge {
                addr: mr.addr() + 4096 * (1 + i),
                length: 4096,
                lkey: mr.lkey(),
            }],
        }])
        .unwrap();
    }

    // rc_pingpong's exchange, as its client.
    let start = Instant::now();
    let mut s = loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("connecting to the peer: {e}"),
        }
    };
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mine = Dest {
        lid: 0,
        qpn: qp.qp_num(),
        psn: 7,
        gid: match me {
            IpAddr::V4(v) => v.to_ipv6_mapped(),
            IpAddr::V6(v) => v,
        },
    };
    s.write_all(&mine.to_wire()).unwrap();
    let mut m = [0u8; MSG_LEN];
    s.read_exact(&mut m).unwrap();
    let theirs = Dest::from_wire(&m).unwrap();
    s.write_all(DONE).unwrap();
    dev.set_neighbor(peer, ModelPortConfig::new(peer).port_mac());
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ah_attr: Some(AhAttr::new(theirs.addr())),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: Some(theirs.qpn),
        rq_psn: Some(theirs.psn),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(12),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        timeout: Some(12),
        retry_cnt: Some(3),
        rnr_retry: Some(7),
        sq_psn: Some(mine.psn),
        max_rd_atomic: Some(1),
        ..Default::default()
    })
    .unwrap();

    let send = |i: u64| {
        qp.post_send(&[SendWr::new(
            i,
            WrOpcode::Send,
            vec![Sge {
                addr: mr.addr(),
                length: 4096,
                lkey: mr.lkey(),
            }],
        )])
        .unwrap()
    };
    // Ping-pong until the transfer runs, then kill the peer mid-transfer.
    let mut received = 0;
    for i in 0..50u64 {
        send(i);
        let (mut sent, mut got) = (false, false);
        while !(sent && got) {
            let wc = cq.wait_one(Duration::from_secs(10)).expect("a completion");
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            match wc.opcode {
                WcOpcode::Recv => {
                    // rc_pingpong echoes what it received: so does this end.
                    let mut b = vec![0u8; 4096];
                    mr.read(4096 * (1 + (wc.wr_id - 1000) as usize), &mut b)
                        .unwrap();
                    mr.write(0, &b).unwrap();
                    got = true
                }
                _ => sent = true,
            }
        }
        received += 1;
    }
    assert_eq!(received, 50);
    child.kill().unwrap();
    let _ = child.wait();
    send(50);
    let wc = loop {
        let wc = cq
            .wait_one(Duration::from_secs(10))
            .expect("the failed SEND");
        if wc.wr_id == 50 {
            break wc;
        }
    };
    assert_eq!(wc.status, WcStatus::RetryExcErr, "{wc:?}");
    assert!(model.pages_held() > 0);

    drop((qp, cq, mr, pd, dev));
    assert_eq!(model.pages_held(), 0, "the firmware returned every page");
    assert_eq!(model.mapped_bytes(), 0, "nothing stays mapped");
    let start = Instant::now();
    while threads() > before && start.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(threads(), before, "no thread left");
}
