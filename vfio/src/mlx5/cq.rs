//! Completion queues: CREATE_CQ with 64-byte CQEs bound to the async EQ, polled with core's
//! [`CqReader`] (ownership rule, consumer index, doorbell record; rdma-core cq.c
//! `get_sw_cqe`, `update_cons_index`), and the work-request ids of the QPs that report to it.

use std::sync::{Arc, Mutex};

use rdmesh_core::mlx5::cmd::{
    CqContext, CreateCqIn, CreateCqOut, DestroyCqIn, Opcode, Pas, CQE_SIZE_64,
};
use rdmesh_core::mlx5::cqe::{self, Cqe64, CqeError, CqeOpcode, CqeRepr};
use rdmesh_core::mlx5::CqReader;

use super::cmdif::parse_err;
use super::effects::{apply, Target};
use super::hca::{Hca, HcaInner};
use super::{barrier, DriverError, Result};
use crate::seam::DmaBuffer;

/// The QPN written over the CQEs of a QP that went back to RESET ([`Cq::clean`]): the
/// multicast QPN, which no RC QP has; [`Cq::poll`] consumes such CQEs silently.
pub(crate) const CLEANED_QPN: u32 = 0x00ff_ffff;

/// One work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's id (given at post time).
    pub wr_id: u64,
    /// The QP it belongs to.
    pub qpn: u32,
    /// `true` for a send-queue (requester) completion, `false` for a receive.
    pub send: bool,
    /// The CQE opcode (REQ, RESP_SEND, RESP_WR_IMM, ..., REQ_ERR, RESP_ERR).
    pub opcode: CqeOpcode,
    /// For a requester CQE, the send WQE opcode (0x08 WRITE, 0x0a SEND, 0x10 READ, ...).
    pub wqe_opcode: u8,
    /// Bytes received (receive completions) or read (RDMA READ).
    pub byte_len: u32,
    /// Immediate data / invalidated rkey (`imm_inval_pkey`).
    pub imm: u32,
    /// Syndrome of an error CQE; `None` on success.
    pub error: Option<CqeError>,
}

impl Completion {
    /// Whether the work request succeeded.
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }
}

/// The CQ itself; DESTROY_CQ runs when the last handle and every QP using it are gone.
#[derive(Debug)]
pub struct CqInner {
    pub(crate) hca: Arc<HcaInner>,
    pub(crate) cqn: u32,
    buf: Box<dyn DmaBuffer>,
    dbrec: Box<dyn DmaBuffer>,
    reader: Mutex<CqReader>,
}

/// A completion queue. Clones share it.
#[derive(Debug, Clone)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

impl Hca {
    /// Creates a CQ of at least `entries` CQEs (rounded up to a power of two, at least 64).
    ///
    /// # Errors
    /// [`DriverError::Config`] beyond the device's `log_max_cq_sz`; DMA and command errors.
    pub fn create_cq(&self, entries: usize) -> Result<Cq> {
        let name = self.name().to_string();
        let log = entries.max(64).next_power_of_two().trailing_zeros() as u8;
        let max = self.info().caps.log_max_cq_sz;
        if max != 0 && log > max {
            return Err(DriverError::config(
                &name,
                format!("CQ of {entries} entries exceeds the device's 2^{max} (log_max_cq_sz)"),
            ));
        }
        let reader = CqReader::new(log, 0).map_err(|e| DriverError::queue(&name, 0, e))?;
        let bytes = reader.ring_len();
        let dma = &self.inner.dma;
        let buf = dma
            .alloc(bytes, 4096)
            .map_err(|e| DriverError::dma(&name, e))?;
        let mut ring = vec![0u8; bytes];
        CqReader::init_ring(&mut ring);
        buf.write(0, &ring)
            .map_err(|e| DriverError::dma(&name, e))?;
        let dbrec = dma.alloc(64, 64).map_err(|e| DriverError::dma(&name, e))?;
        let pas: Vec<u64> = (0..bytes.div_ceil(4096))
            .map(|i| buf.iova() + (i * 4096) as u64)
            .collect();
        let what = format!("CQ of {} entries", 1usize << log);
        let out = self.inner.hw().exec(
            &CreateCqIn {
                cq_context: CqContext {
                    cqe_sz: CQE_SIZE_64,
                    log_cq_size: log,
                    uar_page: self.info().uar,
                    c_eqn_or_apu_element: u32::from(self.info().eqn),
                    log_page_size: 0,
                    dbr_addr: dbrec.iova(),
                    ..Default::default()
                },
                cq_umem_valid: false,
                pas: Pas::Addrs(&pas),
            },
            0,
            &what,
        )?;
        let cqn = CreateCqOut::parse(&out)
            .map_err(|e| parse_err(&name, Opcode::CreateCq, e, &what))?
            .cqn;
        let reader = CqReader::new(log, cqn).map_err(|e| DriverError::queue(&name, cqn, e))?;
        Ok(Cq {
            inner: Arc::new(CqInner {
                hca: self.inner.clone(),
                cqn,
                buf,
                dbrec,
                reader: Mutex::new(reader),
            }),
        })
    }
}

