//! IPv4 header without options (RFC 791 §3.1; DSCP/ECN per RFC 2474 and RFC 3168 §5).
//!
//! ```text
//!  0        1        2        3
//! |Ver|IHL | DSCP|ECN|   Total Length  |
//! |  Identification  |Flg| Frag Offset |
//! |  TTL   | Proto  | Header Checksum  |
//! |          Source Address            |
//! |        Destination Address         |
//! ```
//! RoCEv2 senders use a 20-byte header (rxe builds no options and drops packets with them,
//! rxe_net.c), never fragment (DF set), and put the ECN codepoint in the TOS byte.

use core::net::Ipv4Addr;

use super::checksum;
use super::{read_u16, write_u16, Error, Result};

/// IP protocol number of UDP.
pub const PROTOCOL_UDP: u8 = 17;

pub(crate) mod field {
    use crate::wire::Field;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const LENGTH: Field = 2..4;
    pub const IDENT: Field = 4..6;
    pub const FLG_OFF: Field = 6..8;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: Field = 10..12;
    pub const SRC_ADDR: Field = 12..16;
    pub const DST_ADDR: Field = 16..20;

    pub const FLG_RESERVED: u16 = 0x8000;
    pub const FLG_DF: u16 = 0x4000;
    pub const FLG_MF: u16 = 0x2000;
    pub const FRAG_OFF_MASK: u16 = 0x1fff;
}

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = field::DST_ADDR.end;

/// Byte offsets inside the header that the RoCEv2 ICRC replaces with 0xFF: TOS (1), TTL (8),
/// header checksum (10–11) (RoCEv2 Annex A17.8; rxe_icrc.c).
pub const ICRC_MASKED_BYTES: [usize; 4] = [field::DSCP_ECN, field::TTL, 10, 11];

/// A read/write view of an IPv4 packet.
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

    /// Checks the buffer against the length fields: at least 20 bytes, IHL ≥ 5, the header and
    /// the total length fit in the buffer, and total length ≥ header length. Trailing bytes
    /// beyond the total length (Ethernet padding) are allowed. Afterwards no accessor panics.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than the header or the total length;
    /// [`Error::BadLength`] when IHL < 5 or total length < header length.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let hl = self.header_len();
        let tl = usize::from(self.total_len());
        if hl < HEADER_LEN || tl < hl {
            return Err(Error::BadLength);
        }
        if len < hl || len < tl {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version nibble (4 for IPv4).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// Header length in bytes (IHL × 4).
    #[inline]
    pub fn header_len(&self) -> usize {
        usize::from(self.buffer.as_ref()[field::VER_IHL] & 0x0f) * 4
    }

    /// DSCP, 6 bits (TOS bits 7:2).
    #[inline]
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// ECN codepoint, 2 bits (TOS bits 1:0): 00 Not-ECT, 10 ECT(0), 01 ECT(1), 11 CE.
    #[inline]
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total length in bytes (header + payload).
    #[inline]
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Identification.
    #[inline]
    pub fn ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Don't Fragment flag.
    #[inline]
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & field::FLG_DF != 0
    }

    /// More Fragments flag.
    #[inline]
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & field::FLG_MF != 0
    }

    /// The reserved ("evil") flag bit.
    #[inline]
    pub fn reserved_flag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & field::FLG_RESERVED != 0
    }

    /// Fragment offset in bytes (field × 8).
    #[inline]
    pub fn frag_offset(&self) -> u16 {
        (read_u16(self.buffer.as_ref(), field::FLG_OFF) & field::FRAG_OFF_MASK) << 3
    }

    /// Time to live (hops).
    #[inline]
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol of the payload (17 = UDP).
    #[inline]
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[field::PROTOCOL]
    }

    /// Header checksum as on the wire.
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source address.
    #[inline]
    pub fn src_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::SRC_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// Destination address.
    #[inline]
    pub fn dst_addr(&self) -> Ipv4Addr {
        let b = &self.buffer.as_ref()[field::DST_ADDR];
        Ipv4Addr::new(b[0], b[1], b[2], b[3])
    }

    /// `true` when the header checksum verifies over `header_len()` bytes.
    ///
    /// # Fuzzing
    /// Built with `cfg(fuzzing)` this always returns `true`, so fuzzers reach the layers above.
    pub fn verify_checksum(&self) -> bool {
        if cfg!(fuzzing) {
            return true;
        }
        let hl = self.header_len().min(self.buffer.as_ref().len());
        checksum::finish(checksum::sum(0, &self.buffer.as_ref()[..hl])) == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload: bytes from the header end to the total length (excluding Ethernet padding).
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let p = Packet::new_unchecked(b);
        &b[p.header_len()..usize::from(p.total_len())]
    }

    /// The header bytes (IHL × 4).
    #[inline]
    pub fn header(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[..Packet::new_unchecked(b).header_len()]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets version 4 and IHL from a header length in bytes (÷ 4).
    #[inline]
    pub fn set_version_and_header_len(&mut self, header_len: usize) {
        self.buffer.as_mut()[field::VER_IHL] = 0x40 | ((header_len / 4) as u8 & 0x0f);
    }

    /// Sets DSCP (6 bits) and ECN (2 bits).
    #[inline]
    pub fn set_dscp_ecn(&mut self, dscp: u8, ecn: u8) {
        self.buffer.as_mut()[field::DSCP_ECN] = (dscp << 2) | (ecn & 0x03);
    }

    /// Sets the total length (invalidates [`check_len`](Packet::check_len)).
    #[inline]
    pub fn set_total_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, v)
    }

    /// Sets the identification.
    #[inline]
    pub fn set_ident(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, v)
    }

    /// Sets the flags (DF, MF; reserved 0) and the fragment offset in bytes (multiple of 8).
    #[inline]
    pub fn set_flags_and_frag_offset(&mut self, dont_frag: bool, more_frags: bool, offset: u16) {
        let v = if dont_frag { field::FLG_DF } else { 0 }
            | if more_frags { field::FLG_MF } else { 0 }
            | ((offset >> 3) & field::FRAG_OFF_MASK);
        write_u16(self.buffer.as_mut(), field::FLG_OFF, v)
    }

    /// Sets the TTL.
    #[inline]
    pub fn set_ttl(&mut self, v: u8) {
        self.buffer.as_mut()[field::TTL] = v
    }

    /// Sets the protocol.
    #[inline]
    pub fn set_protocol(&mut self, v: u8) {
        self.buffer.as_mut()[field::PROTOCOL] = v
    }

    /// Writes a raw checksum value.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v)
    }

    /// Sets the source address.
    #[inline]
    pub fn set_src_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&a.octets())
    }

    /// Sets the destination address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: Ipv4Addr) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&a.octets())
    }

    /// Computes and writes the header checksum over `header_len()` bytes.
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let hl = self.header_len();
        let c = checksum::finish(checksum::sum(0, &self.buffer.as_ref()[..hl]));
        self.set_checksum(c)
    }

    /// The payload area after the header, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let hl = self.header_len();
        &mut self.buffer.as_mut()[hl..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// The parsed form of a 20-byte IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// DSCP, 0..=63.
    pub dscp: u8,
    /// ECN codepoint, 0..=3 (RFC 3168: 0b10 ECT(0), 0b01 ECT(1), 0b11 CE).
    pub ecn: u8,
    /// Identification. The soft provider's sends carry 0 (see [`icrc::IcrcContext`](super::icrc::IcrcContext)).
    pub ident: u16,
    /// Don't Fragment; RoCEv2 senders set it.
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Payload protocol (17 = UDP).
    pub protocol: u8,
    /// Payload length in bytes (total length − 20).
    pub payload_len: u16,
}

