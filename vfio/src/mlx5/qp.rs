//! RC queue pairs: CREATE_QP (RQ first, SQ after it in one buffer; rdma-core/Linux layout),
//! the RoCEv2 connection RST → INIT → RTR → RTS with its address path (GID index,
//! destination GID and MAC, UDP source port, DSCP, hop limit, MTU, ACK timeout, retry
//! counts), 2ERR, QUERY_QP, and posting with core's [`SqWriter`] plus the doorbell
//! [`Effect`](rdmesh_core::mlx5::Effect)s of rdma-core `post_send_db` on the 8-byte doorbell.
//!
//! The driver writes WQEs into a staging copy of each ring (core's writers work on byte
//! slices) and the `WriteWqes` effect copies them into the device-visible buffer before the
//! barrier and the doorbell record.

use std::sync::{Arc, Mutex};

use rdmesh_core::mlx5::cmd::{
    AddressPath, CreateQpIn, CreateQpOut, DestroyQpIn, Init2InitQpIn, Init2RtrQpIn, Opcode, Pas,
    Qp2ErrIn, Qp2RstIn, QpContext, QueryQCounterOut, QueryQpIn, QueryQpOut, Rst2InitQpIn,
    Rtr2RtsQpIn, Rts2RtsQpIn, QP_OPTPAR_RAE, QP_OPTPAR_RNR_TIMEOUT, QP_OPTPAR_RRE, QP_OPTPAR_RWE,
    QP_PM_MIGRATED, QP_RQ_TYPE_REGULAR, QP_ST_RC,
};
use rdmesh_core::mlx5::ctrl::CtrlSeg;
use rdmesh_core::mlx5::doorbell::{ring_recv, BfMode, Bfreg, BfregConfig, UAR_BF_OFFSET};
use rdmesh_core::mlx5::{
    wqebbs_for_ds, Error as WqError, QpType, RqWriter, SendWr, Sge, SqWriter, DS_LEN,
};
use rdmesh_core::rc::Mtu;

use super::cmdif::parse_err;
use super::cq::{Cq, CqInner};
use super::effects::{apply, Target, WqTarget};
use super::hca::Hca;
use super::hca::HcaInner;
use super::mr::Access;
use super::pd::{Pd, PdInner};
use super::{DriverError, Result};
use crate::seam::DmaBuffer;

/// Queue sizes of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpCaps {
    /// Send-queue size in 64-byte WQEBBs (rounded up to a power of two, at least 64).
    pub sq_wqebbs: usize,
    /// Receive-queue WQEs (rounded up to a power of two, at least 16).
    pub rq_wqes: usize,
    /// Scatter entries per receive WQE (at least 1).
    pub rq_sge: usize,
}

impl Default for QpCaps {
    fn default() -> Self {
        QpCaps {
            sq_wqebbs: 256,
            rq_wqes: 256,
            rq_sge: 1,
        }
    }
}

/// The remote side and path of an RC connection (INIT2RTR / RTR2RTS), RoCEv2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RcPath {
    /// Peer QPN (24 bits).
    pub remote_qpn: u32,
    /// Local GID table index (`src_addr_index`; programmed with [`super::Hca::set_gid`]).
    pub sgid_index: u8,
    /// Destination GID (IPv4 as `::ffff:a.b.c.d`).
    pub dgid: [u8; 16],
    /// Destination MAC.
    pub dmac: [u8; 6],
    /// RoCEv2 UDP source port; `None`: Linux's hash of the two QPNs (`rdma_flow_label_to_udp_sport`).
    pub udp_sport: Option<u16>,
    /// IP DSCP (6 bits).
    pub dscp: u8,
    /// IP TTL / hop limit.
    pub hop_limit: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// First PSN expected from the peer.
    pub rq_psn: u32,
    /// First PSN this QP sends.
    pub sq_psn: u32,
    /// Local ACK timeout code: 4.096 µs × 2^t (5 bits; 0 = infinite).
    pub ack_timeout: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// RNR retries (3 bits; 7 = infinite).
    pub rnr_retry: u8,
    /// Minimal RNR NAK timer code (5 bits).
    pub min_rnr_nak: u8,
    /// log2 of outstanding RDMA READ/atomic requests as requester (3 bits).
    pub log_sra_max: u8,
    /// log2 of outstanding RDMA READ/atomic requests as responder (3 bits).
    pub log_rra_max: u8,
    /// Port number (1-based).
    pub port: u8,
}

