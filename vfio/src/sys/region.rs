//! A device region as `VFIO_DEVICE_GET_REGION_INFO` describes it: where it lies in the device
//! fd, its size, whether it may be mmapped, and its sparse-mmap areas (the parts that may be
//! mmapped when the rest, e.g. an MSI-X table, must go through read/write).

use vfio_bindings::bindings::vfio::{
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_ioctls::VfioRegionInfoCap;

/// VFIO region index of BAR `n` is `n` (`VFIO_PCI_BAR0_REGION_INDEX` = 0 … BAR5 = 5).
pub const BAR0: u32 = 0;
/// VFIO region index of PCI config space (`VFIO_PCI_CONFIG_REGION_INDEX`).
pub const CONFIG: u32 = 7;

/// One mmappable part of a region: `offset` and `size` in bytes from the region start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmapArea {
    /// Offset from the region start, bytes.
    pub offset: u64,
    /// Size, bytes.
    pub size: u64,
}

/// A device region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionInfo {
    /// VFIO region index.
    pub index: u32,
    /// Size in bytes (0: the region does not exist, e.g. an unimplemented BAR).
    pub size: u64,
    /// Offset of the region in the device fd (for pread/pwrite and mmap), bytes.
    pub offset: u64,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// The areas that may be mmapped: the sparse-mmap capability's list when present, else the
    /// whole region when `FLAG_MMAP` is set, else none.
    pub mmap_areas: Vec<MmapArea>,
    /// Whether the areas came from a sparse-mmap capability.
    pub sparse: bool,
}

impl RegionInfo {
    /// Builds the description from the raw fields and the capability list of `vfio-ioctls`.
    pub fn new(index: u32, size: u64, offset: u64, flags: u32, caps: &[VfioRegionInfoCap]) -> Self {
        let sparse: Option<Vec<MmapArea>> = caps.iter().find_map(|c| match c {
            VfioRegionInfoCap::SparseMmap(s) => Some(
                s.areas
                    .iter()
                    .filter(|a| a.size > 0)
                    .map(|a| MmapArea {
                        offset: a.offset,
                        size: a.size,
                    })
                    .collect(),
            ),
            _ => None,
        });
        let mmap = flags & VFIO_REGION_INFO_FLAG_MMAP != 0;
        let (mmap_areas, sparse) = match (mmap, sparse) {
            (false, _) => (Vec::new(), false),
            (true, Some(a)) => (a, true),
            (true, None) if size > 0 => (vec![MmapArea { offset: 0, size }], false),
            (true, None) => (Vec::new(), false),
        };
        RegionInfo {
            index,
            size,
            offset,
            flags,
            mmap_areas,
            sparse,
        }
    }

    /// Whether the region can be read.
    pub fn readable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_READ != 0
    }

    /// Whether the region can be written.
    pub fn writable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_WRITE != 0
    }

    /// Whether byte range `offset..offset+len` lies inside one mmappable area.
    pub fn mapped(&self, offset: u64, len: u64) -> bool {
        self.mmap_areas.iter().any(|a| {
            offset >= a.offset
                && offset
                    .checked_add(len)
                    .is_some_and(|e| e <= a.offset + a.size)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vfio_ioctls::{VfioRegionInfoCapSparseMmap, VfioRegionSparseMmapArea};

    const RWM: u32 =
        VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE | VFIO_REGION_INFO_FLAG_MMAP;

    #[test]
    fn whole_region_without_sparse_capability() {
        let r = RegionInfo::new(0, 0x10_0000, 0, RWM, &[]);
        assert_eq!(
            r.mmap_areas,
            vec![MmapArea {
                offset: 0,
                size: 0x10_0000
            }]
        );
        assert!(r.mapped(0, 4) && r.mapped(0xf_fffc, 4) && !r.mapped(0xf_fffe, 4));
        assert!(r.readable() && r.writable() && !r.sparse);
    }

    #[test]
    fn sparse_areas_leave_a_hole() {
        // A 32 MiB BAR with the MSI-X table at 0x2000..0x3000 carved out.
        let caps = [VfioRegionInfoCap::SparseMmap(VfioRegionInfoCapSparseMmap {
            areas: vec![
                VfioRegionSparseMmapArea {
                    offset: 0,
                    size: 0x2000,
                },
                VfioRegionSparseMmapArea {
                    offset: 0x3000,
                    size: (32 << 20) - 0x3000,
                },
                VfioRegionSparseMmapArea { offset: 0, size: 0 },
            ],
        })];
        let r = RegionInfo::new(0, 32 << 20, 0x1_0000_0000, RWM, &caps);
        assert!(r.sparse);
        assert_eq!(r.mmap_areas.len(), 2);
        assert!(r.mapped(0x1ffc, 4));
        assert!(!r.mapped(0x2000, 4));
        assert!(!r.mapped(0x1ffc, 8), "straddles the hole");
        assert!(r.mapped(0x3000, 8));
    }

    #[test]
    fn no_mmap_flag_means_no_areas() {
        let r = RegionInfo::new(CONFIG, 256, 0x7_0000_0000, VFIO_REGION_INFO_FLAG_READ, &[]);
        assert!(r.mmap_areas.is_empty() && !r.writable());
        assert!(RegionInfo::new(2, 0, 0, RWM, &[]).mmap_areas.is_empty());
    }
}
