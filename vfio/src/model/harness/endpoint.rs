//! An RC endpoint on a [`Harness`]: PD, an MTT-mode MKEY over a data buffer, a CQ and an RC
//! QP, connected to a peer with the RST→INIT→RTR→RTS commands; posting with core's writers
//! and doorbell effects, polling with core's CQ reader.

use std::sync::Arc;

use rdmesh_core::mlx5::cmd::*;
use rdmesh_core::mlx5::cqe::Cqe64;
use rdmesh_core::mlx5::doorbell::{
    ring_recv, BfregConfig, DbRecord, Effect, Effects, WorkQueue, UAR_BF_OFFSET,
};
use rdmesh_core::mlx5::{
    BatchPolicy, Batcher, Bfreg, CqReader, CqeOpcode, CqeRepr, Post, QpType, RqWriter, Sge,
    SqWriter,
};

use super::{Harness, HarnessResult};
use crate::seam::{DmaBuffer, Mmio};

/// Sizes and addresses of an [`Endpoint`].
#[derive(Debug, Clone, Copy)]
pub struct EndpointConfig {
    /// log2 of the SQ size in WQEBBs.
    pub log_sq: u8,
    /// log2 of the RQ size in WQEs.
    pub log_rq: u8,
    /// log2 of the CQ size in CQEs.
    pub log_cq: u8,
    /// Registered data buffer, bytes (a multiple of 4096).
    pub data_len: usize,
    /// Virtual address the data buffer is registered at.
    pub va: u64,
    /// The endpoint's IPv4 address (GID ::ffff:a.b.c.d at index `gid_index`).
    pub ip: [u8; 4],
    /// GID table index.
    pub gid_index: u8,
    /// Fixed UDP source port (0 = let the device derive one).
    pub udp_sport: u16,
    /// Path MTU as the IB code (1 = 256 .. 5 = 4096).
    pub mtu: u8,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        EndpointConfig {
            log_sq: 8,
            log_rq: 7,
            log_cq: 9,
            data_len: 64 << 10,
            va: 0x5555_0000_0000,
            ip: [10, 0, 0, 1],
            gid_index: 0,
            udp_sport: 0,
            mtu: 3,
        }
    }
}

/// Where the device sees an endpoint's queues.
struct Io {
    bar: Arc<dyn Mmio>,
    uar: u32,
    qp_buf: Box<dyn DmaBuffer>,
    qp_dbrec: Box<dyn DmaBuffer>,
    cq_dbrec: Box<dyn DmaBuffer>,
    sq_offset: usize,
    sq_wqebbs: usize,
    rq_stride: usize,
    rq_size: usize,
}

impl Io {
    /// Executes doorbell effects in order (rdma-core `post_send_db` / `mlx5_post_recv`).
    fn run(&self, effects: &Effects, sq: &SqWriter<'_>, rq_ring: &[u8]) -> HarnessResult<()> {
        let err = |e: crate::seam::DmaError| e.to_string();
        for e in effects {
            match *e {
                Effect::WriteWqes {
                    queue: WorkQueue::Send,
                    first,
                    count,
                } => {
                    for k in 0..count {
                        let index = first.wrapping_add(k);
                        let slot = usize::from(index) & (self.sq_wqebbs - 1);
                        self.qp_buf
                            .write(self.sq_offset + slot * 64, &sq.read_wqebb(index))
                            .map_err(err)?;
                    }
                }
                Effect::WriteWqes {
                    queue: WorkQueue::Recv,
                    first,
                    count,
                } => {
                    for k in 0..count {
                        let slot = usize::from(first.wrapping_add(k)) & (self.rq_size - 1);
                        let r = slot * self.rq_stride..(slot + 1) * self.rq_stride;
                        self.qp_buf.write(r.start, &rq_ring[r]).map_err(err)?;
                    }
                }
                Effect::Barrier(_) => std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst),
                Effect::DbrecStore { record, value } => match record {
                    DbRecord::QpRecv | DbRecord::QpSend => self
                        .qp_dbrec
                        .write(record.byte_offset(), &value)
                        .map_err(err)?,
                    DbRecord::CqSetCi | DbRecord::CqArm => self
                        .cq_dbrec
                        .write(record.byte_offset(), &value)
                        .map_err(err)?,
                },
                Effect::Lock | Effect::Unlock => {}
                Effect::Mmio64 { offset, value } => self
                    .bar
                    .write_bytes64(self.uar as usize * 4096 + offset as usize, value),
                Effect::BlueFlame {
                    offset,
                    wqe_index,
                    chunks,
                } => {
                    // One write-combined 64-byte burst per chunk (rdma-core mlx5_bf_copy).
                    for c in 0..u16::from(chunks) {
                        self.bar.write_burst(
                            self.uar as usize * 4096 + offset as usize + usize::from(c) * 64,
                            &sq.read_wqebb(wqe_index.wrapping_add(c)),
                        );
                    }
                }
            }
        }
        Ok(())
    }
}

