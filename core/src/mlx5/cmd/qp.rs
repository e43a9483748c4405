//! Typed inputs and outputs of the QP commands: CREATE_QP / DESTROY_QP, the state
//! transitions RST2INIT_QP, INIT2RTR_QP, RTR2RTS_QP, 2ERR_QP, and QUERY_QP, with the QP
//! context [`QpContext`] and its RoCE address path [`AddressPath`]. Layouts: Linux
//! mlx5_ifc.h `qpc_bits` / `ads_bits`; which fields each transition sets: Linux
//! `hw/mlx5/qp.c`, rdma-core `tests/mlx5_base.py`, DPDK `mlx5_devx_cmds.c` (see
//! `docs/mlx5.md`).

use super::layout::*;
use super::Opcode;

/// `qpc.st` service type: reliable connected (`MLX5_QP_ST_RC`).
pub const QP_ST_RC: u8 = 0x0;
/// `qpc.st`: unreliable connected.
pub const QP_ST_UC: u8 = 0x1;
/// `qpc.st`: unreliable datagram.
pub const QP_ST_UD: u8 = 0x2;
/// `qpc.pm_state`: migrated (`MLX5_QP_PM_MIGRATED`), what every driver sets.
pub const QP_PM_MIGRATED: u8 = 0x3;
/// `qpc.state` values (`MLX5_QP_STATE_*`, Linux qp.h): reset.
pub const QP_STATE_RST: u8 = 0;
/// `qpc.state`: INIT.
pub const QP_STATE_INIT: u8 = 1;
/// `qpc.state`: RTR.
pub const QP_STATE_RTR: u8 = 2;
/// `qpc.state`: RTS.
pub const QP_STATE_RTS: u8 = 3;
/// `qpc.state`: SQ error.
pub const QP_STATE_SQER: u8 = 4;
/// `qpc.state`: SQ drained.
pub const QP_STATE_SQD: u8 = 5;
/// `qpc.state`: error.
pub const QP_STATE_ERR: u8 = 6;
/// `qpc.rq_type`: regular receive queue.
pub const QP_RQ_TYPE_REGULAR: u8 = 0;
/// `qpc.rq_type`: zero-length receive queue.
pub const QP_RQ_TYPE_ZERO_SIZE: u8 = 3;

ifc_struct! {
    /// Address path (mlx5_ifc.h `ads_bits`, 44 bytes): the remote end of a connected QP.
    /// For RoCEv2: `src_addr_index` (GID index), `rgid_rip`, `rmac_47_32`/`rmac_31_0`,
    /// `udp_sport`, `hop_limit`, `dscp`/`ecn`, `vhca_port_num`; `ack_timeout` in RTR2RTS.
    pub struct AddressPath : ads {
        /// Force loopback.
        fl: bool = FL,
        /// Free adaptive routing.
        free_ar: bool = FREE_AR,
        /// P_Key index.
        pkey_index: u16 = PKEY_INDEX,
        /// GRH present (InfiniBand only).
        grh: bool = GRH,
        /// Source path bits (InfiniBand).
        mlid: u8 = MLID,
        /// Remote LID (InfiniBand).
        rlid: u16 = RLID,
        /// Local ACK timeout: 4.096 µs × 2^`ack_timeout`.
        ack_timeout: u8 = ACK_TIMEOUT,
        /// Source GID table index.
        src_addr_index: u8 = SRC_ADDR_INDEX,
        /// Static rate (0: no limit).
        stat_rate: u8 = STAT_RATE,
        /// IP TTL / hop limit.
        hop_limit: u8 = HOP_LIMIT,
        /// Traffic class.
        tclass: u8 = TCLASS,
        /// Flow label (20 bits).
        flow_label: u32 = FLOW_LABEL,
        /// Destination GID / IP address (16 bytes, network order).
        rgid_rip: [u8; 16] = RGID_RIP,
        /// Force `dscp`.
        f_dscp: bool = F_DSCP,
        /// Force `ecn`.
        f_ecn: bool = F_ECN,
        /// Force `eth_prio`.
        f_eth_prio: bool = F_ETH_PRIO,
        /// ECN bits.
        ecn: u8 = ECN,
        /// DSCP (6 bits).
        dscp: u8 = DSCP,
        /// RoCEv2 UDP source port.
        udp_sport: u16 = UDP_SPORT,
        /// Drop eligible indicator.
        dei_cfi: bool = DEI_CFI,
        /// Ethernet priority (PCP).
        eth_prio: u8 = ETH_PRIO,
        /// Service level (InfiniBand).
        sl: u8 = SL,
        /// Port number (1-based).
        vhca_port_num: u8 = VHCA_PORT_NUM,
        /// Destination MAC bits 47..32.
        rmac_47_32: u16 = RMAC_47_32,
        /// Destination MAC bits 31..0.
        rmac_31_0: u32 = RMAC_31_0,
    }
}

