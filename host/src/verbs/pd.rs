//! Protection domains: the scope of memory regions and QPs (IBTA vol. 1 §10.2.3,
//! libibverbs `ibv_alloc_pd`). A QP may only touch regions of its own PD.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use rdmesh_core::rc::{AccessKind, AtomicOp, MemError, MemoryAccess};

use crate::error::Error;
use crate::error::Result;
use crate::verbs::device::DeviceInner;
use crate::verbs::key_map::KeyMap;
use crate::verbs::mr::{
    check_access, AccessFlags, Backing, LentMemory, MemoryRegion, MrInner, MrKind,
};

/// Key allocator shared by all PDs of the process: keys stay unique, so a stale rkey from a
/// deregistered region never resolves to a new one within 2^24 registrations.
static NEXT_KEY_INDEX: AtomicU32 = AtomicU32::new(1);

#[derive(Debug, Default)]
pub(crate) struct PdInner {
    mrs: RwLock<KeyMap<Arc<MrInner>>>,
    /// Advanced (under the write lock) by every registration and deregistration ([`LastMr`]).
    generation: AtomicU64,
}

impl PdInner {
    pub(crate) fn deregister(&self, key: u32) {
        let mut mrs = self.mrs.write().unwrap_or_else(|p| p.into_inner());
        if mrs.remove(&key).is_some() {
            self.generation.fetch_add(1, Ordering::Release);
        }
    }
}

/// The region the last access of a [`PdMemory::cached`] through it found, valid while its PD's
/// generation stands (as the receive path's last QP, `soft::qp_table`): a stream's packets
/// read one region, and a hit costs one atomic load instead of the table's `RwLock` (two
/// locked read-modify-writes) and a hash probe. A region deregistered, or its key
/// registered again, changes the generation. The access checks run on every call.
#[derive(Debug, Default)]
pub(crate) struct LastMr {
    /// (key, PD generation when it was looked up, region).
    last: Option<(u32, u64, Arc<MrInner>)>,
}

/// A protection domain.
#[derive(Debug, Clone)]
pub struct ProtectionDomain {
    pub(crate) kind: PdKind,
}

/// The provider's protection domain.
#[derive(Debug, Clone)]
pub(crate) enum PdKind {
    /// Soft provider: the PD's MR table and the device.
    Soft {
        inner: Arc<PdInner>,
        device: Arc<DeviceInner>,
    },
    /// vfio provider: the device's PD.
    Vfio {
        pd: rdmesh_vfio::mlx5::Pd,
        dev: Arc<crate::vfio_provider::VfioDevice>,
    },
}