/// One RC QP with its CQ and registered memory.
pub struct Endpoint {
    /// QP number.
    pub qpn: u32,
    /// CQ number (send and receive).
    pub cqn: u32,
    /// lkey = rkey of the data buffer.
    pub key: u32,
    /// Virtual address of the data buffer.
    pub va: u64,
    /// The registered data buffer.
    pub data: Box<dyn DmaBuffer>,
    /// The CQ ring.
    pub cq_buf: Box<dyn DmaBuffer>,
    /// Device MAC.
    pub mac: [u8; 6],
    /// Configuration.
    pub cfg: EndpointConfig,
    io: Io,
    dev: super::super::ModelDevice,
    sq: SqWriter<'static>,
    rq: RqWriter<'static>,
    cq: CqReader,
}

fn mapped_v4(ip: [u8; 4]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ip);
    g
}

impl Endpoint {
    /// Creates PD, MKEY (MTT, local write, remote read/write/atomic), CQ and QP, and
    /// programs the GID entry.
    pub fn create(h: &mut Harness, cfg: EndpointConfig) -> HarnessResult<Endpoint> {
        let e = |e: crate::seam::DmaError| e.to_string();
        let mac = h.dev.config().mac;
        let mut ra = RoceAddress {
            source_l3_address: mapped_v4(cfg.ip),
            roce_l3_type: ROCE_L3_TYPE_IPV4,
            roce_version: ROCE_VERSION_2,
            ..Default::default()
        };
        ra.set_source_mac(mac);
        h.exec(
            &SetRoceAddressIn {
                roce_address_index: u16::from(cfg.gid_index),
                vhca_port_num: 0,
                roce_address: ra,
            },
            0,
        )?;
        let out = h.exec(&AllocPdIn {}, 0)?;
        let pd = AllocPdOut::parse(&out).map_err(|e| e.to_string())?.pd;

        let data = h.dma.alloc(cfg.data_len, 4096).map_err(e)?;
        let pages: Vec<u64> = (0..data.len() / 4096)
            .map(|i| (data.iova() + i as u64 * 4096) | 3)
            .collect();
        let out = h.exec(
            &CreateMkeyIn {
                pg_access: false,
                memory_key_mkey_entry: MkeyContext {
                    a: true,
                    rw: true,
                    rr: true,
                    lw: true,
                    lr: true,
                    access_mode_1_0: MKC_ACCESS_MODE_MTT,
                    qpn: 0xff_ffff,
                    mkey_7_0: 0x42,
                    pd,
                    start_addr: cfg.va,
                    len: cfg.data_len as u64,
                    translations_octword_size: pages.len().div_ceil(2) as u32,
                    log_page_size: 12,
                    ..Default::default()
                },
                translations_octword_actual_size: pages.len().div_ceil(2) as u32,
                pas: Pas::Addrs(&pages),
            },
            0,
        )?;
        let key = mkey(
            CreateMkeyOut::parse(&out)
                .map_err(|e| e.to_string())?
                .mkey_index,
            0x42,
        );

        let ncqe = 1usize << cfg.log_cq;
        let cq_buf = h.dma.alloc(ncqe * 64, 4096).map_err(e)?;
        let mut ring = vec![0u8; ncqe * 64];
        CqReader::init_ring(&mut ring);
        cq_buf.write(0, &ring).map_err(e)?;
        let cq_dbrec = h.dma.alloc(64, 64).map_err(e)?;
        let cq_pas: Vec<u64> = (0..cq_buf.len() / 4096)
            .map(|i| cq_buf.iova() + i as u64 * 4096)
            .collect();
        let out = h.exec(
            &CreateCqIn {
                cq_context: CqContext {
                    log_cq_size: cfg.log_cq,
                    uar_page: h.uar,
                    c_eqn_or_apu_element: u32::from(h.eqn),
                    log_page_size: 0,
                    dbr_addr: cq_dbrec.iova(),
                    ..Default::default()
                },
                cq_umem_valid: false,
                pas: Pas::Addrs(&cq_pas),
            },
            0,
        )?;
        let cqn = CreateCqOut::parse(&out).map_err(|e| e.to_string())?.cqn;

        let rq_size = 1usize << cfg.log_rq;
        let rq_stride = 64usize;
        let sq_wqebbs = 1usize << cfg.log_sq;
        let sq_offset = rq_size * rq_stride;
        let qp_buf = h.dma.alloc(sq_offset + sq_wqebbs * 64, 4096).map_err(e)?;
        let qp_dbrec = h.dma.alloc(64, 64).map_err(e)?;
        let qp_pas: Vec<u64> = (0..qp_buf.len() / 4096)
            .map(|i| qp_buf.iova() + i as u64 * 4096)
            .collect();
        let out = h.exec(
            &CreateQpIn {
                qpc: QpContext {
                    st: QP_ST_RC,
                    pm_state: QP_PM_MIGRATED,
                    pd,
                    uar_page: h.uar,
                    log_sq_size: cfg.log_sq,
                    log_rq_size: cfg.log_rq,
                    log_rq_stride: 2,
                    cqn_snd: cqn,
                    cqn_rcv: cqn,
                    dbr_addr: qp_dbrec.iova(),
                    log_page_size: 0,
                    rq_type: QP_RQ_TYPE_REGULAR,
                    ..Default::default()
                },
                pas: Pas::Addrs(&qp_pas),
                ..Default::default()
            },
            0,
        )?;
        let qpn = CreateQpOut::parse(&out).map_err(|e| e.to_string())?.qpn;
        Ok(Endpoint {
            qpn,
            cqn,
            key,
            va: cfg.va,
            data,
            cq_buf,
            mac,
            cfg,
            io: Io {
                bar: h.bar.clone(),
                uar: h.uar,
                qp_buf,
                qp_dbrec,
                cq_dbrec,
                sq_offset,
                sq_wqebbs,
                rq_stride,
                rq_size,
            },
            dev: h.dev.clone(),
            // The staging rings live for the process (a few KiB per endpoint) so the writers
            // can keep their counters across calls.
            sq: SqWriter::new(
                Box::leak(vec![0u8; sq_wqebbs * 64].into_boxed_slice()),
                qpn,
                QpType::Rc,
            )
            .map_err(|e| format!("{e:?}"))?,
            rq: RqWriter::new(
                Box::leak(vec![0u8; rq_size * rq_stride].into_boxed_slice()),
                6,
            )
            .map_err(|e| format!("{e:?}"))?,
            cq: CqReader::new(cfg.log_cq, cqn).map_err(|e| format!("{e:?}"))?,
        })
    }

