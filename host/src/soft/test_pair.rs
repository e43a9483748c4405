//! Test support: one QP on each of two soft devices, connected to each other and in RTS
//! (RC, go-back-N, one READ/atomic each way, 7 retries and RNR retries).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::soft::engine::SoftDevice;
use crate::verbs::device::Provider;
use crate::verbs::{
    AccessFlags, AhAttr, CompletionQueue, Device, MemoryRegion, ProtectionDomain, QpAttr, QpCap,
    QpState, QueuePair, SendWr, SoftConfig, WorkCompletion, WrOpcode,
};
use rdmesh_core::rc::{Mtu, Sge};

/// A soft device on loopback address 127.0.9.`last` (each test takes addresses of its own).
pub(crate) fn open(last: u8) -> Device {
    Device::open_soft(SoftConfig::new(IpAddr::V4(Ipv4Addr::new(127, 0, 9, last)))).unwrap()
}

/// The soft provider's device behind `d`.
pub(crate) fn soft(d: &Device) -> &Arc<SoftDevice> {
    match &d.provider {
        Provider::Soft(dev) => dev,
        Provider::Vfio(_) => unreachable!("a soft device"),
    }
}

/// One end: its PD (kept alive for the MR and QP), a region of the asked length with local
/// and remote write access, one CQ for sends and receives, and the QP.
pub(crate) struct End {
    pub _pd: ProtectionDomain,
    pub mr: MemoryRegion,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
}

impl End {
    /// Posts an RDMA WRITE of this end's region bytes `0..len` to the start of `to`'s region
    /// (work request `wr_id`).
    pub fn post_write_to(&self, to: &End, len: usize, wr_id: u64) {
        self.qp
            .post_send(&[SendWr::new(
                wr_id,
                WrOpcode::RdmaWrite {
                    remote_addr: to.mr.addr(),
                    rkey: to.mr.rkey(),
                },
                vec![Sge {
                    addr: self.mr.addr(),
                    length: len as u32,
                    lkey: self.mr.lkey(),
                }],
            )])
            .unwrap();
    }

    /// The next completion on this end's CQ, polling it; fails the test when none came within
    /// `limit`.
    pub fn completion(&self, limit: Duration) -> WorkCompletion {
        let start = Instant::now();
        loop {
            if let Some(wc) = self.cq.poll_one() {
                return wc;
            }
            assert!(start.elapsed() < limit, "no completion within {limit:?}");
            std::thread::yield_now();
        }
    }

    /// [`post_write_to`](Self::post_write_to), then its completion ([`completion`](Self::completion)).
    pub fn write_to(&self, to: &End, len: usize, wr_id: u64, limit: Duration) -> WorkCompletion {
        self.post_write_to(to, len, wr_id);
        self.completion(limit)
    }
}

/// Connects a QP on `a` with one on `b` (first PSN 7 both ways). `mr_len`: bytes of each end's
/// region; `timeout`: the ACK timeout code (4.096 µs · 2^timeout).
pub(crate) fn connected(
    a: &Device,
    b: &Device,
    mr_len: usize,
    mtu: Mtu,
    timeout: u8,
) -> (End, End) {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let setup = |d: &Device| {
        let pd = d.alloc_pd().unwrap();
        let mr = pd.register(mr_len, access).unwrap();
        let cq = d.create_cq(64).unwrap();
        let qp = pd.create_qp(&cq, &cq, QpCap::default()).unwrap();
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(access),
            ..Default::default()
        })
        .unwrap();
        End {
            _pd: pd,
            mr,
            cq,
            qp,
        }
    };
    let (ea, eb) = (setup(a), setup(b));
    let connect = |qp: &QueuePair, to: &Device, to_qpn: u32| {
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            ah_attr: Some(AhAttr::new(to.local_addr().ip())),
            path_mtu: Some(mtu),
            dest_qp_num: Some(to_qpn),
            rq_psn: Some(7),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(1),
            ..Default::default()
        })
        .unwrap();
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(7),
            timeout: Some(timeout),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(1),
            ..Default::default()
        })
        .unwrap();
    };
    connect(&ea.qp, b, eb.qp.qp_num());
    connect(&eb.qp, a, ea.qp.qp_num());
    (ea, eb)
}
