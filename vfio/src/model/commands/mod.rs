//! Command execution: dispatch by opcode to the handlers of each group, each parsing its
//! input with core's typed command layouts and answering with a typed output or an error
//! status and syndrome (`MLX5_CMD_STAT_*`).
//!
//! Syndromes are the model's own (real ones are firmware-specific and undocumented): the
//! high 16 bits name the check (`SYND_*`), the low 16 bits the opcode.

mod counters;
mod hca;
mod qp;
mod resource;
mod vport;

use rdmesh_core::mlx5::cmd::{CmdError, CmdOut, CmdStatus, InHeader, Opcode, OutHeader};

use super::device::{DeviceState, HcaState};

/// Syndrome: input shorter than the command's layout.
pub const SYND_IN_LEN: u32 = 0x0101;
/// Syndrome: output buffer shorter than the command's output.
pub const SYND_OUT_LEN: u32 = 0x0102;
/// Syndrome: unknown or unsupported opcode.
pub const SYND_OPCODE: u32 = 0x0103;
/// Syndrome: a field holds an invalid value.
pub const SYND_PARAM: u32 = 0x0104;
/// Syndrome: the HCA is not in the state the command needs.
pub const SYND_HCA_STATE: u32 = 0x0105;
/// Syndrome: a handle (UAR, PD, MKEY, EQN, CQN, QPN) names no object.
pub const SYND_HANDLE: u32 = 0x0106;
/// Syndrome: QP state transition not allowed from the current state.
pub const SYND_QP_STATE: u32 = 0x0107;
/// Syndrome: not enough pages given to the firmware.
pub const SYND_PAGES: u32 = 0x0108;
/// Syndrome: the object is still referenced.
pub const SYND_BUSY: u32 = 0x0109;
/// Syndrome: a size exceeds the capability.
pub const SYND_LIMIT: u32 = 0x010a;
/// Syndrome: a DMA address (PAS, dbr_addr) is not mapped.
pub const SYND_DMA: u32 = 0x010b;

/// A failed command: status, the model's syndrome class and an explanation.
#[derive(Debug, Clone)]
pub struct Fail {
    pub status: CmdStatus,
    pub synd: u32,
    pub why: String,
}

/// Result of a handler.
pub type CmdResult = Result<(), Fail>;

/// A failure.
pub fn fail(status: CmdStatus, synd: u32, why: impl Into<String>) -> Fail {
    Fail {
        status,
        synd,
        why: why.into(),
    }
}

/// Maps an input parse error.
pub fn bad_input(e: CmdError) -> Fail {
    match e {
        CmdError::Truncated { needed, len } => fail(
            CmdStatus::BadInpLen,
            SYND_IN_LEN,
            format!("input is {len} bytes, the command needs {needed}"),
        ),
        e => fail(CmdStatus::BadParam, SYND_PARAM, e.to_string()),
    }
}

/// Writes a typed output, mapping a short output buffer to BAD_OUTP_LEN.
pub fn reply<O: CmdOut>(o: &O, out: &mut [u8]) -> CmdResult {
    o.emit(out).map(|_| ()).map_err(|e| match e {
        CmdError::Truncated { needed, len } => fail(
            CmdStatus::BadOutpLen,
            SYND_OUT_LEN,
            format!("output is {len} bytes, the command answers {needed}"),
        ),
        e => fail(CmdStatus::IntErr, SYND_PARAM, e.to_string()),
    })
}

/// Fails unless the HCA is initialized (object commands).
pub fn need_init(st: &DeviceState) -> CmdResult {
    if st.hca != HcaState::Initialized {
        return Err(fail(
            CmdStatus::BadSysState,
            SYND_HCA_STATE,
            format!("the HCA is {:?}: INIT_HCA must come first", st.hca),
        ));
    }
    Ok(())
}

/// Fails unless the HCA is enabled (ENABLE_HCA done).
pub fn need_enabled(st: &DeviceState) -> CmdResult {
    if st.hca == HcaState::Disabled {
        return Err(fail(
            CmdStatus::BadSysState,
            SYND_HCA_STATE,
            "the HCA is disabled: ENABLE_HCA must come first",
        ));
    }
    Ok(())
}

/// Executes the command in `input` (all `inlen` bytes) and writes `output` (all `outlen`
/// bytes): the typed answer, or a zeroed output with the failure status and syndrome.
pub fn execute(st: &mut DeviceState, input: &[u8], output: &mut [u8]) {
    let hdr = match InHeader::parse(input) {
        Ok(h) => h,
        Err(e) => {
            finish(st, 0, Err(bad_input(e)), output);
            return;
        }
    };
    let op = u16::from(hdr.opcode);
    let r = dispatch(st, hdr.opcode, input, output);
    finish(st, op, r, output);
}

fn finish(st: &mut DeviceState, op: u16, r: CmdResult, output: &mut [u8]) {
    if let Err(f) = r {
        output.fill(0);
        let _ = OutHeader {
            status: f.status,
            syndrome: f.synd << 16 | u32::from(op),
        }
        .emit(output);
        let msg = format!(
            "{} ({op:#x}) failed: {:?}: {}",
            Opcode::from(op),
            f.status,
            f.why
        );
        tracing::debug!("model: {msg}");
        st.last_error = Some(msg);
    }
}

fn dispatch(st: &mut DeviceState, op: Opcode, input: &[u8], out: &mut [u8]) -> CmdResult {
    use Opcode as O;
    match op {
        O::EnableHca
        | O::DisableHca
        | O::QueryIssi
        | O::SetIssi
        | O::QueryPages
        | O::ManagePages
        | O::QueryHcaCap
        | O::SetHcaCap
        | O::AccessReg
        | O::InitHca
        | O::TeardownHca
        | O::QuerySpecialContexts
        | O::SetDriverVersion
        | O::Nop => hca::execute(st, op, input, out),
        O::ModifyNicVportContext
        | O::QueryNicVportContext
        | O::QueryVportState
        | O::SetRoceAddress
        | O::QueryRoceAddress => vport::execute(st, op, input, out),
        O::AllocUar
        | O::DeallocUar
        | O::AllocPd
        | O::DeallocPd
        | O::CreateEq
        | O::DestroyEq
        | O::CreateMkey
        | O::DestroyMkey
        | O::CreateCq
        | O::DestroyCq => resource::execute(st, op, input, out),
        O::CreateQp
        | O::DestroyQp
        | O::Rst2InitQp
        | O::Init2RtrQp
        | O::Rtr2RtsQp
        | O::Qp2Err
        | O::Qp2Rst
        | O::Init2InitQp
        | O::Rts2RtsQp
        | O::QueryQp => qp::execute(st, op, input, out),
        O::AllocQCounter
        | O::DeallocQCounter
        | O::QueryQCounter
        | O::QueryVportCounter
        | O::QueryCongStatistics => counters::execute(st, op, input, out),
        _ => Err(fail(
            CmdStatus::BadOp,
            SYND_OPCODE,
            "opcode not implemented by the model",
        )),
    }
}
