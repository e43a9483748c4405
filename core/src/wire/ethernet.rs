//! Ethernet II header with an optional IEEE 802.1Q VLAN tag (IEEE 802.3 §3.2; IEEE 802.1Q §9.6).
//!
//! ```text
//! untagged: dst(6) | src(6) | EtherType(2)                         = 14 bytes
//! tagged:   dst(6) | src(6) | 0x8100(2) | TCI(2) | EtherType(2)    = 18 bytes
//! TCI = PCP(3 bits) | DEI(1 bit) | VID(12 bits), big-endian
//! ```
//! Only one tag is understood; an S-tag (0x88A8) or a second tag shows up as the EtherType.
//! The FCS is not part of the buffers this crate handles (NICs and sockets strip it).

use super::{read_u16, write_u16, Error, Result};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType (TPID) of an IEEE 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// EtherType of RoCE v1 (IB GRH directly over Ethernet); not handled by this crate.
pub const ETHERTYPE_ROCE_V1: u16 = 0x8915;

mod field {
    use crate::wire::Field;

    pub const DST: Field = 0..6;
    pub const SRC: Field = 6..12;
    pub const ETHERTYPE: Field = 12..14;
    /// Tag control information when ETHERTYPE is 0x8100.
    pub const TCI: Field = 14..16;
    /// Inner EtherType when tagged.
    pub const INNER_ETHERTYPE: Field = 16..18;

    pub const PCP_SHIFT: u32 = 13;
    pub const DEI: u16 = 0x1000;
    pub const VID_MASK: u16 = 0x0fff;
}

/// Length of an untagged Ethernet II header.
pub const HEADER_LEN: usize = field::ETHERTYPE.end;
/// Length of an Ethernet II header with one 802.1Q tag.
pub const TAGGED_HEADER_LEN: usize = field::INNER_ETHERTYPE.end;

/// A read/write view of an Ethernet II frame (without FCS).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer and checks it holds the whole header ([`check_len`](Self::check_len)).
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than 14 bytes, or 18 when tagged.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks the buffer holds the whole header including the VLAN tag if the outer EtherType
    /// says 0x8100; afterwards no accessor panics.
    ///
    /// # Errors
    /// [`Error::Truncated`] when it does not.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length: 14, or 18 with a VLAN tag. Needs at least 14 bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.is_tagged() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Destination MAC address (bytes 0–5).
    #[inline]
    pub fn dst_addr(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST]);
        a
    }

    /// Source MAC address (bytes 6–11).
    #[inline]
    pub fn src_addr(&self) -> [u8; 6] {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC]);
        a
    }

    /// The EtherType at bytes 12–13 (0x8100 when tagged).
    #[inline]
    pub fn outer_ethertype(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::ETHERTYPE)
    }

    /// `true` when an 802.1Q tag follows the source address.
    #[inline]
    pub fn is_tagged(&self) -> bool {
        self.outer_ethertype() == ETHERTYPE_VLAN
    }

    /// The 802.1Q tag, if any.
    #[inline]
    pub fn vlan(&self) -> Option<VlanTag> {
        if self.is_tagged() {
            Some(VlanTag::from_tci(read_u16(
                self.buffer.as_ref(),
                field::TCI,
            )))
        } else {
            None
        }
    }

    /// EtherType of the payload (inner one when tagged).
    #[inline]
    pub fn ethertype(&self) -> u16 {
        if self.is_tagged() {
            read_u16(self.buffer.as_ref(), field::INNER_ETHERTYPE)
        } else {
            self.outer_ethertype()
        }
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The bytes after the header (including any trailing Ethernet padding), outliving the view.
    #[inline]
    pub fn payload(&self) -> &'a [u8] {
        let b = self.buffer.as_ref();
        &b[Packet::new_unchecked(b).header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the destination MAC address.
    #[inline]
    pub fn set_dst_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::DST].copy_from_slice(&a)
    }

    /// Sets the source MAC address.
    #[inline]
    pub fn set_src_addr(&mut self, a: [u8; 6]) {
        self.buffer.as_mut()[field::SRC].copy_from_slice(&a)
    }

    /// Sets the tag and payload EtherType: writes 0x8100 + TCI + `ethertype` when `vlan` is
    /// `Some` (needs 18 bytes), else `ethertype` at bytes 12–13.
    #[inline]
    pub fn set_vlan_and_ethertype(&mut self, vlan: Option<VlanTag>, ethertype: u16) {
        let b = self.buffer.as_mut();
        match vlan {
            Some(tag) => {
                write_u16(b, field::ETHERTYPE, ETHERTYPE_VLAN);
                write_u16(b, field::TCI, tag.tci());
                write_u16(b, field::INNER_ETHERTYPE, ethertype);
            }
            None => write_u16(b, field::ETHERTYPE, ethertype),
        }
    }

    /// The bytes after the header, writable.
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

