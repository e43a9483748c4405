//! Base Transport Header: 12 bytes, big-endian (IBTA vol. 1 §9.2; rxe_hdr.h `struct rxe_bth`).

use super::{Opcode, Psn};

/// The parsed, validated form of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BthRepr {
    /// OpCode (byte 0).
    pub opcode: Opcode,
    /// SE: solicited event (byte 1 bit 7).
    pub solicited: bool,
    /// M: MigReq (byte 1 bit 6); rxe sends 0.
    pub mig_req: bool,
    /// PadCnt: 0..=3 pad bytes after the payload (byte 1 bits 5:4).
    pub pad_cnt: u8,
    /// P_Key (bytes 2–3); default 0xFFFF.
    pub pkey: u16,
    /// FECN (byte 4 bit 7).
    pub fecn: bool,
    /// BECN (byte 4 bit 6); set in CNPs.
    pub becn: bool,
    /// Destination QP number, 24 bits (bytes 5–7).
    pub dest_qp: u32,
    /// AckReq (byte 8 bit 7).
    pub ack_req: bool,
    /// PSN, 24 bits (bytes 9–11).
    pub psn: Psn,
}
