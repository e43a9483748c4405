//! rdmesh selective-acknowledgement block (SACK): an extension of the RC ACKNOWLEDGE packet
//! used only between two rdmesh QPs that negotiated selective repeat (IRN, Mittal et al.,
//! SIGCOMM'18, §3.1 "selective acknowledgements"; `docs/reliability.md`). 36 bytes, carried as
//! the payload of an ACKNOWLEDGE whose AETH is a NAK "PSN sequence error" for `base`.
//!
//! ```text
//! byte 0: version (2) | bytes 1-3: base PSN (24 bits, big-endian)
//! bytes 4-35: bitmap (256 bits, big-endian): bit i (i = 0 is the least significant bit) set
//!             when the responder holds PSN base + i; bit 0 is always clear (base is missing)
//! ```
//! Version 1 (a 128-bit bitmap, 20 bytes) was never sent by a released rdmesh and is not
//! accepted. IBTA ACKNOWLEDGE packets carry no payload, so an IBTA peer never sees one: rdmesh
//! sends it only after the out-of-band negotiation of the extension.

use super::{read_u24, write_u24, Error, Psn, Result};

mod field {
    use crate::wire::Field;

    pub const VERSION: usize = 0;
    pub const BASE: Field = 1..4;
    /// Bits 128..256 of the bitmap.
    pub const BITMAP_HI: Field = 4..20;
    /// Bits 0..128 of the bitmap.
    pub const BITMAP_LO: Field = 20..36;
}

/// Length of a SACK block in bytes.
pub const HEADER_LEN: usize = field::BITMAP_LO.end;

/// The only version accepted.
pub const VERSION: u8 = 2;

/// PSNs one block covers (the selective-repeat window).
pub const SACK_PSNS: u32 = 256;

fixed_header_view!("SACK block");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Format version (byte 0).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }

    /// First missing PSN at the responder (bytes 1–3).
    #[inline]
    pub fn base(&self) -> Psn {
        Psn::new(read_u24(self.buffer.as_ref(), field::BASE))
    }

    /// Bitmap of held PSNs from `base` (bytes 4–35, big-endian): `[bits 0..128, bits
    /// 128..256]`.
    #[inline]
    pub fn bitmap(&self) -> [u128; 2] {
        let word = |f: crate::wire::Field| {
            let mut b = [0u8; 16];
            b.copy_from_slice(&self.buffer.as_ref()[f]);
            u128::from_be_bytes(b)
        };
        [word(field::BITMAP_LO), word(field::BITMAP_HI)]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the version byte.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }

    /// Sets the base PSN.
    #[inline]
    pub fn set_base(&mut self, v: Psn) {
        write_u24(self.buffer.as_mut(), field::BASE, v.value())
    }

    /// Sets the bitmap (`[bits 0..128, bits 128..256]`).
    #[inline]
    pub fn set_bitmap(&mut self, v: [u128; 2]) {
        self.buffer.as_mut()[field::BITMAP_LO].copy_from_slice(&v[0].to_be_bytes());
        self.buffer.as_mut()[field::BITMAP_HI].copy_from_slice(&v[1].to_be_bytes());
    }
}

/// The parsed form of a SACK block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SackRepr {
    /// The responder's expected PSN: the first PSN it does not hold.
    pub base: Psn,
    /// Bit i set: the responder holds PSN `base + i` (placed or deferred); `held[0]` holds
    /// bits 0..128, `held[1]` bits 128..256. Bit 0 is clear.
    pub held: [u128; 2],
}

impl SackRepr {
    /// Parses a SACK block: exactly [`HEADER_LEN`] bytes.
    ///
    /// # Errors
    /// [`Error::Truncated`] when shorter, [`Error::BadLength`] when longer,
    /// [`Error::BadVersion`] for a version other than 2, [`Error::BadField`] when bit 0 (the
    /// base PSN itself) is set.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<SackRepr> {
        packet.check_len()?;
        if packet.buffer.as_ref().len() != HEADER_LEN {
            return Err(Error::BadLength);
        }
        if packet.version() != VERSION {
            return Err(Error::BadVersion);
        }
        let held = packet.bitmap();
        if held[0] & 1 != 0 {
            return Err(Error::BadField);
        }
        Ok(SackRepr {
            base: packet.base(),
            held,
        })
    }

    /// Length of the emitted block: 36 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the block into the first 36 bytes of `packet` (panics if shorter); bit 0 is
    /// written clear.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_version(VERSION);
        packet.set_base(self.base);
        packet.set_bitmap([self.held[0] & !1, self.held[1]]);
    }

    /// `true` when the block says PSN `psn` is held.
    pub fn holds(&self, psn: Psn) -> bool {
        let d = psn.distance_from(self.base);
        d < SACK_PSNS && self.held[(d / 128) as usize] >> (d % 128) & 1 == 1
    }

    /// The highest held PSN, if any.
    pub fn highest(&self) -> Option<Psn> {
        if self.held[1] != 0 {
            Some(self.base.add(255 - self.held[1].leading_zeros()))
        } else {
            (self.held[0] != 0).then(|| self.base.add(127 - self.held[0].leading_zeros()))
        }
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn parse_emit_and_errors() {
        let r = SackRepr {
            base: Psn::new(0xff_fffe),
            held: [0b1010_0110, 1 << 127 | 1],
        };
        let mut buf = [0u8; HEADER_LEN];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[..5], &[2, 0xff, 0xff, 0xfe, 0x80]);
        assert_eq!(buf[19], 0x01, "bit 128");
        assert_eq!(buf[35], 0xa6);
        assert_eq!(SackRepr::parse(&Packet::new_unchecked(&buf[..])), Ok(r));
        assert!(r.holds(Psn::new(0xff_ffff)));
        assert!(r.holds(Psn::new(5)), "wraps");
        assert!(r.holds(Psn::new(0xff_fffe).add(128)));
        assert!(r.holds(Psn::new(0xff_fffe).add(255)));
        assert!(!r.holds(Psn::new(0xff_fffe).add(254)));
        assert!(!r.holds(Psn::new(0xff_fffe).add(256)), "beyond the block");
        assert!(!r.holds(Psn::new(0xff_fffe)));
        assert!(!r.holds(Psn::new(0xff_fffd)), "before the base");
        assert_eq!(r.highest(), Some(Psn::new(0xff_fffe).add(255)));
        let low = SackRepr {
            held: [0b1010_0110, 0],
            ..r
        };
        assert_eq!(low.highest(), Some(Psn::new(5)));
        assert_eq!(SackRepr::default().highest(), None);
        let p = |b: &[u8]| SackRepr::parse(&Packet::new_unchecked(b));
        assert_eq!(p(&buf[..35]), Err(Error::Truncated));
        assert_eq!(p(&buf[..20]), Err(Error::Truncated), "a version-1 block");
        let mut long = [0u8; 37];
        long[..36].copy_from_slice(&buf);
        assert_eq!(p(&long), Err(Error::BadLength));
        let mut v = buf;
        v[0] = 1;
        assert_eq!(p(&v), Err(Error::BadVersion));
        let mut b0 = buf;
        b0[35] |= 1;
        assert_eq!(p(&b0), Err(Error::BadField));
    }
}
