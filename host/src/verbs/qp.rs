//! RC queue pairs: states, attributes and the checks of each transition (IBTA vol. 1 §10.3,
//! libibverbs `ibv_modify_qp`; required and optional attributes per transition as in the kernel's
//! `ib_modify_qp_is_ok` table for RC).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use rdmesh_core::rc::{Mtu, Recovery, RecvWqe, SendOpcode, SendWqe, Sge, MAX_SGE};
use rdmesh_core::wire::Psn;

use crate::error::{Error, Result};
use crate::soft::{QpShared, SoftDevice};
use crate::verbs::cq::{CompletionQueue, CqKind};
use crate::verbs::device::ROCE_V2_UDP_PORT;
use crate::verbs::mr::AccessFlags;
use crate::verbs::pd::{PdKind, ProtectionDomain};

/// QP states (IBTA vol. 1 §10.3.1; `enum ibv_qp_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Just created; nothing works.
    Reset,
    /// Receives may be posted; no traffic.
    Init,
    /// Ready to receive: the responder runs.
    Rtr,
    /// Ready to send: requester and responder run.
    Rts,
    /// Error: every outstanding and later work request completes with WR_FLUSH_ERR.
    Err,
}

/// The remote end of an RC connection (a RoCEv2 address vector: GID = IP address).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination GID as an IP address (IPv4 or IPv6).
    pub dgid: IpAddr,
    /// Destination UDP port: 4791 for any RoCEv2 peer; an rdmesh peer on an ephemeral port
    /// tells its port out of band.
    pub udp_port: u16,
}

impl AhAttr {
    /// A RoCEv2 peer at `dgid`, UDP port 4791.
    pub fn new(dgid: IpAddr) -> AhAttr {
        AhAttr {
            dgid,
            udp_port: ROCE_V2_UDP_PORT,
        }
    }

    /// The peer's UDP socket address.
    pub fn socket_addr(&self) -> SocketAddr {
        SocketAddr::new(self.dgid, self.udp_port)
    }
}

/// Attributes of `modify` (`struct ibv_qp_attr`; `Some` plays the role of the attribute mask).
#[derive(Debug, Clone, Default)]
pub struct QpAttr {
    /// Target state (required).
    pub qp_state: Option<QpState>,
    /// P_Key table index (RESET→INIT required). The soft provider's table holds 0xFFFF at 0.
    pub pkey_index: Option<u16>,
    /// Physical port, 1-based (RESET→INIT required).
    pub port_num: Option<u8>,
    /// Remote access allowed on this QP (RESET→INIT required).
    pub qp_access_flags: Option<AccessFlags>,
    /// Path MTU (INIT→RTR required).
    pub path_mtu: Option<Mtu>,
    /// Remote QPN, 24 bits (INIT→RTR required).
    pub dest_qp_num: Option<u32>,
    /// Expected receive PSN, 24 bits (INIT→RTR required).
    pub rq_psn: Option<u32>,
    /// Responder resources for incoming READ/atomic (INIT→RTR required).
    pub max_dest_rd_atomic: Option<u8>,
    /// RNR NAK timer code 0..=31 (INIT→RTR required).
    pub min_rnr_timer: Option<u8>,
    /// Remote address vector (INIT→RTR required).
    pub ah_attr: Option<AhAttr>,
    /// Initial send PSN, 24 bits (RTR→RTS required).
    pub sq_psn: Option<u32>,
    /// Local ACK timeout code 0..=31: 4.096 µs · 2^timeout, 0 = infinite (RTR→RTS required).
    pub timeout: Option<u8>,
    /// Transport retries 0..=7 (RTR→RTS required).
    pub retry_cnt: Option<u8>,
    /// RNR retries 0..=7, 7 = infinite (RTR→RTS required).
    pub rnr_retry: Option<u8>,
    /// Outstanding READ/atomic as initiator (RTR→RTS required).
    pub max_rd_atomic: Option<u8>,
}

impl QpAttr {
    /// Attributes that only name the target state.
    pub fn state(s: QpState) -> QpAttr {
        QpAttr {
            qp_state: Some(s),
            ..Default::default()
        }
    }

