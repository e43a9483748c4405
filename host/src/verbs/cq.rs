//! Completion queues (IBTA vol. 1 §11.4.2, libibverbs `ibv_create_cq` / `ibv_poll_cq`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::soft::SoftDevice;

pub use rdmesh_core::rc::{WcOpcode, WcStatus, WorkCompletion};

/// The longest one blocking wait on the device's socket lasts before the CQ is looked at again.
const WAIT_SLICE: Duration = Duration::from_millis(1);

#[derive(Debug)]
pub(crate) struct CqInner {
    pub(crate) capacity: usize,
    queue: Mutex<VecDeque<WorkCompletion>>,
    /// The number of entries in `queue`, stored under its lock at every change: a poll of
    /// an empty CQ reads this and takes no lock (a lock and an unlock are two locked
    /// instructions, 4-10 ns each; an application's busy poll finds the CQ empty mostly).
    /// A push not yet finished reads as not there yet, as on a device whose CQE is not yet
    /// written.
    queued: AtomicUsize,
    ready: Condvar,
    /// Threads waiting on `ready` (a push wakes nobody, with no syscall, when there are none).
    waiters: AtomicU32,
    overflowed: std::sync::atomic::AtomicBool,
    /// The device whose QPs complete here: polling an empty CQ drives its progress on the
    /// caller's thread (`SoftDevice::progress`).
    device: Weak<SoftDevice>,
}

