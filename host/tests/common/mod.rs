//! Two-endpoint plumbing shared by the host integration tests: one soft device, PD, MR, CQ and
//! RC QP per end, and the INIT/RTR/RTS attributes that connect two ends.
#![allow(dead_code)]

use std::time::Duration;

use rdmesh_host::verbs::*;

/// One end of a test connection.
pub struct End {
    pub dev: Device,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub mr: MemoryRegion,
}

/// Moves `qp` RESET → INIT on port 1, P_Key index 0, with `access`.
pub fn to_init(qp: &QueuePair, access: AccessFlags) {
    qp.modify(&QpAttr {
        qp_state: Some(QpState::Init),
        pkey_index: Some(0),
        port_num: Some(1),
        qp_access_flags: Some(access),
        ..Default::default()
    })
    .unwrap();
}

/// INIT → RTR attributes towards `to`, expecting receive PSN `psn`.
pub fn rtr_attr(to: &End, mtu: Mtu, psn: u32) -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Rtr),
        ah_attr: Some(AhAttr {
            dgid: to.dev.local_addr().ip(),
            udp_port: to.dev.local_addr().port(),
        }),
        path_mtu: Some(mtu),
        dest_qp_num: Some(to.qp.qp_num()),
        rq_psn: Some(psn),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(1),
        ..Default::default()
    }
}

/// RTR → RTS attributes: send PSN `psn`, ACK timeout code `timeout`, `retry_cnt` retries,
/// infinite RNR retries.
pub fn rts_attr(psn: u32, timeout: u8, retry_cnt: u8) -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(psn),
        timeout: Some(timeout),
        retry_cnt: Some(retry_cnt),
        rnr_retry: Some(7),
        max_rd_atomic: Some(4),
        ..Default::default()
    }
}

/// Connects `a` and `b` (both in INIT) to each other and moves both to RTS.
pub fn connect_pair(a: &End, b: &End, mtu: Mtu, psn: u32, timeout: u8, retry_cnt: u8) {
    for (x, y) in [(a, b), (b, a)] {
        x.qp.modify(&rtr_attr(y, mtu, psn)).unwrap();
    }
    for x in [a, b] {
        x.qp.modify(&rts_attr(psn, timeout, retry_cnt)).unwrap();
    }
}

/// The next completion, failing the test after 10 s.
pub fn wait(cq: &CompletionQueue) -> WorkCompletion {
    cq.wait_one(Duration::from_secs(10))
        .expect("a completion within 10 s")
}
