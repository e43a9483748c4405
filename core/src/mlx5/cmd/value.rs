//! How typed command structures read and write their fields: [`FieldValue`] (a Rust value
//! stored in an [`IfcField`]), [`Pas`] (a physical address list written from a slice or read
//! in place), the [`CmdIn`] / [`CmdOut`] traits, and the macros that declare the typed
//! structures from the layout tables.

use super::ifc::{get, get_bytes, set, set_bytes};
use super::{CmdError, IfcField, Opcode};

/// A value stored in an [`IfcField`]: integers and flags through [`get`] / [`set`], byte
/// arrays through [`get_bytes`] / [`set_bytes`], nested contexts at the field's bit offset.
pub trait FieldValue: Sized {
    /// Reads the value of field `f` from `buf`.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a short buffer; [`CmdError::BadWidth`] when the field's
    /// width cannot hold this type.
    fn take(buf: &[u8], f: IfcField) -> Result<Self, CmdError>;
    /// Writes the value into field `f` of `buf`.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a short buffer; [`CmdError::ValueTooWide`] when the value
    /// does not fit the field.
    fn put(&self, buf: &mut [u8], f: IfcField) -> Result<(), CmdError>;
}

macro_rules! uint_value {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            fn take(buf: &[u8], f: IfcField) -> Result<Self, CmdError> {
                if f.bits > <$t>::BITS {
                    return Err(CmdError::BadWidth { field: f.name, bits: f.bits });
                }
                Ok(get(buf, f)? as $t)
            }
            fn put(&self, buf: &mut [u8], f: IfcField) -> Result<(), CmdError> {
                set(buf, f, u64::from(*self))
            }
        }
    )*};
}
uint_value!(u8, u16, u32, u64);

impl FieldValue for bool {
    fn take(buf: &[u8], f: IfcField) -> Result<Self, CmdError> {
        Ok(get(buf, f)? != 0)
    }
    fn put(&self, buf: &mut [u8], f: IfcField) -> Result<(), CmdError> {
        set(buf, f, u64::from(*self))
    }
}

/// A signed 32-bit field (QUERY_PAGES `num_pages`): two's complement in 32 bits.
impl FieldValue for i32 {
    fn take(buf: &[u8], f: IfcField) -> Result<Self, CmdError> {
        if f.bits != 32 {
            return Err(CmdError::BadWidth {
                field: f.name,
                bits: f.bits,
            });
        }
        Ok(get(buf, f)? as u32 as i32)
    }
    fn put(&self, buf: &mut [u8], f: IfcField) -> Result<(), CmdError> {
        if f.bits != 32 {
            return Err(CmdError::BadWidth {
                field: f.name,
                bits: f.bits,
            });
        }
        set(buf, f, u64::from(*self as u32))
    }
}

/// A byte-aligned array field (GIDs, `sw_owner_id`): the bytes in buffer order.
impl<const N: usize> FieldValue for [u8; N] {
    fn take(buf: &[u8], f: IfcField) -> Result<Self, CmdError> {
        let b = get_bytes(buf, f)?;
        <[u8; N]>::try_from(b).map_err(|_| CmdError::BadWidth {
            field: f.name,
            bits: f.bits,
        })
    }
    fn put(&self, buf: &mut [u8], f: IfcField) -> Result<(), CmdError> {
        set_bytes(buf, f, self)
    }
}

/// A list of 64-bit big-endian DMA addresses (`pas[]`, `klm_pas_mtt[]`): either the
/// caller's slice (to emit) or the bytes of a received command (parsed in place, no copy).
/// Two lists are equal when they hold the same addresses.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Pas<'a> {
    /// Addresses given by the caller.
    Addrs(&'a [u64]),
    /// Big-endian addresses in a command buffer (length a multiple of 8).
    Wire(&'a [u8]),
}

impl Default for Pas<'_> {
    fn default() -> Self {
        Pas::Addrs(&[])
    }
}

