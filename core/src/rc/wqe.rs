//! Work queue entries as posted by the consumer: send WQEs (SEND, WRITE, READ) and receive WQEs.
//!
//! Names follow libibverbs (`struct ibv_send_wr`, `struct ibv_recv_wr`, `struct ibv_sge`) and
//! IBTA vol. 1 §10.8 (work requests), §11.4.1 (post send / post receive).

use heapless::Vec;

/// Most scatter/gather entries one WQE may carry (`ibv_qp_cap.max_send_sge`/`max_recv_sge`).
pub const MAX_SGE: usize = 16;

/// Largest message, in bytes, one WQE may describe: 2^31 (IBTA vol. 1 §9.4.1 "DMA Length";
/// rxe_resp.c rejects RETH lengths above it).
pub const MAX_MESSAGE_LEN: u64 = 1 << 31;

/// One scatter/gather entry: `length` bytes of local registered memory starting at virtual
/// address `addr`, reached through the memory region's `lkey` (libibverbs `struct ibv_sge`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Sge {
    /// Local virtual address of the first byte.
    pub addr: u64,
    /// Length in bytes (0 allowed: contributes nothing).
    pub length: u32,
    /// L_Key of the memory region holding `[addr, addr + length)`.
    pub lkey: u32,
}

/// The operation of a send WQE (libibverbs `enum ibv_wr_opcode`, RC subset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SendOpcode {
    /// SEND: consumes a receive WQE at the responder (IBV_WR_SEND).
    Send,
    /// SEND with immediate data delivered in the receiver's completion (IBV_WR_SEND_WITH_IMM).
    SendWithImm,
    /// RDMA WRITE to `remote_addr`/`rkey` (IBV_WR_RDMA_WRITE).
    RdmaWrite,
    /// RDMA WRITE with immediate: also consumes a receive WQE (IBV_WR_RDMA_WRITE_WITH_IMM).
    RdmaWriteWithImm,
    /// RDMA READ from `remote_addr`/`rkey` into the local SGEs (IBV_WR_RDMA_READ).
    RdmaRead,
    /// Atomic compare-and-swap of the 8 bytes at `remote_addr`/`rkey` (8-byte aligned); the
    /// original value lands in the local SGEs, which must add up to 8 bytes
    /// (IBV_WR_ATOMIC_CMP_AND_SWP; `wr.atomic.compare_add` / `wr.atomic.swap`).
    AtomicCmpAndSwp {
        /// Value the target must hold for the swap to happen.
        compare: u64,
        /// Value written when it does.
        swap: u64,
    },
    /// Atomic fetch-and-add on the 8 bytes at `remote_addr`/`rkey` (8-byte aligned); the
    /// original value lands in the local SGEs, which must add up to 8 bytes
    /// (IBV_WR_ATOMIC_FETCH_AND_ADD; `wr.atomic.compare_add`).
    AtomicFetchAndAdd {
        /// The addend (wrapping modulo 2^64).
        add: u64,
    },
}

impl SendOpcode {
    /// `true` for the two RDMA WRITE opcodes.
    pub const fn is_write(self) -> bool {
        matches!(self, SendOpcode::RdmaWrite | SendOpcode::RdmaWriteWithImm)
    }

    /// `true` for the opcodes that carry ImmDt.
    pub const fn has_imm(self) -> bool {
        matches!(self, SendOpcode::SendWithImm | SendOpcode::RdmaWriteWithImm)
    }

    /// `true` for the two atomic opcodes.
    pub const fn is_atomic(self) -> bool {
        matches!(
            self,
            SendOpcode::AtomicCmpAndSwp { .. } | SendOpcode::AtomicFetchAndAdd { .. }
        )
    }

    /// `true` for RDMA READ and the atomics: the operations that need a responder resource
    /// and count against the initiator depth (`max_rd_atomic`).
    pub const fn is_rd_atomic(self) -> bool {
        matches!(self, SendOpcode::RdmaRead) || self.is_atomic()
    }

    /// The atomic operation the responder executes, `None` for other opcodes.
    pub const fn atomic_op(self) -> Option<super::memory::AtomicOp> {
        match self {
            SendOpcode::AtomicCmpAndSwp { compare, swap } => {
                Some(super::memory::AtomicOp::CompareSwap { compare, swap })
            }
            SendOpcode::AtomicFetchAndAdd { add } => {
                Some(super::memory::AtomicOp::FetchAdd { add })
            }
            _ => None,
        }
    }
}

/// A send work request (libibverbs `struct ibv_send_wr`, RC subset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWqe {
    /// Consumer's identifier, returned in the work completion.
    pub wr_id: u64,
    /// The operation.
    pub opcode: SendOpcode,
    /// Local buffers: gathered for SEND/WRITE, scattered into for READ. The message length is
    /// the sum of the lengths (at most [`MAX_MESSAGE_LEN`]).
    pub sg_list: Vec<Sge, MAX_SGE>,
    /// Remote virtual address (WRITE, READ, atomics; ignored for SEND).
    pub remote_addr: u64,
    /// Remote R_Key (WRITE, READ, atomics; ignored for SEND).
    pub rkey: u32,
    /// Immediate data for `*WithImm`: the 32-bit big-endian number as it appears on the wire
    /// (libibverbs `imm_data`, `__be32`). Ignored for other opcodes.
    pub imm: u32,
    /// `IBV_SEND_SIGNALED`: produce a work completion on success. Errors always complete.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: set BTH.SE on the last packet (SEND and WRITE with immediate).
    pub solicited: bool,
}

impl SendWqe {
    /// Message length in bytes: the sum of the SGE lengths.
    pub fn length(&self) -> u64 {
        total_length(&self.sg_list)
    }
}

/// A receive work request (libibverbs `struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecvWqe {
    /// Consumer's identifier, returned in the work completion.
    pub wr_id: u64,
    /// Where an incoming SEND's payload is scattered, in order.
    pub sg_list: Vec<Sge, MAX_SGE>,
}

impl RecvWqe {
    /// Capacity in bytes: the sum of the SGE lengths.
    pub fn length(&self) -> u64 {
        total_length(&self.sg_list)
    }
}

/// Sum of the SGE lengths in bytes.
pub(crate) fn total_length(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| s.length as u64).sum()
}

/// Why `post_send` / `post_recv` refused a WQE. The WQE is not queued and no completion is
/// produced for it (as `ibv_post_send` returning an errno).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PostError {
    /// The queue (WQEs plus their not-yet-polled completions) holds its capacity (`ENOMEM`).
    QueueFull,
    /// The QP is not in a state that accepts the post: send needs RTS (`EINVAL`).
    InvalidState,
    /// The SGE lengths add up to more than 2^31 bytes, or a READ would need more than 2^22
    /// PSNs (half the PSN comparison window) (`EINVAL`).
    MessageTooLong,
    /// An atomic WQE whose SGEs do not add up to exactly 8 bytes (`EINVAL`).
    AtomicLength,
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            PostError::QueueFull => "work queue full: poll completions before posting more",
            PostError::InvalidState => "QP state does not accept this post (send needs RTS)",
            PostError::MessageTooLong => "message longer than 2^31 bytes (or READ over 2^22 PSNs)",
            PostError::AtomicLength => {
                "atomic work request needs a local buffer of exactly 8 bytes (its SGE list)"
            }
        })
    }
}

#[cfg(any(test, feature = "std"))]
impl std::error::Error for PostError {}
