//! Inline data segment: a 4-byte header `byte_count | MLX5_INLINE_SEG` followed directly by the
//! payload bytes, the whole padded to a multiple of 16 bytes (mlx5dv.h
//! `struct mlx5_wqe_inl_data_seg`; rdma-core qp.c `set_data_inl_seg`: DS contribution
//! `align(4 + len, 16) / 16`). The payload may run past the end of the send-queue ring and then
//! continues at its first byte; the writers and the decoder handle that.
//!
//! ```text
//! bytes 0-3: byte_count | 0x80000000 (BE32) | bytes 4..4+len: payload | zero pad to 16
//! ```
//! This crate writes zeros into the pad (rdma-core leaves whatever was there; the device
//! ignores it).

use super::{Error, Result, DS_LEN, INLINE_SEG, MAX_DS};
use crate::wire::{read_u32, write_u32};

mod field {
    use crate::wire::Field;

    pub const BYTE_COUNT: Field = 0..4;
}

/// Length of the inline segment header in bytes.
pub const LEN: usize = field::BYTE_COUNT.end;

/// Largest inline payload a WQE can carry: 62 DS after the control segment, less the header
/// (988 bytes). A QP's `max_inline_data` is usually smaller.
pub const MAX_INLINE_LEN: usize = (MAX_DS - 1) * DS_LEN - LEN;

/// Bytes an inline segment with `payload_len` bytes occupies: `align(4 + len, 16)`.
pub const fn seg_len(payload_len: usize) -> usize {
    (LEN + payload_len).div_ceil(DS_LEN) * DS_LEN
}

/// DS units of an inline segment with `payload_len` bytes: `align(4 + len, 16) / 16`.
pub const fn ds(payload_len: usize) -> usize {
    seg_len(payload_len) / DS_LEN
}

mlx5_view!(
    InlineSeg,
    "an inline data segment (header and the payload after it)"
);

impl<T: AsRef<[u8]>> InlineSeg<T> {
    /// The raw first word (bytes 0–3): payload length with `MLX5_INLINE_SEG` set.
    #[inline]
    pub fn byte_count(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::BYTE_COUNT)
    }

    /// `true` when bit 31 (`MLX5_INLINE_SEG`) is set, i.e. this is an inline segment and not a
    /// data segment.
    #[inline]
    pub fn is_inline(&self) -> bool {
        self.byte_count() & INLINE_SEG != 0
    }

    /// Payload length in bytes (byte count without the flag).
    #[inline]
    pub fn inline_len(&self) -> usize {
        (self.byte_count() & !INLINE_SEG) as usize
    }

    /// The payload when it lies contiguously in this buffer.
    ///
    /// # Errors
    /// [`Error::Truncated`] when the buffer ends before the payload does.
    pub fn payload(&self) -> Result<&[u8]> {
        self.buffer
            .as_ref()
            .get(LEN..LEN + self.inline_len())
            .ok_or(Error::Truncated)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> InlineSeg<T> {
    /// Sets the header to `len | MLX5_INLINE_SEG`.
    #[inline]
    pub fn set_inline_len(&mut self, len: u32) {
        write_u32(self.buffer.as_mut(), field::BYTE_COUNT, len | INLINE_SEG)
    }
}

/// Writes a complete inline segment (header, payload, zero pad) at the start of `buf` and
/// returns its length (`seg_len(payload.len())`).
///
/// # Errors
/// [`Error::Truncated`] when `buf` is shorter than the segment; [`Error::Oversize`] when the
/// payload exceeds [`MAX_INLINE_LEN`].
pub fn emit(payload: &[u8], buf: &mut [u8]) -> Result<usize> {
    if payload.len() > MAX_INLINE_LEN {
        return Err(Error::Oversize {
            ds: 1 + ds(payload.len()),
        });
    }
    let n = seg_len(payload.len());
    let seg = buf.get_mut(..n).ok_or(Error::Truncated)?;
    InlineSeg::new_unchecked(&mut seg[..]).set_inline_len(payload.len() as u32);
    seg[LEN..LEN + payload.len()].copy_from_slice(payload);
    seg[LEN + payload.len()..].fill(0);
    Ok(n)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_sizes() {
        assert_eq!(seg_len(0), 16);
        assert_eq!(seg_len(12), 16);
        assert_eq!(seg_len(13), 32);
        assert_eq!(ds(28), 2);
        assert_eq!(ds(29), 3);
        assert_eq!(MAX_INLINE_LEN, 988);
    }

    #[test]
    fn test_emit_parse() {
        let mut b = [0xeeu8; 32];
        assert_eq!(emit(&[1, 2, 3, 4, 5], &mut b).unwrap(), 16);
        assert_eq!(b[..16], [0x80, 0, 0, 5, 1, 2, 3, 4, 5, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b[16], 0xee);
        let s = InlineSeg::new_checked(&b[..]).unwrap();
        assert!(s.is_inline());
        assert_eq!(s.inline_len(), 5);
        assert_eq!(s.payload().unwrap(), &[1, 2, 3, 4, 5]);
        assert_eq!(emit(&[0; 13], &mut b[..16]), Err(Error::Truncated));
        assert!(matches!(
            emit(&[0; 989], &mut [0u8; 1024]),
            Err(Error::Oversize { .. })
        ));
        let short = [0x80u8, 0, 0, 40, 1];
        assert_eq!(
            InlineSeg::new_unchecked(&short[..]).payload(),
            Err(Error::Truncated)
        );
    }
}
