//! Tests of the typed commands: bytes at the offsets rdma-core / Linux use (restated in
//! `docs/mlx5.md` and the shared mlx5 reference), round trips of every command, error
//! paths, and property tests (random bytes: parse never panics; parse → emit → parse is
//! stable).

use super::*;
use proptest::prelude::*;

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

#[test]
fn create_qp_bytes_at_reference_offsets() {
    let mut path = AddressPath {
        src_addr_index: 3,
        hop_limit: 64,
        rgid_rip: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
        udp_sport: 0xc123,
        dscp: 26,
        vhca_port_num: 1,
        ack_timeout: 14,
        ..Default::default()
    };
    path.set_rmac([0x02, 0x11, 0x22, 0x33, 0x44, 0x55]);
    let qpc = QpContext {
        st: QP_ST_RC,
        pm_state: QP_PM_MIGRATED,
        pd: 0x12_3456,
        mtu: 5,
        log_msg_max: 30,
        log_rq_size: 6,
        log_rq_stride: 2,
        log_sq_size: 8,
        uar_page: 0x77,
        remote_qpn: 0xab_cdef,
        primary_address_path: path,
        retry_count: 7,
        rnr_retry: 7,
        next_send_psn: 0x10_0000,
        cqn_snd: 0x21,
        cqn_rcv: 0x22,
        rre: true,
        rwe: true,
        min_rnr_nak: 12,
        next_rcv_psn: 0x20_0000,
        dbr_addr: 0x1_2345_6780,
        ..Default::default()
    };
    let pas = [0x1000_0000u64, 0x1000_1000];
    let cmd = CreateQpIn {
        qpc,
        pas: Pas::Addrs(&pas),
        ..Default::default()
    };
    let mut b = [0xa5u8; 0x110 + 16];
    assert_eq!(cmd.emit(&mut b), Ok(0x110 + 16));
    assert_eq!(&b[..2], &[0x05, 0x00]); // opcode 0x500
    let q = 0x18; // qpc at +0x18
    assert_eq!(b[q + 1], 0); // st RC
    assert_eq!(b[q + 2] >> 3 & 3, 3); // pm_state bits 12..11
    assert_eq!(be32(&b, q + 4) & 0xff_ffff, 0x12_3456); // pd
    assert_eq!(b[q + 8] >> 5, 5); // mtu bits 31..29
    assert_eq!(b[q + 8] & 0x1f, 30); // log_msg_max
    assert_eq!(b[q + 9] >> 3 & 0xf, 6); // log_rq_size bits 22..19
    assert_eq!(b[q + 9] & 7, 2); // log_rq_stride
    assert_eq!(b[q + 0xa] >> 3 & 0xf, 8); // log_sq_size bits 14..11
    assert_eq!(be32(&b, q + 0xc) & 0xff_ffff, 0x77); // uar_page
    assert_eq!(be32(&b, q + 0x14) & 0xff_ffff, 0xab_cdef); // remote_qpn
    let a = q + 0x18; // primary address path
    assert_eq!(b[a + 8] >> 3, 14); // ack_timeout
    assert_eq!(b[a + 9], 3); // src_addr_index
    assert_eq!(b[a + 0xb], 64); // hop_limit
    assert_eq!(&b[a + 0x10..a + 0x20], &path.rgid_rip);
    assert_eq!(b[a + 0x21] & 0x3f, 26); // dscp
    assert_eq!(&b[a + 0x22..a + 0x24], &[0xc1, 0x23]); // udp_sport
    assert_eq!(b[a + 0x25], 1); // vhca_port_num
    assert_eq!(
        &b[a + 0x26..a + 0x2c],
        &[0x02, 0x11, 0x22, 0x33, 0x44, 0x55]
    ); // rmac
    assert_eq!(b[q + 0x71] & 7, 7); // retry_count bits 18..16
    assert_eq!(b[q + 0x72] >> 5, 7); // rnr_retry bits 15..13
    assert_eq!(be32(&b, q + 0x78) & 0xff_ffff, 0x10_0000); // next_send_psn
    assert_eq!(be32(&b, q + 0x7c) & 0xff_ffff, 0x21); // cqn_snd
    assert_eq!(b[q + 0x92] >> 6, 0b11); // rre (15), rwe (14)
    assert_eq!(b[q + 0x94] & 0x1f, 12); // min_rnr_nak
    assert_eq!(be32(&b, q + 0x94) & 0xff_ffff, 0x20_0000); // next_rcv_psn
    assert_eq!(be32(&b, q + 0x9c) & 0xff_ffff, 0x22); // cqn_rcv
    assert_eq!(be64(&b, q + 0xa0), 0x1_2345_6780); // dbr_addr
    assert_eq!(be64(&b, 0x110), 0x1000_0000); // PAS
    assert_eq!(be64(&b, 0x118), 0x1000_1000);
    let p = CreateQpIn::parse(&b[..0x120]).unwrap();
    assert_eq!(p, cmd);
    assert_eq!(p.pas.get(1), Some(0x1000_1000));
    assert_eq!(
        p.qpc.primary_address_path.rmac(),
        [2, 0x11, 0x22, 0x33, 0x44, 0x55]
    );
}

