//! ACK Extended Transport Header: 4 bytes, syndrome u8 + MSN u24 (IBTA vol. 1 §9.3.5;
//! rxe_hdr.h `struct rxe_aeth`; ib_hdrs.h).
//!
//! Syndrome byte (IBTA vol. 1 Table 43): bit 7 reserved (0); bits 6:5 = 00 ACK, 01 RNR NAK,
//! 10 reserved, 11 NAK; bits 4:0 = credit code, RNR timer code or NAK code.

use super::{read_u24, write_u24, Error, Result};

mod field {
    use crate::wire::Field;

    pub const SYNDROME: usize = 0;
    pub const MSN: Field = 1..4;
}

/// Length of an AETH in bytes.
pub const HEADER_LEN: usize = field::MSN.end;

/// Largest MSN a 24-bit field can hold.
pub const MAX_MSN: u32 = 0x00ff_ffff;

/// ACK credit code meaning "invalid / unlimited credits"; what rxe always sends
/// (`AETH_ACK_UNLIMITED`).
pub const CREDIT_UNLIMITED: u8 = 0x1f;

/// Syndrome bits 6:5 for an ACK.
const KIND_ACK: u8 = 0x00;
/// Syndrome bits 6:5 for an RNR NAK.
const KIND_RNR_NAK: u8 = 0x20;
/// Syndrome bits 6:5 for a NAK.
const KIND_NAK: u8 = 0x60;
/// Bits 6:5 of the syndrome.
const KIND_MASK: u8 = 0x60;
/// Bits 4:0 of the syndrome.
const VALUE_MASK: u8 = 0x1f;
/// Bit 7 of the syndrome (reserved).
const RESERVED_BIT: u8 = 0x80;

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
///
/// Converts to and from the wire byte with `u8::from(syndrome)` / `Syndrome::from(byte)`:
/// ACK = `0x00 | credit`, RNR NAK = `0x20 | timer`, NAK = `0x60 | code`, anything with bit 7 set
/// or bits 6:5 = 10 is `Reserved(byte)`. Every byte round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Syndrome {
    /// ACK (bits 6:5 = 00) with a 5-bit credit code; 0x1F = unlimited (what rxe sends).
    Ack {
        /// Credit code, 0..=31 (see [`credit_count`]).
        credit: u8,
    },
    /// RNR NAK (01) with a 5-bit RNR timer code.
    RnrNak {
        /// RNR timer code, 0..=31 (IBTA Table 45; see [`rnr_timer_us`]).
        timer: u8,
    },
    /// NAK (11) with an error code.
    Nak(NakCode),
    /// Bits 6:5 = 10 (reserved) or bit 7 set: the raw byte.
    Reserved(u8),
}

impl Syndrome {
    /// The ACK syndrome rxe sends: credit code 0x1F (byte 0x1F).
    pub const ACK_UNLIMITED: Syndrome = Syndrome::Ack {
        credit: CREDIT_UNLIMITED,
    };

    /// `true` for an ACK (any credit code).
    pub fn is_ack(self) -> bool {
        matches!(self, Syndrome::Ack { .. })
    }

    /// `true` for a NAK or an RNR NAK.
    pub fn is_nak(self) -> bool {
        matches!(self, Syndrome::Nak(_) | Syndrome::RnrNak { .. })
    }
}

impl From<u8> for Syndrome {
    fn from(b: u8) -> Syndrome {
        if b & RESERVED_BIT != 0 {
            return Syndrome::Reserved(b);
        }
        let v = b & VALUE_MASK;
        match b & KIND_MASK {
            KIND_ACK => Syndrome::Ack { credit: v },
            KIND_RNR_NAK => Syndrome::RnrNak { timer: v },
            KIND_NAK => Syndrome::Nak(NakCode::from(v)),
            _ => Syndrome::Reserved(b),
        }
    }
}

impl From<Syndrome> for u8 {
    /// Encodes the syndrome byte; the 5-bit values are truncated to their field.
    fn from(s: Syndrome) -> u8 {
        match s {
            Syndrome::Ack { credit } => KIND_ACK | (credit & VALUE_MASK),
            Syndrome::RnrNak { timer } => KIND_RNR_NAK | (timer & VALUE_MASK),
            Syndrome::Nak(code) => KIND_NAK | (u8::from(code) & VALUE_MASK),
            Syndrome::Reserved(b) => b,
        }
    }
}