    fn present(&self) -> Vec<&'static str> {
        let mut v = Vec::new();
        macro_rules! p {
            ($($f:ident),*) => { $( if self.$f.is_some() { v.push(stringify!($f)); } )* };
        }
        p!(
            pkey_index,
            port_num,
            qp_access_flags,
            path_mtu,
            dest_qp_num,
            rq_psn,
            max_dest_rd_atomic,
            min_rnr_timer,
            ah_attr,
            sq_psn,
            timeout,
            retry_cnt,
            rnr_retry,
            max_rd_atomic
        );
        v
    }
}

/// Required and optional attributes of each RC transition (kernel `qp_state_table`).
fn transition_rules(
    from: QpState,
    to: QpState,
) -> Option<(&'static [&'static str], &'static [&'static str])> {
    use QpState::*;
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (&[], &[]),
        (Reset, Init) => (&["pkey_index", "port_num", "qp_access_flags"], &[]),
        (Init, Init) => (&[], &["pkey_index", "port_num", "qp_access_flags"]),
        (Init, Rtr) => (
            &[
                "ah_attr",
                "path_mtu",
                "dest_qp_num",
                "rq_psn",
                "max_dest_rd_atomic",
                "min_rnr_timer",
            ],
            &["qp_access_flags", "pkey_index"],
        ),
        (Rtr, Rts) => (
            &[
                "timeout",
                "retry_cnt",
                "rnr_retry",
                "sq_psn",
                "max_rd_atomic",
            ],
            &["qp_access_flags", "min_rnr_timer"],
        ),
        (Rts, Rts) => (&[], &["qp_access_flags", "min_rnr_timer"]),
        _ => return None,
    })
}

/// Checks `attr` against the transition table and value ranges. Returns the reason on failure.
pub(crate) fn check_transition(
    from: QpState,
    attr: &QpAttr,
    active_mtu: Mtu,
    netdev: &str,
) -> std::result::Result<QpState, String> {
    let to = attr.qp_state.ok_or("qp_state is required")?;
    let (required, optional) = transition_rules(from, to)
        .ok_or_else(|| format!("{from:?} -> {to:?} is not a valid RC transition (RESET->INIT->RTR->RTS; any->ERR/RESET)"))?;
    let present = attr.present();
    let missing: Vec<_> = required.iter().filter(|r| !present.contains(r)).collect();
    if !missing.is_empty() {
        return Err(format!("missing required attribute(s) {missing:?}"));
    }
    let extra: Vec<_> = present
        .iter()
        .filter(|p| !required.contains(p) && !optional.contains(p))
        .collect();
    if !extra.is_empty() && to != QpState::Err && to != QpState::Reset {
        return Err(format!(
            "attribute(s) {extra:?} not allowed in this transition"
        ));
    }
    let range = |name: &str, v: Option<u32>, max: u32| match v {
        Some(x) if x > max => Err(format!("{name} = {x} is out of range 0..={max}")),
        _ => Ok(()),
    };
    range("dest_qp_num", attr.dest_qp_num, Psn::MASK)?;
    range("rq_psn", attr.rq_psn, Psn::MASK)?;
    range("sq_psn", attr.sq_psn, Psn::MASK)?;
    range("timeout", attr.timeout.map(u32::from), 31)?;
    range("min_rnr_timer", attr.min_rnr_timer.map(u32::from), 31)?;
    range("retry_cnt", attr.retry_cnt.map(u32::from), 7)?;
    range("rnr_retry", attr.rnr_retry.map(u32::from), 7)?;
    if attr.port_num == Some(0) || attr.port_num.is_some_and(|p| p > 1) {
        return Err(format!(
            "port_num {} does not exist: soft devices have port 1",
            attr.port_num.unwrap_or(0)
        ));
    }
    if attr.pkey_index.is_some_and(|i| i != 0) {
        return Err(
            "pkey_index must be 0: the soft provider's P_Key table holds only 0xFFFF".into(),
        );
    }
    if let Some(m) = attr.path_mtu {
        if m.bytes() > active_mtu.bytes() {
            return Err(format!(
                "path_mtu {} exceeds the active MTU {} of netdev {netdev} (its MTU less 80 bytes of headers); check the interface MTU on both ends",
                m.bytes(),
                active_mtu.bytes()
            ));
        }
    }
    if let Some(ah) = attr.ah_attr {
        if ah.dgid.is_unspecified() || ah.udp_port == 0 {
            return Err(format!(
                "ah_attr {} is not a usable destination",
                ah.socket_addr()
            ));
        }
    }
    if attr.dest_qp_num == Some(0) {
        return Err("dest_qp_num 0 is QP0 (SMI), not an RC QP".into());
    }
    Ok(to)
}