impl Ipv4Repr {
    /// Parses a header. The reserved flag bit is ignored.
    ///
    /// # Errors
    /// - [`Error::Truncated`] / [`Error::BadLength`]: see [`Packet::check_len`].
    /// - [`Error::BadVersion`]: version ≠ 4.
    /// - [`Error::Ipv4Options`]: IHL > 5.
    /// - [`Error::Fragmented`]: MF set or fragment offset ≠ 0.
    /// - [`Error::BadChecksum`]: the header checksum does not verify (see [`Packet::verify_checksum`]).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Ipv4Repr> {
        if packet.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        if packet.version() != 4 {
            return Err(Error::BadVersion);
        }
        packet.check_len()?;
        if packet.header_len() > HEADER_LEN {
            return Err(Error::Ipv4Options);
        }
        if packet.more_frags() || packet.frag_offset() != 0 {
            return Err(Error::Fragmented);
        }
        if !packet.verify_checksum() {
            return Err(Error::BadChecksum);
        }
        Ok(Ipv4Repr {
            src: packet.src_addr(),
            dst: packet.dst_addr(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            ttl: packet.ttl(),
            protocol: packet.protocol(),
            payload_len: packet.total_len() - HEADER_LEN as u16,
        })
    }

    /// Header length: 20 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks the values that do not fit their fields.
    ///
    /// # Errors
    /// [`Error::BadField`] when DSCP > 63 or ECN > 3; [`Error::BadLength`] when
    /// `payload_len + 20` exceeds 65535.
    pub fn check(&self) -> Result<()> {
        if self.dscp > 63 || self.ecn > 3 {
            return Err(Error::BadField);
        }
        if usize::from(self.payload_len) + HEADER_LEN > usize::from(u16::MAX) {
            return Err(Error::BadLength);
        }
        Ok(())
    }

