//! mlx5 device formats: send/receive WQEs, CQEs, doorbell records, the doorbell sequence and a
//! doorbell-batching policy, byte-identical to what rdma-core's mlx5 provider writes.
//!
//! Everything a ConnectX (mlx5) device reads from or writes to host memory is big-endian. The
//! layouts come from rdma-core `providers/mlx5/mlx5dv.h` (public struct definitions and inline
//! helpers) and Linux `include/linux/mlx5/{qp.h,cq.h,device.h}`; the posting rules (segment
//! order, flags, DS accounting, ring wrap, doorbell order) restate rdma-core
//! `providers/mlx5/qp.c` (`_mlx5_post_send`, `post_send_db`, `mlx5_post_recv`) and
//! `providers/mlx5/cq.c` (`get_sw_cqe`, `update_cons_index`, `mlx5_arm_cq`).
//! `tests/tests/mlx5_*.rs` check the bytes against a C program built with `mlx5dv.h` and the
//! constants against both header sets. See `docs/mlx5.md` for the whole picture.
//!
//! # Pieces
//! - Segment views (smoltcp's checked-view pattern: `new_unchecked` / `new_checked` /
//!   `check_len`, getters, setters, and a `Repr` with `parse` / `emit`): [`ctrl`],
//!   [`raddr`], [`data`], [`inline`], [`atomic`], [`eth`], [`datagram`]; opcodes in
//!   [`opcode`].
//! - [`wqe`]: a send work request in mlx5 terms ([`SendWr`]), its DS / WQEBB accounting and the
//!   segments rdma-core would emit for it; [`decode`]: ring bytes back to the typed form.
//! - [`sq`]: [`SqWriter`], the send-queue ring writer; [`rq`]: [`RqWriter`].
//! - [`doorbell`]: doorbell records, the 8-byte doorbell, BlueFlame, and the ordered
//!   [`Effect`] list a backend executes; [`batch`]: the batching policy.
//! - [`cqe`]: the 64-byte CQE; [`cq`]: [`CqReader`] (ownership rule, consumer index, arm).
//!
//! # Panic contract
//! As in [`crate::wire`]: once `check_len` succeeded no accessor panics; every `parse`, the
//! decoder, the writers and the readers return a typed [`Error`] on any input.

use core::fmt;

#[macro_use]
mod view;

pub mod atomic;
pub mod batch;
pub mod bytes;
mod cells;
pub mod cmd;
pub mod cq;
pub mod cqe;
pub mod ctrl;
pub mod data;
pub mod datagram;
pub mod decode;
pub mod doorbell;
pub mod eth;
pub mod inline;
pub mod opcode;
pub mod raddr;
mod ring;
pub mod rq;
pub mod sq;
pub mod wqe;

pub use atomic::AtomicRepr;
pub use batch::{BatchPolicy, Batcher, Post};
pub use bytes::SplitBytes;
pub use cq::{ArmCmd, CqReader};
pub use cqe::{CqeError, CqeFormat, CqeOpcode, CqeRepr, Syndrome};
pub use ctrl::{CtrlRepr, FenceMode, FmCeSe};
pub use data::DataRepr;
pub use datagram::DatagramRepr;
pub use decode::{decode_wqe, WqeRepr};
pub use doorbell::{
    Barrier, BfMode, Bfreg, BfregConfig, DbRecord, Effect, EffectSink, Effects, RecvBatch,
    SendBatch, WorkQueue,
};
pub use eth::EthRepr;
pub use opcode::Opcode;
pub use raddr::RaddrRepr;
pub use rq::RqWriter;
pub use sq::{AsSendWr, OneSge, Posted, SqWriter, NO_SIGNAL};
pub use wqe::{Payload, QpType, Segment, SendFlags, SendWr, Sge, TransportSeg, WrOp};