/// Capacities asked for at QP creation (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy)]
pub struct QpCap {
    /// Send queue depth in work requests.
    pub max_send_wr: u32,
    /// Receive queue depth in work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per work request (≤ 16).
    pub max_sge: u32,
}

impl Default for QpCap {
    fn default() -> QpCap {
        QpCap {
            max_send_wr: 256,
            max_recv_wr: 256,
            max_sge: 4,
        }
    }
}

/// The operation of a send work request (`enum ibv_wr_opcode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WrOpcode {
    /// SEND: consumes a receive at the peer.
    Send,
    /// SEND with a 32-bit immediate delivered in the peer's completion.
    SendWithImm(u32),
    /// RDMA WRITE to `remote_addr` in the peer region named by `rkey`.
    RdmaWrite {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// RDMA WRITE with immediate: also consumes a receive at the peer.
    RdmaWriteWithImm {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// RDMA READ from `remote_addr` into the local scatter list.
    RdmaRead {
        /// Remote virtual address.
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
    },
    /// Atomic compare-and-swap (`IBV_WR_ATOMIC_CMP_AND_SWP`, IBTA vol. 1 §9.4.5): if the 8 bytes
    /// at `remote_addr` (8-byte aligned, a `u64` in the responder's byte order) equal `compare`,
    /// they become `swap`. The original value lands in the local SGEs, which must add up to
    /// exactly 8 bytes. The peer region needs [`AccessFlags::REMOTE_ATOMIC`]; a misaligned
    /// address completes with `RemInvReqErr`, a missing right with `RemAccessErr`.
    CompareSwap {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Value the target must hold for the swap to happen.
        compare: u64,
        /// Value written when it does.
        swap: u64,
    },
    /// Atomic fetch-and-add (`IBV_WR_ATOMIC_FETCH_AND_ADD`, IBTA vol. 1 §9.4.5): adds `add`
    /// (wrapping modulo 2^64) to the 8 bytes at `remote_addr`; the original value lands in the
    /// local SGEs (exactly 8 bytes). Same alignment and access rules as [`WrOpcode::CompareSwap`].
    FetchAdd {
        /// Remote virtual address (8-byte aligned).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// The addend.
        add: u64,
    },
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone)]
pub struct SendWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Local buffers (gathered for SEND/WRITE, scattered into for READ).
    pub sg_list: Vec<Sge>,
    /// `IBV_SEND_SIGNALED`: produce a completion on success.
    pub signaled: bool,
    /// `IBV_SEND_SOLICITED`: set SE in the last packet.
    pub solicited: bool,
}

impl SendWr {
    /// A signaled work request.
    pub fn new(wr_id: u64, opcode: WrOpcode, sg_list: Vec<Sge>) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            sg_list,
            signaled: true,
            solicited: false,
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Buffers the incoming SEND is scattered into.
    pub sg_list: Vec<Sge>,
}

/// An RC queue pair.
pub struct QueuePair {
    pub(crate) kind: QpKind,
}

/// The provider's queue pair.
pub(crate) enum QpKind {
    /// Soft provider: the engine's QP state and the device.
    Soft {
        shared: Arc<QpShared>,
        device: Arc<SoftDevice>,
    },
    /// vfio provider: the device's RC QP.
    Vfio(Arc<crate::vfio_provider::VfioQp>),
}

impl fmt::Debug for QueuePair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &self.qp_num())
            .finish()
    }
}

