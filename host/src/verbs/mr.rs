//! Memory regions: registered buffers with lkey/rkey and access flags (IBTA vol. 1 §10.6,
//! libibverbs `ibv_reg_mr`).
//!
//! The soft provider owns the registered memory (a heap buffer) so that remote writes never alias
//! a Rust reference held by the application: the application reads and writes it through
//! [`MemoryRegion::read`], [`MemoryRegion::write`] and [`MemoryRegion::with`]. The region's
//! virtual address is the buffer's real address, as with ibverbs.
//!
//! A soft region may also be registered over memory the caller lends
//! ([`crate::verbs::ProtectionDomain::register_lent`], a [`LentMemory`]): the NCCL plugin's
//! registered buffers, which peers then RDMA WRITE into and sends read from in place. The
//! provider reaches lent memory only by *ranges* ([`LentMemory::range`],
//! [`LentMemory::range_mut`]): every access asks for exactly the bytes it touches, under the
//! region's lock, so a Rust reference only ever covers those bytes for the length of that one
//! access. Deregistration (the last [`MemoryRegion`] handle dropped) ends the loan under the
//! same lock: once it returns, no access reaches the lent memory again.

use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Memory a caller lends to a soft memory region
/// ([`crate::verbs::ProtectionDomain::register_lent`]) for as long as the region stays
/// registered.
///
/// The provider calls the methods only under the region's lock, never after deregistration
/// (the last [`MemoryRegion`] handle dropped), and only with `offset + len <= self.len()`
/// and `len > 0`. A returned slice lives only for the one access that asked for it
/// (a copy, a checksum, one `sendmsg`/`recvmsg`), so an implementation over memory another
/// agent also uses (NCCL, a GPU) creates references over exactly the bytes the provider is
/// about to touch, at the moment it touches them.
pub trait LentMemory: Send {
    /// Address of the first byte: the region's virtual address (what a peer puts in RETH VA).
    fn addr(&self) -> u64;

    /// Length in bytes (fixed for the life of the loan).
    fn len(&self) -> usize;

    /// `true` for a zero-length loan.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes `offset..offset + len`, to be read (a SEND's or WRITE's payload, a READ
    /// response, a local read).
    fn range(&self, offset: usize, len: usize) -> &[u8];

    /// Bytes `offset..offset + len`, to be written (a receive, an RDMA WRITE, a READ
    /// response arriving, an atomic, a local write).
    fn range_mut(&mut self, offset: usize, len: usize) -> &mut [u8];
}

/// The bytes of a soft region.
pub(crate) enum Backing {
    /// The region's own heap buffer.
    Owned(Box<[u8]>),
    /// Memory the caller lends, reached by ranges.
    Lent(Box<dyn LentMemory>),
    /// A lent region after deregistration: no bytes to reach.
    Released,
}

impl std::fmt::Debug for Backing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backing::Owned(b) => write!(f, "Owned({} bytes)", b.len()),
            Backing::Lent(m) => write!(f, "Lent({} bytes at {:#x})", m.len(), m.addr()),
            Backing::Released => f.write_str("Released"),
        }
    }
}

impl Backing {
    /// `false` once a lent region was deregistered.
    pub(crate) fn is_live(&self) -> bool {
        !matches!(self, Backing::Released)
    }

    /// Bytes `offset..offset + len` to read; `None` once released.
    ///
    /// Panics when the range exceeds the region (callers check bounds first, as slicing
    /// does).
    pub(crate) fn range(&self, offset: usize, len: usize) -> Option<&[u8]> {
        match self {
            Backing::Owned(b) => Some(&b[offset..offset + len]),
            Backing::Lent(_) if len == 0 => Some(&[]),
            Backing::Lent(m) => {
                assert!(
                    offset.checked_add(len).is_some_and(|e| e <= m.len()),
                    "range {offset} + {len} exceeds the lent region's {} bytes",
                    m.len()
                );
                Some(m.range(offset, len))
            }
            Backing::Released => None,
        }
    }