impl RcPath {
    /// Defaults for a peer: GID index 0, hash UDP source port, DSCP 0, hop limit 64,
    /// MTU 1024, PSNs 0, ACK timeout 14 (~67 ms), 7 retries, infinite RNR retry, RNR timer
    /// 12, 4 outstanding READs each way, port 1.
    pub fn new(remote_qpn: u32, dgid: [u8; 16], dmac: [u8; 6]) -> RcPath {
        RcPath {
            remote_qpn,
            sgid_index: 0,
            dgid,
            dmac,
            udp_sport: None,
            dscp: 0,
            hop_limit: 64,
            mtu: Mtu::Mtu1024,
            rq_psn: 0,
            sq_psn: 0,
            ack_timeout: 14,
            retry_count: 7,
            rnr_retry: 7,
            min_rnr_nak: 12,
            log_sra_max: 2,
            log_rra_max: 2,
            port: 1,
        }
    }
}

/// The RoCEv2 UDP source port Linux derives from a QPN pair when the flow label is 0
/// (`rdma_calc_flow_label` + `rdma_flow_label_to_udp_sport`, include/rdma/ib_verbs.h).
pub fn udp_sport_for(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    (((fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14)) | 0xc000) as u16
}

/// A send work request and its id.
#[derive(Debug, Clone, Copy)]
pub struct SendRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// The request, in mlx5 terms (core's [`SendWr`]).
    pub wr: SendWr<'a>,
}

/// A receive work request and its id.
#[derive(Debug, Clone, Copy)]
pub struct RecvRequest<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where the message goes.
    pub sges: &'a [Sge],
}

/// The posting state of one QP (shared with the CQs that complete its work).
#[derive(Debug)]
pub struct QpQueues {
    qpn: u32,
    pub(crate) send_cqn: u32,
    pub(crate) recv_cqn: u32,
    buf: Box<dyn DmaBuffer>,
    dbrec: Box<dyn DmaBuffer>,
    sq_offset: usize,
    sq_ring: Vec<u8>,
    sq_pc: u16,
    sq_cc: u16,
    sq_wrid: Vec<u64>,
    rq_ring: Vec<u8>,
    rq_shift: u32,
    rq_head: u16,
    rq_tail: u16,
    rq_wrid: Vec<u64>,
    bfreg: Bfreg,
}

impl QpQueues {
    /// Back to the state after CREATE_QP (2RST): empty rings, counters 0, doorbell record 0
    /// (Linux `__mlx5_ib_modify_qp` to RESET: `rq.head = rq.tail = 0`, `sq.head = sq.tail =
    /// 0`, `db[MLX5_RCV_DBR] = db[MLX5_SND_DBR] = 0`).
    fn reset(&mut self) -> core::result::Result<(), crate::seam::DmaError> {
        self.sq_ring.fill(0);
        self.rq_ring.fill(0);
        self.sq_pc = 0;
        self.sq_cc = 0;
        self.rq_head = 0;
        self.rq_tail = 0;
        self.sq_wrid.fill(0);
        self.rq_wrid.fill(0);
        self.bfreg = Bfreg::new(BfregConfig::doorbell_only(UAR_BF_OFFSET));
        self.dbrec.write(0, &[0u8; 8])
    }

    fn sq_mask(&self) -> u16 {
        (self.sq_ring.len() / 64 - 1) as u16
    }

    fn rq_cnt(&self) -> usize {
        self.rq_ring.len() >> self.rq_shift
    }

    /// A requester CQE for WQE `wqe_counter`: that WQE and every unsignaled one before it are
    /// done. Returns the WQE's id.
    pub(crate) fn retire_send(&mut self, wqe_counter: u16) -> core::result::Result<u64, WqError> {
        let outstanding = self.sq_pc.wrapping_sub(self.sq_cc);
        if wqe_counter.wrapping_sub(self.sq_cc) >= outstanding {
            return Err(WqError::NotOutstanding { wqe_counter });
        }
        let slot = usize::from(wqe_counter & self.sq_mask());
        let c = CtrlSeg::new_unchecked(&self.sq_ring[slot * 64..slot * 64 + 16]);
        let ds = c.ds() as usize;
        if ds == 0 {
            return Err(WqError::NotOutstanding { wqe_counter });
        }
        self.sq_cc = wqe_counter.wrapping_add(wqebbs_for_ds(ds) as u16);
        Ok(self.sq_wrid[slot])
    }