impl ProtectionDomain {
    /// Creates an RC QP in RESET (ibv_create_qp). Completions of sends go to `send_cq`, of
    /// receives to `recv_cq` (they may be the same CQ).
    ///
    /// Errors: [`Error::Config`] when `cap` exceeds the provider's limits.
    pub fn create_qp(
        &self,
        send_cq: &CompletionQueue,
        recv_cq: &CompletionQueue,
        cap: QpCap,
    ) -> Result<QueuePair> {
        let (inner, device) = match &self.kind {
            PdKind::Soft { inner, device } => (inner, device),
            PdKind::Vfio { pd, dev } => {
                let cq = |c: &CompletionQueue| match &c.kind {
                    CqKind::Vfio(cq, _) => Ok(cq.clone()),
                    CqKind::Soft(_) => Err(Error::Config(
                        "create_qp: the CQ belongs to a soft device, the PD to a vfio device"
                            .into(),
                    )),
                };
                let caps = rdmesh_vfio::mlx5::QpCaps {
                    sq_wqebbs: (cap.max_send_wr as usize * 2).max(64),
                    rq_wqes: cap.max_recv_wr as usize,
                    rq_sge: cap.max_sge as usize,
                };
                let qp = rdmesh_vfio::mlx5::Qp::create(pd, &cq(send_cq)?, &cq(recv_cq)?, caps)
                    .map_err(crate::vfio_provider::convert::err)?;
                return Ok(QueuePair {
                    kind: QpKind::Vfio(crate::vfio_provider::VfioQp::new(qp, dev.clone())),
                });
            }
        };
        let soft_cq = |c: &CompletionQueue| {
            c.soft().cloned().ok_or_else(|| {
                Error::Config(
                    "create_qp: the CQ belongs to a vfio device, the PD to a soft device".into(),
                )
            })
        };
        let shared = device.create_qp(inner.clone(), soft_cq(send_cq)?, soft_cq(recv_cq)?, cap)?;
        Ok(QueuePair {
            kind: QpKind::Soft {
                shared,
                device: device.clone(),
            },
        })
    }
}

impl QueuePair {
    /// The local QP number (24 bits).
    pub fn qp_num(&self) -> u32 {
        match &self.kind {
            QpKind::Soft { shared, .. } => shared.qpn,
            QpKind::Vfio(q) => q.qp.qpn(),
        }
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        match &self.kind {
            QpKind::Soft { shared, .. } => shared.state(),
            QpKind::Vfio(q) => q.state(),
        }
    }

    /// Moves the QP to `attr.qp_state` (ibv_modify_qp).
    ///
    /// Errors: [`Error::InvalidTransition`] naming what is missing, not allowed or out of range.
    pub fn modify(&self, attr: &QpAttr) -> Result<()> {
        match &self.kind {
            QpKind::Soft { shared, device } => device.modify_qp(shared, attr),
            QpKind::Vfio(q) => q.modify(attr),
        }
    }

    /// Posts a batch of send work requests, in order (ibv_post_send). Returns at the first one
    /// that cannot be posted, with its index (ibverbs' `bad_wr`); the ones before it are posted.
    ///
    /// Errors: [`Error::Post`]: QP not in RTS, send queue full, too many SGEs, an
    /// SGE list longer than 2^31 bytes.
    pub fn post_send(&self, wrs: &[SendWr]) -> Result<()> {
        let (shared, device) = match &self.kind {
            QpKind::Soft { shared, device } => (shared, device),
            QpKind::Vfio(q) => return q.post_send(wrs),
        };
        let qpn = self.qp_num();
        // One or two work requests (a ping-pong's; the mesh's WRITE + SEND of a placed chunk)
        // go without a heap allocation.
        match wrs {
            [wr] => return device.post_send(shared, [send_wqe(qpn, 0, wr)?]),
            [a, b] => {
                return device.post_send(shared, [send_wqe(qpn, 0, a)?, send_wqe(qpn, 1, b)?])
            }
            _ => {}
        }
        let wqes = wrs
            .iter()
            .enumerate()
            .map(|(index, wr)| send_wqe(qpn, index, wr))
            .collect::<Result<Vec<_>>>()?;
        device.post_send(shared, wqes)
    }

