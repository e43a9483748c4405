//! The VFIO container: `/dev/vfio/vfio`, one IOMMU domain (type1 v2) that the device's group
//! joins, where DMA mappings live (Linux `Documentation/driver-api/vfio.rst`).

use std::path::Path;
use std::sync::Arc;

use vfio_bindings::bindings::vfio::{vfio_iommu_type1_info, VFIO_IOMMU_INFO_CAPS};
use vfio_ioctls::VfioContainer;
use vmm_sys_util::ioctl::ioctl_with_mut_ptr;
use vmm_sys_util::ioctl_io_nr;

use super::error::{Result, SysError};
use super::iova::{legacy_ranges, parse_iova_ranges, IovaRange};

ioctl_io_nr!(
    VFIO_IOMMU_GET_INFO,
    vfio_bindings::bindings::vfio::VFIO_TYPE as u32,
    vfio_bindings::bindings::vfio::VFIO_BASE + 12
);

/// The container device node.
pub const CONTAINER_PATH: &str = "/dev/vfio/vfio";

/// What to check when `/dev/vfio/vfio` is missing.
pub const NO_VFIO_HINT: &str = "load the vfio-pci module (modprobe vfio-pci) and turn the IOMMU on (VT-d/AMD-Vi in the firmware, intel_iommu=on or amd_iommu=on on the kernel command line)";

/// What the IOMMU of a container accepts (`VFIO_IOMMU_GET_INFO`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuInfo {
    /// Bitmap of supported IOMMU page sizes (bit n set: 2^n bytes).
    pub iova_pgsizes: u64,
    /// Usable IOVA ranges (from the IOVA-range capability, or the legacy x86 ranges).
    pub ranges: Vec<IovaRange>,
    /// Whether the ranges came from the kernel (`false`: legacy assumption).
    pub ranges_from_kernel: bool,
}

impl IommuInfo {
    /// The smallest IOMMU page size in bytes (4096 when the bitmap is empty).
    pub fn min_page_size(&self) -> u64 {
        if self.iova_pgsizes == 0 {
            4096
        } else {
            1 << self.iova_pgsizes.trailing_zeros()
        }
    }
}

/// An open VFIO container (type1 v2 IOMMU). Shared (`Arc`) by the device and every DMA block
/// mapped into it.
pub struct Container {
    inner: Arc<VfioContainer>,
}

impl std::fmt::Debug for Container {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Container")
            .field("path", &CONTAINER_PATH)
            .finish()
    }
}

impl Container {
    /// Opens `/dev/vfio/vfio` and checks the API version and the `VFIO_TYPE1v2_IOMMU`
    /// extension. The IOMMU type is set when the first device's group joins
    /// ([`super::device::VfioPciDevice::open`]).
    ///
    /// Errors: [`SysError::NodeMissing`] (no VFIO), [`SysError::PermissionDenied`],
    /// [`SysError::Vfio`] (API version or extension).
    pub fn open() -> Result<Arc<Container>> {
        // Our own open first, for an error that says what to check.
        check_node(Path::new(CONTAINER_PATH), NO_VFIO_HINT)?;
        let inner = VfioContainer::new(None).map_err(|source| SysError::Vfio {
            context: format!("{CONTAINER_PATH}: API version / VFIO_TYPE1v2_IOMMU check (is the vfio_iommu_type1 module loaded?)"),
            source,
        })?;
        Ok(Arc::new(Container {
            inner: Arc::new(inner),
        }))
    }

    /// The `vfio-ioctls` container (for [`vfio_ioctls::VfioDevice::new`]).
    pub(crate) fn vfio(&self) -> Arc<VfioContainer> {
        self.inner.clone()
    }

