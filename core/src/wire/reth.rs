//! RDMA Extended Transport Header: 16 bytes (IBTA vol. 1 §9.3.3; rxe_hdr.h `struct rxe_reth`).
//!
//! ```text
//! bytes 0-7: virtual address (u64) | bytes 8-11: R_Key (u32) | bytes 12-15: DMA length (u32)
//! ```
//! Carried by RDMA WRITE First/Only (with Immediate) and RDMA READ Request.

use super::{read_u32, read_u64, write_u32, write_u64, Result};

mod field {
    use crate::wire::Field;

    pub const VA: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const DMA_LEN: Field = 12..16;
}

/// Length of a RETH in bytes.
pub const HEADER_LEN: usize = field::DMA_LEN.end;

fixed_header_view!("RETH");

impl<T: AsRef<[u8]>> Packet<T> {
    /// Remote virtual address (bytes 0–7, big-endian).
    #[inline]
    pub fn va(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::VA)
    }

    /// R_Key (bytes 8–11).
    #[inline]
    pub fn rkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RKEY)
    }

    /// DMA length in bytes (bytes 12–15).
    #[inline]
    pub fn dma_len(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::DMA_LEN)
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

    /// Sets the DMA length (bytes).
    #[inline]
    pub fn set_dma_len(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::DMA_LEN, v)
    }
}

impl RethRepr {
    /// Parses a RETH. Every value is representable, so only the length is checked.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) when fewer than 16 bytes are present.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<RethRepr> {
        packet.check_len()?;
        Ok(RethRepr {
            va: packet.va(),
            rkey: packet.rkey(),
            dma_len: packet.dma_len(),
        })
    }

    /// Length of the emitted header: 16 bytes.
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the RETH into the first 16 bytes of `packet` (panics if shorter).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, packet: &mut Packet<&mut T>) {
        packet.set_va(self.va);
        packet.set_rkey(self.rkey);
        packet.set_dma_len(self.dma_len);
    }
}

/// The parsed form of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RethRepr {
    /// Remote virtual address (bytes 0–7).
    pub va: u64,
    /// R_Key (bytes 8–11).
    pub rkey: u32,
    /// DMA length in bytes (bytes 12–15).
    pub dma_len: u32,
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::wire::Error;

    // TV3 RETH (PcapPlusPlus InfiniBandTests.cpp): VA 0x7fee260fb000, R_Key 0x2b8, len 65536.
    static RETH_BYTES: [u8; 16] = [
        0x00, 0x00, 0x7f, 0xee, 0x26, 0x0f, 0xb0, 0x00, 0x00, 0x00, 0x02, 0xb8, 0x00, 0x01, 0x00,
        0x00,
    ];

    fn repr() -> RethRepr {
        RethRepr {
            va: 0x7fee_260f_b000,
            rkey: 0x2b8,
            dma_len: 65536,
        }
    }

    #[test]
    fn test_deconstruct() {
        let p = Packet::new_checked(&RETH_BYTES[..]).unwrap();
        assert_eq!(p.va(), 0x7fee_260f_b000);
        assert_eq!(p.rkey(), 0x2b8);
        assert_eq!(p.dma_len(), 65536);
        assert!(p.payload().is_empty());
    }

    #[test]
    fn test_construct() {
        let mut buf = [0u8; 16];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_va(0x7fee_260f_b000);
        p.set_rkey(0x2b8);
        p.set_dma_len(65536);
        assert_eq!(buf, RETH_BYTES);
    }

    #[test]
    fn test_parse_emit() {
        let p = Packet::new_checked(&RETH_BYTES[..]).unwrap();
        assert_eq!(RethRepr::parse(&p).unwrap(), repr());
        let mut buf = [0xeeu8; 16];
        repr().emit(&mut Packet::new_unchecked(&mut buf[..]));
        assert_eq!(buf, RETH_BYTES);
    }

    #[test]
    fn test_impossible_len() {
        assert_eq!(
            Packet::new_checked(&RETH_BYTES[..15]).unwrap_err(),
            Error::Truncated
        );
    }
}
