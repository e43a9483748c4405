use rdmesh_core::mlx5::cmd::*;

use super::device;
use crate::model::{ModelConfig, ModelDevice};

#[test]
fn bring_up_gives_pages_and_caps_then_tears_down() {
    let mut h = device(1);
    let cfg = ModelConfig::default();
    // Boot + init pages, plus the regular pages the EQ's page-request event asked for.
    assert_eq!(
        h.dev.pages_held(),
        u64::from(cfg.boot_pages + cfg.init_pages + cfg.regular_pages)
    );
    let c = h.dev.counters();
    assert!(c.commands_executed >= 15, "{c:?}");
    assert_eq!(c.commands_failed, 0, "{:?}", h.dev.last_command_error());
    // The EQ carried command-completion events once it existed.
    assert!(c.eqes_written >= 1);

    let out = h
        .exec(
            &QueryHcaCapIn {
                op_mod: hca_cap_op_mod(CAP_GENERAL, CAP_MODE_CUR),
                ..Default::default()
            },
            0,
        )
        .unwrap();
    let cap = HcaCap::parse_at(QueryHcaCapOut::parse(&out).unwrap().capability, 0).unwrap();
    assert_eq!(cap.port_type, PORT_TYPE_ETH);
    assert!(cap.roce && cap.uar_4k && cap.fast_teardown);
    assert_eq!(cap.cmdif_checksum, 0);
    let out = h
        .exec(
            &QueryHcaCapIn {
                op_mod: hca_cap_op_mod(CAP_ROCE, CAP_MODE_CUR),
                ..Default::default()
            },
            0,
        )
        .unwrap();
    let roce = RoceCap::parse_at(QueryHcaCapOut::parse(&out).unwrap().capability, 0).unwrap();
    assert!(roce.sw_r_roce_src_udp_port, "SET_HCA_CAP(RoCE) took effect");
    assert_eq!(roce.r_roce_dest_udp_port, 4791);

    let out = h.exec(&QueryNicVportContextIn::default(), 0).unwrap();
    let ctx = QueryNicVportContextOut::parse(&out)
        .unwrap()
        .nic_vport_context;
    assert!(ctx.roce_en);
    assert_eq!(ctx.permanent_address.octets(), [2, 0, 0, 0, 0, 1]);

    // Teardown in the reference order: EQ, UAR, TEARDOWN_HCA, reclaim pages, DISABLE_HCA.
    h.exec(&DestroyEqIn { eq_number: h.eqn }, 0).unwrap();
    h.exec(&DeallocUarIn { uar: h.uar }, 0).unwrap();
    let out = h
        .exec(
            &TeardownHcaIn {
                profile: TEARDOWN_PREPARE_FAST_TEARDOWN,
            },
            0,
        )
        .unwrap();
    assert!(!TeardownHcaOut::parse(&out).unwrap().state);
    let held = h.dev.pages_held() as usize;
    let out = h
        .exec(
            &ManagePagesIn {
                op_mod: MANAGE_PAGES_TAKE,
                input_num_entries: held as u32,
                ..Default::default()
            },
            held * 8,
        )
        .unwrap();
    let taken = ManagePagesOut::parse(&out).unwrap();
    assert_eq!(taken.output_num_entries as usize, held);
    assert_eq!(taken.pas.len(), held);
    assert_eq!(h.dev.pages_held(), 0);
    h.exec(&DisableHcaIn::default(), 0).unwrap();
    // NIC interface state: the driver asks for DISABLED, the register reports it.
    let cur = h.bar.read32_be(init_seg::CMDQ_ADDR_L_SZ);
    h.bar.write32_be(
        init_seg::CMDQ_ADDR_L_SZ,
        init_seg::with_nic_state(cur, NicIfcState::Disabled),
    );
    let st = CmdqAddrLSz::decode(h.bar.read32_be(init_seg::CMDQ_ADDR_L_SZ));
    assert_eq!(st.nic_ifc, NicIfcState::Disabled);
    assert_eq!((st.log_cmdq_size, st.log_cmdq_stride), (5, 6));
}

#[test]
fn init_segment_and_health_counter() {
    let dev = ModelDevice::new(ModelConfig::default());
    let bar = dev.mmio();
    let (maj, min, sub) = init_seg::fw_version(
        bar.read32_be(init_seg::FW_REV),
        bar.read32_be(init_seg::CMDIF_REV_FW_SUB),
    );
    assert_eq!((maj, min, sub), (28, 39, 1002));
    assert_eq!(
        init_seg::cmdif_rev(bar.read32_be(init_seg::CMDIF_REV_FW_SUB)),
        5
    );
    // `initializing` clears after the configured number of polls.
    let polls = (0..10)
        .take_while(|_| init_seg::is_initializing(bar.read32_be(init_seg::INITIALIZING)))
        .count();
    assert_eq!(polls, 3);
    let a = bar.read32_be(init_seg::HEALTH_COUNTER);
    let b = bar.read32_be(init_seg::HEALTH_COUNTER);
    assert_ne!(a, b, "health counter advances while alive");
    // Outside the BAR: all ones, no panic.
    assert_eq!(bar.read32(bar.len()), u32::MAX);
    bar.write64(bar.len() + 8, 0);
    // No EQ yet: no interrupt.
    assert!(!dev.interrupt().wait(std::time::Duration::from_millis(1)));
}

#[test]
fn command_completion_raises_eqe_and_interrupt_when_armed() {
    let mut h = device(1);
    let irq = h.dev.interrupt();
    while irq.wait(std::time::Duration::ZERO) {}
    let _ = h.eq_events().unwrap();
    // Arm the EQ, run a command: a CMD EQE for slot 0 and an interrupt.
    h.bar.write32_be(
        h.uar as usize * 4096 + eqe::EQ_DOORBELL_ARM_OFFSET,
        eqe::eq_doorbell_value(h.eqn, h.dev.counters().eqes_written as u32),
    );
    let before = h.dev.counters().interrupts;
    h.exec(&AllocPdIn {}, 0).unwrap();
    let evs = h.eq_events().unwrap();
    assert!(evs.contains(&EqeRepr::Cmd { vector: 1 }), "{evs:?}");
    assert_eq!(h.dev.counters().interrupts, before + 1);
    assert!(irq.wait(std::time::Duration::from_millis(10)));
}
