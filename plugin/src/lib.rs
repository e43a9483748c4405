//! rdmesh-nccl: the NCCL net plugin `libnccl-net-rdmesh.so` over rdmesh's mesh transport.
//!
//! NCCL `dlopen`s the library and looks up `ncclNetPlugin_v12` … `ncclNetPlugin_v8` (data
//! symbols: function tables with NVIDIA's exact layouts, [`abi`]); the table's name is
//! `rdmesh` (`NCCL_NET=rdmesh`). The devices are the mesh node's NICs ([`device`]); every
//! connection is a mesh connection (subnet routing, multi-rail striping, relaying:
//! `docs/mesh.md`), set up without blocking. `docs/nccl.md` is the user guide.
//!
//! - [`abi`]: the C types, with compile-time size and offset checks.
//! - [`export`]: the exported tables and the `extern "C"` functions (the FFI layer: panics
//!   caught, pointers checked).
//! - [`net`]: the operations, independent of the ABI version; [`comm`]: the objects behind
//!   NCCL's pointers; [`state`]: the process-wide node and its reference counts;
//!   [`registry`]: the pointers NCCL holds, looked up on every call.
//! - [`config`]: the `RDMESH_*` variables the plugin adds; [`log`]: NCCL's logger.

pub mod abi;
pub mod comm;
pub mod config;
pub mod device;
pub mod error;
pub mod export;
pub mod log;
pub mod net;
pub mod pin;
pub mod registry;
pub mod state;

#[cfg(test)]
mod tests;

pub use export::v10::ncclNetPlugin_v10;
pub use export::v11::ncclNetPlugin_v11;
pub use export::v12::ncclNetPlugin_v12;
pub use export::v8::ncclNetPlugin_v8;
pub use export::v9::ncclNetPlugin_v9;
