//! The InfiniBand transport headers of one RoCEv2 packet: BTH plus the extended headers its
//! opcode names, in wire order (rxe_opcode.c). This is the UDP payload up to the IB payload.

use super::aeth::AethRepr;
use super::atomic_eth::AtomicEthRepr;
use super::bth::BthRepr;
use super::deth::DethRepr;
use super::reth::RethRepr;

/// BTH and extended headers of one packet. Exactly the headers `bth.opcode.header_set()` names
/// are `Some`; `parse` guarantees it and `emit` requires it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TransportRepr {
    /// Base Transport Header.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// RETH (WRITE First/Only, READ request).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// ImmDt: the 32-bit immediate as a big-endian number read from the wire.
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// AETH (ACK, READ responses, atomic ACK).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH: the original remote data.
    pub atomic_ack: Option<u64>,
}
