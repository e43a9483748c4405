//! RoCEv2 wire formats.
//!
//! One file per header, each in smoltcp's two-level pattern: a checked view
//! `Packet<T: AsRef<[u8]>>` whose getters read big-endian fields through a private `field` table
//! of byte ranges, and a small validated `Repr` with `parse` / `emit`.
//!
//! # Panic contract
//! - `Packet::new_checked` (= `new_unchecked` + `check_len`) validates the buffer length against
//!   every fixed field; once it returns `Ok`, no accessor panics.
//! - `Repr::emit` never panics when the buffer is at least `Repr::buffer_len()` /
//!   `HEADER_LEN` bytes long. Use `new_unchecked` when emitting into a dirty buffer.
//! - Every `parse` returns a typed [`Error`] on any input and never panics; the fuzz targets in
//!   `fuzz/` exercise this.
//!
//! Byte order: everything on the wire is big-endian (network order) except the ICRC, which is
//! transmitted least significant byte first (IBTA vol. 1 §7.8.1, rxe_icrc.c).

use core::fmt;
use core::ops::{Range, RangeFrom};

/// A byte range of a fixed field inside a header.
pub(crate) type Field = Range<usize>;
/// The bytes from an offset to the end of the buffer.
#[allow(dead_code)]
pub(crate) type Rest = RangeFrom<usize>;

pub mod opcode;
pub mod psn;

pub use opcode::{HeaderSet, Opcode, Transport};
pub use psn::Psn;

/// Why a buffer could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Error {
    /// The buffer is shorter than the header (or the headers an opcode names) requires.
    Truncated,
    /// A length field disagrees with the buffer (IP total length, UDP length, pad count).
    BadLength,
    /// The frame is well formed but is not RoCEv2 (not IPv4/IPv6, not UDP, not port 4791).
    NotRoce,
    /// IPv4 header carries options (IHL > 5); RoCEv2 senders never use them (rxe rejects them).
    Ipv4Options,
    /// IPv4 header is fragmented (MF set or fragment offset non-zero); RoCEv2 forbids it.
    Fragmented,
    /// IP version nibble is not the one the header type expects.
    BadVersion,
    /// The IPv4 header checksum does not verify.
    BadChecksum,
    /// BTH transport header version (TVer) is not 0.
    BadTver,
    /// The opcode is reserved or unknown, so its extended headers cannot be walked.
    UnknownOpcode,
    /// A field holds a value the standard forbids (e.g. pad count > 3, a 24-bit field > 2^24).
    BadField,
    /// The ICRC does not match the packet.
    BadIcrc,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Error::Truncated => "buffer too short for the headers it names",
            Error::BadLength => "length field disagrees with the buffer",
            Error::NotRoce => "not a RoCEv2 packet",
            Error::Ipv4Options => "IPv4 options are not supported by RoCEv2",
            Error::Fragmented => "fragmented IP packets are not RoCEv2",
            Error::BadVersion => "wrong IP version",
            Error::BadChecksum => "IPv4 header checksum mismatch",
            Error::BadTver => "BTH transport version is not 0",
            Error::UnknownOpcode => "reserved or unknown BTH opcode",
            Error::BadField => "field holds a forbidden value",
            Error::BadIcrc => "ICRC mismatch",
        };
        f.write_str(s)
    }
}

#[cfg(any(test, feature = "std"))]
impl std::error::Error for Error {}

/// Result of wire operations.
pub type Result<T> = core::result::Result<T, Error>;

/// Reads a big-endian u16 at `r` (which the caller has bounds-checked).
#[inline]
pub(crate) fn read_u16(data: &[u8], r: Field) -> u16 {
    let b = &data[r];
    u16::from_be_bytes([b[0], b[1]])
}

/// Reads a big-endian 24-bit value from the 3 bytes at `r`.
#[inline]
pub(crate) fn read_u24(data: &[u8], r: Field) -> u32 {
    let b = &data[r];
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}

/// Reads a big-endian u32 at `r`.
#[inline]
pub(crate) fn read_u32(data: &[u8], r: Field) -> u32 {
    let b = &data[r];
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// Reads a big-endian u64 at `r`.
#[inline]
pub(crate) fn read_u64(data: &[u8], r: Field) -> u64 {
    let b = &data[r];
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

/// Writes `v` big-endian into the 2 bytes at `r`.
#[inline]
pub(crate) fn write_u16(data: &mut [u8], r: Field, v: u16) {
    data[r].copy_from_slice(&v.to_be_bytes());
}

/// Writes the low 24 bits of `v` big-endian into the 3 bytes at `r`.
#[inline]
pub(crate) fn write_u24(data: &mut [u8], r: Field, v: u32) {
    data[r].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// Writes `v` big-endian into the 4 bytes at `r`.
#[inline]
pub(crate) fn write_u32(data: &mut [u8], r: Field, v: u32) {
    data[r].copy_from_slice(&v.to_be_bytes());
}

/// Writes `v` big-endian into the 8 bytes at `r`.
#[inline]
pub(crate) fn write_u64(data: &mut [u8], r: Field, v: u64) {
    data[r].copy_from_slice(&v.to_be_bytes());
}

#[macro_use]
mod view;

pub mod aeth;
#[cfg(feature = "arbitrary")]
mod arb;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
mod checksum;
pub mod cnp;
pub mod deth;
pub mod ethernet;
pub mod gen;
pub mod ib_packet;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod placement;
pub mod reth;
pub mod roce;
pub mod sack;
pub mod transport;
pub mod udp;

pub use aeth::{AethRepr, NakCode, Syndrome};
pub use atomic_ack_eth::AtomicAckEthRepr;
pub use atomic_eth::AtomicEthRepr;
pub use bth::BthRepr;
pub use cnp::CnpRepr;
pub use deth::DethRepr;
pub use ethernet::{EthernetRepr, VlanTag};
pub use ib_packet::IbPacket;
pub use icrc::IcrcContext;
pub use ieth::IethRepr;
pub use immdt::ImmDtRepr;
pub use ip::IpRepr;
pub use ipv4::Ipv4Repr;
pub use ipv6::Ipv6Repr;
pub use placement::PlacementRepr;
pub use reth::RethRepr;
pub use roce::{PortMatch, RocePacket, RoceRepr, UdpChecksum};
pub use sack::SackRepr;
pub use transport::TransportRepr;
pub use udp::UdpRepr;
