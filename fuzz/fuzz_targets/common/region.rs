//! What the RC fuzz targets share: one registered region and scatter lists into it.
//! Included by `responder.rs`, `selective_repeat.rs` and `rc_link.rs`
//! (`#[path = "common/region.rs"]`); each target uses part of it.
#![allow(dead_code)]

use arbitrary::{Result, Unstructured};
use rdmesh_core::rc::{AccessKind, MemError, MemoryAccess, Sge};

pub const LOCAL_QPN: u32 = 0x12;
pub const KEY: u32 = 7;
pub const BASE: u64 = 0x1000;
pub const MEM_LEN: usize = 64 * 1024;

/// One registered region (key 7 at 0x1000, 64 KiB, every access allowed but remote write when
/// `read_only` is set).
pub struct Mem {
    pub data: Vec<u8>,
    pub read_only: bool,
}

impl Mem {
    fn range(&self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<usize, MemError> {
        if key != KEY {
            return Err(MemError::InvalidKey);
        }
        if self.read_only && kind == AccessKind::RemoteWrite {
            return Err(MemError::AccessDenied);
        }
        let off = va.checked_sub(BASE).ok_or(MemError::OutOfBounds)?;
        if off.checked_add(len).ok_or(MemError::OutOfBounds)? > MEM_LEN as u64 {
            return Err(MemError::OutOfBounds);
        }
        Ok(off as usize)
    }
}

impl MemoryAccess for Mem {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> Result<(), MemError> {
        let o = self.range(key, va, out.len() as u64, kind)?;
        out.copy_from_slice(&self.data[o..o + out.len()]);
        Ok(())
    }
    fn write(&mut self, key: u32, va: u64, data: &[u8], kind: AccessKind) -> Result<(), MemError> {
        let o = self.range(key, va, data.len() as u64, kind)?;
        self.data[o..o + data.len()].copy_from_slice(data);
        Ok(())
    }
    fn check(&mut self, key: u32, va: u64, len: u64, kind: AccessKind) -> Result<(), MemError> {
        self.range(key, va, len, kind).map(|_| ())
    }
}

pub fn sges(u: &mut Unstructured) -> Result<heapless::Vec<Sge, 16>> {
    let mut v = heapless::Vec::new();
    for _ in 0..u.int_in_range(0..=3)? {
        let _ = v.push(Sge {
            addr: BASE + u.int_in_range(0..=MEM_LEN as u64)?,
            length: u.int_in_range(0..=9000)?,
            lkey: if u.ratio(1, 8)? { 99 } else { KEY },
        });
    }
    Ok(v)
}
