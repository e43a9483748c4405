//! NCCL's host buffers lent to the mesh transport for the life of one request (zero copy:
//! the mesh reads a send's bytes and places a receive's bytes in NCCL's memory directly).
//!
//! The loan is the window NCCL's net API promises (`net.h`, NVIDIA/nccl
//! `src/include/plugin/net/net_v10.h`): between `isend`/`irecv` and the `test` call that
//! reports the request done, the buffer stays allocated and NCCL neither writes a send's bytes
//! nor reads a receive's. The plugin ends the loan ([`rdmesh_host::mesh::Buffer::release`])
//! before `test` reports done, when the request fails, and when `closeSend`/`closeRecv` frees
//! a request still in flight — so the mesh never touches NCCL's memory outside the window.

use rdmesh_host::mesh::{Buffer, ExternalMemory};

/// `len` bytes of NCCL host memory at `addr`.
struct NcclMemory {
    addr: usize,
    len: usize,
}

impl ExternalMemory for NcclMemory {
    fn bytes(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: `addr` is non-NULL (net::isend / net::irecv refuse NULL with a size) and
        // `[addr, addr + len)` is NCCL's buffer of the request, allocated and not written by
        // NCCL (a send) or not read by it (a receive) until the loan ends (module docs). The
        // mesh calls this only under the Buffer's lock and never after `release`, so the
        // slice is the only Rust reference to these bytes and never outlives the loan.
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// A [`Buffer`] over NCCL's `len` bytes at `addr`, lent until `release`.
pub(crate) fn lend(addr: usize, len: usize) -> Buffer {
    Buffer::external(Box::new(NcclMemory { addr, len }))
}
