//! The 64-byte completion queue entry (mlx5dv.h `struct mlx5_cqe64`, `struct mlx5_err_cqe`,
//! `mlx5dv_get_cqe_*`; Linux device.h `struct mlx5_cqe64`, cq.h).
//!
//! ```text
//! 0x00 tls_outer_l3_tunneled | 0x02 wqe_id (BE16) | 0x04..0x0b LRO / SHAMPO
//! 0x0c rss_hash_result (BE32) | 0x10 rss_hash_type | 0x11 ml_path | 0x14 check_sum (BE16)
//! 0x16 slid (BE16) | 0x18 flags_rqpn (BE32) | 0x1c hds_ip_ext | 0x1d l4_hdr_type_etc
//! 0x1e vlan_info (BE16) | 0x20 srqn_uidx (BE32) | 0x24 imm_inval_pkey (BE32)
//! 0x28 app | 0x29 app_op | 0x2a app_info (BE16) | 0x2c byte_cnt (BE32)
//! 0x30 timestamp (BE64) | 0x38 sop_drop_qpn (BE32: 31..24 send WQE opcode, 23..0 QPN)
//! 0x3c wqe_counter (BE16) | 0x3e signature | 0x3f op_own (7..4 opcode, 3..2 format,
//!                                                            1 solicited, 0 owner)
//! error CQE (opcode 13/14): 0x36 vendor_err_synd | 0x37 syndrome (inside the timestamp)
//! ```
//! 128-byte CQEs carry this structure in their second half (rdma-core cq.c).

use super::Result;
use crate::rc::WcStatus;
use crate::wire::{read_u16, read_u32, read_u64, write_u16, write_u32, write_u64};

mod field {
    use crate::wire::Field;

    pub const TLS_OUTER_L3_TUNNELED: usize = 0x00;
    pub const WQE_ID: Field = 0x02..0x04;
    pub const LRO: Field = 0x04..0x0c;
    pub const RSS_HASH_RESULT: Field = 0x0c..0x10;
    pub const RSS_HASH_TYPE: usize = 0x10;
    pub const ML_PATH: usize = 0x11;
    pub const CHECK_SUM: Field = 0x14..0x16;
    pub const SLID: Field = 0x16..0x18;
    pub const FLAGS_RQPN: Field = 0x18..0x1c;
    pub const HDS_IP_EXT: usize = 0x1c;
    pub const L4_HDR_TYPE_ETC: usize = 0x1d;
    pub const VLAN_INFO: Field = 0x1e..0x20;
    pub const SRQN_UIDX: Field = 0x20..0x24;
    pub const IMM_INVAL_PKEY: Field = 0x24..0x28;
    pub const APP: usize = 0x28;
    pub const APP_OP: usize = 0x29;
    pub const APP_INFO: Field = 0x2a..0x2c;
    pub const BYTE_CNT: Field = 0x2c..0x30;
    pub const TIMESTAMP: Field = 0x30..0x38;
    pub const VENDOR_ERR_SYND: usize = 0x36;
    pub const SYNDROME: usize = 0x37;
    pub const SOP_DROP_QPN: Field = 0x38..0x3c;
    pub const WQE_COUNTER: Field = 0x3c..0x3e;
    pub const SIGNATURE: usize = 0x3e;
    pub const OP_OWN: usize = 0x3f;
}

/// Length of a CQE in bytes.
pub const LEN: usize = field::OP_OWN + 1;

/// Owner bit of `op_own` (`MLX5_CQE_OWNER_MASK`).
pub const OWNER_MASK: u8 = 1;
/// Vendor syndrome of an on-demand-paging page fault (`MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`).
pub const VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;

