//! The state of one modeled device and its progress loop: everything behind BAR0 and the
//! DMA seam, guarded by one mutex.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use rdmesh_core::mlx5::cmd::RoceAddress;
use rdmesh_core::rc::Instant;

use super::caps::Caps;
use super::counters::ModelCounters;
use super::faults::ModelFaults;
use super::init_seg::InitSegState;
use super::interrupt::ModelInterrupt;
use super::link::LinkShared;
use super::memory::{DmaFault, DmaSpace};
use super::objects::{Cq, Eq, Mkey, Qp};
use super::pages::Pages;
use super::ModelConfig;

/// Where the function is in its life cycle (ENABLE_HCA / INIT_HCA / TEARDOWN_HCA /
/// DISABLE_HCA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HcaState {
    /// Before ENABLE_HCA, or after DISABLE_HCA.
    Disabled,
    /// After ENABLE_HCA (and after TEARDOWN_HCA).
    Enabled,
    /// After INIT_HCA: objects may be created.
    Initialized,
}

/// Everything the device knows, under [`Device::state`].
#[derive(Debug)]
pub struct DeviceState {
    pub cfg: ModelConfig,
    pub counters: ModelCounters,
    pub faults: ModelFaults,
    pub init: InitSegState,
    pub hca: HcaState,
    pub issi: u16,
    pub pages: Pages,
    pub caps: Caps,
    pub roce_en: bool,
    pub vport_mtu: u16,
    pub gids: BTreeMap<u16, RoceAddress>,
    pub uars: BTreeSet<u32>,
    pub pds: BTreeSet<u32>,
    pub mkeys: BTreeMap<u32, Mkey>,
    pub eqs: BTreeMap<u8, Eq>,
    pub cqs: BTreeMap<u32, Cq>,
    pub qps: BTreeMap<u32, Qp>,
    pub next_id: u32,
    /// Q counter sets (ALLOC_Q_COUNTER).
    pub q_counters: super::qcounters::QCounterSets,
    /// Vport traffic and congestion counters.
    pub port: super::qcounters::PortCounters,
    /// Received data frames, for the `ce_mark_every` fault.
    pub rx_data_frames: u64,
    /// Frames produced, to hand to the link after the lock is released.
    pub outbox: Vec<Vec<u8>>,
    /// The last command failure, in words (for test diagnostics).
    pub last_error: Option<String>,
    pub start: std::time::Instant,
    pub space: Arc<DmaSpace>,
    pub irq: Arc<ModelInterrupt>,
    /// Virtual time and PCIe accounting.
    pub pcie: super::pcie::PcieState,
}

impl DeviceState {
    pub fn new(cfg: ModelConfig, space: Arc<DmaSpace>, irq: Arc<ModelInterrupt>) -> Self {
        DeviceState {
            init: InitSegState::new(&cfg),
            cfg,
            counters: ModelCounters::default(),
            faults: ModelFaults::default(),
            hca: HcaState::Disabled,
            issi: 0,
            pages: Pages::default(),
            caps: Caps::default(),
            roce_en: false,
            vport_mtu: 1500,
            gids: BTreeMap::new(),
            uars: BTreeSet::new(),
            pds: BTreeSet::new(),
            mkeys: BTreeMap::new(),
            eqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            next_id: 0,
            q_counters: Default::default(),
            port: Default::default(),
            rx_data_frames: 0,
            outbox: Vec::new(),
            last_error: None,
            start: std::time::Instant::now(),
            space,
            irq,
            pcie: super::pcie::PcieState::default(),
        }
    }

    /// Time since the device was created, as the RC engine's clock.
    pub fn now(&self) -> Instant {
        Instant(self.start.elapsed().as_nanos() as u64)
    }

    /// A fresh object number (PDs, UARs, CQNs, QPNs and MKEY indexes share one counter, so
    /// a handle of one kind never names an object of another by accident).
    pub fn alloc_id(&mut self) -> u32 {
        self.next_id += 1;
        // Skip the low numbers (UAR pages 0..=15 hold the init segment region).
        0x10 + self.next_id
    }

