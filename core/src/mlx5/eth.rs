//! Ethernet segment of raw-packet QPs and SQs: offload flags, MSS for LSO and the inline copy
//! of the packet's first bytes (mlx5dv.h `struct mlx5_wqe_eth_seg`, `mlx5dv_set_eth_seg`;
//! Linux qp.h names the first word's bytes; rdma-core qp.c `copy_eth_inline_headers`,
//! `set_tso_eth_seg`).
//!
//! ```text
//! byte 0: swp_outer_l4_offset | 1: swp_outer_l3_offset | 2: swp_inner_l4_offset
//! byte 3: swp_inner_l3_offset | 4: cs_flags | 5: swp_flags | bytes 6-7: mss (BE16)
//! bytes 8-11: flow_table_metadata (BE32) | bytes 12-13: inline_hdr_sz (BE16)
//! bytes 14..14+inline_hdr_sz: inline headers, zero-padded to a multiple of 16 bytes
//! ```
//! The segment is 16 bytes when at most 2 header bytes are inline, else
//! `16 + align(inline_hdr_sz - 2, 16)` (rdma-core: 32 bytes for the usual 18-byte L2 copy).
//! The header bytes may wrap around the ring end like inline data.

use super::bytes::SplitBytes;
use super::{Error, Result, DS_LEN, MAX_DS};
use crate::wire::{read_u16, read_u32, write_u16, write_u32};

mod field {
    use crate::wire::Field;

    pub const SWP_OUTER_L4_OFFSET: usize = 0;
    pub const SWP_OUTER_L3_OFFSET: usize = 1;
    pub const SWP_INNER_L4_OFFSET: usize = 2;
    pub const SWP_INNER_L3_OFFSET: usize = 3;
    pub const CS_FLAGS: usize = 4;
    pub const SWP_FLAGS: usize = 5;
    pub const MSS: Field = 6..8;
    pub const FLOW_TABLE_METADATA: Field = 8..12;
    pub const INLINE_HDR_SZ: Field = 12..14;
    pub const INLINE_HDR_START: Field = 14..16;
}

/// Length of the fixed part (which holds the first 2 inline header bytes) in bytes.
pub const LEN: usize = field::INLINE_HDR_START.end;
/// Offset of the first inline header byte.
pub const INLINE_HDR_OFFSET: usize = field::INLINE_HDR_START.start;

/// Checksum offload of the outer L3 header (`MLX5_ETH_WQE_L3_CSUM`).
pub const L3_CSUM: u8 = 1 << 6;
/// Checksum offload of the outer L4 header (`MLX5_ETH_WQE_L4_CSUM`).
pub const L4_CSUM: u8 = 1 << 7;
/// Checksum offload of the inner L3 header (Linux `MLX5_ETH_WQE_L3_INNER_CSUM`).
pub const L3_INNER_CSUM: u8 = 1 << 4;
/// Checksum offload of the inner L4 header (Linux `MLX5_ETH_WQE_L4_INNER_CSUM`).
pub const L4_INNER_CSUM: u8 = 1 << 5;
/// Inline header bytes rdma-core copies when the device asks for L2 inlining
/// (`MLX5_ETH_L2_INLINE_HEADER_SIZE`, rdma-core wqe.h: 14-byte Ethernet + 4-byte VLAN tag).
pub const L2_INLINE_HEADER_SIZE: usize = 18;
/// Smallest LSO header (`MLX5_ETH_L2_MIN_HEADER_SIZE`, rdma-core wqe.h).
pub const L2_MIN_HEADER_SIZE: usize = 14;
/// Most inline header bytes one WQE can hold (the segment may use 62 DS).
pub const MAX_INLINE_HDR: usize = (MAX_DS - 1) * DS_LEN - INLINE_HDR_OFFSET;

/// Bytes an Ethernet segment with `inline_hdr_sz` inline header bytes occupies.
pub const fn seg_len(inline_hdr_sz: usize) -> usize {
    if inline_hdr_sz <= 2 {
        LEN
    } else {
        LEN + (inline_hdr_sz - 2).div_ceil(DS_LEN) * DS_LEN
    }
}

mlx5_view!(EthSeg, "an Ethernet segment (fixed part)");

