//! The RC engine's [`MemoryAccess`] over the device's MKEY table: an lkey/rkey selects an
//! MKEY (`key >> 8` = index, low byte = `mkey_7_0`), which must belong to the QP's PD, cover
//! the range and allow the access; the virtual range is translated to IOVAs (physical
//! addressing or the MTT) and reached through the model's IOMMU.
//!
//! Inline payloads of send WQEs are served through [`INLINE_LKEY`], a key no MKEY can have.

use std::collections::BTreeMap;

use rdmesh_core::rc::{AccessKind, MemError, MemoryAccess};

use super::memory::DmaSpace;
use super::objects::Mkey;

/// The model-internal key that reads a WQE's inline data: address = WQE index << 32 |
/// offset. Only local reads may use it.
pub const INLINE_LKEY: u32 = u32::MAX;

/// Memory as one QP sees it.
pub struct KeyMemory<'a> {
    pub mkeys: &'a BTreeMap<u32, Mkey>,
    pub space: &'a DmaSpace,
    pub pd: u32,
    pub inline: &'a BTreeMap<u16, Vec<u8>>,
    /// DMA faults seen (an MKEY pointing at unmapped memory).
    pub faults: u64,
    /// Lengths of the DMA writes done (for the PCIe accounting).
    pub writes: Vec<usize>,
}

impl KeyMemory<'_> {
    fn resolve(
        &self,
        key: u32,
        va: u64,
        len: u64,
        kind: AccessKind,
    ) -> Result<Vec<(u64, usize)>, MemError> {
        let m = self.mkeys.get(&(key >> 8)).ok_or(MemError::InvalidKey)?;
        if m.key8 != key as u8 || m.pd != self.pd {
            return Err(MemError::InvalidKey);
        }
        let allowed = match kind {
            AccessKind::LocalRead => true,
            AccessKind::LocalWrite => m.lw,
            AccessKind::RemoteRead => m.rr,
            AccessKind::RemoteWrite => m.rw,
            AccessKind::RemoteAtomic => m.atomic,
        };
        if !allowed {
            return Err(MemError::AccessDenied);
        }
        m.translate(va, len).ok_or(MemError::OutOfBounds)
    }

    fn inline_bytes(&self, va: u64, len: usize) -> Result<&[u8], MemError> {
        let data = self
            .inline
            .get(&((va >> 32) as u16))
            .ok_or(MemError::InvalidKey)?;
        let off = (va & 0xffff_ffff) as usize;
        data.get(off..off + len).ok_or(MemError::OutOfBounds)
    }
}

impl MemoryAccess for KeyMemory<'_> {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> Result<(), MemError> {
        if key == INLINE_LKEY {
            if kind != AccessKind::LocalRead {
                return Err(MemError::InvalidKey);
            }
            out.copy_from_slice(self.inline_bytes(va, out.len())?);
            return Ok(());
        }
        let mut at = 0;
        for (iova, n) in self.resolve(key, va, out.len() as u64, kind)? {
            if self.space.dma_read(iova, &mut out[at..at + n]).is_err() {
                self.faults += 1;
                return Err(MemError::AccessDenied);
            }
            at += n;
        }
        Ok(())
    }

    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError> {
        let mut at = 0;
        for (iova, n) in self.resolve(key, va, data.len() as u64, kind)? {
            if self.space.dma_write(iova, &data[at..at + n]).is_err() {
                self.faults += 1;
                return Err(MemError::AccessDenied);
            }
            self.writes.push(n);
            at += n;
        }
        Ok(())
    }

    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError> {
        if key == INLINE_LKEY {
            if kind != AccessKind::LocalRead {
                return Err(MemError::InvalidKey);
            }
            return self.inline_bytes(va, len as usize).map(|_| ());
        }
        self.resolve(key, va, len, kind).map(|_| ())
    }
}
