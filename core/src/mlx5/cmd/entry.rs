//! The 64-byte command queue entry (Linux `include/linux/mlx5/device.h`
//! `struct mlx5_cmd_layout`; rdma-core `providers/mlx5/mlx5_vfio.h`).
//!
//! ```text
//! 0x00 type (7 = PCIe transport)  0x01..0x03 reserved
//! 0x04 inlen (BE32, total input bytes)      0x08 in_ptr (BE64, first input mailbox)
//! 0x10 in[16]  first 16 input bytes         0x20 out[16] first 16 output bytes
//! 0x30 out_ptr (BE64, first output mailbox) 0x38 outlen (BE32)
//! 0x3c token   0x3d sig   0x3e reserved   0x3f status_own (7..1 delivery status, 0 owner)
//! ```
//! The command queue is one 4 KiB page of `1 << log_cmdq_size` entries, `1 << log_cmdq_stride`
//! bytes apart (see [`super::init_seg`]); software fills an entry, sets the owner bit
//! ([`OWNER_HW`]) and rings `cmd_dbell` with `1 << slot`; the device clears the owner bit when
//! the output is ready.
//!
//! Signature (Linux cmd.c `set_signature` / `verify_signature`, used only when the
//! `cmdif_checksum` capability is on): `sig` is chosen so that the XOR of all 64 bytes is 0xff,
//! i.e. with `sig` zero, `sig = !xor(all 64 bytes)`.

use super::signature::xor8;
use super::{CmdError, DeliveryStatus};
use crate::wire::{read_u32, read_u64, write_u32, write_u64};

mod field {
    use crate::wire::Field;

    pub const TYPE: usize = 0x00;
    pub const INLEN: Field = 0x04..0x08;
    pub const IN_PTR: Field = 0x08..0x10;
    pub const IN: Field = 0x10..0x20;
    pub const OUT: Field = 0x20..0x30;
    pub const OUT_PTR: Field = 0x30..0x38;
    pub const OUTLEN: Field = 0x38..0x3c;
    pub const TOKEN: usize = 0x3c;
    pub const SIG: usize = 0x3d;
    pub const STATUS_OWN: usize = 0x3f;
}

/// Length of a command queue entry in bytes.
pub const LEN: usize = field::STATUS_OWN + 1;
/// Bytes of input and of output carried inline in the entry (the rest goes in mailboxes).
pub const INLINE_LEN: usize = 16;
/// `type` of a command delivered over PCIe (`MLX5_PCI_CMD_XPORT`, device.h).
pub const PCI_CMD_XPORT: u8 = 7;
/// Owner bit of `status_own`: set by software to hand the entry to the device (`CMD_OWNER_HW`,
/// Linux driver.h).
pub const OWNER_HW: u8 = 1;
/// Most entries a command queue can have (`MLX5_MAX_COMMANDS`, device.h).
pub const MAX_COMMANDS: usize = 32;

/// Byte offsets of the entry's fields (device.h `struct mlx5_cmd_layout`), for the
/// conformance test and for code that writes the entry through MMIO-like accessors.
pub const OFFSETS: &[(&str, usize)] = &[
    ("type", field::TYPE),
    ("inlen", field::INLEN.start),
    ("in_ptr", field::IN_PTR.start),
    ("in", field::IN.start),
    ("out", field::OUT.start),
    ("out_ptr", field::OUT_PTR.start),
    ("outlen", field::OUTLEN.start),
    ("token", field::TOKEN),
    ("sig", field::SIG),
    ("status_own", field::STATUS_OWN),
];

mlx5_view!(CmdEntry, "a 64-byte command queue entry", cmd);

