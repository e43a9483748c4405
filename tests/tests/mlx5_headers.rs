//! Every mlx5 constant rdmesh uses, checked against the headers it comes from: rdma-core's
//! `<infiniband/mlx5dv.h>` (Debian libibverbs-dev) and Linux `include/linux/mlx5/{qp.h,cq.h,
//! device.h,doorbell.h}` (Debian linux-headers-amd64). The headers are parsed by
//! `rdmesh_tests::c_header` (enum entries `NAME = value` and `#define NAME value`, values like
//! `0x1f`, `2 << 2`, `(1 << 6)`, `BIT(0)`), so a renumbering on either side fails the test.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use rdmesh_core::mlx5::cq::ArmCmd;
use rdmesh_core::mlx5::doorbell::{UAR_BF_OFFSET, UAR_CQ_DOORBELL_OFFSET};
use rdmesh_core::mlx5::{
    cqe, ctrl, datagram, eth, CqeFormat, CqeOpcode, DbRecord, FenceMode, FmCeSe, Opcode, Syndrome,
    DS_LEN, INLINE_SEG, INVALID_LKEY, MAX_DS, MAX_WQEBBS, WQEBB_LEN,
};
use rdmesh_tests::c_header::{self, eval};
use rdmesh_tests::need;

/// `NAME -> value` for every evaluable `MLX5_*` enum entry or #define of `text`.
fn constants(text: &str) -> BTreeMap<String, u64> {
    c_header::constants(text)
        .into_iter()
        .filter(|(name, _)| name.starts_with("MLX5_"))
        .collect()
}

struct Headers {
    mlx5dv: BTreeMap<String, u64>,
    linux: BTreeMap<String, u64>,
}

fn headers() -> Option<Headers> {
    let dv = PathBuf::from("/usr/include/infiniband/mlx5dv.h");
    let linux_dir = c_header::linux_mlx5_dir(&["qp.h"]);
    if !need(
        dv.exists() && linux_dir.is_some(),
        "mlx5dv.h (libibverbs-dev) and Linux mlx5 headers (linux-headers-amd64)",
    ) {
        return None;
    }
    let dir = linux_dir.unwrap();
    let mut linux = BTreeMap::new();
    for f in ["qp.h", "cq.h", "device.h", "doorbell.h"] {
        let t = std::fs::read_to_string(dir.join(f)).unwrap();
        for (k, v) in constants(&t) {
            if let Some(old) = linux.insert(k.clone(), v) {
                assert_eq!(
                    old, v,
                    "{k} defined twice with different values in Linux headers"
                );
            }
        }
    }
    Some(Headers {
        mlx5dv: constants(&std::fs::read_to_string(dv).unwrap()),
        linux,
    })
}

/// Asserts `NAME` (without `MLX5_`) has `value` in every header set that defines it, and that
/// at least one defines it.
fn check(h: &Headers, name: &str, value: u64) {
    let full = format!("MLX5_{name}");
    let a = h.mlx5dv.get(&full);
    let b = h.linux.get(&full);
    assert!(
        a.is_some() || b.is_some(),
        "{full} is in neither header set"
    );
    if let Some(&a) = a {
        assert_eq!(a, value, "{full}: mlx5dv.h says {a:#x}, rdmesh {value:#x}");
    }
    if let Some(&b) = b {
        assert_eq!(b, value, "{full}: Linux says {b:#x}, rdmesh {value:#x}");
    }
}

