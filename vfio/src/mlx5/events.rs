//! The background event thread: services the async EQ whenever the device speaks, not only
//! while a command waits — page requests (MANAGE_PAGES give) and page reclaims (MANAGE_PAGES
//! take), port state changes, CQ errors, QP/WQ errors, and command completions — and samples
//! the firmware health (Linux `mlx5_eq_async_int` + `poll_health`; rdma-core
//! `mlx5_vfio_process_async_events`, which runs only from the application's calls).
//!
//! The thread waits on the MSI-X vector (with a short timeout, so a lost interrupt costs
//! milliseconds), then takes the command lock and drains the EQ. A command that is running
//! holds that lock and drains the EQ itself while it waits, so events are never lost between
//! the two. It holds only the command and event state (never the device), so the last user
//! handle of the device always runs the teardown, which stops and joins the thread first.
//!
//! A fatal health state (a stopped health counter, a health syndrome, PCI reads of all ones)
//! marks the device dead: the syndrome is named in every later error ([`super::health::syndrome_name`]),
//! posting fails, every outstanding work request of every QP completes with a flush error on
//! its CQ (software completions, as Linux `mlx5_ib_poll_sw_comp` makes them), and teardown
//! releases the firmware's pages without asking the dead firmware (Linux `reclaim_pages` in
//! the internal-error state).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rdmesh_core::mlx5::cmd::{EqeRepr, EventType, PortChangeSubtype};

use super::hca::Core;
use super::DriverError;
use crate::seam::Interrupt;

/// Events kept for [`super::Hca::poll_events`] at most.
const MAX_RECENT: usize = 1024;

/// The longest the thread sleeps between EQ checks when no interrupt comes.
pub const EVENT_POLL: Duration = Duration::from_millis(5);

/// What the events said, kept for the driver's users.
#[derive(Debug, Default)]
pub struct EventState {
    /// The port's state from the last port-change event (`true` active); `None` before any.
    pub port_up: Option<bool>,
    /// QPs the device reported an error for, with the event.
    pub qp_errors: HashMap<u32, EventType>,
    /// CQs the device reported an error for, with the syndrome (1 overrun, 2 access).
    pub cq_errors: HashMap<u32, u8>,
    /// Why the device is dead, when it is.
    pub fatal: Option<DriverError>,
    /// Events handled by the thread (page requests included).
    pub handled: u64,
    /// Page-request events serviced by the thread (outside any command).
    pub page_requests: u64,
    /// Events not yet taken by [`super::Hca::poll_events`].
    pub recent: VecDeque<EqeRepr>,
    /// Events dropped from `recent` because nobody took them.
    pub dropped: u64,
}

impl EventState {
    /// Records one event.
    pub(crate) fn note(&mut self, ev: EqeRepr) {
        self.handled += 1;
        match ev {
            EqeRepr::PortChange { sub_type, .. } => match sub_type {
                PortChangeSubtype::Active => self.port_up = Some(true),
                PortChangeSubtype::Down => self.port_up = Some(false),
                _ => {}
            },
            EqeRepr::CqError { cqn, syndrome } => {
                self.cq_errors.insert(cqn, syndrome);
            }
            EqeRepr::Qp(q)
                if matches!(
                    q.event,
                    EventType::WqCatasError
                        | EventType::WqInvalReqError
                        | EventType::WqAccessError
                        | EventType::PathMigFailed
                ) =>
            {
                self.qp_errors.insert(q.qpn, q.event);
            }
            _ => {}
        }
        if self.recent.len() >= MAX_RECENT {
            self.recent.pop_front();
            self.dropped += 1;
        }
        self.recent.push_back(ev);
    }
}

/// The running thread; stopped and joined by [`EventThread::stop`].
#[derive(Debug)]
pub struct EventThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl EventThread {
    /// Starts servicing `inner`'s EQ on `irq`, sampling health every `health`.
    pub(crate) fn start(
        core: &Arc<Core>,
        irq: Arc<dyn Interrupt>,
        health: Duration,
    ) -> std::io::Result<EventThread> {
        let stop = Arc::new(AtomicBool::new(false));
        let weak: Weak<Core> = Arc::downgrade(core);
        let s = stop.clone();
        let handle = std::thread::Builder::new()
            .name(format!("mlx5-events {}", core.name))
            .spawn(move || run(&weak, &s, &*irq, health))?;
        Ok(EventThread {
            stop,
            handle: Some(handle),
        })
    }

    /// Stops the thread and waits for it (not when called from the thread itself, which
    /// then ends on its own).
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.handle.take() {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

impl Drop for EventThread {
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(weak: &Weak<Core>, stop: &AtomicBool, irq: &dyn Interrupt, health: Duration) {
    let mut last_health = Instant::now();
    while !stop.load(Ordering::Acquire) {
        irq.wait(EVENT_POLL);
        if stop.load(Ordering::Acquire) {
            break;
        }
        let Some(core) = weak.upgrade() else { break };
        core.service_events();
        if last_health.elapsed() >= health {
            last_health = Instant::now();
            core.sample_health();
        }
    }
}