impl AddressPath {
    /// The destination MAC as six octets.
    pub fn rmac(&self) -> [u8; 6] {
        let h = self.rmac_47_32.to_be_bytes();
        let l = self.rmac_31_0.to_be_bytes();
        [h[0], h[1], l[0], l[1], l[2], l[3]]
    }
    /// Sets the destination MAC from six octets.
    pub fn set_rmac(&mut self, mac: [u8; 6]) {
        self.rmac_47_32 = u16::from_be_bytes([mac[0], mac[1]]);
        self.rmac_31_0 = u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]);
    }
}

ifc_struct! {
    /// QP context (mlx5_ifc.h `qpc_bits`, 232 bytes), the fields an RC QP uses.
    pub struct QpContext : qpc {
        /// QP state ([`QP_STATE_RST`] ...; query only).
        state: u8 = STATE,
        /// Service type ([`QP_ST_RC`]).
        st: u8 = ST,
        /// Path migration state ([`QP_PM_MIGRATED`]).
        pm_state: u8 = PM_STATE,
        /// WQE signature.
        wq_signature: bool = WQ_SIGNATURE,
        /// Block local multicast loopback.
        block_lb_mc: bool = BLOCK_LB_MC,
        /// Protection domain.
        pd: u32 = PD,
        /// Path MTU (IB enum: 1 = 256 ... 5 = 4096).
        mtu: u8 = MTU,
        /// log2 of the largest message in bytes.
        log_msg_max: u8 = LOG_MSG_MAX,
        /// log2 of the receive queue WQEs.
        log_rq_size: u8 = LOG_RQ_SIZE,
        /// log2 of the receive WQE stride − 4.
        log_rq_stride: u8 = LOG_RQ_STRIDE,
        /// No send queue.
        no_sq: bool = NO_SQ,
        /// log2 of the send queue WQEBBs.
        log_sq_size: u8 = LOG_SQ_SIZE,
        /// Timestamp format (0 free-running, 1 default, 2 real time).
        ts_format: u8 = TS_FORMAT,
        /// Reserved lkey enabled.
        rlky: bool = RLKY,
        /// Counter set.
        counter_set_id: u8 = COUNTER_SET_ID,
        /// UAR index whose doorbell (BlueFlame register) rings this QP.
        uar_page: u32 = UAR_PAGE,
        /// User index (for CQE `srqn_uidx`).
        user_index: u32 = USER_INDEX,
        /// log2(page size) − 12 of the PAS pages.
        log_page_size: u8 = LOG_PAGE_SIZE,
        /// Remote QPN (INIT2RTR).
        remote_qpn: u32 = REMOTE_QPN,
        /// Primary address path (INIT2RTR, RTR2RTS; port in RST2INIT).
        primary_address_path: AddressPath = PRIMARY_ADDRESS_PATH,
        /// log2 of the ACK request frequency.
        log_ack_req_freq: u8 = LOG_ACK_REQ_FREQ,
        /// log2 of outstanding RDMA READ/atomics as requester (RTR2RTS).
        log_sra_max: u8 = LOG_SRA_MAX,
        /// Transport retry count (RTR2RTS).
        retry_count: u8 = RETRY_COUNT,
        /// RNR retry count, 7 = infinite (RTR2RTS).
        rnr_retry: u8 = RNR_RETRY,
        /// Fast registration enabled.
        fre: bool = FRE,
        /// Next send PSN (RTR2RTS).
        next_send_psn: u32 = NEXT_SEND_PSN,
        /// CQ of the send queue (create).
        cqn_snd: u32 = CQN_SND,
        /// Last acknowledged PSN (query).
        last_acked_psn: u32 = LAST_ACKED_PSN,
        /// Send sequence number (query).
        ssn: u32 = SSN,
        /// log2 of outstanding RDMA READ/atomics as responder (INIT2RTR).
        log_rra_max: u8 = LOG_RRA_MAX,
        /// Atomic mode (with `rae`).
        atomic_mode: u8 = ATOMIC_MODE,
        /// Remote read enable.
        rre: bool = RRE,
        /// Remote write enable.
        rwe: bool = RWE,
        /// Remote atomic enable.
        rae: bool = RAE,
        /// Offset of the buffer in its first page, in 64-byte units.
        page_offset: u8 = PAGE_OFFSET,
        /// Minimum RNR NAK timer code (INIT2RTR).
        min_rnr_nak: u8 = MIN_RNR_NAK,
        /// Next expected receive PSN (INIT2RTR).
        next_rcv_psn: u32 = NEXT_RCV_PSN,
        /// XRC domain.
        xrcd: u32 = XRCD,
        /// CQ of the receive queue (create).
        cqn_rcv: u32 = CQN_RCV,
        /// DMA address of the QP doorbell record (create).
        dbr_addr: u64 = DBR_ADDR,
        /// Q_Key (UD).
        q_key: u32 = Q_KEY,
        /// Receive queue type ([`QP_RQ_TYPE_REGULAR`]).
        rq_type: u8 = RQ_TYPE,
        /// SRQ / RMP / XRQ number.
        srqn_rmpn_xrqn: u32 = SRQN_RMPN_XRQN,
        /// Hardware send WQEBB counter (query).
        hw_sq_wqebb_counter: u16 = HW_SQ_WQEBB_COUNTER,
        /// Software send WQEBB counter (query).
        sw_sq_wqebb_counter: u16 = SW_SQ_WQEBB_COUNTER,
        /// Hardware receive counter (query).
        hw_rq_counter: u32 = HW_RQ_COUNTER,
        /// Software receive counter (query).
        sw_rq_counter: u32 = SW_RQ_COUNTER,
        /// The doorbell record is in a UMEM.
        dbr_umem_valid: bool = DBR_UMEM_VALID,
    }
}