    /// Software flush completions for every outstanding send (`send`) or receive work
    /// request, at most `max` (the device is dead and will write no CQE; Linux
    /// `mlx5_ib_poll_sw_comp`).
    pub(crate) fn flush(&mut self, send: bool, max: usize) -> Vec<super::cq::Completion> {
        use rdmesh_core::mlx5::cqe::{CqeError, CqeOpcode, Syndrome};
        let mut out = Vec::new();
        let error = Some(CqeError {
            syndrome: Syndrome::WrFlushErr,
            vendor_err_synd: 0,
        });
        if send {
            while out.len() < max && self.sq_cc != self.sq_pc {
                let slot = usize::from(self.sq_cc & self.sq_mask());
                let c = CtrlSeg::new_unchecked(&self.sq_ring[slot * 64..slot * 64 + 16]);
                let ds = usize::from(c.ds()).max(1);
                out.push(super::cq::Completion {
                    wr_id: self.sq_wrid[slot],
                    qpn: self.qpn,
                    send: true,
                    opcode: CqeOpcode::ReqErr,
                    wqe_opcode: u8::from(c.opcode()),
                    byte_len: 0,
                    imm: 0,
                    error,
                });
                self.sq_cc = self.sq_cc.wrapping_add(wqebbs_for_ds(ds) as u16);
            }
        } else {
            while out.len() < max && self.rq_tail != self.rq_head {
                let id = self.rq_wrid[usize::from(self.rq_tail) & (self.rq_cnt() - 1)];
                self.rq_tail = self.rq_tail.wrapping_add(1);
                out.push(super::cq::Completion {
                    wr_id: id,
                    qpn: self.qpn,
                    send: false,
                    opcode: CqeOpcode::RespErr,
                    wqe_opcode: 0,
                    byte_len: 0,
                    imm: 0,
                    error,
                });
            }
        }
        out
    }

    /// A responder CQE: the oldest receive WQE is done.
    pub(crate) fn retire_recv(&mut self) -> core::result::Result<u64, WqError> {
        if self.rq_head == self.rq_tail {
            return Err(WqError::NotOutstanding {
                wqe_counter: self.rq_tail,
            });
        }
        let id = self.rq_wrid[usize::from(self.rq_tail) & (self.rq_cnt() - 1)];
        self.rq_tail = self.rq_tail.wrapping_add(1);
        Ok(id)
    }
}

/// An RC queue pair; 2ERR-free DESTROY_QP on drop (the CQs and PD stay alive until then).
#[derive(Debug)]
pub struct Qp {
    hca: Arc<HcaInner>,
    qpn: u32,
    queues: Arc<Mutex<QpQueues>>,
    _pd: Arc<PdInner>,
    send_cq: Arc<CqInner>,
    recv_cq: Arc<CqInner>,
    /// The Q counter set of this QP alone (`None` when the device had none left).
    counter_set: Option<u8>,
}

fn bad(device: &str, qpn: u32, what: String) -> DriverError {
    DriverError::config(device, format!("QPN {qpn:#x}: {what}"))
}

