//! ACK Extended Transport Header: 4 bytes, syndrome u8 + MSN u24 (IBTA vol. 1 §9.3.5;
//! rxe_hdr.h `struct rxe_aeth`; ib_hdrs.h).

enum_with_unknown! {
    /// NAK error codes, syndrome bits 4:0 when bits 6:5 are 11 (IBTA vol. 1 Table 44).
    pub enum NakCode(u8) {
        /// PSN sequence error (0x60).
        PsnSequenceError = 0,
        /// Invalid request (0x61).
        InvalidRequest = 1,
        /// Remote access error (0x62).
        RemoteAccessError = 2,
        /// Remote operational error (0x63).
        RemoteOperationalError = 3,
        /// Invalid RD request (0x64).
        InvalidRdRequest = 4,
    }
}

/// The decoded AETH syndrome byte (IBTA vol. 1 Table 43).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Syndrome {
    /// ACK (bits 6:5 = 00) with a 5-bit credit code; 0x1F = unlimited (what rxe sends).
    Ack {
        /// Credit code, 0..=31.
        credit: u8,
    },
    /// RNR NAK (01) with a 5-bit RNR timer code.
    RnrNak {
        /// RNR timer code, 0..=31 (IBTA Table 45).
        timer: u8,
    },
    /// NAK (11) with an error code.
    Nak(NakCode),
    /// Bits 6:5 = 10 (reserved) or bit 7 set: the raw byte.
    Reserved(u8),
}

/// The parsed form of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AethRepr {
    /// Syndrome (byte 0).
    pub syndrome: Syndrome,
    /// Message Sequence Number, 24 bits (bytes 1–3).
    pub msn: u32,
}
