//! The 576-byte command mailbox block (Linux `include/linux/mlx5/device.h`
//! `struct mlx5_cmd_prot_block`; rdma-core `providers/mlx5/mlx5_vfio.h`) and the chaining
//! arithmetic of a command message.
//!
//! ```text
//! 0x000 data[512]                      0x200 reserved[48]
//! 0x230 next (BE64, DMA address of the next block, 0 = last)
//! 0x238 block_num (BE32, 0, 1, 2, ... in chain order)
//! 0x23c reserved  0x23d token  0x23e ctrl_sig  0x23f sig
//! ```
//! A message of `len` bytes travels as its first 16 bytes inline in the command queue entry
//! and the rest in `ceil((len - 16) / 512)` chained blocks ([`blocks_for`],
//! [`block_range`]). Linux aligns blocks to 1 KiB; rdma-core's VFIO provider gives each its
//! own 4 KiB page.
//!
//! Signatures (Linux cmd.c `calc_block_sig` / `verify_block_sig`, used only with the
//! `cmdif_checksum` capability): `ctrl_sig = !xor(bytes 0x200..0x23e)`, then
//! `sig = !xor(bytes 0x000..0x23f)`; a block verifies when the XOR of bytes 0x200..=0x23e is
//! 0xff and the XOR of all 576 bytes is 0xff.

use core::ops::Range;

use super::entry::INLINE_LEN;
use super::signature::xor8;
use super::CmdError;
use crate::wire::{read_u32, read_u64, write_u32, write_u64};

mod field {
    use crate::wire::Field;

    pub const DATA: Field = 0x000..0x200;
    pub const RSVD0: usize = 0x200;
    pub const NEXT: Field = 0x230..0x238;
    pub const BLOCK_NUM: Field = 0x238..0x23c;
    pub const TOKEN: usize = 0x23d;
    pub const CTRL_SIG: usize = 0x23e;
    pub const SIG: usize = 0x23f;
}

/// Length of a mailbox block in bytes.
pub const LEN: usize = field::SIG + 1;
/// Data bytes per block (`MLX5_CMD_DATA_BLOCK_SIZE`, device.h).
pub const DATA_LEN: usize = 512;

/// Byte offsets of the block's fields (device.h `struct mlx5_cmd_prot_block`).
pub const OFFSETS: &[(&str, usize)] = &[
    ("data", field::DATA.start),
    ("rsvd0", field::RSVD0),
    ("next", field::NEXT.start),
    ("block_num", field::BLOCK_NUM.start),
    ("token", field::TOKEN),
    ("ctrl_sig", field::CTRL_SIG),
    ("sig", field::SIG),
];

/// Number of mailbox blocks a message of `len` bytes needs: `ceil((len - 16) / 512)`, 0 when
/// it fits inline (Linux cmd.c `mlx5_calc_cmd_blocks`).
pub const fn blocks_for(len: usize) -> usize {
    len.saturating_sub(INLINE_LEN).div_ceil(DATA_LEN)
}

/// The bytes of a `len`-byte message that block `index` carries (at the start of its data),
/// or `None` past the last block.
pub fn block_range(len: usize, index: usize) -> Option<Range<usize>> {
    if index >= blocks_for(len) {
        return None;
    }
    let start = INLINE_LEN + index * DATA_LEN;
    Some(start..len.min(start + DATA_LEN))
}

mlx5_view!(Mailbox, "a 576-byte command mailbox block", cmd);

impl<T: AsRef<[u8]>> Mailbox<T> {
    /// The 512 data bytes.
    pub fn data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::DATA]
    }
    /// `next`: DMA address of the next block, 0 for the last one.
    pub fn next(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::NEXT)
    }
    /// `block_num`: position in the chain, from 0.
    pub fn block_num(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::BLOCK_NUM)
    }
    /// `token`: equals the command entry's token.
    pub fn token(&self) -> u8 {
        self.buffer.as_ref()[field::TOKEN]
    }
    /// `ctrl_sig`.
    pub fn ctrl_sig(&self) -> u8 {
        self.buffer.as_ref()[field::CTRL_SIG]
    }
    /// `sig`.
    pub fn sig(&self) -> u8 {
        self.buffer.as_ref()[field::SIG]
    }
    /// Verifies both signatures (Linux cmd.c `verify_block_sig`).
    ///
    /// # Errors
    /// [`CmdError::BadSignature`] naming "mailbox ctrl" or "mailbox".
    pub fn check_signatures(&self) -> Result<(), CmdError> {
        let b = self.buffer.as_ref();
        if xor8(&b[field::RSVD0..field::SIG]) != 0xff {
            return Err(CmdError::BadSignature {
                what: "mailbox ctrl",
            });
        }
        if xor8(&b[..LEN]) != 0xff {
            return Err(CmdError::BadSignature { what: "mailbox" });
        }
        Ok(())
    }
    /// Checks that this is block `index` of the command with `token` (what a device checks
    /// before it reads the data).
    ///
    /// # Errors
    /// [`CmdError::BadField`] naming `block_num` or `token`.
    pub fn check_position(&self, index: u32, token: u8) -> Result<(), CmdError> {
        if self.block_num() != index {
            return Err(CmdError::BadField { field: "block_num" });
        }
        if self.token() != token {
            return Err(CmdError::BadField { field: "token" });
        }
        Ok(())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Mailbox<T> {
    /// The 512 data bytes, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::DATA]
    }
    /// Sets `next`.
    pub fn set_next(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::NEXT, v);
    }
    /// Sets `block_num`.
    pub fn set_block_num(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::BLOCK_NUM, v);
    }
    /// Sets `token`.
    pub fn set_token(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOKEN] = v;
    }
    /// Computes `ctrl_sig` then `sig` (Linux cmd.c `calc_block_sig`).
    pub fn fill_signatures(&mut self) {
        let b = self.buffer.as_mut();
        b[field::CTRL_SIG] = !xor8(&b[field::RSVD0..field::CTRL_SIG]);
        b[field::SIG] = !xor8(&b[..field::SIG]);
    }
}

