//! RDMA Extended Transport Header: 16 bytes (IBTA vol. 1 §9.3.3; rxe_hdr.h `struct rxe_reth`).

/// The parsed form of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RethRepr {
    /// Remote virtual address (bytes 0–7).
    pub va: u64,
    /// R_Key (bytes 8–11).
    pub rkey: u32,
    /// DMA length in bytes (bytes 12–15).
    pub dma_len: u32,
}
