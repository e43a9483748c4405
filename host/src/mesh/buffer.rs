//! Application buffers of the mesh transport: what `isend` reads and `irecv` fills (the role of
//! the memory NCCL registers with `regMr`).
//!
//! A [`Buffer`] is shared: the application keeps a handle while a request is in flight, and the
//! transport's progress thread copies into or out of it (under its lock) as frames arrive or
//! rails have room. The soft provider cannot register one buffer with the protection domains of
//! several NICs, so the transport stages each chunk through the rail's registered slots and
//! places received chunks in the buffer at their offsets (reassembly in place).

use std::sync::{Arc, Mutex, MutexGuard};

use crate::mesh::error::{MeshError, Result};

/// A byte buffer shared between the application and the mesh transport. Cloning yields another
/// handle to the same bytes.
#[derive(Debug, Clone, Default)]
pub struct Buffer {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl Buffer {
    /// A zero-filled buffer of `len` bytes.
    pub fn new(len: usize) -> Buffer {
        Buffer::from_vec(vec![0; len])
    }

    /// A buffer holding `v`.
    pub fn from_vec(v: Vec<u8>) -> Buffer {
        Buffer {
            bytes: Arc::new(Mutex::new(v)),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
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
    /// Errors: [`MeshError::Request`] when the range exceeds the buffer.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let mut b = self.lock();
        let r = range(offset, data.len(), b.len())?;
        b[r].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes at `offset` into `out`.
    ///
    /// Errors: [`MeshError::Request`] when the range exceeds the buffer.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let b = self.lock();
        let r = range(offset, out.len(), b.len())?;
        out.copy_from_slice(&b[r]);
        Ok(())
    }

    /// A copy of the whole buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        self.lock().clone()
    }

    /// Runs `f` on the bytes while holding the buffer's lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        f(&mut self.lock())
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
}
