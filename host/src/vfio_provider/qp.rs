//! An RC QP of the vfio provider: verbs transitions mapped onto the driver's RST2INIT /
//! INIT2RTR / RTR2RTS / 2ERR commands (the path attributes of INIT→RTR are kept for
//! RTR→RTS), and verbs work requests onto mlx5 WQEs.

use std::sync::{Arc, Mutex};

use rdmesh_core::rc::Mtu;
use rdmesh_vfio::mlx5::{gid_of, Qp, RcPath, RecvRequest, SendRequest};

use super::convert::{err, send_wr, sges};
use super::VfioDevice;
use crate::error::{Error, Result};
use crate::verbs::{QpAttr, QpState, RecvWr, SendWr};

/// log2 rounded up, for READ/atomic depths (verbs counts, mlx5 log2 fields of 3 bits).
fn log2_depth(n: u8) -> u8 {
    (u32::from(n.max(1)).next_power_of_two().trailing_zeros() as u8).min(7)
}

/// The driver's access rights for verbs `qp_access_flags`.
fn access_of(f: crate::verbs::AccessFlags) -> rdmesh_vfio::mlx5::Access {
    use crate::verbs::AccessFlags as A;
    rdmesh_vfio::mlx5::Access {
        local_write: f.contains(A::LOCAL_WRITE),
        remote_write: f.contains(A::REMOTE_WRITE),
        remote_read: f.contains(A::REMOTE_READ),
        remote_atomic: f.contains(A::REMOTE_ATOMIC),
    }
}

/// A vfio-provider QP.
pub(crate) struct VfioQp {
    pub(crate) qp: Qp,
    pub(crate) dev: Arc<VfioDevice>,
    state: Mutex<(QpState, Option<RcPath>)>,
    /// The peer's UDP address and QPN (from INIT→RTR), for `rdmesh stats`.
    remote: Mutex<Option<(std::net::SocketAddr, u32)>>,
    /// What `rdmesh stats` shows of this QP.
    stat: Arc<super::stats::QpStat>,
}

impl std::fmt::Debug for VfioQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioQp")
            .field("qpn", &self.qp.qpn())
            .finish()
    }
}

impl VfioQp {
    pub(crate) fn new(qp: Qp, dev: Arc<VfioDevice>) -> Arc<VfioQp> {
        let stat = Arc::new(super::stats::QpStat {
            qpn: qp.qpn(),
            counter_set: qp.counter_set(),
            now: Mutex::new((QpState::Reset, None)),
        });
        dev.register_qp(&stat);
        Arc::new(VfioQp {
            qp,
            dev,
            state: Mutex::new((QpState::Reset, None)),
            remote: Mutex::new(None),
            stat,
        })
    }

    /// The peer's UDP address and QPN once connected.
    pub(crate) fn remote(&self) -> Option<(std::net::SocketAddr, u32)> {
        *self.remote.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The state as the last `modify` left it, or ERR once the device reported an error
    /// event for this QP or died (its work then completes with flush errors).
    pub(crate) fn state(&self) -> QpState {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner()).0;
        if s != QpState::Reset
            && (self.dev.hca.fatal().is_some() || self.dev.hca.qp_error(self.qp.qpn()).is_some())
        {
            return QpState::Err;
        }
        s
    }

