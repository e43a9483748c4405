//! Either IP version under a RoCEv2 UDP datagram.

use super::ipv4::{self, Ipv4Repr};
use super::ipv6::{self, Ipv6Repr};
use super::{Error, Result};

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum IpRepr {
    /// IPv4 (20-byte header).
    V4(Ipv4Repr),
    /// IPv6 (40-byte header).
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Header length in bytes: 20 or 40.
    pub const fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => ipv4::HEADER_LEN,
            IpRepr::V6(_) => ipv6::HEADER_LEN,
        }
    }

    /// Payload length in bytes (IPv4 total length − 20; IPv6 payload length).
    pub const fn payload_len(&self) -> u16 {
        match self {
            IpRepr::V4(r) => r.payload_len,
            IpRepr::V6(r) => r.payload_len,
        }
    }

    /// Sets the payload length in bytes.
    pub fn set_payload_len(&mut self, len: u16) {
        match self {
            IpRepr::V4(r) => r.payload_len = len,
            IpRepr::V6(r) => r.payload_len = len,
        }
    }

    /// Payload protocol / next header (17 = UDP).
    pub const fn protocol(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.protocol,
            IpRepr::V6(r) => r.next_header,
        }
    }

    /// ECN codepoint (low 2 bits of TOS / traffic class).
    pub const fn ecn(&self) -> u8 {
        match self {
            IpRepr::V4(r) => r.ecn,
            IpRepr::V6(r) => r.traffic_class & 3,
        }
    }

    /// Largest payload the header's length field can describe (bytes).
    pub const fn max_payload_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => u16::MAX as usize - ipv4::HEADER_LEN,
            IpRepr::V6(_) => u16::MAX as usize,
        }
    }

    /// Checks the values that do not fit their fields (see [`Ipv4Repr::check`],
    /// [`Ipv6Repr::check`]).
    ///
    /// # Errors
    /// [`Error::BadField`] / [`Error::BadLength`].
    pub fn check(&self) -> Result<()> {
        match self {
            IpRepr::V4(r) => r.check(),
            IpRepr::V6(r) => r.check(),
        }
    }

    /// Writes the header (IPv4 with its checksum) into the start of `buf` and returns its length.
    ///
    /// # Errors
    /// [`Error::Truncated`] when `buf` is shorter than [`header_len`](Self::header_len).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let hl = self.header_len();
        if buf.len() < hl {
            return Err(Error::Truncated);
        }
        match self {
            IpRepr::V4(r) => r.emit(&mut ipv4::Packet::new_unchecked(&mut buf[..hl])),
            IpRepr::V6(r) => r.emit(&mut ipv6::Packet::new_unchecked(&mut buf[..hl])),
        }
        Ok(hl)
    }
}

impl From<Ipv4Repr> for IpRepr {
    fn from(r: Ipv4Repr) -> IpRepr {
        IpRepr::V4(r)
    }
}

impl From<Ipv6Repr> for IpRepr {
    fn from(r: Ipv6Repr) -> IpRepr {
        IpRepr::V6(r)
    }
}