    /// Posts a batch of receive work requests (ibv_post_recv); allowed from INIT on.
    ///
    /// Errors: [`Error::Post`]: QP in RESET, receive queue full, too many SGEs.
    pub fn post_recv(&self, wrs: &[RecvWr]) -> Result<()> {
        let (shared, device) = match &self.kind {
            QpKind::Soft { shared, device } => (shared, device),
            QpKind::Vfio(q) => return q.post_recv(wrs),
        };
        let qpn = self.qp_num();
        let recv_wqe = |index: usize, wr: &RecvWr| -> Result<RecvWqe> {
            let sg_list = to_sg_list(&wr.sg_list).map_err(|reason| Error::Post {
                qpn,
                index,
                wr_id: wr.wr_id,
                reason,
            })?;
            Ok(RecvWqe {
                wr_id: wr.wr_id,
                sg_list,
            })
        };
        // One work request (a ping-pong's) goes without a heap allocation.
        if let [wr] = wrs {
            return device.post_recv(shared, [recv_wqe(0, wr)?]);
        }
        let wqes = wrs
            .iter()
            .enumerate()
            .map(|(index, wr)| recv_wqe(index, wr))
            .collect::<Result<Vec<_>>>()?;
        device.post_recv(shared, wqes)
    }

    /// Chooses how this QP recovers from lost packets; call it in RESET or INIT (it takes
    /// effect at RTR). Both QPs of a connection must choose the same mode:
    /// [`Recovery::Selective`] (IRN-style selective repeat, `docs/reliability.md`) only works
    /// between two rdmesh QPs; [`Recovery::GoBackN`] (IBTA, the default) with any RoCE peer.
    ///
    /// Errors: [`Error::Config`] when the QP is already in RTR or later.
    ///
    /// vfio provider: the device implements Go-Back-N only; [`Recovery::Selective`] is
    /// refused with [`Error::Config`].
    pub fn set_recovery(&self, recovery: Recovery) -> Result<()> {
        match &self.kind {
            QpKind::Soft { shared, device } => device.set_recovery(shared, recovery),
            QpKind::Vfio(q) => match recovery {
                Recovery::GoBackN => Ok(()),
                _ => Err(Error::Config(format!(
                    "QP {:#x}: the vfio provider's hardware QPs recover with Go-Back-N only",
                    q.qp.qpn()
                ))),
            },
        }
    }

    /// Soft provider: holds this QP's ACKs of SEND requests that do not set SE
    /// ([`SendWr::solicited`]) the way ACKs of RDMA WRITEs are held — until this QP sends a
    /// packet they can ride with once half of the 50 µs coalescing delay passed, for at most
    /// 50 µs, or until 64 PSNs are unacknowledged (`soft::tx_batch`) — instead of as "urgent"
    /// ACKs, which go when this QP sends anything or after 20 µs. For protocols whose
    /// requester sets SE on the SENDs it waits for and not on the others (the mesh: DATA
    /// frames solicited, CTS frames not), so an ACK nobody waits for costs no datagram of its
    /// own. Off by default; a SEND with SE is acknowledged as before either way.
    ///
    /// vfio provider: no effect (the hardware acknowledges).
    pub fn set_lazy_send_acks(&self, lazy: bool) {
        if let QpKind::Soft { shared, device } = &self.kind {
            device.set_lazy_send_acks(shared, lazy);
        }
    }

    /// The loss recovery mode chosen with [`set_recovery`](Self::set_recovery) (go-back-N
    /// unless changed; always go-back-N on the vfio provider).
    pub fn recovery(&self) -> Recovery {
        match &self.kind {
            QpKind::Soft { shared, .. } => shared.recovery(),
            QpKind::Vfio(_) => Recovery::GoBackN,
        }
    }

