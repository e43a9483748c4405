//! The mesh transport: connections between nodes that are cabled directly, each link on its own
//! subnet (a triangle of DGX Sparks, the two halves of a Spark's QSFP port, a ring of four),
//! with the semantics NCCL's net plugin API needs. `docs/mesh.md` is the user guide.
//!
//! - A node ([`MeshNode`]) uses every selected NIC (`RDMESH_HCA`, NCCL's syntax: [`select`])
//!   that is up with an address ([`nic`]), one soft RoCEv2 device each.
//! - [`MeshNode::listen`] gives a 128-byte, versioned [`Handle`] that carries all of the node's
//!   link addresses ([`handle`]). [`MeshNode::connect`] with that handle picks, for each of the
//!   peer's addresses, the local NIC whose subnet contains it (longest prefix match: [`route`]);
//!   with several such NICs it opens one RC connection (a [`rail`]) on each and stripes large
//!   messages across them, weighted by the NICs' ceilings, 128-byte aligned ([`stripe`]).
//!   With none, it routes through a node linked to both, on the shortest path over the
//!   topology the nodes exchange; that node forwards byte for byte with bounded buffers
//!   ([`relay`]).
//! - `listen`, `connect` and `accept` never block: the TCP handshake ([`handshake`],
//!   [`messages`]) runs on background threads, is versioned, bounds every length, times out
//!   naming the addresses tried, and with `RDMESH_AUTH_KEY` refuses peers that cannot prove
//!   they hold the key ([`auth`]).
//! - [`SendComm::isend`] / [`RecvComm::irecv`] / `test` follow NCCL's rules ([`tagged`]): FIFO
//!   matching per connection, tags choosing the buffer in a grouped receive, a send larger than
//!   its receive refused with both sizes named, the actual size reported, at least 32 requests
//!   in flight.
//! - Every NIC counts what it sent, received and relayed ([`counters`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use rdmesh_host::mesh::{Buffer, MeshConfig, MeshNode, RecvBuf};
//! # fn main() -> Result<(), rdmesh_host::mesh::MeshError> {
//! let node = MeshNode::new(MeshConfig::from_env()?)?;
//! let listener = node.listen()?;
//! let handle = listener.handle().to_bytes(); // 128 bytes: give them to the peer
//! # let peer_handle = rdmesh_host::mesh::Handle::from_bytes(&handle)?;
//! let send = node.connect(&peer_handle).wait(Duration::from_secs(10))?;
//! let recv = listener.accept_wait(Duration::from_secs(10))?;
//! let dst = Buffer::new(4096);
//! let r = recv.irecv(&[RecvBuf { buf: dst.clone(), offset: 0, len: 4096, tag: 0 }])?.unwrap();
//! let s = send.isend(&Buffer::from_vec(vec![7; 100]), 0, 100, 0)?.unwrap();
//! s.wait(Duration::from_secs(5))?;
//! assert_eq!(r.wait(Duration::from_secs(5))?[..], [100]); // one size per buffer
//! # Ok(()) }
//! ```

pub mod auth;
pub mod bench;
pub mod buffer;
pub mod codec;
pub mod comm;
pub mod config;
pub mod counters;
pub mod error;
pub mod frame;
pub mod handle;
pub mod handshake;
mod lane_groups;
pub mod messages;
pub mod nic;
pub mod node;
pub mod progress;
pub mod rail;
pub mod railset;
pub mod relay;
pub mod route;
pub mod select;
pub mod stripe;
pub mod tagged;

#[cfg(test)]
mod tests;

pub use buffer::{Buffer, ExternalMemory};
pub use comm::{
    Lend, RecvComm, RecvRequest, Registration, Route, RouteLink, SendComm, SendRequest,
};
pub use config::MeshConfig;
pub use counters::NicCountersSnapshot;
pub use error::{MeshError, Result};
pub use handle::{Handle, NodeInfo, HANDLE_LEN};
pub use nic::NicSpec;
pub use node::{Connector, DeviceStats, Listener, MeshNode, NicReport};
pub use select::HcaFilter;
pub use tagged::{Placement, PlacementStats, RecvBuf, RecvSizes};