impl ProtectionDomain {
    /// `true` when `self` and `other` are handles of the same soft protection domain
    /// (always `false` for the vfio provider's).
    pub fn same(&self, other: &ProtectionDomain) -> bool {
        match (&self.kind, &other.kind) {
            (PdKind::Soft { inner: a, .. }, PdKind::Soft { inner: b, .. }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Registers a zero-filled region of `len` bytes with the given access flags.
    ///
    /// lkey and rkey are equal (as on mlx5); keys are 24-bit index + 8-bit key byte.
    /// Errors: [`crate::Error::Memory`] when REMOTE_WRITE/REMOTE_ATOMIC lack LOCAL_WRITE.
    ///
    /// vfio provider: the region is DMA memory registered with an MKEY (MTT); its address is
    /// its IOVA. Errors: [`crate::Error::Config`] when the allocation or CREATE_MKEY fails.
    pub fn register(&self, len: usize, access: AccessFlags) -> Result<MemoryRegion> {
        if let PdKind::Vfio { pd, .. } = &self.kind {
            check_access(access, len)?;
            let acc = rdmesh_vfio::mlx5::Access {
                local_write: access.contains(AccessFlags::LOCAL_WRITE),
                remote_write: access.contains(AccessFlags::REMOTE_WRITE),
                remote_read: access.contains(AccessFlags::REMOTE_READ),
                remote_atomic: access.contains(AccessFlags::REMOTE_ATOMIC),
            };
            let mr = rdmesh_vfio::mlx5::Mr::register(pd, len.max(1), acc)
                .map_err(crate::vfio_provider::convert::err)?;
            return Ok(MemoryRegion {
                kind: MrKind::Vfio {
                    mr: Arc::new(mr),
                    access,
                    len,
                },
            });
        }
        self.register_buffer(vec![0u8; len].into_boxed_slice(), access)
    }

    /// Registers an existing buffer (moved into the region; vfio provider: copied into DMA
    /// memory).
    pub fn register_buffer(&self, buf: Box<[u8]>, access: AccessFlags) -> Result<MemoryRegion> {
        let (pd_inner, _) = match &self.kind {
            PdKind::Soft { inner, device } => (inner, device),
            PdKind::Vfio { .. } => {
                let mr = self.register(buf.len(), access)?;
                mr.write(0, &buf)?;
                return Ok(mr);
            }
        };
        check_access(access, buf.len())?;
        let addr = buf.as_ptr() as u64;
        let len = buf.len();
        Ok(insert(
            vec![pd_inner.clone()],
            Backing::Owned(buf),
            addr,
            len,
            access,
        ))
    }

    /// Registers memory the caller lends (`mem`) for as long as the region stays registered:
    /// the region's address is `mem.addr()` and its length `mem.len()`, and the provider
    /// reads and writes the lent bytes in place, one range per access
    /// ([`LentMemory::range`]). Dropping the last handle of the region deregisters it and
    /// ends the loan: no access reaches `mem` after that.
    ///
    /// Errors: [`crate::Error::Memory`] when REMOTE_WRITE/REMOTE_ATOMIC lack LOCAL_WRITE or
    /// `addr + len` overflows; [`crate::Error::Config`] on the vfio provider (its regions are
    /// DMA memory it allocates).
    pub fn register_lent(
        &self,
        mem: Box<dyn LentMemory>,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        ProtectionDomain::register_lent_on(&[self], mem, access)
    }

    /// [`ProtectionDomain::register_lent`] on several soft PDs at once (of one device or of
    /// several): one region, one pair of keys (lkey = rkey, the same in every PD) and one
    /// lock, found by the QPs of each PD. What the mesh uses when the rails of a connection
    /// live on several devices and the caller lends the memory once.
    ///
    /// Errors: as [`ProtectionDomain::register_lent`]; [`crate::Error::Config`] for no PDs.
    pub fn register_lent_on(
        pds: &[&ProtectionDomain],
        mem: Box<dyn LentMemory>,
        access: AccessFlags,
    ) -> Result<MemoryRegion> {
        let mut all: Vec<Arc<PdInner>> = Vec::new();
        for pd in pds {
            let PdKind::Soft { inner, .. } = &pd.kind else {
                return Err(Error::Config(
                    "the vfio provider cannot register lent memory (its regions are DMA memory \
                     it allocates); use register"
                        .into(),
                ));
            };
            if !all.iter().any(|p| Arc::ptr_eq(p, inner)) {
                all.push(inner.clone());
            }
        }
        if all.is_empty() {
            return Err(Error::Config(
                "registering lent memory on no protection domain".into(),
            ));
        }
        let (addr, len) = (mem.addr(), mem.len());
        check_access(access, len)?;
        if addr.checked_add(len as u64).is_none() {
            return Err(Error::Memory(format!(
                "lent memory at {addr:#x} + {len} bytes overflows the address space"
            )));
        }
        Ok(insert(all, Backing::Lent(mem), addr, len, access))
    }
}

/// Puts a soft region into the tables of `pds` under a fresh key.
fn insert(
    pds: Vec<Arc<PdInner>>,
    buf: Backing,
    addr: u64,
    len: usize,
    access: AccessFlags,
) -> MemoryRegion {
    let index = NEXT_KEY_INDEX.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
    let key = (index << 8) | (index.wrapping_mul(0x9e) & 0xff);
    let inner = Arc::new(MrInner {
        lkey: key,
        rkey: key,
        addr,
        access,
        len,
        buf: std::sync::Mutex::new(buf),
        handles: std::sync::atomic::AtomicUsize::new(1),
    });
    for pd in &pds {
        pd.mrs
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, inner.clone());
        pd.generation.fetch_add(1, Ordering::Release);
    }
    tracing::debug!(
        key = format_args!("{key:#x}"),
        addr = format_args!("{addr:#x}"),
        len,
        pds = pds.len(),
        "registered MR"
    );
    MemoryRegion {
        kind: MrKind::Soft { inner, pds },
    }
}

/// The soft provider's view of a PD's registered memory, handed to core's RC state machines:
/// each access finds its region in the PD's table, or through the caller's [`LastMr`] when it
/// has one ([`PdMemory::cached`]: a QP's packets name the same few regions, and a hit skips the
/// table's `RwLock` and hash probe).
pub(crate) struct PdMemory<'a> {
    pd: &'a PdInner,
    cache: Option<&'a mut LastMr>,
}

impl<'a> PdMemory<'a> {
    /// Accesses through the PD's table.
    pub(crate) fn new(pd: &'a PdInner) -> PdMemory<'a> {
        PdMemory { pd, cache: None }
    }

    /// Accesses through `cache` first (the same checks, errors and results).
    pub(crate) fn cached(pd: &'a PdInner, cache: &'a mut LastMr) -> PdMemory<'a> {
        PdMemory {
            pd,
            cache: Some(cache),
        }
    }

