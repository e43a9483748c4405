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

/// A vfio-provider QP.
pub(crate) struct VfioQp {
    pub(crate) qp: Qp,
    pub(crate) dev: Arc<VfioDevice>,
    state: Mutex<(QpState, Option<RcPath>)>,
}

impl std::fmt::Debug for VfioQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioQp")
            .field("qpn", &self.qp.qpn())
            .finish()
    }
}

impl VfioQp {
    pub(crate) fn new(qp: Qp, dev: Arc<VfioDevice>) -> VfioQp {
        VfioQp {
            qp,
            dev,
            state: Mutex::new((QpState::Reset, None)),
        }
    }

    pub(crate) fn state(&self) -> QpState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).0
    }

    /// `ibv_modify_qp`.
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
        match (from, to) {
            (QpState::Reset, QpState::Init) => {
                self.qp
                    .rst2init(attr.port_num.unwrap_or(self.dev.port))
                    .map_err(err)?;
            }
            (QpState::Init, QpState::Rtr) => {
                let ah = attr.ah_attr.expect("checked: ah_attr is required");
                let mac = self.dev.neighbor(ah.dgid)?;
                let mut p = RcPath::new(attr.dest_qp_num.expect("checked"), gid_of(ah.dgid), mac);
                p.port = self.dev.port;
                p.mtu = attr.path_mtu.expect("checked");
                p.rq_psn = attr.rq_psn.expect("checked");
                p.min_rnr_nak = attr.min_rnr_timer.expect("checked");
                p.log_rra_max = log2_depth(attr.max_dest_rd_atomic.expect("checked"));
                self.qp.init2rtr(&p).map_err(err)?;
                st.1 = Some(p);
            }
            (QpState::Rtr, QpState::Rts) => {
                let mut p =
                    st.1.ok_or_else(|| bad("no path from INIT→RTR".into(), to))?;
                p.sq_psn = attr.sq_psn.expect("checked");
                p.ack_timeout = attr.timeout.expect("checked");
                p.retry_count = attr.retry_cnt.expect("checked");
                p.rnr_retry = attr.rnr_retry.expect("checked");
                p.log_sra_max = log2_depth(attr.max_rd_atomic.expect("checked"));
                self.qp.rtr2rts(&p).map_err(err)?;
                st.1 = Some(p);
            }
            (_, QpState::Err) => self.qp.to_error().map_err(err)?,
            (f, t) if f == t => {}
            (_, t) => {
                return Err(bad(
                    format!("{from:?} -> {t:?} is not supported by the vfio provider"),
                    t,
                ))
            }
        }
        st.0 = to;
        Ok(())
    }

    /// `ibv_post_send`.
    pub(crate) fn post_send(&self, wrs: &[SendWr]) -> Result<()> {
        let qpn = self.qp.qpn();
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
