//! An in-process mlx5 (ConnectX-7-like) device model behind the [`seam`](crate::seam): the
//! driver runs against it exactly as against a real BAR0, IOMMU-mapped DMA memory and an
//! MSI-X vector, and two models joined by a [`ModelLink`] exchange real RoCEv2 frames.
//!
//! # What is modeled
//! - BAR0 ([`ModelDevice::mmio`]): the init segment ([`init_seg`]: firmware/cmdif revision,
//!   command queue address and geometry, NIC interface state, `initializing` clearing after a
//!   few polls, health buffer and a health counter advancing on every read), and UAR pages at
//!   `uar_index · 4096` ([`doorbell`]: CQ arm at 0x20, EQ doorbells at 0x40/0x48, send
//!   doorbells at 0x800 + k · 512 in 256-byte halves).
//! - DMA ([`ModelDevice::dma`], [`memory`]): buffers with IOVAs; the device reaches memory
//!   only by IOVA, and an unmapped IOVA is an IOMMU fault ([`DmaFault`]), counted and logged.
//! - The command queue ([`cmdq`], [`commands`]): entries and chained mailboxes, every command
//!   of the bring-up and an RC QP, object tables ([`objects`]), pages ([`pages`]),
//!   capabilities ([`caps`]), EQs with command-completion and page-request events ([`eq`]),
//!   and error statuses with syndromes for invalid input.
//! - The data plane: send doorbells fetch WQEs through the QP's PAS ([`sq_exec`]), receive
//!   WQEs are read from the RQ when needed ([`rq_fetch`]), core's RC engine runs each QP with
//!   memory reached through MKEYs ([`mkey_access`]), its packets become RoCEv2 frames
//!   ([`frame`], [`rx`]), and completions become CQEs with the owner-bit protocol
//!   ([`cq_writer`]) plus completion EQEs when the CQ is armed.
//! - [`ModelCounters`] (MMIO writes, doorbells, WQEBBs, CQEs, EQEs, commands) and
//!   [`ModelFaults`] (fault injection).
//!
//! # Progress rule (deterministic, no hidden threads)
//! Everything happens synchronously inside the MMIO store that causes it: a command doorbell
//! executes the command before `write32` returns; a send / CQ / EQ doorbell runs the
//! progress loop — both linked devices take turns (one device lock at a time) processing
//! received frames, newly posted receive WQEs, rung send WQEs and due timers, until neither
//! has work — before `write64` returns. So after ringing a send doorbell on a lossless link
//! the whole exchange (requests, responses, ACKs, CQEs on both sides) is done. Receive WQEs
//! need no MMIO: they are read when a request arrives. Only timers (RNR waits,
//! retransmissions) need time to pass: call [`ModelLink::progress`] or
//! [`ModelDevice::progress`] while polling, or start [`ModelLink::spawn_ticker`].
//!
//! # Not modeled
//! BlueFlame contents (the first 8 bytes ring, the WQE is fetched from memory), CQE
//! compression and 128-byte CQEs, UMEMs, SRQs, UD/UC/raw QPs, SEND with invalidate, memory
//! windows, ECN/CNP generation, command checksums (the model runs with `cmdif_checksum` 0
//! and ignores signatures on input, but writes correct ones on output), QP access flags
//! (`rre`/`rwe`/`rae` are stored; the MKEY flags decide).
//!
//! # Use
//! ```
//! use rdmesh_vfio::model::{ModelConfig, ModelDevice, ModelLink};
//! let a = ModelDevice::new(ModelConfig::default());
//! let b = ModelDevice::new(ModelConfig { mac: [2, 0, 0, 0, 0, 2], ..ModelConfig::default() });
//! let link = ModelLink::connect(&a, &b, None).unwrap();
//! let (bar, dma, irq) = (a.mmio(), a.dma(), a.interrupt()); // hand these to the driver
//! # let _ = (bar, dma, irq, link);
//! ```

pub mod bar;
pub mod caps;
pub mod cmdq;
pub mod commands;
pub mod counters;
pub mod cq_writer;
mod device;
pub mod doorbell;
pub mod eq;
pub mod faults;
pub mod frame;
pub mod harness;
pub mod init_seg;
pub mod interrupt;
pub mod link;
pub mod memory;
pub mod mkey_access;
pub mod objects;
pub mod pages;
pub mod pcie;
pub mod qcounters;
pub mod rq_fetch;
pub mod rx;
pub mod sq_exec;

#[cfg(test)]
mod tests;

use std::sync::Arc;

pub use counters::ModelCounters;
pub use faults::ModelFaults;
pub use link::{LinkError, ModelLink, Ticker};
pub use memory::{DmaFault, ModelDmaAllocator};
pub use pcie::{PcieCounters, PcieParams, Ps};

use crate::seam::{DmaAllocator, Interrupt, Mmio};
use device::Device;

