//! Conversions between the verbs types and the mlx5 driver's: send work requests, work
//! completions and their status, driver errors.

use rdmesh_core::mlx5::cqe::CqeOpcode;
use rdmesh_core::mlx5::{self, Payload, SendFlags, TransportSeg, WrOp};
use rdmesh_core::rc::{WcOpcode, WcStatus, WorkCompletion};
use rdmesh_vfio::mlx5::{Completion, DriverError};

use crate::error::Error;
use crate::verbs::{SendWr, WrOpcode};

/// A driver error as a verbs error (the driver's message already names the device, command,
/// QPN and what to check).
pub(crate) fn err(e: DriverError) -> Error {
    Error::Config(format!("vfio provider: {e}"))
}

/// The gather list of a verbs request in mlx5 terms.
pub(crate) fn sges(list: &[rdmesh_core::rc::Sge]) -> Vec<mlx5::Sge> {
    list.iter()
        .map(|s| mlx5::Sge {
            addr: s.addr,
            lkey: s.lkey,
            len: s.length,
        })
        .collect()
}

/// The mlx5 operation of a verbs opcode. Immediate data is the host value; the WQE carries
/// it big-endian, as verbs' `imm_data` is.
pub(crate) fn op(o: WrOpcode) -> WrOp {
    match o {
        WrOpcode::Send => WrOp::Send,
        WrOpcode::SendWithImm(imm) => WrOp::SendImm { imm },
        WrOpcode::RdmaWrite { remote_addr, rkey } => WrOp::RdmaWrite {
            raddr: remote_addr,
            rkey,
        },
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => WrOp::RdmaWriteImm {
            raddr: remote_addr,
            rkey,
            imm,
        },
        WrOpcode::RdmaRead { remote_addr, rkey } => WrOp::RdmaRead {
            raddr: remote_addr,
            rkey,
        },
        WrOpcode::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => WrOp::AtomicCs {
            raddr: remote_addr,
            rkey,
            compare,
            swap,
        },
        WrOpcode::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => WrOp::AtomicFa {
            raddr: remote_addr,
            rkey,
            add,
        },
    }
}

/// An mlx5 send request for a verbs one whose gather list is `sg`.
pub(crate) fn send_wr<'a>(wr: &SendWr, sg: &'a [mlx5::Sge]) -> mlx5::SendWr<'a> {
    mlx5::SendWr {
        op: op(wr.opcode),
        flags: SendFlags {
            signaled: wr.signaled,
            solicited: wr.solicited,
            fence: false,
        },
        transport: TransportSeg::None,
        payload: Payload::Gather(sg),
    }
}

/// A verbs work completion for a driver completion.
pub(crate) fn completion(c: &Completion) -> WorkCompletion {
    let opcode = if c.send {
        match c.wqe_opcode {
            0x08 | 0x09 => WcOpcode::RdmaWrite,
            0x10 => WcOpcode::RdmaRead,
            0x11 | 0x14 => WcOpcode::CompSwap,
            0x12 | 0x15 => WcOpcode::FetchAdd,
            _ => WcOpcode::Send,
        }
    } else if c.opcode == CqeOpcode::RespWrImm {
        WcOpcode::RecvRdmaWithImm
    } else {
        WcOpcode::Recv
    };
    let imm = matches!(c.opcode, CqeOpcode::RespWrImm | CqeOpcode::RespSendImm);
    WorkCompletion {
        wr_id: c.wr_id,
        // mlx5dv.h `MLX5_CQE_SYNDROME_*` → `IBV_WC_*` (rdma-core cq.c `mlx5_handle_error_cqe`);
        // MW_BIND, REMOTE_ABORTED and unknown syndromes have no status of their own here.
        status: c.error.map_or(WcStatus::Success, |e| {
            e.syndrome.wc_status().unwrap_or(WcStatus::RemOpErr)
        }),
        opcode,
        byte_len: c.byte_len,
        imm_data: imm.then_some(c.imm),
        qp_num: c.qpn,
    }
}