impl Qp {
    /// Creates an RC QP in `pd` whose sends complete on `send_cq` and receives on `recv_cq`.
    ///
    /// # Errors
    /// [`DriverError::Config`] for sizes beyond the device's limits; DMA and command errors.
    pub fn create(pd: &Pd, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Qp> {
        let hca = pd.inner.hca.clone();
        let name = hca.cfg.name.clone();
        let sq_wqebbs = caps.sq_wqebbs.max(64).next_power_of_two();
        let rq_wqes = caps.rq_wqes.max(16).next_power_of_two();
        let rq_stride = (caps.rq_sge.max(1) * DS_LEN).next_power_of_two();
        let rq_shift = rq_stride.trailing_zeros();
        let max_log = hca.info.caps.log_max_qp_sz;
        for (what, n) in [("send queue", sq_wqebbs), ("receive queue", rq_wqes)] {
            if max_log != 0 && n > 1usize << max_log {
                return Err(DriverError::config(
                    &name,
                    format!(
                        "{what} of {n} entries exceeds the device's 2^{max_log} (log_max_qp_sz)"
                    ),
                ));
            }
        }
        if rq_shift > 9 {
            return Err(DriverError::config(
                &name,
                format!(
                    "{} receive SGEs need a {rq_stride}-byte stride; at most 32 SGEs",
                    caps.rq_sge
                ),
            ));
        }
        let rq_bytes = rq_wqes << rq_shift;
        let sq_bytes = sq_wqebbs * 64;
        let total = (rq_bytes + sq_bytes).div_ceil(4096) * 4096;
        let buf = hca
            .dma
            .alloc(total, 4096)
            .map_err(|e| DriverError::dma(&name, e))?;
        let dbrec = hca
            .dma
            .alloc(64, 64)
            .map_err(|e| DriverError::dma(&name, e))?;
        let pas: Vec<u64> = (0..total / 4096)
            .map(|i| buf.iova() + (i * 4096) as u64)
            .collect();
        let ts_format = match hca.info.roce {
            Some(r) if r.qp_ts_format != 0 => 1,
            _ => 0,
        };
        let qpc = QpContext {
            st: QP_ST_RC,
            pm_state: QP_PM_MIGRATED,
            pd: pd.pdn(),
            log_rq_size: rq_wqes.trailing_zeros() as u8,
            log_rq_stride: (rq_shift - 4) as u8,
            log_sq_size: sq_wqebbs.trailing_zeros() as u8,
            ts_format,
            uar_page: hca.info.uar,
            log_page_size: 0,
            cqn_snd: send_cq.cqn(),
            cqn_rcv: recv_cq.cqn(),
            dbr_addr: dbrec.iova(),
            rq_type: QP_RQ_TYPE_REGULAR,
            ..Default::default()
        };
        let what = format!("RC QP ({sq_wqebbs} WQEBBs SQ, {rq_wqes} RQ WQEs)");
        // A counter set of its own, as Linux binds a QP for per-QP `rdma statistic`; without
        // one left the QP still works, with counters only in the port totals.
        let counter_set = match (Hca { inner: hca.clone() }).alloc_q_counter() {
            Ok(id) => Some(id),
            Err(e) => {
                tracing::debug!(device = %name, "no Q counter set for a new QP: {e}");
                None
            }
        };
        let out = hca.hw().exec(
            &CreateQpIn {
                qpc,
                pas: Pas::Addrs(&pas),
                ..Default::default()
            },
            0,
            &what,
        );
        let qpn = match out.and_then(|out| {
            CreateQpOut::parse(&out).map_err(|e| parse_err(&name, Opcode::CreateQp, e, &what))
        }) {
            Ok(o) => o.qpn,
            Err(e) => {
                if let Some(id) = counter_set {
                    Hca { inner: hca.clone() }.dealloc_q_counter(id);
                }
                return Err(e);
            }
        };
        let queues = Arc::new(Mutex::new(QpQueues {
            qpn,
            send_cqn: send_cq.cqn(),
            recv_cqn: recv_cq.cqn(),
            buf,
            dbrec,
            sq_offset: rq_bytes,
            sq_ring: vec![0; sq_bytes],
            sq_pc: 0,
            sq_cc: 0,
            sq_wrid: vec![0; sq_wqebbs],
            rq_ring: vec![0; rq_bytes],
            rq_shift,
            rq_head: 0,
            rq_tail: 0,
            rq_wrid: vec![0; rq_wqes],
            bfreg: Bfreg::new(BfregConfig::doorbell_only(UAR_BF_OFFSET)),
        }));
        hca.qps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(qpn, queues.clone());
        Ok(Qp {
            hca,
            qpn,
            queues,
            _pd: pd.inner.clone(),
            send_cq: send_cq.inner.clone(),
            recv_cq: recv_cq.inner.clone(),
            counter_set,
        })
    }

    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    fn name(&self) -> &str {
        &self.hca.cfg.name
    }

    fn path(&self, p: &RcPath) -> Result<AddressPath> {
        let gid_max = self
            .hca
            .info
            .roce
            .map(|r| r.roce_address_table_size)
            .unwrap_or(self.hca.info.caps.gid_table_size);
        if gid_max != 0 && u16::from(p.sgid_index) >= gid_max {
            return Err(bad(
                self.name(),
                self.qpn,
                format!(
                    "GID index {} beyond the {gid_max}-entry GID table",
                    p.sgid_index
                ),
            ));
        }
        for (what, v, max) in [
            ("ack_timeout", p.ack_timeout, 31),
            ("retry_count", p.retry_count, 7),
            ("rnr_retry", p.rnr_retry, 7),
            ("min_rnr_nak", p.min_rnr_nak, 31),
            ("dscp", p.dscp, 63),
            ("log_sra_max", p.log_sra_max, 7),
            ("log_rra_max", p.log_rra_max, 7),
        ] {
            if v > max {
                return Err(bad(
                    self.name(),
                    self.qpn,
                    format!("{what} {v} exceeds {max}"),
                ));
            }
        }
        if p.remote_qpn >= 1 << 24 || p.rq_psn >= 1 << 24 || p.sq_psn >= 1 << 24 {
            return Err(bad(
                self.name(),
                self.qpn,
                "remote QPN and PSNs are 24-bit values".into(),
            ));
        }
        let mut ap = AddressPath {
            pkey_index: 0,
            src_addr_index: p.sgid_index,
            hop_limit: p.hop_limit.max(1),
            tclass: p.dscp << 2,
            rgid_rip: p.dgid,
            dscp: p.dscp,
            udp_sport: p
                .udp_sport
                .unwrap_or_else(|| udp_sport_for(self.qpn, p.remote_qpn)),
            vhca_port_num: p.port,
            ack_timeout: p.ack_timeout,
            ..Default::default()
        };
        ap.set_rmac(p.dmac);
        Ok(ap)
    }

    /// RST → INIT → RTR → RTS toward `peer` ([`Qp::rst2init`], [`Qp::init2rtr`],
    /// [`Qp::rtr2rts`]).
    ///
    /// # Errors
    /// [`DriverError::Config`] for out-of-range path values (naming the QPN, GID index,
    /// MTU); command errors naming the transition and QPN.
    pub fn connect(&self, peer: &RcPath) -> Result<()> {
        self.rst2init(peer.port)?;
        self.init2rtr(peer)?;
        self.rtr2rts(peer)
    }

    /// RST2INIT_QP: remote read, write (and atomic, when the device has atomics) enabled,
    /// P_Key index 0, port `port`.
    ///
    /// # Errors
    /// Command errors naming the QPN.
    pub fn rst2init(&self, port: u8) -> Result<()> {
        self.rst2init_with(port, Access::ALL)
    }

    /// The QP-context access bits for `access` (atomics only when the device has them).
    fn access_ctx(&self, access: Access) -> QpContext {
        let atomic = access.remote_atomic && self.hca.info.caps.atomic;
        QpContext {
            rre: access.remote_read,
            rwe: access.remote_write,
            rae: atomic,
            atomic_mode: if atomic { 3 } else { 0 },
            ..Default::default()
        }
    }

    /// RST2INIT_QP with the remote access `access` allows (verbs `qp_access_flags`;
    /// `local_write` is not a QP right), P_Key index 0, port `port`, and the QP's own counter
    /// set (`counter_set_id`, as Linux binds it).
    ///
    /// # Errors
    /// Command errors naming the QPN.
    pub fn rst2init_with(&self, port: u8, access: Access) -> Result<()> {
        let qpn = self.qpn;
        self.hca.hw().exec(
            &Rst2InitQpIn {
                qpn,
                qpc: QpContext {
                    counter_set_id: self.counter_set.unwrap_or(0),
                    primary_address_path: AddressPath {
                        vhca_port_num: port,
                        ..Default::default()
                    },
                    ..self.access_ctx(access)
                },
                ..Default::default()
            },
            0,
            &format!("QPN {qpn:#x} RST→INIT"),
        )?;
        Ok(())
    }

    /// INIT2INIT_QP: changes the remote access of a QP in INIT (`opt_param_mask` RRE, RWE,
    /// RAE), as `ibv_modify_qp(INIT→INIT, IBV_QP_ACCESS_FLAGS)` does. The port and P_Key
    /// index stay (port 1, index 0 are the only ones).
    ///
    /// # Errors
    /// Command errors naming the QPN.
    pub fn init2init(&self, access: Access) -> Result<()> {
        let qpn = self.qpn;
        self.hca.hw().exec(
            &Init2InitQpIn {
                qpn,
                opt_param_mask: QP_OPTPAR_RRE | QP_OPTPAR_RWE | QP_OPTPAR_RAE,
                qpc: self.access_ctx(access),
                ..Default::default()
            },
            0,
            &format!("QPN {qpn:#x} INIT→INIT"),
        )?;
        Ok(())
    }

    /// RTS2RTS_QP: changes the remote access and/or the minimal RNR NAK timer of a QP in
    /// RTS (`opt_param_mask` RRE, RWE, RAE / RNR_TIMEOUT), as `ibv_modify_qp(RTS→RTS)`.
    ///
    /// # Errors
    /// [`DriverError::Config`] for a timer above 31; command errors naming the QPN.
    pub fn rts2rts(&self, access: Option<Access>, min_rnr_nak: Option<u8>) -> Result<()> {
        let qpn = self.qpn;
        let mut mask = 0;
        let mut qpc = QpContext::default();
        if let Some(a) = access {
            mask |= QP_OPTPAR_RRE | QP_OPTPAR_RWE | QP_OPTPAR_RAE;
            qpc = self.access_ctx(a);
        }
        if let Some(t) = min_rnr_nak {
            if t > 31 {
                return Err(bad(self.name(), qpn, format!("min_rnr_nak {t} exceeds 31")));
            }
            mask |= QP_OPTPAR_RNR_TIMEOUT;
            qpc.min_rnr_nak = t;
        }
        self.hca.hw().exec(
            &Rts2RtsQpIn {
                qpn,
                opt_param_mask: mask,
                qpc,
                ..Default::default()
            },
            0,
            &format!("QPN {qpn:#x} RTS→RTS"),
        )?;
        Ok(())
    }

    /// 2RST_QP: back to RESET from any state. Completions of this QP not yet polled are
    /// removed from its CQs ([`Cq::clean`]), the rings, counters and doorbell record return to
    /// their state after creation, and posted work requests are forgotten (no completion), as
    /// Linux does; the QP can then be connected again from RST2INIT.
    ///
    /// # Errors
    /// Command errors naming the QPN; [`DriverError::Dma`].
    pub fn to_reset(&self) -> Result<()> {
        let qpn = self.qpn;
        self.hca
            .hw()
            .exec(&Qp2RstIn { qpn }, 0, &format!("QPN {qpn:#x} →RST"))?;
        let name = self.name().to_string();
        for cq in [&self.send_cq, &self.recv_cq] {
            Cq { inner: cq.clone() }.clean(qpn)?;
        }
        self.queues
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reset()
            .map_err(|e| DriverError::dma(&name, e))
    }

    /// The Q counter set of this QP, if it has one of its own.
    pub fn counter_set(&self) -> Option<u8> {
        self.counter_set
    }

    /// QUERY_QP_COUNTER of this QP's own set (`rx_write_requests`, `out_of_sequence`,
    /// `local_ack_timeout_err`, ...).
    ///
    /// # Errors
    /// [`DriverError::Config`] when the QP has no set of its own; command errors.
    pub fn counters(&self) -> Result<QueryQCounterOut> {
        match self.counter_set {
            Some(id) => Hca {
                inner: self.hca.clone(),
            }
            .query_q_counter(id),
            None => Err(bad(
                self.name(),
                self.qpn,
                "no Q counter set of its own (the device had none left); see the port counters"
                    .into(),
            )),
        }
    }

    /// INIT2RTR_QP: MTU, remote QPN, receive PSN, RNR timer, responder resources and the
    /// RoCEv2 address path.
    ///
    /// # Errors
    /// [`DriverError::Config`] for out-of-range path values; command errors naming the QPN,
    /// remote QPN, GID index and MTU.
    pub fn init2rtr(&self, peer: &RcPath) -> Result<()> {
        let ap = self.path(peer)?;
        let caps = &self.hca.info.caps;
        let qpn = self.qpn;
        self.hca.hw().exec(
            &Init2RtrQpIn {
                qpn,
                qpc: QpContext {
                    mtu: peer.mtu.ibv_mtu(),
                    log_msg_max: if caps.log_max_msg != 0 {
                        caps.log_max_msg
                    } else {
                        30
                    },
                    remote_qpn: peer.remote_qpn,
                    next_rcv_psn: peer.rq_psn,
                    min_rnr_nak: peer.min_rnr_nak,
                    log_rra_max: peer.log_rra_max,
                    primary_address_path: ap,
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
            &format!(
                "QPN {qpn:#x} INIT→RTR (remote QPN {:#x}, GID index {}, MTU {}); check the GID \
                 index was programmed with SET_ROCE_ADDRESS and the MTU fits the port",
                peer.remote_qpn,
                peer.sgid_index,
                peer.mtu.bytes()
            ),
        )?;
        Ok(())
    }

    /// RTR2RTS_QP: send PSN, retry counts, requester READ depth, ACK timeout.
    ///
    /// # Errors
    /// [`DriverError::Config`] for out-of-range values; command errors naming the QPN.
    pub fn rtr2rts(&self, peer: &RcPath) -> Result<()> {
        let ap = self.path(peer)?;
        let qpn = self.qpn;
        self.hca.hw().exec(
            &Rtr2RtsQpIn {
                qpn,
                qpc: QpContext {
                    next_send_psn: peer.sq_psn,
                    retry_count: peer.retry_count,
                    rnr_retry: peer.rnr_retry,
                    log_sra_max: peer.log_sra_max,
                    log_ack_req_freq: 0,
                    primary_address_path: ap,
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
            &format!("QPN {qpn:#x} RTR→RTS"),
        )?;
        Ok(())
    }

    /// Moves the QP to ERR (2ERR_QP): outstanding work completes with flush errors.
    ///
    /// # Errors
    /// Command errors.
    pub fn to_error(&self) -> Result<()> {
        let qpn = self.qpn;
        self.hca
            .hw()
            .exec(&Qp2ErrIn { qpn }, 0, &format!("QPN {qpn:#x} →ERR"))?;
        Ok(())
    }

    /// QUERY_QP: the QP state (0 RST, 1 INIT, 2 RTR, 3 RTS, 4 SQER, 5 SQD, 6 ERR).
    ///
    /// # Errors
    /// Command errors.
    pub fn query_state(&self) -> Result<u8> {
        let qpn = self.qpn;
        let what = format!("QPN {qpn:#x} query");
        let out = self.hca.hw().exec(&QueryQpIn { qpn }, 0, &what)?;
        Ok(QueryQpOut::parse(&out)
            .map_err(|e| parse_err(self.name(), Opcode::QueryQp, e, &what))?
            .qpc
            .state)
    }

    /// Posts send work requests and rings the doorbell once for the batch (rdma-core
    /// `post_send_db`: WQEs → `udma_to_device_barrier` → dbrec[1] → `mmio_wc_start` → one
    /// 8-byte store of the last WQE's ctrl bytes 0..7 to UAR + 0x800 → `mmio_flush_writes`).
    /// On an error the requests before the failing one are posted (and rung), as verbs does.
    ///
    /// # Errors
    /// [`DriverError::Queue`] for a full ring (`RingFull`: poll the CQ) or an invalid request;
    /// [`DriverError::Dma`].
    pub fn post_send(&self, reqs: &[SendRequest<'_>]) -> Result<()> {
        self.post_send_counted(reqs).1
    }

    /// [`Qp::post_send`], also returning how many requests were posted (on an error, the
    /// index of the failing request, verbs' `bad_wr`).
    pub fn post_send_counted(&self, reqs: &[SendRequest<'_>]) -> (usize, Result<()>) {
        let mut posted = 0;
        let r = self.post_send_inner(reqs, &mut posted);
        (posted, r)
    }

    fn post_send_inner(&self, reqs: &[SendRequest<'_>], posted: &mut usize) -> Result<()> {
        if let Some(e) = self.hca.fatal() {
            return Err(e);
        }
        let mut guard = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let q = &mut *guard;
        let name = self.hca.cfg.name.as_str();
        let qpn = self.qpn;
        let mask = q.sq_mask();
        let wqebbs = q.sq_ring.len() / 64;
        let (mut pc, cc) = (q.sq_pc, q.sq_cc);
        let mut failure = None;
        let batch = {
            let mut w = SqWriter::new(&mut q.sq_ring, qpn, QpType::Rc)
                .map_err(|e| DriverError::queue(name, qpn, e))?
                .with_counter(pc);
            for r in reqs {
                let need = match r.wr.check(QpType::Rc) {
                    Ok(ds) => wqebbs_for_ds(ds) as u16,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                };
                let free = wqebbs as u16 - pc.wrapping_sub(cc);
                if need > free {
                    failure = Some(WqError::RingFull { needed: need, free });
                    break;
                }
                match w.post(&r.wr) {
                    Ok(p) => {
                        q.sq_wrid[usize::from(p.wqe_index & mask)] = r.wr_id;
                        pc = w.pc();
                        *posted += 1;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            w.take_batch()
        };
        q.sq_pc = pc;
        if let Some(b) = batch {
            let effects = q.bfreg.ring_send(&b, BfMode::Off);
            apply(
                &Target {
                    device: name,
                    qpn,
                    mmio: &*self.hca.mmio,
                    uar_offset: self.hca.uar_offset(),
                    dbrec: &*q.dbrec,
                    wq: Some(WqTarget {
                        buf: &*q.buf,
                        sq_offset: q.sq_offset,
                        sq_ring: &q.sq_ring,
                        rq_offset: 0,
                        rq_ring: &q.rq_ring,
                        rq_stride: 1 << q.rq_shift,
                    }),
                },
                &effects,
            )?;
        }
        match failure {
            Some(e) => Err(DriverError::queue(name, qpn, e)),
            None => Ok(()),
        }
    }

    /// Posts receive work requests: data segments (an INVALID_LKEY terminator when fewer
    /// than the stride holds), `udma_to_device_barrier`, dbrec[0] = head. No MMIO.
    ///
    /// # Errors
    /// [`DriverError::Queue`] for a full ring or too many SGEs; [`DriverError::Dma`].
    pub fn post_recv(&self, reqs: &[RecvRequest<'_>]) -> Result<()> {
        if reqs.is_empty() {
            return Ok(());
        }
        if let Some(e) = self.hca.fatal() {
            return Err(e);
        }
        let mut guard = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let q = &mut *guard;
        let name = self.hca.cfg.name.as_str();
        let qpn = q.qpn;
        let stride = 1usize << q.rq_shift;
        let mask = q.rq_cnt().wrapping_sub(1);
        let mut failure = None;
        let batch = {
            let mut w = RqWriter::new(&mut q.rq_ring, q.rq_shift)
                .map_err(|e| DriverError::queue(name, qpn, e))?
                .with_counters(q.rq_head, q.rq_tail);
            for r in reqs {
                match w.post(r.sges) {
                    Ok(idx) => q.rq_wrid[usize::from(idx) & mask] = r.wr_id,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            q.rq_head = w.head();
            w.take_batch()
        };
        if let Some(batch) = batch {
            let effects = ring_recv(&batch);
            apply(
                &Target {
                    device: name,
                    qpn,
                    mmio: &*self.hca.mmio,
                    uar_offset: self.hca.uar_offset(),
                    dbrec: &*q.dbrec,
                    wq: Some(WqTarget {
                        buf: &*q.buf,
                        sq_offset: q.sq_offset,
                        sq_ring: &q.sq_ring,
                        rq_offset: 0,
                        rq_ring: &q.rq_ring,
                        rq_stride: stride,
                    }),
                },
                &effects,
            )?;
        }
        match failure {
            Some(e) => Err(DriverError::queue(name, qpn, e)),
            None => Ok(()),
        }
    }
}

impl Drop for Qp {
    fn drop(&mut self) {
        self.hca
            .qps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.qpn);
        let what = format!("QPN {:#x}", self.qpn);
        if let Err(e) = self.hca.hw().exec(&DestroyQpIn { qpn: self.qpn }, 0, &what) {
            tracing::warn!(device = %self.hca.cfg.name, "DESTROY_QP {what}: {e}");
        }
        if let Some(id) = self.counter_set {
            Hca {
                inner: self.hca.clone(),
            }
            .dealloc_q_counter(id);
        }
    }
}