/// A wire for a model's port other than [`ModelLink`]: the frames the port sends go to
/// [`send`](FrameSink::send) (called on the thread that runs the progress loop, without any
/// device lock held); frames from the wire come in with [`ModelDevice::inject_frames`].
/// `rdmesh_host`'s vfio provider carries them over a UDP socket so that model-backed
/// processes talk to each other and to any RoCEv2 peer.
pub trait FrameSink: Send + Sync + std::fmt::Debug {
    /// Carries Ethernet frames (RoCEv2: Ethernet, IP, UDP to 4791, BTH ..., ICRC; no FCS).
    fn send(&self, frames: Vec<Vec<u8>>);
}

/// Static properties of a model device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelConfig {
    /// The port's permanent MAC (QUERY_NIC_VPORT_CONTEXT `permanent_address`).
    pub mac: [u8; 6],
    /// Firmware version (major, minor, subminor) in `fw_rev` / `cmdif_rev_fw_sub`.
    pub fw_version: (u16, u16, u16),
    /// Pages QUERY_PAGES(boot) asks for.
    pub boot_pages: u32,
    /// Pages QUERY_PAGES(init) asks for.
    pub init_pages: u32,
    /// Pages requested by a page-request EQE once an EQ with that event exists (0 = none).
    pub regular_pages: u32,
    /// Reads of `initializing` that still show bit 31 (firmware start-up).
    pub init_reads: u32,
    /// BAR0 length in bytes.
    pub bar_len: usize,
    /// Port MTU in bytes (PMTU `admin_mtu` / `oper_mtu`, the hardware MTU: Ethernet payload
    /// plus 22 bytes of L2 header, VLAN tag and FCS, as Linux `MLX5E_SW2HW_MTU` counts).
    pub port_mtu: u16,
}

impl Default for ModelConfig {
    /// MAC 02:00:00:00:00:01, firmware 28.39.1002 (a ConnectX-7 release), 64 boot, 256 init
    /// and 32 regular pages, 3 `initializing` polls, a 32 MiB BAR0, port MTU 9022 (9000 bytes
    /// of Ethernet payload).
    fn default() -> Self {
        ModelConfig {
            mac: [0x02, 0, 0, 0, 0, 0x01],
            fw_version: (28, 39, 1002),
            boot_pages: 64,
            init_pages: 256,
            regular_pages: 32,
            init_reads: 3,
            bar_len: 32 << 20,
            port_mtu: 9000 + 22,
        }
    }
}

/// One modeled mlx5 device: hand [`mmio`](Self::mmio), [`dma`](Self::dma) and
/// [`interrupt`](Self::interrupt) to the driver; inspect it with [`counters`](Self::counters),
/// steer it with [`set_faults`](Self::set_faults). Cloning gives another handle to the same
/// device.
#[derive(Debug, Clone)]
pub struct ModelDevice {
    pub(crate) dev: Arc<Device>,
}

impl ModelDevice {
    /// A device in its power-on state (firmware initializing, HCA disabled).
    pub fn new(cfg: ModelConfig) -> ModelDevice {
        ModelDevice {
            dev: Device::new(cfg),
        }
    }

    /// BAR0.
    pub fn mmio(&self) -> Arc<dyn Mmio> {
        let len = self.dev.lock().cfg.bar_len;
        Arc::new(bar::ModelBar {
            dev: self.dev.clone(),
            len,
        })
    }

    /// The DMA allocator whose buffers this device can reach.
    pub fn dma(&self) -> Arc<dyn DmaAllocator> {
        Arc::new(ModelDmaAllocator {
            space: self.dev.space.clone(),
        })
    }

    /// MSI-X vector 0 (command completions and events of armed EQs).
    pub fn interrupt(&self) -> Arc<dyn Interrupt> {
        self.dev.irq.clone()
    }

    /// The configuration.
    pub fn config(&self) -> ModelConfig {
        self.dev.lock().cfg
    }

    /// Counters since creation or [`reset_counters`](Self::reset_counters).
    pub fn counters(&self) -> ModelCounters {
        self.dev.lock().counters
    }

    /// Zeroes the counters (the PCIe transaction counts too).
    pub fn reset_counters(&self) {
        let mut st = self.dev.lock();
        st.counters = ModelCounters::default();
        st.pcie.counters = PcieCounters::default();
    }

    /// PCIe transactions and bytes since creation or [`reset_counters`](Self::reset_counters)
    /// (see [`pcie`]).
    pub fn pcie_counters(&self) -> PcieCounters {
        self.dev.lock().pcie.counters
    }

    /// The PCIe / NIC cost model in effect.
    pub fn pcie_params(&self) -> PcieParams {
        self.dev.lock().pcie.params
    }

    /// Replaces the cost model and restarts the virtual clock at 0.
    pub fn set_pcie_params(&self, params: PcieParams) {
        let mut st = self.dev.lock();
        st.pcie.params = params;
        st.pcie.reset_clock();
    }

    /// Restarts the virtual clock (host CPU, link, NIC) at 0; counters are kept. CQE times
    /// not yet taken are dropped.
    pub fn reset_clock(&self) {
        let mut st = self.dev.lock();
        st.pcie.reset_clock();
        for q in st.qps.values_mut() {
            q.timing = Default::default();
        }
    }

    /// The host CPU's virtual clock, ps.
    pub fn cpu_time(&self) -> Ps {
        self.dev.lock().pcie.cpu
    }