    /// Transport counters of this QP. vfio provider and model: what the QP's own Q counter
    /// set holds (QUERY_Q_COUNTER; see [`QueuePair::hw_counters`]) under the nearest soft
    /// names: `out_of_sequence` → `out_of_sequence_requests`, `duplicate_request` →
    /// `duplicate_requests`, `packet_seq_err` → PSN-sequence NAKs received, `out_of_buffer` →
    /// RNR NAKs sent, `local_ack_timeout_err` → `timeouts`, `implied_nak_seq_err` →
    /// `implied_naks`; the rest (packets, bytes) stays 0 — the device counts those per port.
    pub fn counters(&self) -> rdmesh_core::rc::RcCounters {
        match &self.kind {
            QpKind::Soft { shared, .. } => shared.counters(),
            QpKind::Vfio(q) => match q.qp.counters() {
                Ok(c) => {
                    let mut r = rdmesh_core::rc::RcCounters {
                        out_of_sequence_requests: c.out_of_sequence.into(),
                        duplicate_requests: c.duplicate_request.into(),
                        timeouts: c.local_ack_timeout_err.into(),
                        implied_naks: c.implied_nak_seq_err.into(),
                        ..Default::default()
                    };
                    r.naks_received.psn_sequence = c.packet_seq_err.into();
                    r.naks_received.invalid_request = c.req_remote_invalid_request.into();
                    r.naks_received.remote_access = c.req_remote_access_errors.into();
                    r.naks_received.remote_operational = c.req_remote_operation_errors.into();
                    r.naks_sent.rnr = c.out_of_buffer.into();
                    r.naks_sent.invalid_request = c.resp_remote_invalid_request.into();
                    r.naks_sent.remote_access = c.resp_remote_access_errors.into();
                    r
                }
                Err(_) => rdmesh_core::rc::RcCounters::default(),
            },
        }
    }

    /// The QP's own device counters as `(name, value)` pairs under their mlx5 / `rdma
    /// statistic` names (vfio provider and model: QUERY_Q_COUNTER of the counter set the QP
    /// was bound to at RESET→INIT: `rx_write_requests`, `rx_read_requests`,
    /// `out_of_sequence`, `duplicate_request`, `local_ack_timeout_err`, ...). Soft provider:
    /// an empty list (see [`QueuePair::counters`]).
    ///
    /// Errors: vfio provider: [`Error::Config`] when the QP has no counter set of its own or
    /// the command fails.
    pub fn hw_counters(&self) -> Result<Vec<(&'static str, u64)>> {
        match &self.kind {
            QpKind::Soft { .. } => Ok(Vec::new()),
            QpKind::Vfio(q) => Ok(rdmesh_vfio::mlx5::q_counters_named(
                &q.qp
                    .counters()
                    .map_err(crate::vfio_provider::convert::err)?,
            )),
        }
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        if let QpKind::Soft { shared, device } = &self.kind {
            device.destroy_qp(shared);
        }
    }
}

/// The core work request of send work request `wr`, number `index` of its post on QP `qpn`.
///
/// Errors: [`Error::Post`] for too many SGEs or an SGE list longer than 2^31 bytes.
#[inline(always)]
fn send_wqe(qpn: u32, index: usize, wr: &SendWr) -> Result<SendWqe> {
    let bad = |reason: String| Error::Post {
        qpn,
        index,
        wr_id: wr.wr_id,
        reason,
    };
    let sg_list = to_sg_list(&wr.sg_list).map_err(bad)?;
    let (opcode, remote_addr, rkey, imm) = match wr.opcode {
        WrOpcode::Send => (SendOpcode::Send, 0, 0, 0),
        WrOpcode::SendWithImm(imm) => (SendOpcode::SendWithImm, 0, 0, imm),
        WrOpcode::RdmaWrite { remote_addr, rkey } => (SendOpcode::RdmaWrite, remote_addr, rkey, 0),
        WrOpcode::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (SendOpcode::RdmaWriteWithImm, remote_addr, rkey, imm),
        WrOpcode::RdmaRead { remote_addr, rkey } => (SendOpcode::RdmaRead, remote_addr, rkey, 0),
        WrOpcode::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => (
            SendOpcode::AtomicCmpAndSwp { compare, swap },
            remote_addr,
            rkey,
            0,
        ),
        WrOpcode::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => (SendOpcode::AtomicFetchAndAdd { add }, remote_addr, rkey, 0),
    };
    Ok(SendWqe {
        wr_id: wr.wr_id,
        opcode,
        sg_list,
        remote_addr,
        rkey,
        imm,
        signaled: wr.signaled,
        solicited: wr.solicited,
    })
}

#[inline(always)]
fn to_sg_list(sges: &[Sge]) -> std::result::Result<heapless::Vec<Sge, MAX_SGE>, String> {
    let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
    if total > 1 << 31 {
        return Err(format!(
            "scatter/gather list of {total} bytes exceeds the 2^31-byte message limit"
        ));
    }
    heapless::Vec::from_slice(sges)
        .map_err(|_| format!("{} SGEs exceed the maximum of {MAX_SGE}", sges.len()))
}