command! {
    /// CREATE_QP input (0x500): context and the buffer pages (RQ then SQ in one buffer).
    pub struct CreateQpIn<'a> : in create_qp_in (create_qp_out), CreateQp {
        /// Requested QPN (0: the device picks).
        input_qpn: u32 = INPUT_QPN,
        /// Optional-parameter mask (0 for create).
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// Enhanced connection establishment (0).
        ece: u32 = ECE,
        /// The QP context.
        qpc: QpContext = QPC,
        /// The buffer is a UMEM (0 for a PAS list).
        wq_umem_valid: bool = WQ_UMEM_VALID,
    } pas PAS
}
command! {
    /// CREATE_QP output.
    pub struct CreateQpOut : out create_qp_out, CreateQp {
        /// QP number (24 bits).
        qpn: u32 = QPN,
        /// ECE.
        ece: u32 = ECE,
    }
}
command! {
    /// DESTROY_QP input (0x501).
    pub struct DestroyQpIn : in destroy_qp_in (destroy_qp_out), DestroyQp {
        /// QP number.
        qpn: u32 = QPN,
    }
}
command! {
    /// DESTROY_QP output.
    pub struct DestroyQpOut : out destroy_qp_out, DestroyQp {}
}
command! {
    /// RST2INIT_QP input (0x502): `rre`/`rwe`/`rae`, `primary_address_path.vhca_port_num`
    /// and `pkey_index`.
    pub struct Rst2InitQpIn : in rst2init_qp_in (rst2init_qp_out), Rst2InitQp {
        /// QP number.
        qpn: u32 = QPN,
        /// Optional-parameter mask (Linux qp.h `MLX5_QP_OPTPAR_*`; 0 for the basic path).
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// ECE.
        ece: u32 = ECE,
        /// The context fields of the transition.
        qpc: QpContext = QPC,
    }
}
command! {
    /// RST2INIT_QP output.
    pub struct Rst2InitQpOut : out rst2init_qp_out, Rst2InitQp {
        /// ECE.
        ece: u32 = ECE,
    }
}
command! {
    /// INIT2RTR_QP input (0x503): `mtu`, `log_msg_max`, `remote_qpn`, `next_rcv_psn`,
    /// `min_rnr_nak`, `log_rra_max` and the RoCE address path.
    pub struct Init2RtrQpIn : in init2rtr_qp_in (init2rtr_qp_out), Init2RtrQp {
        /// QP number.
        qpn: u32 = QPN,
        /// Optional-parameter mask.
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// ECE.
        ece: u32 = ECE,
        /// The context fields of the transition.
        qpc: QpContext = QPC,
    }
}
command! {
    /// INIT2RTR_QP output.
    pub struct Init2RtrQpOut : out init2rtr_qp_out, Init2RtrQp {
        /// ECE.
        ece: u32 = ECE,
    }
}
command! {
    /// RTR2RTS_QP input (0x504): `next_send_psn`, `retry_count`, `rnr_retry`,
    /// `log_sra_max`, `primary_address_path.ack_timeout`.
    pub struct Rtr2RtsQpIn : in rtr2rts_qp_in (rtr2rts_qp_out), Rtr2RtsQp {
        /// QP number.
        qpn: u32 = QPN,
        /// Optional-parameter mask.
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// ECE.
        ece: u32 = ECE,
        /// The context fields of the transition.
        qpc: QpContext = QPC,
    }
}
command! {
    /// RTR2RTS_QP output.
    pub struct Rtr2RtsQpOut : out rtr2rts_qp_out, Rtr2RtsQp {
        /// ECE.
        ece: u32 = ECE,
    }
}
command! {
    /// 2ERR_QP input (0x507): move the QP to the error state (outstanding WQEs flush).
    pub struct Qp2ErrIn : in qp_2err_in (qp_2err_out), Qp2Err {
        /// QP number.
        qpn: u32 = QPN,
    }
}
command! {
    /// 2ERR_QP output.
    pub struct Qp2ErrOut : out qp_2err_out, Qp2Err {}
}
command! {
    /// QUERY_QP input (0x50b).
    pub struct QueryQpIn : in query_qp_in (query_qp_out), QueryQp {
        /// QP number.
        qpn: u32 = QPN,
    }
}
command! {
    /// QUERY_QP output: the context (read `qpc.state`) and the buffer pages.
    pub struct QueryQpOut<'a> : out query_qp_out, QueryQp {
        /// Optional-parameter mask.
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// ECE.
        ece: u32 = ECE,
        /// The QP context.
        qpc: QpContext = QPC,
    } pas PAS
}
command! {
    /// 2RST_QP input (0x50a): back to RESET from any state (the QP forgets its connection;
    /// the driver resets its ring counters and doorbell record).
    pub struct Qp2RstIn : in qp_2rst_in (qp_2rst_out), Qp2Rst {
        /// QP number.
        qpn: u32 = QPN,
    }
}
command! {
    /// 2RST_QP output.
    pub struct Qp2RstOut : out qp_2rst_out, Qp2Rst {}
}
command! {
    /// INIT2INIT_QP input (0x50e): change `rre`/`rwe`/`rae`, the port or the P_Key index
    /// of a QP in INIT (the fields named by `opt_param_mask`, Linux qp.h `MLX5_QP_OPTPAR_*`).
    pub struct Init2InitQpIn : in init2init_qp_in (init2init_qp_out), Init2InitQp {
        /// QP number.
        qpn: u32 = QPN,
        /// Optional-parameter mask ([`QP_OPTPAR_RRE`] ...).
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// ECE.
        ece: u32 = ECE,
        /// The context fields of the transition.
        qpc: QpContext = QPC,
    }
}
command! {
    /// INIT2INIT_QP output.
    pub struct Init2InitQpOut : out init2init_qp_out, Init2InitQp {
        /// ECE.
        ece: u32 = ECE,
    }
}
command! {
    /// RTS2RTS_QP input (0x505): change `rre`/`rwe`/`rae` or `min_rnr_nak` of a QP in RTS
    /// (the fields named by `opt_param_mask`).
    pub struct Rts2RtsQpIn : in rts2rts_qp_in (rts2rts_qp_out), Rts2RtsQp {
        /// QP number.
        qpn: u32 = QPN,
        /// Optional-parameter mask ([`QP_OPTPAR_RRE`] ...).
        opt_param_mask: u32 = OPT_PARAM_MASK,
        /// ECE.
        ece: u32 = ECE,
        /// The context fields of the transition.
        qpc: QpContext = QPC,
    }
}
command! {
    /// RTS2RTS_QP output.
    pub struct Rts2RtsQpOut : out rts2rts_qp_out, Rts2RtsQp {
        /// ECE.
        ece: u32 = ECE,
    }
}

