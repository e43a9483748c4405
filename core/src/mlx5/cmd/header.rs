//! The header every command input starts with (`opcode`, `uid`, `op_mod`) and the header every
//! output starts with (`status`, `syndrome`): rdma-core `providers/mlx5/mlx5_ifc.h`
//! `mlx5_ifc_mbox_in_bits` / `mlx5_ifc_mbox_out_bits`; every Linux `*_in_bits` /
//! `*_out_bits` structure starts the same way.

use super::ifc::{get, set};
use super::{CmdError, CmdStatus, Opcode};

/// Input header fields (`mbox_in`): 16-bit `opcode` at bit 0, 16-bit `uid` at bit 0x10,
/// 16-bit `op_mod` at bit 0x30.
pub mod mbox_in {
    use super::super::IfcField;

    /// `opcode`: bits 31..16 of dword 0.
    pub const OPCODE: IfcField = IfcField::new("opcode", 0x0, 0x10);
    /// `uid`: bits 15..0 of dword 0 (0 for a driver that does not use DEVX user contexts).
    pub const UID: IfcField = IfcField::new("uid", 0x10, 0x10);
    /// `op_mod`: bits 15..0 of dword 1.
    pub const OP_MOD: IfcField = IfcField::new("op_mod", 0x30, 0x10);
    /// Size in bits of the smallest input (the header alone).
    pub const SIZE_BITS: u32 = 0x80;
    /// Size in bytes of the smallest input.
    pub const SIZE_BYTES: usize = 0x10;
}

/// Output header fields (`mbox_out`): 8-bit `status` at bit 0, 32-bit `syndrome` at 0x20.
pub mod mbox_out {
    use super::super::IfcField;

    /// `status`: byte 0 ([`CmdStatus`](super::CmdStatus)).
    pub const STATUS: IfcField = IfcField::new("status", 0x0, 0x8);
    /// `syndrome`: dword 1.
    pub const SYNDROME: IfcField = IfcField::new("syndrome", 0x20, 0x20);
    /// Size in bits of the smallest output (the header alone).
    pub const SIZE_BITS: u32 = 0x80;
    /// Size in bytes of the smallest output.
    pub const SIZE_BYTES: usize = 0x10;
}

/// A command input header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct InHeader {
    /// The command.
    pub opcode: Opcode,
    /// User context id (0).
    pub uid: u16,
    /// Command-specific modifier (capability type and mode, page-request kind, ...).
    pub op_mod: u16,
}

impl InHeader {
    /// Reads the header of any command input (what a device does first).
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for fewer than 8 bytes.
    pub fn parse(buf: &[u8]) -> Result<InHeader, CmdError> {
        Ok(InHeader {
            opcode: Opcode::from(get(buf, mbox_in::OPCODE)? as u16),
            uid: get(buf, mbox_in::UID)? as u16,
            op_mod: get(buf, mbox_in::OP_MOD)? as u16,
        })
    }

    /// Writes the three header fields, leaving the rest of `buf` alone.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for fewer than 8 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), CmdError> {
        set(buf, mbox_in::OPCODE, u64::from(u16::from(self.opcode)))?;
        set(buf, mbox_in::UID, u64::from(self.uid))?;
        set(buf, mbox_in::OP_MOD, u64::from(self.op_mod))
    }
}

/// A command output header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct OutHeader {
    /// Completion status.
    pub status: CmdStatus,
    /// Firmware-specific syndrome (0 on success).
    pub syndrome: u32,
}

impl OutHeader {
    /// A successful header.
    pub const OK: OutHeader = OutHeader {
        status: CmdStatus::Ok,
        syndrome: 0,
    };

    /// Reads the header of any command output.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for fewer than 8 bytes.
    pub fn parse(buf: &[u8]) -> Result<OutHeader, CmdError> {
        Ok(OutHeader {
            status: CmdStatus::from(get(buf, mbox_out::STATUS)? as u8),
            syndrome: get(buf, mbox_out::SYNDROME)? as u32,
        })
    }

    /// Writes `status` and `syndrome`, leaving the rest of `buf` alone.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for fewer than 8 bytes.
    pub fn emit(&self, buf: &mut [u8]) -> Result<(), CmdError> {
        set(buf, mbox_out::STATUS, u64::from(u8::from(self.status)))?;
        set(buf, mbox_out::SYNDROME, u64::from(self.syndrome))
    }

    /// `Ok` when the status is OK, else the status as an error naming `opcode`.
    ///
    /// # Errors
    /// [`CmdError::Status`] with `opcode`, status and syndrome.
    pub fn check(&self, opcode: Opcode) -> Result<(), CmdError> {
        if self.status == CmdStatus::Ok {
            Ok(())
        } else {
            Err(CmdError::Status {
                opcode,
                status: self.status,
                syndrome: self.syndrome,
            })
        }
    }
}

/// Reads the output header of `buf` and fails with [`CmdError::Status`] unless it is OK
/// (what a driver does with every output before parsing it).
///
/// # Errors
/// [`CmdError::Truncated`] for fewer than 8 bytes, [`CmdError::Status`] for a failed command.
pub fn check_status(buf: &[u8], opcode: Opcode) -> Result<(), CmdError> {
    OutHeader::parse(buf)?.check(opcode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers() {
        let mut b = [0u8; 16];
        InHeader {
            opcode: Opcode::CreateQp,
            uid: 0x1234,
            op_mod: 2,
        }
        .emit(&mut b)
        .unwrap();
        assert_eq!(&b[..8], &[0x05, 0x00, 0x12, 0x34, 0, 0, 0, 2]);
        assert_eq!(InHeader::parse(&b).unwrap().opcode, Opcode::CreateQp);
        let mut o = [0u8; 16];
        OutHeader {
            status: CmdStatus::BadParam,
            syndrome: 0xdead_beef,
        }
        .emit(&mut o)
        .unwrap();
        assert_eq!(&o[..8], &[3, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(
            check_status(&o, Opcode::CreateQp),
            Err(CmdError::Status {
                opcode: Opcode::CreateQp,
                status: CmdStatus::BadParam,
                syndrome: 0xdead_beef
            })
        );
        assert!(InHeader::parse(&b[..4]).is_err());
    }
}
