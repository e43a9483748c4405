//! The IOVA space a container's IOMMU accepts, and the allocator that places DMA blocks in it.
//!
//! `VFIO_IOMMU_GET_INFO` (Linux `include/uapi/linux/vfio.h`) returns `struct
//! vfio_iommu_type1_info` followed, when `flags & VFIO_IOMMU_INFO_CAPS`, by a chain of
//! capabilities starting at `cap_offset` (bytes from the start of the buffer). Each starts with
//! `struct vfio_info_cap_header { u16 id; u16 version; u32 next; }` (`next` = 0 ends the chain).
//! The IOVA-range capability (id `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE` = 1) is
//! `{ header; u32 nr_iovas; u32 reserved; struct vfio_iova_range { u64 start; u64 end; }[] }`,
//! `end` inclusive, all in host byte order. Kernels before 5.4 have no such capability: then
//! the legacy x86 ranges rdma-core's `mlx5_vfio.c` uses apply (0x10000–0xFEDFFFFF and
//! 0xFEF00000–2^39−1, avoiding the MSI window at 0xFEE00000).

/// One usable IOVA range, both ends inclusive (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IovaRange {
    /// First usable address.
    pub start: u64,
    /// Last usable address (inclusive).
    pub end: u64,
}

/// Capability id of the IOVA-range capability (`VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`).
pub const CAP_IOVA_RANGE: u16 = 1;

