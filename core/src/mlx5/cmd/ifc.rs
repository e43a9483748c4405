//! Fields of the mlx5 firmware command structures, addressed the way Linux
//! `include/linux/mlx5/mlx5_ifc.h` declares them (`u8 name[width]` inside
//! `struct mlx5_ifc_<name>_bits`) and `MLX5_SET` / `MLX5_GET` (Linux `device.h`) read them.
//!
//! A structure is a string of bits, counted from the most significant bit of byte 0. Each
//! declared field takes the next `width` bits, so within a big-endian 32-bit dword the
//! first-declared field occupies the most significant bits. A field of 1..=64 bits may span a
//! dword boundary (the 64-bit fields at 32-bit alignment, `MLX5_SET64`); its value is the
//! big-endian bit string `bit_offset .. bit_offset + bits`.

use super::CmdError;

/// One field of an `mlx5_ifc.h` structure: name, bit offset from the start of the structure
/// (or of the enclosing command, after [`IfcField::at`]) and width in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct IfcField {
    /// The field's name in `mlx5_ifc.h`.
    pub name: &'static str,
    /// Bit offset, counted from the most significant bit of byte 0.
    pub bit_offset: u32,
    /// Width in bits (for a flexible array: the width of one entry).
    pub bits: u32,
}

impl IfcField {
    /// A field `name` of `bits` bits at `bit_offset`.
    pub const fn new(name: &'static str, bit_offset: u32, bits: u32) -> IfcField {
        IfcField {
            name,
            bit_offset,
            bits,
        }
    }

    /// The same field inside an enclosing structure that holds this field's structure at bit
    /// `base_bit_offset`; e.g. `qpc::ST.at(create_qp_in::QPC.bit_offset)`.
    pub const fn at(self, base_bit_offset: u32) -> IfcField {
        IfcField {
            name: self.name,
            bit_offset: self.bit_offset + base_bit_offset,
            bits: self.bits,
        }
    }

    /// Entry `index` of an array field whose entries are `elem_bits` wide (for example
    /// `create_eq_in::EVENT_BITMASK.element(0, 64)`, `manage_pages_in::PAS.element(i, 64)`).
    pub const fn element(self, index: u32, elem_bits: u32) -> IfcField {
        IfcField {
            name: self.name,
            bit_offset: self.bit_offset + index * elem_bits,
            bits: elem_bits,
        }
    }

    /// Byte offset of the field's first bit.
    pub const fn byte_offset(self) -> usize {
        (self.bit_offset / 8) as usize
    }

    /// Number of bytes a buffer needs to hold the whole field.
    pub const fn end_byte(self) -> usize {
        (self.bit_offset as usize + self.bits as usize).div_ceil(8)
    }

    /// Reads the field from `buf`; see [`get`].
    ///
    /// # Errors
    /// As [`get`].
    pub fn get(self, buf: &[u8]) -> Result<u64, CmdError> {
        get(buf, self)
    }

    /// Writes `value` into the field in `buf`; see [`set`].
    ///
    /// # Errors
    /// As [`set`].
    pub fn set(self, buf: &mut [u8], value: u64) -> Result<(), CmdError> {
        set(buf, self, value)
    }
}

fn check(buf_len: usize, f: IfcField) -> Result<(usize, usize), CmdError> {
    if f.bits == 0 || f.bits > 64 {
        return Err(CmdError::BadWidth {
            field: f.name,
            bits: f.bits,
        });
    }
    let start = f.byte_offset();
    let end = f.end_byte();
    if buf_len < end {
        return Err(CmdError::Truncated {
            needed: end,
            len: buf_len,
        });
    }
    Ok((start, end))
}

/// Reads field `f` (1..=64 bits) from `buf`, as `MLX5_GET` / `MLX5_GET64` would.
///
/// # Errors
/// [`CmdError::BadWidth`] for a width of 0 or more than 64 bits (use [`get_bytes`]),
/// [`CmdError::Truncated`] when `buf` ends before the field does.
pub fn get(buf: &[u8], f: IfcField) -> Result<u64, CmdError> {
    let (start, end) = check(buf.len(), f)?;
    let mut acc: u128 = 0;
    for &b in &buf[start..end] {
        acc = (acc << 8) | u128::from(b);
    }
    let total_bits = ((end - start) * 8) as u32;
    let lead = f.bit_offset % 8;
    let shift = total_bits - lead - f.bits;
    let mask: u128 = (1u128 << f.bits) - 1;
    Ok(((acc >> shift) & mask) as u64)
}

/// Writes `value` into field `f` (1..=64 bits) of `buf`, leaving every other bit unchanged, as
/// `MLX5_SET` / `MLX5_SET64` would.
///
/// # Errors
/// [`CmdError::BadWidth`] for a width of 0 or more than 64 bits (use [`set_bytes`]),
/// [`CmdError::Truncated`] when `buf` ends before the field does, [`CmdError::ValueTooWide`]
/// when `value` does not fit in `f.bits` bits (nothing is written then).
pub fn set(buf: &mut [u8], f: IfcField, value: u64) -> Result<(), CmdError> {
    let (start, end) = check(buf.len(), f)?;
    if f.bits < 64 && value >> f.bits != 0 {
        return Err(CmdError::ValueTooWide {
            field: f.name,
            bits: f.bits,
            value,
        });
    }
    let mut acc: u128 = 0;
    for &b in &buf[start..end] {
        acc = (acc << 8) | u128::from(b);
    }
    let total_bits = ((end - start) * 8) as u32;
    let lead = f.bit_offset % 8;
    let shift = total_bits - lead - f.bits;
    let mask: u128 = ((1u128 << f.bits) - 1) << shift;
    acc = (acc & !mask) | (u128::from(value) << shift);
    for (i, b) in buf[start..end].iter_mut().rev().enumerate() {
        *b = (acc >> (8 * i)) as u8;
    }
    Ok(())
}