impl Cq {
    /// The CQ number.
    pub fn cqn(&self) -> u32 {
        self.inner.cqn
    }

    /// Polls up to `max` completions (rdma-core `mlx5_poll_cq`): each CQE the ownership rule
    /// gives to software is decoded, matched to its QP's work request, and the consumer index
    /// is published in the doorbell record after the batch.
    ///
    /// # Errors
    /// [`DriverError::Dma`]; [`DriverError::Queue`] for a CQE naming an unknown QP or a WQE
    /// that is not outstanding.
    pub fn poll(&self, max: usize) -> Result<Vec<Completion>> {
        let inner = &*self.inner;
        let name = &inner.hca.cfg.name;
        let mut reader = inner.reader.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        let mut consumed = 0usize;
        while out.len() < max {
            let mut raw = [0u8; cqe::LEN];
            inner
                .buf
                .read(reader.offset(), &mut raw)
                .map_err(|e| DriverError::dma(name, e))?;
            if !reader.owned_by_sw(raw[cqe::LEN - 1]) {
                break;
            }
            barrier::from_device();
            inner
                .buf
                .read(reader.offset(), &mut raw)
                .map_err(|e| DriverError::dma(name, e))?;
            reader.consume();
            consumed += 1;
            let c = CqeRepr::parse(&Cqe64::new_unchecked(&raw[..]))
                .map_err(|e| DriverError::queue(name, inner.cqn, e))?;
            if c.qpn == CLEANED_QPN {
                continue;
            }
            out.push(self.complete(&c)?);
        }
        if out.len() < max && inner.hca.is_dead() {
            out.extend(self.flush_dead(max - out.len()));
        }
        if consumed > 0 {
            apply(
                &Target {
                    device: name,
                    qpn: inner.cqn,
                    mmio: &*inner.hca.mmio,
                    uar_offset: inner.hca.uar_offset(),
                    dbrec: &*inner.dbrec,
                    wq: None,
                },
                &[reader.update_ci()],
            )?;
        }
        Ok(out)
    }

    /// The device is dead: every outstanding work request of the QPs that complete here
    /// completes with a flush error, in software (at most `max` per call).
    fn flush_dead(&self, max: usize) -> Vec<Completion> {
        let cqn = self.inner.cqn;
        let qps: Vec<_> = self
            .inner
            .hca
            .qps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let mut out = Vec::new();
        for q in qps {
            let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
            if q.send_cqn == cqn {
                let left = max - out.len();
                out.extend(q.flush(true, left));
            }
            if q.recv_cqn == cqn {
                let left = max - out.len();
                out.extend(q.flush(false, left));
            }
            if out.len() >= max {
                break;
            }
        }
        out
    }

