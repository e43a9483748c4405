//! [`VfioDma`]: the real [`DmaAllocator`]. DMA memory is mapped in a few large blocks
//! ([`DmaBlock`], 2 MiB by default — the IOMMU type1 driver allows only about 64K mappings per
//! container, `dma_entry_limit`) and handed out as runs of 4 KiB pages ([`PageMap`]). Freed
//! pages return to their block; blocks stay mapped until the allocator and every buffer are
//! dropped (rdma-core `mlx5_vfio.c` does the same with its IOVA allocator and 2 MiB blocks).

use std::sync::{Arc, Mutex};

use crate::seam::{DmaAllocator, DmaBuffer, DmaError};

use super::container::Container;
use super::dma_block::{DmaBlock, HUGE_2M};
use super::error::{Result, SysError};
use super::iova::IovaSpace;
use super::page_alloc::{PageMap, PAGE};

/// How [`VfioDma`] maps memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VfioDmaConfig {
    /// Size of each block mapped, bytes (a multiple of 4096; 2 MiB by default). A larger
    /// allocation gets a block of its own, rounded up to this size.
    pub block_size: usize,
    /// IOVAs stay below this address (exclusive): the device's DMA mask, e.g. `1 << 28` for
    /// QEMU's edu; `u64::MAX` for none.
    pub iova_limit: u64,
    /// Try 2 MiB hugepages first.
    pub hugepages: bool,
}

impl Default for VfioDmaConfig {
    fn default() -> Self {
        VfioDmaConfig {
            block_size: HUGE_2M,
            iova_limit: u64::MAX,
            hugepages: true,
        }
    }
}

struct Pool {
    container: Arc<Container>,
    space: IovaSpace,
    cfg: VfioDmaConfig,
    blocks: Vec<(Arc<DmaBlock>, PageMap)>,
}

impl Pool {
    fn new_block(&mut self, len: usize) -> Result<DmaBlock> {
        let len = len.div_ceil(self.cfg.block_size) * self.cfg.block_size;
        let align = if len % HUGE_2M == 0 { HUGE_2M } else { PAGE } as u64;
        let iova = self
            .space
            .take(len as u64, align)
            .ok_or_else(|| SysError::IommuInfo {
                reason: format!(
                    "no IOVA space left for {len} bytes below {:#x} (high water {:#x})",
                    self.cfg.iova_limit,
                    self.space.high_water()
                ),
            })?;
        DmaBlock::new(self.container.clone(), iova, len, self.cfg.hugepages)
    }
}

/// The VFIO DMA allocator. Cheap to share (`Arc` inside); `Send + Sync`.
#[derive(Clone)]
pub struct VfioDma {
    pool: Arc<Mutex<Pool>>,
}

impl std::fmt::Debug for VfioDma {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioDma")
            .field("blocks", &self.blocks())
            .finish()
    }
}

impl VfioDma {
    /// An allocator over `container`'s IOMMU (a device's group must have joined it: the IOVA
    /// ranges are read with `VFIO_IOMMU_GET_INFO`).
    ///
    /// Errors: [`SysError::Io`] / [`SysError::IommuInfo`] from the query, or an IOMMU whose
    /// smallest page is larger than 4 KiB.
    pub fn new(container: Arc<Container>, cfg: VfioDmaConfig) -> Result<VfioDma> {
        assert!(
            cfg.block_size > 0 && cfg.block_size % PAGE == 0,
            "block size {}",
            cfg.block_size
        );
        let info = container.iommu_info()?;
        if info.min_page_size() > PAGE as u64 {
            return Err(SysError::IommuInfo {
                reason: format!(
                    "the IOMMU's smallest page is {} bytes; 4 KiB pages are needed (iova_pgsizes {:#x})",
                    info.min_page_size(),
                    info.iova_pgsizes
                ),
            });
        }
        tracing::debug!(?info, "IOMMU");
        Ok(VfioDma {
            pool: Arc::new(Mutex::new(Pool {
                space: IovaSpace::new(info.ranges, cfg.iova_limit),
                container,
                cfg,
                blocks: Vec::new(),
            })),
        })
    }

