//! Datagram Extended Transport Header: 8 bytes, Q_Key u32 + reserved u8 + SrcQP u24
//! (IBTA vol. 1 §9.3.2; rxe_hdr.h `struct rxe_deth`). Carried by UD sends.

use super::{read_u24, read_u32, write_u24, write_u32, Error, Result};

mod field {
    use crate::wire::Field;

    pub const QKEY: Field = 0..4;
    pub const RESERVED: usize = 4;
    pub const SRC_QP: Field = 5..8;
}

/// Length of a DETH in bytes.
pub const HEADER_LEN: usize = field::SRC_QP.end;

/// The well-known Q_Key of the GSI (QP1), `IB_QP1_QKEY`.
pub const GSI_QKEY: u32 = 0x8001_0000;

fixed_header_view!("DETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Q_Key (bytes 0–3).
    #[inline]
    pub fn qkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::QKEY)
    }

    /// Reserved byte 4 (transmitted 0).
    #[inline]
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED]
    }

    /// Source QP number, 24 bits (bytes 5–7).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::SRC_QP)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the Q_Key.
    #[inline]
    pub fn set_qkey(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::QKEY, v)
    }

    /// Sets the reserved byte.
    #[inline]
    pub fn set_reserved(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESERVED] = v
    }

    /// Sets the source QP from the low 24 bits of `v`.
    #[inline]
    pub fn set_src_qp(&mut self, v: u32) {
        write_u24(self.buffer.as_mut(), field::SRC_QP, v)
    }
}

impl DethRepr {
    /// Parses a DETH; the reserved byte is ignored.
    ///
    /// # Errors
    /// [`Error::Truncated`] when fewer than 8 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<DethRepr> {
        packet.check_len()?;
        Ok(DethRepr {
            qkey: packet.qkey(),
            src_qp: packet.src_qp(),
        })
    }

    /// Length of the emitted header: 8 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Checks the values that do not fit their fields.
    ///
    /// # Errors
    /// [`Error::BadField`] when `src_qp > 0xFF_FFFF`.
    pub fn check(&self) -> Result<()> {
        if self.src_qp > super::bth::MAX_QPN {
            Err(Error::BadField)
        } else {
            Ok(())
        }
    }

    /// Writes the DETH into the first 8 bytes of `packet` (reserved byte 0; panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_qkey(self.qkey);
        packet.set_reserved(0);
        packet.set_src_qp(self.src_qp);
    }
}

/// The parsed form of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DethRepr {
    /// Q_Key (bytes 0–3).
    pub qkey: u32,
    /// Source QP, 24 bits (bytes 5–7).
    pub src_qp: u32,
}

#[cfg(test)]
mod test {
    use super::*;

    static BYTES: [u8; 8] = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01];

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.qkey(), GSI_QKEY);
        assert_eq!(p.reserved(), 0);
        assert_eq!(p.src_qp(), 1);
        let r = DethRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: GSI_QKEY,
                src_qp: 1
            }
        );
        let mut buf = [0xffu8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..7]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            DethRepr {
                src_qp: 1 << 24,
                ..r
            }
            .check(),
            Err(Error::BadField)
        );
    }
}
