//! The `vfio` provider: the verbs-shaped API ([`crate::verbs`]) on an mlx5 device driven from
//! user space by `rdmesh_vfio::mlx5` — a real ConnectX function bound to vfio-pci
//! ([`crate::verbs::Device::open_vfio`]) or the in-process device model
//! ([`crate::verbs::Device::open_vfio_model`]).
//!
//! Differences from the soft provider:
//! - Memory regions live in DMA memory registered with an MKEY; the application reaches it only
//!   through copies ([`crate::verbs::MemoryRegion::read`] / `write`, and `with`, which copies
//!   the region out, runs the closure on the copy and copies it back). Addresses in SGEs and
//!   remote addresses are the region's IOVA ([`crate::verbs::MemoryRegion::addr`]).
//! - The GID table is programmed by the provider (entry 0 = the configured address); a peer's
//!   MAC comes from [`crate::verbs::Device::set_neighbor`] (there is no kernel ARP under VFIO;
//!   rdmesh's own exchanges carry it, see docs/vfio.md).
//! - Completions are read from the device's CQ when polled; a dead device completes every
//!   outstanding work request with a flush error.
//! - Counters are the device's own ([`crate::verbs::Device::hw_counters`],
//!   [`crate::verbs::QueuePair::hw_counters`]), published for `rdmesh stats` (`stats.rs`).
//! - [`crate::verbs::Device::open_model`] puts the mlx5 device model behind the same driver,
//!   its port on a UDP socket (`udp_port.rs`): `--provider model`.
//!
//! All `unsafe` stays in `rdmesh-vfio`; this module is safe code.

pub(crate) mod convert;
pub(crate) mod device;
pub(crate) mod qp;
pub(crate) mod stats;
pub(crate) mod udp_port;

pub(crate) use device::open_pci_parts;
pub(crate) use device::VfioDevice;
pub use device::{ModelPortConfig, VfioConfig};
pub(crate) use qp::VfioQp;
