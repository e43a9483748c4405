//! Memory regions: registered buffers with lkey/rkey and access flags (IBTA vol. 1 §10.6,
//! libibverbs `ibv_reg_mr`).
//!
//! The soft provider owns the registered memory (a heap buffer) so that remote writes never alias
//! a Rust reference held by the application: the application reads and writes it through
//! [`MemoryRegion::read`], [`MemoryRegion::write`] and [`MemoryRegion::with`]. The region's
//! virtual address is the buffer's real address, as with ibverbs.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{Error, Result};

/// Access rights of a memory region (libibverbs `IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// Local read only (always allowed).
    pub const NONE: AccessFlags = AccessFlags(0);
    /// `IBV_ACCESS_LOCAL_WRITE`: receives and READ responses may write the region.
    pub const LOCAL_WRITE: AccessFlags = AccessFlags(1);
    /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA WRITE into it (requires LOCAL_WRITE).
    pub const REMOTE_WRITE: AccessFlags = AccessFlags(2);
    /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA READ it.
    pub const REMOTE_READ: AccessFlags = AccessFlags(4);
    /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on it (requires LOCAL_WRITE).
    pub const REMOTE_ATOMIC: AccessFlags = AccessFlags(8);
    /// All of the above.
    pub const ALL: AccessFlags = AccessFlags(15);

    /// `true` when every flag of `other` is set.
    pub fn contains(self, other: AccessFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The raw bits (ibverbs values).
    pub fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = AccessFlags;
    fn bitor(self, rhs: AccessFlags) -> AccessFlags {
        AccessFlags(self.0 | rhs.0)
    }
}

/// The shared state of a registered region.
#[derive(Debug)]
pub(crate) struct MrInner {
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) access: AccessFlags,
    /// `buf.len()`, fixed at registration (read without the lock).
    pub(crate) len: usize,
    pub(crate) buf: Mutex<Box<[u8]>>,
}

