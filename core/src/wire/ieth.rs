//! Invalidate Extended Transport Header (IETH): 4 bytes, the R_Key to invalidate
//! (IBTA vol. 1 §9.3.7; rxe_hdr.h `struct rxe_ieth`). Carried by SEND Last/Only with Invalidate.

use super::{read_u32, write_u32, Result};

mod field {
    use crate::wire::Field;

    pub const RKEY: Field = 0..4;
}

/// Length of an IETH in bytes.
pub const HEADER_LEN: usize = field::RKEY.end;

fixed_header_view!("IETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The R_Key to invalidate (bytes 0–3, big-endian).
    #[inline]
    pub fn rkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RKEY)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the R_Key to invalidate.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RKEY, v)
    }
}

/// The parsed form of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IethRepr {
    /// R_Key to invalidate.
    pub rkey: u32,
}

impl IethRepr {
    /// Parses an IETH.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) when fewer than 4 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<IethRepr> {
        packet.check_len()?;
        Ok(IethRepr {
            rkey: packet.rkey(),
        })
    }

    /// Length of the emitted header: 4 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the IETH into the first 4 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_rkey(self.rkey)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::Error;

    static BYTES: [u8; 4] = [0x00, 0x00, 0x02, 0xb8];

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.rkey(), 0x2b8);
        let r = IethRepr::parse(&p).unwrap();
        let mut buf = [0xffu8; 4];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..0]).unwrap_err(),
            Error::Truncated
        );
    }
}