impl<'a> Pas<'a> {
    /// Number of addresses.
    pub fn len(&self) -> usize {
        match self {
            Pas::Addrs(a) => a.len(),
            Pas::Wire(w) => w.len() / 8,
        }
    }
    /// `true` when the list is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Address `i`.
    pub fn get(&self, i: usize) -> Option<u64> {
        match self {
            Pas::Addrs(a) => a.get(i).copied(),
            Pas::Wire(w) => w.get(i * 8..i * 8 + 8).map(|b| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_be_bytes(a)
            }),
        }
    }
    /// The addresses in order.
    pub fn iter(&self) -> impl Iterator<Item = u64> + 'a {
        let p = *self;
        (0..p.len()).filter_map(move |i| p.get(i))
    }
    /// Bytes the list occupies in a command: 8 per address.
    pub fn byte_len(&self) -> usize {
        self.len() * 8
    }
    /// The whole 8-byte entries of `buf[start..]` (what a parser gets: the input length
    /// decides how many entries there are; a trailing partial entry is ignored).
    pub fn from_tail(buf: &'a [u8], start: usize) -> Pas<'a> {
        let rest = buf.get(start..).unwrap_or(&[]);
        Pas::Wire(&rest[..rest.len() / 8 * 8])
    }
    /// Writes the addresses at `buf[start..]`.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] when they do not fit.
    pub fn emit(&self, buf: &mut [u8], start: usize) -> Result<(), CmdError> {
        let needed = start + self.byte_len();
        if buf.len() < needed {
            return Err(CmdError::Truncated {
                needed,
                len: buf.len(),
            });
        }
        for (i, a) in self.iter().enumerate() {
            buf[start + 8 * i..start + 8 * i + 8].copy_from_slice(&a.to_be_bytes());
        }
        Ok(())
    }
}

impl PartialEq for Pas<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}
impl Eq for Pas<'_> {}

/// A typed command input.
pub trait CmdIn {
    /// The command's opcode.
    const OPCODE: Opcode;
    /// Length in bytes of the command's fixed output (what to put in the entry's `outlen`
    /// unless the output carries a list).
    const OUT_LEN: usize;
    /// Bytes [`CmdIn::emit`] writes.
    fn buffer_len(&self) -> usize;
    /// Writes the whole input (zeroing reserved bits) and returns its length in bytes.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] when `buf` is shorter than [`CmdIn::buffer_len`],
    /// [`CmdError::ValueTooWide`] when a value does not fit its field.
    fn emit(&self, buf: &mut [u8]) -> Result<usize, CmdError>;
}

/// A typed command output.
pub trait CmdOut {
    /// The command's opcode.
    const OPCODE: Opcode;
    /// Bytes [`CmdOut::emit`] writes.
    fn buffer_len(&self) -> usize;
    /// Writes the whole output with status OK (zeroing reserved bits) and returns its length.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] when `buf` is shorter than [`CmdOut::buffer_len`],
    /// [`CmdError::ValueTooWide`] when a value does not fit its field.
    fn emit(&self, buf: &mut [u8]) -> Result<usize, CmdError>;
}

/// Checks and zeroes the first `len` bytes of an input and writes its header.
pub(crate) fn start_in(buf: &mut [u8], len: usize, opcode: Opcode) -> Result<&mut [u8], CmdError> {
    if buf.len() < len {
        return Err(CmdError::Truncated {
            needed: len,
            len: buf.len(),
        });
    }
    let b = &mut buf[..len];
    b.fill(0);
    super::InHeader {
        opcode,
        uid: 0,
        op_mod: 0,
    }
    .emit(b)?;
    Ok(b)
}

/// Checks and zeroes the first `len` bytes of an output and writes an OK header.
pub(crate) fn start_out(buf: &mut [u8], len: usize) -> Result<&mut [u8], CmdError> {
    if buf.len() < len {
        return Err(CmdError::Truncated {
            needed: len,
            len: buf.len(),
        });
    }
    let b = &mut buf[..len];
    b.fill(0);
    super::OutHeader::OK.emit(b)?;
    Ok(b)
}

/// Checks an input's length (at least `len`) and opcode.
pub(crate) fn check_in(buf: &[u8], len: usize, opcode: Opcode) -> Result<(), CmdError> {
    let h = super::InHeader::parse(buf)?;
    if h.opcode != opcode {
        return Err(CmdError::WrongOpcode {
            expected: opcode,
            found: h.opcode,
        });
    }
    if buf.len() < len {
        return Err(CmdError::Truncated {
            needed: len,
            len: buf.len(),
        });
    }
    Ok(())
}

/// Checks an output's status (first) and length (at least `len`).
pub(crate) fn check_out(buf: &[u8], len: usize, opcode: Opcode) -> Result<(), CmdError> {
    super::check_status(buf, opcode)?;
    if buf.len() < len {
        return Err(CmdError::Truncated {
            needed: len,
            len: buf.len(),
        });
    }
    Ok(())
}

