//! Atomic Acknowledge Extended Transport Header: 8 bytes, the original remote data
//! (IBTA vol. 1 §9.3.5.3; rxe_hdr.h `struct rxe_atmack`). Follows the AETH in an
//! ATOMIC_ACKNOWLEDGE.

use super::{read_u64, write_u64, Result};

mod field {
    use crate::wire::Field;

    pub const ORIG_DATA: Field = 0..8;
}

/// Length of an AtomicAckETH in bytes.
pub const HEADER_LEN: usize = field::ORIG_DATA.end;

fixed_header_view!("AtomicAckETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// The value the remote 8 bytes held before the atomic (bytes 0–7, big-endian).
    #[inline]
    pub fn orig_data(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::ORIG_DATA)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the original remote data.
    #[inline]
    pub fn set_orig_data(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::ORIG_DATA, v)
    }
}

/// The parsed form of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AtomicAckEthRepr {
    /// Original remote data.
    pub orig_data: u64,
}

impl AtomicAckEthRepr {
    /// Parses an AtomicAckETH.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) when fewer than 8 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<AtomicAckEthRepr> {
        packet.check_len()?;
        Ok(AtomicAckEthRepr {
            orig_data: packet.orig_data(),
        })
    }

    /// Length of the emitted header: 8 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into the first 8 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_orig_data(self.orig_data)
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::Error;

    static BYTES: [u8; 8] = [0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88];

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        let r = AtomicAckEthRepr::parse(&p).unwrap();
        assert_eq!(r.orig_data, 0x1122_3344_5566_7788);
        let mut buf = [0u8; 8];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..7]).unwrap_err(),
            Error::Truncated
        );
    }
}