/// `opt_param_mask` bit: `rre` is given (Linux qp.h `MLX5_QP_OPTPAR_RRE`).
pub const QP_OPTPAR_RRE: u32 = 1 << 1;
/// `opt_param_mask` bit: `rae` is given (`MLX5_QP_OPTPAR_RAE`).
pub const QP_OPTPAR_RAE: u32 = 1 << 2;
/// `opt_param_mask` bit: `rwe` is given (`MLX5_QP_OPTPAR_RWE`).
pub const QP_OPTPAR_RWE: u32 = 1 << 3;
/// `opt_param_mask` bit: `pkey_index` is given (`MLX5_QP_OPTPAR_PKEY_INDEX`).
pub const QP_OPTPAR_PKEY_INDEX: u32 = 1 << 4;
/// `opt_param_mask` bit: `min_rnr_nak` is given (`MLX5_QP_OPTPAR_RNR_TIMEOUT`).
pub const QP_OPTPAR_RNR_TIMEOUT: u32 = 1 << 6;
/// `opt_param_mask` bit: the primary path's port is given
/// (`MLX5_QP_OPTPAR_PRI_PORT`).
pub const QP_OPTPAR_PRI_PORT: u32 = 1 << 16;
/// `opt_param_mask` bit: `counter_set_id` is given (`MLX5_QP_OPTPAR_COUNTER_SET_ID`).
pub const QP_OPTPAR_COUNTER_SET_ID: u32 = 1 << 25;