    /// `(iova, len, hugepages)` of every block mapped so far.
    pub fn blocks(&self) -> Vec<(u64, usize, bool)> {
        self.lock()
            .blocks
            .iter()
            .map(|(b, _)| (b.iova(), b.len(), b.hugepages()))
            .collect()
    }

    /// Maps a block of at least `len` bytes for the caller alone (not shared with
    /// [`alloc`](DmaAllocator::alloc)), at an IOVA no other block uses.
    ///
    /// Errors: as [`DmaBlock::new`], or no IOVA space left.
    pub fn map_block(&self, len: usize) -> Result<DmaBlock> {
        self.lock().new_block(len)
    }

    /// The first IOVA above every block mapped so far.
    pub fn iova_high_water(&self) -> u64 {
        self.lock().space.high_water()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl DmaAllocator for VfioDma {
    fn alloc(&self, len: usize, align: usize) -> std::result::Result<Box<dyn DmaBuffer>, DmaError> {
        let bad = |reason: String| DmaError::Alloc { len, reason };
        if len == 0 {
            return Err(bad("zero-length DMA buffer".into()));
        }
        if !align.is_power_of_two() || align > HUGE_2M {
            return Err(bad(format!(
                "alignment {align} is not a power of two up to 2 MiB"
            )));
        }
        let pages = len.div_ceil(PAGE);
        let align_pages = align.div_ceil(PAGE).max(1);
        let mut pool = self.lock();
        let found = pool.blocks.iter_mut().enumerate().find_map(|(i, (b, m))| {
            // The block's IOVA is 2 MiB or 4 KiB aligned: page alignment inside it suffices
            // when the block's own alignment covers `align`.
            if b.iova() % align as u64 != 0 {
                return None;
            }
            m.alloc(pages, align_pages).map(|first| (i, first))
        });
        let (index, first) = match found {
            Some(f) => f,
            None => {
                let block = pool
                    .new_block(pages * PAGE)
                    .map_err(|e| bad(e.to_string()))?;
                let mut map = PageMap::new(block.len() / PAGE);
                let first = map
                    .alloc(pages, align_pages)
                    .ok_or_else(|| bad("fresh block too small".into()))?;
                pool.blocks.push((Arc::new(block), map));
                (pool.blocks.len() - 1, first)
            }
        };
        let block = pool.blocks[index].0.clone();
        drop(pool);
        block.zero(first * PAGE, pages * PAGE)?;
        Ok(Box::new(VfioDmaBuffer {
            block,
            first,
            pages,
            pool: self.pool.clone(),
        }))
    }
}

/// A run of pages of one block. Returns its pages on drop.
pub struct VfioDmaBuffer {
    block: Arc<DmaBlock>,
    first: usize,
    pages: usize,
    pool: Arc<Mutex<Pool>>,
}

impl std::fmt::Debug for VfioDmaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioDmaBuffer")
            .field("iova", &format_args!("{:#x}", self.iova()))
            .field("len", &self.len())
            .finish()
    }
}

impl DmaBuffer for VfioDmaBuffer {
    fn iova(&self) -> u64 {
        self.block.iova() + (self.first * PAGE) as u64
    }
    fn len(&self) -> usize {
        self.pages * PAGE
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> std::result::Result<(), DmaError> {
        self.check(offset, out.len())?;
        self.block.read(self.first * PAGE + offset, out)
    }
    fn write(&self, offset: usize, data: &[u8]) -> std::result::Result<(), DmaError> {
        self.check(offset, data.len())?;
        self.block.write(self.first * PAGE + offset, data)
    }
}

impl VfioDmaBuffer {
    fn check(&self, offset: usize, len: usize) -> std::result::Result<(), DmaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(()),
            _ => Err(DmaError::OutOfBounds {
                offset,
                len,
                size: self.len(),
            }),
        }
    }
}

impl Drop for VfioDmaBuffer {
    fn drop(&mut self) {
        let mut pool = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, map)) = pool
            .blocks
            .iter_mut()
            .find(|(b, _)| Arc::ptr_eq(b, &self.block))
        {
            map.free(self.first, self.pages);
        }
    }
}
