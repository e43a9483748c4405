//! The device's object tables: UARs, PDs, MKEYs, EQs, CQs and QPs, as the firmware keeps
//! them after the CREATE/ALLOC commands (fields named as in mlx5_ifc.h contexts).

use std::collections::BTreeMap;

use rdmesh_core::mlx5::cmd::{AddressPath, QpContext};
use rdmesh_core::rc::RcQp;

use super::memory::PagedBuf;

/// Send WQEs the RC engine of one QP holds at once (WQEs beyond wait in the ring).
pub const ENGINE_SQ: usize = 128;
/// Receive WQEs the RC engine of one QP holds at once.
pub const ENGINE_RQ: usize = 128;
/// The RC engine type of a modeled QP.
pub type Engine = RcQp<ENGINE_SQ, ENGINE_RQ>;

/// A memory key (CREATE_MKEY; mlx5_ifc.h `mkc`).
#[derive(Debug, Clone)]
pub struct Mkey {
    /// Low 8 bits of the key (`mkey_7_0`); key = index << 8 | this.
    pub key8: u8,
    /// Protection domain.
    pub pd: u32,
    /// First virtual address.
    pub start: u64,
    /// Length in bytes.
    pub len: u64,
    /// `length64`: the key covers the whole address space.
    pub length64: bool,
    /// Local write (`lw`).
    pub lw: bool,
    /// Remote read (`rr`).
    pub rr: bool,
    /// Remote write (`rw`).
    pub rw: bool,
    /// Remote atomic (`a`).
    pub atomic: bool,
    /// Translation: `None` = physical addressing (VA is the IOVA, `access_mode` PA), or the
    /// MTT: one IOVA per page of `1 << page_shift` bytes.
    pub mtt: Option<PagedBuf>,
}

impl Mkey {
    /// The IOVA pieces of `[va, va + len)`, or `None` when outside the key's range.
    pub fn translate(&self, va: u64, len: u64) -> Option<Vec<(u64, usize)>> {
        if !self.length64 && (va < self.start || va.checked_add(len)? > self.start + self.len) {
            return None;
        }
        let Some(mtt) = &self.mtt else {
            return Some(vec![(va, len as usize)]);
        };
        let mut out = Vec::new();
        let psize = 1u64 << mtt.page_shift;
        // MTT pages start at the page containing `start`.
        let base = self.start & !(psize - 1);
        let mut off = va - base;
        let mut left = len;
        while left > 0 {
            let page = *mtt.pas.get((off >> mtt.page_shift) as usize)? & !0x3;
            let within = off & (psize - 1);
            let n = (psize - within).min(left);
            out.push((page + within, n as usize));
            off += n;
            left -= n;
        }
        Some(out)
    }
}

/// An event queue (CREATE_EQ; `eqc`).
#[derive(Debug, Clone)]
pub struct Eq {
    /// log2 of the number of EQEs.
    pub log_size: u8,
    /// UAR page whose doorbell updates it.
    pub uar: u32,
    /// The EQE ring.
    pub buf: PagedBuf,
    /// Event types delivered (bit n of word n/64).
    pub bitmask: [u64; 4],
    /// Producer index (EQEs written).
    pub pi: u32,
    /// Consumer index as last written to the EQ doorbell.
    pub ci: u32,
    /// Armed: the next EQE raises the interrupt.
    pub armed: bool,
}

impl Eq {
    /// Whether event `t` is enabled.
    pub fn wants(&self, t: u8) -> bool {
        self.bitmask[usize::from(t / 64)] & (1 << (t % 64)) != 0
    }
}

/// A completion queue (CREATE_CQ; `cqc`).
#[derive(Debug, Clone)]
pub struct Cq {
    /// log2 of the number of CQEs.
    pub log_size: u8,
    /// UAR page.
    pub uar: u32,
    /// EQ that receives its completion events.
    pub eqn: u32,
    /// IOVA of the doorbell record (dword 0 consumer index, dword 1 arm).
    pub dbr_addr: u64,
    /// The CQE ring.
    pub buf: PagedBuf,
    /// Producer index (CQEs written).
    pub pi: u32,
    /// Armed with REQ_NOT (Some(false)) or REQ_NOT_SOL (Some(true)).
    pub armed: Option<bool>,
}

/// The firmware view of a QP's state (`qpc.state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpHwState {
    /// RESET.
    Rst,
    /// INIT.
    Init,
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
    /// Error.
    Err,
}

impl QpHwState {
    /// The `qpc.state` value.
    pub fn code(self) -> u8 {
        match self {
            QpHwState::Rst => 0,
            QpHwState::Init => 1,
            QpHwState::Rtr => 2,
            QpHwState::Rts => 3,
            QpHwState::Err => 6,
        }
    }
}

/// A queue pair (CREATE_QP; `qpc`) with its RC engine once it reached RTR.
#[derive(Debug)]
pub struct Qp {
    /// State.
    pub state: QpHwState,
    /// The context as created and modified (address path, PSNs, ...).
    pub ctx: QpContext,
    /// Queue buffer (RQ at offset 0, SQ after it).
    pub buf: PagedBuf,
    /// Byte offset of the SQ in `buf`.
    pub sq_offset: usize,
    /// SQ size in WQEBBs.
    pub sq_wqebbs: u32,
    /// RQ entries.
    pub rq_size: u32,
    /// RQ stride in bytes.
    pub rq_stride: usize,
    /// Next SQ WQEBB index the device fetches (16-bit counter in u32).
    pub sq_ci: u16,
    /// Next RQ WQE index the device reads.
    pub rq_ci: u16,
    /// Inline payloads of WQEs in flight, by WQE index.
    pub inline: BTreeMap<u16, Vec<u8>>,
    /// The RC engine (RTR and later).
    pub engine: Option<Box<Engine>>,
    /// Virtual-time state of the send queue ([`super::pcie`]).
    pub timing: super::pcie::QpTiming,
    /// The engine's counters as last added to the QP's counter set
    /// ([`super::qcounters::account`]).
    pub seen: rdmesh_core::rc::RcCounters,
}

impl Qp {
    /// The primary address path.
    pub fn path(&self) -> &AddressPath {
        &self.ctx.primary_address_path
    }
}
