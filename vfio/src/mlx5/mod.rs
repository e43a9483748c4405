//! The mlx5 (ConnectX) driver over the [`seam`](crate::seam): it runs unchanged on a real
//! device through VFIO ([`crate::sys`]) and on the in-process device model.
//!
//! # Pieces (one concept per file)
//! - [`init_seg`]: waiting for `initializing`, the command-interface revision and geometry.
//! - [`cmdif`]: the command queue — slots, mailbox chains, tokens, signatures, ownership
//!   polling and EQ-driven completion, timeouts naming the opcode, a full queue.
//! - [`eq`]: the async event queue; [`pages`]: pages lent to the firmware; [`health`]: the
//!   health counter.
//! - [`bringup`]: the reference bring-up order; [`teardown`]: the reference teardown order.
//! - Objects: [`pd`], [`mr`] (DMA memory + MKEY), [`cq`], [`qp`] (RC, RoCEv2 path),
//!   [`gid`] (SET_ROCE_ADDRESS), [`effects`] (core's doorbell effects against DMA and BAR0).
//!
//! # Usage
//! ```ignore
//! let hca = Hca::bring_up(bar0, dma, irq, DriverConfig::new("0000:01:00.0"))?;
//! hca.set_gid(1, 0, gid_of(local_ip), None, None)?;
//! let pd = hca.alloc_pd()?;
//! let mr = Mr::register(&pd, 1 << 20, Access::ALL)?;
//! let cq = hca.create_cq(256)?;
//! let qp = Qp::create(&pd, &cq, &cq, QpCaps::default())?;
//! qp.connect(&RcPath::new(peer_qpn, peer_gid, peer_mac))?;
//! qp.post_send(&[SendRequest { wr_id: 1, wr }])?;
//! let done = cq.poll(16)?;
//! ```
//!
//! # Doorbells: the 8-byte doorbell, never BlueFlame
//! Sends ring exactly as rdma-core `post_send_db` does on an uncached UAR: copy the WQEs into
//! the queue buffer, `udma_to_device_barrier` (aarch64 `dmb oshst`), doorbell record dword 1 =
//! the producer counter, `mmio_wc_start` (`dsb st` / `sfence`), one 64-bit store of the last
//! WQE's control-segment bytes 0..7 to UAR + 0x800, `mmio_flush_writes`. The sequence is
//! core's [`Effect`](rdmesh_core::mlx5::Effect) list from
//! [`Bfreg::ring_send`](rdmesh_core::mlx5::Bfreg::ring_send) with
//! [`BfregConfig::doorbell_only`](rdmesh_core::mlx5::BfregConfig::doorbell_only) and
//! `BfMode::Off`, executed by [`effects`].
//!
//! BlueFlame is not used: vfio-pci maps BAR0 with `pgprot_noncached` (arm64 Device-nGnRnE, x86
//! UC), not write-combining, so copying a WQE into the BlueFlame half would be a series of
//! uncached 8-byte stores, each a separate PCIe write — slower than the single doorbell store
//! plus the device's own WQE fetch, and the latency gain of BlueFlame comes only from a WC
//! burst. rdma-core's own VFIO provider makes the same choice (`vfio_devx_alloc_uar` accepts
//! only non-cached UARs). The effects executor refuses a BlueFlame effect.
//!
//! # Errors
//! Every [`DriverError`] names the device (BDF), and, as they apply, the command opcode, the
//! QPN/CQN, GID index and MTU, and says what to check.

pub mod barrier;
pub mod bringup;
pub mod cmdif;
pub mod config;
pub mod counters;
pub mod cq;
pub mod effects;
pub mod eq;
pub mod error;
pub mod events;
pub mod gid;
pub mod hca;
pub mod health;
pub mod hw;
pub mod init_seg;
pub mod mr;
pub mod pages;
pub mod pd;
pub mod probe;
pub mod qp;
pub mod teardown;

pub use bringup::PortInfo;
pub use cmdif::{CmdIf, CmdRecord, CmdStats, SlotClass};
pub use config::DriverConfig;
pub use counters::{q_counters_named, CounterReader, PortCounters};
pub use cq::{Completion, Cq};
pub use error::{DriverError, Result};
pub use gid::{gid_of, GidEntry};
pub use hca::{Hca, HcaInfo};
pub use health::{Health, HealthSnapshot};
pub use mr::{Access, Mr};
pub use pd::Pd;
pub use probe::{probe, ProbeReport, ProbeStep};
pub use qp::{udp_sport_for, Qp, QpCaps, RcPath, RecvRequest, SendRequest};
