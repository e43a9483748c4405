//! The memory barriers of rdma-core `util/udma_barrier.h`, which order stores to DMA memory,
//! doorbell records and MMIO doorbells (`docs/mlx5.md`, reference table in mlx5.md §2.4).
//!
//! | barrier | x86-64 | aarch64 |
//! | --- | --- | --- |
//! | `udma_to_device_barrier` ([`to_device`]) | compiler barrier | `dmb oshst` |
//! | `udma_from_device_barrier` ([`from_device`]) | `lfence` | `dmb oshld` |
//! | `mmio_wc_start` / `mmio_flush_writes` ([`flush_writes`]) | `sfence` | `dsb st` |

use core::sync::atomic::{compiler_fence, fence, Ordering};

/// `udma_to_device_barrier`: stores to DMA memory before this point reach the device before
/// later ones (the WQE before the doorbell record).
#[inline]
pub fn to_device() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshst` only orders memory accesses; it touches no register or memory.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    compiler_fence(Ordering::SeqCst);
}

/// `udma_from_device_barrier`: reads of a CQE/EQE/command entry after its ownership bit was
/// seen are not satisfied earlier.
#[inline]
pub fn from_device() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dmb oshld` only orders memory accesses; it touches no register or memory.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `lfence` only orders loads; it touches no register or memory.
    unsafe {
        core::arch::asm!("lfence", options(nostack, preserves_flags));
    }
    fence(Ordering::Acquire);
}

/// `mmio_wc_start` / `mmio_flush_writes`: every earlier store (DMA memory and doorbell
/// record) is globally visible before the following MMIO store, and the MMIO store leaves
/// the CPU.
#[inline]
pub fn flush_writes() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `dsb st` waits for outstanding stores; it touches no register or memory.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `sfence` only orders stores; it touches no register or memory.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    fence(Ordering::SeqCst);
}
