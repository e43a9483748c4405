//! Bring-up and teardown of the mlx5 VFIO driver (`rdmesh_vfio::mlx5`) against the in-process
//! device model: the command sequence is the reference order (rdma-core `mlx5_vfio.c`,
//! docs/mlx5.md), the pages the model asked for are the pages it holds, commands complete
//! through the async EQ once it exists (including a page request serviced from an EQE), the GID
//! table is programmed with SET_ROCE_ADDRESS, and dropping the device runs the reference
//! teardown that leaves the model with no objects and no pages.

use rdmesh_core::mlx5::cmd::Opcode;
use rdmesh_vfio::mlx5::{gid_of, Access, DriverConfig, Hca, Mr, Qp, QpCaps};
use rdmesh_vfio::model::{ModelConfig, ModelDevice};

fn bring_up(dev: &ModelDevice, name: &str) -> Hca {
    Hca::bring_up(
        dev.mmio(),
        dev.dma(),
        dev.interrupt(),
        DriverConfig::for_model(name),
    )
    .unwrap_or_else(|e| {
        panic!(
            "bring-up failed: {e}; model: {:?}",
            dev.last_command_error()
        )
    })
}

/// Collapses runs of the same opcode (MANAGE_PAGES may be split over several commands).
fn dedup(ops: &[Opcode]) -> Vec<Opcode> {
    let mut v: Vec<Opcode> = ops.to_vec();
    v.dedup();
    v
}

#[test]
fn bringup_follows_the_reference_order() {
    let cfg = ModelConfig {
        // Not a multiple of the per-command page count: the driver splits MANAGE_PAGES.
        init_pages: 700,
        ..ModelConfig::default()
    };
    let dev = ModelDevice::new(cfg);
    let hca = bring_up(&dev, "model-0000:01:00.0");
    // Once the async EQ exists the model asks for its regular pages; the driver's event
    // thread answers at once, with no command of ours running.
    let start = std::time::Instant::now();
    while dev.pages_held() < u64::from(cfg.boot_pages + cfg.init_pages + cfg.regular_pages) {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(2),
            "the event thread did not service the page request"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }

    let history = hca.command_history();
    let expected = [
        Opcode::EnableHca,
        Opcode::QueryIssi,
        Opcode::SetIssi,
        Opcode::QueryPages, // boot
        Opcode::ManagePages,
        Opcode::AccessReg, // HOST_ENDIANNESS
        Opcode::QueryHcaCap,
        Opcode::SetHcaCap, // general
        Opcode::QueryHcaCap,
        Opcode::SetHcaCap,  // RoCE: sw_r_roce_src_udp_port
        Opcode::QueryPages, // init
        Opcode::ManagePages,
        Opcode::InitHca,
        Opcode::ModifyNicVportContext, // roce_en
        Opcode::QueryNicVportContext,  // MAC
        Opcode::AccessReg,             // PAOS, then PMTU
        Opcode::AllocUar,
        Opcode::CreateEq,
        Opcode::ManagePages, // regular pages, from the event thread
    ];
    assert_eq!(dedup(&history), expected, "full history: {history:?}");
    // 700 init pages at 512 per command: two MANAGE_PAGES; then the regular pages.
    let manage = history
        .iter()
        .filter(|&&o| o == Opcode::ManagePages)
        .count();
    assert_eq!(manage, 4, "{history:?}");

    let info = hca.info().clone();
    assert_eq!(info.fw, cfg.fw_version);
    assert_eq!(info.mac, cfg.mac);
    assert_eq!(
        info.startup_pages,
        (cfg.boot_pages + cfg.init_pages) as usize
    );
    assert_eq!(info.caps.cmdif_checksum, 0, "checksums turned off");
    assert!(info.roce.unwrap().sw_r_roce_src_udp_port);

    // The model executed exactly what the driver posted, and nothing failed.
    let c = dev.counters();
    assert_eq!(c.commands_executed, history.len() as u64);
    assert_eq!(c.cmd_doorbells, history.len() as u64);
    assert_eq!(c.commands_failed, 0, "{:?}", dev.last_command_error());
    assert_eq!(
        dev.pages_held(),
        u64::from(cfg.boot_pages + cfg.init_pages + cfg.regular_pages)
    );
    assert_eq!(dev.object_counts(), (1, 0, 0, 1, 0, 0));

    // After CREATE_EQ, commands complete through command EQEs, and the page request the
    // model raises once the EQ exists is serviced with MANAGE_PAGES.
    let pd = hca.alloc_pd().unwrap();
    let stats = hca.command_stats();
    assert!(stats.eq_completions >= 1, "{stats:?}");
    assert!(dev.counters().eqes_written >= 1);
    hca.poll_events().unwrap();
    assert_eq!(
        dev.pages_held(),
        u64::from(cfg.boot_pages + cfg.init_pages + cfg.regular_pages),
        "page-request EQE serviced"
    );
    assert_eq!(hca.pages_lent() as u64, dev.pages_held());

    // GID table: nobody else fills it under VFIO.
    let gid = gid_of("192.0.2.1".parse().unwrap());
    hca.set_gid(1, 0, gid, None, None).unwrap();
    let e = hca.query_gid(1, 0).unwrap();
    assert_eq!(e.gid, gid);
    assert_eq!(e.mac, cfg.mac);
    assert_eq!(e.vlan, None);
    let err = hca
        .set_gid(1, 4096, gid, None, None)
        .unwrap_err()
        .to_string();
    assert!(err.contains("GID index 4096"), "{err}");

    // Objects, then teardown in reference order when the last handle goes.
    let mr = Mr::register(&pd, 8192, Access::ALL).unwrap();
    let cq = hca.create_cq(64).unwrap();
    let qp = Qp::create(&pd, &cq, &cq, QpCaps::default()).unwrap();
    assert_eq!(dev.object_counts(), (1, 1, 1, 1, 1, 1));
    assert_eq!(dev.qp_state(qp.qpn()), Some(0));
    assert_eq!(qp.query_state().unwrap(), 0);
    drop((qp, cq, mr, pd));
    assert_eq!(dev.object_counts(), (1, 0, 0, 1, 0, 0));

    let before = dev.counters().commands_executed;
    drop(hca);
    let c = dev.counters();
    // DESTROY_EQ, DEALLOC_UAR, TEARDOWN_HCA, MANAGE_PAGES(TAKE)×n, DISABLE_HCA.
    assert!(c.commands_executed - before >= 5, "{c:?}");
    assert_eq!(c.commands_failed, 0, "{:?}", dev.last_command_error());
    assert_eq!(dev.object_counts(), (0, 0, 0, 0, 0, 0));
    assert_eq!(dev.pages_held(), 0, "every lent page reclaimed");
}

#[test]
fn two_devices_bring_up_independently() {
    let a = ModelDevice::new(ModelConfig::default());
    let b = ModelDevice::new(ModelConfig {
        mac: [2, 0, 0, 0, 0, 2],
        ..ModelConfig::default()
    });
    let ha = bring_up(&a, "model-a");
    let hb = bring_up(&b, "model-b");
    assert_eq!(ha.info().mac, [2, 0, 0, 0, 0, 1]);
    assert_eq!(hb.info().mac, [2, 0, 0, 0, 0, 2]);
    drop((ha, hb));
    assert_eq!(a.pages_held(), 0);
    assert_eq!(b.pages_held(), 0);
}
