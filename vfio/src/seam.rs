//! The seam between driver code and a device: register access to a BAR ([`Mmio`]), DMA memory
//! ([`DmaAllocator`], [`DmaBuffer`]) and interrupts ([`Interrupt`]).
//!
//! The mlx5 driver is written only against these traits. Two sets of implementations exist:
//! the real ones over VFIO (BAR0 `mmap` with volatile accesses, IOMMU-mapped pinned memory, an
//! MSI-X eventfd) and the in-process device model's. Driver code never holds a Rust reference
//! into DMA or MMIO memory: it copies bytes in and out through these methods.

use core::time::Duration;

/// Register access to one PCI BAR. Offsets are in bytes from the start of the BAR.
///
/// Values are exchanged as the bytes in BAR order read as a little-endian integer, which is
/// what a plain load does on x86-64 and arm64 (Linux `readl`/`writel`). mlx5 registers are
/// big-endian (PRM; Linux `ioread32be`): use the `*_be` methods for them.
///
/// Implementations must perform each call as exactly one access of that width (no tearing,
/// no merging) and must not panic on an offset outside the BAR: reads return all ones (what
/// a PCI master abort returns) and writes are dropped, and both are logged.
pub trait Mmio: Send + Sync {
    /// BAR length in bytes.
    fn len(&self) -> usize;
    /// One 32-bit load at `offset` (4-byte aligned).
    fn read32(&self, offset: usize) -> u32;
    /// One 32-bit store at `offset` (4-byte aligned).
    fn write32(&self, offset: usize, value: u32);
    /// One 64-bit store at `offset` (8-byte aligned) — the doorbell write of rdma-core
    /// `mmio_write64_be` when `value` is `u64::from_le_bytes(first 8 bytes of the ctrl segment)`.
    fn write64(&self, offset: usize, value: u64);

    /// Whether the BAR is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A big-endian 32-bit register (Linux `ioread32be`).
    fn read32_be(&self, offset: usize) -> u32 {
        u32::from_be(self.read32(offset))
    }
    /// Stores a big-endian 32-bit register (Linux `iowrite32be`).
    fn write32_be(&self, offset: usize, value: u32) {
        self.write32(offset, value.to_be())
    }
    /// Stores 8 bytes exactly as laid out in memory, as one 64-bit access.
    fn write_bytes64(&self, offset: usize, bytes: [u8; 8]) {
        self.write64(offset, u64::from_le_bytes(bytes))
    }
    /// A write-combined burst: `data` (a multiple of 8 bytes, at most 64, 8-byte aligned)
    /// stored at `offset` with 64-bit stores in order, as rdma-core's `mlx5_bf_copy` does
    /// through a write-combining mapping — one PCIe write of `data.len()` bytes on a device.
    /// The default issues the 8-byte stores one by one.
    fn write_burst(&self, offset: usize, data: &[u8]) {
        for (i, c) in data.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            self.write_bytes64(offset + i * 8, b);
        }
    }
}

/// Errors of DMA memory.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum DmaError {
    /// No more memory could be pinned or mapped (memlock limit, IOVA space, hugepages).
    #[error("DMA allocation of {len} bytes failed: {reason}")]
    Alloc {
        /// Bytes requested.
        len: usize,
        /// What failed and what to check.
        reason: String,
    },
    /// An access outside a buffer.
    #[error("DMA access of {len} bytes at offset {offset} is outside a {size}-byte buffer")]
    OutOfBounds {
        /// Byte offset of the access.
        offset: usize,
        /// Bytes accessed.
        len: usize,
        /// Buffer size in bytes.
        size: usize,
    },
}

/// One block of DMA memory: the device reaches it at [`iova`](DmaBuffer::iova), the CPU only
/// through copies (volatile in the real implementation, since the device writes it
/// concurrently).
pub trait DmaBuffer: Send + Sync + core::fmt::Debug {
    /// I/O virtual address of byte 0 (what goes into PAS entries, dbr_addr, mailboxes).
    fn iova(&self) -> u64;
    /// Length in bytes (a multiple of 4096).
    fn len(&self) -> usize;
    /// Copies `out.len()` bytes from `offset`.
    ///
    /// Errors: [`DmaError::OutOfBounds`].
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), DmaError>;
    /// Copies `data` to `offset`.
    ///
    /// Errors: [`DmaError::OutOfBounds`].
    fn write(&self, offset: usize, data: &[u8]) -> Result<(), DmaError>;

    /// Runs `f` on the `len` bytes at `offset`. The default copies them out, runs `f` on the
    /// copy and writes back the runs of bytes `f` changed (a closure that only reads writes
    /// nothing; bytes the device writes meanwhile elsewhere in the range survive). A buffer
    /// that can keep the device away while `f` runs (the device model holds the buffer's lock)
    /// hands out the bytes themselves instead.
    ///
    /// Errors: [`DmaError::OutOfBounds`].
    fn with_bytes(
        &self,
        offset: usize,
        len: usize,
        f: &mut dyn FnMut(&mut [u8]),
    ) -> Result<(), DmaError> {
        let mut copy = vec![0u8; len];
        self.read(offset, &mut copy)?;
        let before = copy.clone();
        f(&mut copy);
        let mut i = 0;
        while i < len {
            if copy[i] == before[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < len && copy[i] != before[i] {
                i += 1;
            }
            self.write(offset + start, &copy[start..i])?;
        }
        Ok(())
    }

    /// Whether the buffer is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Hands out DMA memory: zeroed, pinned, mapped for the device.
pub trait DmaAllocator: Send + Sync {
    /// Allocates `len` bytes rounded up to whole 4 KiB pages, with an IOVA aligned to `align`
    /// bytes (a power of two, at most 2 MiB).
    ///
    /// Errors: [`DmaError::Alloc`].
    fn alloc(&self, len: usize, align: usize) -> Result<Box<dyn DmaBuffer>, DmaError>;
}

/// An interrupt source (MSI-X vector → eventfd on the real device).
pub trait Interrupt: Send + Sync {
    /// Waits up to `timeout` for the interrupt; returns whether it fired (and consumes it).
    fn wait(&self, timeout: Duration) -> bool;
}