impl<T: AsRef<[u8]>> CmdEntry<T> {
    /// `type` (7 for PCIe).
    pub fn ty(&self) -> u8 {
        self.buffer.as_ref()[field::TYPE]
    }
    /// `inlen`: total input length in bytes (inline part included).
    pub fn in_len(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::INLEN)
    }
    /// `in_ptr`: DMA address of the first input mailbox, 0 when the input fits inline.
    pub fn in_ptr(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::IN_PTR)
    }
    /// The first 16 input bytes (the command header).
    pub fn in_inline(&self) -> &[u8] {
        &self.buffer.as_ref()[field::IN]
    }
    /// The first 16 output bytes (status, syndrome, and the first output dwords).
    pub fn out_inline(&self) -> &[u8] {
        &self.buffer.as_ref()[field::OUT]
    }
    /// `out_ptr`: DMA address of the first output mailbox.
    pub fn out_ptr(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::OUT_PTR)
    }
    /// `outlen`: total output length in bytes.
    pub fn out_len(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::OUTLEN)
    }
    /// `token`: must equal the token of every mailbox of this command.
    pub fn token(&self) -> u8 {
        self.buffer.as_ref()[field::TOKEN]
    }
    /// `sig`.
    pub fn sig(&self) -> u8 {
        self.buffer.as_ref()[field::SIG]
    }
    /// The raw `status_own` byte.
    pub fn status_own(&self) -> u8 {
        self.buffer.as_ref()[field::STATUS_OWN]
    }
    /// `true` while the device owns the entry (owner bit set).
    pub fn hw_owned(&self) -> bool {
        self.status_own() & OWNER_HW != 0
    }
    /// The delivery status, bits 7..1 of `status_own`.
    pub fn delivery_status(&self) -> DeliveryStatus {
        DeliveryStatus::from(self.status_own() >> 1)
    }
    /// `true` when the XOR of all 64 bytes is 0xff (Linux cmd.c `verify_signature`).
    pub fn signature_ok(&self) -> bool {
        xor8(&self.buffer.as_ref()[..LEN]) == 0xff
    }
    /// The completion check software does after the owner bit cleared: the delivery status.
    ///
    /// # Errors
    /// [`CmdError::Delivery`] when bits 7..1 of `status_own` are not 0.
    pub fn check_delivery(&self) -> Result<(), CmdError> {
        match self.delivery_status() {
            DeliveryStatus::Ok => Ok(()),
            d => Err(CmdError::Delivery(d)),
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CmdEntry<T> {
    /// Sets `type`.
    pub fn set_ty(&mut self, v: u8) {
        self.buffer.as_mut()[field::TYPE] = v;
    }
    /// Sets `inlen`.
    pub fn set_in_len(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::INLEN, v);
    }
    /// Sets `in_ptr`.
    pub fn set_in_ptr(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::IN_PTR, v);
    }
    /// The first 16 input bytes, writable.
    pub fn in_inline_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::IN]
    }
    /// The first 16 output bytes, writable (software zeroes them; the device fills them).
    pub fn out_inline_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::OUT]
    }
    /// Sets `out_ptr`.
    pub fn set_out_ptr(&mut self, v: u64) {
        write_u64(self.buffer.as_mut(), field::OUT_PTR, v);
    }
    /// Sets `outlen`.
    pub fn set_out_len(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::OUTLEN, v);
    }
    /// Sets `token`.
    pub fn set_token(&mut self, v: u8) {
        self.buffer.as_mut()[field::TOKEN] = v;
    }
    /// Sets `sig`.
    pub fn set_sig(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIG] = v;
    }
    /// Sets the raw `status_own` byte.
    pub fn set_status_own(&mut self, v: u8) {
        self.buffer.as_mut()[field::STATUS_OWN] = v;
    }
    /// Completes the entry as the device does: `status_own = delivery << 1` (owner bit clear).
    pub fn complete(&mut self, delivery: DeliveryStatus) {
        self.set_status_own(u8::from(delivery) << 1);
    }
    /// Computes `sig` so that the XOR of all 64 bytes is 0xff (Linux cmd.c `set_signature`).
    pub fn fill_signature(&mut self) {
        self.set_sig(0);
        let x = xor8(&self.buffer.as_ref()[..LEN]);
        self.set_sig(!x);
    }
}

/// What software puts in a command queue entry before ringing the doorbell: the input
/// header bytes, lengths, mailbox pointers and token (Linux cmd.c `cmd_work_handler`,
/// rdma-core mlx5_vfio.c `mlx5_vfio_post_cmd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CmdEntryRepr {
    /// The first 16 input bytes.
    pub in_inline: [u8; INLINE_LEN],
    /// Total input length in bytes.
    pub in_len: u32,
    /// First input mailbox (0 when `in_len <= 16`).
    pub in_ptr: u64,
    /// Total output length in bytes.
    pub out_len: u32,
    /// First output mailbox (0 when `out_len <= 16`).
    pub out_ptr: u64,
    /// Token shared with the mailboxes.
    pub token: u8,
}

