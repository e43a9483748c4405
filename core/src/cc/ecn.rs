//! The ECN field: the low 2 bits of the IPv4 TOS byte / IPv6 Traffic Class (RFC 3168 §5).
//!
//! RoCEv2 senders mark data packets ECT(0); a congested switch rewrites ECT to CE; the
//! notification point reacts to CE only (rocev2.md §4.1; DCQCN reference implementation
//! `CheckandSendQCN` tests `ecnbits == 0x03`). The ICRC stays valid because it masks TOS/TC.

/// An ECN codepoint (RFC 3168 §5). All four 2-bit values are defined, so there is no
/// "unknown" arm: [`Ecn::from_bits`] only looks at the low 2 bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Ecn {
    /// `00`: the sender does not support ECN.
    NotEct,
    /// `01`: ECN-capable transport, codepoint 1.
    Ect1,
    /// `10`: ECN-capable transport, codepoint 0 — what RoCEv2 data packets carry.
    Ect0,
    /// `11`: congestion experienced, set by a switch instead of dropping.
    Ce,
}

impl Ecn {
    /// The codepoint in the low 2 bits of `tos` (an IPv4 TOS byte, an IPv6 Traffic Class or the
    /// bare 2-bit value); the upper 6 bits (DSCP) are ignored.
    pub const fn from_bits(tos: u8) -> Ecn {
        match tos & 0b11 {
            0b00 => Ecn::NotEct,
            0b01 => Ecn::Ect1,
            0b10 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The 2-bit value (0..=3), to be OR-ed into the low bits of TOS / Traffic Class.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0b00,
            Ecn::Ect1 => 0b01,
            Ecn::Ect0 => 0b10,
            Ecn::Ce => 0b11,
        }
    }

    /// `true` for CE (`11`).
    pub const fn is_ce(self) -> bool {
        matches!(self, Ecn::Ce)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn codepoints_round_trip() {
        for v in 0..=3u8 {
            assert_eq!(Ecn::from_bits(v).bits(), v);
        }
        // DSCP 48 (CNP priority), ECT(0): TOS 0xC2 as on the ConnectX-4 Lx capture.
        assert_eq!(Ecn::from_bits(0xc2), Ecn::Ect0);
        assert!(Ecn::from_bits(0xff).is_ce());
        assert!(!Ecn::from_bits(0x02).is_ce());
        assert_eq!(Ecn::from_bits(0x89), Ecn::Ect1);
    }
}