impl CqInner {
    pub(crate) fn new(capacity: usize, device: Weak<SoftDevice>) -> CqInner {
        CqInner {
            capacity,
            queue: Mutex::new(VecDeque::with_capacity(capacity)),
            queued: AtomicUsize::new(0),
            ready: Condvar::new(),
            waiters: AtomicU32::new(0),
            overflowed: Default::default(),
            device,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<WorkCompletion>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the queue is empty, read without its lock (`queued`).
    fn is_empty(&self) -> bool {
        self.queued.load(Ordering::Acquire) == 0
    }

    /// Takes the oldest completion off `q` (this CQ's queue, locked) and updates `queued`.
    fn pop_locked(&self, q: &mut VecDeque<WorkCompletion>) -> Option<WorkCompletion> {
        let wc = q.pop_front();
        self.queued.store(q.len(), Ordering::Release);
        wc
    }

    /// The oldest completion, if any; no lock when the queue is empty.
    fn pop(&self) -> Option<WorkCompletion> {
        if self.is_empty() {
            return None;
        }
        self.pop_locked(&mut self.lock())
    }

    /// Drives the device on this thread: receives what is queued, or with `wait` blocks up to
    /// that long for a packet. Returns the packets processed.
    fn drive(&self, wait: Option<Duration>) -> usize {
        self.device.upgrade().map_or(0, |d| d.progress(wait))
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
        self.queued.store(q.len(), Ordering::Release);
        drop(q);
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.ready.notify_all();
        }
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
        if inner.is_empty() {
            inner.drive(None);
            if inner.is_empty() {
                return 0;
            }
        }
        let mut q = inner.lock();
        let n = out.len().min(q.len());
        for (slot, wc) in out.iter_mut().zip(q.drain(..n)) {
            *slot = wc;
        }
        inner.queued.store(q.len(), Ordering::Release);
        n
    }

    /// One completion, if any. An empty soft CQ first drives its device's progress on this
    /// thread (receive and timers), as `ibv_poll_cq` does for a software provider.
    pub fn poll_one(&self) -> Option<WorkCompletion> {
        match &self.kind {
            CqKind::Soft(inner) => {
                if let Some(wc) = inner.pop() {
                    return Some(wc);
                }
                inner.drive(None);
                inner.pop()
            }
            CqKind::Vfio(cq, _) => Self::poll_vfio(cq, 1).pop(),
        }
    }

    /// One completion already in the queue, if any, without driving the device (a thread that
    /// drives it itself, such as one waiting on memory with
    /// [`Device::progress`](crate::verbs::Device::progress), looks for errors with this).
    pub fn poll_ready(&self) -> Option<WorkCompletion> {
        match &self.kind {
            CqKind::Soft(inner) => inner.pop(),
            CqKind::Vfio(cq, _) => Self::poll_vfio(cq, 1).pop(),
        }
    }

    /// Waits up to `timeout` for one completion. Soft provider: drives the device on this
    /// thread, blocking in one receive on its socket while no packet is queued.
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
        // Block on the device's socket (woken by the packet itself, no thread hand-off); when
        // another thread is receiving, wait for it to push.
        // The clock is read once per pass that finds the queue empty (a read costs tens of ns
        // in a VM; a ping-pong waits once per message).
        let mut start: Option<Instant> = None;
        loop {
            if let Some(wc) = inner.pop() {
                return Some(wc);
            }
            let left = match start {
                Some(s) => timeout.saturating_sub(s.elapsed()),
                None => {
                    start = Some(Instant::now());
                    timeout
                }
            };
            if left.is_zero() {
                return None;
            }
            if inner.drive(Some(left.min(WAIT_SLICE))) > 0 {
                continue;
            }
            inner.waiters.fetch_add(1, Ordering::SeqCst);
            let q = inner.lock();
            let (mut q, _) = inner
                .ready
                .wait_timeout_while(q, left.min(Duration::from_micros(50)), |q| q.is_empty())
                .unwrap_or_else(|p| p.into_inner());
            inner.waiters.fetch_sub(1, Ordering::SeqCst);
            if let Some(wc) = inner.pop_locked(&mut q) {
                return Some(wc);
            }
        }
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

#[cfg(test)]
mod test {
    use super::*;

    fn wc(wr_id: u64) -> WorkCompletion {
        WorkCompletion {
            wr_id,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 8,
            imm_data: None,
            qp_num: 0x11,
        }
    }

    /// The count read without the lock follows every push and every way of taking entries
    /// out, so a poll never misses a completion and an empty poll takes no lock.
    #[test]
    fn the_lock_free_count_follows_every_push_and_poll() {
        let inner = Arc::new(CqInner::new(8, Weak::new()));
        let cq = CompletionQueue {
            kind: CqKind::Soft(inner.clone()),
        };
        assert!(inner.is_empty());
        assert_eq!(cq.poll_ready(), None);
        for i in 0..5 {
            inner.push(wc(i));
        }
        assert_eq!(inner.queued.load(Ordering::Relaxed), 5);
        assert_eq!(cq.poll_ready().map(|w| w.wr_id), Some(0));
        assert_eq!(cq.poll_one().map(|w| w.wr_id), Some(1));
        let mut out = [wc(99); 2];
        assert_eq!(cq.poll(&mut out), 2);
        assert_eq!([out[0].wr_id, out[1].wr_id], [2, 3]);
        assert_eq!(inner.queued.load(Ordering::Relaxed), 1);
        assert_eq!(
            cq.wait_one(Duration::from_millis(1)).map(|w| w.wr_id),
            Some(4)
        );
        assert!(inner.is_empty());
        assert_eq!(cq.poll(&mut out), 0);
        assert_eq!(cq.poll_one(), None);
        // An overrun drops the entry and leaves the count at the capacity.
        for i in 0..9 {
            inner.push(wc(i));
        }
        assert!(cq.overrun());
        assert_eq!(inner.queued.load(Ordering::Relaxed), 8);
        // Another thread's push is seen by a poll that follows it.
        let pusher = inner.clone();
        let mut drained = [wc(0); 8];
        assert_eq!(cq.poll(&mut drained), 8);
        std::thread::spawn(move || pusher.push(wc(42)))
            .join()
            .unwrap();
        assert_eq!(cq.poll_ready().map(|w| w.wr_id), Some(42));
    }
}
