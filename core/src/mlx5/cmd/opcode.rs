//! Firmware command opcodes (Linux `include/linux/mlx5/mlx5_ifc.h` `MLX5_CMD_OP_*`).

enum_with_unknown! {
    /// A firmware command opcode: the 16-bit `opcode` at bit 0 of every command input
    /// (mlx5_ifc.h `MLX5_CMD_OP_*`). [`Opcode::ALL`] pairs each with its Linux name.
    pub enum Opcode(u16) {
        /// `MLX5_CMD_OP_QUERY_HCA_CAP`: read a capability page (current or maximum).
        QueryHcaCap = 0x100,
        /// `MLX5_CMD_OP_QUERY_ADAPTER`.
        QueryAdapter = 0x101,
        /// `MLX5_CMD_OP_INIT_HCA`: start the HCA after the init pages are given.
        InitHca = 0x102,
        /// `MLX5_CMD_OP_TEARDOWN_HCA`.
        TeardownHca = 0x103,
        /// `MLX5_CMD_OP_ENABLE_HCA`: first command after firmware initialization.
        EnableHca = 0x104,
        /// `MLX5_CMD_OP_DISABLE_HCA`.
        DisableHca = 0x105,
        /// `MLX5_CMD_OP_QUERY_PAGES`: how many 4 KiB pages the firmware wants.
        QueryPages = 0x107,
        /// `MLX5_CMD_OP_MANAGE_PAGES`: give pages to / take pages from the firmware.
        ManagePages = 0x108,
        /// `MLX5_CMD_OP_SET_HCA_CAP`.
        SetHcaCap = 0x109,
        /// `MLX5_CMD_OP_QUERY_ISSI`: supported interface step sequence IDs.
        QueryIssi = 0x10a,
        /// `MLX5_CMD_OP_SET_ISSI`.
        SetIssi = 0x10b,
        /// `MLX5_CMD_OP_SET_DRIVER_VERSION`.
        SetDriverVersion = 0x10d,
        /// `MLX5_CMD_OP_CREATE_MKEY`: register memory (memory key).
        CreateMkey = 0x200,
        /// `MLX5_CMD_OP_QUERY_MKEY`.
        QueryMkey = 0x201,
        /// `MLX5_CMD_OP_DESTROY_MKEY`.
        DestroyMkey = 0x202,
        /// `MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS`: reserved lkey, null mkey, ...
        QuerySpecialContexts = 0x203,
        /// `MLX5_CMD_OP_CREATE_EQ`.
        CreateEq = 0x301,
        /// `MLX5_CMD_OP_DESTROY_EQ`.
        DestroyEq = 0x302,
        /// `MLX5_CMD_OP_QUERY_EQ`.
        QueryEq = 0x303,
        /// `MLX5_CMD_OP_CREATE_CQ`.
        CreateCq = 0x400,
        /// `MLX5_CMD_OP_DESTROY_CQ`.
        DestroyCq = 0x401,
        /// `MLX5_CMD_OP_QUERY_CQ`.
        QueryCq = 0x402,
        /// `MLX5_CMD_OP_MODIFY_CQ`.
        ModifyCq = 0x403,
        /// `MLX5_CMD_OP_CREATE_QP`.
        CreateQp = 0x500,
        /// `MLX5_CMD_OP_DESTROY_QP`.
        DestroyQp = 0x501,
        /// `MLX5_CMD_OP_RST2INIT_QP`.
        Rst2InitQp = 0x502,
        /// `MLX5_CMD_OP_INIT2RTR_QP`.
        Init2RtrQp = 0x503,
        /// `MLX5_CMD_OP_RTR2RTS_QP`.
        Rtr2RtsQp = 0x504,
        /// `MLX5_CMD_OP_RTS2RTS_QP`.
        Rts2RtsQp = 0x505,
        /// `MLX5_CMD_OP_SQERR2RTS_QP`.
        SqErr2RtsQp = 0x506,
        /// `MLX5_CMD_OP_2ERR_QP`.
        Qp2Err = 0x507,
        /// `MLX5_CMD_OP_2RST_QP`.
        Qp2Rst = 0x50a,
        /// `MLX5_CMD_OP_QUERY_QP`.
        QueryQp = 0x50b,
        /// `MLX5_CMD_OP_SQD_RTS_QP`.
        SqdRtsQp = 0x50c,
        /// `MLX5_CMD_OP_INIT2INIT_QP`.
        Init2InitQp = 0x50e,
        /// `MLX5_CMD_OP_QUERY_VPORT_STATE`.
        QueryVportState = 0x750,
        /// `MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT`: permanent MAC, MTU, roce_en.
        QueryNicVportContext = 0x754,
        /// `MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT`: e.g. `roce_en`.
        ModifyNicVportContext = 0x755,
        /// `MLX5_CMD_OP_QUERY_VPORT_COUNTER`: traffic counters of a vport.
        QueryVportCounter = 0x770,
        /// `MLX5_CMD_OP_ALLOC_Q_COUNTER`: a counter set that QPs report to.
        AllocQCounter = 0x771,
        /// `MLX5_CMD_OP_DEALLOC_Q_COUNTER`.
        DeallocQCounter = 0x772,
        /// `MLX5_CMD_OP_QUERY_Q_COUNTER`: read (and optionally clear) a counter set.
        QueryQCounter = 0x773,
        /// `MLX5_CMD_OP_QUERY_ROCE_ADDRESS`: read a GID table entry.
        QueryRoceAddress = 0x760,
        /// `MLX5_CMD_OP_SET_ROCE_ADDRESS`: write a GID table entry.
        SetRoceAddress = 0x761,
        /// `MLX5_CMD_OP_ALLOC_PD`.
        AllocPd = 0x800,
        /// `MLX5_CMD_OP_DEALLOC_PD`.
        DeallocPd = 0x801,
        /// `MLX5_CMD_OP_ALLOC_UAR`.
        AllocUar = 0x802,
        /// `MLX5_CMD_OP_DEALLOC_UAR`.
        DeallocUar = 0x803,
        /// `MLX5_CMD_OP_ACCESS_REG`: read or write a device register (HOST_ENDIANNESS, PAOS).
        AccessReg = 0x805,
        /// `MLX5_CMD_OP_NOP`.
        Nop = 0x80d,
        /// `MLX5_CMD_OP_QUERY_CONG_STATISTICS`: DCQCN counters (CNPs handled, sent, ...).
        QueryCongStatistics = 0x826,
    }
}

