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
    pub(crate) inner: Arc<CqInner>,
}

impl CompletionQueue {
    /// Moves up to `out.len()` completions into `out` and returns how many (ibv_poll_cq).
    /// Never blocks.
    pub fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        let n = out.len().min(q.len());
        for (slot, wc) in out.iter_mut().zip(q.drain(..n)) {
            *slot = wc;
        }
        n
    }

    /// Takes one completion if there is one.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        self.inner
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Waits up to `timeout` for a completion and takes it (like ibv_get_cq_event + poll).
    pub fn wait_one(&self, timeout: Duration) -> Option<WorkCompletion> {
        let q = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
        let (mut q, _) = self
            .inner
            .ready
            .wait_timeout_while(q, timeout, |q| q.is_empty())
            .unwrap_or_else(|p| p.into_inner());
        q.pop_front()
    }

    /// Number of entries the CQ holds before overrunning.
    pub fn capacity(&self) -> usize {
        self.inner.capacity
    }

    /// `true` once a completion was dropped because the CQ was full.
    pub fn overrun(&self) -> bool {
        self.inner
            .overflowed
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}