impl CmdEntryRepr {
    /// The entry for a command whose whole input is `input` (its first 16 bytes go inline;
    /// the rest travels in the mailbox chain at `in_ptr`, see
    /// [`super::mailbox::block_range`]) and whose output is `out_len` bytes.
    ///
    /// # Errors
    /// [`CmdError::BadLength`] for an input longer than `u32::MAX` bytes.
    pub fn for_message(
        input: &[u8],
        in_ptr: u64,
        out_len: u32,
        out_ptr: u64,
        token: u8,
    ) -> Result<CmdEntryRepr, CmdError> {
        let in_len = u32::try_from(input.len()).map_err(|_| CmdError::BadLength {
            what: "command input",
            len: input.len(),
        })?;
        let mut in_inline = [0u8; INLINE_LEN];
        let n = input.len().min(INLINE_LEN);
        in_inline[..n].copy_from_slice(&input[..n]);
        Ok(CmdEntryRepr {
            in_inline,
            in_len,
            in_ptr,
            out_len,
            out_ptr,
            token,
        })
    }

    /// Reads a posted entry (the device model's side).
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a short buffer; [`CmdError::BadField`] when `type` is not
    /// [`PCI_CMD_XPORT`].
    pub fn parse<T: AsRef<[u8]>>(e: &CmdEntry<T>) -> Result<CmdEntryRepr, CmdError> {
        e.check_len()?;
        if e.ty() != PCI_CMD_XPORT {
            return Err(CmdError::BadField { field: "type" });
        }
        let mut in_inline = [0u8; INLINE_LEN];
        in_inline.copy_from_slice(e.in_inline());
        Ok(CmdEntryRepr {
            in_inline,
            in_len: e.in_len(),
            in_ptr: e.in_ptr(),
            out_len: e.out_len(),
            out_ptr: e.out_ptr(),
            token: e.token(),
        })
    }

    /// Writes the entry as software posts it: type 7, zeroed inline output, owner bit set
    /// (`status_own = 1`), and the signature. Ring the doorbell after a write barrier.
    ///
    /// # Errors
    /// [`CmdError::Truncated`] for a buffer shorter than 64 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, e: &mut CmdEntry<T>) -> Result<(), CmdError> {
        e.check_len()?;
        e.buffer.as_mut()[..LEN].fill(0);
        e.set_ty(PCI_CMD_XPORT);
        e.set_in_len(self.in_len);
        e.set_in_ptr(self.in_ptr);
        e.in_inline_mut().copy_from_slice(&self.in_inline);
        e.set_out_ptr(self.out_ptr);
        e.set_out_len(self.out_len);
        e.set_token(self.token);
        e.set_status_own(OWNER_HW);
        e.fill_signature();
        Ok(())
    }

    /// Bytes [`CmdEntryRepr::emit`] writes: 64.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_signature() {
        let r = CmdEntryRepr {
            in_inline: [1; 16],
            in_len: 0x110,
            in_ptr: 0x1234_5000,
            out_len: 0x10,
            out_ptr: 0,
            token: 7,
        };
        let mut b = [0xeeu8; LEN];
        let mut e = CmdEntry::new_checked(&mut b[..]).unwrap();
        r.emit(&mut e).unwrap();
        assert!(e.hw_owned());
        assert!(e.signature_ok());
        assert_eq!(CmdEntryRepr::parse(&e), Ok(r));
        assert_eq!(b[0], 7);
        assert_eq!(&b[4..8], &[0, 0, 1, 0x10]);
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0x12, 0x34, 0x50, 0]);
        assert_eq!(b[0x3c], 7);
        assert_eq!(b[0x3f], 1);
        let mut e = CmdEntry::new_unchecked(&mut b[..]);
        e.complete(DeliveryStatus::TokenErr);
        assert!(!e.hw_owned());
        assert_eq!(
            e.check_delivery(),
            Err(CmdError::Delivery(DeliveryStatus::TokenErr))
        );
        assert!(!e.signature_ok());
    }

    #[test]
    fn for_message_splits_inline() {
        let msg = [7u8; 20];
        let r = CmdEntryRepr::for_message(&msg, 0x1000, 16, 0, 1).unwrap();
        assert_eq!(r.in_inline, [7; 16]);
        assert_eq!(r.in_len, 20);
        let r = CmdEntryRepr::for_message(&msg[..4], 0, 16, 0, 1).unwrap();
        assert_eq!(&r.in_inline[..5], &[7, 7, 7, 7, 0]);
    }

    #[test]
    fn short_and_bad_type() {
        assert!(CmdEntry::new_checked(&[0u8; 63][..]).is_err());
        let b = [0u8; LEN];
        assert_eq!(
            CmdEntryRepr::parse(&CmdEntry::new_unchecked(&b[..])),
            Err(CmdError::BadField { field: "type" })
        );
    }
}