impl Opcode {
    /// Every named opcode with its Linux `MLX5_CMD_OP_*` name (checked against mlx5_ifc.h by
    /// `tests/tests/ifc_conformance.rs`).
    pub const ALL: &'static [(Opcode, &'static str)] = &[
        (Opcode::QueryHcaCap, "MLX5_CMD_OP_QUERY_HCA_CAP"),
        (Opcode::QueryAdapter, "MLX5_CMD_OP_QUERY_ADAPTER"),
        (Opcode::InitHca, "MLX5_CMD_OP_INIT_HCA"),
        (Opcode::TeardownHca, "MLX5_CMD_OP_TEARDOWN_HCA"),
        (Opcode::EnableHca, "MLX5_CMD_OP_ENABLE_HCA"),
        (Opcode::DisableHca, "MLX5_CMD_OP_DISABLE_HCA"),
        (Opcode::QueryPages, "MLX5_CMD_OP_QUERY_PAGES"),
        (Opcode::ManagePages, "MLX5_CMD_OP_MANAGE_PAGES"),
        (Opcode::SetHcaCap, "MLX5_CMD_OP_SET_HCA_CAP"),
        (Opcode::QueryIssi, "MLX5_CMD_OP_QUERY_ISSI"),
        (Opcode::SetIssi, "MLX5_CMD_OP_SET_ISSI"),
        (Opcode::SetDriverVersion, "MLX5_CMD_OP_SET_DRIVER_VERSION"),
        (Opcode::CreateMkey, "MLX5_CMD_OP_CREATE_MKEY"),
        (Opcode::QueryMkey, "MLX5_CMD_OP_QUERY_MKEY"),
        (Opcode::DestroyMkey, "MLX5_CMD_OP_DESTROY_MKEY"),
        (
            Opcode::QuerySpecialContexts,
            "MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS",
        ),
        (Opcode::CreateEq, "MLX5_CMD_OP_CREATE_EQ"),
        (Opcode::DestroyEq, "MLX5_CMD_OP_DESTROY_EQ"),
        (Opcode::QueryEq, "MLX5_CMD_OP_QUERY_EQ"),
        (Opcode::CreateCq, "MLX5_CMD_OP_CREATE_CQ"),
        (Opcode::DestroyCq, "MLX5_CMD_OP_DESTROY_CQ"),
        (Opcode::QueryCq, "MLX5_CMD_OP_QUERY_CQ"),
        (Opcode::ModifyCq, "MLX5_CMD_OP_MODIFY_CQ"),
        (Opcode::CreateQp, "MLX5_CMD_OP_CREATE_QP"),
        (Opcode::DestroyQp, "MLX5_CMD_OP_DESTROY_QP"),
        (Opcode::Rst2InitQp, "MLX5_CMD_OP_RST2INIT_QP"),
        (Opcode::Init2RtrQp, "MLX5_CMD_OP_INIT2RTR_QP"),
        (Opcode::Rtr2RtsQp, "MLX5_CMD_OP_RTR2RTS_QP"),
        (Opcode::Rts2RtsQp, "MLX5_CMD_OP_RTS2RTS_QP"),
        (Opcode::SqErr2RtsQp, "MLX5_CMD_OP_SQERR2RTS_QP"),
        (Opcode::Qp2Err, "MLX5_CMD_OP_2ERR_QP"),
        (Opcode::Qp2Rst, "MLX5_CMD_OP_2RST_QP"),
        (Opcode::QueryQp, "MLX5_CMD_OP_QUERY_QP"),
        (Opcode::SqdRtsQp, "MLX5_CMD_OP_SQD_RTS_QP"),
        (Opcode::Init2InitQp, "MLX5_CMD_OP_INIT2INIT_QP"),
        (Opcode::QueryVportState, "MLX5_CMD_OP_QUERY_VPORT_STATE"),
        (
            Opcode::QueryNicVportContext,
            "MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT",
        ),
        (
            Opcode::ModifyNicVportContext,
            "MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT",
        ),
        (Opcode::QueryRoceAddress, "MLX5_CMD_OP_QUERY_ROCE_ADDRESS"),
        (Opcode::SetRoceAddress, "MLX5_CMD_OP_SET_ROCE_ADDRESS"),
        (Opcode::AllocPd, "MLX5_CMD_OP_ALLOC_PD"),
        (Opcode::DeallocPd, "MLX5_CMD_OP_DEALLOC_PD"),
        (Opcode::AllocUar, "MLX5_CMD_OP_ALLOC_UAR"),
        (Opcode::DeallocUar, "MLX5_CMD_OP_DEALLOC_UAR"),
        (Opcode::AccessReg, "MLX5_CMD_OP_ACCESS_REG"),
        (Opcode::Nop, "MLX5_CMD_OP_NOP"),
        (Opcode::QueryVportCounter, "MLX5_CMD_OP_QUERY_VPORT_COUNTER"),
        (Opcode::AllocQCounter, "MLX5_CMD_OP_ALLOC_Q_COUNTER"),
        (Opcode::DeallocQCounter, "MLX5_CMD_OP_DEALLOC_Q_COUNTER"),
        (Opcode::QueryQCounter, "MLX5_CMD_OP_QUERY_Q_COUNTER"),
        (
            Opcode::QueryCongStatistics,
            "MLX5_CMD_OP_QUERY_CONG_STATISTICS",
        ),
    ];

    /// Bytes of the fixed part of the command's input and output (mlx5_ifc.h
    /// `*_in_bits` / `*_out_bits` sizes, lists excluded), for the commands this crate types;
    /// a device answers a shorter `inlen` / `outlen` with `BAD_INP_LEN` / `BAD_OUTP_LEN`.
    /// `None` for other opcodes.
    pub fn fixed_lengths(self) -> Option<(usize, usize)> {
        use super::layout::*;
        macro_rules! l {
            ($i:ident, $o:ident) => {
                Some(($i::SIZE_BYTES, $o::SIZE_BYTES))
            };
        }
        match self {
            Opcode::EnableHca => l!(enable_hca_in, enable_hca_out),
            Opcode::DisableHca => l!(disable_hca_in, disable_hca_out),
            Opcode::QueryIssi => l!(query_issi_in, query_issi_out),
            Opcode::SetIssi => l!(set_issi_in, set_issi_out),
            Opcode::QueryPages => l!(query_pages_in, query_pages_out),
            Opcode::ManagePages => l!(manage_pages_in, manage_pages_out),
            Opcode::QueryHcaCap => l!(query_hca_cap_in, query_hca_cap_out),
            Opcode::SetHcaCap => l!(set_hca_cap_in, set_hca_cap_out),
            Opcode::AccessReg => l!(access_register_in, access_register_out),
            Opcode::InitHca => l!(init_hca_in, init_hca_out),
            Opcode::TeardownHca => l!(teardown_hca_in, teardown_hca_out),
            Opcode::QuerySpecialContexts => {
                l!(query_special_contexts_in, query_special_contexts_out)
            }
            Opcode::ModifyNicVportContext => {
                l!(modify_nic_vport_context_in, modify_nic_vport_context_out)
            }
            Opcode::QueryNicVportContext => {
                l!(query_nic_vport_context_in, query_nic_vport_context_out)
            }
            Opcode::QueryVportState => l!(query_vport_state_in, query_vport_state_out),
            Opcode::SetRoceAddress => l!(set_roce_address_in, set_roce_address_out),
            Opcode::QueryRoceAddress => l!(query_roce_address_in, query_roce_address_out),
            Opcode::AllocUar => l!(alloc_uar_in, alloc_uar_out),
            Opcode::DeallocUar => l!(dealloc_uar_in, dealloc_uar_out),
            Opcode::CreateEq => l!(create_eq_in, create_eq_out),
            Opcode::DestroyEq => l!(destroy_eq_in, destroy_eq_out),
            Opcode::AllocPd => l!(alloc_pd_in, alloc_pd_out),
            Opcode::DeallocPd => l!(dealloc_pd_in, dealloc_pd_out),
            Opcode::CreateMkey => l!(create_mkey_in, create_mkey_out),
            Opcode::DestroyMkey => l!(destroy_mkey_in, destroy_mkey_out),
            Opcode::CreateCq => l!(create_cq_in, create_cq_out),
            Opcode::DestroyCq => l!(destroy_cq_in, destroy_cq_out),
            Opcode::CreateQp => l!(create_qp_in, create_qp_out),
            Opcode::DestroyQp => l!(destroy_qp_in, destroy_qp_out),
            Opcode::Rst2InitQp => l!(rst2init_qp_in, rst2init_qp_out),
            Opcode::Init2RtrQp => l!(init2rtr_qp_in, init2rtr_qp_out),
            Opcode::Rtr2RtsQp => l!(rtr2rts_qp_in, rtr2rts_qp_out),
            Opcode::Qp2Err => l!(qp_2err_in, qp_2err_out),
            Opcode::QueryQp => l!(query_qp_in, query_qp_out),
            Opcode::Qp2Rst => l!(qp_2rst_in, qp_2rst_out),
            Opcode::Init2InitQp => l!(init2init_qp_in, init2init_qp_out),
            Opcode::Rts2RtsQp => l!(rts2rts_qp_in, rts2rts_qp_out),
            Opcode::QueryVportCounter => l!(query_vport_counter_in, query_vport_counter_out),
            Opcode::AllocQCounter => l!(alloc_q_counter_in, alloc_q_counter_out),
            Opcode::DeallocQCounter => l!(dealloc_q_counter_in, dealloc_q_counter_out),
            Opcode::QueryQCounter => l!(query_q_counter_in, query_q_counter_out),
            Opcode::QueryCongStatistics => {
                l!(query_cong_statistics_in, query_cong_statistics_out)
            }
            _ => None,
        }
    }

    /// The Linux `MLX5_CMD_OP_*` name, or `"unknown"`.
    pub fn name(self) -> &'static str {
        Opcode::ALL
            .iter()
            .find(|(o, _)| *o == self)
            .map_or("unknown", |(_, n)| n)
    }
}

impl core::fmt::Display for Opcode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let v = u16::from(*self);
        match Opcode::ALL.iter().find(|(o, _)| o == self) {
            Some((_, n)) => write!(f, "{} ({v:#x})", &n["MLX5_CMD_OP_".len()..]),
            None => write!(f, "opcode {v:#x}"),
        }
    }
}