/// Credits per ACK credit code 0x00..=0x1E (IBTA vol. 1 §9.7.7.2; Linux rdmavt `credit_table`).
const CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536,
    2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768,
];

/// Number of receive credits (available RECV WQEs) an ACK credit code advertises.
///
/// Returns `None` for code 0x1F ("invalid": credits unknown/unlimited, what rxe sends) and for
/// values above 0x1F. Source: IBTA vol. 1 §9.7.7.2, Linux `drivers/infiniband/sw/rdmavt/rc.c`.
pub const fn credit_count(code: u8) -> Option<u32> {
    if (code as usize) < CREDITS.len() {
        Some(CREDITS[code as usize])
    } else {
        None
    }
}

/// The largest credit code whose credit count is ≤ `credits` (what a responder with `credits`
/// free RECV WQEs advertises). Never returns 0x1F.
pub fn credit_code_for(credits: u32) -> u8 {
    // The table ascends and starts at 0: at least one entry is ≤ `credits`. A binary search,
    // since every ACK a responder sends now carries its credits.
    (CREDITS.partition_point(|&c| c <= credits) - 1) as u8
}

/// RNR NAK timer delays in µs for codes 0..=31 (IBTA vol. 1 Table 45; code 0 = 655.36 ms).
const RNR_TIMER_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The minimum delay in µs an RNR NAK timer code asks the requester to wait before retrying
/// (IBTA vol. 1 Table 45; Linux rxe_comp.c `rnrnak_usec`, whose code-25 entry has a typo).
/// Only the low 5 bits of `code` are used.
pub const fn rnr_timer_us(code: u8) -> u32 {
    RNR_TIMER_US[(code & VALUE_MASK) as usize]
}

fixed_header_view!("AETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Raw syndrome byte (byte 0).
    #[inline]
    pub fn syndrome_byte(&self) -> u8 {
        self.buffer.as_ref()[field::SYNDROME]
    }

    /// Decoded syndrome (byte 0).
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from(self.syndrome_byte())
    }

    /// Message Sequence Number, 24 bits (bytes 1–3).
    #[inline]
    pub fn msn(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::MSN)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the syndrome byte.
    #[inline]
    pub fn set_syndrome(&mut self, v: Syndrome) {
        self.buffer.as_mut()[field::SYNDROME] = v.into();
    }

    /// Sets the MSN from the low 24 bits of `v`.
    #[inline]
    pub fn set_msn(&mut self, v: u32) {
        write_u24(self.buffer.as_mut(), field::MSN, v)
    }
}

impl AethRepr {
    /// Parses an AETH. Reserved syndromes are kept as [`Syndrome::Reserved`].
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than 4 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<AethRepr> {
        packet.check_len()?;
        Ok(AethRepr {
            syndrome: packet.syndrome(),
            msn: packet.msn(),
        })
    }

    /// Length of the emitted header: 4 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks the values that do not fit their fields.
    ///
    /// # Errors
    /// [`Error::BadField`] when `msn > 0xFF_FFFF` or a 5-bit syndrome value is above 31.
    pub fn check(&self) -> Result<()> {
        let five_bit_ok = match self.syndrome {
            Syndrome::Ack { credit: v } | Syndrome::RnrNak { timer: v } => v <= VALUE_MASK,
            Syndrome::Nak(c) => u8::from(c) <= VALUE_MASK,
            Syndrome::Reserved(b) => Syndrome::from(b) == Syndrome::Reserved(b),
        };
        if self.msn > MAX_MSN || !five_bit_ok {
            Err(Error::BadField)
        } else {
            Ok(())
        }
    }

    /// Writes the AETH into the first 4 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_syndrome(self.syndrome);
        packet.set_msn(self.msn);
    }
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

#[cfg(test)]
mod test {
    use super::*;

    // An ACK from the oferby/proxy capture: credit code 6, MSN 1.
    static AETH_BYTES: [u8; 4] = [0x06, 0x00, 0x00, 0x01];

