//! Control segment: the first 16 bytes of every send WQE (rdma-core mlx5dv.h
//! `struct mlx5_wqe_ctrl_seg`, `mlx5dv_set_ctrl_seg`; Linux qp.h).
//!
//! ```text
//! byte 0: opmod | bytes 1-2: WQE index (BE16) | byte 3: opcode
//! bytes 4-6: QPN (BE24) | byte 7: DS (bits 5..0; 7..6 reserved)
//! byte 8: signature | bytes 9-10: dci_stream_channel_id (DCI only) | byte 11: fm_ce_se
//! bytes 12-15: immediate / invalidate rkey / UMR mkey (BE32)
//! ```

use super::opcode::Opcode;
use super::{Error, Result, MAX_DS};
use crate::wire::{read_u16, read_u24, read_u32, write_u16, write_u24, write_u32};

mod field {
    use crate::wire::Field;

    pub const OPMOD: usize = 0;
    pub const WQE_INDEX: Field = 1..3;
    pub const OPCODE: usize = 3;
    pub const QPN: Field = 4..7;
    pub const DS: usize = 7;
    pub const SIGNATURE: usize = 8;
    pub const DCI_STREAM_CHANNEL_ID: Field = 9..11;
    pub const FM_CE_SE: usize = 11;
    pub const IMM: Field = 12..16;
}

/// Length of a control segment in bytes.
pub const LEN: usize = field::IMM.end;

/// Mask of the DS field in byte 7 (`MLX5_WQE_CTRL_DS_MASK`, qp.h).
pub const DS_MASK: u8 = 0x3f;

mlx5_view!(CtrlSeg, "a send WQE control segment");

enum_with_unknown! {
    /// Fence mode: bits 7..5 of `fm_ce_se` (Linux qp.h `MLX5_FENCE_MODE_*`, shifted down).
    pub enum FenceMode(u8) {
        /// No fence (`MLX5_FENCE_MODE_NONE`).
        None = 0,
        /// Wait for earlier small (local) operations (`INITIATOR_SMALL`; rdma-core
        /// `MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE`, used after BIND_MW / LOCAL_INV).
        InitiatorSmall = 1,
        /// Fence (`MLX5_FENCE_MODE_FENCE`).
        Fence = 2,
        /// Strong ordering (`MLX5_FENCE_MODE_STRONG_ORDERING`).
        StrongOrdering = 3,
        /// Small-and-fence: what rdma-core uses for `IBV_SEND_FENCE` (`MLX5_WQE_CTRL_FENCE`,
        /// Linux `MLX5_FENCE_MODE_SMALL_AND_FENCE`).
        SmallAndFence = 4,
    }
}

/// Byte 11 of the control segment: fence mode (bits 7..5), completion mode (bits 3..2) and
/// solicited event (bit 1). The raw byte is kept so that every value round-trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct FmCeSe(pub u8);

impl FmCeSe {
    /// Always generate a CQE (`MLX5_WQE_CTRL_CQ_UPDATE` = 2 << 2).
    pub const CQ_UPDATE: u8 = 2 << 2;
    /// Generate a CQE and an EQE (Linux `MLX5_WQE_CTRL_CQ_UPDATE_AND_EQE` = 3 << 2).
    pub const CQ_UPDATE_AND_EQE: u8 = 3 << 2;
    /// Solicited event (`MLX5_WQE_CTRL_SOLICITED` = 1 << 1).
    pub const SOLICITED: u8 = 1 << 1;
    /// The fence rdma-core sets for `IBV_SEND_FENCE` (`MLX5_WQE_CTRL_FENCE` = 4 << 5).
    pub const FENCE: u8 = 4 << 5;
    /// Initiator-small fence (`MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE` = 1 << 5).
    pub const INITIATOR_SMALL_FENCE: u8 = 1 << 5;

    /// The byte rdma-core's `_mlx5_post_send` writes for these send flags:
    /// `sq_signal_bits | fence | CQ_UPDATE if signaled | SOLICITED if solicited`.
    pub const fn from_flags(signaled: bool, solicited: bool, fence: bool) -> FmCeSe {
        let mut b = 0;
        if fence {
            b |= Self::FENCE;
        }
        if signaled {
            b |= Self::CQ_UPDATE;
        }
        if solicited {
            b |= Self::SOLICITED;
        }
        FmCeSe(b)
    }

    /// Fence mode (bits 7..5).
    pub fn fence_mode(self) -> FenceMode {
        FenceMode::from(self.0 >> 5)
    }

    /// Completion mode (bits 3..2): 0 = CQE only on error, 2 = always, 3 = CQE and EQE.
    pub const fn completion_mode(self) -> u8 {
        (self.0 >> 2) & 3
    }

    /// `true` when the WQE always generates a CQE (completion mode 2 or 3).
    pub const fn signaled(self) -> bool {
        self.0 & Self::CQ_UPDATE != 0
    }

    /// `true` when the solicited-event bit is set.
    pub const fn solicited(self) -> bool {
        self.0 & Self::SOLICITED != 0
    }

    /// `true` when any fence mode is set.
    pub const fn fenced(self) -> bool {
        self.0 >> 5 != 0
    }
}

