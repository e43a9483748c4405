//! Work completions (libibverbs `struct ibv_wc`, IBTA vol. 1 §11.4.2.1 "Poll for Completion").

/// Completion status (libibverbs `enum ibv_wc_status`; IBTA vol. 1 Table 145 names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WcStatus {
    /// The operation completed (IBV_WC_SUCCESS).
    Success,
    /// Local length error: an incoming SEND is longer than the receive WQE's buffers
    /// (IBV_WC_LOC_LEN_ERR).
    LocLenErr,
    /// Local QP operation error: internal inconsistency (IBV_WC_LOC_QP_OP_ERR).
    LocQpOpErr,
    /// Local protection error: an SGE's L_Key, range or access flags do not permit the access
    /// (IBV_WC_LOC_PROT_ERR).
    LocProtErr,
    /// The WQE was flushed because the QP is in the Error state (IBV_WC_WR_FLUSH_ERR).
    WrFlushErr,
    /// Bad response: the responder answered with an opcode or NAK code the requester cannot
    /// interpret (IBV_WC_BAD_RESP_ERR).
    BadRespErr,
    /// Local access error on the responder side (IBV_WC_LOC_ACCESS_ERR).
    LocAccessErr,
    /// The responder NAKed with "invalid request" (0x61) (IBV_WC_REM_INV_REQ_ERR).
    RemInvReqErr,
    /// The responder NAKed with "remote access error" (0x62): bad R_Key, range or access
    /// flags (IBV_WC_REM_ACCESS_ERR).
    RemAccessErr,
    /// The responder NAKed with "remote operational error" (0x63) (IBV_WC_REM_OP_ERR).
    RemOpErr,
    /// The transport retry counter ran out: no ACK after `retry_cnt` retries
    /// (IBV_WC_RETRY_EXC_ERR).
    RetryExcErr,
    /// The RNR retry counter ran out (IBV_WC_RNR_RETRY_EXC_ERR).
    RnrRetryExcErr,
}

/// What the completed WQE did (libibverbs `enum ibv_wc_opcode`, RC subset).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum WcOpcode {
    /// A SEND or SEND with immediate (IBV_WC_SEND).
    Send,
    /// An RDMA WRITE, with or without immediate (IBV_WC_RDMA_WRITE).
    RdmaWrite,
    /// An RDMA READ (IBV_WC_RDMA_READ).
    RdmaRead,
    /// A receive WQE consumed by an incoming SEND (IBV_WC_RECV).
    Recv,
    /// A receive WQE consumed by an incoming RDMA WRITE with immediate
    /// (IBV_WC_RECV_RDMA_WITH_IMM).
    RecvRdmaWithImm,
    /// An atomic compare-and-swap (IBV_WC_COMP_SWAP).
    CompSwap,
    /// An atomic fetch-and-add (IBV_WC_FETCH_ADD).
    FetchAdd,
}

/// One work completion (libibverbs `struct ibv_wc`, the fields RC uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct WorkCompletion {
    /// The `wr_id` of the completed WQE.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What the WQE did (for flushed receive WQEs: `Recv`).
    pub opcode: WcOpcode,
    /// Bytes transferred, valid on success: message length for SEND/WRITE/READ on the
    /// requester (8 for atomics); bytes received for `Recv`; the RDMA WRITE length for `RecvRdmaWithImm`
    /// (as rxe_resp.c `do_complete`). 0 on error.
    pub byte_len: u32,
    /// Immediate data (big-endian number as on the wire) for SEND/WRITE with immediate
    /// received; `None` otherwise (libibverbs `IBV_WC_WITH_IMM`).
    pub imm_data: Option<u32>,
    /// The local QP number.
    pub qp_num: u32,
}