enum_with_unknown! {
    /// CQE opcode: bits 7..4 of `op_own` (mlx5dv.h / cq.h `MLX5_CQE_*`).
    pub enum CqeOpcode(u8) {
        /// Requester (send queue) completion (`MLX5_CQE_REQ`).
        Req = 0,
        /// Responder: RDMA WRITE with immediate (`RESP_WR_IMM`).
        RespWrImm = 1,
        /// Responder: SEND (`RESP_SEND`).
        RespSend = 2,
        /// Responder: SEND with immediate (`RESP_SEND_IMM`).
        RespSendImm = 3,
        /// Responder: SEND with invalidate (`RESP_SEND_INV`).
        RespSendInv = 4,
        /// CQ resize (`RESIZE_CQ`).
        ResizeCq = 5,
        /// No packet (`NO_PACKET`, rdma-core).
        NoPacket = 6,
        /// Signature error (`SIG_ERR`).
        SigErr = 12,
        /// Requester error (`REQ_ERR`).
        ReqErr = 13,
        /// Responder error (`RESP_ERR`).
        RespErr = 14,
        /// Not written by the device yet (`MLX5_CQE_INVALID`).
        Invalid = 15,
    }
}

impl CqeOpcode {
    /// `true` for the two error opcodes, whose CQE is an `mlx5_err_cqe`.
    pub fn is_error(self) -> bool {
        matches!(self, CqeOpcode::ReqErr | CqeOpcode::RespErr)
    }
}

enum_with_unknown! {
    /// CQE format: bits 3..2 of `op_own` (`MLX5_INLINE_SCATTER_32` = 1 << 2,
    /// `MLX5_INLINE_SCATTER_64` = 2 << 2; Linux `MLX5_COMPRESSED` = 3).
    pub enum CqeFormat(u8) {
        /// No inline data.
        NoInline = 0,
        /// Up to 32 bytes of received data scattered into the CQE.
        InlineScatter32 = 1,
        /// Up to 64 bytes scattered into a 128-byte CQE.
        InlineScatter64 = 2,
        /// A compressed CQE block (mini CQEs).
        Compressed = 3,
    }
}

enum_with_unknown! {
    /// Error syndrome of an error CQE (byte 0x37; mlx5dv.h / cq.h `MLX5_CQE_SYNDROME_*`).
    pub enum Syndrome(u8) {
        /// `LOCAL_LENGTH_ERR` → IBV_WC_LOC_LEN_ERR.
        LocalLengthErr = 0x01,
        /// `LOCAL_QP_OP_ERR` → IBV_WC_LOC_QP_OP_ERR.
        LocalQpOpErr = 0x02,
        /// `LOCAL_PROT_ERR` → IBV_WC_LOC_PROT_ERR.
        LocalProtErr = 0x04,
        /// `WR_FLUSH_ERR` → IBV_WC_WR_FLUSH_ERR (QP in error; outstanding WQEs flushed).
        WrFlushErr = 0x05,
        /// `MW_BIND_ERR` → IBV_WC_MW_BIND_ERR.
        MwBindErr = 0x06,
        /// `BAD_RESP_ERR` → IBV_WC_BAD_RESP_ERR.
        BadRespErr = 0x10,
        /// `LOCAL_ACCESS_ERR` → IBV_WC_LOC_ACCESS_ERR.
        LocalAccessErr = 0x11,
        /// `REMOTE_INVAL_REQ_ERR` → IBV_WC_REM_INV_REQ_ERR.
        RemoteInvalReqErr = 0x12,
        /// `REMOTE_ACCESS_ERR` → IBV_WC_REM_ACCESS_ERR.
        RemoteAccessErr = 0x13,
        /// `REMOTE_OP_ERR` → IBV_WC_REM_OP_ERR.
        RemoteOpErr = 0x14,
        /// `TRANSPORT_RETRY_EXC_ERR` → IBV_WC_RETRY_EXC_ERR.
        TransportRetryExcErr = 0x15,
        /// `RNR_RETRY_EXC_ERR` → IBV_WC_RNR_RETRY_EXC_ERR.
        RnrRetryExcErr = 0x16,
        /// `REMOTE_ABORTED_ERR` → IBV_WC_REM_ABORT_ERR.
        RemoteAbortedErr = 0x22,
    }
}