impl<T: AsRef<[u8]>> CtrlSeg<T> {
    /// Opcode modifier (byte 0).
    #[inline]
    pub fn opmod(&self) -> u8 {
        self.buffer.as_ref()[field::OPMOD]
    }

    /// WQE index: the producer counter in WQEBBs of this WQE's first block, wrapping at
    /// 0xffff regardless of the ring size (bytes 1–2).
    #[inline]
    pub fn wqe_index(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WQE_INDEX)
    }

    /// Opcode (byte 3).
    #[inline]
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.buffer.as_ref()[field::OPCODE])
    }

    /// QP (or SQ) number, 24 bits (bytes 4–6).
    #[inline]
    pub fn qpn(&self) -> u32 {
        read_u24(self.buffer.as_ref(), field::QPN)
    }

    /// Byte 7 as stored: DS in bits 5..0, bits 7..6 reserved.
    #[inline]
    pub fn ds_byte(&self) -> u8 {
        self.buffer.as_ref()[field::DS]
    }

    /// WQE size in 16-byte units, all segments including this one (byte 7 bits 5..0).
    #[inline]
    pub fn ds(&self) -> u8 {
        self.ds_byte() & DS_MASK
    }

    /// WQE signature (byte 8; only meaningful when the QP has `wq_signature`).
    #[inline]
    pub fn signature(&self) -> u8 {
        self.buffer.as_ref()[field::SIGNATURE]
    }

    /// DCI stream channel (bytes 9–10; 0 except on DCI QPs).
    #[inline]
    pub fn dci_stream_channel_id(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DCI_STREAM_CHANNEL_ID)
    }

    /// Fence / completion / solicited byte (byte 11).
    #[inline]
    pub fn fm_ce_se(&self) -> FmCeSe {
        FmCeSe(self.buffer.as_ref()[field::FM_CE_SE])
    }

    /// Immediate data, invalidate rkey or UMR mkey, as the big-endian value in bytes 12–15.
    #[inline]
    pub fn imm(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::IMM)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> CtrlSeg<T> {
    /// Sets the opcode modifier.
    #[inline]
    pub fn set_opmod(&mut self, v: u8) {
        self.buffer.as_mut()[field::OPMOD] = v;
    }

    /// Sets the WQE index.
    #[inline]
    pub fn set_wqe_index(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::WQE_INDEX, v)
    }

    /// Sets the opcode.
    #[inline]
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = v.into();
    }

    /// Sets the QP number (low 24 bits of `v`).
    #[inline]
    pub fn set_qpn(&mut self, v: u32) {
        write_u24(self.buffer.as_mut(), field::QPN, v)
    }

    /// Sets byte 7 to `v & 0x3f` (DS; the reserved bits are cleared).
    #[inline]
    pub fn set_ds(&mut self, v: u8) {
        self.buffer.as_mut()[field::DS] = v & DS_MASK;
    }

    /// Sets the signature byte.
    #[inline]
    pub fn set_signature(&mut self, v: u8) {
        self.buffer.as_mut()[field::SIGNATURE] = v;
    }

    /// Sets the DCI stream channel.
    #[inline]
    pub fn set_dci_stream_channel_id(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::DCI_STREAM_CHANNEL_ID, v)
    }

    /// Sets the fence / completion / solicited byte.
    #[inline]
    pub fn set_fm_ce_se(&mut self, v: FmCeSe) {
        self.buffer.as_mut()[field::FM_CE_SE] = v.0;
    }

    /// Sets bytes 12–15 to `v` big-endian.
    #[inline]
    pub fn set_imm(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::IMM, v)
    }
}

/// The parsed form of a control segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CtrlRepr {
    /// Opcode modifier (0 for RC/UC/UD sends).
    pub opmod: u8,
    /// WQE index (16-bit WQEBB producer counter of the first block).
    pub wqe_index: u16,
    /// Opcode.
    pub opcode: Opcode,
    /// QP number (24 bits).
    pub qpn: u32,
    /// WQE size in 16-byte units, 1..=63.
    pub ds: u8,
    /// WQE signature (0 unless the QP was created with `wq_signature`).
    pub signature: u8,
    /// DCI stream channel (0 except on DCI QPs).
    pub dci_stream_channel_id: u16,
    /// Fence / completion / solicited byte.
    pub fm_ce_se: FmCeSe,
    /// Immediate (SEND_IMM, WRITE_IMM) or invalidate rkey (SEND_INVAL) as the big-endian value
    /// of bytes 12–15. A verbs `imm_data` (already network order) is `u32::from_be(imm_data)`.
    pub imm: u32,
}