    #[test]
    fn test_deconstruct_construct() {
        let p = Packet::new_checked(&AETH_BYTES[..]).unwrap();
        assert_eq!(p.syndrome(), Syndrome::Ack { credit: 6 });
        assert_eq!(p.msn(), 1);
        let mut buf = [0xffu8; 4];
        let mut q = Packet::new_unchecked(&mut buf[..]);
        q.set_syndrome(Syndrome::Ack { credit: 6 });
        q.set_msn(1);
        assert_eq!(buf, AETH_BYTES);
    }

    #[test]
    fn test_parse_emit() {
        let r = AethRepr::parse(&Packet::new_checked(&AETH_BYTES[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AethRepr {
                syndrome: Syndrome::Ack { credit: 6 },
                msn: 1
            }
        );
        let mut buf = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, AETH_BYTES);
        assert_eq!(
            Packet::new_checked(&AETH_BYTES[..3]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn syndrome_bytes() {
        // Values from ib_hdrs.h / rxe_hdr.h.
        assert_eq!(u8::from(Syndrome::ACK_UNLIMITED), 0x1f);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::PsnSequenceError)), 0x60);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::InvalidRequest)), 0x61);
        assert_eq!(u8::from(Syndrome::Nak(NakCode::RemoteAccessError)), 0x62);
        assert_eq!(
            u8::from(Syndrome::Nak(NakCode::RemoteOperationalError)),
            0x63
        );
        assert_eq!(u8::from(Syndrome::Nak(NakCode::InvalidRdRequest)), 0x64);
        assert_eq!(u8::from(Syndrome::RnrNak { timer: 14 }), 0x2e);
        assert_eq!(Syndrome::from(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(Syndrome::from(0x40), Syndrome::Reserved(0x40));
        assert_eq!(Syndrome::from(0x80), Syndrome::Reserved(0x80));
        assert_eq!(Syndrome::from(0x65), Syndrome::Nak(NakCode::Unknown(5)));
        for b in 0..=255u8 {
            assert_eq!(u8::from(Syndrome::from(b)), b);
        }
        assert!(Syndrome::from(0x61).is_nak() && Syndrome::from(0x21).is_nak());
        assert!(Syndrome::from(0x05).is_ack() && !Syndrome::from(0x05).is_nak());
    }

    #[test]
    fn credits() {
        assert_eq!(credit_count(0), Some(0));
        assert_eq!(credit_count(5), Some(6));
        assert_eq!(credit_count(6), Some(8));
        assert_eq!(credit_count(0x1e), Some(32768));
        assert_eq!(credit_count(0x1f), None);
        assert_eq!(credit_code_for(0), 0);
        assert_eq!(credit_code_for(7), 5);
        assert_eq!(credit_code_for(8), 6);
        assert_eq!(credit_code_for(1_000_000), 0x1e);
        for code in 0..0x1f {
            assert_eq!(credit_code_for(credit_count(code).unwrap()), code);
        }
    }

    #[test]
    fn rnr_timer() {
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(14), 1_280);
        assert_eq!(rnr_timer_us(25), 61_440);
        assert_eq!(rnr_timer_us(31), 491_520);
        // Codes 1..=31 are strictly increasing.
        for c in 2..32 {
            assert!(rnr_timer_us(c) > rnr_timer_us(c - 1));
        }
    }

    #[test]
    fn check() {
        let ok = AethRepr {
            syndrome: Syndrome::ACK_UNLIMITED,
            msn: MAX_MSN,
        };
        assert_eq!(ok.check(), Ok(()));
        assert_eq!(
            AethRepr {
                msn: MAX_MSN + 1,
                ..ok
            }
            .check(),
            Err(Error::BadField)
        );
        assert_eq!(
            AethRepr {
                syndrome: Syndrome::Ack { credit: 32 },
                ..ok
            }
            .check(),
            Err(Error::BadField)
        );
        assert_eq!(
            AethRepr {
                syndrome: Syndrome::Reserved(0x05),
                ..ok
            }
            .check(),
            Err(Error::BadField)
        );
    }
}
