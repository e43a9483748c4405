//! The command queue: on a `cmd_dbell` store, for each slot set, read the 64-byte entry at
//! `cmdq_addr + slot * 64`, gather the input from the entry and its input mailboxes, execute
//! it, scatter the output into the entry and the output mailboxes, then write the delivery
//! status with the ownership bit cleared and the signature, and raise a command-completion EQE
//! (Linux cmd.c, rdma-core mlx5_vfio.c `mlx5_vfio_post_cmd`, restated from the device side).

use rdmesh_core::mlx5::cmd::entry::{self, CmdEntry};
use rdmesh_core::mlx5::cmd::mailbox::{self, Mailbox};
use rdmesh_core::mlx5::cmd::{CmdStatus, DeliveryStatus, EqeRepr, OutHeader};

use super::device::DeviceState;
use super::init_seg::LOG_CMDQ_STRIDE;

/// Shortest command input or output: the 8-byte header (opcode/op_mod, status/syndrome);
/// several outputs are 12 bytes (mlx5_ifc.h `enable_hca_out`).
pub const MIN_LEN: usize = 8;

/// Required alignment of mailbox blocks in bytes (Linux cmd.c allocates them 1 KiB aligned).
pub const MAILBOX_ALIGN: u64 = 1024;

/// Executes the command slots in `mask` (a `cmd_dbell` value).
pub fn ring(st: &mut DeviceState, mask: u32) {
    let mut done = 0u32;
    for slot in 0..entry::MAX_COMMANDS as u32 {
        if mask & (1 << slot) != 0 && execute_slot(st, slot) {
            done |= 1 << slot;
        }
    }
    if done != 0 {
        super::eq::post_event(st, EqeRepr::Cmd { vector: done });
    }
}

fn opcode_of(e: &[u8]) -> u16 {
    u16::from_be_bytes([e[0x10], e[0x11]])
}

/// Runs one slot; `true` when the entry was completed (handed back to software).
fn execute_slot(st: &mut DeviceState, slot: u32) -> bool {
    let addr = st.init.cmdq_addr() + (u64::from(slot) << LOG_CMDQ_STRIDE);
    let mut raw = [0u8; entry::LEN];
    if st.dma_read(addr, &mut raw).is_err() {
        st.last_error = Some(format!(
            "command slot {slot}: entry at IOVA {addr:#x} is not mapped (cmdq_addr programmed?)"
        ));
        return false;
    }
    if !CmdEntry::new_unchecked(&raw[..]).hw_owned() {
        tracing::debug!(
            slot,
            "model: doorbell for a command slot not owned by hardware"
        );
        return false;
    }
    let opcode = opcode_of(&raw);
    let faults = st.faults;
    let faulty = faults.applies_to(opcode);
    if faults.cmd_never_complete && faulty {
        tracing::debug!(slot, opcode, "model fault: command never completes");
        return false;
    }
    st.counters.commands_executed += 1;
    let mut out_inline = [0u8; entry::INLINE_LEN];
    let delivery = if faults.cmd_bad_output_length && faulty {
        DeliveryStatus::OutLengthErr
    } else {
        match run(
            st,
            &raw,
            &mut out_inline,
            faults.cmd_garbage_status.filter(|_| faulty),
        ) {
            Ok(()) => DeliveryStatus::Ok,
            Err(d) => d,
        }
    };
    if delivery != DeliveryStatus::Ok || out_inline[0] != 0 {
        st.counters.commands_failed += 1;
    }
    let mut e = CmdEntry::new_unchecked(&mut raw[..]);
    e.out_inline_mut().copy_from_slice(&out_inline);
    e.complete(delivery);
    e.fill_signature();
    if faults.cmd_bad_signature && faulty {
        let s = e.sig();
        e.set_sig(s ^ 0x5a);
    }
    st.dma_write(addr, &raw).is_ok()
}