    /// Polls until `n` completions arrived or `timeout` passed.
    ///
    /// # Errors
    /// As [`Cq::poll`]; [`DriverError::Config`] on timeout, naming the CQN and how many
    /// arrived.
    pub fn poll_n(&self, n: usize, timeout: std::time::Duration) -> Result<Vec<Completion>> {
        let start = std::time::Instant::now();
        let mut out = Vec::new();
        while out.len() < n {
            out.extend(self.poll(n - out.len())?);
            if out.len() < n {
                if start.elapsed() > timeout {
                    return Err(DriverError::config(
                        &self.inner.hca.cfg.name,
                        format!(
                            "CQ {:#x}: {} of {n} completions within {timeout:?}; check the \
                             peer QP's state and the link",
                            self.inner.cqn,
                            out.len()
                        ),
                    ));
                }
                std::thread::yield_now();
            }
        }
        Ok(out)
    }

    /// Removes the completions of QP `qpn` not yet polled (Linux `__mlx5_ib_cq_clean`, run
    /// when a QP goes back to RESET): each software-owned CQE of that QP gets
    /// [`CLEANED_QPN`], which [`Cq::poll`] skips. The device does not write those slots
    /// until the consumer index passes them.
    ///
    /// # Errors
    /// [`DriverError::Dma`].
    pub fn clean(&self, qpn: u32) -> Result<usize> {
        let inner = &*self.inner;
        let name = &inner.hca.cfg.name;
        let guard = inner.reader.lock().unwrap_or_else(|p| p.into_inner());
        let mut r = *guard;
        let mut cleaned = 0;
        for _ in 0..r.entries() {
            let mut raw = [0u8; cqe::LEN];
            inner
                .buf
                .read(r.offset(), &mut raw)
                .map_err(|e| DriverError::dma(name, e))?;
            if !r.owned_by_sw(raw[cqe::LEN - 1]) {
                break;
            }
            barrier::from_device();
            inner
                .buf
                .read(r.offset(), &mut raw)
                .map_err(|e| DriverError::dma(name, e))?;
            if Cqe64::new_unchecked(&raw[..]).qpn() == qpn {
                // sop_drop_qpn bits 23..0 (bytes 0x39..0x3c).
                inner
                    .buf
                    .write(r.offset() + 0x39, &[0xff, 0xff, 0xff])
                    .map_err(|e| DriverError::dma(name, e))?;
                cleaned += 1;
            }
            r.consume();
        }
        Ok(cleaned)
    }

    fn complete(&self, c: &CqeRepr) -> Result<Completion> {
        let name = &self.inner.hca.cfg.name;
        let send = matches!(c.opcode, CqeOpcode::Req | CqeOpcode::ReqErr);
        let q = self
            .inner
            .hca
            .qps
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&c.qpn)
            .cloned();
        let wr_id = match q {
            Some(q) => {
                let mut q = q.lock().unwrap_or_else(|p| p.into_inner());
                if send {
                    q.retire_send(c.wqe_counter)
                } else {
                    q.retire_recv()
                }
                .map_err(|e| DriverError::queue(name, c.qpn, e))?
            }
            None => {
                return Err(DriverError::config(
                    name,
                    format!(
                        "CQ {:#x}: completion for QPN {:#x}, which is not a QP of this device",
                        self.inner.cqn, c.qpn
                    ),
                ))
            }
        };
        Ok(Completion {
            wr_id,
            qpn: c.qpn,
            send,
            opcode: c.opcode,
            wqe_opcode: c.s_wqe_opcode,
            byte_len: c.byte_cnt,
            imm: c.imm_inval_pkey,
            error: c.error,
        })
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let what = format!("CQ {:#x}", self.cqn);
        if let Err(e) = self.hca.hw().exec(&DestroyCqIn { cqn: self.cqn }, 0, &what) {
            tracing::warn!(device = %self.hca.cfg.name, "DESTROY_CQ {what}: {e}");
        }
    }
}