impl<T: AsRef<[u8]>> EthSeg<T> {
    /// Software-parser outer L4 offset (byte 0; rdma-core `rsvd0`).
    #[inline]
    pub fn swp_outer_l4_offset(&self) -> u8 {
        self.buffer.as_ref()[field::SWP_OUTER_L4_OFFSET]
    }

    /// Software-parser outer L3 offset (byte 1).
    #[inline]
    pub fn swp_outer_l3_offset(&self) -> u8 {
        self.buffer.as_ref()[field::SWP_OUTER_L3_OFFSET]
    }

    /// Software-parser inner L4 offset (byte 2).
    #[inline]
    pub fn swp_inner_l4_offset(&self) -> u8 {
        self.buffer.as_ref()[field::SWP_INNER_L4_OFFSET]
    }

    /// Software-parser inner L3 offset (byte 3).
    #[inline]
    pub fn swp_inner_l3_offset(&self) -> u8 {
        self.buffer.as_ref()[field::SWP_INNER_L3_OFFSET]
    }

    /// Checksum offload flags (byte 4; [`L3_CSUM`], [`L4_CSUM`], ...).
    #[inline]
    pub fn cs_flags(&self) -> u8 {
        self.buffer.as_ref()[field::CS_FLAGS]
    }

    /// Software-parser flags (byte 5; rdma-core `rsvd1`).
    #[inline]
    pub fn swp_flags(&self) -> u8 {
        self.buffer.as_ref()[field::SWP_FLAGS]
    }

    /// Maximum segment size for LSO in bytes (bytes 6–7; 0 otherwise).
    #[inline]
    pub fn mss(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::MSS)
    }

    /// Flow-table metadata (bytes 8–11; rdma-core `rsvd2`).
    #[inline]
    pub fn flow_table_metadata(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::FLOW_TABLE_METADATA)
    }

    /// Number of inline header bytes (bytes 12–13).
    #[inline]
    pub fn inline_hdr_sz(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::INLINE_HDR_SZ)
    }

    /// The inline header bytes when they lie contiguously in this buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer ends before them.
    pub fn inline_hdr(&self) -> Result<&[u8]> {
        let n = self.inline_hdr_sz() as usize;
        self.buffer
            .as_ref()
            .get(INLINE_HDR_OFFSET..INLINE_HDR_OFFSET + n)
            .ok_or(Error::Truncated)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthSeg<T> {
    /// Sets the software-parser offsets (bytes 0–3: outer L4, outer L3, inner L4, inner L3).
    #[inline]
    pub fn set_swp_offsets(&mut self, v: [u8; 4]) {
        self.buffer.as_mut()[..4].copy_from_slice(&v);
    }

    /// Sets the checksum offload flags.
    #[inline]
    pub fn set_cs_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::CS_FLAGS] = v;
    }

    /// Sets the software-parser flags.
    #[inline]
    pub fn set_swp_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::SWP_FLAGS] = v;
    }

    /// Sets the MSS.
    #[inline]
    pub fn set_mss(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::MSS, v)
    }

    /// Sets the flow-table metadata.
    #[inline]
    pub fn set_flow_table_metadata(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::FLOW_TABLE_METADATA, v)
    }

    /// Sets the inline header size.
    #[inline]
    pub fn set_inline_hdr_sz(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::INLINE_HDR_SZ, v)
    }
}

/// The parsed form of an Ethernet segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct EthRepr<'a> {
    /// Software-parser offsets: outer L4, outer L3, inner L4, inner L3 (bytes 0–3).
    pub swp_offsets: [u8; 4],
    /// Checksum offload flags.
    pub cs_flags: u8,
    /// Software-parser flags.
    pub swp_flags: u8,
    /// LSO maximum segment size in bytes (0 unless the opcode is LSO).
    pub mss: u16,
    /// Flow-table metadata.
    pub flow_table_metadata: u32,
    /// The inline header bytes (the start of the packet).
    pub inline_hdr: SplitBytes<'a>,
}