fn byte_range(buf_len: usize, f: IfcField) -> Result<core::ops::Range<usize>, CmdError> {
    if f.bit_offset % 8 != 0 || f.bits % 8 != 0 || f.bits == 0 {
        return Err(CmdError::BadWidth {
            field: f.name,
            bits: f.bits,
        });
    }
    let range = f.byte_offset()..f.end_byte();
    if buf_len < range.end {
        return Err(CmdError::Truncated {
            needed: range.end,
            len: buf_len,
        });
    }
    Ok(range)
}

/// The bytes of a byte-aligned field (a GID, `rgid_rip`, `source_l3_address`, a 128-bit
/// `sw_owner_id`, a nested structure), in the order they appear in the buffer.
///
/// # Errors
/// [`CmdError::BadWidth`] when the field does not start and end on a byte boundary,
/// [`CmdError::Truncated`] when `buf` ends before the field does.
pub fn get_bytes(buf: &[u8], f: IfcField) -> Result<&[u8], CmdError> {
    let r = byte_range(buf.len(), f)?;
    Ok(&buf[r])
}

/// Mutable bytes of a byte-aligned field (see [`get_bytes`]), e.g. to emit a nested context.
///
/// # Errors
/// As [`get_bytes`].
pub fn get_bytes_mut(buf: &mut [u8], f: IfcField) -> Result<&mut [u8], CmdError> {
    let r = byte_range(buf.len(), f)?;
    Ok(&mut buf[r])
}

/// Copies `src` into a byte-aligned field; `src` must be exactly `f.bits / 8` bytes long.
///
/// # Errors
/// [`CmdError::BadWidth`] when the field is not byte-aligned, [`CmdError::Truncated`] when
/// `buf` ends before the field does, [`CmdError::BadLength`] when `src` has another length.
pub fn set_bytes(buf: &mut [u8], f: IfcField, src: &[u8]) -> Result<(), CmdError> {
    let r = byte_range(buf.len(), f)?;
    if src.len() != r.len() {
        return Err(CmdError::BadLength {
            what: f.name,
            len: src.len(),
        });
    }
    buf[r].copy_from_slice(src);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: IfcField = IfcField::new("a", 0, 4);
    const B: IfcField = IfcField::new("b", 4, 28);
    const W64: IfcField = IfcField::new("w", 32, 64);
    const ODD: IfcField = IfcField::new("odd", 5, 13);

    #[test]
    fn first_declared_is_most_significant() {
        let mut b = [0u8; 4];
        set(&mut b, A, 0xa).unwrap();
        set(&mut b, B, 0x123_4567).unwrap();
        assert_eq!(b, [0xa1, 0x23, 0x45, 0x67]);
        assert_eq!(get(&b, A), Ok(0xa));
        assert_eq!(get(&b, B), Ok(0x123_4567));
    }

    #[test]
    fn sixty_four_bits_across_dwords() {
        let mut b = [0u8; 12];
        set(&mut b, W64, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(&b[4..], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(get(&b, W64), Ok(0x0102_0304_0506_0708));
        assert_eq!(b[..4], [0; 4]);
    }

    #[test]
    fn odd_field_leaves_neighbours() {
        let mut b = [0xffu8; 3];
        set(&mut b, ODD, 0).unwrap();
        // bits 5..=17 cleared: 11111000 00000000 00111111
        assert_eq!(b, [0xf8, 0x00, 0x3f]);
        set(&mut b, ODD, 0x1fff).unwrap();
        assert_eq!(b, [0xff; 3]);
    }

    #[test]
    fn errors_not_panics() {
        let mut b = [0u8; 3];
        assert!(matches!(
            get(&b, W64),
            Err(CmdError::Truncated { needed: 12, len: 3 })
        ));
        assert!(matches!(
            set(&mut b, A, 0x10),
            Err(CmdError::ValueTooWide { .. })
        ));
        assert!(matches!(
            get(&b, IfcField::new("z", 0, 0)),
            Err(CmdError::BadWidth { .. })
        ));
        assert!(matches!(
            get(&b, IfcField::new("big", 0, 65)),
            Err(CmdError::BadWidth { .. })
        ));
        assert!(matches!(get_bytes(&b, ODD), Err(CmdError::BadWidth { .. })));
        let g = IfcField::new("g", 8, 16);
        assert!(matches!(
            set_bytes(&mut b, g, &[1]),
            Err(CmdError::BadLength { .. })
        ));
        set_bytes(&mut b, g, &[1, 2]).unwrap();
        assert_eq!(get_bytes(&b, g), Ok(&[1u8, 2][..]));
    }

    #[test]
    fn at_and_element() {
        let f = IfcField::new("pas", 0x80, 64);
        assert_eq!(f.element(2, 64).bit_offset, 0x80 + 128);
        assert_eq!(A.at(0xc0).bit_offset, 0xc0);
        assert_eq!(W64.end_byte(), 12);
    }
}
