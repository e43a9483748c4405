//! Datagram Extended Transport Header: 8 bytes, Q_Key u32 + reserved u8 + SrcQP u24
//! (IBTA vol. 1 §9.3.2; rxe_hdr.h `struct rxe_deth`).

/// The parsed form of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DethRepr {
    /// Q_Key (bytes 0–3).
    pub qkey: u32,
    /// Source QP, 24 bits (bytes 5–7).
    pub src_qp: u32,
}