#[test]
fn bring_up_commands_at_reference_offsets() {
    let mut b = [0u8; 0x1010];
    // QUERY_ISSI out: supported_issi_dw0 at byte 0x6c.
    let n = QueryIssiOut {
        current_issi: 0,
        supported_issi_dw0: 0b10,
    }
    .emit(&mut b)
    .unwrap();
    assert_eq!(n, 0x70);
    assert_eq!(be32(&b, 0x6c), 2);
    // QUERY_PAGES out: function_id +0xa, num_pages +0xc (signed).
    QueryPagesOut {
        function_id: 0,
        num_pages: -3,
        embedded_cpu_function: false,
    }
    .emit(&mut b)
    .unwrap();
    assert_eq!(be32(&b, 0xc) as i32, -3);
    assert_eq!(QueryPagesOut::parse(&b[..16]).unwrap().num_pages, -3);
    // MANAGE_PAGES in: op_mod +6, function_id +0xa, input_num_entries +0xc, pas +0x10.
    let pages = [0x2000u64, 0x5000, 0x9000];
    let mp = ManagePagesIn {
        op_mod: MANAGE_PAGES_GIVE,
        input_num_entries: 3,
        pas: Pas::Addrs(&pages),
        ..Default::default()
    };
    assert_eq!(mp.validate(), Ok(()));
    assert_eq!(mp.emit(&mut b), Ok(16 + 24));
    assert_eq!(&b[..8], &[0x01, 0x08, 0, 0, 0, 0, 0, 1]);
    assert_eq!(be32(&b, 0xc), 3);
    assert_eq!(be64(&b, 0x20), 0x9000);
    assert_eq!(ManagePagesIn::parse(&b[..40]), Ok(mp));
    let bad = ManagePagesIn {
        input_num_entries: 2,
        ..mp
    };
    assert!(bad.validate().is_err());
    // QUERY_HCA_CAP in op_mod: (cap_type << 1) | mode.
    assert_eq!(hca_cap_op_mod(CAP_ROCE, CAP_MODE_CUR), 9);
    // HCA caps: the capability starts at out +0x10; byte offsets inside it.
    let cap = HcaCap {
        log_max_qp_sz: 15,
        log_max_qp: 18,
        log_max_cq: 24,
        log_max_eq: 7,
        port_type: PORT_TYPE_ETH,
        num_ports: 1,
        log_max_msg: 30,
        cqe_version: 1,
        cmdif_checksum: 3,
        roce: true,
        umem_uid_0: true,
        log_bf_reg_size: 9,
        log_max_pd: 23,
        log_uar_page_sz: 0,
        ..Default::default()
    };
    let mut capb = [0u8; CAPABILITY_LEN];
    cap.emit_at(&mut capb, 0).unwrap();
    assert_eq!(capb[0x11], 15);
    assert_eq!(capb[0x13] & 0x1f, 18);
    assert_eq!(capb[0x1b] & 0x1f, 24);
    assert_eq!(capb[0x1f] & 0xf, 7);
    assert_eq!(capb[0x36] & 3, 1); // port_type bits 9..8
    assert_eq!(capb[0x37], 1);
    assert_eq!(capb[0x38] & 0x1f, 30);
    assert_eq!(capb[0x3f] & 0xf, 1);
    assert_eq!(capb[0x42] >> 6, 3); // cmdif_checksum bits 15..14
    assert_eq!(capb[0x43] & 0x4, 0x4); // roce bit 2
    assert_eq!(capb[0x4a] & 0x20, 0x20); // umem_uid_0 bit 13
    assert_eq!(capb[0x4d] & 0x1f, 9);
    assert_eq!(capb[0x65] & 0x1f, 23);
    let n = QueryHcaCapOut { capability: &capb }.emit(&mut b).unwrap();
    assert_eq!(n, 0x1010);
    assert_eq!(b[0x10 + 0x13] & 0x1f, 18);
    let out = QueryHcaCapOut::parse(&b).unwrap();
    assert_eq!(HcaCap::parse_at(out.capability, 0), Ok(cap));
    assert_eq!(
        HcaCap::parse_at(&b, query_hca_cap_out::CAPABILITY.bit_offset),
        Ok(cap)
    );
    // The driver clears cmdif_checksum in a copy and sets it back.
    let mut setb = [0u8; 0x1010];
    set(&mut capb, cmd_hca_cap::CMDIF_CHECKSUM, 0).unwrap();
    SetHcaCapIn {
        op_mod: hca_cap_op_mod(CAP_GENERAL, 0),
        capability: &capb,
    }
    .emit(&mut setb)
    .unwrap();
    let s = SetHcaCapIn::parse(&setb).unwrap();
    assert_eq!(HcaCap::parse_at(s.capability, 0).unwrap().cmdif_checksum, 0);
    // RoCE cap: sw_r_roce_src_udp_port is bit 27 of dword 0.
    let mut rc = [0u8; 256];
    RoceCap {
        sw_r_roce_src_udp_port: true,
        ..Default::default()
    }
    .emit_at(&mut rc, 0)
    .unwrap();
    assert_eq!(rc[0], 0x08);
    // ACCESS_REG HOST_ENDIANNESS: register id +0xa, data after 16 bytes; he = bit 7.
    let mut reg = [0u8; 16];
    HostEndianness { he: true }.emit_at(&mut reg, 0).unwrap();
    assert_eq!(reg[0], 0x80);
    let ar = AccessRegisterIn {
        op_mod: ACCESS_REG_WRITE,
        register_id: REG_HOST_ENDIANNESS,
        argument: 0,
        data: &reg,
    };
    assert_eq!(ar.emit(&mut b), Ok(32));
    assert_eq!(&b[8..12], &[0, 0, 0x70, 0x04]);
    assert_eq!(b[16], 0x80);
    assert_eq!(AccessRegisterIn::parse(&b[..32]), Ok(ar));
    // TEARDOWN_HCA out: state at byte 0xf bit 0.
    TeardownHcaOut { state: true }.emit(&mut b).unwrap();
    assert_eq!(b[0xf], 1);
    // TEARDOWN_HCA in: profile at +0xa.
    TeardownHcaIn {
        profile: TEARDOWN_PREPARE_FAST_TEARDOWN,
    }
    .emit(&mut b)
    .unwrap();
    assert_eq!(&b[0xa..0xc], &[0, 2]);
}