/// The ranges to assume when the kernel reports none (rdma-core `mlx5_vfio.c`).
pub fn legacy_ranges() -> Vec<IovaRange> {
    vec![
        IovaRange {
            start: 0x1_0000,
            end: 0xFEDF_FFFF,
        },
        IovaRange {
            start: 0xFEF0_0000,
            end: (1 << 39) - 1,
        },
    ]
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Finds the IOVA-range capability in a `VFIO_IOMMU_GET_INFO` buffer (`info`, the whole
/// `argsz` bytes) whose chain starts at `cap_offset`.
///
/// Returns `Ok(None)` when the chain has no such capability, `Err(reason)` when the chain is
/// malformed (an offset outside the buffer, a loop, an empty or inverted range).
pub fn parse_iova_ranges(info: &[u8], cap_offset: u32) -> Result<Option<Vec<IovaRange>>, String> {
    let mut at = cap_offset as usize;
    let mut hops = 0;
    while at != 0 {
        hops += 1;
        if hops > 64 {
            return Err("capability chain loops".into());
        }
        let id = u16_at(info, at).ok_or_else(|| format!("capability at {at} past the buffer"))?;
        let next = u32_at(info, at + 4).ok_or_else(|| format!("capability at {at} truncated"))?;
        if id == CAP_IOVA_RANGE {
            let n = u32_at(info, at + 8).ok_or("IOVA-range capability truncated")? as usize;
            let mut v = Vec::with_capacity(n.min(64));
            for i in 0..n {
                let o = at + 16 + i * 16;
                let (start, end) = u64_at(info, o)
                    .zip(u64_at(info, o + 8))
                    .ok_or_else(|| format!("IOVA range {i} of {n} past the buffer"))?;
                if end < start {
                    return Err(format!("IOVA range {i} inverted: {start:#x}..={end:#x}"));
                }
                v.push(IovaRange { start, end });
            }
            if v.is_empty() {
                return Err("IOVA-range capability lists no range".into());
            }
            return Ok(Some(v));
        }
        at = next as usize;
    }
    Ok(None)
}

/// A bump allocator of IOVA blocks over the usable ranges, below an optional limit (a device's
/// DMA mask, e.g. 2^28 for QEMU's edu). Blocks are never returned: DMA blocks live as long as
/// the allocator that maps them, and the IOMMU type1 driver allows only ~64K mappings anyway.
#[derive(Debug, Clone)]
pub struct IovaSpace {
    ranges: Vec<IovaRange>,
    next: u64,
    limit: u64,
}

/// Lowest IOVA handed out (keeps address 0 and the first MiB unused, so a zeroed pointer never
/// names mapped memory).
pub const IOVA_FLOOR: u64 = 0x10_0000;

impl IovaSpace {
    /// The space of `ranges`, addresses below `limit` (exclusive; `u64::MAX` for none).
    pub fn new(ranges: Vec<IovaRange>, limit: u64) -> IovaSpace {
        IovaSpace {
            ranges,
            next: IOVA_FLOOR,
            limit,
        }
    }

    /// Takes `len` bytes aligned to `align` (a power of two); `None` when no range has room.
    pub fn take(&mut self, len: u64, align: u64) -> Option<u64> {
        debug_assert!(align.is_power_of_two());
        if len == 0 {
            return None;
        }
        for r in &self.ranges {
            let from = self.next.max(r.start).checked_add(align - 1)? & !(align - 1);
            let last = from.checked_add(len - 1)?;
            if last <= r.end && last < self.limit {
                self.next = last + 1;
                return Some(from);
            }
        }
        None
    }

    /// The first address not yet handed out (every block taken so far lies below it).
    pub fn high_water(&self) -> u64 {
        self.next
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info_with_ranges(ranges: &[(u64, u64)], extra_cap_first: bool) -> (Vec<u8>, u32) {
        // header (24 bytes), then optionally a foreign capability, then the range capability.
        let mut b = vec![0u8; 24];
        let mut first = 24u32;
        if extra_cap_first {
            // id 2 (migration), next -> after this 16-byte capability
            b.extend_from_slice(&2u16.to_ne_bytes());
            b.extend_from_slice(&1u16.to_ne_bytes());
            b.extend_from_slice(&(24u32 + 16).to_ne_bytes());
            b.extend_from_slice(&[0u8; 8]);
        } else {
            first = 24;
        }
        b.extend_from_slice(&CAP_IOVA_RANGE.to_ne_bytes());
        b.extend_from_slice(&1u16.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(ranges.len() as u32).to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        for (s, e) in ranges {
            b.extend_from_slice(&s.to_ne_bytes());
            b.extend_from_slice(&e.to_ne_bytes());
        }
        (b, first)
    }

    #[test]
    fn ranges_are_found_behind_other_capabilities() {
        let want = [(0, 0xfedf_ffff), (0xfef0_0000, (1 << 39) - 1)];
        for extra in [false, true] {
            let (b, off) = info_with_ranges(&want, extra);
            let got = parse_iova_ranges(&b, off).unwrap().unwrap();
            assert_eq!(
                got,
                want.iter()
                    .map(|&(start, end)| IovaRange { start, end })
                    .collect::<Vec<_>>()
            );
        }
        assert_eq!(parse_iova_ranges(&[0u8; 24], 0).unwrap(), None);
    }

    #[test]
    fn malformed_chains_are_errors_not_panics() {
        let (b, off) = info_with_ranges(&[(0x2000, 0x1000)], false);
        assert!(parse_iova_ranges(&b, off).unwrap_err().contains("inverted"));
        let (b, off) = info_with_ranges(&[(0, 0xffff)], false);
        assert!(parse_iova_ranges(&b[..b.len() - 4], off).is_err());
        assert!(parse_iova_ranges(&b, 4096).is_err());
        // a capability pointing at itself
        let mut b = vec![0u8; 32];
        b[24..26].copy_from_slice(&7u16.to_ne_bytes());
        b[28..32].copy_from_slice(&24u32.to_ne_bytes());
        assert!(parse_iova_ranges(&b, 24).unwrap_err().contains("loops"));
        let (b, off) = info_with_ranges(&[], false);
        assert!(parse_iova_ranges(&b, off).is_err());
    }

    #[test]
    fn blocks_are_aligned_inside_ranges_and_below_the_limit() {
        const M2: u64 = 2 << 20;
        let mut s = IovaSpace::new(
            vec![
                IovaRange {
                    start: 0,
                    end: 0x5f_ffff,
                },
                IovaRange {
                    start: 0x100_0000,
                    end: 0x1ff_ffff,
                },
            ],
            1 << 28,
        );
        assert_eq!(s.take(M2, M2), Some(0x20_0000)); // floor 1 MiB, aligned up
        assert_eq!(s.take(M2, M2), Some(0x40_0000));
        // does not fit below 0x5f_ffff any more: jumps to the second range
        assert_eq!(s.take(M2, M2), Some(0x100_0000));
        assert_eq!(s.take(4096, 4096), Some(0x120_0000));
        assert_eq!(s.high_water(), 0x120_1000);
        assert_eq!(s.take(16 << 20, M2), None);
        let mut low = IovaSpace::new(legacy_ranges(), 1 << 28);
        assert_eq!(low.take(1 << 27, M2), Some(0x20_0000));
        assert_eq!(low.take(1 << 27, M2), None, "limit 2^28 respected");
        assert_eq!(low.take(0, 4096), None);
    }
}
