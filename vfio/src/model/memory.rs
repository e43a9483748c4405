//! The model's DMA memory: an IOVA space of mapped buffers, the [`DmaAllocator`] the driver
//! uses, and the device-side `dma_read` / `dma_write` that resolve an IOVA the way an IOMMU
//! does (an unmapped address is a fault, never a panic).
//!
//! Each allocation gets its own IOVA range, starting at 0x1_0000_0000 and separated by an
//! unmapped 4 KiB guard page, so a device access that runs past a buffer faults like a DMA
//! past the end of an IOMMU mapping would. Dropping a [`ModelDmaBuffer`] unmaps it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};

use crate::seam::{DmaAllocator, DmaBuffer, DmaError};

/// First IOVA handed out (above 4 GiB, so 32-bit truncation bugs fault).
pub const IOVA_BASE: u64 = 0x1_0000_0000;
/// Size of the unmapped guard after each allocation, bytes.
pub const GUARD_LEN: u64 = 4096;
/// Page size of the model's IOMMU, bytes.
pub const PAGE_SIZE: usize = 4096;

/// A device access to an IOVA that no mapping covers (the model's IOMMU fault).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("DMA {} of {len} bytes at IOVA {iova:#x} hits no mapped buffer (IOMMU fault): check the address the driver gave the device (PAS, dbr_addr, mailbox pointer, MKEY range)", if *.write { "write" } else { "read" })]
pub struct DmaFault {
    /// First byte accessed.
    pub iova: u64,
    /// Bytes accessed.
    pub len: usize,
    /// `true` for a device write.
    pub write: bool,
}

#[derive(Debug)]
struct Region {
    iova: u64,
    data: Mutex<Vec<u8>>,
}

#[derive(Debug, Default)]
struct SpaceInner {
    next: u64,
    regions: BTreeMap<u64, Arc<Region>>,
}

/// One device's IOVA space (one IOMMU domain).
#[derive(Debug)]
pub struct DmaSpace {
    inner: Mutex<SpaceInner>,
}

impl Default for DmaSpace {
    fn default() -> Self {
        DmaSpace {
            inner: Mutex::new(SpaceInner {
                next: IOVA_BASE,
                regions: BTreeMap::new(),
            }),
        }
    }
}