impl MrInner {
    /// Locks the buffer; a poisoned lock (a panic elsewhere) still yields the bytes.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Box<[u8]>> {
        self.buf.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

/// A registered memory region. Cloning yields another handle to the same region.
#[derive(Debug, Clone)]
pub struct MemoryRegion {
    pub(crate) kind: MrKind,
}

/// The provider's memory region.
#[derive(Debug, Clone)]
pub(crate) enum MrKind {
    /// Soft provider: a heap buffer in the PD's table.
    Soft {
        inner: Arc<MrInner>,
        pd: Arc<crate::verbs::pd::PdInner>,
    },
    /// vfio provider: DMA memory with an MKEY (reached only through copies).
    Vfio {
        mr: Arc<rdmesh_vfio::mlx5::Mr>,
        access: AccessFlags,
        len: usize,
    },
}

impl MemoryRegion {
    /// Local key: names this region in local scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        match &self.kind {
            MrKind::Soft { inner, .. } => inner.lkey,
            MrKind::Vfio { mr, .. } => mr.lkey(),
        }
    }

    /// Remote key: names this region in a peer's RDMA WRITE/READ (RETH R_Key).
    pub fn rkey(&self) -> u32 {
        match &self.kind {
            MrKind::Soft { inner, .. } => inner.rkey,
            MrKind::Vfio { mr, .. } => mr.rkey(),
        }
    }

    /// The virtual address of the first byte (what a peer puts in RETH VA; vfio provider:
    /// the region's IOVA).
    pub fn addr(&self) -> u64 {
        match &self.kind {
            MrKind::Soft { inner, .. } => inner.addr,
            MrKind::Vfio { mr, .. } => mr.addr(),
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match &self.kind {
            MrKind::Soft { inner, .. } => inner.len(),
            MrKind::Vfio { len, .. } => *len,
        }
    }

    /// `true` for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Access flags given at registration.
    pub fn access(&self) -> AccessFlags {
        match &self.kind {
            MrKind::Soft { inner, .. } => inner.access,
            MrKind::Vfio { access, .. } => *access,
        }
    }

    /// Copies `data` into the region at byte `offset`.
    ///
    /// Errors: [`Error::Memory`] when `offset + data.len()` exceeds the region.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let inner = match &self.kind {
            MrKind::Soft { inner, .. } => inner,
            MrKind::Vfio { mr, len, .. } => {
                self.check_range(offset, data.len(), *len)?;
                return mr
                    .write(offset, data)
                    .map_err(|e| Error::Memory(e.to_string()));
            }
        };
        let mut b = inner.lock();
        let end = offset
            .checked_add(data.len())
            .filter(|&e| e <= b.len())
            .ok_or_else(|| self.range_err(offset, data.len(), b.len()))?;
        b[offset..end].copy_from_slice(data);
        Ok(())
    }

    /// Copies bytes from the region at byte `offset` into `out`.
    ///
    /// Errors: [`Error::Memory`] when `offset + out.len()` exceeds the region.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        let inner = match &self.kind {
            MrKind::Soft { inner, .. } => inner,
            MrKind::Vfio { mr, len, .. } => {
                self.check_range(offset, out.len(), *len)?;
                return mr
                    .read(offset, out)
                    .map_err(|e| Error::Memory(e.to_string()));
            }
        };
        let b = inner.lock();
        let end = offset
            .checked_add(out.len())
            .filter(|&e| e <= b.len())
            .ok_or_else(|| self.range_err(offset, out.len(), b.len()))?;
        out.copy_from_slice(&b[offset..end]);
        Ok(())
    }

    /// Runs `f` on the whole region's bytes while holding its lock (the provider cannot place
    /// data meanwhile).
    ///
    /// vfio provider: the device writes DMA memory concurrently, so no reference into it is
    /// handed out: the region is copied out, `f` runs on the copy, and the bytes `f` changed
    /// are written back (runs of changed bytes only, so a closure that only reads writes
    /// nothing, and bytes the device wrote meanwhile elsewhere survive). Prefer
    /// [`MemoryRegion::with_range`] there: it copies only the range. The device model holds
    /// the device off instead and hands out the bytes themselves.
    pub fn with<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        match &self.kind {
            MrKind::Soft { inner, .. } => f(&mut inner.lock()),
            MrKind::Vfio { mr, len, .. } => vfio_with(mr, 0, *len, f),
        }
    }

    /// Runs `f` on bytes `offset..offset + len` of the region while holding its lock: the
    /// same as `with(|b| f(&mut b[offset..offset + len]))`, but the vfio provider copies only
    /// this range.
    ///
    /// Errors: [`Error::Memory`] when the range exceeds the region.
    pub fn with_range<R>(
        &self,
        offset: usize,
        len: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        match &self.kind {
            MrKind::Soft { inner, .. } => {
                let mut b = inner.lock();
                let size = b.len();
                let end = offset
                    .checked_add(len)
                    .filter(|&e| e <= size)
                    .ok_or_else(|| self.range_err(offset, len, size))?;
                Ok(f(&mut b[offset..end]))
            }
            MrKind::Vfio { mr, len: size, .. } => {
                self.check_range(offset, len, *size)?;
                Ok(vfio_with(mr, offset, len, f))
            }
        }
    }

    fn check_range(&self, offset: usize, len: usize, size: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(e) if e <= size => Ok(()),
            _ => Err(self.range_err(offset, len, size)),
        }
    }

    fn range_err(&self, offset: usize, len: usize, size: usize) -> Error {
        Error::Memory(format!(
            "lkey {:#x}: range offset {offset} + {len} bytes exceeds the region's {size} bytes",
            self.lkey()
        ))
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        // The last application handle deregisters the region (ibv_dereg_mr). The vfio
        // provider's MKEY is destroyed when its last handle drops.
        if let MrKind::Soft { inner, pd } = &self.kind {
            if Arc::strong_count(inner) == 2 {
                pd.deregister(inner.lkey);
            }
        }
    }
}

/// `f` on `len` bytes at `offset` of a vfio region ([`rdmesh_vfio::mlx5::Mr::with_bytes`]).
fn vfio_with<R>(
    mr: &rdmesh_vfio::mlx5::Mr,
    offset: usize,
    len: usize,
    f: impl FnOnce(&mut [u8]) -> R,
) -> R {
    let mut f = Some(f);
    let mut out = None;
    let r = mr.with_bytes(offset, len, &mut |b: &mut [u8]| {
        if let Some(f) = f.take() {
            out = Some(f(b));
        }
    });
    if let Err(e) = r {
        tracing::error!("MemoryRegion::with on {len} bytes at {offset}: {e}");
    }
    match (out, f) {
        (Some(v), _) => v,
        // The region could not be reached (a DMA error, logged): `f` runs on zeros so the
        // caller still gets its value, as a failed copy would have given.
        (None, Some(f)) => f(&mut vec![0u8; len]),
        (None, None) => unreachable!("`f` ran, so it returned a value"),
    }
}

/// Validates registration flags as ibv_reg_mr does.
pub(crate) fn check_access(access: AccessFlags, len: usize) -> Result<()> {
    if (access.contains(AccessFlags::REMOTE_WRITE) || access.contains(AccessFlags::REMOTE_ATOMIC))
        && !access.contains(AccessFlags::LOCAL_WRITE)
    {
        return Err(Error::Memory(format!(
            "registering {len} bytes: REMOTE_WRITE and REMOTE_ATOMIC require LOCAL_WRITE (as ibv_reg_mr)"
        )));
    }
    Ok(())
}