/// The control part of a mailbox block; the data is passed to [`MailboxRepr::emit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MailboxRepr {
    /// DMA address of the next block, 0 for the last.
    pub next: u64,
    /// Position in the chain.
    pub block_num: u32,
    /// The command's token.
    pub token: u8,
}

impl MailboxRepr {
    /// Reads the control part of a block.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a short buffer.
    pub fn parse<T: AsRef<[u8]>>(m: &Mailbox<T>) -> Result<MailboxRepr, CmdError> {
        m.check_len()?;
        Ok(MailboxRepr {
            next: m.next(),
            block_num: m.block_num(),
            token: m.token(),
        })
    }

    /// Writes a whole block: `data` (at most 512 bytes; the rest of the data area is zeroed),
    /// zeroed reserved bytes, the control fields and both signatures.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a short buffer, [`CmdError::BadLength`] for more than 512
    /// data bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        m: &mut Mailbox<T>,
        data: &[u8],
    ) -> Result<(), CmdError> {
        m.check_len()?;
        if data.len() > DATA_LEN {
            return Err(CmdError::BadLength {
                what: "mailbox data",
                len: data.len(),
            });
        }
        m.buffer.as_mut()[..LEN].fill(0);
        m.data_mut()[..data.len()].copy_from_slice(data);
        m.set_next(self.next);
        m.set_block_num(self.block_num);
        m.set_token(self.token);
        m.fill_signatures();
        Ok(())
    }

    /// Bytes [`MailboxRepr::emit`] writes: 576.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chaining_math() {
        assert_eq!(blocks_for(0), 0);
        assert_eq!(blocks_for(16), 0);
        assert_eq!(blocks_for(17), 1);
        assert_eq!(blocks_for(16 + 512), 1);
        assert_eq!(blocks_for(16 + 513), 2);
        // CREATE_QP with 4 PAS entries: 0x110 + 32 bytes.
        assert_eq!(blocks_for(0x110 + 32), 1);
        assert_eq!(block_range(16 + 513, 0), Some(16..528));
        assert_eq!(block_range(16 + 513, 1), Some(528..529));
        assert_eq!(block_range(16 + 513, 2), None);
        assert_eq!(block_range(10, 0), None);
    }

    #[test]
    fn emit_parse_signatures() {
        let mut b = [0xaau8; LEN];
        let r = MailboxRepr {
            next: 0xdead_b000,
            block_num: 3,
            token: 9,
        };
        let mut m = Mailbox::new_checked(&mut b[..]).unwrap();
        r.emit(&mut m, &[1, 2, 3]).unwrap();
        assert_eq!(m.check_signatures(), Ok(()));
        assert_eq!(m.check_position(3, 9), Ok(()));
        assert!(m.check_position(2, 9).is_err());
        assert_eq!(MailboxRepr::parse(&m), Ok(r));
        assert_eq!(
            &b[0x230..0x240],
            &[0, 0, 0, 0, 0xde, 0xad, 0xb0, 0, 0, 0, 0, 3, 0, 9, b[0x23e], b[0x23f]]
        );
        b[5] ^= 1;
        let m = Mailbox::new_unchecked(&b[..]);
        assert_eq!(
            m.check_signatures(),
            Err(CmdError::BadSignature { what: "mailbox" })
        );
        let mut too_much = [0u8; LEN];
        assert!(r
            .emit(&mut Mailbox::new_unchecked(&mut too_much[..]), &[0; 513])
            .is_err());
    }
}
