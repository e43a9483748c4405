//! Application buffers of the mesh transport: what `isend` reads and `irecv` fills (the role of
//! the memory NCCL registers with `regMr`).
//!
//! A [`Buffer`] is shared: the application keeps a handle while a request is in flight, and the
//! transport copies into or out of it (under its lock) as frames arrive or rails have room:
//! each chunk is staged through the rail's registered slots and received chunks are placed in
//! the buffer at their offsets (reassembly in place). Memory registered with a connection
//! ([`crate::mesh::comm::Registration`], direct placement) skips the slots: the peer RDMA
//! WRITES into it, or sends are WRITTEN from it.
//!
//! The bytes are either the buffer's own (`Buffer::new`, `Buffer::from_vec`) or memory the
//! application lends for the life of a request ([`Buffer::external`], the NCCL plugin's
//! zero-copy path: NCCL's host buffers are read and filled in place). [`Buffer::release`]
//! ends a loan: once it returns, no access reaches the lent memory again (every access holds
//! the buffer's lock), and reads and writes fail with [`MeshError::Request`].
//!
//! A buffer may also be a view of memory registered with a connection
//! ([`crate::mesh::comm::Registration::buffer`]): its bytes are the registered region's,
//! reached through the region (one range per access), which is where a peer RDMA WRITES a
//! receive's chunks.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::mesh::error::{MeshError, Result};

/// Memory an application lends to a [`Buffer`] (see [`Buffer::external`]).
pub trait ExternalMemory: Send {
    /// The lent bytes. Called only under the buffer's lock and never after
    /// [`Buffer::release`], so the slice never outlives the loan and no two slices of one
    /// loan exist at once. The transport's copies use [`ExternalMemory::range_mut`]; this is
    /// for [`Buffer::with`] and [`Buffer::to_vec`].
    fn bytes(&mut self) -> &mut [u8];

    /// Length in bytes (default: `bytes().len()`; override it when the memory may be reached
    /// by others meanwhile, e.g. registered for RDMA, so that no whole-buffer slice is made).
    fn len(&mut self) -> usize {
        self.bytes().len()
    }

    /// `true` for an empty loan.
    fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Bytes `offset..offset + len` (in range: the buffer checks), for one copy in or out.
    /// Same calling rules as [`ExternalMemory::bytes`]. The default slices `bytes()`;
    /// override it to make a slice over just the range when parts of the memory may be
    /// written by others meanwhile (a peer's RDMA WRITE into another chunk).
    fn range_mut(&mut self, offset: usize, len: usize) -> &mut [u8] {
        &mut self.bytes()[offset..offset + len]
    }

    /// Bytes `offset..offset + len` to copy out (default: [`ExternalMemory::range_mut`]);
    /// override it to make a shared slice where others may read the same bytes meanwhile
    /// (a send's bytes, which the provider may be sending from a registration).
    fn range(&mut self, offset: usize, len: usize) -> &[u8] {
        self.range_mut(offset, len)
    }
}

enum Backing {
    Owned(Vec<u8>),
    External(Box<dyn ExternalMemory>),
    /// Registered memory, reached through its region.
    Region(crate::verbs::MemoryRegion),
    /// A loan that ended; the length it had.
    Released(usize),
}

impl Backing {
    fn len(&mut self) -> usize {
        match self {
            Backing::Owned(v) => v.len(),
            Backing::External(m) => m.len(),
            Backing::Region(mr) => mr.len(),
            Backing::Released(n) => *n,
        }
    }

    /// Copies `data` in at `offset` (range checked by the caller).
    fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        match self {
            Backing::External(m) => {
                m.range_mut(offset, data.len()).copy_from_slice(data);
                Ok(())
            }
            Backing::Region(mr) => mr
                .write(offset, data)
                .map_err(|e| MeshError::Request(e.to_string())),
            _ => {
                let b = self.bytes()?;
                b[offset..offset + data.len()].copy_from_slice(data);
                Ok(())
            }
        }
    }

    /// Copies bytes at `offset` out (range checked by the caller).
    fn read(&mut self, offset: usize, out: &mut [u8]) -> Result<()> {
        match self {
            Backing::External(m) => {
                out.copy_from_slice(m.range(offset, out.len()));
                Ok(())
            }
            Backing::Region(mr) => mr
                .read(offset, out)
                .map_err(|e| MeshError::Request(e.to_string())),
            _ => {
                let b = self.bytes()?;
                out.copy_from_slice(&b[offset..offset + out.len()]);
                Ok(())
            }
        }
    }

    fn bytes(&mut self) -> Result<&mut [u8]> {
        match self {
            Backing::Owned(v) => Ok(v),
            Backing::External(m) => Ok(m.bytes()),
            Backing::Region(_) => Err(MeshError::Request(
                "a registered buffer is reached through its region".into(),
            )),
            Backing::Released(n) => Err(MeshError::Request(format!(
                "the {n}-byte buffer lent to this request was released (its request completed \
                 or its connection closed)"
            ))),
        }
    }
}

/// A byte buffer shared between the application and the mesh transport. Cloning yields another
/// handle to the same bytes.
#[derive(Clone)]
pub struct Buffer {
    bytes: Arc<Mutex<Backing>>,
}

impl Default for Buffer {
    fn default() -> Buffer {
        Buffer::from_vec(Vec::new())
    }
}

impl fmt::Debug for Buffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut b = self.lock();
        let kind = match &*b {
            Backing::Owned(_) => "owned",
            Backing::External(_) => "lent",
            Backing::Region(_) => "registered",
            Backing::Released(_) => "released",
        };
        f.debug_struct("Buffer")
            .field("len", &b.len())
            .field("memory", &kind)
            .finish()
    }
}