    /// The region `key` names and the offset of `va` in it, when `[va, va + len)` lies inside
    /// it and it grants `kind`.
    ///
    /// Errors: [`MemError::InvalidKey`], [`MemError::AccessDenied`], [`MemError::OutOfBounds`].
    pub(crate) fn resolve(
        &mut self,
        key: u32,
        va: u64,
        len: u64,
        kind: AccessKind,
    ) -> core::result::Result<(Arc<MrInner>, usize), MemError> {
        self.with_region(key, va, len, kind, |mr, off| Ok((mr.clone(), off)))
    }

    /// `f` on the region `key` names and the offset of `va` in it, checked as
    /// [`resolve`](Self::resolve) checks, with the PD's table read-locked meanwhile: an access
    /// done inside `f` takes no reference on the region (two atomic read-modify-writes fewer
    /// per packet than `resolve`). `f` must not register or deregister a region of this PD.
    fn with_region<R>(
        &mut self,
        key: u32,
        va: u64,
        len: u64,
        kind: AccessKind,
        f: impl FnOnce(&Arc<MrInner>, usize) -> core::result::Result<R, MemError>,
    ) -> core::result::Result<R, MemError> {
        // Acquire, before the table is read: pairs with the Release of a change (see
        // `LastMr`), so a region cached now is dropped by the next change.
        let generation = self
            .cache
            .as_ref()
            .map(|_| self.pd.generation.load(Ordering::Acquire));
        if let (Some(cache), Some(generation)) = (self.cache.as_deref(), generation) {
            if let Some((k, g, mr)) = &cache.last {
                if *k == key && *g == generation {
                    return f(mr, offset_in(mr, va, len, kind)?);
                }
            }
        }
        let mrs = self.pd.mrs.read().unwrap_or_else(|p| p.into_inner());
        let mr = mrs.get(&key).ok_or(MemError::InvalidKey)?;
        if let (Some(cache), Some(generation)) = (self.cache.as_deref_mut(), generation) {
            cache.last = Some((key, generation, mr.clone()));
        }
        f(mr, offset_in(mr, va, len, kind)?)
    }
}

/// The offset of `va` in `mr` when `[va, va + len)` lies inside it and it grants `kind`.
///
/// Errors: [`MemError::AccessDenied`], [`MemError::OutOfBounds`].
fn offset_in(
    mr: &MrInner,
    va: u64,
    len: u64,
    kind: AccessKind,
) -> core::result::Result<usize, MemError> {
    let needed = match kind {
        AccessKind::LocalRead => AccessFlags::NONE,
        AccessKind::LocalWrite => AccessFlags::LOCAL_WRITE,
        AccessKind::RemoteRead => AccessFlags::REMOTE_READ,
        AccessKind::RemoteWrite => AccessFlags::REMOTE_WRITE,
        AccessKind::RemoteAtomic => AccessFlags::REMOTE_ATOMIC,
    };
    if !mr.access.contains(needed) {
        return Err(MemError::AccessDenied);
    }
    let size = mr.len() as u64;
    let off = va.checked_sub(mr.addr).ok_or(MemError::OutOfBounds)?;
    match off.checked_add(len) {
        Some(end) if end <= size => Ok(off as usize),
        _ => Err(MemError::OutOfBounds),
    }
}

impl MemoryAccess for PdMemory<'_> {
    fn read(
        &mut self,
        key: u32,
        va: u64,
        out: &mut [u8],
        kind: AccessKind,
    ) -> core::result::Result<(), MemError> {
        self.with_region(key, va, out.len() as u64, kind, |mr, off| {
            let b = mr.lock();
            out.copy_from_slice(b.range(off, out.len()).ok_or(MemError::InvalidKey)?);
            Ok(())
        })
    }

    fn write(
        &mut self,
        key: u32,
        va: u64,
        data: &[u8],
        kind: AccessKind,
    ) -> core::result::Result<(), MemError> {
        self.with_region(key, va, data.len() as u64, kind, |mr, off| {
            let mut b = mr.lock();
            b.range_mut(off, data.len())
                .ok_or(MemError::InvalidKey)?
                .copy_from_slice(data);
            Ok(())
        })
    }

    fn check(
        &mut self,
        key: u32,
        va: u64,
        len: u64,
        kind: AccessKind,
    ) -> core::result::Result<(), MemError> {
        self.with_region(key, va, len, kind, |_, _| Ok(()))
    }

