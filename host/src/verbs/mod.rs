//! The verbs-shaped API: [`Device`], [`ProtectionDomain`], [`MemoryRegion`],
//! [`CompletionQueue`], [`QueuePair`] — names and semantics follow libibverbs.
//!
//! Two providers sit behind the same types: `soft` (RoCEv2 over UDP sockets,
//! [`Device::open_soft`]) and `vfio` (an mlx5 device driven from user space through VFIO,
//! [`Device::open_vfio`], or its in-process model, [`Device::open_vfio_model`]; see
//! [`crate::vfio_provider`]).

pub(crate) mod cq;
pub(crate) mod device;
pub(crate) mod key_map;
pub(crate) mod mr;
pub(crate) mod pd;
pub(crate) mod provider;
pub(crate) mod qp;

pub use cq::{CompletionQueue, WcOpcode, WcStatus, WorkCompletion};
pub use device::{
    active_mtu_for, format_mac, parse_mac, Device, DeviceInfo, SoftConfig, ROCE_V2_UDP_PORT,
};
pub use mr::{AccessFlags, LentMemory, MemoryRegion};
pub use pd::ProtectionDomain;
pub use provider::{ProviderKind, PROVIDER_ENV};
pub use qp::{AhAttr, QpAttr, QpCap, QpState, QueuePair, RecvWr, SendWr, WrOpcode};
pub use rdmesh_core::rc::{Mtu, Recovery, Sge};