    /// Queries the IOMMU (valid once a group has joined): page sizes and usable IOVA ranges.
    ///
    /// Errors: [`SysError::Io`] (the ioctl), [`SysError::IommuInfo`] (a malformed capability
    /// chain).
    pub fn iommu_info(&self) -> Result<IommuInfo> {
        // First call with the bare struct learns the size the capabilities need (argsz).
        let base = std::mem::size_of::<vfio_iommu_type1_info>();
        let mut buf = vec![0u64; base.div_ceil(8)];
        let mut argsz = base as u32;
        for _ in 0..2 {
            buf.resize((argsz as usize).div_ceil(8), 0);
            buf.iter_mut().for_each(|w| *w = 0);
            let hdr = buf.as_mut_ptr() as *mut vfio_iommu_type1_info;
            // SAFETY: `buf` is at least `argsz` bytes, 8-byte aligned (a Vec<u64>), so it holds a
            // vfio_iommu_type1_info; we write argsz before the kernel reads it.
            unsafe { (*hdr).argsz = argsz };
            // SAFETY: VFIO_IOMMU_GET_INFO writes at most `argsz` bytes into `buf`, which is
            // that large; `fd` is the open container.
            let r = unsafe { ioctl_with_mut_ptr(&*self.inner, VFIO_IOMMU_GET_INFO(), hdr) };
            if r < 0 {
                return Err(SysError::Io {
                    context: format!(
                        "{CONTAINER_PATH}: VFIO_IOMMU_GET_INFO (has a group joined the container?)"
                    ),
                    source: std::io::Error::last_os_error(),
                });
            }
            // SAFETY: the kernel filled the header; `hdr` points into `buf`.
            let want = unsafe { (*hdr).argsz };
            if want <= argsz {
                break;
            }
            argsz = want;
        }
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        // SAFETY: the header lies at the start of `buf` and was written by the kernel.
        let hdr = unsafe { std::ptr::read(buf.as_ptr() as *const vfio_iommu_type1_info) };
        let kernel = if hdr.flags & VFIO_IOMMU_INFO_CAPS != 0 {
            parse_iova_ranges(&bytes[..(argsz as usize).min(bytes.len())], hdr.cap_offset)
                .map_err(|reason| SysError::IommuInfo { reason })?
        } else {
            None
        };
        Ok(IommuInfo {
            iova_pgsizes: hdr.iova_pgsizes,
            ranges_from_kernel: kernel.is_some(),
            ranges: kernel.unwrap_or_else(legacy_ranges),
        })
    }

    /// Maps `len` bytes at `vaddr` for the device at `iova` (read and write,
    /// `VFIO_IOMMU_MAP_DMA`). The kernel pins the pages (counted against RLIMIT_MEMLOCK).
    ///
    /// # Safety
    /// `vaddr..vaddr+len` must be memory this process owns and keeps mapped until
    /// [`dma_unmap`](Self::dma_unmap) of the same range; until then it may only be accessed
    /// through raw-pointer volatile operations or system calls (the device writes it at any
    /// time), never through a Rust reference.
    ///
    /// Errors: [`SysError::Vfio`] naming the IOVA, size and what to check.
    pub unsafe fn dma_map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<()> {
        // SAFETY: forwarded from this function's contract.
        unsafe { self.inner.vfio_dma_map(iova, len, vaddr) }.map_err(|source| SysError::Vfio {
            context: format!("VFIO_IOMMU_MAP_DMA iova {iova:#x} size {len:#x} (check `ulimit -l`: the memlock limit must cover all DMA memory; and the IOVA ranges of the IOMMU)"),
            source,
        })
    }

    /// Removes the mapping at `iova` of `len` bytes (`VFIO_IOMMU_UNMAP_DMA`).
    ///
    /// Errors: [`SysError::Vfio`].
    pub fn dma_unmap(&self, iova: u64, len: usize) -> Result<()> {
        self.inner
            .vfio_dma_unmap(iova, len)
            .map_err(|source| SysError::Vfio {
                context: format!("VFIO_IOMMU_UNMAP_DMA iova {iova:#x} size {len:#x}"),
                source,
            })
    }
}

/// Opens `path` read-write and closes it again, mapping failure to a [`SysError`] that names
/// the path and says what to check (`missing_hint` when it does not exist).
pub fn check_node(path: &Path, missing_hint: &str) -> Result<()> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map(drop)
        .map_err(|e| SysError::open_node(path.to_path_buf(), e, missing_hint))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_node_says_what_to_do() {
        let p = std::env::temp_dir().join("rdmesh-no-such-dir/vfio");
        let e = check_node(&p, NO_VFIO_HINT).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("does not exist"), "{msg}");
        assert!(msg.contains("modprobe vfio-pci"), "{msg}");
        assert!(msg.contains("intel_iommu=on"), "{msg}");
    }

    #[test]
    fn open_without_vfio_is_a_clear_error() {
        if Path::new(CONTAINER_PATH).exists() {
            eprintln!("this machine has {CONTAINER_PATH}; the no-VFIO path is not exercised");
            return;
        }
        let e = Container::open().unwrap_err();
        assert!(
            e.to_string()
                .starts_with("/dev/vfio/vfio: does not exist — load the vfio-pci module"),
            "{e}"
        );
    }

    #[test]
    fn min_page_size_from_the_bitmap() {
        let i = IommuInfo {
            iova_pgsizes: 0x4020_1000,
            ranges: legacy_ranges(),
            ranges_from_kernel: false,
        };
        assert_eq!(i.min_page_size(), 4096);
        let i = IommuInfo {
            iova_pgsizes: 0,
            ..i
        };
        assert_eq!(i.min_page_size(), 4096);
    }
}
