//! Command completion status: the `status` byte and 32-bit `syndrome` at the start of every
//! command output (Linux `include/linux/mlx5/device.h` `MLX5_CMD_STAT_*`), and the delivery
//! status in bits 7..1 of a command queue entry's `status_own` byte (Linux
//! `drivers/net/ethernet/mellanox/mlx5/core/cmd.c` `deliv_status_to_str`).

enum_with_unknown! {
    /// Command status: byte 0 of every output (mlx5_ifc.h `status[0x8]`), Linux device.h
    /// `MLX5_CMD_STAT_*`. Anything but [`CmdStatus::Ok`] means the command failed; the
    /// firmware-specific `syndrome` (bits 0x20..0x40 of the output) says why.
    pub enum CmdStatus(u8) {
        /// `MLX5_CMD_STAT_OK`.
        Ok = 0x0,
        /// `MLX5_CMD_STAT_INT_ERR`: internal firmware error.
        IntErr = 0x1,
        /// `MLX5_CMD_STAT_BAD_OP_ERR`: unknown or unsupported opcode / op_mod.
        BadOp = 0x2,
        /// `MLX5_CMD_STAT_BAD_PARAM_ERR`: a field holds an invalid value.
        BadParam = 0x3,
        /// `MLX5_CMD_STAT_BAD_SYS_STATE_ERR`: the HCA is not in a state that allows it.
        BadSysState = 0x4,
        /// `MLX5_CMD_STAT_BAD_RES_ERR`: the resource (QPN, CQN, ...) does not exist.
        BadRes = 0x5,
        /// `MLX5_CMD_STAT_RES_BUSY`: the resource is in use.
        ResBusy = 0x6,
        /// `MLX5_CMD_STAT_LIM_ERR`: a limit would be exceeded.
        Lim = 0x8,
        /// `MLX5_CMD_STAT_BAD_RES_STATE_ERR`: the resource is in the wrong state.
        BadResState = 0x9,
        /// `MLX5_CMD_STAT_IX_ERR`: bad index.
        Ix = 0xa,
        /// `MLX5_CMD_STAT_NO_RES_ERR`: out of resources.
        NoRes = 0xf,
        /// `MLX5_CMD_STAT_BAD_QP_STATE_ERR`: the QP transition is not allowed from its state.
        BadQpState = 0x10,
        /// `MLX5_CMD_STAT_BAD_PKT_ERR`.
        BadPkt = 0x30,
        /// `MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR`: bad size / too many outstanding CQEs.
        BadSizeOutsCqes = 0x40,
        /// `MLX5_CMD_STAT_BAD_INP_LEN_ERR`: the input length does not match the command.
        BadInpLen = 0x50,
        /// `MLX5_CMD_STAT_BAD_OUTP_LEN_ERR`: the output length does not match the command.
        BadOutpLen = 0x51,
    }
}

impl CmdStatus {
    /// Every named status with its Linux device.h name.
    pub const ALL: &'static [(CmdStatus, &'static str)] = &[
        (CmdStatus::Ok, "MLX5_CMD_STAT_OK"),
        (CmdStatus::IntErr, "MLX5_CMD_STAT_INT_ERR"),
        (CmdStatus::BadOp, "MLX5_CMD_STAT_BAD_OP_ERR"),
        (CmdStatus::BadParam, "MLX5_CMD_STAT_BAD_PARAM_ERR"),
        (CmdStatus::BadSysState, "MLX5_CMD_STAT_BAD_SYS_STATE_ERR"),
        (CmdStatus::BadRes, "MLX5_CMD_STAT_BAD_RES_ERR"),
        (CmdStatus::ResBusy, "MLX5_CMD_STAT_RES_BUSY"),
        (CmdStatus::Lim, "MLX5_CMD_STAT_LIM_ERR"),
        (CmdStatus::BadResState, "MLX5_CMD_STAT_BAD_RES_STATE_ERR"),
        (CmdStatus::Ix, "MLX5_CMD_STAT_IX_ERR"),
        (CmdStatus::NoRes, "MLX5_CMD_STAT_NO_RES_ERR"),
        (CmdStatus::BadQpState, "MLX5_CMD_STAT_BAD_QP_STATE_ERR"),
        (CmdStatus::BadPkt, "MLX5_CMD_STAT_BAD_PKT_ERR"),
        (
            CmdStatus::BadSizeOutsCqes,
            "MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR",
        ),
        (CmdStatus::BadInpLen, "MLX5_CMD_STAT_BAD_INP_LEN_ERR"),
        (CmdStatus::BadOutpLen, "MLX5_CMD_STAT_BAD_OUTP_LEN_ERR"),
    ];

    /// A short description for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            CmdStatus::Ok => "ok",
            CmdStatus::IntErr => "internal firmware error",
            CmdStatus::BadOp => "bad operation (opcode/op_mod not supported)",
            CmdStatus::BadParam => "bad parameter",
            CmdStatus::BadSysState => "bad system state",
            CmdStatus::BadRes => "bad resource (object does not exist)",
            CmdStatus::ResBusy => "resource busy",
            CmdStatus::Lim => "limits exceeded",
            CmdStatus::BadResState => "bad resource state",
            CmdStatus::Ix => "bad index",
            CmdStatus::NoRes => "no resources",
            CmdStatus::BadQpState => "bad QP state for this transition",
            CmdStatus::BadPkt => "bad packet",
            CmdStatus::BadSizeOutsCqes => "bad size / too many outstanding CQEs",
            CmdStatus::BadInpLen => "bad input length",
            CmdStatus::BadOutpLen => "bad output length",
            CmdStatus::Unknown(_) => "unknown status",
        }
    }
}

enum_with_unknown! {
    /// Delivery status: bits 7..1 of a command queue entry's `status_own` once the device gave
    /// the entry back (Linux cmd.c `deliv_status_to_str` / `MLX5_CMD_DELIVERY_STAT_*`). Not 0
    /// means the command was not executed; the output's [`CmdStatus`] is then meaningless.
    pub enum DeliveryStatus(u8) {
        /// Delivered and executed (see the output's status).
        Ok = 0x0,
        /// Signature error in the entry or a mailbox.
        SignatureErr = 0x1,
        /// The mailbox tokens do not match the entry's token.
        TokenErr = 0x2,
        /// A mailbox has the wrong block number.
        BadBlockNumber = 0x3,
        /// The output mailbox pointer is not aligned.
        OutPtrAlignErr = 0x4,
        /// The input mailbox pointer is not aligned.
        InPtrAlignErr = 0x5,
        /// Firmware internal error.
        FwErr = 0x6,
        /// Input length error.
        InLengthErr = 0x7,
        /// Output length error.
        OutLengthErr = 0x8,
        /// Reserved fields not cleared.
        ResFldNotClrErr = 0x9,
        /// Command descriptor error.
        CmdDescErr = 0x10,
    }
}
