//! The deliberate protocol violations a generated frame may carry.

use super::Target;
use crate::wire::Transport;

/// What is wrong with a generated frame on purpose ([`Violation::None`]: nothing; such a frame
/// is one a conforming receiver accepts when its PSN is the expected one).
///
/// Every frame has a correct ICRC over the bytes it carries except with [`Violation::BadIcrc`]
/// (and the IPv4 header checksum is always correct).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Violation {
    /// A well-formed frame: an opcode of the QP's transport that starts a message (or a
    /// response), the expected PSN, the QP's P_Key/Q_Key, RETH/AtomicETH inside the MR.
    None,
    /// The ICRC trailer has one bit flipped.
    BadIcrc,
    /// PSN ahead of the expected PSN: by 1..=16, or by 2^22, 2^23 − 1 or 2^23.
    PsnAhead,
    /// PSN behind the expected PSN (a duplicate): by 1..=16, 2^23 − 1 or 2^23.
    PsnBehind,
    /// DestQP is not the QP's: a neighbour (±1, ±2), QP0, QP1 or 0xFFFFFF.
    WrongQpn,
    /// P_Key other than the QP's (0x0000, 0x7FFF (limited member), 0x8000, or any).
    WrongPkey,
    /// An opcode of another transport (UC/UD/RC to an RC/UC/UD QP) with its headers.
    OpcodeForOtherQpType,
    /// A reserved, RD or vendor opcode (0x15, 0x18–0x1F, 0x2C–0x63, 0x66–0x80, 0x82–0xFF);
    /// the bytes after the BTH are payload.
    UnknownOpcode,
    /// A Middle or Last packet with no message in progress (RC/UC).
    OutOfOrderOpcode,
    /// BTH TVer ≠ 0.
    BadTver,
    /// A reserved bit set: BTH resv7 or resv6, the DETH reserved byte, or the IPv4 reserved
    /// flag.
    ReservedBits,
    /// BTH PadCnt disagrees with the payload (payload + pad not a multiple of 4, or a pad on
    /// an aligned payload).
    PadCntMismatch,
    /// More payload than the path MTU (by 1..=64 bytes).
    PayloadOverMtu,
    /// A First packet shorter than the MTU, or payload on an opcode that carries none (ACK,
    /// READ request, atomics).
    PayloadLenWrong,
    /// UDP length or IP length (IPv4 total length / IPv6 payload length) disagrees with the
    /// bytes that follow.
    LengthField,
    /// The frame ends inside the extended headers its opcode names (lengths and ICRC fitted
    /// to what is there).
    TruncatedHeaders,
    /// RETH/AtomicETH/IETH R_Key next to the MR's: ±1, ±2, or another key byte with the same
    /// index.
    RkeyNearMr,
    /// RETH/AtomicETH virtual address outside the MR: just below its start, crossing or at its
    /// end, wrapping past 2^64, or an atomic address not 8-byte aligned.
    VaOutOfMr,
    /// RETH DMA length that disagrees with the message: WRITE Only length ≠ payload, WRITE
    /// First shorter than its payload, READ of 0 bytes or of 2^31 or more.
    DmaLenMismatch,
    /// Non-zero UDP checksum that does not verify.
    BadUdpChecksum,
    /// A WRITE, READ or atomic on an MR that does not allow it (otherwise a valid request).
    AccessNotGranted,
}

impl Violation {
    /// Every violation, [`Violation::None`] first.
    pub const ALL: [Violation; 21] = [
        Violation::None,
        Violation::BadIcrc,
        Violation::PsnAhead,
        Violation::PsnBehind,
        Violation::WrongQpn,
        Violation::WrongPkey,
        Violation::OpcodeForOtherQpType,
        Violation::UnknownOpcode,
        Violation::OutOfOrderOpcode,
        Violation::BadTver,
        Violation::ReservedBits,
        Violation::PadCntMismatch,
        Violation::PayloadOverMtu,
        Violation::PayloadLenWrong,
        Violation::LengthField,
        Violation::TruncatedHeaders,
        Violation::RkeyNearMr,
        Violation::VaOutOfMr,
        Violation::DmaLenMismatch,
        Violation::BadUdpChecksum,
        Violation::AccessNotGranted,
    ];

    /// A short kebab-case name (for coverage tables and file names).
    pub const fn name(self) -> &'static str {
        match self {
            Violation::None => "none",
            Violation::BadIcrc => "bad-icrc",
            Violation::PsnAhead => "psn-ahead",
            Violation::PsnBehind => "psn-behind",
            Violation::WrongQpn => "wrong-qpn",
            Violation::WrongPkey => "wrong-pkey",
            Violation::OpcodeForOtherQpType => "opcode-other-qp-type",
            Violation::UnknownOpcode => "unknown-opcode",
            Violation::OutOfOrderOpcode => "out-of-order-opcode",
            Violation::BadTver => "bad-tver",
            Violation::ReservedBits => "reserved-bits",
            Violation::PadCntMismatch => "padcnt-mismatch",
            Violation::PayloadOverMtu => "payload-over-mtu",
            Violation::PayloadLenWrong => "payload-len-wrong",
            Violation::LengthField => "length-field",
            Violation::TruncatedHeaders => "truncated-headers",
            Violation::RkeyNearMr => "rkey-near-mr",
            Violation::VaOutOfMr => "va-out-of-mr",
            Violation::DmaLenMismatch => "dma-len-mismatch",
            Violation::BadUdpChecksum => "bad-udp-checksum",
            Violation::AccessNotGranted => "access-not-granted",
        }
    }

    /// The violation named `name` (see [`name`](Self::name)).
    pub fn from_name(name: &str) -> Option<Violation> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }

    /// Whether this violation can be built for target `t`: UD has no RETH and no multi-packet
    /// messages; an MR is needed for the R_Key and address cases; IP/UDP header violations
    /// need `t.whole_frame`.
    pub fn applies_to(self, t: &Target) -> bool {
        let service = t.qp.service;
        let has_mr = t.mr.is_some();
        match self {
            Violation::LengthField | Violation::BadUdpChecksum => t.whole_frame,
            Violation::PayloadLenWrong => service != Transport::Ud,
            Violation::OutOfOrderOpcode | Violation::DmaLenMismatch => {
                matches!(service, Transport::Rc | Transport::Uc)
            }
            Violation::RkeyNearMr | Violation::VaOutOfMr => {
                has_mr && matches!(service, Transport::Rc | Transport::Uc)
            }
            Violation::AccessNotGranted => t.mr.is_some_and(|m| match service {
                Transport::Rc => !(m.remote_read && m.remote_write && m.remote_atomic),
                Transport::Uc => !m.remote_write,
                _ => false,
            }),
            _ => true,
        }
    }
}
