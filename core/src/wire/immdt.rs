//! Immediate Data Extended Transport Header (ImmDt): 4 bytes of opaque immediate data
//! (IBTA vol. 1 §9.3.6; rxe_hdr.h `struct rxe_immdt`).
//!
//! The value is carried unchanged from the sender's work request to the receiver's completion.
//! This crate reads it as a big-endian `u32` (the bytes in wire order, as `ibv_wc.imm_data` keeps
//! them in network order).

use super::{read_u32, write_u32, Result};

mod field {
    use crate::wire::Field;

    pub const IMM: Field = 0..4;
}

/// Length of an ImmDt header in bytes.
pub const HEADER_LEN: usize = field::IMM.end;

fixed_header_view!("ImmDt header");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The immediate data, bytes 0–3 read big-endian.
    #[inline]
    pub fn imm(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the immediate data (written big-endian).
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::IMM, v)
    }
}

/// The parsed form of an ImmDt header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ImmDtRepr {
    /// Immediate data, the 4 wire bytes read big-endian.
    pub imm: u32,
}

impl ImmDtRepr {
    /// Parses an ImmDt header.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) when fewer than 4 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<ImmDtRepr> {
        packet.check_len()?;
        Ok(ImmDtRepr { imm: packet.imm() })
    }

    /// Length of the emitted header: 4 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 4 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_imm(self.imm)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::Error;

    static BYTES: [u8; 4] = [0x12, 0x34, 0x56, 0x78];

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.imm(), 0x1234_5678);
        let r = ImmDtRepr::parse(&p).unwrap();
        assert_eq!(r, ImmDtRepr { imm: 0x1234_5678 });
        let mut buf = [0u8; 4];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..3]).unwrap_err(),
            Error::Truncated
        );
    }
}