impl Syndrome {
    /// The libibverbs status rdma-core reports for this syndrome (cq.c
    /// `mlx5_handle_error_cqe`); unknown values give `IBV_WC_GENERAL_ERR`.
    pub const fn ibv_wc_status(self) -> &'static str {
        match self {
            Syndrome::LocalLengthErr => "IBV_WC_LOC_LEN_ERR",
            Syndrome::LocalQpOpErr => "IBV_WC_LOC_QP_OP_ERR",
            Syndrome::LocalProtErr => "IBV_WC_LOC_PROT_ERR",
            Syndrome::WrFlushErr => "IBV_WC_WR_FLUSH_ERR",
            Syndrome::MwBindErr => "IBV_WC_MW_BIND_ERR",
            Syndrome::BadRespErr => "IBV_WC_BAD_RESP_ERR",
            Syndrome::LocalAccessErr => "IBV_WC_LOC_ACCESS_ERR",
            Syndrome::RemoteInvalReqErr => "IBV_WC_REM_INV_REQ_ERR",
            Syndrome::RemoteAccessErr => "IBV_WC_REM_ACCESS_ERR",
            Syndrome::RemoteOpErr => "IBV_WC_REM_OP_ERR",
            Syndrome::TransportRetryExcErr => "IBV_WC_RETRY_EXC_ERR",
            Syndrome::RnrRetryExcErr => "IBV_WC_RNR_RETRY_EXC_ERR",
            Syndrome::RemoteAbortedErr => "IBV_WC_REM_ABORT_ERR",
            Syndrome::Unknown(_) => "IBV_WC_GENERAL_ERR",
        }
    }

    /// The same mapping into this crate's [`WcStatus`], where it has the status
    /// (`None` for MW_BIND, REMOTE_ABORTED and unknown syndromes).
    pub const fn wc_status(self) -> Option<WcStatus> {
        Some(match self {
            Syndrome::LocalLengthErr => WcStatus::LocLenErr,
            Syndrome::LocalQpOpErr => WcStatus::LocQpOpErr,
            Syndrome::LocalProtErr => WcStatus::LocProtErr,
            Syndrome::WrFlushErr => WcStatus::WrFlushErr,
            Syndrome::BadRespErr => WcStatus::BadRespErr,
            Syndrome::LocalAccessErr => WcStatus::LocAccessErr,
            Syndrome::RemoteInvalReqErr => WcStatus::RemInvReqErr,
            Syndrome::RemoteAccessErr => WcStatus::RemAccessErr,
            Syndrome::RemoteOpErr => WcStatus::RemOpErr,
            Syndrome::TransportRetryExcErr => WcStatus::RetryExcErr,
            Syndrome::RnrRetryExcErr => WcStatus::RnrRetryExcErr,
            Syndrome::MwBindErr | Syndrome::RemoteAbortedErr | Syndrome::Unknown(_) => return None,
        })
    }
}

mlx5_view!(Cqe64, "a 64-byte CQE");

impl<T: AsRef<[u8]>> Cqe64<T> {
    fn b(&self, i: usize) -> u8 {
        self.buffer.as_ref()[i]
    }

    /// Byte 0x00 (Linux `tls_outer_l3_tunneled`).
    #[inline]
    pub fn tls_outer_l3_tunneled(&self) -> u8 {
        self.b(field::TLS_OUTER_L3_TUNNELED)
    }