/// Declares a typed view of a structure without a command header (a context): a `Copy`
/// struct whose fields map to the IfcFields of a layout module, `parse_at` / `emit_at` at a
/// bit offset, and [`FieldValue`] so it nests in other structures.
macro_rules! ifc_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident : $module:ident {
            $( $(#[$fm:meta])* $field:ident : $ty:ty = $f:ident ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }

        impl $name {
            /// Reads the structure that starts at bit `base` of `buf`.
            ///
            /// # Errors
            /// [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) when `buf` ends
            /// before a field does.
            pub fn parse_at(buf: &[u8], base: u32) -> Result<Self, crate::mlx5::cmd::CmdError> {
                use crate::mlx5::cmd::value::FieldValue;
                Ok($name {
                    $( $field: <$ty as FieldValue>::take(buf, $module::$f.at(base))?, )*
                })
            }

            /// Writes the fields of the structure that starts at bit `base` of `buf`
            /// (other bits are left alone).
            ///
            /// # Errors
            /// [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) when `buf` ends
            /// before a field does; [`CmdError::ValueTooWide`](crate::mlx5::cmd::CmdError::ValueTooWide)
            /// when a value does not fit its field.
            pub fn emit_at(&self, buf: &mut [u8], base: u32) -> Result<(), crate::mlx5::cmd::CmdError> {
                use crate::mlx5::cmd::value::FieldValue;
                $( FieldValue::put(&self.$field, buf, $module::$f.at(base))?; )*
                Ok(())
            }
        }

        impl crate::mlx5::cmd::value::FieldValue for $name {
            fn take(buf: &[u8], f: crate::mlx5::cmd::IfcField) -> Result<Self, crate::mlx5::cmd::CmdError> {
                $name::parse_at(buf, f.bit_offset)
            }
            fn put(&self, buf: &mut [u8], f: crate::mlx5::cmd::IfcField) -> Result<(), crate::mlx5::cmd::CmdError> {
                self.emit_at(buf, f.bit_offset)
            }
        }
    };
}

/// Declares a typed command input or output with fixed fields (and optionally a trailing
/// PAS list): struct, `parse`, `emit`, `buffer_len`, and [`CmdIn`] / [`CmdOut`].
macro_rules! command {
    (@fields $name:ident $module:ident $buf:ident { $( $field:ident : $ty:ty = $f:ident ),* }) => {
        $name {
            $( $field: <$ty as crate::mlx5::cmd::value::FieldValue>::take($buf, $module::$f)?, )*
        }
    };
    // Input without a list.
    (
        $(#[$m:meta])*
        pub struct $name:ident : in $module:ident ($out:ident), $op:ident {
            $( $(#[$fm:meta])* $field:ident : $ty:ty = $f:ident ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }

        impl $name {
            /// Reads the input (the device model's side).
            ///
            /// # Errors
            /// [`CmdError::WrongOpcode`](crate::mlx5::cmd::CmdError::WrongOpcode) for another
            /// command, [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) for a
            /// short buffer.
            #[allow(unused_variables)]
            pub fn parse(buf: &[u8]) -> Result<Self, crate::mlx5::cmd::CmdError> {
                crate::mlx5::cmd::value::check_in(buf, $module::SIZE_BYTES, Opcode::$op)?;
                Ok(command!(@fields $name $module buf { $( $field : $ty = $f ),* }))
            }
        }

        impl crate::mlx5::cmd::value::CmdIn for $name {
            const OPCODE: Opcode = Opcode::$op;
            const OUT_LEN: usize = $out::SIZE_BYTES;
            fn buffer_len(&self) -> usize {
                $module::SIZE_BYTES
            }
            #[allow(unused_variables)]
            fn emit(&self, buf: &mut [u8]) -> Result<usize, crate::mlx5::cmd::CmdError> {
                let b = crate::mlx5::cmd::value::start_in(buf, $module::SIZE_BYTES, Opcode::$op)?;
                $( crate::mlx5::cmd::value::FieldValue::put(&self.$field, b, $module::$f)?; )*
                Ok($module::SIZE_BYTES)
            }
        }
    };
    // Output without a list.
    (
        $(#[$m:meta])*
        pub struct $name:ident : out $module:ident, $op:ident {
            $( $(#[$fm:meta])* $field:ident : $ty:ty = $f:ident ),* $(,)?
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name {
            $( $(#[$fm])* pub $field: $ty, )*
        }

        impl $name {
            /// Reads the output (the driver's side); a failed command gives its status.
            ///
            /// # Errors
            /// [`CmdError::Status`](crate::mlx5::cmd::CmdError::Status) when the status is not
            /// OK, [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) for a short
            /// buffer.
            #[allow(unused_variables)]
            pub fn parse(buf: &[u8]) -> Result<Self, crate::mlx5::cmd::CmdError> {
                crate::mlx5::cmd::value::check_out(buf, $module::SIZE_BYTES, Opcode::$op)?;
                Ok(command!(@fields $name $module buf { $( $field : $ty = $f ),* }))
            }
        }

        impl crate::mlx5::cmd::value::CmdOut for $name {
            const OPCODE: Opcode = Opcode::$op;
            fn buffer_len(&self) -> usize {
                $module::SIZE_BYTES
            }
            #[allow(unused_variables)]
            fn emit(&self, buf: &mut [u8]) -> Result<usize, crate::mlx5::cmd::CmdError> {
                let b = crate::mlx5::cmd::value::start_out(buf, $module::SIZE_BYTES)?;
                $( crate::mlx5::cmd::value::FieldValue::put(&self.$field, b, $module::$f)?; )*
                Ok($module::SIZE_BYTES)
            }
        }
    };
    // Input with a trailing PAS list.
    (
        $(#[$m:meta])*
        pub struct $name:ident<'a> : in $module:ident ($out:ident), $op:ident {
            $( $(#[$fm:meta])* $field:ident : $ty:ty = $f:ident ),* $(,)?
        } pas $pas:ident
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name<'a> {
            $( $(#[$fm])* pub $field: $ty, )*
            /// The page address list (64-bit DMA addresses, one per page), after the fixed
            /// part. When parsing, every whole 8-byte entry after the fixed part.
            pub pas: crate::mlx5::cmd::value::Pas<'a>,
        }

        impl<'a> $name<'a> {
            /// Reads the input (the device model's side); the list is every whole 8-byte
            /// entry after the fixed part, so pass exactly `inlen` bytes.
            ///
            /// # Errors
            /// [`CmdError::WrongOpcode`](crate::mlx5::cmd::CmdError::WrongOpcode) for another
            /// command, [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) for a
            /// short buffer.
            pub fn parse(buf: &'a [u8]) -> Result<Self, crate::mlx5::cmd::CmdError> {
                crate::mlx5::cmd::value::check_in(buf, $module::SIZE_BYTES, Opcode::$op)?;
                Ok($name {
                    $( $field: <$ty as crate::mlx5::cmd::value::FieldValue>::take(buf, $module::$f)?, )*
                    pas: crate::mlx5::cmd::value::Pas::from_tail(buf, $module::$pas.byte_offset()),
                })
            }
        }

        impl crate::mlx5::cmd::value::CmdIn for $name<'_> {
            const OPCODE: Opcode = Opcode::$op;
            const OUT_LEN: usize = $out::SIZE_BYTES;
            fn buffer_len(&self) -> usize {
                $module::$pas.byte_offset() + self.pas.byte_len()
            }
            fn emit(&self, buf: &mut [u8]) -> Result<usize, crate::mlx5::cmd::CmdError> {
                let len = self.buffer_len();
                let b = crate::mlx5::cmd::value::start_in(buf, len, Opcode::$op)?;
                $( crate::mlx5::cmd::value::FieldValue::put(&self.$field, b, $module::$f)?; )*
                self.pas.emit(b, $module::$pas.byte_offset())?;
                Ok(len)
            }
        }
    };
    // Output with a trailing PAS list.
    (
        $(#[$m:meta])*
        pub struct $name:ident<'a> : out $module:ident, $op:ident {
            $( $(#[$fm:meta])* $field:ident : $ty:ty = $f:ident ),* $(,)?
        } pas $pas:ident
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        pub struct $name<'a> {
            $( $(#[$fm])* pub $field: $ty, )*
            /// The page address list after the fixed part (every whole 8-byte entry when
            /// parsing).
            pub pas: crate::mlx5::cmd::value::Pas<'a>,
        }

        impl<'a> $name<'a> {
            /// Reads the output (the driver's side); a failed command gives its status.
            ///
            /// # Errors
            /// [`CmdError::Status`](crate::mlx5::cmd::CmdError::Status) when the status is not
            /// OK, [`CmdError::Truncated`](crate::mlx5::cmd::CmdError::Truncated) for a short
            /// buffer.
            pub fn parse(buf: &'a [u8]) -> Result<Self, crate::mlx5::cmd::CmdError> {
                crate::mlx5::cmd::value::check_out(buf, $module::SIZE_BYTES, Opcode::$op)?;
                Ok($name {
                    $( $field: <$ty as crate::mlx5::cmd::value::FieldValue>::take(buf, $module::$f)?, )*
                    pas: crate::mlx5::cmd::value::Pas::from_tail(buf, $module::$pas.byte_offset()),
                })
            }
        }

        impl crate::mlx5::cmd::value::CmdOut for $name<'_> {
            const OPCODE: Opcode = Opcode::$op;
            fn buffer_len(&self) -> usize {
                $module::$pas.byte_offset() + self.pas.byte_len()
            }
            fn emit(&self, buf: &mut [u8]) -> Result<usize, crate::mlx5::cmd::CmdError> {
                let len = self.buffer_len();
                let b = crate::mlx5::cmd::value::start_out(buf, len)?;
                $( crate::mlx5::cmd::value::FieldValue::put(&self.$field, b, $module::$f)?; )*
                self.pas.emit(b, $module::$pas.byte_offset())?;
                Ok(len)
            }
        }
    };
}
