//! NCCL's host buffers lent to the mesh transport (zero copy: the mesh reads a send's bytes
//! and places a receive's bytes in NCCL's memory directly).
//!
//! Two loans, both of memory NCCL keeps allocated and leaves alone for their length, by
//! NCCL's net API (`net.h`, NVIDIA/nccl `src/include/plugin/net/net_v10.h`):
//!
//! - **A request's buffer** ([`lend`]): between `isend`/`irecv` and the `test` call that
//!   reports the request done, the buffer stays allocated and NCCL neither writes a send's
//!   bytes nor reads a receive's. The plugin ends the loan ([`rdmesh_host::mesh::Buffer::release`])
//!   before `test` reports done, when the request fails, and when `closeSend`/`closeRecv`
//!   frees a request still in flight.
//! - **A registration** ([`lend_registered`], `regMr`): registered memory stays allocated
//!   until `deregMr`. On a receive comm the soft provider writes it only for RDMA WRITEs of
//!   a sender into a receive posted in it (between that `irecv` and the `test` that reports
//!   it done: the sender writes only after the receive's CTS, and the receive completes only
//!   after every chunk's placed DATA frame, which RC orders behind its WRITE). On a send comm
//!   it reads it only for the WRITEs of a send from it (between that `isend` and the `test`
//!   that reports it done: the SEND that follows each WRITE on its QP completes after the
//!   WRITE is acknowledged, and nothing is resent after that). `deregMr` deregisters the
//!   regions, which ends the loan under each region's lock.
//!
//! Both reach the memory one range at a time ([`NcclMemory`] overrides the ranged methods):
//! a Rust slice only ever covers the bytes one copy or one WRITE touches, so the mesh copying
//! one chunk of a receive (a fallback) and the provider placing another never hold
//! overlapping references.

use rdmesh_host::mesh::{Buffer, ExternalMemory};
use rdmesh_host::verbs::LentMemory;

/// `len` bytes of NCCL host memory at `addr`.
#[derive(Debug, Clone, Copy)]
struct NcclMemory {
    addr: usize,
    len: usize,
}

impl NcclMemory {
    /// The address of byte `offset`, after checking that `offset + len` lies inside the
    /// loan (callers pass ranges the buffer or the region checked first).
    fn at(&self, offset: usize, len: usize) -> *mut u8 {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "range {offset} + {len} outside NCCL's {} bytes",
            self.len
        );
        (self.addr + offset) as *mut u8
    }

    /// `len` bytes at `offset`, to read.
    fn slice(&self, offset: usize, len: usize) -> &[u8] {
        let p = self.at(offset, len);
        if len == 0 {
            return &[];
        }
        // SAFETY: as for `slice_mut`; a shared slice is made for reading a range no other
        // access writes meanwhile (a send's bytes, which NCCL leaves alone until the send
        // completes).
        unsafe { std::slice::from_raw_parts(p, len) }
    }

    /// `len` bytes at `offset`, to write (or read).
    fn slice_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        let p = self.at(offset, len);
        if len == 0 {
            return &mut [];
        }
        // SAFETY: `addr` is non-NULL (net::isend / net::irecv / net::reg_mr refuse NULL with
        // a size) and `[addr + offset, addr + offset + len)` lies inside NCCL's buffer
        // (checked by `at`), which stays allocated and untouched by NCCL for the loan (module
        // docs). The mesh and the provider call this only under the lock of the Buffer or
        // memory region that owns this loan, never after the loan ended (Buffer::release,
        // deregistration), and keep the slice for one copy, checksum or socket call. Slices
        // of the same memory made meanwhile through another loan (another device's region,
        // the request's Buffer) cover other chunks: each chunk of a message is written by
        // exactly one WRITE or one copy, and reads of a send's bytes never overlap a write.
        unsafe { std::slice::from_raw_parts_mut(p, len) }
    }
}

impl ExternalMemory for NcclMemory {
    fn bytes(&mut self) -> &mut [u8] {
        self.slice_mut(0, self.len)
    }

    fn len(&mut self) -> usize {
        self.len
    }

    fn range_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        self.slice_mut(offset, len)
    }

    fn range(&mut self, offset: usize, len: usize) -> &[u8] {
        self.slice(offset, len)
    }
}

impl LentMemory for NcclMemory {
    fn addr(&self) -> u64 {
        self.addr as u64
    }

    fn len(&self) -> usize {
        self.len
    }

    fn range(&self, offset: usize, len: usize) -> &[u8] {
        self.slice(offset, len)
    }

    fn range_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        self.slice_mut(offset, len)
    }
}

/// A [`Buffer`] over NCCL's `len` bytes at `addr`, lent until `release`.
pub(crate) fn lend(addr: usize, len: usize) -> Buffer {
    Buffer::external(Box::new(NcclMemory { addr, len }))
}

/// A loan of NCCL's registered `len` bytes at `addr` to one memory region (see the module
/// docs), made once per protection domain of the connection.
pub(crate) fn lend_registered(addr: usize, len: usize) -> Box<dyn LentMemory> {
    Box::new(NcclMemory { addr, len })
}
