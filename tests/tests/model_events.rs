//! The driver's background event thread against the device model: a page request (and a page
//! reclaim) the firmware raises while no command runs is answered; a fatal health syndrome
//! mid-transfer is reported by name, every outstanding work request completes with a flush
//! error, and teardown still releases every page and DMA mapping.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use rdmesh_host::verbs::{
    AccessFlags, AhAttr, Device, Mtu, QpAttr, QpCap, QpState, RecvWr, SendWr, Sge, WcStatus,
    WrOpcode,
};
use rdmesh_host::vfio_provider::ModelPortConfig;
use rdmesh_vfio::mlx5::{DriverConfig, Hca};
use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelFaults};

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what} within {limit:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn page_request_and_reclaim_answered_while_no_command_runs() {
    let dev = ModelDevice::new(ModelConfig::default());
    let hca = Hca::bring_up(
        dev.mmio(),
        dev.dma(),
        dev.interrupt(),
        DriverConfig::for_model("events"),
    )
    .unwrap();
    assert!(hca.event_thread_running());
    // Let bring-up's own page traffic settle.
    wait_for("the regular pages", Duration::from_secs(2), || {
        dev.pages_held() >= 64 + 256 + 32
    });
    let held = dev.pages_held();
    let posted = hca.command_stats().posted;
    let serviced = hca.page_requests_serviced();

    // The firmware wants 16 more pages; nobody calls into the driver meanwhile.
    assert!(dev.request_pages(16));
    wait_for("16 more pages given", Duration::from_secs(2), || {
        dev.pages_held() == held + 16
    });
    assert_eq!(hca.pages_lent() as u64, held + 16);
    assert!(hca.page_requests_serviced() > serviced);
    // Exactly the MANAGE_PAGES the request needed went out, from the event thread.
    let history = hca.command_history();
    let new: Vec<_> = history[posted as usize..].to_vec();
    assert!(
        !new.is_empty()
            && new
                .iter()
                .all(|o| *o == rdmesh_core::mlx5::cmd::Opcode::ManagePages),
        "{new:?}"
    );

    // And gives 8 back.
    assert!(dev.request_pages(-8));
    wait_for("8 pages taken back", Duration::from_secs(2), || {
        dev.pages_held() == held + 8
    });
    assert_eq!(hca.pages_lent() as u64, held + 8);

    drop(hca);
    assert_eq!(dev.pages_held(), 0, "teardown takes every page back");
    assert_eq!(dev.mapped_bytes(), 0, "every DMA buffer is unmapped");
}

#[test]
fn fatal_syndrome_names_itself_flushes_work_and_teardown_releases_pages() {
    let ip: IpAddr = "127.0.98.1".parse().unwrap();
    let mut cfg = ModelPortConfig::new(ip);
    cfg.udp_port = 0;
    let dev = Device::open_model(cfg).unwrap();
    let model = dev.model().expect("a model-backed device");
    let pd = dev.alloc_pd().unwrap();
    let cq = dev.create_cq(256).unwrap();
    let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
    let mr = pd.register(1 << 20, AccessFlags::ALL).unwrap();
    // A peer that never answers (nothing listens there): the WRITEs stay outstanding.
    let peer: IpAddr = "127.0.98.2".parse().unwrap();
    dev.set_neighbor(peer, [2, 0, 0, 0, 0, 2]);
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(AccessFlags::ALL),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rtr),
        ah_attr: Some(AhAttr {
            dgid: peer,
            udp_port: 9,
        }),
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: Some(0x99),
        rq_psn: Some(0),
        max_dest_rd_atomic: Some(1),
        min_rnr_timer: Some(1),
        ..Default::default()
    })
    .unwrap();
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(0),
        timeout: Some(20),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(1),
        ..Default::default()
    })
    .unwrap();
    qp.post_recv(&[RecvWr {
        wr_id: 100,
        sg_list: vec![Sge {
            addr: mr.addr(),
            length: 64,
            lkey: mr.lkey(),
        }],
    }])
    .unwrap();
    let wrs: Vec<SendWr> = (0..10)
        .map(|i| {
            SendWr::new(
                i,
                WrOpcode::RdmaWrite {
                    remote_addr: 0x1000,
                    rkey: 0x55,
                },
                vec![Sge {
                    addr: mr.addr() + i * 4096,
                    length: 4096,
                    lkey: mr.lkey(),
                }],
            )
        })
        .collect();
    qp.post_send(&wrs).unwrap();
    assert!(cq.poll_one().is_none(), "the WRITEs are outstanding");

    // Firmware internal error (health syndrome 0x1) mid-transfer.
    model.set_faults(ModelFaults {
        health_syndrome: Some(0x1),
        ..Default::default()
    });
    wait_for("the device declared dead", Duration::from_secs(2), || {
        dev.fatal_error().is_some()
    });
    let why = dev.fatal_error().unwrap();
    assert!(
        why.contains("health syndrome 0x1 (firmware internal error)"),
        "{why}"
    );
    assert_eq!(qp.state(), QpState::Err);

    // Every outstanding work request completes, with a flush error.
    let mut got = Vec::new();
    wait_for("11 flush completions", Duration::from_secs(2), || {
        while let Some(wc) = cq.poll_one() {
            got.push(wc);
        }
        got.len() >= 11
    });
    assert!(
        got.iter().all(|w| w.status == WcStatus::WrFlushErr),
        "{got:?}"
    );
    let mut ids: Vec<u64> = got.iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, (0..10).chain([100]).collect::<Vec<_>>());
    // Posting fails, naming the syndrome.
    let e = qp.post_send(&wrs[..1]).unwrap_err().to_string();
    assert!(e.contains("firmware internal error"), "{e}");

    drop((qp, cq, mr, pd, dev));
    assert_eq!(model.mapped_bytes(), 0, "every page and queue is unmapped");
}
