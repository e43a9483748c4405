//! Completion queues (IBTA vol. 1 §11.4.2, libibverbs `ibv_create_cq` / `ibv_poll_cq`).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

pub use rdmesh_core::rc::{WcOpcode, WcStatus, WorkCompletion};

#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) capacity: usize,
    queue: Mutex<VecDeque<WorkCompletion>>,
    ready: Condvar,
    overflowed: std::sync::atomic::AtomicBool,
}

impl CqInner {
    pub(crate) fn new(capacity: usize) -> CqInner {
        CqInner {
            capacity,
            queue: Mutex::new(VecDeque::with_capacity(capacity)),
            ready: Condvar::new(),
            overflowed: Default::default(),
        }
    }

    /// Adds a completion; a full CQ is an overrun (IBV_EVENT_CQ_ERR): the entry is dropped and
    /// the overrun is reported by [`CompletionQueue::overrun`].
    pub(crate) fn push(&self, wc: WorkCompletion) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= self.capacity {
            self.overflowed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            tracing::error!(
                capacity = self.capacity,
                "CQ overrun: completion dropped; create the CQ with more entries"
            );
            return;
        }
        q.push_back(wc);
        drop(q);
        self.ready.notify_all();
    }
}

/// A completion queue. Cloning yields another handle to the same CQ.
#[derive(Debug, Clone)]
pub struct CompletionQueue {
    pub(crate) kind: CqKind,
}

/// The provider's completion queue.
#[derive(Debug, Clone)]
pub(crate) enum CqKind {
    /// Soft provider: completions pushed by the engine.
    Soft(Arc<CqInner>),
    /// vfio provider: the device's CQ (read when polled) and the capacity asked for.
    Vfio(rdmesh_vfio::mlx5::Cq, usize),
}

impl CompletionQueue {
    /// The soft provider's queue (the engine pushes into it).
    pub(crate) fn soft(&self) -> Option<&Arc<CqInner>> {
        match &self.kind {
            CqKind::Soft(c) => Some(c),
            CqKind::Vfio(..) => None,
        }
    }

    fn poll_vfio(cq: &rdmesh_vfio::mlx5::Cq, max: usize) -> Vec<WorkCompletion> {
        match cq.poll(max) {
            Ok(v) => v
                .iter()
                .map(crate::vfio_provider::convert::completion)
                .collect(),
            Err(e) => {
                tracing::error!("polling CQ {:#x}: {e}", cq.cqn());
                Vec::new()
            }
        }
    }

    /// Moves up to `out.len()` completions into `out`; returns how many (ibv_poll_cq).
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let inner = match &self.kind {
            CqKind::Soft(c) => c,
            CqKind::Vfio(cq, _) => {
                let got = Self::poll_vfio(cq, out.len());
                for (slot, wc) in out.iter_mut().zip(&got) {
                    *slot = *wc;
                }
                return got.len();
            }
        };
        let mut q = inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        let n = out.len().min(q.len());
        for (slot, wc) in out.iter_mut().zip(q.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// One completion, if any.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        match &self.kind {
            CqKind::Soft(inner) => inner
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front(),
            CqKind::Vfio(cq, _) => Self::poll_vfio(cq, 1).pop(),
        }
    }

    /// Waits up to `timeout` for one completion.
    pub fn wait_one(&self, timeout: Duration) -> Option<WorkCompletion> {
        let inner = match &self.kind {
            CqKind::Soft(c) => c,
            CqKind::Vfio(..) => {
                let start = std::time::Instant::now();
                loop {
                    if let Some(wc) = self.poll_one() {
                        return Some(wc);
                    }
                    if start.elapsed() >= timeout {
                        return None;
                    }
                    std::thread::yield_now();
                }
            }
        };
        let q = inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        let (mut q, _) = inner
            .ready
            .wait_timeout_while(q, timeout, |q| q.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        q.pop_front()
    }

    /// The number of entries the CQ holds.
    pub fn capacity(&self) -> usize {
        match &self.kind {
            CqKind::Soft(c) => c.capacity,
            CqKind::Vfio(_, n) => *n,
        }
    }

    /// Whether a completion was dropped because the CQ was full (vfio provider: the device
    /// reports overruns as a CQ error event instead).
    pub fn overrun(&self) -> bool {
        match &self.kind {
            CqKind::Soft(c) => c.overflowed.load(std::sync::atomic::Ordering::Relaxed),
            CqKind::Vfio(..) => false,
        }
    }
}