    /// Bytes `offset..offset + len` to write; `None` once released.
    ///
    /// Panics when the range exceeds the region.
    pub(crate) fn range_mut(&mut self, offset: usize, len: usize) -> Option<&mut [u8]> {
        match self {
            Backing::Owned(b) => Some(&mut b[offset..offset + len]),
            Backing::Lent(_) if len == 0 => Some(&mut []),
            Backing::Lent(m) => {
                assert!(
                    offset.checked_add(len).is_some_and(|e| e <= m.len()),
                    "range {offset} + {len} exceeds the lent region's {} bytes",
                    m.len()
                );
                Some(m.range_mut(offset, len))
            }
            Backing::Released => None,
        }
    }
}

/// The shared state of a registered region.
#[derive(Debug)]
pub(crate) struct MrInner {
    pub(crate) lkey: u32,
    pub(crate) rkey: u32,
    pub(crate) addr: u64,
    pub(crate) access: AccessFlags,
    /// The region's length, fixed at registration (read without the lock).
    pub(crate) len: usize,
    pub(crate) buf: Mutex<Backing>,
    /// Application handles ([`MemoryRegion`]s) alive; the last one to drop deregisters.
    pub(crate) handles: AtomicUsize,
}

impl MrInner {
    /// Locks the bytes; a poisoned lock (a panic elsewhere) still yields them.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Backing> {
        self.buf.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Ends a loan: a lent region's bytes are never reached again once this returns (an
    /// access still holding the region's `Arc` finds it released). An owned buffer stays
    /// (it is freed with the last `Arc`).
    pub(crate) fn release(&self) {
        let mut b = self.lock();
        if matches!(*b, Backing::Lent(_)) {
            *b = Backing::Released;
        }
    }
}

/// A registered memory region. Cloning yields another handle to the same region.
#[derive(Debug)]
pub struct MemoryRegion {
    pub(crate) kind: MrKind,
}

impl Clone for MemoryRegion {
    fn clone(&self) -> MemoryRegion {
        if let MrKind::Soft { inner, .. } = &self.kind {
            inner.handles.fetch_add(1, Ordering::Relaxed);
        }
        MemoryRegion {
            kind: self.kind.clone(),
        }
    }
}

/// The provider's memory region.
#[derive(Debug, Clone)]
pub(crate) enum MrKind {
    /// Soft provider: a heap buffer (or lent memory) in the tables of its PDs (one, or
    /// several for [`crate::verbs::ProtectionDomain::register_lent_on`]).
    Soft {
        inner: Arc<MrInner>,
        pds: Vec<Arc<crate::verbs::pd::PdInner>>,
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
        self.check_range(offset, data.len(), inner.len())?;
        let mut b = inner.lock();
        b.range_mut(offset, data.len())
            .ok_or_else(|| self.released_err())?
            .copy_from_slice(data);
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
        self.check_range(offset, out.len(), inner.len())?;
        let b = inner.lock();
        out.copy_from_slice(
            b.range(offset, out.len())
                .ok_or_else(|| self.released_err())?,
        );
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
            MrKind::Soft { inner, .. } => match inner.lock().range_mut(0, inner.len()) {
                Some(b) => f(b),
                None => f(&mut []),
            },
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
                self.check_range(offset, len, inner.len())?;
                let mut b = inner.lock();
                Ok(f(b
                    .range_mut(offset, len)
                    .ok_or_else(|| self.released_err())?))
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

    fn released_err(&self) -> Error {
        Error::Memory(format!(
            "lkey {:#x}: the memory lent to this region was released",
            self.lkey()
        ))
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
        // The last application handle deregisters the region (ibv_dereg_mr) and ends a loan
        // (accesses in flight that still hold the region find it released). The vfio
        // provider's MKEY is destroyed when its last handle drops.
        if let MrKind::Soft { inner, pds } = &self.kind {
            if inner.handles.fetch_sub(1, Ordering::AcqRel) == 1 {
                for pd in pds {
                    pd.deregister(inner.lkey);
                }
                inner.release();
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