    /// RST2INIT, INIT2RTR (MTU 1024, PSN 0, path to `peer`), RTR2RTS.
    pub fn connect(&mut self, h: &mut Harness, peer: &Endpoint) -> HarnessResult<()> {
        let mut path = AddressPath {
            vhca_port_num: 1,
            src_addr_index: self.cfg.gid_index,
            rgid_rip: mapped_v4(peer.cfg.ip),
            hop_limit: 64,
            udp_sport: self.cfg.udp_sport,
            ack_timeout: 14,
            ..Default::default()
        };
        path.set_rmac(peer.mac);
        h.exec(
            &Rst2InitQpIn {
                qpn: self.qpn,
                qpc: QpContext {
                    rre: true,
                    rwe: true,
                    rae: true,
                    primary_address_path: AddressPath {
                        vhca_port_num: 1,
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
        )?;
        h.exec(
            &Init2RtrQpIn {
                qpn: self.qpn,
                qpc: QpContext {
                    mtu: self.cfg.mtu,
                    log_msg_max: 30,
                    remote_qpn: peer.qpn,
                    next_rcv_psn: 0,
                    min_rnr_nak: 1,
                    log_rra_max: 4,
                    primary_address_path: path,
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
        )?;
        h.exec(
            &Rtr2RtsQpIn {
                qpn: self.qpn,
                qpc: QpContext {
                    next_send_psn: 0,
                    retry_count: 7,
                    rnr_retry: 7,
                    log_sra_max: 4,
                    primary_address_path: AddressPath {
                        ack_timeout: 14,
                        vhca_port_num: 1,
                        ..Default::default()
                    },
                    ..Default::default()
                },
                ..Default::default()
            },
            0,
        )?;
        Ok(())
    }

    /// A batcher for `policy` on this QP's doorbell register (bfreg 0: 8-byte doorbells
    /// only, as under VFIO).
    pub fn batcher(&self, policy: BatchPolicy) -> HarnessResult<Batcher> {
        Batcher::new(
            policy,
            Bfreg::new(BfregConfig::doorbell_only(UAR_BF_OFFSET)),
        )
        .map_err(|e| format!("{e:?}"))
    }

    /// Posts `posts` through `batcher` (ringing as its policy says), then flushes the rest
    /// when `flush`.
    pub fn post(
        &mut self,
        batcher: &mut Batcher,
        posts: &[Post<'_>],
        flush: bool,
    ) -> HarnessResult<()> {
        let mut eff = Effects::new();
        for p in posts {
            batcher
                .post(&mut self.sq, p, &mut eff)
                .map_err(|e| format!("{e:?}"))?;
            if !eff.is_empty() {
                self.io.run(&eff, &self.sq, self.rq.ring())?;
            }
        }
        if flush && batcher.flush(&mut self.sq, &mut eff) {
            self.io.run(&eff, &self.sq, self.rq.ring())?;
        }
        Ok(())
    }

    /// Posts one WQE through `batcher`, executing the doorbell when the policy rings one;
    /// returns what was posted and whether a doorbell rang.
    pub fn post_one(
        &mut self,
        batcher: &mut Batcher,
        post: &Post<'_>,
    ) -> HarnessResult<(rdmesh_core::mlx5::Posted, bool)> {
        let mut eff = Effects::new();
        let p = batcher
            .post(&mut self.sq, post, &mut eff)
            .map_err(|e| format!("{e:?}"))?;
        let rang = !eff.is_empty();
        if rang {
            self.io.run(&eff, &self.sq, self.rq.ring())?;
        }
        Ok((p, rang))
    }

    /// Rings the doorbell for the WQEs `batcher` holds back; `false` when none were pending.
    pub fn flush(&mut self, batcher: &mut Batcher) -> HarnessResult<bool> {
        let mut eff = Effects::new();
        if batcher.flush(&mut self.sq, &mut eff) {
            self.io.run(&eff, &self.sq, self.rq.ring())?;
            return Ok(true);
        }
        Ok(false)
    }

    /// [`poll`](Self::poll), with the virtual time at which each CQE became visible to the
    /// CPU ([`crate::model::pcie`]).
    pub fn poll_timed(&mut self) -> HarnessResult<Vec<(CqeRepr, crate::model::Ps)>> {
        let c = self.poll()?;
        let t = self.dev.take_cqe_times(self.cqn);
        if t.len() < c.len() {
            return Err(format!(
                "{} CQEs polled but {} CQE times recorded",
                c.len(),
                t.len()
            ));
        }
        Ok(c.into_iter().zip(t).collect())
    }

    /// The device this endpoint is on.
    pub fn device(&self) -> &super::super::ModelDevice {
        &self.dev
    }

    /// WQEBBs in the send queue.
    pub fn sq_wqebbs(&self) -> u16 {
        self.sq.wqebbs()
    }

    /// WQEBBs free in the send queue.
    pub fn sq_free(&self) -> u16 {
        self.sq.free()
    }

    /// Posts one receive WQE scattering into `sges`.
    pub fn post_recv(&mut self, sges: &[Sge]) -> HarnessResult<()> {
        self.rq.post(sges).map_err(|e| format!("{e:?}"))?;
        let b = self.rq.take_batch().ok_or("no receive batch")?;
        let eff = ring_recv(&b);
        self.io.run(&eff, &self.sq, self.rq.ring())
    }

    /// Drains the CQ (updating the consumer index in the doorbell record).
    pub fn poll(&mut self) -> HarnessResult<Vec<CqeRepr>> {
        let mut out = Vec::new();
        loop {
            let mut raw = [0u8; 64];
            self.cq_buf
                .read(self.cq.offset(), &mut raw)
                .map_err(|e| e.to_string())?;
            if !self.cq.owned_by_sw(raw[63]) {
                break;
            }
            let c =
                CqeRepr::parse(&Cqe64::new_unchecked(&raw[..])).map_err(|e| format!("{e:?}"))?;
            self.cq.consume();
            // Retire send WQEs up to the one completed (requester CQEs), receive WQEs one each.
            match c.opcode {
                CqeOpcode::Req | CqeOpcode::ReqErr => {
                    let _ = self.sq.retire(c.wqe_counter);
                }
                _ => {
                    let _ = self.rq.retire(1);
                }
            }
            out.push(c);
        }
        let mut eff = Effects::new();
        let _ = eff.push(self.cq.update_ci());
        self.io.run(&eff, &self.sq, self.rq.ring())?;
        Ok(out)
    }

    /// Arms the CQ for the next completion (CQ doorbell at UAR + 0x20).
    pub fn arm(&mut self) -> HarnessResult<()> {
        let eff = self.cq.arm(rdmesh_core::mlx5::ArmCmd::Next);
        self.io.run(&eff, &self.sq, self.rq.ring())
    }

    /// An SGE over `len` bytes at byte `off` of the data buffer.
    pub fn sge(&self, off: u64, len: u32) -> Sge {
        Sge {
            addr: self.va + off,
            lkey: self.key,
            len,
        }
    }
}