    /// Writes the 20-byte header (IHL 5, MF 0, offset 0, checksum computed) into the start of
    /// `packet` (panics if shorter than 20 bytes). Out-of-range values are truncated; see
    /// [`check`](Self::check).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        self.emit_unsummed(packet);
        packet.fill_checksum();
    }

    /// As [`emit`](Self::emit) but leaves the checksum field 0 (for the ICRC, which masks it).
    pub(crate) fn emit_unsummed<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        packet: &mut Packet<&mut T>,
    ) {
        packet.set_version_and_header_len(HEADER_LEN);
        packet.set_dscp_ecn(self.dscp, self.ecn);
        packet.set_total_len(self.payload_len.wrapping_add(HEADER_LEN as u16));
        packet.set_ident(self.ident);
        packet.set_flags_and_frag_offset(self.dont_frag, false, 0);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_checksum(0);
        packet.set_src_addr(self.src);
        packet.set_dst_addr(self.dst);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // TV2 (ConnectX-4 Lx CNP) IPv4 header: TOS 0xC2, total length 60, ID 0x718c, DF, TTL 64,
    // UDP, checksum 0x9161, 10.0.17.1 -> 10.0.18.1.
    static HEADER: [u8; 20] = [
        0x45, 0xc2, 0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11,
        0x01, 0x0a, 0x00, 0x12, 0x01,
    ];

    fn packet_bytes() -> [u8; 60] {
        let mut b = [0u8; 60];
        b[..20].copy_from_slice(&HEADER);
        b
    }

    fn repr() -> Ipv4Repr {
        Ipv4Repr {
            src: Ipv4Addr::new(10, 0, 17, 1),
            dst: Ipv4Addr::new(10, 0, 18, 1),
            dscp: 48,
            ecn: 2,
            ident: 0x718c,
            dont_frag: true,
            ttl: 64,
            protocol: PROTOCOL_UDP,
            payload_len: 40,
        }
    }

    #[test]
    fn test_deconstruct() {
        let b = packet_bytes();
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.version(), 4);
        assert_eq!(p.header_len(), 20);
        assert_eq!(p.dscp(), 48);
        assert_eq!(p.ecn(), 2);
        assert_eq!(p.total_len(), 60);
        assert_eq!(p.ident(), 0x718c);
        assert!(p.dont_frag() && !p.more_frags() && !p.reserved_flag());
        assert_eq!(p.frag_offset(), 0);
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.protocol(), 17);
        assert_eq!(p.checksum(), 0x9161);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 40);
        assert_eq!(p.header(), &HEADER);
    }

    #[test]
    fn test_parse_emit() {
        let b = packet_bytes();
        let r = Ipv4Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r, repr());
        let mut out = [0xffu8; 20];
        r.emit(&mut Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, HEADER);
    }

    #[test]
    fn test_errors() {
        let b = packet_bytes();
        // Truncated header / payload.
        assert_eq!(Packet::new_checked(&b[..19]).unwrap_err(), Error::Truncated);
        assert_eq!(Packet::new_checked(&b[..59]).unwrap_err(), Error::Truncated);
        // Trailing bytes (Ethernet padding) are fine.
        let mut long = [0u8; 64];
        long[..60].copy_from_slice(&b);
        let p = Packet::new_checked(&long[..]).unwrap();
        assert_eq!(p.payload().len(), 40);

        let parse = |bytes: &[u8]| Ipv4Repr::parse(&Packet::new_unchecked(bytes));
        let mut v = b;
        v[0] = 0x65;
        assert_eq!(parse(&v), Err(Error::BadVersion));
        let mut o = b;
        o[0] = 0x46;
        assert_eq!(parse(&o), Err(Error::Ipv4Options));
        let mut s = b;
        s[0] = 0x44;
        assert_eq!(parse(&s), Err(Error::BadLength));
        let mut l = b;
        l[3] = 19;
        assert_eq!(parse(&l), Err(Error::BadLength));
        let mut mf = b;
        mf[6] = 0x20;
        assert_eq!(parse(&mf), Err(Error::Fragmented));
        let mut off = b;
        off[7] = 0x01;
        assert_eq!(parse(&off), Err(Error::Fragmented));
        let mut c = b;
        c[11] ^= 1;
        assert_eq!(parse(&c), Err(Error::BadChecksum));
    }

    #[test]
    fn test_check() {
        assert_eq!(repr().check(), Ok(()));
        assert_eq!(
            Ipv4Repr { dscp: 64, ..repr() }.check(),
            Err(Error::BadField)
        );
        assert_eq!(Ipv4Repr { ecn: 4, ..repr() }.check(), Err(Error::BadField));
        assert_eq!(
            Ipv4Repr {
                payload_len: 65516,
                ..repr()
            }
            .check(),
            Err(Error::BadLength)
        );
    }
}