    /// `wqe_id` (0x02).
    #[inline]
    pub fn wqe_id(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WQE_ID)
    }

    /// The 8 LRO / SHAMPO bytes at 0x04 (Linux `lro` / `shampo` union).
    #[inline]
    pub fn lro(&self) -> [u8; 8] {
        let mut a = [0u8; 8];
        a.copy_from_slice(&self.buffer.as_ref()[field::LRO]);
        a
    }

    /// RSS hash (0x0c).
    #[inline]
    pub fn rss_hash_result(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::RSS_HASH_RESULT)
    }

    /// RSS hash type (0x10).
    #[inline]
    pub fn rss_hash_type(&self) -> u8 {
        self.b(field::RSS_HASH_TYPE)
    }

    /// `ml_path` (0x11).
    #[inline]
    pub fn ml_path(&self) -> u8 {
        self.b(field::ML_PATH)
    }

    /// Checksum (0x14, Linux `check_sum`).
    #[inline]
    pub fn check_sum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECK_SUM)
    }

    /// Source LID (0x16).
    #[inline]
    pub fn slid(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SLID)
    }

    /// Flags and remote QPN (0x18; UD: source QP in bits 23..0).
    #[inline]
    pub fn flags_rqpn(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::FLAGS_RQPN)
    }

    /// `hds_ip_ext` (0x1c).
    #[inline]
    pub fn hds_ip_ext(&self) -> u8 {
        self.b(field::HDS_IP_EXT)
    }

    /// `l4_hdr_type_etc` (0x1d; Linux `l4_l3_hdr_type`).
    #[inline]
    pub fn l4_hdr_type_etc(&self) -> u8 {
        self.b(field::L4_HDR_TYPE_ETC)
    }

    /// VLAN info (0x1e).
    #[inline]
    pub fn vlan_info(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::VLAN_INFO)
    }

    /// SRQ number or user index (0x20; bits 23..0).
    #[inline]
    pub fn srqn_uidx(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SRQN_UIDX)
    }

    /// Immediate data, invalidated rkey or P_Key (0x24), as the big-endian value.
    #[inline]
    pub fn imm_inval_pkey(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::IMM_INVAL_PKEY)
    }

    /// `app` (0x28, tag matching).
    #[inline]
    pub fn app(&self) -> u8 {
        self.b(field::APP)
    }

    /// `app_op` (0x29).
    #[inline]
    pub fn app_op(&self) -> u8 {
        self.b(field::APP_OP)
    }

    /// `app_info` (0x2a).
    #[inline]
    pub fn app_info(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::APP_INFO)
    }

    /// Bytes transferred (0x2c).
    #[inline]
    pub fn byte_cnt(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::BYTE_CNT)
    }

    /// Timestamp (0x30).
    #[inline]
    pub fn timestamp(&self) -> u64 {
        read_u64(self.buffer.as_ref(), field::TIMESTAMP)
    }

    /// Vendor error syndrome (0x36; error CQEs only).
    #[inline]
    pub fn vendor_err_synd(&self) -> u8 {
        self.b(field::VENDOR_ERR_SYND)
    }

    /// Error syndrome (0x37; error CQEs only).
    #[inline]
    pub fn syndrome(&self) -> Syndrome {
        Syndrome::from(self.b(field::SYNDROME))
    }

    /// `sop_drop_qpn` (0x38): requester CQEs carry the send WQE opcode in bits 31..24.
    #[inline]
    pub fn sop_drop_qpn(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SOP_DROP_QPN)
    }

    /// QP number (bits 23..0 of `sop_drop_qpn`).
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.sop_drop_qpn() & 0x00ff_ffff
    }

    /// WQE counter (0x3c): requester — the WQE index of the completed WQE; responder — the
    /// receive WQE counter.
    #[inline]
    pub fn wqe_counter(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WQE_COUNTER)
    }

    /// Signature (0x3e).
    #[inline]
    pub fn signature(&self) -> u8 {
        self.b(field::SIGNATURE)
    }

    /// The raw `op_own` byte (0x3f).
    #[inline]
    pub fn op_own(&self) -> u8 {
        self.b(field::OP_OWN)
    }

    /// Opcode (`op_own >> 4`, `mlx5dv_get_cqe_opcode`).
    #[inline]
    pub fn opcode(&self) -> CqeOpcode {
        CqeOpcode::from(self.op_own() >> 4)
    }

    /// Format (`(op_own >> 2) & 3`, `mlx5dv_get_cqe_format`).
    #[inline]
    pub fn format(&self) -> CqeFormat {
        CqeFormat::from((self.op_own() >> 2) & 3)
    }

    /// Solicited event (`(op_own >> 1) & 1`, `mlx5dv_get_cqe_se`).
    #[inline]
    pub fn se(&self) -> bool {
        self.op_own() & 2 != 0
    }

    /// Owner bit (`op_own & 1`, `mlx5dv_get_cqe_owner`).
    #[inline]
    pub fn owner(&self) -> bool {
        self.op_own() & OWNER_MASK != 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Cqe64<T> {
    fn set_b(&mut self, i: usize, v: u8) {
        self.buffer.as_mut()[i] = v;
    }

    /// Sets the `op_own` byte.
    #[inline]
    pub fn set_op_own(&mut self, v: u8) {
        self.set_b(field::OP_OWN, v)
    }

    /// Sets the owner bit, keeping the rest (`mlx5dv_set_cqe_owner`).
    #[inline]
    pub fn set_owner(&mut self, owner: bool) {
        let v = (self.buffer.as_ref()[field::OP_OWN] & !OWNER_MASK) | owner as u8;
        self.set_op_own(v)
    }

    /// Sets the byte count.
    #[inline]
    pub fn set_byte_cnt(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::BYTE_CNT, v)
    }

    /// Sets `sop_drop_qpn`.
    #[inline]
    pub fn set_sop_drop_qpn(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::SOP_DROP_QPN, v)
    }

    /// Sets the WQE counter.
    #[inline]
    pub fn set_wqe_counter(&mut self, v: u16) {
        write_u16(self.buffer.as_mut(), field::WQE_COUNTER, v)
    }

    /// Sets immediate / invalidated rkey / P_Key.
    #[inline]
    pub fn set_imm_inval_pkey(&mut self, v: u32) {
        write_u32(self.buffer.as_mut(), field::IMM_INVAL_PKEY, v)
    }

    /// Sets the error syndrome and vendor syndrome (bytes 0x37 and 0x36).
    #[inline]
    pub fn set_syndrome(&mut self, syndrome: Syndrome, vendor_err_synd: u8) {
        self.set_b(field::SYNDROME, syndrome.into());
        self.set_b(field::VENDOR_ERR_SYND, vendor_err_synd);
    }
}