#[test]
fn send_opcodes() {
    let Some(h) = headers() else { return };
    let table: &[(&str, Opcode)] = &[
        ("NOP", Opcode::Nop),
        ("SEND_INVAL", Opcode::SendInval),
        ("RDMA_WRITE", Opcode::RdmaWrite),
        ("RDMA_WRITE_IMM", Opcode::RdmaWriteImm),
        ("SEND", Opcode::Send),
        ("SEND_IMM", Opcode::SendImm),
        ("LSO", Opcode::Lso),
        ("TSO", Opcode::Lso),
        ("RDMA_READ", Opcode::RdmaRead),
        ("ATOMIC_CS", Opcode::AtomicCs),
        ("ATOMIC_FA", Opcode::AtomicFa),
        ("ATOMIC_MASKED_CS", Opcode::AtomicMaskedCs),
        ("ATOMIC_MASKED_FA", Opcode::AtomicMaskedFa),
        ("BIND_MW", Opcode::BindMw),
        ("FMR", Opcode::Fmr),
        ("LOCAL_INVAL", Opcode::LocalInval),
        ("CONFIG_CMD", Opcode::ConfigCmd),
        ("SET_PSV", Opcode::SetPsv),
        ("GET_PSV", Opcode::GetPsv),
        ("CHECK_PSV", Opcode::CheckPsv),
        ("DUMP", Opcode::Dump),
        ("UMR", Opcode::Umr),
        ("RGET_PSV", Opcode::RgetPsv),
        ("RCHECK_PSV", Opcode::RcheckPsv),
        ("TAG_MATCHING", Opcode::TagMatching),
        ("ENHANCED_MPSW", Opcode::EnhancedMpsw),
        ("FLOW_TBL_ACCESS", Opcode::FlowTblAccess),
        ("ACCESS_ASO", Opcode::AccessAso),
        ("MMO", Opcode::Mmo),
    ];
    for (name, op) in table {
        check(&h, &format!("OPCODE_{name}"), u8::from(*op) as u64);
        assert!(op.name().is_some());
    }
    // Every opcode either header names is in the table.
    for k in h.mlx5dv.keys().chain(h.linux.keys()) {
        if let Some(n) = k.strip_prefix("MLX5_OPCODE_") {
            assert!(
                table.iter().any(|(t, _)| *t == n),
                "{k} is not known to rdmesh"
            );
        }
    }
}

#[test]
fn ctrl_segment_constants() {
    let Some(h) = headers() else { return };
    check(&h, "WQE_CTRL_CQ_UPDATE", FmCeSe::CQ_UPDATE as u64);
    check(
        &h,
        "WQE_CTRL_CQ_UPDATE_AND_EQE",
        FmCeSe::CQ_UPDATE_AND_EQE as u64,
    );
    check(&h, "WQE_CTRL_SOLICITED", FmCeSe::SOLICITED as u64);
    check(&h, "WQE_CTRL_FENCE", FmCeSe::FENCE as u64);
    check(
        &h,
        "WQE_CTRL_INITIATOR_SMALL_FENCE",
        FmCeSe::INITIATOR_SMALL_FENCE as u64,
    );
    for (name, m) in [
        ("NONE", FenceMode::None),
        ("INITIATOR_SMALL", FenceMode::InitiatorSmall),
        ("FENCE", FenceMode::Fence),
        ("STRONG_ORDERING", FenceMode::StrongOrdering),
        ("SMALL_AND_FENCE", FenceMode::SmallAndFence),
    ] {
        check(&h, &format!("FENCE_MODE_{name}"), (u8::from(m) as u64) << 5);
        assert_eq!(FmCeSe((u8::from(m)) << 5).fence_mode(), m);
    }
    check(&h, "WQE_CTRL_DS_MASK", MAX_DS as u64);
    check(&h, "WQE_CTRL_DS_MASK", ctrl::DS_MASK as u64);
    check(&h, "WQE_CTRL_OPCODE_MASK", 0xff);
    check(&h, "WQE_CTRL_QPN_SHIFT", 8);
    check(&h, "WQE_CTRL_WQE_INDEX_SHIFT", 8);
    check(&h, "SEND_WQE_BB", WQEBB_LEN as u64);
    check(&h, "SEND_WQE_SHIFT", WQEBB_LEN.trailing_zeros() as u64);
    check(&h, "SEND_WQE_DS", DS_LEN as u64);
    check(&h, "SEND_WQE_MAX_WQEBBS", MAX_WQEBBS as u64);
}

#[test]
fn segment_constants() {
    let Some(h) = headers() else { return };
    check(&h, "INLINE_SEG", INLINE_SEG as u64);
    check(&h, "INVALID_LKEY", INVALID_LKEY as u64);
    check(&h, "EXTENDED_UD_AV", datagram::EXTENDED_UD_AV as u64);
    check(&h, "ETH_WQE_L3_CSUM", eth::L3_CSUM as u64);
    check(&h, "ETH_WQE_L4_CSUM", eth::L4_CSUM as u64);
    check(&h, "ETH_WQE_L3_INNER_CSUM", eth::L3_INNER_CSUM as u64);
    check(&h, "ETH_WQE_L4_INNER_CSUM", eth::L4_INNER_CSUM as u64);
}