/// Send WQE basic block: 64 bytes (`MLX5_SEND_WQE_BB`, mlx5dv.h / qp.h).
pub const WQEBB_LEN: usize = 64;
/// One DS unit ("octoword"): 16 bytes (`MLX5_SEND_WQE_DS`, qp.h). Every segment is a multiple.
pub const DS_LEN: usize = 16;
/// Largest WQE in WQEBBs: 16, i.e. 1 KiB (`MLX5_SEND_WQE_MAX_WQEBBS`, qp.h).
pub const MAX_WQEBBS: usize = 16;
/// Largest DS count a control segment can carry: 63 (`MLX5_WQE_CTRL_DS_MASK` 0x3f, qp.h).
pub const MAX_DS: usize = 0x3f;
/// Most segments after the control segment one WQE can hold (each at least one DS).
pub const MAX_SEGMENTS: usize = MAX_DS - 1;
/// Flag in an inline segment's byte count (`MLX5_INLINE_SEG`, mlx5dv.h / device.h).
pub const INLINE_SEG: u32 = 0x8000_0000;
/// L_Key of the data segment that ends a short receive scatter list (`MLX5_INVALID_LKEY`).
pub const INVALID_LKEY: u32 = 0x100;
/// Byte count rdma-core writes in the local data segment of an atomic (`MLX5_ATOMIC_SIZE`,
/// qp.c): the 8-byte original value returned by compare-swap / fetch-add.
pub const ATOMIC_SIZE: u32 = 8;
/// Largest send-queue ring the 16-bit WQE counter can address unambiguously: 2^15 WQEBBs
/// (also the largest `log_sq_size` + 1 in practice).
pub const MAX_RING_WQEBBS: usize = 1 << 15;

/// Number of DS units a byte length occupies, rounded up to 16 bytes.
#[inline]
pub const fn ds_for_bytes(len: usize) -> usize {
    len.div_ceil(DS_LEN)
}

/// Number of WQEBBs a WQE of `ds` DS units consumes: `ceil(ds * 16 / 64)` (rdma-core qp.c
/// `DIV_ROUND_UP(size * 16, MLX5_SEND_WQE_BB)`). The producer counter advances by this much.
#[inline]
pub const fn wqebbs_for_ds(ds: usize) -> usize {
    (ds * DS_LEN).div_ceil(WQEBB_LEN)
}

/// Why an mlx5 structure could not be parsed, built or posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// The buffer is shorter than the structure it should hold.
    Truncated,
    /// A field holds a value the format forbids (DS 0, reserved bits set, a QPN ≥ 2^24, ...).
    BadField,
    /// The control segment's DS disagrees with the segments found after it.
    DsMismatch,
    /// The WQE needs `ds` DS units: more than 63, or more WQEBBs than the ring holds.
    Oversize {
        /// DS units the WQE would need.
        ds: usize,
    },
    /// The ring has `free` free WQEBBs (or WQEs, for a receive queue) but `needed` are
    /// required; retire completed WQEs first.
    RingFull {
        /// WQEBBs (receive queue: WQEs) the post needs.
        needed: u16,
        /// WQEBBs (receive queue: WQEs) currently free.
        free: u16,
    },
    /// The ring buffer is not a power-of-two number of entries of the right size, or is larger
    /// than the 16-bit counters can address.
    BadRing,
    /// A completion names WQE counter `wqe_counter`, which is not outstanding in the queue.
    NotOutstanding {
        /// The WQE counter from the CQE.
        wqe_counter: u16,
    },
    /// A scatter entry is 2^31 bytes or longer (its byte count would read as an inline
    /// segment; the IBTA maximum message is 2^31 bytes).
    BadLength,
    /// The work request is not one rdma-core would post: inline data on an RDMA READ or an
    /// atomic, a payload on a NOP, READ/atomics on a UC QP, LSO outside a raw-packet QP, or a
    /// datagram/Ethernet segment that does not match the QP type.
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("buffer too short for the mlx5 structure"),
            Error::BadField => f.write_str("an mlx5 field holds a forbidden value"),
            Error::DsMismatch => {
                f.write_str("the control segment's DS does not match the segments after it")
            }
            Error::Oversize { ds } => write!(
                f,
                "WQE needs {ds} DS units (at most 63, 16 WQEBBs, and no more than the ring)"
            ),
            Error::RingFull { needed, free } => write!(
                f,
                "work queue full: {needed} entries needed, {free} free; poll the CQ and retire \
                 completed WQEs"
            ),
            Error::BadRing => f.write_str(
                "ring length must be a power of two number of entries (send queue: 64-byte \
                 WQEBBs, at most 2^15)",
            ),
            Error::NotOutstanding { wqe_counter } => write!(
                f,
                "completion for WQE counter {wqe_counter:#06x}, which is not outstanding"
            ),
            Error::BadLength => f.write_str("scatter entry of 2^31 bytes or more"),
            Error::Unsupported => f.write_str(
                "work request not valid for this opcode/QP type (inline on READ/atomic, \
                 payload on NOP, datagram/Ethernet segment vs QP type)",
            ),
        }
    }
}

#[cfg(any(test, feature = "std"))]
impl std::error::Error for Error {}

/// Result of mlx5 operations.
pub type Result<T> = core::result::Result<T, Error>;
