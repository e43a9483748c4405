//! Atomic Extended Transport Header: 28 bytes, packed (IBTA vol. 1 §9.3.4;
//! rxe_hdr.h `struct rxe_atmeth`; ib_pack.h `IB_EXT_ATOMICETH_BYTES`).
//!
//! ```text
//! bytes 0-7: VA (u64) | 8-11: R_Key (u32) | 12-19: Swap or Add data (u64) | 20-27: Compare data (u64)
//! ```
//! FETCH_ADD adds Swap-or-Add; COMPARE_SWAP compares with Compare and writes Swap.

use super::{read_u32, read_u64, write_u32, write_u64, Result};

mod field {
    use crate::wire::Field;

    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const SWAP_ADD: Field = 12..20;
    pub const COMPARE: Field = 20..28;
}

/// Length of an AtomicETH in bytes.
pub const HEADER_LEN: usize = field::COMPARE.end;

fixed_header_view!("AtomicETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address (bytes 0–7); must be 8-byte aligned.
    #[inline]
    pub fn va(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::VA)
    }

    /// R_Key (bytes 8–11).
    #[inline]
    pub fn rkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RKEY)
    }

    /// Swap (CmpSwap) or Add (FetchAdd) data (bytes 12–19).
    #[inline]
    pub fn swap_add(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::SWAP_ADD)
    }

    /// Compare data (bytes 20–27).
    #[inline]
    pub fn compare(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::COMPARE)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Sets the remote virtual address.
    #[inline]
    pub fn set_va(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::VA, v)
    }

    /// Sets the R_Key.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RKEY, v)
    }

    /// Sets the Swap/Add data.
    #[inline]
    pub fn set_swap_add(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::SWAP_ADD, v)
    }

    /// Sets the Compare data.
    #[inline]
    pub fn set_compare(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::COMPARE, v)
    }
}

impl AtomicEthRepr {
    /// Parses an AtomicETH. Alignment of `va` is the responder's check, not the parser's.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) when fewer than 28 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<AtomicEthRepr> {
        packet.check_len()?;
        Ok(AtomicEthRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            swap_add: packet.swap_add(),
            compare: packet.compare(),
        })
    }

    /// Length of the emitted header: 28 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the AtomicETH into the first 28 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_swap_add(self.swap_add);
        packet.set_compare(self.compare);
    }
}

/// The parsed form of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct AtomicEthRepr {
    /// Remote virtual address, must be 8-byte aligned (bytes 0–7).
    pub va: u64,
    /// R_Key (bytes 8–11).
    pub rkey: u32,
    /// Swap (CmpSwap) or Add (FetchAdd) data (bytes 12–19).
    pub swap_add: u64,
    /// Compare data (bytes 20–27).
    pub compare: u64,
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::Error;

    static BYTES: [u8; 28] = [
        0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x08, // va
        0xde, 0xad, 0xbe, 0xef, // rkey
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05, // swap/add
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, // compare
    ];

    fn repr() -> AtomicEthRepr {
        AtomicEthRepr {
            va: 0x7f00_0000_1008,
            rkey: 0xdead_beef,
            swap_add: 5,
            compare: 0x0102_0304_0506_0708,
        }
    }

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x7f00_0000_1008);
        assert_eq!(p.rkey(), 0xdead_beef);
        assert_eq!(p.swap_add(), 5);
        assert_eq!(p.compare(), 0x0102_0304_0506_0708);
        assert_eq!(AtomicEthRepr::parse(&p).unwrap(), repr());
        let mut buf = [0u8; 28];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
        assert_eq!(
            Packet::new_checked(&BYTES[..27]).unwrap_err(),
            Error::Truncated
        );
    }
}
