//! Remote-address segment: 16 bytes after the control segment of RDMA WRITE / READ and of the
//! atomics on RC/UC QPs (mlx5dv.h `struct mlx5_wqe_raddr_seg`; rdma-core qp.c `set_raddr_seg`).
//!
//! ```text
//! bytes 0-7: raddr (BE64) | bytes 8-11: rkey (BE32) | bytes 12-15: reserved (0)
//! ```

use super::Result;
use crate::wire::{read_u32, read_u64, write_u32, write_u64};

mod field {
    use crate::wire::Field;

    pub const RADDR: Field = 0..8;
    pub const RKEY: Field = 8..12;
    pub const RESERVED: Field = 12..16;
}

/// Length of a remote-address segment in bytes.
pub const LEN: usize = field::RESERVED.end;

mlx5_view!(RaddrSeg, "a remote-address segment");

impl<T: AsRef<[u8]>> RaddrSeg<T> {
    /// Remote virtual address (bytes 0–7).
    #[inline]
    pub fn raddr(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::RADDR)
    }

    /// R_Key (bytes 8–11).
    #[inline]
    pub fn rkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RKEY)
    }

    /// Reserved word (bytes 12–15; rdma-core writes 0).
    #[inline]
    pub fn reserved(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RESERVED)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RaddrSeg<T> {
    /// Sets the remote virtual address.
    #[inline]
    pub fn set_raddr(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::RADDR, v)
    }

    /// Sets the R_Key.
    #[inline]
    pub fn set_rkey(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RKEY, v)
    }

    /// Sets the reserved word.
    #[inline]
    pub fn set_reserved(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::RESERVED, v)
    }
}

/// The parsed form of a remote-address segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RaddrRepr {
    /// Remote virtual address.
    pub raddr: u64,
    /// R_Key of the remote memory region.
    pub rkey: u32,
}

impl RaddrRepr {
    /// Parses a remote-address segment; the reserved word is ignored.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) below 16 bytes.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &RaddrSeg<&T>) -> Result<RaddrRepr> {
        seg.check_len()?;
        Ok(RaddrRepr {
            raddr: seg.raddr(),
            rkey: seg.rkey(),
        })
    }

    /// Length of the emitted segment: 16 bytes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// The 16 bytes as two big-endian words: raddr, then rkey in the high half and the
    /// reserved word (0) in the low half.
    #[inline(always)]
    pub const fn words(&self) -> (u64, u64) {
        (self.raddr, (self.rkey as u64) << 32)
    }

    /// Writes all 16 bytes (reserved = 0); panics below 16 bytes.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, seg: &mut RaddrSeg<&mut T>) {
        crate::mlx5::ring::put_words(seg.buffer.as_mut(), 0, self.words());
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use crate::mlx5::Error;

    static SEG: [u8; 16] = [
        0x00, 0x00, 0x7f, 0xee, 0x26, 0x0f, 0xb0, 0x00, 0x00, 0x00, 0x02, 0xb8, 0, 0, 0, 0,
    ];

    #[test]
    fn test_parse_emit() {
        let r = RaddrRepr {
            raddr: 0x7fee_260f_b000,
            rkey: 0x2b8,
        };
        assert_eq!(
            RaddrRepr::parse(&RaddrSeg::new_unchecked(&SEG[..])).unwrap(),
            r
        );
        let mut b = [0xaau8; 16];
        r.emit(&mut RaddrSeg::new_unchecked(&mut b[..]));
        assert_eq!(b, SEG);
        assert_eq!(
            RaddrSeg::new_checked(&SEG[..15]).unwrap_err(),
            Error::Truncated
        );
    }
}
