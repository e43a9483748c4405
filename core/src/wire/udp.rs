//! UDP header, 8 bytes (RFC 768; IPv6 pseudo-header RFC 8200 §8.1).
//!
//! RoCEv2 uses destination port 4791; the source port is per-QP flow entropy. rxe transmits a
//! zero checksum for IPv4 and IPv6 (rxe_net.c `prepare_udp_hdr`); other senders fill it in. The
//! ICRC masks it either way, so receivers accept both.

use super::checksum;
use super::ip::IpRepr;
use super::{read_u16, write_u16, Error, Result};

/// The RoCEv2 UDP destination port (IANA "roce", rxe_net.c `ROCE_V2_UDP_DPORT`).
pub const ROCE_V2_PORT: u16 = 4791;

pub(crate) mod field {
    use crate::wire::Field;

    pub const SRC_PORT: Field = 0..2;
    pub const DST_PORT: Field = 2..4;
    pub const LENGTH: Field = 4..6;
    pub const CHECKSUM: Field = 6..8;
}

/// Length of a UDP header.
pub const HEADER_LEN: usize = field::CHECKSUM.end;

/// Offset of the checksum, which the RoCEv2 ICRC masks to 0xFFFF.
pub const CHECKSUM_OFFSET: usize = field::CHECKSUM.start;

/// A read/write view of a UDP datagram.
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

    /// Checks the buffer against the length field: ≥ 8 bytes, length field ≥ 8 and ≤ buffer.
    /// Afterwards no accessor panics.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than 8 bytes or the length field;
    /// [`Error::BadLength`] when the length field is below 8.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(self.len());
        if l < HEADER_LEN {
            Err(Error::BadLength)
        } else if len < l {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source port.
    #[inline]
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination port.
    #[inline]
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length field: header + payload in bytes.
    #[inline]
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// `true` when the length field says there is no payload.
    #[inline]
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum as on the wire (0 = not computed).
    #[inline]
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// `true` when the checksum is 0 (not computed) or verifies over the pseudo-header of `ip`
    /// and the `len()` bytes of the datagram.
    ///
    /// # Fuzzing
    /// Built with `cfg(fuzzing)` this always returns `true`.
    pub fn verify_checksum(&self, ip: &IpRepr) -> bool {
        if cfg!(fuzzing) || self.checksum() == 0 {
            return true;
        }
        let l = usize::from(self.len()).min(self.buffer.as_ref().len());
        let acc = checksum::sum(pseudo_header_sum(ip, l as u32), &self.buffer.as_ref()[..l]);
        checksum::finish(acc) == 0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The payload (`len() - 8` bytes), outliving the view.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        let l = usize::from(Packet::new_unchecked(b).len());
        &b[HEADER_LEN..l]
    }

    /// The 8 header bytes.
    #[inline]
    pub fn header(&self) -> &'a [u8] {
        &self.buffer.as_ref()[..HEADER_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the source port.
    #[inline]
    pub fn set_src_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, v)
    }

    /// Sets the destination port.
    #[inline]
    pub fn set_dst_port(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, v)
    }

    /// Sets the length field (invalidates [`check_len`](Packet::check_len)).
    #[inline]
    pub fn set_len(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::LENGTH, v)
    }

    /// Writes a raw checksum value.
    #[inline]
    pub fn set_checksum(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, v)
    }

    /// Computes the checksum over the pseudo-header of `ip` and the first `len()` bytes of the
    /// buffer and writes it (0 is sent as 0xFFFF, RFC 768). Panics if the buffer is shorter
    /// than `len()`.
    pub fn fill_checksum(&mut self, ip: &IpRepr) {
        self.set_checksum(0);
        let l = usize::from(self.len());
        let acc = checksum::sum(pseudo_header_sum(ip, l as u32), &self.buffer.as_ref()[..l]);
        let c = match checksum::finish(acc) {
            0 => 0xffff,
            c => c,
        };
        self.set_checksum(c)
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

/// Running sum of the IPv4 (RFC 768) or IPv6 (RFC 8200 §8.1) pseudo-header for a UDP datagram
/// of `udp_len` bytes.
fn pseudo_header_sum(ip: &IpRepr, udp_len: u32) -> u32 {
    match ip {
        IpRepr::V4(r) => {
            let acc = checksum::sum(0, &r.src.octets());
            let acc = checksum::sum(acc, &r.dst.octets());
            let acc = checksum::sum(acc, &[0, r.protocol]);
            checksum::sum(acc, &(udp_len as u16).to_be_bytes())
        }
        IpRepr::V6(r) => {
            let acc = checksum::sum(0, &r.src.octets());
            let acc = checksum::sum(acc, &r.dst.octets());
            let acc = checksum::sum(acc, &udp_len.to_be_bytes());
            checksum::sum(acc, &[0, 0, 0, r.next_header])
        }
    }
}

/// The parsed form of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct UdpRepr {
    /// Source port (RoCEv2: per-QP flow entropy).
    pub src_port: u16,
    /// Destination port (RoCEv2: 4791).
    pub dst_port: u16,
    /// Payload length in bytes (length field − 8).
    pub payload_len: u16,
    /// Checksum as on the wire; 0 = none (what rxe sends).
    pub checksum: u16,
}