impl Buffer {
    /// A zero-filled buffer of `len` bytes.
    pub fn new(len: usize) -> Buffer {
        Buffer::from_vec(vec![0; len])
    }

    /// A buffer holding `v`.
    pub fn from_vec(v: Vec<u8>) -> Buffer {
        Buffer {
            bytes: Arc::new(Mutex::new(Backing::Owned(v))),
        }
    }

    /// A buffer over memory the application lends until [`Buffer::release`] (or until every
    /// handle is dropped). The transport reads and writes `mem.bytes()` in place: no staging
    /// copy.
    pub fn external(mem: Box<dyn ExternalMemory>) -> Buffer {
        Buffer {
            bytes: Arc::new(Mutex::new(Backing::External(mem))),
        }
    }

    /// A buffer over registered memory: the bytes of `mr`, reached through it.
    pub(crate) fn region(mr: crate::verbs::MemoryRegion) -> Buffer {
        Buffer {
            bytes: Arc::new(Mutex::new(Backing::Region(mr))),
        }
    }

    /// Ends the loan of an external buffer: when this returns, no access (by any handle, on any
    /// thread) reaches the lent memory any more; later reads and writes fail. A buffer with
    /// its own bytes drops them the same way.
    pub fn release(&self) {
        let mut b = self.lock();
        let n = b.len();
        *b = Backing::Released(n);
    }

    fn lock(&self) -> MutexGuard<'_, Backing> {
        self.bytes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// `true` for a zero-length buffer.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Copies `data` into the buffer at byte `offset`.
    ///
    /// Errors: [`MeshError::Request`] when the range exceeds the buffer or the buffer was
    /// released.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut g = self.lock();
        if let Backing::Released(_) = &*g {
            g.bytes()?;
        }
        range(offset, data.len(), g.len())?;
        g.write(offset, data)
    }

    /// Copies bytes at `offset` into `out`.
    ///
    /// Errors: [`MeshError::Request`] when the range exceeds the buffer or the buffer was
    /// released.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let mut g = self.lock();
        if let Backing::Released(_) = &*g {
            g.bytes()?;
        }
        range(offset, out.len(), g.len())?;
        g.read(offset, out)
    }

    /// A copy of the whole buffer (empty once released).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut g = self.lock();
        if let Backing::Region(mr) = &*g {
            return mr.with(|b| b.to_vec());
        }
        g.bytes().map(|b| b.to_vec()).unwrap_or_default()
    }

    /// Runs `f` on the bytes while holding the buffer's lock (on no bytes once released).
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        let mut g = self.lock();
        if let Backing::Region(mr) = &*g {
            return mr.with(f);
        }
        match g.bytes() {
            Ok(b) => f(b),
            Err(_) => f(&mut []),
        }
    }

    /// Checks that `offset + len` lies within the buffer.
    ///
    /// Errors: [`MeshError::Request`] naming the range and the buffer length.
    pub fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        range(offset, len, self.len()).map(|_| ())
    }
}

fn range(offset: usize, len: usize, size: usize) -> Result<std::ops::Range<usize>> {
    match offset.checked_add(len) {
        Some(end) if end <= size => Ok(offset..end),
        _ => Err(MeshError::Request(format!(
            "buffer range offset {offset} + {len} bytes exceeds the buffer's {size} bytes"
        ))),
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn bounds() {
        let b = Buffer::new(8);
        b.write(4, &[1, 2, 3, 4]).unwrap();
        let mut out = [0u8; 2];
        b.read(5, &mut out).unwrap();
        assert_eq!(out, [2, 3]);
        let e = b.write(6, &[0; 3]).unwrap_err().to_string();
        assert!(
            e.contains("offset 6 + 3 bytes exceeds the buffer's 8 bytes"),
            "{e}"
        );
        assert!(b.check_range(usize::MAX, 2).is_err());
        assert_eq!(b.clone().to_vec(), vec![0, 0, 0, 0, 1, 2, 3, 4]);
    }

    struct Lent(Arc<Mutex<Vec<u8>>>, Vec<u8>);

    impl ExternalMemory for Lent {
        fn bytes(&mut self) -> &mut [u8] {
            // a lender that records every access
            self.0.lock().unwrap().push(1);
            &mut self.1
        }
    }

    #[test]
    fn external_memory_is_used_in_place_until_released() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let b = Buffer::external(Box::new(Lent(log.clone(), vec![0; 8])));
        let other = b.clone();
        b.write(2, &[9, 8]).unwrap();
        let mut out = [0u8; 3];
        other.read(1, &mut out).unwrap();
        assert_eq!(out, [0, 9, 8]);
        assert_eq!(b.len(), 8);
        let before = log.lock().unwrap().len();
        assert!(before >= 2);
        other.release();
        assert_eq!(
            log.lock().unwrap().len(),
            before + 1,
            "release reads the length once"
        );
        let after = log.lock().unwrap().len();
        let e = b.write(0, &[1]).unwrap_err().to_string();
        assert!(
            e.contains("8-byte buffer lent to this request was released"),
            "{e}"
        );
        assert!(b.read(0, &mut out).is_err());
        assert_eq!(b.len(), 8);
        assert!(b.to_vec().is_empty());
        assert_eq!(b.with(|s| s.len()), 0);
        assert_eq!(log.lock().unwrap().len(), after, "no access after release");
    }
}