/// Gathers, executes and scatters one command; `Err` is a delivery error (not executed).
fn run(
    st: &mut DeviceState,
    raw: &[u8],
    out_inline: &mut [u8; entry::INLINE_LEN],
    garbage_status: Option<u8>,
) -> Result<(), DeliveryStatus> {
    let e = CmdEntry::new_unchecked(raw);
    if e.ty() != entry::PCI_CMD_XPORT {
        st.last_error = Some(format!(
            "command entry type {} is not 7 (PCI_CMD_XPORT)",
            e.ty()
        ));
        return Err(DeliveryStatus::CmdDescErr);
    }
    let in_len = e.in_len() as usize;
    let out_len = e.out_len() as usize;
    let token = e.token();
    if !(MIN_LEN..=1 << 20).contains(&in_len) {
        st.last_error = Some(format!(
            "command input length {in_len} is outside 8 bytes..=1 MiB"
        ));
        return Err(DeliveryStatus::InLengthErr);
    }
    if !(MIN_LEN..=1 << 20).contains(&out_len) {
        st.last_error = Some(format!(
            "command output length {out_len} is outside 8 bytes..=1 MiB"
        ));
        return Err(DeliveryStatus::OutLengthErr);
    }
    let mut input = vec![0u8; in_len];
    let n = in_len.min(entry::INLINE_LEN);
    input[..n].copy_from_slice(&e.in_inline()[..n]);
    let in_blocks = mailbox::blocks_for(in_len);
    let out_blocks = mailbox::blocks_for(out_len);
    let in_chain = chain(
        st,
        e.in_ptr(),
        in_blocks,
        token,
        DeliveryStatus::InPtrAlignErr,
    )?;
    let out_chain = chain(
        st,
        e.out_ptr(),
        out_blocks,
        token,
        DeliveryStatus::OutPtrAlignErr,
    )?;
    for (i, (_, block)) in in_chain.iter().enumerate() {
        if let Some(r) = mailbox::block_range(in_len, i) {
            let n = r.len();
            input[r].copy_from_slice(&Mailbox::new_unchecked(&block[..]).data()[..n]);
        }
    }

    let mut output = vec![0u8; out_len];
    if let Some(status) = garbage_status {
        OutHeader {
            status: CmdStatus::from(status),
            syndrome: 0xdead_beef,
        }
        .emit(&mut output)
        .map_err(|_| DeliveryStatus::OutLengthErr)?;
    } else {
        super::commands::execute(st, &input, &mut output);
    }

    let n = out_len.min(entry::INLINE_LEN);
    out_inline[..n].copy_from_slice(&output[..n]);
    for (i, (addr, mut block)) in out_chain.into_iter().enumerate() {
        let mut m = Mailbox::new_unchecked(&mut block[..]);
        if let Some(r) = mailbox::block_range(out_len, i) {
            let n = r.len();
            m.data_mut()[..n].copy_from_slice(&output[r]);
        }
        m.fill_signatures();
        if st.dma_write(addr, &block).is_err() {
            return Err(DeliveryStatus::OutPtrAlignErr);
        }
    }
    Ok(())
}

/// Reads and checks a mailbox chain of `blocks` blocks starting at `ptr`.
fn chain(
    st: &mut DeviceState,
    mut ptr: u64,
    blocks: usize,
    token: u8,
    align_err: DeliveryStatus,
) -> Result<Vec<(u64, Vec<u8>)>, DeliveryStatus> {
    let mut out = Vec::with_capacity(blocks);
    for i in 0..blocks {
        if ptr == 0 || ptr % MAILBOX_ALIGN != 0 {
            st.last_error = Some(format!(
                "mailbox block {i} pointer {ptr:#x} is null or not {MAILBOX_ALIGN}-byte aligned"
            ));
            return Err(align_err);
        }
        let mut b = vec![0u8; mailbox::LEN];
        if st.dma_read(ptr, &mut b).is_err() {
            st.last_error = Some(format!("mailbox block {i} at IOVA {ptr:#x} is not mapped"));
            return Err(align_err);
        }
        let m = Mailbox::new_unchecked(&b[..]);
        if m.block_num() != i as u32 {
            st.last_error = Some(format!(
                "mailbox block {i} at {ptr:#x} carries block number {}",
                m.block_num()
            ));
            return Err(DeliveryStatus::BadBlockNumber);
        }
        if m.token() != token {
            st.last_error = Some(format!(
                "mailbox block {i} token {:#x} differs from the entry token {token:#x}",
                m.token()
            ));
            return Err(DeliveryStatus::TokenErr);
        }
        let next = m.next();
        out.push((ptr, b));
        ptr = next;
    }
    Ok(out)
}
