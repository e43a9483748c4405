//! Atomic Extended Transport Header: 28 bytes, packed (IBTA vol. 1 §9.3.4;
//! rxe_hdr.h `struct rxe_atmeth`; ib_pack.h `IB_EXT_ATOMICETH_BYTES`).

/// The parsed form of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AtomicEthRepr {
    /// Remote virtual address, must be 8-byte aligned (bytes 0–7).
    pub va: u64,
    /// R_Key (bytes 8–11).
    pub rkey: u32,
    /// Swap (CmpSwap) or Add (FetchAdd) data (bytes 12–19).
    pub swap_add: u64,
    /// Compare data (bytes 20–27).
    pub compare: u64,
}