    /// `ibv_modify_qp`: every RC transition of the kernel's table (`ib_modify_qp_is_ok`),
    /// on the mlx5 commands Linux `mlx5_ib` uses for it (`__mlx5_ib_modify_qp` optab):
    /// any→RESET 2RST_QP, any→ERR 2ERR_QP, RESET→INIT RST2INIT_QP, INIT→INIT INIT2INIT_QP,
    /// INIT→RTR INIT2RTR_QP, RTR→RTS RTR2RTS_QP, RTS→RTS RTS2RTS_QP. Optional attributes
    /// (`qp_access_flags`, `min_rnr_timer`) of INIT→RTR and RTR→RTS go through INIT2INIT /
    /// RTS2RTS around the transition.
    pub(crate) fn modify(&self, attr: &QpAttr) -> Result<()> {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let from = st.0;
        let qpn = self.qp.qpn();
        let bad = |reason: String, to: QpState| Error::InvalidTransition {
            qpn,
            from,
            to,
            reason,
        };
        let to =
            crate::verbs::qp::check_transition(from, attr, Mtu::Mtu4096, &self.dev.info.netdev)
                .map_err(|r| bad(r, attr.qp_state.unwrap_or(from)))?;
        let need = |v: Option<u32>, name: &str| {
            v.ok_or_else(|| bad(format!("missing required attribute {name}"), to))
        };
        let access = attr.qp_access_flags.map(access_of);
        match (from, to) {
            (_, QpState::Reset) => {
                self.qp.to_reset().map_err(err)?;
                st.1 = None;
                *self.remote.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            (_, QpState::Err) => self.qp.to_error().map_err(err)?,
            (QpState::Reset, QpState::Init) => {
                self.qp
                    .rst2init_with(
                        attr.port_num.unwrap_or(self.dev.port),
                        access.unwrap_or_default(),
                    )
                    .map_err(err)?;
            }
            (QpState::Init, QpState::Init) => {
                if let Some(a) = access {
                    self.qp.init2init(a).map_err(err)?;
                }
            }
            (QpState::Init, QpState::Rtr) => {
                let ah = attr
                    .ah_attr
                    .ok_or_else(|| bad("missing required attribute ah_attr".into(), to))?;
                let mac = self.dev.neighbor(ah.dgid)?;
                let dest = need(attr.dest_qp_num, "dest_qp_num")?;
                let mut p = RcPath::new(dest, gid_of(ah.dgid), mac);
                p.port = self.dev.port;
                p.mtu = attr
                    .path_mtu
                    .ok_or_else(|| bad("missing required attribute path_mtu".into(), to))?;
                p.rq_psn = need(attr.rq_psn, "rq_psn")?;
                p.min_rnr_nak = need(attr.min_rnr_timer.map(u32::from), "min_rnr_timer")? as u8;
                p.log_rra_max = log2_depth(need(
                    attr.max_dest_rd_atomic.map(u32::from),
                    "max_dest_rd_atomic",
                )? as u8);
                if let Some(a) = access {
                    self.qp.init2init(a).map_err(err)?;
                }
                self.dev.learn_peer_port(ah.dgid, dest, ah.udp_port);
                self.qp.init2rtr(&p).map_err(err)?;
                st.1 = Some(p);
                *self.remote.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((ah.socket_addr(), dest));
            }
            (QpState::Rtr, QpState::Rts) => {
                let mut p =
                    st.1.ok_or_else(|| bad("no path from INIT→RTR".into(), to))?;
                p.sq_psn = need(attr.sq_psn, "sq_psn")?;
                p.ack_timeout = need(attr.timeout.map(u32::from), "timeout")? as u8;
                p.retry_count = need(attr.retry_cnt.map(u32::from), "retry_cnt")? as u8;
                p.rnr_retry = need(attr.rnr_retry.map(u32::from), "rnr_retry")? as u8;
                p.log_sra_max =
                    log2_depth(need(attr.max_rd_atomic.map(u32::from), "max_rd_atomic")? as u8);
                self.qp.rtr2rts(&p).map_err(err)?;
                st.1 = Some(p);
                if access.is_some() || attr.min_rnr_timer.is_some() {
                    // The QP is in RTS now; record that before a failure of the optional part.
                    st.0 = QpState::Rts;
                    self.qp.rts2rts(access, attr.min_rnr_timer).map_err(err)?;
                }
            }
            (QpState::Rts, QpState::Rts) => {
                if access.is_some() || attr.min_rnr_timer.is_some() {
                    self.qp.rts2rts(access, attr.min_rnr_timer).map_err(err)?;
                }
            }
            (f, t) => {
                return Err(bad(
                    format!("{f:?} -> {t:?} is not an RC transition the vfio provider knows"),
                    t,
                ))
            }
        }
        st.0 = to;
        *self.stat.now.lock().unwrap_or_else(|p| p.into_inner()) = (to, self.remote());
        Ok(())
    }

    /// `ibv_post_send`.
    pub(crate) fn post_send(&self, wrs: &[SendWr]) -> Result<()> {
        let qpn = self.qp.qpn();
        if let Some(e) = self.dev.hca.fatal() {
            return Err(Error::Post {
                qpn,
                index: 0,
                wr_id: wrs.first().map_or(0, |w| w.wr_id),
                reason: e.to_string(),
            });
        }
        if self.state() != QpState::Rts {
            return Err(Error::Post {
                qpn,
                index: 0,
                wr_id: wrs.first().map_or(0, |w| w.wr_id),
                reason: format!("QP is in {:?}, not RTS", self.state()),
            });
        }
        let lists: Vec<_> = wrs.iter().map(|w| sges(&w.sg_list)).collect();
        let reqs: Vec<SendRequest<'_>> = wrs
            .iter()
            .zip(&lists)
            .map(|(w, l)| SendRequest {
                wr_id: w.wr_id,
                wr: send_wr(w, l),
            })
            .collect();
        let (index, r) = self.qp.post_send_counted(&reqs);
        r.map_err(|e| Error::Post {
            qpn,
            index,
            wr_id: wrs.get(index).map_or(0, |w| w.wr_id),
            reason: e.to_string(),
        })
    }

    /// `ibv_post_recv`.
    pub(crate) fn post_recv(&self, wrs: &[RecvWr]) -> Result<()> {
        let qpn = self.qp.qpn();
        if self.state() == QpState::Reset {
            return Err(Error::Post {
                qpn,
                index: 0,
                wr_id: wrs.first().map_or(0, |w| w.wr_id),
                reason: "QP is in RESET".into(),
            });
        }
        let lists: Vec<_> = wrs.iter().map(|w| sges(&w.sg_list)).collect();
        let reqs: Vec<RecvRequest<'_>> = wrs
            .iter()
            .zip(&lists)
            .map(|(w, l)| RecvRequest {
                wr_id: w.wr_id,
                sges: l,
            })
            .collect();
        self.qp.post_recv(&reqs).map_err(|e| Error::Post {
            qpn,
            index: 0,
            wr_id: wrs.first().map_or(0, |w| w.wr_id),
            reason: e.to_string(),
        })
    }
}