impl DmaSpace {
    fn lock(&self) -> std::sync::MutexGuard<'_, SpaceInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn find(&self, iova: u64, len: usize, write: bool) -> Result<(Arc<Region>, usize), DmaFault> {
        let fault = DmaFault { iova, len, write };
        let inner = self.lock();
        let (_, r) = inner.regions.range(..=iova).next_back().ok_or(fault)?;
        let off = (iova - r.iova) as usize;
        let size = r.data.lock().unwrap_or_else(|p| p.into_inner()).len();
        if off.checked_add(len).map_or(true, |end| end > size) {
            return Err(fault);
        }
        Ok((r.clone(), off))
    }

    /// Device-side read of `out.len()` bytes at `iova`.
    ///
    /// Errors: [`DmaFault`] when the range is not inside one mapped buffer.
    pub fn dma_read(&self, iova: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        let (r, off) = self.find(iova, out.len(), false)?;
        let d = r.data.lock().unwrap_or_else(|p| p.into_inner());
        out.copy_from_slice(&d[off..off + out.len()]);
        Ok(())
    }

    /// Device-side write of `data` at `iova`.
    ///
    /// Errors: [`DmaFault`] when the range is not inside one mapped buffer.
    pub fn dma_write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let (r, off) = self.find(iova, data.len(), true)?;
        let mut d = r.data.lock().unwrap_or_else(|p| p.into_inner());
        d[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Whether `len` bytes at `iova` are mapped (inside one buffer).
    pub fn is_mapped(&self, iova: u64, len: usize) -> bool {
        self.find(iova, len, false).is_ok()
    }

    /// Bytes currently mapped.
    pub fn mapped_bytes(&self) -> usize {
        self.lock()
            .regions
            .values()
            .map(|r| r.data.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    fn map(self: &Arc<Self>, len: usize, align: usize) -> Result<ModelDmaBuffer, DmaError> {
        let pages = len.div_ceil(PAGE_SIZE).max(1);
        let size = pages * PAGE_SIZE;
        if !align.is_power_of_two() || align > 2 << 20 {
            return Err(DmaError::Alloc {
                len,
                reason: format!("alignment {align} is not a power of two up to 2 MiB"),
            });
        }
        let align = align.max(PAGE_SIZE) as u64;
        let mut inner = self.lock();
        let iova = inner.next.div_ceil(align) * align;
        inner.next = iova + size as u64 + GUARD_LEN;
        let region = Arc::new(Region {
            iova,
            data: Mutex::new(vec![0; size]),
        });
        inner.regions.insert(iova, region.clone());
        Ok(ModelDmaBuffer {
            region,
            space: Arc::downgrade(self),
        })
    }
}

/// A buffer of model DMA memory (zeroed, 4 KiB multiple); unmapped on drop.
#[derive(Debug)]
pub struct ModelDmaBuffer {
    region: Arc<Region>,
    space: Weak<DmaSpace>,
}

impl DmaBuffer for ModelDmaBuffer {
    fn iova(&self) -> u64 {
        self.region.iova
    }
    fn len(&self) -> usize {
        self.region
            .data
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), DmaError> {
        let d = self.region.data.lock().unwrap_or_else(|p| p.into_inner());
        let end = offset.checked_add(out.len()).filter(|e| *e <= d.len());
        let Some(end) = end else {
            return Err(DmaError::OutOfBounds {
                offset,
                len: out.len(),
                size: d.len(),
            });
        };
        out.copy_from_slice(&d[offset..end]);
        Ok(())
    }
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), DmaError> {
        let mut d = self.region.data.lock().unwrap_or_else(|p| p.into_inner());
        let end = offset.checked_add(data.len()).filter(|e| *e <= d.len());
        let Some(end) = end else {
            return Err(DmaError::OutOfBounds {
                offset,
                len: data.len(),
                size: d.len(),
            });
        };
        d[offset..end].copy_from_slice(data);
        Ok(())
    }
    /// The bytes themselves, under the buffer's lock: the modeled device's DMA to this
    /// buffer waits until `f` returns (as the soft provider's region lock does).
    fn with_bytes(
        &self,
        offset: usize,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), DmaError> {
        let mut d = self.region.data.lock().unwrap_or_else(|p| p.into_inner());
        let end = offset.checked_add(len).filter(|e| *e <= d.len());
        let Some(end) = end else {
            return Err(DmaError::OutOfBounds {
                offset,
                len,
                size: d.len(),
            });
        };
        f(&mut d[offset..end]);
        Ok(())
    }
}

impl Drop for ModelDmaBuffer {
    fn drop(&mut self) {
        if let Some(space) = self.space.upgrade() {
            space.lock().regions.remove(&self.region.iova);
        }
    }
}

/// The [`DmaAllocator`] of one model device: buffers the device reaches by IOVA.
#[derive(Debug, Clone)]
pub struct ModelDmaAllocator {
    pub(crate) space: Arc<DmaSpace>,
}

impl DmaAllocator for ModelDmaAllocator {
    fn alloc(&self, len: usize, align: usize) -> Result<Box<dyn DmaBuffer>, DmaError> {
        Ok(Box::new(self.space.map(len, align)?))
    }
}

/// A queue buffer the device reaches through a page list (PAS): `pas[i]` is the IOVA of page
/// `i`, pages are `1 << page_shift` bytes (mlx5 `log_page_size + 12`).
#[derive(Debug, Clone, Default)]
pub struct PagedBuf {
    /// Page IOVAs.
    pub pas: Vec<u64>,
    /// log2 of the page size in bytes.
    pub page_shift: u32,
}

impl PagedBuf {
    /// Total bytes the page list covers.
    pub fn len(&self) -> usize {
        self.pas.len() << self.page_shift
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.pas.is_empty()
    }

    fn each(
        &self,
        offset: usize,
        len: usize,
        write: bool,
        mut f: impl FnMut(u64, usize, usize) -> Result<(), DmaFault>,
    ) -> Result<(), DmaFault> {
        let psize = 1usize << self.page_shift;
        let mut done = 0;
        while done < len {
            let off = offset + done;
            let Some(&page) = self.pas.get(off >> self.page_shift) else {
                return Err(DmaFault {
                    iova: u64::MAX,
                    len: len - done,
                    write,
                });
            };
            let within = off & (psize - 1);
            let n = (psize - within).min(len - done);
            f(page + within as u64, done, n)?;
            done += n;
        }
        Ok(())
    }

    /// Reads `out.len()` bytes at byte `offset` of the buffer.
    ///
    /// Errors: [`DmaFault`] past the page list or on an unmapped page.
    pub fn read(&self, space: &DmaSpace, offset: usize, out: &mut [u8]) -> Result<(), DmaFault> {
        let len = out.len();
        self.each(offset, len, false, |iova, at, n| {
            space.dma_read(iova, &mut out[at..at + n])
        })
    }

    /// Writes `data` at byte `offset` of the buffer.
    ///
    /// Errors: [`DmaFault`] past the page list or on an unmapped page.
    pub fn write(&self, space: &DmaSpace, offset: usize, data: &[u8]) -> Result<(), DmaFault> {
        self.each(offset, data.len(), true, |iova, at, n| {
            space.dma_write(iova, &data[at..at + n])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iova_resolution_and_faults() {
        let space = Arc::new(DmaSpace::default());
        let alloc = ModelDmaAllocator {
            space: space.clone(),
        };
        let a = alloc.alloc(100, 4096).unwrap();
        let b = alloc.alloc(8192, 8192).unwrap();
        assert_eq!(a.len(), 4096);
        assert_eq!(b.iova() % 8192, 0);
        a.write(10, b"hello").unwrap();
        let mut out = [0u8; 5];
        space.dma_read(a.iova() + 10, &mut out).unwrap();
        assert_eq!(&out, b"hello");
        space.dma_write(b.iova() + 8190, &[1, 2]).unwrap();
        let mut two = [0u8; 2];
        b.read(8190, &mut two).unwrap();
        assert_eq!(two, [1, 2]);
        // Past the end of `a`: the guard page faults.
        let e = space.dma_read(a.iova() + 4095, &mut out).unwrap_err();
        assert_eq!(e.iova, a.iova() + 4095);
        assert!(e.to_string().contains("IOMMU fault"));
        assert!(a.read(4094, &mut out).is_err());
        let iova = a.iova();
        drop(a);
        assert!(!space.is_mapped(iova, 1));
        assert_eq!(space.mapped_bytes(), 8192);
    }

    #[test]
    fn paged_buffer_spans_pages() {
        let space = Arc::new(DmaSpace::default());
        let alloc = ModelDmaAllocator {
            space: space.clone(),
        };
        let p0 = alloc.alloc(4096, 4096).unwrap();
        let p1 = alloc.alloc(4096, 4096).unwrap();
        let buf = PagedBuf {
            pas: vec![p0.iova(), p1.iova()],
            page_shift: 12,
        };
        buf.write(&space, 4090, &[7u8; 12]).unwrap();
        let mut a = [0u8; 6];
        p0.read(4090, &mut a).unwrap();
        let mut b = [0u8; 6];
        p1.read(0, &mut b).unwrap();
        assert_eq!((a, b), ([7; 6], [7; 6]));
        assert!(buf.read(&space, 8190, &mut [0u8; 4]).is_err());
    }
}
