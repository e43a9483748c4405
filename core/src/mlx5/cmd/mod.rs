//! The mlx5 firmware command interface: what a driver without `mlx5_core` (VFIO) exchanges
//! with a ConnectX through the command queue, and what a device model answers.
//!
//! Pieces:
//! - [`ifc`]: [`IfcField`] (name, bit offset, width) with [`get`] / [`set`] /
//!   [`get_bytes`] / [`set_bytes`], the `MLX5_SET` / `MLX5_GET` addressing of Linux
//!   `include/linux/mlx5/mlx5_ifc.h`.
//! - [`layout`] (re-exported here): one module per `mlx5_ifc.h` structure the bring-up and an
//!   RC QP need (`create_qp_in::OPCODE`, `qpc::ST`, `ads::RLID`, ...), and the registry
//!   [`ALL`] that `tests/tests/ifc_conformance.rs` checks against the header.
//! - [`header`]: the input header (opcode, uid, op_mod) and output header (status,
//!   syndrome); [`Opcode`]; [`CmdStatus`] / [`DeliveryStatus`]; [`CmdError`].
//! - Typed commands (both directions, so the driver and a device model share them):
//!   [`hca`] (ENABLE_HCA ... TEARDOWN_HCA, pages, capabilities, ACCESS_REG), [`vport`]
//!   (NIC vport context, vport state, GID table), [`resource`] (UAR, EQ, PD, MKEY, CQ),
//!   [`qp`] (CREATE_QP, the state transitions, QUERY_QP), [`counters`] (Q counters, vport
//!   and congestion counters); each input implements [`CmdIn`],
//!   each output [`CmdOut`], both have `parse`; [`value`] holds [`Pas`] and the traits.
//! - Device formats in smoltcp's checked-view pattern: [`entry`] (64-byte command queue
//!   entry), [`mailbox`] (576-byte mailbox block and chaining), [`init_seg`] (BAR0 init
//!   segment), [`eqe`] (64-byte event queue entry).
//!
//! Everything here is big-endian, `no_std`, without heap, and returns a typed [`CmdError`]
//! instead of panicking. See `docs/mlx5.md` ("Firmware commands").

#[macro_use]
pub mod value;

pub mod counters;
pub mod entry;
pub mod eqe;
mod error;
pub mod hca;
pub mod header;
pub mod ifc;
pub mod init_seg;
pub mod layout;
pub mod mailbox;
mod opcode;
pub mod qp;
pub mod resource;
mod signature;
mod status;
pub mod vport;

#[cfg(test)]
mod tests;

pub use counters::*;
pub use entry::{CmdEntry, CmdEntryRepr};
pub use eqe::{EqeRepr, EventType, PortChangeSubtype, QpEvent};
pub use error::CmdError;
pub use hca::*;
pub use header::{check_status, mbox_in, mbox_out, InHeader, OutHeader};
pub use ifc::{get, get_bytes, get_bytes_mut, set, set_bytes, IfcField};
pub use init_seg::{CmdqAddrLSz, InitSeg, NicIfcState};
pub use layout::*;
pub use mailbox::{Mailbox, MailboxRepr};
pub use opcode::Opcode;
pub use qp::*;
pub use resource::*;
pub use status::{CmdStatus, DeliveryStatus};
pub use value::{CmdIn, CmdOut, FieldValue, Pas};
pub use vport::*;

/// Result of firmware-command operations.
pub type Result<T> = core::result::Result<T, CmdError>;

/// Size of a page the firmware borrows from the host (`MLX5_ADAPTER_PAGE_SIZE`): 4096 bytes.
pub const ADAPTER_PAGE_SIZE: usize = 4096;
