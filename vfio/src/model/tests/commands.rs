use rdmesh_core::mlx5::cmd::*;

use super::{device, pair};
use crate::model::harness::{Endpoint, EndpointConfig, Harness};
use crate::model::{ModelConfig, ModelDevice};

/// Runs `input` and returns (status, syndrome) of the output.
fn status(h: &mut Harness, input: &[u8], out_len: usize) -> (CmdStatus, u32) {
    let out = h.exec_raw(input, out_len).expect("delivered");
    let o = OutHeader::parse(&out).unwrap();
    (o.status, o.syndrome)
}

fn emit<I: CmdIn>(i: &I) -> Vec<u8> {
    let mut b = vec![0u8; i.buffer_len()];
    i.emit(&mut b).unwrap();
    b
}

#[test]
fn invalid_input_gets_statuses_with_syndromes() {
    let mut h = device(1);
    // Unknown opcode.
    let mut raw = vec![0u8; 16];
    raw[0..2].copy_from_slice(&0x0777u16.to_be_bytes());
    let (s, synd) = status(&mut h, &raw, 16);
    assert_eq!(s, CmdStatus::BadOp);
    assert_eq!(synd & 0xffff, 0x0777, "syndrome names the opcode");
    // Input shorter than the layout.
    let full = emit(&CreateCqIn::default());
    assert_eq!(status(&mut h, &full[..32], 16).0, CmdStatus::BadInpLen);
    // Output shorter than the command's answer.
    assert_eq!(
        status(&mut h, &emit(&QueryHcaCapIn::default()), 16).0,
        CmdStatus::BadOutpLen
    );
    // Unknown handles.
    assert_eq!(
        status(&mut h, &emit(&DeallocPdIn { pd: 0xabc }), 16).0,
        CmdStatus::BadRes
    );
    assert_eq!(
        status(&mut h, &emit(&DestroyCqIn { cqn: 0xabc }), 16).0,
        CmdStatus::BadRes
    );
    assert_eq!(
        status(&mut h, &emit(&DestroyQpIn { qpn: 0xabc }), 16).0,
        CmdStatus::BadRes
    );
    let cq = CreateCqIn {
        cq_context: CqContext {
            uar_page: 0x999,
            log_cq_size: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(status(&mut h, &emit(&cq), 16).0, CmdStatus::BadRes);
    // Bad parameter: 128-byte CQEs are not modeled.
    let cq = CreateCqIn {
        cq_context: CqContext {
            uar_page: h.uar,
            cqe_sz: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(status(&mut h, &emit(&cq), 16).0, CmdStatus::BadParam);
    // A PAS that does not cover the queue.
    let pas = [0x1000u64];
    let cq = CreateCqIn {
        cq_context: CqContext {
            uar_page: h.uar,
            log_cq_size: 10,
            c_eqn_or_apu_element: u32::from(h.eqn),
            ..Default::default()
        },
        pas: Pas::Addrs(&pas),
        ..Default::default()
    };
    assert_eq!(status(&mut h, &emit(&cq), 16).0, CmdStatus::BadParam);
    assert!(h.dev.last_command_error().unwrap().contains("CREATE_CQ"));
    // Busy: an EQ with CQs cannot go.
    let e = Endpoint::create(&mut h, EndpointConfig::default()).unwrap();
    let eqn = h.eqn;
    assert_eq!(
        status(&mut h, &emit(&DestroyEqIn { eq_number: eqn }), 16).0,
        CmdStatus::ResBusy
    );
    // Wrong QP state: RTR2RTS on a QP in RESET.
    let (s, _) = status(
        &mut h,
        &emit(&Rtr2RtsQpIn {
            qpn: e.qpn,
            ..Default::default()
        }),
        16,
    );
    assert_eq!(s, CmdStatus::BadQpState);
    assert_eq!(h.dev.qp_state(e.qpn), Some(QP_STATE_RST));
    // INIT2RTR with a GID index nobody programmed.
    h.exec(
        &Rst2InitQpIn {
            qpn: e.qpn,
            ..Default::default()
        },
        0,
    )
    .unwrap();
    let bad = Init2RtrQpIn {
        qpn: e.qpn,
        qpc: QpContext {
            mtu: 3,
            remote_qpn: 5,
            primary_address_path: AddressPath {
                src_addr_index: 9,
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(status(&mut h, &emit(&bad), 16).0, CmdStatus::BadParam);
    assert!(h
        .dev
        .last_command_error()
        .unwrap()
        .contains("SET_ROCE_ADDRESS"));
    // QUERY_QP reports the state.
    let out = h.exec(&QueryQpIn { qpn: e.qpn }, 0).unwrap();
    assert_eq!(QueryQpOut::parse(&out).unwrap().qpc.state, QP_STATE_INIT);
    assert!(h.dev.counters().commands_failed >= 12);
}

#[test]
fn pages_and_hca_state_are_enforced() {
    let dev = ModelDevice::new(ModelConfig::default());
    let mut h = Harness::new(dev).unwrap();
    // Before ENABLE_HCA.
    assert_eq!(
        status(&mut h, &emit(&QueryIssiIn {}), 0x70).0,
        CmdStatus::BadSysState
    );
    h.exec(&EnableHcaIn::default(), 0).unwrap();
    // Capabilities need the boot pages.
    let (s, synd) = status(
        &mut h,
        &emit(&QueryHcaCapIn::default()),
        QueryHcaCapIn::OUT_LEN,
    );
    assert_eq!(s, CmdStatus::BadSysState);
    assert_eq!(synd >> 16, crate::model::commands::SYND_PAGES);
    assert_eq!(h.give_pages(PAGES_BOOT).unwrap(), 64);
    // INIT_HCA needs the init pages too.
    assert_eq!(
        status(&mut h, &emit(&InitHcaIn::default()), 16).0,
        CmdStatus::BadSysState
    );
    // A page that is not mapped is refused.
    let pas = [0xdead_0000u64];
    let give = ManagePagesIn {
        op_mod: MANAGE_PAGES_GIVE,
        input_num_entries: 1,
        pas: Pas::Addrs(&pas),
        ..Default::default()
    };
    assert_eq!(status(&mut h, &emit(&give), 16).0, CmdStatus::BadParam);
    assert_eq!(h.give_pages(PAGES_INIT).unwrap(), 256);
    assert_eq!(h.give_pages(PAGES_INIT).unwrap(), 0, "nothing more wanted");
    h.exec(&InitHcaIn::default(), 0).unwrap();
    // Objects before INIT_HCA would fail; now they work, and SET_HCA_CAP is refused.
    h.exec(&AllocPdIn {}, 0).unwrap();
    let cap = vec![0u8; CAPABILITY_LEN];
    assert_eq!(
        status(
            &mut h,
            &emit(&SetHcaCapIn {
                op_mod: 0,
                capability: &cap
            }),
            16
        )
        .0,
        CmdStatus::BadSysState
    );
}

#[test]
fn mailbox_chain_errors_are_delivery_errors() {
    let mut h = device(1);
    // A long input (MANAGE_PAGES of 100 pages spans two mailboxes) works through the chain.
    let buf = h.dma.alloc(100 * 4096, 4096).unwrap();
    let addrs: Vec<u64> = (0..100).map(|i| buf.iova() + i * 4096).collect();
    h.exec(
        &ManagePagesIn {
            op_mod: MANAGE_PAGES_GIVE,
            input_num_entries: 100,
            pas: Pas::Addrs(&addrs),
            ..Default::default()
        },
        0,
    )
    .unwrap();
    // An entry whose input pointer is not mapped: delivery error, not a hang.
    let mut input = vec![0u8; 600];
    input[0..2].copy_from_slice(&0x0108u16.to_be_bytes());
    let r = rdmesh_core::mlx5::cmd::entry::CmdEntryRepr::for_message(&input, 0x4000_0000, 16, 0, 1)
        .unwrap();
    let mut e = [0u8; 64];
    r.emit(&mut CmdEntry::new_unchecked(&mut e[..])).unwrap();
    let dev = h.dev.clone();
    let cmdq = h.dma.alloc(4096, 4096).unwrap();
    h.bar
        .write32_be(init_seg::CMDQ_ADDR_H, (cmdq.iova() >> 32) as u32);
    h.bar.write32_be(
        init_seg::CMDQ_ADDR_L_SZ,
        init_seg::cmdq_addr_low(cmdq.iova()),
    );
    cmdq.write(0, &e).unwrap();
    h.bar.write32_be(init_seg::CMD_DBELL, 1);
    cmdq.read(0, &mut e).unwrap();
    let ce = CmdEntry::new_unchecked(&e[..]);
    assert!(!ce.hw_owned());
    assert_eq!(ce.delivery_status(), DeliveryStatus::InPtrAlignErr);
    assert!(ce.signature_ok());
    assert!(dev.last_command_error().unwrap().contains("0x40000000"));
}

#[test]
fn qp_state_machine_and_error_transition() {
    let (mut ha, a, _hb, _b, _link) = pair(None);
    assert_eq!(ha.dev.qp_state(a.qpn), Some(QP_STATE_RTS));
    // RST2INIT again: wrong state.
    let mut b = vec![0u8; Rst2InitQpIn::default().buffer_len()];
    Rst2InitQpIn {
        qpn: a.qpn,
        ..Default::default()
    }
    .emit(&mut b)
    .unwrap();
    assert_eq!(status(&mut ha, &b, 16).0, CmdStatus::BadQpState);
    ha.exec(&Qp2ErrIn { qpn: a.qpn }, 0).unwrap();
    assert_eq!(ha.dev.qp_state(a.qpn), Some(QP_STATE_ERR));
    ha.exec(&DestroyQpIn { qpn: a.qpn }, 0).unwrap();
    assert_eq!(ha.dev.object_counts().5, 0);
}