/// The syndromes of an error CQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CqeError {
    /// IBTA-mapped syndrome (byte 0x37).
    pub syndrome: Syndrome,
    /// Vendor syndrome (byte 0x36; values are not publicly documented).
    pub vendor_err_synd: u8,
}

/// The parsed form of a 64-byte CQE: every named field of rdma-core's and Linux's
/// `struct mlx5_cqe64` (the reserved bytes 0x01, 0x12–0x13 are not kept).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct CqeRepr {
    /// Opcode (`op_own` bits 7..4).
    pub opcode: CqeOpcode,
    /// Format (`op_own` bits 3..2).
    pub format: CqeFormat,
    /// Solicited event (`op_own` bit 1).
    pub se: bool,
    /// Owner bit (`op_own` bit 0).
    pub owner: bool,
    /// Bytes transferred.
    pub byte_cnt: u32,
    /// QP number (24 bits).
    pub qpn: u32,
    /// Bits 31..24 of `sop_drop_qpn` (requester: the send WQE opcode).
    pub s_wqe_opcode: u8,
    /// WQE counter.
    pub wqe_counter: u16,
    /// Immediate / invalidated rkey / P_Key.
    pub imm_inval_pkey: u32,
    /// SRQ number / user index (and LRO segment count in bits 31..24).
    pub srqn_uidx: u32,
    /// Flags and remote QPN.
    pub flags_rqpn: u32,
    /// Source LID.
    pub slid: u16,
    /// VLAN info.
    pub vlan_info: u16,
    /// `hds_ip_ext`.
    pub hds_ip_ext: u8,
    /// `l4_hdr_type_etc`.
    pub l4_hdr_type_etc: u8,
    /// Timestamp (for error CQEs its last two bytes are the syndromes).
    pub timestamp: u64,
    /// Signature.
    pub signature: u8,
    /// `wqe_id`.
    pub wqe_id: u16,
    /// `tls_outer_l3_tunneled`.
    pub tls_outer_l3_tunneled: u8,
    /// LRO / SHAMPO bytes (0x04–0x0b).
    pub lro: [u8; 8],
    /// RSS hash.
    pub rss_hash_result: u32,
    /// RSS hash type.
    pub rss_hash_type: u8,
    /// `ml_path`.
    pub ml_path: u8,
    /// Checksum.
    pub check_sum: u16,
    /// `app`.
    pub app: u8,
    /// `app_op`.
    pub app_op: u8,
    /// `app_info`.
    pub app_info: u16,
    /// Syndromes, for error CQEs (opcode REQ_ERR / RESP_ERR) only.
    pub error: Option<CqeError>,
}