    pub fn dma_read(&mut self, iova: u64, out: &mut [u8]) -> Result<(), DmaFault> {
        let r = self.space.dma_read(iova, out);
        if let Err(e) = &r {
            self.counters.dma_faults += 1;
            tracing::warn!(error = %e, "model device: DMA read fault");
        }
        r
    }

    pub fn dma_write(&mut self, iova: u64, data: &[u8]) -> Result<(), DmaFault> {
        let r = self.space.dma_write(iova, data);
        if let Err(e) = &r {
            self.counters.dma_faults += 1;
            tracing::warn!(error = %e, "model device: DMA write fault");
        }
        r
    }

    /// Raises the interrupt (MSI-X vector 0).
    pub fn interrupt(&mut self) {
        self.counters.interrupts += 1;
        let now = self.pcie.device_now();
        self.pcie.dma_write(now, 4, super::pcie::WriteKind::Event);
        self.irq.fire();
    }
}

/// One device: its state, DMA space, interrupt, received-frame queue and link.
#[derive(Debug)]
pub struct Device {
    pub state: Mutex<DeviceState>,
    pub space: Arc<DmaSpace>,
    pub irq: Arc<ModelInterrupt>,
    pub inbox: Mutex<VecDeque<Vec<u8>>>,
    pub link: Mutex<Option<Arc<LinkShared>>>,
    /// A port wire of the caller's ([`super::FrameSink`]: a UDP socket, a raw socket), used
    /// when no [`super::ModelLink`] joins this device to another model.
    pub port: Mutex<Option<Arc<dyn super::FrameSink>>>,
    /// Held from taking a step's frames until they are on the wire, so that two threads
    /// running the progress loop at once never send this device's frames out of order (a
    /// reordered request is a PSN sequence error to the peer).
    pub tx_order: Mutex<()>,
}

/// Rounds of the progress loop before it gives up (a ping-pong that never settles would be
/// a model bug; this keeps it from hanging a test).
const MAX_ROUNDS: usize = 1 << 20;

impl Device {
    pub fn new(cfg: ModelConfig) -> Arc<Device> {
        let space = Arc::new(DmaSpace::default());
        let irq = Arc::new(ModelInterrupt::default());
        Arc::new(Device {
            state: Mutex::new(DeviceState::new(cfg, space.clone(), irq.clone())),
            space,
            irq,
            inbox: Mutex::new(VecDeque::new()),
            link: Mutex::new(None),
            port: Mutex::new(None),
            tx_order: Mutex::new(()),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, DeviceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn link(&self) -> Option<Arc<LinkShared>> {
        self.link.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// One step of this device: received frames in, timers, receive queues, transmissions
    /// and completions out. Returns the frames to send and whether anything happened.
    fn step(&self) -> (Vec<Vec<u8>>, bool) {
        let frames: Vec<Vec<u8>> = self
            .inbox
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect();
        let mut st = self.lock();
        let received = !frames.is_empty();
        for f in &frames {
            super::rx::receive_frame(&mut st, f);
        }
        super::sq_exec::run_all(&mut st);
        let out = std::mem::take(&mut st.outbox);
        let active = received || !out.is_empty();
        (out, active)
    }

    /// Runs this device and its link peer until neither has work left: the model's progress
    /// rule (see the module docs). Takes one device lock at a time, so it may run on any
    /// thread, concurrently with itself.
    pub fn pump(self: &Arc<Device>) {
        let link = self.link();
        let devs: Vec<Arc<Device>> = match &link {
            Some(l) => l.devices(),
            None => vec![self.clone()],
        };
        for _ in 0..MAX_ROUNDS {
            let mut any = false;
            for d in &devs {
                let _order = d.tx_order.lock().unwrap_or_else(|p| p.into_inner());
                let (frames, active) = d.step();
                any |= active;
                if frames.is_empty() {
                    continue;
                }
                let port = d.port.lock().unwrap_or_else(|p| p.into_inner()).clone();
                match (&link, port) {
                    (Some(l), _) => l.deliver(d, frames),
                    (None, Some(p)) => p.send(frames),
                    (None, None) => {
                        tracing::debug!(
                            count = frames.len(),
                            "model device without a link: frames dropped"
                        );
                    }
                }
            }
            if !any {
                return;
            }
        }
        tracing::error!("model progress loop did not settle after {MAX_ROUNDS} rounds");
    }
}