impl<'a> EthRepr<'a> {
    /// Parses an Ethernet segment whose header bytes lie contiguously in `seg`.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer is shorter than the segment;
    /// [`Error::BadField`] when `inline_hdr_sz` exceeds [`MAX_INLINE_HDR`].
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &EthSeg<&'a T>) -> Result<EthRepr<'a>> {
        seg.check_len()?;
        let n = seg.inline_hdr_sz() as usize;
        if n > MAX_INLINE_HDR {
            return Err(Error::BadField);
        }
        let buf: &'a [u8] = seg.buffer.as_ref();
        if buf.len() < seg_len(n) {
            return Err(Error::Truncated);
        }
        Ok(Self::from_fixed(
            seg,
            SplitBytes::new(&buf[INLINE_HDR_OFFSET..INLINE_HDR_OFFSET + n]),
        ))
    }

    /// Builds the repr from the fixed part and header bytes gathered elsewhere (the decoder
    /// uses this for headers that wrap around the ring).
    pub(crate) fn from_fixed<T: AsRef<[u8]> + ?Sized>(
        seg: &EthSeg<&T>,
        inline_hdr: SplitBytes<'a>,
    ) -> EthRepr<'a> {
        EthRepr {
            swp_offsets: [
                seg.swp_outer_l4_offset(),
                seg.swp_outer_l3_offset(),
                seg.swp_inner_l4_offset(),
                seg.swp_inner_l3_offset(),
            ],
            cs_flags: seg.cs_flags(),
            swp_flags: seg.swp_flags(),
            mss: seg.mss(),
            flow_table_metadata: seg.flow_table_metadata(),
            inline_hdr,
        }
    }

    /// Length of the emitted segment in bytes ([`seg_len`] of the header length).
    pub const fn buffer_len(&self) -> usize {
        seg_len(self.inline_hdr.len())
    }

    /// Writes the fixed 14 bytes (not the inline header) into `seg`; panics below 16 bytes.
    pub(crate) fn emit_fixed<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(
        &self,
        seg: &mut EthSeg<&mut T>,
    ) {
        seg.set_swp_offsets(self.swp_offsets);
        seg.set_cs_flags(self.cs_flags);
        seg.set_swp_flags(self.swp_flags);
        seg.set_mss(self.mss);
        seg.set_flow_table_metadata(self.flow_table_metadata);
        seg.set_inline_hdr_sz(self.inline_hdr.len() as u16);
    }

    /// Writes the whole segment (fixed part, header bytes, zero pad) into `buf`.
    ///
    /// # Errors
    /// [`Error::Truncated`] when `buf` is shorter than [`buffer_len`](Self::buffer_len);
    /// [`Error::BadField`] when the header is longer than [`MAX_INLINE_HDR`].
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let h = self.inline_hdr.len();
        if h > MAX_INLINE_HDR {
            return Err(Error::BadField);
        }
        let n = self.buffer_len();
        let seg = buf.get_mut(..n).ok_or(Error::Truncated)?;
        self.emit_fixed(&mut EthSeg::new_unchecked(&mut seg[..]));
        let end = INLINE_HDR_OFFSET + self.inline_hdr.copy_to(&mut seg[INLINE_HDR_OFFSET..]);
        seg[end..].fill(0);
        Ok(n)
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_seg_len() {
        assert_eq!(seg_len(0), 16);
        assert_eq!(seg_len(2), 16);
        assert_eq!(seg_len(3), 32);
        assert_eq!(seg_len(18), 32);
        assert_eq!(seg_len(19), 48);
    }

    #[test]
    fn test_emit_parse() {
        let hdr: [u8; 18] = core::array::from_fn(|i| i as u8 + 1);
        let r = EthRepr {
            cs_flags: L3_CSUM | L4_CSUM,
            mss: 1448,
            inline_hdr: SplitBytes::new(&hdr),
            ..Default::default()
        };
        let mut b = [0xffu8; 48];
        assert_eq!(r.emit(&mut b).unwrap(), 32);
        assert_eq!(b[4], 0xc0);
        assert_eq!(b[6..8], [0x05, 0xa8]);
        assert_eq!(b[12..14], [0, 18]);
        assert_eq!(b[14..32], hdr);
        assert_eq!(b[32], 0xff);
        let p = EthRepr::parse(&EthSeg::new_checked(&b[..32]).unwrap()).unwrap();
        assert_eq!(p, r);
        assert_eq!(
            EthRepr::parse(&EthSeg::new_unchecked(&b[..31])),
            Err(Error::Truncated)
        );
        assert_eq!(r.emit(&mut [0u8; 31]), Err(Error::Truncated));
    }
}