impl Default for CqeRepr {
    /// An all-zero CQE with opcode INVALID (what a freshly initialised CQ slot holds).
    fn default() -> Self {
        CqeRepr {
            opcode: CqeOpcode::Invalid,
            format: CqeFormat::NoInline,
            se: false,
            owner: false,
            byte_cnt: 0,
            qpn: 0,
            s_wqe_opcode: 0,
            wqe_counter: 0,
            imm_inval_pkey: 0,
            srqn_uidx: 0,
            flags_rqpn: 0,
            slid: 0,
            vlan_info: 0,
            hds_ip_ext: 0,
            l4_hdr_type_etc: 0,
            timestamp: 0,
            signature: 0,
            wqe_id: 0,
            tls_outer_l3_tunneled: 0,
            lro: [0; 8],
            rss_hash_result: 0,
            rss_hash_type: 0,
            ml_path: 0,
            check_sum: 0,
            app: 0,
            app_op: 0,
            app_info: 0,
            error: None,
        }
    }
}

impl CqeRepr {
    /// Parses a CQE. Every byte pattern is a valid CQE, so only the length is checked; the
    /// ownership rule is [`CqReader`](super::CqReader)'s business.
    ///
    /// # Errors
    /// [`Error::Truncated`](super::Error::Truncated) below 64 bytes.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(cqe: &Cqe64<&T>) -> Result<CqeRepr> {
        cqe.check_len()?;
        let opcode = cqe.opcode();
        let sop = cqe.sop_drop_qpn();
        Ok(CqeRepr {
            opcode,
            format: cqe.format(),
            se: cqe.se(),
            owner: cqe.owner(),
            byte_cnt: cqe.byte_cnt(),
            qpn: sop & 0x00ff_ffff,
            s_wqe_opcode: (sop >> 24) as u8,
            wqe_counter: cqe.wqe_counter(),
            imm_inval_pkey: cqe.imm_inval_pkey(),
            srqn_uidx: cqe.srqn_uidx(),
            flags_rqpn: cqe.flags_rqpn(),
            slid: cqe.slid(),
            vlan_info: cqe.vlan_info(),
            hds_ip_ext: cqe.hds_ip_ext(),
            l4_hdr_type_etc: cqe.l4_hdr_type_etc(),
            timestamp: cqe.timestamp(),
            signature: cqe.signature(),
            wqe_id: cqe.wqe_id(),
            tls_outer_l3_tunneled: cqe.tls_outer_l3_tunneled(),
            lro: cqe.lro(),
            rss_hash_result: cqe.rss_hash_result(),
            rss_hash_type: cqe.rss_hash_type(),
            ml_path: cqe.ml_path(),
            check_sum: cqe.check_sum(),
            app: cqe.app(),
            app_op: cqe.app_op(),
            app_info: cqe.app_info(),
            error: opcode.is_error().then(|| CqeError {
                syndrome: cqe.syndrome(),
                vendor_err_synd: cqe.vendor_err_synd(),
            }),
        })
    }

    /// The `op_own` byte of this CQE.
    pub fn op_own(&self) -> u8 {
        ((u8::from(self.opcode) & 0xf) << 4)
            | ((u8::from(self.format) & 3) << 2)
            | ((self.se as u8) << 1)
            | self.owner as u8
    }

    /// Length of the emitted CQE: 64 bytes.
    pub const fn buffer_len(&self) -> usize {
        LEN
    }

    /// Writes all 64 bytes (reserved bytes 0; the syndromes, when present, over the last two
    /// timestamp bytes); panics below 64 bytes. Used by the device model and tests.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, cqe: &mut Cqe64<&mut T>) {
        let b = &mut cqe.buffer.as_mut()[..LEN];
        b.fill(0);
        b[field::TLS_OUTER_L3_TUNNELED] = self.tls_outer_l3_tunneled;
        write_u16(b, field::WQE_ID, self.wqe_id);
        b[field::LRO].copy_from_slice(&self.lro);
        write_u32(b, field::RSS_HASH_RESULT, self.rss_hash_result);
        b[field::RSS_HASH_TYPE] = self.rss_hash_type;
        b[field::ML_PATH] = self.ml_path;
        write_u16(b, field::CHECK_SUM, self.check_sum);
        write_u16(b, field::SLID, self.slid);
        write_u32(b, field::FLAGS_RQPN, self.flags_rqpn);
        b[field::HDS_IP_EXT] = self.hds_ip_ext;
        b[field::L4_HDR_TYPE_ETC] = self.l4_hdr_type_etc;
        write_u16(b, field::VLAN_INFO, self.vlan_info);
        write_u32(b, field::SRQN_UIDX, self.srqn_uidx);
        write_u32(b, field::IMM_INVAL_PKEY, self.imm_inval_pkey);
        b[field::APP] = self.app;
        b[field::APP_OP] = self.app_op;
        write_u16(b, field::APP_INFO, self.app_info);
        write_u32(b, field::BYTE_CNT, self.byte_cnt);
        write_u64(b, field::TIMESTAMP, self.timestamp);
        if let Some(e) = self.error {
            b[field::SYNDROME] = e.syndrome.into();
            b[field::VENDOR_ERR_SYND] = e.vendor_err_synd;
        }
        write_u32(
            b,
            field::SOP_DROP_QPN,
            ((self.s_wqe_opcode as u32) << 24) | (self.qpn & 0x00ff_ffff),
        );
        write_u16(b, field::WQE_COUNTER, self.wqe_counter);
        b[field::SIGNATURE] = self.signature;
        b[field::OP_OWN] = self.op_own();
    }
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn test_requester_cqe() {
        let mut b = [0u8; 64];
        b[0x2c..0x30].copy_from_slice(&4096u32.to_be_bytes());
        b[0x38..0x3c].copy_from_slice(&[0x08, 0x00, 0x12, 0x34]);
        b[0x3c..0x3e].copy_from_slice(&[0xff, 0xfe]);
        b[0x3f] = 0x03; // REQ, format 0, se, owner
        let c = Cqe64::new_checked(&b[..]).unwrap();
        assert_eq!(c.opcode(), CqeOpcode::Req);
        assert!(c.se() && c.owner());
        let r = CqeRepr::parse(&c).unwrap();
        assert_eq!(r.qpn, 0x1234);
        assert_eq!(r.s_wqe_opcode, 0x08);
        assert_eq!(r.wqe_counter, 0xfffe);
        assert_eq!(r.byte_cnt, 4096);
        assert_eq!(r.error, None);
        let mut out = [0xaau8; 64];
        r.emit(&mut Cqe64::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn test_error_cqe() {
        let mut b = [0u8; 64];
        b[0x36] = VENDOR_SYNDROME_ODP_PFAULT;
        b[0x37] = 0x15;
        b[0x3f] = 0xd0 | 1;
        let r = CqeRepr::parse(&Cqe64::new_unchecked(&b[..])).unwrap();
        assert_eq!(r.opcode, CqeOpcode::ReqErr);
        let e = r.error.unwrap();
        assert_eq!(e.syndrome, Syndrome::TransportRetryExcErr);
        assert_eq!(e.syndrome.ibv_wc_status(), "IBV_WC_RETRY_EXC_ERR");
        assert_eq!(e.syndrome.wc_status(), Some(WcStatus::RetryExcErr));
        assert_eq!(e.vendor_err_synd, 0x93);
        assert_eq!(Syndrome::from(0x77).ibv_wc_status(), "IBV_WC_GENERAL_ERR");
        let mut out = [0u8; 64];
        r.emit(&mut Cqe64::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert_eq!(
            Cqe64::new_checked(&b[..63]).unwrap_err(),
            crate::mlx5::Error::Truncated
        );
    }

    #[test]
    fn test_op_own_round_trip() {
        for v in 0..=255u8 {
            let mut b = [0u8; 64];
            b[63] = v;
            let r = CqeRepr::parse(&Cqe64::new_unchecked(&b[..])).unwrap();
            assert_eq!(r.op_own(), v);
        }
    }
}