    /// The host CPU spends `ns` nanoseconds of virtual time on its own work (building a WQE,
    /// polling a CQE); returns the new time.
    pub fn cpu_work(&self, ns: f64) -> Ps {
        let mut st = self.dev.lock();
        st.pcie.cpu += pcie::ps(ns);
        st.pcie.cpu
    }

    /// The host CPU waits (polls) until virtual time `t`; returns the new time.
    pub fn cpu_wait_until(&self, t: Ps) -> Ps {
        let mut st = self.dev.lock();
        st.pcie.cpu = st.pcie.cpu.max(t);
        st.pcie.cpu
    }

    /// The virtual times at which the CQEs written to CQ `cqn` since the last call became
    /// visible to the CPU, in CQE order.
    pub fn take_cqe_times(&self, cqn: u32) -> Vec<Ps> {
        self.dev
            .lock()
            .pcie
            .cqe_times
            .get_mut(&cqn)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default()
    }

    /// The fault knobs in effect.
    pub fn faults(&self) -> ModelFaults {
        self.dev.lock().faults
    }

    /// Replaces the fault knobs (takes effect at the next access).
    pub fn set_faults(&self, faults: ModelFaults) {
        self.dev.lock().faults = faults;
    }

    /// Connects the port to `sink` (see [`FrameSink`]).
    ///
    /// Errors: [`LinkError::AlreadyLinked`] when a [`ModelLink`] or another sink holds it.
    pub fn attach_port(&self, sink: std::sync::Arc<dyn FrameSink>) -> Result<(), LinkError> {
        if self
            .dev
            .link
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return Err(LinkError::AlreadyLinked("port"));
        }
        let mut p = self.dev.port.lock().unwrap_or_else(|p| p.into_inner());
        if p.is_some() {
            return Err(LinkError::AlreadyLinked("port"));
        }
        *p = Some(sink);
        Ok(())
    }

    /// Disconnects the port's sink (frames sent afterwards are dropped).
    pub fn detach_port(&self) {
        *self.dev.port.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Frames received from the port's wire: queued and processed by the progress loop, which
    /// runs before this returns.
    pub fn inject_frames(&self, frames: Vec<Vec<u8>>) {
        if frames.is_empty() {
            return;
        }
        self.dev
            .inbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(frames);
        self.dev.pump();
    }

    /// Runs the progress loop (this device and its link peer): due timers, frames, rung
    /// queues. Needed only while waiting on timers; doorbells run it themselves.
    pub fn progress(&self) {
        self.dev.pump();
    }

    /// Device-side DMA read (what the device would see at `iova`).
    ///
    /// Errors: [`DmaFault`] for an unmapped range.
    pub fn dma_read(&self, iova: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        self.dev.space.dma_read(iova, out)
    }

    /// Device-side DMA write.
    ///
    /// Errors: [`DmaFault`] for an unmapped range.
    pub fn dma_write(&self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        self.dev.space.dma_write(iova, data)
    }

    /// The last command failure, in words (opcode, status, reason), for diagnostics.
    pub fn last_command_error(&self) -> Option<String> {
        self.dev.lock().last_error.clone()
    }

    /// Pages the firmware holds (given by MANAGE_PAGES and not taken back).
    pub fn pages_held(&self) -> u64 {
        self.dev.lock().pages.count()
    }

    /// The firmware asks for `n` more pages (`n > 0`) or gives `-n` pages back (`n < 0`)
    /// with a page-request EQE on the EQ that takes them, at once, whatever the driver is
    /// doing (as firmware does when it grows or shrinks its memory at run time). Returns
    /// `false` when no EQ takes page-request events yet.
    pub fn request_pages(&self, n: i32) -> bool {
        let mut st = self.dev.lock();
        let t = u8::from(rdmesh_core::mlx5::cmd::EventType::PageRequest);
        if !st.eqs.values().any(|e| e.wants(t)) {
            return false;
        }
        if n > 0 {
            st.pages.requested += i64::from(n);
        }
        eq::post_event(
            &mut st,
            rdmesh_core::mlx5::cmd::EqeRepr::PageRequest {
                ec_function: 0,
                func_id: 0,
                num_pages: n,
            },
        );
        true
    }

    /// Bytes of DMA memory mapped for this device (every buffer the driver allocated and
    /// has not freed): 0 once a driver has released everything.
    pub fn mapped_bytes(&self) -> usize {
        self.dev.space.mapped_bytes()
    }

    /// Number of live objects: (UARs, PDs, MKEYs, EQs, CQs, QPs).
    pub fn object_counts(&self) -> (usize, usize, usize, usize, usize, usize) {
        let st = self.dev.lock();
        (
            st.uars.len(),
            st.pds.len(),
            st.mkeys.len(),
            st.eqs.len(),
            st.cqs.len(),
            st.qps.len(),
        )
    }

    /// The `qpc.state` of QP `qpn` (0 RST, 1 INIT, 2 RTR, 3 RTS, 6 ERR), if it exists.
    pub fn qp_state(&self, qpn: u32) -> Option<u8> {
        self.dev.lock().qps.get(&qpn).map(|q| q.state.code())
    }
}
