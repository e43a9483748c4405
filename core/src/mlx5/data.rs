//! Data (scatter/gather) segment: one local buffer of a send gather list or a receive scatter
//! list (mlx5dv.h `struct mlx5_wqe_data_seg`, `mlx5dv_set_data_seg`).
//!
//! ```text
//! bytes 0-3: byte_count (BE32) | bytes 4-7: lkey (BE32) | bytes 8-15: addr (BE64)
//! ```
//! A receive scatter list shorter than the queue's maximum ends with byte_count 0, lkey
//! `MLX5_INVALID_LKEY` (0x100), addr 0 (rdma-core qp.c `mlx5_post_recv`).

use super::{Result, INVALID_LKEY};
use crate::wire::{read_u32, read_u64, write_u32, write_u64};

mod field {
    use crate::wire::Field;

    pub const BYTE_COUNT: Field = 0..4;
    pub const LKEY: Field = 4..8;
    pub const ADDR: Field = 8..16;
}

/// Length of a data segment in bytes.
pub const LEN: usize = field::ADDR.end;

mlx5_view!(DataSeg, "a data (scatter/gather) segment");

impl<T: AsRef<[u8]>> DataSeg<T> {
    /// Byte count (bytes 0–3). Bit 31 set means the segment is an inline segment instead.
    #[inline]
    pub fn byte_count(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::BYTE_COUNT)
    }

    /// L_Key (bytes 4–7).
    #[inline]
    pub fn lkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::LKEY)
    }

    /// Local address (bytes 8–15).
    #[inline]
    pub fn addr(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::ADDR)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DataSeg<T> {
    /// Sets the byte count.
    #[inline]
    pub fn set_byte_count(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::BYTE_COUNT, v)
    }

    /// Sets the L_Key.
    #[inline]
    pub fn set_lkey(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::LKEY, v)
    }

    /// Sets the local address.
    #[inline]
    pub fn set_addr(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::ADDR, v)
    }
}

/// The parsed form of a data segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DataRepr {
    /// Length in bytes.
    pub byte_count: u32,
    /// L_Key of the local memory region.
    pub lkey: u32,
    /// Local virtual (or IO virtual) address.
    pub addr: u64,
}

impl DataRepr {
    /// The receive-list terminator: byte count 0, `MLX5_INVALID_LKEY`, address 0.
    pub const END: DataRepr = DataRepr {
        byte_count: 0,
        lkey: INVALID_LKEY,
        addr: 0,
    };

    /// Parses a data segment.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) below 16 bytes.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &DataSeg<&T>) -> Result<DataRepr> {
        seg.check_len()?;
        Ok(DataRepr {
            byte_count: seg.byte_count(),
            lkey: seg.lkey(),
            addr: seg.addr(),
        })
    }

    /// Length of the emitted segment: 16 bytes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// The 16 bytes as two big-endian words: byte count and lkey, then the address.
    #[inline(always)]
    pub const fn words(&self) -> (u64, u64) {
        (
            ((self.byte_count as u64) << 32) | self.lkey as u64,
            self.addr,
        )
    }

    /// Writes the 16 bytes; panics below 16 bytes. Same bytes as
    /// `mlx5dv_set_data_seg(seg, byte_count, lkey, addr)`.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, seg: &mut DataSeg<&mut T>) {
        crate::mlx5::ring::put_words(seg.buffer.as_mut(), 0, self.words());
    }

    /// `true` for the receive-list terminator (byte count 0 and `MLX5_INVALID_LKEY`).
    pub const fn is_end(&self) -> bool {
        self.byte_count == 0 && self.lkey == INVALID_LKEY
    }
}

#[cfg(test)]
mod test {
    use super::*;

    static SEG: [u8; 16] = [
        0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10,
        0x00,
    ];

    #[test]
    fn test_parse_emit() {
        let r = DataRepr {
            byte_count: 4096,
            lkey: 0x1234,
            addr: 0x7f00_0000_1000,
        };
        assert_eq!(
            DataRepr::parse(&DataSeg::new_unchecked(&SEG[..])).unwrap(),
            r
        );
        let mut b = [0u8; 16];
        r.emit(&mut DataSeg::new_unchecked(&mut b[..]));
        assert_eq!(b, SEG);
        assert!(DataRepr::END.is_end() && !r.is_end());
    }
}