#[test]
fn vport_and_gid_at_reference_offsets() {
    let mut b = [0u8; 0x200];
    let m = ModifyNicVportContextIn {
        field_select: NicVportFieldSelect {
            roce_en: true,
            ..Default::default()
        },
        nic_vport_context: NicVportContext {
            roce_en: true,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(m.emit(&mut b), Ok(0x200));
    assert_eq!(b[0xf], 0x02); // field_select.roce_en: byte 0xc dword bit 1
    assert_eq!(b[0x103], 0x01); // ctx +0x3 bit 0
    assert_eq!(ModifyNicVportContextIn::parse(&b), Ok(m));
    // QUERY_NIC_VPORT_CONTEXT out: ctx at +0x10, permanent_address at ctx +0xf4, MAC at +0xf6.
    let mac = [0x0c, 0x42, 0xa1, 0x00, 0x00, 0x07];
    let q = QueryNicVportContextOut {
        nic_vport_context: NicVportContext {
            mtu: 9000,
            permanent_address: MacAddress::from_octets(mac),
            ..Default::default()
        },
    };
    assert_eq!(q.emit(&mut b), Ok(0x110));
    assert_eq!(&b[0x10 + 0xf6..0x10 + 0xfc], &mac);
    assert_eq!(&b[0x10 + 0x26..0x10 + 0x28], &9000u16.to_be_bytes());
    let p = QueryNicVportContextOut::parse(&b[..0x110]).unwrap();
    assert_eq!(p.nic_vport_context.permanent_address.octets(), mac);
    // SET_ROCE_ADDRESS: index +8 bits 31..16, port +0xb bits 3..0, layout at +0x10.
    let mut addr = RoceAddress {
        source_l3_address: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 1, 5],
        roce_l3_type: vport::ROCE_L3_TYPE_IPV4,
        roce_version: vport::ROCE_VERSION_2,
        ..Default::default()
    };
    addr.set_source_mac(mac);
    let s = SetRoceAddressIn {
        roce_address_index: 2,
        vhca_port_num: 1,
        roce_address: addr,
    };
    assert_eq!(s.emit(&mut b), Ok(0x30));
    assert_eq!(&b[8..12], &[0, 2, 0, 1]);
    assert_eq!(&b[0x10..0x20], &addr.source_l3_address);
    assert_eq!(&b[0x22..0x28], &mac);
    assert_eq!(b[0x2a] & 0xf, 0); // roce_l3_type bits 11..8
    assert_eq!(b[0x2b], 2); // roce_version
    assert_eq!(SetRoceAddressIn::parse(&b[..0x30]), Ok(s));
    assert_eq!(
        SetRoceAddressIn::parse(&b[..0x30])
            .unwrap()
            .roce_address
            .source_mac(),
        mac
    );
}

#[test]
fn objects_at_reference_offsets() {
    let mut b = [0u8; 0x200];
    // CREATE_EQ: eqc at +0x10, event_bitmask at +0x58, PAS at +0x110.
    let eq = CreateEqIn {
        eq_context_entry: EqContext {
            log_eq_size: 8,
            uar_page: 5,
            intr: 0,
            log_page_size: 1,
            ..Default::default()
        },
        event_bitmask: EventBitmask::of(&[0x0a, 0x0b]),
        pas: Pas::Addrs(&[0xabc000]),
    };
    assert_eq!(eq.emit(&mut b), Ok(0x118));
    assert_eq!(be32(&b, 0x10 + 0xc), 8 << 24 | 5);
    assert_eq!(b[0x10 + 0x18] & 0x1f, 1);
    assert_eq!(be64(&b, 0x58), 0xc00);
    assert_eq!(be64(&b, 0x110), 0xabc000);
    let p = CreateEqIn::parse(&b[..0x118]).unwrap();
    assert_eq!(p, eq);
    assert!(p.event_bitmask.contains(0x0b) && !p.event_bitmask.contains(0));
    // CREATE_EQ out: eq_number at +0xb.
    CreateEqOut { eq_number: 7 }.emit(&mut b).unwrap();
    assert_eq!(b[0xb], 7);
    // ALLOC_PD out: pd at +9 (24 bits).
    AllocPdOut { pd: 0x12_3456 }.emit(&mut b).unwrap();
    assert_eq!(&b[8..12], &[0, 0x12, 0x34, 0x56]);
    assert!(AllocPdOut { pd: 1 << 24 }.emit(&mut b).is_err());
    // CREATE_MKEY: mkc at +0x10, MTT at +0x110.
    let mk = CreateMkeyIn {
        pg_access: true,
        memory_key_mkey_entry: MkeyContext {
            lr: true,
            lw: true,
            rr: true,
            rw: true,
            access_mode_1_0: MKC_ACCESS_MODE_MTT,
            qpn: 0xff_ffff,
            mkey_7_0: 0x42,
            pd: 9,
            start_addr: 0x7f00_0000,
            len: 0x2000,
            translations_octword_size: 1,
            log_page_size: 12,
            ..Default::default()
        },
        translations_octword_actual_size: 1,
        pas: Pas::Addrs(&[0x10_0003, 0x10_1003]),
    };
    assert_eq!(mk.emit(&mut b), Ok(0x120));
    assert_eq!(b[0xc] & 0x80, 0x80); // pg_access
    let k = 0x10;
    assert_eq!(b[k + 2], 0x3d); // rw 13, rr 12, lw 11, lr 10, access_mode_1_0 = 1
    assert_eq!(be32(&b, k + 4), 0xffff_ff42); // qpn | mkey_7_0
    assert_eq!(be32(&b, k + 0xc) & 0xff_ffff, 9);
    assert_eq!(be64(&b, k + 0x10), 0x7f00_0000);
    assert_eq!(be64(&b, k + 0x18), 0x2000);
    assert_eq!(be32(&b, k + 0x34), 1);
    assert_eq!(b[k + 0x3b] & 0x3f, 12);
    assert_eq!(be32(&b, 0x60), 1);
    assert_eq!(be64(&b, 0x118), 0x10_1003);
    assert_eq!(CreateMkeyIn::parse(&b[..0x120]), Ok(mk));
    assert_eq!(mkey(0x1234, 0x42), 0x12_3442);
    // CREATE_CQ: cqc at +0x10, PAS at +0x110.
    let cq = CreateCqIn {
        cq_context: CqContext {
            cqe_sz: CQE_SIZE_64,
            log_cq_size: 10,
            uar_page: 5,
            c_eqn_or_apu_element: 7,
            log_page_size: 0,
            dbr_addr: 0xdead_0000,
            ..Default::default()
        },
        cq_umem_valid: false,
        pas: Pas::Addrs(&[0x40_0000]),
    };
    assert_eq!(cq.emit(&mut b), Ok(0x118));
    assert_eq!(be32(&b, 0x10 + 0xc), 10 << 24 | 5);
    assert_eq!(be32(&b, 0x10 + 0x14), 7);
    assert_eq!(be64(&b, 0x10 + 0x38), 0xdead_0000);
    assert_eq!(CreateCqIn::parse(&b[..0x118]), Ok(cq));
}

#[test]
fn errors_are_typed() {
    let mut b = [0u8; 0x120];
    AllocPdIn {}.emit(&mut b).unwrap();
    assert_eq!(
        AllocUarIn::parse(&b[..16]),
        Err(CmdError::WrongOpcode {
            expected: Opcode::AllocUar,
            found: Opcode::AllocPd
        })
    );
    assert!(matches!(
        AllocPdIn {}.emit(&mut b[..8]),
        Err(CmdError::Truncated { needed: 16, len: 8 })
    ));
    assert!(matches!(
        DestroyQpIn { qpn: 1 << 24 }.emit(&mut b),
        Err(CmdError::ValueTooWide { field: "qpn", .. })
    ));
    // A failed output is a Status error even when shorter than the full output.
    b.fill(0);
    OutHeader {
        status: CmdStatus::BadQpState,
        syndrome: 0x1234,
    }
    .emit(&mut b[..16])
    .unwrap();
    assert_eq!(
        Init2RtrQpOut::parse(&b[..16]),
        Err(CmdError::Status {
            opcode: Opcode::Init2RtrQp,
            status: CmdStatus::BadQpState,
            syndrome: 0x1234
        })
    );
    assert!(QueryQpOut::parse(&b[..4]).is_err());
    OutHeader::OK.emit(&mut b[..16]).unwrap();
    assert!(matches!(
        QueryQpOut::parse(&b[..16]),
        Err(CmdError::Truncated { .. })
    ));
}

/// Emits `$v`, checks the length and header, parses it back.
macro_rules! round_trip {
    ($buf:ident, in $t:ident, $v:expr) => {{
        let v = $v;
        let n = CmdIn::emit(&v, &mut $buf).unwrap();
        assert_eq!(n, CmdIn::buffer_len(&v), stringify!($t));
        assert_eq!(
            InHeader::parse(&$buf).unwrap().opcode,
            <$t as CmdIn>::OPCODE
        );
        assert_eq!($t::parse(&$buf[..n]), Ok(v), stringify!($t));
        assert!(<$t as CmdIn>::OUT_LEN >= 8);
        let (fixed_in, fixed_out) = <$t as CmdIn>::OPCODE.fixed_lengths().unwrap();
        assert!(n >= fixed_in);
        assert_eq!(fixed_out, <$t as CmdIn>::OUT_LEN);
    }};
    ($buf:ident, out $t:ident, $v:expr) => {{
        let v = $v;
        let n = CmdOut::emit(&v, &mut $buf).unwrap();
        assert_eq!(n, CmdOut::buffer_len(&v), stringify!($t));
        assert_eq!(OutHeader::parse(&$buf), Ok(OutHeader::OK));
        assert_eq!($t::parse(&$buf[..n]), Ok(v), stringify!($t));
    }};
}

#[test]
fn every_command_round_trips() {
    let mut b = [0u8; 0x1100];
    let pas = [0x1000u64, 0x3000];
    round_trip!(b, in EnableHcaIn, EnableHcaIn { embedded_cpu_function: false, function_id: 3 });
    round_trip!(b, out EnableHcaOut, EnableHcaOut {});
    round_trip!(b, in DisableHcaIn, DisableHcaIn { embedded_cpu_function: true, function_id: 0 });
    round_trip!(b, out DisableHcaOut, DisableHcaOut {});
    round_trip!(b, in QueryIssiIn, QueryIssiIn {});
    round_trip!(b, out QueryIssiOut, QueryIssiOut { current_issi: 1, supported_issi_dw0: 3 });
    round_trip!(b, in SetIssiIn, SetIssiIn { current_issi: 1 });
    round_trip!(b, out SetIssiOut, SetIssiOut {});
    round_trip!(b, in QueryPagesIn, QueryPagesIn { op_mod: PAGES_INIT, ..Default::default() });
    round_trip!(b, out QueryPagesOut, QueryPagesOut { num_pages: i32::MIN, ..Default::default() });
    round_trip!(b, in ManagePagesIn, ManagePagesIn { op_mod: MANAGE_PAGES_GIVE, input_num_entries: 2, pas: Pas::Addrs(&pas), ..Default::default() });
    round_trip!(b, out ManagePagesOut, ManagePagesOut { output_num_entries: 2, pas: Pas::Addrs(&pas) });
    round_trip!(b, in QueryHcaCapIn, QueryHcaCapIn { op_mod: 1, other_function: false, function_id: 0 });
    round_trip!(b, out SetHcaCapOut, SetHcaCapOut {});
    round_trip!(b, in InitHcaIn, InitHcaIn { sw_vhca_id: 1, sw_owner_id: [9; 16] });
    round_trip!(b, out InitHcaOut, InitHcaOut {});
    round_trip!(b, in TeardownHcaIn, TeardownHcaIn { profile: 2 });
    round_trip!(b, out TeardownHcaOut, TeardownHcaOut { state: true });
    round_trip!(b, in QuerySpecialContextsIn, QuerySpecialContextsIn {});
    round_trip!(b, out QuerySpecialContextsOut, QuerySpecialContextsOut { dump_fill_mkey: 1, resd_lkey: 0x100, null_mkey: 3 });
    round_trip!(b, out AccessRegisterOut, AccessRegisterOut { data: &[1, 2, 3, 4] });
    round_trip!(b, out ModifyNicVportContextOut, ModifyNicVportContextOut {});
    round_trip!(b, in QueryNicVportContextIn, QueryNicVportContextIn { allowed_list_type: 0, other_vport: true, vport_number: 2 });
    round_trip!(b, in QueryVportStateIn, QueryVportStateIn { op_mod: 0, other_vport: false, vport_number: 0 });
    round_trip!(b, out QueryVportStateOut, QueryVportStateOut { admin_state: 2, state: 2 });
    round_trip!(b, out SetRoceAddressOut, SetRoceAddressOut {});
    round_trip!(b, in QueryRoceAddressIn, QueryRoceAddressIn { roce_address_index: 5, vhca_port_num: 1 });
    round_trip!(b, out QueryRoceAddressOut, QueryRoceAddressOut { roce_address: RoceAddress { vlan_valid: true, vlan_id: 0xfff, ..Default::default() } });
    round_trip!(b, in AllocUarIn, AllocUarIn {});
    round_trip!(b, out AllocUarOut, AllocUarOut { uar: 0xff_ffff });
    round_trip!(b, in DeallocUarIn, DeallocUarIn { uar: 4 });
    round_trip!(b, out DeallocUarOut, DeallocUarOut {});
    round_trip!(b, out CreateEqOut, CreateEqOut { eq_number: 255 });
    round_trip!(b, in DestroyEqIn, DestroyEqIn { eq_number: 1 });
    round_trip!(b, out DestroyEqOut, DestroyEqOut {});
    round_trip!(b, in AllocPdIn, AllocPdIn {});
    round_trip!(b, in DeallocPdIn, DeallocPdIn { pd: 7 });
    round_trip!(b, out DeallocPdOut, DeallocPdOut {});
    round_trip!(b, out CreateMkeyOut, CreateMkeyOut { mkey_index: 0x10 });
    round_trip!(b, in DestroyMkeyIn, DestroyMkeyIn { mkey_index: 0x10 });
    round_trip!(b, out DestroyMkeyOut, DestroyMkeyOut {});
    round_trip!(b, out CreateCqOut, CreateCqOut { cqn: 0x400 });
    round_trip!(b, in DestroyCqIn, DestroyCqIn { cqn: 0x400 });
    round_trip!(b, out DestroyCqOut, DestroyCqOut {});
    round_trip!(b, out CreateQpOut, CreateQpOut { qpn: 0x123, ece: 0 });
    round_trip!(b, in DestroyQpIn, DestroyQpIn { qpn: 0x123 });
    round_trip!(b, out DestroyQpOut, DestroyQpOut {});
    let qpc = QpContext {
        rre: true,
        rwe: true,
        primary_address_path: AddressPath {
            vhca_port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    round_trip!(b, in Rst2InitQpIn, Rst2InitQpIn { qpn: 0x123, qpc, ..Default::default() });
    round_trip!(b, out Rst2InitQpOut, Rst2InitQpOut { ece: 0 });
    round_trip!(b, in Init2RtrQpIn, Init2RtrQpIn { qpn: 0x123, qpc, ..Default::default() });
    round_trip!(b, out Init2RtrQpOut, Init2RtrQpOut { ece: 1 });
    round_trip!(b, in Rtr2RtsQpIn, Rtr2RtsQpIn { qpn: 0x123, qpc, ..Default::default() });
    round_trip!(b, out Rtr2RtsQpOut, Rtr2RtsQpOut { ece: 0 });
    round_trip!(b, in Qp2ErrIn, Qp2ErrIn { qpn: 0x123 });
    round_trip!(b, out Qp2ErrOut, Qp2ErrOut {});
    round_trip!(b, in QueryQpIn, QueryQpIn { qpn: 0x123 });
    round_trip!(b, out QueryQpOut, QueryQpOut { qpc: QpContext { state: QP_STATE_RTS, ..qpc }, pas: Pas::Addrs(&pas), ..Default::default() });
}

/// For random bytes with the right header: `parse` never panics, and whatever it accepts
/// re-emits to bytes that parse to the same value.
macro_rules! stable {
    ($bytes:ident, $($t:ident : $dir:ident),* $(,)?) => {$(
        {
            let mut b = $bytes.clone();
            stable!(@header $dir $t b);
            if let Ok(v) = $t::parse(&b) {
                let mut out = [0u8; 0x1200];
                let n = stable!(@emit $dir v out);
                assert_eq!($t::parse(&out[..n]), Ok(v), stringify!($t));
            }
            // Never panics on the raw bytes either.
            let _ = $t::parse(&$bytes);
        }
    )*};
    (@header in $t:ident $b:ident) => {
        if $b.len() >= 2 {
            $b[..2].copy_from_slice(&u16::from(<$t as CmdIn>::OPCODE).to_be_bytes());
        }
    };
    (@header out $t:ident $b:ident) => {
        if !$b.is_empty() {
            $b[0] = 0;
        }
    };
    (@emit in $v:ident $out:ident) => {
        match CmdIn::emit(&$v, &mut $out) {
            Ok(n) => n,
            Err(e) => panic!("re-emit failed: {e}"),
        }
    };
    (@emit out $v:ident $out:ident) => {
        match CmdOut::emit(&$v, &mut $out) {
            Ok(n) => n,
            Err(e) => panic!("re-emit failed: {e}"),
        }
    };
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn parse_emit_parse_is_stable(bytes in proptest::collection::vec(any::<u8>(), 0..0x1100)) {
        stable!(bytes,
            EnableHcaIn: in, EnableHcaOut: out, DisableHcaIn: in, DisableHcaOut: out,
            QueryIssiIn: in, QueryIssiOut: out, SetIssiIn: in, SetIssiOut: out,
            QueryPagesIn: in, QueryPagesOut: out, ManagePagesIn: in, ManagePagesOut: out,
            QueryHcaCapIn: in, QueryHcaCapOut: out, SetHcaCapIn: in, SetHcaCapOut: out,
            AccessRegisterIn: in, AccessRegisterOut: out, InitHcaIn: in, InitHcaOut: out,
            TeardownHcaIn: in, TeardownHcaOut: out,
            QuerySpecialContextsIn: in, QuerySpecialContextsOut: out,
            ModifyNicVportContextIn: in, ModifyNicVportContextOut: out,
            QueryNicVportContextIn: in, QueryNicVportContextOut: out,
            QueryVportStateIn: in, QueryVportStateOut: out,
            SetRoceAddressIn: in, SetRoceAddressOut: out,
            QueryRoceAddressIn: in, QueryRoceAddressOut: out,
            AllocUarIn: in, AllocUarOut: out, DeallocUarIn: in, DeallocUarOut: out,
            CreateEqIn: in, CreateEqOut: out, DestroyEqIn: in, DestroyEqOut: out,
            AllocPdIn: in, AllocPdOut: out, DeallocPdIn: in, DeallocPdOut: out,
            CreateMkeyIn: in, CreateMkeyOut: out, DestroyMkeyIn: in, DestroyMkeyOut: out,
            CreateCqIn: in, CreateCqOut: out, DestroyCqIn: in, DestroyCqOut: out,
            CreateQpIn: in, CreateQpOut: out, DestroyQpIn: in, DestroyQpOut: out,
            Rst2InitQpIn: in, Rst2InitQpOut: out, Init2RtrQpIn: in, Init2RtrQpOut: out,
            Rtr2RtsQpIn: in, Rtr2RtsQpOut: out, Qp2ErrIn: in, Qp2ErrOut: out,
            QueryQpIn: in, QueryQpOut: out,
        );
    }

    #[test]
    fn field_set_get(off in 0u32..200, bits in 1u32..=64, v in any::<u64>(), fill in any::<u8>()) {
        let f = IfcField::new("f", off, bits);
        let mut b = [fill; 40];
        let v = if bits == 64 { v } else { v & ((1 << bits) - 1) };
        let before = b;
        prop_assert!(set(&mut b, f, v).is_ok());
        prop_assert_eq!(get(&b, f), Ok(v));
        // Bits outside the field are untouched.
        for bit in 0..(40 * 8) {
            if bit < off || bit >= off + bits {
                let byte = (bit / 8) as usize;
                let mask = 0x80u8 >> (bit % 8);
                prop_assert_eq!(b[byte] & mask, before[byte] & mask);
            }
        }
    }

    #[test]
    fn views_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..700), ci in any::<u32>()) {
        let _ = CmdEntryRepr::parse(&CmdEntry::new_unchecked(&bytes[..]));
        if let Ok(e) = CmdEntry::new_checked(&bytes[..]) {
            let _ = (e.signature_ok(), e.check_delivery(), e.hw_owned());
        }
        if let Ok(m) = Mailbox::new_checked(&bytes[..]) {
            let _ = (m.check_signatures(), m.check_position(0, 0), MailboxRepr::parse(&m));
        }
        if let Ok(e) = eqe::Eqe::new_checked(&bytes[..]) {
            let _ = e.sw_owned(ci, 1 << (ci % 16));
            if let Ok(r) = EqeRepr::parse(&e) {
                let mut out = [0u8; 64];
                if r.emit(&mut eqe::Eqe::new_unchecked(&mut out[..]), e.owner()).is_ok() {
                    prop_assert_eq!(EqeRepr::parse(&eqe::Eqe::new_unchecked(&out[..])), Ok(r));
                }
            }
        }
        let _ = EqeRepr::parse(&eqe::Eqe::new_unchecked(&bytes[..]));
        let _ = InHeader::parse(&bytes);
        let _ = OutHeader::parse(&bytes);
    }
}