#[test]
fn cqe_constants() {
    let Some(h) = headers() else { return };
    for (name, op) in [
        ("REQ", CqeOpcode::Req),
        ("RESP_WR_IMM", CqeOpcode::RespWrImm),
        ("RESP_SEND", CqeOpcode::RespSend),
        ("RESP_SEND_IMM", CqeOpcode::RespSendImm),
        ("RESP_SEND_INV", CqeOpcode::RespSendInv),
        ("RESIZE_CQ", CqeOpcode::ResizeCq),
        ("NO_PACKET", CqeOpcode::NoPacket),
        ("SIG_ERR", CqeOpcode::SigErr),
        ("REQ_ERR", CqeOpcode::ReqErr),
        ("RESP_ERR", CqeOpcode::RespErr),
        ("INVALID", CqeOpcode::Invalid),
    ] {
        check(&h, &format!("CQE_{name}"), u8::from(op) as u64);
    }
    let syndromes: &[(&str, Syndrome)] = &[
        ("LOCAL_LENGTH_ERR", Syndrome::LocalLengthErr),
        ("LOCAL_QP_OP_ERR", Syndrome::LocalQpOpErr),
        ("LOCAL_PROT_ERR", Syndrome::LocalProtErr),
        ("WR_FLUSH_ERR", Syndrome::WrFlushErr),
        ("MW_BIND_ERR", Syndrome::MwBindErr),
        ("BAD_RESP_ERR", Syndrome::BadRespErr),
        ("LOCAL_ACCESS_ERR", Syndrome::LocalAccessErr),
        ("REMOTE_INVAL_REQ_ERR", Syndrome::RemoteInvalReqErr),
        ("REMOTE_ACCESS_ERR", Syndrome::RemoteAccessErr),
        ("REMOTE_OP_ERR", Syndrome::RemoteOpErr),
        ("TRANSPORT_RETRY_EXC_ERR", Syndrome::TransportRetryExcErr),
        ("RNR_RETRY_EXC_ERR", Syndrome::RnrRetryExcErr),
        ("REMOTE_ABORTED_ERR", Syndrome::RemoteAbortedErr),
    ];
    for (name, s) in syndromes {
        check(&h, &format!("CQE_SYNDROME_{name}"), u8::from(*s) as u64);
    }
    for k in h.mlx5dv.keys().chain(h.linux.keys()) {
        if let Some(n) = k.strip_prefix("MLX5_CQE_SYNDROME_") {
            assert!(
                syndromes.iter().any(|(t, _)| *t == n),
                "{k} is not known to rdmesh"
            );
        }
    }
    check(
        &h,
        "CQE_SYND_FLUSHED_IN_ERROR",
        u8::from(Syndrome::WrFlushErr) as u64,
    );
    check(
        &h,
        "CQE_VENDOR_SYNDROME_ODP_PFAULT",
        cqe::VENDOR_SYNDROME_ODP_PFAULT as u64,
    );
    check(&h, "CQE_OWNER_MASK", cqe::OWNER_MASK as u64);
    check(
        &h,
        "INLINE_SCATTER_32",
        (u8::from(CqeFormat::InlineScatter32) as u64) << 2,
    );
    check(
        &h,
        "INLINE_SCATTER_64",
        (u8::from(CqeFormat::InlineScatter64) as u64) << 2,
    );
    check(&h, "CQE_FORMAT_CSUM", 1);
}

#[test]
fn doorbell_constants() {
    let Some(h) = headers() else { return };
    check(&h, "RCV_DBR", DbRecord::QpRecv.dword() as u64);
    check(&h, "SND_DBR", DbRecord::QpSend.dword() as u64);
    check(&h, "CQ_DOORBELL", UAR_CQ_DOORBELL_OFFSET as u64);
    check(&h, "BF_OFFSET", UAR_BF_OFFSET as u64);
    check(&h, "CQ_DB_REQ_NOT_SOL", ArmCmd::Solicited.bits() as u64);
    check(&h, "CQ_DB_REQ_NOT", ArmCmd::Next.bits() as u64);
}

#[test]
fn expression_parser() {
    let none = HashMap::new();
    assert_eq!(eval("2 << 2", &none), Some(8));
    assert_eq!(eval("(1 << 6)", &none), Some(64));
    assert_eq!(eval("0x2F", &none), Some(0x2f));
    assert_eq!(eval("0x80000000U", &none), Some(0x8000_0000));
    assert_eq!(eval("BIT(1)", &none), Some(2));
    assert_eq!(eval("MLX5_INLINE_SEG", &none), None);
    let c = constants(
        "enum {\n\tMLX5_A\t= 0x3, /* x */\n\tMLX5_B = 1 << 24,\n};\n#define MLX5_C 0x3f\n",
    );
    assert_eq!(c.get("MLX5_A"), Some(&3));
    assert_eq!(c.get("MLX5_B"), Some(&(1 << 24)));
    assert_eq!(c.get("MLX5_C"), Some(&0x3f));
}
