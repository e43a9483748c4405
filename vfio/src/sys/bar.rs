//! A PCI BAR mapped into this process (`mmap` of the VFIO device fd at the region's offset),
//! implementing [`seam::Mmio`](crate::seam::Mmio) with volatile accesses.
//!
//! vfio-pci maps BARs uncached (`pgprot_noncached` in `vfio_pci_core_mmap`): there is no
//! write-combining, so mlx5 BlueFlame is not usable through this mapping and the driver rings
//! with the 8-byte doorbell. Each access is exactly one load or store of its width.
//!
//! With a sparse-mmap capability only the listed areas are mapped (inside one reserved range
//! the size of the BAR, so offsets stay BAR offsets); an access to a hole is refused like an
//! access outside the BAR: reads return all ones, writes are dropped, both logged.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use super::device::VfioPciDevice;
use super::error::{Result, SysError};
use super::region::RegionInfo;
use crate::seam::Mmio;

/// A mapped BAR. Keeps the device open; unmapped on drop.
pub struct BarMmio {
    device: Arc<VfioPciDevice>,
    region: RegionInfo,
    base: *mut u8,
    reserved: usize,
}

// SAFETY: the mapping is device memory owned by this value; all accesses are single volatile
// loads/stores through raw pointers, which the device serializes; no references are made.
unsafe impl Send for BarMmio {}
// SAFETY: as above.
unsafe impl Sync for BarMmio {}

impl std::fmt::Debug for BarMmio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BarMmio")
            .field("bdf", &self.device.bdf().to_string())
            .field("region", &self.region)
            .finish()
    }
}

impl BarMmio {
    pub(crate) fn map(device: Arc<VfioPciDevice>, index: u32) -> Result<BarMmio> {
        let region = device.region(index);
        let bad = |reason: String| SysError::Region {
            bdf: device.bdf().to_string(),
            index,
            reason,
        };
        if index > 5 {
            return Err(bad("not a BAR (BARs are regions 0–5)".into()));
        }
        if region.size == 0 {
            return Err(bad("the BAR is not implemented (size 0)".into()));
        }
        if region.mmap_areas.is_empty() {
            return Err(bad(format!(
                "the BAR cannot be mmapped (flags {:#x}: no VFIO_REGION_INFO_FLAG_MMAP)",
                region.flags
            )));
        }
        let reserved = (region.size as usize).div_ceil(4096) * 4096;
        // SAFETY: reserve address space only (PROT_NONE, anonymous, kernel-chosen address).
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserved,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(SysError::Io {
                context: format!(
                    "reserving {reserved} bytes of address space for BAR{index} of {}",
                    device.bdf()
                ),
                source: std::io::Error::last_os_error(),
            });
        }
        let bar = BarMmio {
            device: device.clone(),
            region: region.clone(),
            base: base as *mut u8,
            reserved,
        };
        for a in &region.mmap_areas {
            if a.offset + a.size > region.size || a.offset % 4096 != 0 {
                return Err(bad(format!(
                    "sparse area {:#x}+{:#x} is not page-aligned inside the BAR",
                    a.offset, a.size
                )));
            }
            // SAFETY: MAP_FIXED over part of our own reservation (checked inside it above),
            // mapping the device fd at the region's offset as vfio-pci documents.
            let p = unsafe {
                libc::mmap(
                    bar.base.add(a.offset as usize) as *mut libc::c_void,
                    a.size as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    device.fd().as_raw_fd(),
                    (region.offset + a.offset) as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(SysError::Io {
                    context: format!(
                        "mmap of BAR{index} of {} (area {:#x}+{:#x}, fd offset {:#x})",
                        device.bdf(),
                        a.offset,
                        a.size,
                        region.offset + a.offset
                    ),
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        Ok(bar)
    }

    /// The region this BAR is.
    pub fn region(&self) -> &RegionInfo {
        &self.region
    }

    fn ok(&self, offset: usize, width: usize, what: &str) -> bool {
        let good = offset % width == 0 && self.region.mapped(offset as u64, width as u64);
        if !good {
            tracing::warn!(
                "{} BAR{}: {what} of {width} bytes at {offset:#x} refused (outside the mapped BAR or misaligned)",
                self.device.bdf(),
                self.region.index
            );
        }
        good
    }

    /// One 64-bit load at `offset` (8-byte aligned); all ones outside the BAR.
    pub fn read64(&self, offset: usize) -> u64 {
        if !self.ok(offset, 8, "read") {
            return u64::MAX;
        }
        // SAFETY: offset checked inside a mapped area and aligned; volatile device access.
        unsafe { core::ptr::read_volatile(self.base.add(offset) as *const u64) }
    }
}

impl Mmio for BarMmio {
    fn len(&self) -> usize {
        self.region.size as usize
    }

    fn read32(&self, offset: usize) -> u32 {
        if !self.ok(offset, 4, "read") {
            return u32::MAX;
        }
        // SAFETY: offset checked inside a mapped area and aligned; volatile device access.
        unsafe { core::ptr::read_volatile(self.base.add(offset) as *const u32) }
    }

    fn write32(&self, offset: usize, value: u32) {
        if self.ok(offset, 4, "write") {
            // SAFETY: offset checked inside a mapped area and aligned; volatile device access.
            unsafe { core::ptr::write_volatile(self.base.add(offset) as *mut u32, value) }
        }
    }

    fn write64(&self, offset: usize, value: u64) {
        if self.ok(offset, 8, "write") {
            // SAFETY: offset checked inside a mapped area and aligned; one 64-bit volatile store.
            unsafe { core::ptr::write_volatile(self.base.add(offset) as *mut u64, value) }
        }
    }
}

impl Drop for BarMmio {
    fn drop(&mut self) {
        // SAFETY: the reservation made in `map` (with the device mappings inside it); nothing
        // refers into it once this value is gone.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.reserved) };
    }
}
