//! rdmesh-host: the API users program against.
//!
//! - [`verbs`]: a verbs-shaped API (Device, ProtectionDomain, MemoryRegion, CompletionQueue,
//!   QueuePair) with libibverbs names and semantics.
//! - [`soft`]: the software RoCEv2 provider (RC over UDP, wire-compatible with real RoCE).
//! - [`capture`]: pcap output of the packets a device sends and receives.
//! - [`bench`]: perftest-shaped benchmarks; [`cli`]: the `rdmesh` tool.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod capture;
pub mod cli;
pub mod error;
pub mod framing;
pub mod fuzz;
pub mod mesh;
pub mod soft;
pub mod topo;
pub mod verbs;
pub mod vfio_provider;

pub use error::{Error, Result};
