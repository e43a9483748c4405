//! The error type of the firmware-command layer.

use core::fmt;

use super::{CmdStatus, DeliveryStatus, Opcode};

/// Why a firmware command structure could not be built or parsed, or why a command failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum CmdError {
    /// The buffer holds `len` bytes but `needed` are required.
    Truncated {
        /// Bytes required.
        needed: usize,
        /// Bytes available.
        len: usize,
    },
    /// `value` does not fit in the `bits`-bit field `field`.
    ValueTooWide {
        /// The mlx5_ifc.h field name.
        field: &'static str,
        /// The field's width.
        bits: u32,
        /// The rejected value.
        value: u64,
    },
    /// The field cannot be accessed this way: a width of 0 or over 64 bits for a scalar
    /// access, or not byte-aligned for a byte access.
    BadWidth {
        /// The mlx5_ifc.h field name.
        field: &'static str,
        /// The field's width.
        bits: u32,
    },
    /// A slice for `what` has the wrong length `len` (a GID that is not 16 bytes, a PAS list
    /// longer than the command allows, a mailbox chain of the wrong size).
    BadLength {
        /// What was being written.
        what: &'static str,
        /// The length given.
        len: usize,
    },
    /// The structure holds a value the format forbids (field `field`).
    BadField {
        /// The offending field.
        field: &'static str,
    },
    /// The input's opcode is `found`, not the `expected` command.
    WrongOpcode {
        /// The command being parsed.
        expected: Opcode,
        /// The opcode in the buffer.
        found: Opcode,
    },
    /// The firmware executed `opcode` and reported `status` with `syndrome`.
    Status {
        /// The command (when known to the caller; [`Opcode::Unknown`] otherwise).
        opcode: Opcode,
        /// The output status.
        status: CmdStatus,
        /// The firmware-specific syndrome.
        syndrome: u32,
    },
    /// The device did not deliver the command (bits 7..1 of `status_own`).
    Delivery(DeliveryStatus),
    /// A signature byte does not make the XOR of the covered bytes 0xff (`what`: "entry",
    /// "mailbox", "mailbox ctrl").
    BadSignature {
        /// Which signature failed.
        what: &'static str,
    },
}

impl fmt::Display for CmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CmdError::Truncated { needed, len } => write!(
                f,
                "mlx5 command buffer too short: {len} bytes, {needed} needed"
            ),
            CmdError::ValueTooWide { field, bits, value } => write!(
                f,
                "value {value:#x} does not fit in the {bits}-bit mlx5 field `{field}`"
            ),
            CmdError::BadWidth { field, bits } => write!(
                f,
                "mlx5 field `{field}` ({bits} bits) cannot be accessed this way (scalars: 1..=64 \
                 bits; byte access: byte-aligned)"
            ),
            CmdError::BadLength { what, len } => {
                write!(f, "wrong length {len} for mlx5 command data `{what}`")
            }
            CmdError::BadField { field } => {
                write!(f, "mlx5 command field `{field}` holds a forbidden value")
            }
            CmdError::WrongOpcode { expected, found } => {
                write!(f, "expected mlx5 command {expected}, found {found}")
            }
            CmdError::Status {
                opcode,
                status,
                syndrome,
            } => write!(
                f,
                "mlx5 command {opcode} failed: status {:#x} ({}), syndrome {syndrome:#010x}",
                u8::from(status),
                status.describe()
            ),
            CmdError::Delivery(d) => write!(
                f,
                "mlx5 command not delivered: delivery status {:#x} ({d:?}); check the command \
                 queue entry, mailbox chain and tokens",
                u8::from(d)
            ),
            CmdError::BadSignature { what } => write!(
                f,
                "mlx5 command {what} signature mismatch (XOR of the covered bytes is not 0xff)"
            ),
        }
    }
}

#[cfg(any(test, feature = "std"))]
impl std::error::Error for CmdError {}