/// An IEEE 802.1Q tag's control information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct VlanTag {
    /// Priority code point, 0..=7 (RoCE traffic class for PFC).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 0..=4095.
    pub vid: u16,
}

impl VlanTag {
    /// Decodes a 16-bit TCI.
    pub const fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> field::PCP_SHIFT) as u8,
            dei: tci & field::DEI != 0,
            vid: tci & field::VID_MASK,
        }
    }

    /// Encodes the 16-bit TCI (fields truncated to their widths).
    pub const fn tci(&self) -> u16 {
        (((self.pcp & 7) as u16) << field::PCP_SHIFT)
            | if self.dei { field::DEI } else { 0 }
            | (self.vid & field::VID_MASK)
    }
}

/// The parsed form of an Ethernet II header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EthernetRepr {
    /// Destination MAC address.
    pub dst: [u8; 6],
    /// Source MAC address.
    pub src: [u8; 6],
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// EtherType of the payload (0x0800 IPv4, 0x86DD IPv6).
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer cannot hold the header (and tag).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<EthernetRepr> {
        packet.check_len()?;
        Ok(EthernetRepr {
            dst: packet.dst_addr(),
            src: packet.src_addr(),
            vlan: packet.vlan(),
            ethertype: packet.ethertype(),
        })
    }

    /// Header length: 14, or 18 with a VLAN tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            TAGGED_HEADER_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Checks the values that do not fit their fields.
    ///
    /// # Errors
    /// [`Error::BadField`] when the VLAN PCP > 7 or VID > 4095, or the EtherType is 0x8100
    /// (the tag belongs in `vlan`).
    pub fn check(&self) -> Result<()> {
        if self.ethertype == ETHERTYPE_VLAN {
            return Err(Error::BadField);
        }
        match self.vlan {
            Some(t) if t.pcp > 7 || t.vid > field::VID_MASK => Err(Error::BadField),
            _ => Ok(()),
        }
    }

    /// Writes the header into the start of `packet` (panics if shorter than `buffer_len()`).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_dst_addr(self.dst);
        packet.set_src_addr(self.src);
        packet.set_vlan_and_ethertype(self.vlan, self.ethertype);
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // Start of TV1 (scapy roce.uts): untagged IPv4.
    static UNTAGGED: [u8; 16] = [
        0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22, 0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22, 0x08, 0x00, 0x45,
        0x01,
    ];
    static TAGGED: [u8; 19] = [
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x81, 0x00, 0xb0,
        0x64, 0x86, 0xdd, 0x60,
    ];

    #[test]
    fn test_untagged() {
        let p = Packet::new_checked(&UNTAGGED[..]).unwrap();
        assert_eq!(p.header_len(), 14);
        let r = EthernetRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            EthernetRepr {
                dst: [0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22],
                src: [0x24, 0x8a, 0x07, 0xa8, 0xfa, 0x22],
                vlan: None,
                ethertype: ETHERTYPE_IPV4,
            }
        );
        assert_eq!(p.payload(), &[0x45, 0x01]);
        let mut buf = [0u8; 14];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, UNTAGGED[..14]);
    }

    #[test]
    fn test_tagged() {
        let p = Packet::new_checked(&TAGGED[..]).unwrap();
        let r = EthernetRepr::parse(&p).unwrap();
        // TCI 0xb064: PCP 5, DEI 1, VID 100.
        assert_eq!(
            r.vlan,
            Some(VlanTag {
                pcp: 5,
                dei: true,
                vid: 100
            })
        );
        assert_eq!(r.ethertype, ETHERTYPE_IPV6);
        assert_eq!(r.buffer_len(), 18);
        assert_eq!(p.payload(), &[0x60]);
        let mut buf = [0u8; 18];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, TAGGED[..18]);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&UNTAGGED[..13]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            Packet::new_checked(&TAGGED[..17]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn test_check() {
        let mut r = EthernetRepr {
            dst: [0; 6],
            src: [0; 6],
            vlan: Some(VlanTag {
                pcp: 8,
                dei: false,
                vid: 1,
            }),
            ethertype: ETHERTYPE_IPV4,
        };
        assert_eq!(r.check(), Err(Error::BadField));
        r.vlan = Some(VlanTag {
            pcp: 7,
            dei: false,
            vid: 4096,
        });
        assert_eq!(r.check(), Err(Error::BadField));
        r.vlan = None;
        assert_eq!(r.check(), Ok(()));
        r.ethertype = ETHERTYPE_VLAN;
        assert_eq!(r.check(), Err(Error::BadField));
    }
}
