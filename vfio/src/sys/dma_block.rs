//! One block of DMA memory: anonymous memory (2 MiB hugepages where the system has them,
//! normal pages otherwise), pre-faulted, and mapped for the device through
//! `VFIO_IOMMU_MAP_DMA`, which pins it.
//!
//! Pinning: `VFIO_IOMMU_MAP_DMA` pins every page (the kernel's type1 driver calls
//! `pin_user_pages` and charges them to RLIMIT_MEMLOCK), so the pages cannot move or be
//! swapped while the device may reach them. The block is not also `mlock`ed: the kernel would
//! charge the same pages to RLIMIT_MEMLOCK twice (`locked_vm` counts both), halving what an
//! unprivileged user can map.
//!
//! Only raw-pointer volatile accesses touch the memory ([`super::volatile`]); no Rust reference
//! into it is created, since the device writes it at any time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::seam::DmaError;

use super::container::Container;
use super::error::{Result, SysError};
use super::volatile;

/// 2 MiB, the hugepage size tried first.
pub const HUGE_2M: usize = 2 << 20;

/// A pinned, IOMMU-mapped block of memory. Unmapped from the IOMMU and freed on drop.
pub struct DmaBlock {
    container: Arc<Container>,
    vaddr: *mut u8,
    len: usize,
    iova: u64,
    hugepages: bool,
    mapped: AtomicBool,
}

// SAFETY: the block is plain memory owned by this value; every access goes through raw-pointer
// volatile copies with bounds checks, which are sound from any thread (callers synchronize the
// meaning of the bytes, as with device DMA).
unsafe impl Send for DmaBlock {}
// SAFETY: as above; no method hands out references into the memory.
unsafe impl Sync for DmaBlock {}

impl std::fmt::Debug for DmaBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaBlock")
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.len)
            .field("hugepages", &self.hugepages)
            .field("mapped", &self.mapped.load(Ordering::Relaxed))
            .finish()
    }
}

fn anon_map(len: usize, huge: bool) -> Option<*mut u8> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
    if huge {
        flags |= libc::MAP_HUGETLB | (21 << libc::MAP_HUGE_SHIFT);
    }
    // SAFETY: an anonymous private mapping at an address the kernel chooses; it aliases
    // nothing.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as *mut u8)
}

impl DmaBlock {
    /// Allocates `len` bytes (a multiple of 4096) and maps them for the device at `iova`.
    /// With `try_hugepages` and `len` a multiple of 2 MiB, 2 MiB hugepages are tried first
    /// (`MAP_HUGETLB`; needs `vm.nr_hugepages`), then normal pages.
    ///
    /// Errors: [`SysError::Io`] (no memory), [`SysError::Vfio`] (the IOMMU mapping: memlock
    /// limit, IOVA outside the ranges).
    pub fn new(
        container: Arc<Container>,
        iova: u64,
        len: usize,
        try_hugepages: bool,
    ) -> Result<DmaBlock> {
        assert!(
            len > 0 && len % 4096 == 0,
            "DMA block length {len} is not whole pages"
        );
        let huge = try_hugepages && len % HUGE_2M == 0;
        let (vaddr, hugepages) = match huge.then(|| anon_map(len, true)).flatten() {
            Some(p) => (p, true),
            None => match anon_map(len, false) {
                Some(p) => {
                    if try_hugepages {
                        // SAFETY: advice on our own fresh mapping; failure is harmless.
                        unsafe { libc::madvise(p as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
                    }
                    (p, false)
                }
                None => {
                    return Err(SysError::Io {
                        context: format!("allocating {len} bytes of DMA memory"),
                        source: std::io::Error::last_os_error(),
                    })
                }
            },
        };
        let block = DmaBlock {
            container,
            vaddr,
            len,
            iova,
            hugepages,
            mapped: AtomicBool::new(false),
        };
        // SAFETY: `vaddr..vaddr+len` is our own mapping, kept until Drop, which unmaps the IOMMU
        // mapping first; it is only accessed through volatile raw-pointer copies.
        unsafe { block.container.dma_map(iova, len, vaddr) }?;
        block.mapped.store(true, Ordering::Release);
        tracing::debug!(
            iova = format_args!("{iova:#x}"),
            len,
            hugepages,
            "DMA block mapped"
        );
        Ok(block)
    }

    /// I/O virtual address of byte 0.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty (never: blocks have at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether the block is backed by 2 MiB hugepages.
    pub fn hugepages(&self) -> bool {
        self.hugepages
    }

    /// Whether the IOMMU mapping is still in place.
    pub fn is_mapped(&self) -> bool {
        self.mapped.load(Ordering::Acquire)
    }

    /// Removes the IOMMU mapping now, keeping the memory readable by the CPU: the device can no
    /// longer reach it (a DMA to [`iova`](Self::iova) then faults in the IOMMU). Idempotent.
    ///
    /// Errors: [`SysError::Vfio`].
    pub fn unmap_iommu(&self) -> Result<()> {
        if self.mapped.swap(false, Ordering::AcqRel) {
            self.container.dma_unmap(self.iova, self.len)?;
        }
        Ok(())
    }

    fn check(&self, offset: usize, len: usize) -> std::result::Result<(), DmaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(DmaError::OutOfBounds {
                offset,
                len,
                size: self.len,
            }),
        }
    }

    /// Copies `out.len()` bytes from `offset` (volatile).
    ///
    /// Errors: [`DmaError::OutOfBounds`].
    pub fn read(&self, offset: usize, out: &mut [u8]) -> std::result::Result<(), DmaError> {
        self.check(offset, out.len())?;
        // SAFETY: bounds checked above; the mapping lives as long as `self`.
        unsafe { volatile::copy_from(self.vaddr.add(offset), out) };
        Ok(())
    }

    /// Copies `data` to `offset` (volatile).
    ///
    /// Errors: [`DmaError::OutOfBounds`].
    pub fn write(&self, offset: usize, data: &[u8]) -> std::result::Result<(), DmaError> {
        self.check(offset, data.len())?;
        // SAFETY: bounds checked above; the mapping lives as long as `self`.
        unsafe { volatile::copy_to(self.vaddr.add(offset), data) };
        Ok(())
    }

    /// Zeroes `len` bytes at `offset` (volatile).
    ///
    /// Errors: [`DmaError::OutOfBounds`].
    pub fn zero(&self, offset: usize, len: usize) -> std::result::Result<(), DmaError> {
        self.check(offset, len)?;
        // SAFETY: bounds checked above; the mapping lives as long as `self`.
        unsafe { volatile::zero(self.vaddr.add(offset), len) };
        Ok(())
    }
}

impl Drop for DmaBlock {
    fn drop(&mut self) {
        if let Err(e) = self.unmap_iommu() {
            // The pages stay pinned by the kernel until the container closes; freeing our
            // mapping is still safe for this process (the kernel holds its own page refs).
            tracing::error!("{e}");
        }
        // SAFETY: `vaddr..vaddr+len` is the mapping made in `new`, no longer IOMMU-mapped
        // (or kept alive by the kernel's pins) and never referenced elsewhere.
        unsafe { libc::munmap(self.vaddr as *mut libc::c_void, self.len) };
    }
}