impl CtrlRepr {
    /// Parses a control segment.
    ///
    /// # Errors
    /// [`Error::Truncated`] below 16 bytes; [`Error::BadField`] when DS is 0 or the reserved
    /// bits 7..6 of byte 7 are set.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(seg: &CtrlSeg<&T>) -> Result<CtrlRepr> {
        seg.check_len()?;
        let ds_byte = seg.ds_byte();
        if ds_byte & !DS_MASK != 0 || ds_byte == 0 {
            return Err(Error::BadField);
        }
        Ok(CtrlRepr {
            opmod: seg.opmod(),
            wqe_index: seg.wqe_index(),
            opcode: seg.opcode(),
            qpn: seg.qpn(),
            ds: ds_byte,
            signature: seg.signature(),
            dci_stream_channel_id: seg.dci_stream_channel_id(),
            fm_ce_se: seg.fm_ce_se(),
            imm: seg.imm(),
        })
    }

    /// Length of the emitted segment: 16 bytes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Bytes 0–7 as one big-endian word: opmod, WQE index, opcode, QPN (low 24 bits), DS
    /// (masked to 6 bits). `head().to_be_bytes()` is what the 8-byte doorbell carries.
    #[inline(always)]
    pub fn head(&self) -> u64 {
        ((self.opmod as u64) << 56)
            | ((self.wqe_index as u64) << 40)
            | ((u8::from(self.opcode) as u64) << 32)
            | (((self.qpn & 0x00ff_ffff) as u64) << 8)
            | (self.ds & DS_MASK) as u64
    }

    /// Bytes 8–15 as one big-endian word: signature, DCI stream channel, `fm_ce_se`, imm.
    #[inline(always)]
    pub fn tail(&self) -> u64 {
        ((self.signature as u64) << 56)
            | ((self.dci_stream_channel_id as u64) << 40)
            | ((self.fm_ce_se.0 as u64) << 32)
            | self.imm as u64
    }

    /// Writes all 16 bytes (the QPN's low 24 bits, DS masked to 6 bits); panics if the buffer
    /// is shorter than 16 bytes. Same bytes as `mlx5dv_set_ctrl_seg(seg, wqe_index, opcode,
    /// opmod, qpn, fm_ce_se, ds, signature, htobe32(imm))` with the reserved bytes zeroed.
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, seg: &mut CtrlSeg<&mut T>) {
        // Two big-endian words, two 8-byte stores (not one store per field).
        let b = &mut seg.buffer.as_mut()[..LEN];
        b[..8].copy_from_slice(&self.head().to_be_bytes());
        b[8..].copy_from_slice(&self.tail().to_be_bytes());
    }

    /// WQEBBs this WQE consumes: `ceil(ds / 4)`.
    pub const fn wqebbs(&self) -> usize {
        super::wqebbs_for_ds(self.ds as usize)
    }

    /// `true` when `ds` is in 1..=63.
    pub const fn ds_valid(&self) -> bool {
        self.ds != 0 && self.ds as usize <= MAX_DS
    }
}

#[cfg(test)]
mod test {
    use super::*;

    // mlx5dv_set_ctrl_seg(seg, pi=0x1234, RDMA_WRITE, opmod 0, qpn 0xabcdef,
    // fm_ce_se CQ_UPDATE|SOLICITED, ds 3, signature 0, imm htobe32(0x01020304)).
    static CTRL: [u8; 16] = [
        0x00, 0x12, 0x34, 0x08, 0xab, 0xcd, 0xef, 0x03, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 0x03,
        0x04,
    ];

    fn repr() -> CtrlRepr {
        CtrlRepr {
            opmod: 0,
            wqe_index: 0x1234,
            opcode: Opcode::RdmaWrite,
            qpn: 0xab_cdef,
            ds: 3,
            signature: 0,
            dci_stream_channel_id: 0,
            fm_ce_se: FmCeSe::from_flags(true, true, false),
            imm: 0x0102_0304,
        }
    }

    #[test]
    fn test_parse_emit() {
        let seg = CtrlSeg::new_checked(&CTRL[..]).unwrap();
        assert_eq!(CtrlRepr::parse(&seg).unwrap(), repr());
        let mut buf = [0xffu8; 16];
        repr().emit(&mut CtrlSeg::new_unchecked(&mut buf[..]));
        assert_eq!(buf, CTRL);
        assert_eq!(repr().wqebbs(), 1);
    }

    #[test]
    fn test_fm_ce_se() {
        assert_eq!(FmCeSe::from_flags(true, false, false).0, 0x08);
        assert_eq!(FmCeSe::from_flags(false, true, false).0, 0x02);
        assert_eq!(FmCeSe::from_flags(false, false, true).0, 0x80);
        let f = FmCeSe(0x80 | 0x0c | 0x02);
        assert_eq!(f.fence_mode(), FenceMode::SmallAndFence);
        assert_eq!(f.completion_mode(), 3);
        assert!(f.signaled() && f.solicited() && f.fenced());
        assert!(!FmCeSe(0).signaled());
    }

    #[test]
    fn test_bad_ds() {
        let mut b = CTRL;
        b[7] = 0;
        assert_eq!(
            CtrlRepr::parse(&CtrlSeg::new_unchecked(&b[..])),
            Err(Error::BadField)
        );
        b[7] = 0x43;
        assert_eq!(
            CtrlRepr::parse(&CtrlSeg::new_unchecked(&b[..])),
            Err(Error::BadField)
        );
        assert_eq!(
            CtrlSeg::new_checked(&CTRL[..15]).unwrap_err(),
            Error::Truncated
        );
    }
}