    /// Executes `op` on the 8 bytes at `va` with the region's lock held across the read and the
    /// write, so that no local access or other QP's atomic can interleave (IBTA vol. 1 §9.4.5:
    /// atomicity among atomics of the same HCA). Needs REMOTE_ATOMIC; returns the old value.
    fn atomic(&mut self, rkey: u32, va: u64, op: AtomicOp) -> core::result::Result<u64, MemError> {
        self.with_region(rkey, va, 8, AccessKind::RemoteAtomic, |mr, off| {
            let mut buf = mr.lock();
            let cell = buf.range_mut(off, 8).ok_or(MemError::InvalidKey)?;
            let mut b = [0u8; 8];
            b.copy_from_slice(cell);
            let orig = u64::from_ne_bytes(b);
            if let Some(new) = op.apply(orig) {
                cell.copy_from_slice(&new.to_ne_bytes());
            }
            Ok(orig)
        })
    }
}

#[cfg(test)]
mod test {
    use super::*;

    /// Registers `len` bytes at `addr` on `pd` (deregistered when the region drops).
    fn reg(pd: &Arc<PdInner>, addr: u64, len: usize, access: AccessFlags) -> MemoryRegion {
        insert(
            vec![pd.clone()],
            Backing::Owned(vec![0; len].into_boxed_slice()),
            addr,
            len,
            access,
        )
    }

    #[test]
    fn last_mr_is_never_stale_and_checks_every_access() {
        let pd = Arc::new(PdInner::default());
        let mut c = LastMr::default();
        let rw = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let mr_a = reg(&pd, 0x1000, 4096, rw);
        let mr_b = reg(&pd, 0x9000, 512, AccessFlags::NONE);
        let (a, b) = (mr_a.rkey(), mr_b.rkey());
        let read = AccessKind::LocalRead;
        let at = |r: core::result::Result<(Arc<MrInner>, usize), MemError>| {
            r.map(|(mr, off)| (mr.rkey, off))
        };
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(a, 0x1010, 16, read)),
            Ok((a, 0x10))
        );
        // Cached: the checks still run on the cached region.
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(a, 0x1ff0, 16, read)),
            Ok((a, 0xff0))
        );
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(a, 0x1ff1, 16, read)),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(a, 0xff0, 16, read)),
            Err(MemError::OutOfBounds)
        );
        // Another key is not the cached region.
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(b, 0x9000, 8, read)),
            Ok((b, 0))
        );
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(b, 0x9000, 8, AccessKind::RemoteRead)),
            Err(MemError::AccessDenied)
        );
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(a, 0x1000, 8, AccessKind::RemoteWrite)),
            Ok((a, 0))
        );
        // Deregistered while cached: the cache must not keep resolving it.
        drop(mr_a);
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(a, 0x1000, 8, read)),
            Err(MemError::InvalidKey)
        );
        // A cached region, then another registration and its deregistration: still right.
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(b, 0x9000, 8, read)),
            Ok((b, 0))
        );
        let mr_d = reg(&pd, 0x20000, 64, rw);
        drop(mr_b);
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(b, 0x9000, 8, read)),
            Err(MemError::InvalidKey)
        );
        let d = mr_d.rkey();
        assert_eq!(
            at(PdMemory::cached(&pd, &mut c).resolve(d, 0x20000, 64, read)),
            Ok((d, 0))
        );
    }

    /// Reads and writes through a cache reach the region's bytes, check access on every call
    /// and stop at once when the region is deregistered.
    #[test]
    fn cached_reads_and_writes_follow_the_table() {
        let pd = Arc::new(PdInner::default());
        let mut c = LastMr::default();
        let mr = reg(
            &pd,
            0x4000,
            64,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
        );
        let key = mr.rkey();
        let mut mem = PdMemory::cached(&pd, &mut c);
        assert_eq!(
            mem.write(key, 0x4008, b"rdmesh!!", AccessKind::RemoteWrite),
            Ok(())
        );
        let mut out = [0u8; 8];
        assert_eq!(
            mem.read(key, 0x4008, &mut out, AccessKind::LocalRead),
            Ok(())
        );
        assert_eq!(&out, b"rdmesh!!");
        assert_eq!(
            mem.read(key, 0x4008, &mut out, AccessKind::RemoteRead),
            Err(MemError::AccessDenied)
        );
        assert_eq!(
            mem.write(key, 0x403c, b"12345678", AccessKind::RemoteWrite),
            Err(MemError::OutOfBounds)
        );
        drop(mr);
        assert_eq!(
            mem.write(key, 0x4008, b"rdmesh!!", AccessKind::RemoteWrite),
            Err(MemError::InvalidKey)
        );
    }
}