impl UdpRepr {
    /// Parses the header. The checksum is not verified (RoCEv2 relies on the ICRC; see
    /// [`Packet::verify_checksum`] to check it).
    ///
    /// # Errors
    /// As [`Packet::check_len`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<UdpRepr> {
        packet.check_len()?;
        Ok(UdpRepr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.len() - HEADER_LEN as u16,
            checksum: packet.checksum(),
        })
    }

    /// Header length: 8 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks that the length field can hold `payload_len + 8`.
    ///
    /// # Errors
    /// [`Error::BadLength`] when it cannot.
    pub fn check(&self) -> Result<()> {
        if usize::from(self.payload_len) + HEADER_LEN > usize::from(u16::MAX) {
            Err(Error::BadLength)
        } else {
            Ok(())
        }
    }

    /// Writes the header with `self.checksum` as given into the start of `packet`
    /// (panics if shorter than 8 bytes). Use [`Packet::fill_checksum`] after writing the payload
    /// to compute a real checksum.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_len(self.payload_len.wrapping_add(HEADER_LEN as u16));
        packet.set_checksum(self.checksum);
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::ipv4::Ipv4Repr;
    use core::net::Ipv4Addr;

    // TV1's UDP datagram (scapy roce.uts "RoCE layer"): 49152 -> 4791, length 44, checksum 0xACA2.
    static DATAGRAM: [u8; 44] = [
        0xc0, 0x00, 0x12, 0xb7, 0x00, 0x2c, 0xac, 0xa2, 0x24, 0x60, 0xff, 0xff, 0x00, 0x00, 0x00,
        0xd3, 0x00, 0xcf, 0x17, 0x10, 0x46, 0x30, 0x81, 0x8b, 0xe2, 0x89, 0x35, 0xd9, 0x0e, 0x9a,
        0x95, 0x50, 0x54, 0x01, 0xbe, 0x88, 0x5e, 0x50, 0x00, 0x00, 0x78, 0xf3, 0x53, 0xf3,
    ];

    fn ip() -> IpRepr {
        IpRepr::V4(Ipv4Repr {
            src: Ipv4Addr::new(192, 168, 0, 7),
            dst: Ipv4Addr::new(192, 168, 0, 7),
            dscp: 0,
            ecn: 1,
            ident: 0x0478,
            dont_frag: true,
            ttl: 64,
            protocol: 17,
            payload_len: 44,
        })
    }

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&DATAGRAM[..]).unwrap();
        assert_eq!(p.src_port(), 49152);
        assert_eq!(p.dst_port(), ROCE_V2_PORT);
        assert_eq!(p.len(), 44);
        assert_eq!(p.payload().len(), 36);
        assert!(p.verify_checksum(&ip()));
        let r = UdpRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 49152,
                dst_port: 4791,
                payload_len: 36,
                checksum: 0xaca2
            }
        );
        let mut out = DATAGRAM;
        out[..8].fill(0);
        let mut q = Packet::new_unchecked(&mut out[..]);
        UdpRepr { checksum: 0, ..r }.emit(&mut q);
        q.fill_checksum(&ip());
        assert_eq!(out, DATAGRAM);
    }

    #[test]
    fn test_errors() {
        assert_eq!(
            Packet::new_checked(&DATAGRAM[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&DATAGRAM[..43]).unwrap_err(),
            Error::Truncated
        );
        let mut b = DATAGRAM;
        b[5] = 7;
        assert_eq!(Packet::new_checked(&b[..]).unwrap_err(), Error::BadLength);
        let mut c = DATAGRAM;
        c[20] ^= 0x10;
        assert!(!Packet::new_checked(&c[..]).unwrap().verify_checksum(&ip()));
        c[6] = 0;
        c[7] = 0;
        assert!(Packet::new_checked(&c[..]).unwrap().verify_checksum(&ip()));
    }
}
