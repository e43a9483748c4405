//! IPv6 fixed header, 40 bytes (RFC 8200 §3; traffic class DSCP/ECN per RFC 2474, RFC 3168).
//!
//! ```text
//! |Ver(4)|Traffic Class(8)|      Flow Label(20)       |
//! |   Payload Length(16)  | Next Header(8) | Hop Limit(8) |
//! |                 Source Address (16)               |
//! |              Destination Address (16)             |
//! ```
//! RoCEv2 over IPv6 has UDP directly as the next header; extension headers are not walked.

use core::net::Ipv6Addr;

use super::{read_u16, write_u16, Error, Result};

/// Next-header value of UDP.
pub const NEXT_HEADER_UDP: u8 = 17;

pub(crate) mod field {
    use crate::wire::Field;

    /// Version (4 bits), traffic class (8), flow label (20).
    pub const VER_TC_FLOW: Field = 0..4;
    pub const LENGTH: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LIMIT: usize = 7;
    pub const SRC_ADDR: Field = 8..24;
    pub const DST_ADDR: Field = 24..40;
}

/// Length of the IPv6 fixed header.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Largest flow label (20 bits).
pub const MAX_FLOW_LABEL: u32 = 0x000f_ffff;

/// The ICRC masks, in the first 4 bytes, the traffic class and flow label (all but the version
/// nibble), and the hop limit at byte 7 (RoCEv2 Annex A17.8; rxe_icrc.c).
pub const ICRC_HOP_LIMIT_BYTE: usize = field::HOP_LIMIT;

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking it.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and runs [`check_len`](Self::check_len).
    ///
    /// # Errors
    /// As [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the 40-byte header and the payload length; trailing bytes
    /// (Ethernet padding) are allowed. Afterwards no accessor panics.
    ///
    /// # Errors
    /// [`Error::Truncated`] when it does not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + usize::from(self.payload_len()) {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn word0(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::VER_TC_FLOW];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }

    /// Version nibble (6).
    #[inline]
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class (DSCP << 2 | ECN).
    #[inline]
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label, 20 bits.
    #[inline]
    pub fn flow_label(&self) -> u32 {
        self.word0() & MAX_FLOW_LABEL
    }

    /// Payload length in bytes (everything after the 40-byte header).
    #[inline]
    pub fn payload_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Next header (17 = UDP).
    #[inline]
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }

    /// Hop limit.
    #[inline]
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LIMIT]
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Ipv6Addr::from(a)
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Ipv6Addr::from(a)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload (payload length bytes after the header), outliving the view.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let n = usize::from(Packet::new_unchecked(b).payload_len());
        &b[HEADER_LEN..HEADER_LEN + n]
    }

    /// The 40 header bytes.
    #[inline]
    pub fn header(&self) -> &'a [u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes version 6, the traffic class and the flow label (low 20 bits).
    #[inline]
    pub fn set_version_tc_flow(&mut self, traffic_class: u8, flow_label: u32) {
        let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & MAX_FLOW_LABEL);
        self.buffer.as_mut()[field::VER_TC_FLOW].copy_from_slice(&w.to_be_bytes())
    }

    /// Sets the payload length (invalidates [`check_len`](Packet::check_len)).
    #[inline]
    pub fn set_payload_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, v)
    }

    /// Sets the next header.
    #[inline]
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v
    }

    /// Sets the hop limit.
    #[inline]
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LIMIT] = v
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets())
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv6Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets())
    }

    /// The payload area after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[HEADER_LEN..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of an IPv6 fixed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Ipv6Repr {
    /// Source address (for RoCEv2: the source GID).
    pub src: Ipv6Addr,
    /// Destination address (the destination GID).
    pub dst: Ipv6Addr,
    /// Traffic class: DSCP (bits 7:2) and ECN (bits 1:0).
    pub traffic_class: u8,
    /// Flow label, 20 bits.
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Next header (17 = UDP).
    pub next_header: u8,
    /// Payload length in bytes.
    pub payload_len: u16,
}

impl Ipv6Repr {
    /// Parses the fixed header.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than 40 bytes + payload length;
    /// [`Error::BadVersion`] when the version ≠ 6.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Ipv6Repr> {
        if packet.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if packet.version() != 6 {
            return Err(Error::BadVersion);
        }
        packet.check_len()?;
        Ok(Ipv6Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            hop_limit: packet.hop_limit(),
            next_header: packet.next_header(),
            payload_len: packet.payload_len(),
        })
    }

    /// Header length: 40 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks the values that do not fit their fields.
    ///
    /// # Errors
    /// [`Error::BadField`] when the flow label exceeds 20 bits.
    pub fn check(&self) -> Result<()> {
        if self.flow_label > MAX_FLOW_LABEL {
            Err(Error::BadField)
        } else {
            Ok(())
        }
    }

    /// Writes the 40-byte header into the start of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_version_tc_flow(self.traffic_class, self.flow_label);
        packet.set_payload_len(self.payload_len);
        packet.set_next_header(self.next_header);
        packet.set_hop_limit(self.hop_limit);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static HEADER: [u8; 40] = [
        0x61, 0x23, 0x45, 0x67, 0x00, 0x08, 0x11, 0x40, // ver/tc/flow, len 8, UDP, hop 64
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x02, 0xc9, 0xff, 0xfe, 0x00, 0x00, 0x01, // src
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x02, 0xc9, 0xff, 0xfe, 0x00, 0x00, 0x02, // dst
    ];

    fn repr() -> Ipv6Repr {
        Ipv6Repr {
            src: "fe80::202:c9ff:fe00:1".parse().unwrap(),
            dst: "fe80::202:c9ff:fe00:2".parse().unwrap(),
            traffic_class: 0x12,
            flow_label: 0x34567,
            hop_limit: 64,
            next_header: NEXT_HEADER_UDP,
            payload_len: 8,
        }
    }

    #[test]
    fn test_parse_emit() {
        let mut b = [0u8; 48];
        b[..40].copy_from_slice(&HEADER);
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 6);
        assert_eq!(p.traffic_class(), 0x12);
        assert_eq!(p.flow_label(), 0x34567);
        assert_eq!(p.payload().len(), 8);
        assert_eq!(p.header(), &HEADER);
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r, repr());
        let mut out = [0u8; 40];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, HEADER);
    }

    #[test]
    fn test_errors() {
        let mut b = [0u8; 48];
        b[..40].copy_from_slice(&HEADER);
        assert_eq!(Packet::new_checked(&b[..47]).unwrap_err(), Error::Truncated);
        assert_eq!(
            Ipv6Repr::parse(&Packet::new_unchecked(&b[..39])),
            Err(Error::Truncated)
        );
        b[0] = 0x41;
        assert_eq!(
            Ipv6Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::BadVersion)
        );
        assert_eq!(
            Ipv6Repr {
                flow_label: 1 << 20,
                ..repr()
            }
            .check(),
            Err(Error::BadField)
        );
    }
}
