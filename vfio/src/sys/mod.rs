//! The VFIO system layer: everything that talks to the kernel's VFIO, independent of mlx5 (it
//! drives QEMU's `edu` device in the `qemu_vfio_edu` test as well as a ConnectX).
//!
//! Steps, in the order a driver takes them (Linux `Documentation/driver-api/vfio.rst`; rdma-core
//! `providers/mlx5/mlx5_vfio.c` `mlx5_vfio_open_fds`, `init_bar0`, `enable_pci_cmd`):
//! 1. [`Container::open`]: `/dev/vfio/vfio`, API version, type1 v2 IOMMU extension.
//! 2. [`VfioPciDevice::open`]: sysfs checks (IOMMU group, bound to vfio-pci), the group node,
//!    group viability, group → container, IOMMU type set, device fd, region and IRQ info.
//! 3. [`Container::iommu_info`]: IOMMU page sizes and usable IOVA ranges (capability chain).
//! 4. [`VfioPciDevice::map_bar`]: BAR mmap ([`BarMmio`], sparse-mmap aware, volatile access).
//! 5. [`VfioPciDevice::enable_bus_master`]: PCI command register, memory space + bus master.
//! 6. [`VfioDma`]: pinned memory mapped with `VFIO_IOMMU_MAP_DMA` in 2 MiB blocks, 4 KiB pages.
//! 7. [`VfioPciDevice::enable_vector0`]: MSI-X (or MSI) vector 0 → eventfd.
//!
//! Why these crates: `vfio-ioctls` (rust-vmm, `default-features = false`, so no KVM) does the
//! container, group (viability, set container, set IOMMU), device fd, region info with its
//! capabilities (sparse mmap) and `VFIO_DEVICE_SET_IRQS`, and `VFIO_IOMMU_MAP_DMA`/`UNMAP_DMA`.
//! It does not mmap regions, its `region_read`/`region_write` return nothing on failure, and it
//! has no `VFIO_IOMMU_GET_INFO`; for those this layer uses the device fd directly (pread/pwrite
//! through `std`, `mmap` through `libc`) and `vfio-bindings`' structs with `vmm-sys-util`'s ioctl
//! helper. `unsafe` lives only in this folder, each block with a `// SAFETY:` comment; MMIO and
//! DMA memory are only touched through raw-pointer volatile accesses.

pub mod bar;
pub mod container;
pub mod device;
pub mod dma;
pub mod dma_block;
pub mod error;
pub mod iova;
pub mod irq;
pub mod page_alloc;
pub mod pci_config;
pub mod region;
pub mod sysfs;
pub mod volatile;

pub use bar::BarMmio;
pub use container::{Container, IommuInfo};
pub use device::VfioPciDevice;
pub use dma::{VfioDma, VfioDmaBuffer, VfioDmaConfig};
pub use dma_block::DmaBlock;
pub use error::SysError;
pub use iova::IovaRange;
pub use irq::{EventFdInterrupt, IrqKind};
pub use region::RegionInfo;
pub use sysfs::{PciAddress, SysfsPci};
