//! The background progress thread of a mesh node: it keeps every connection and relay moving
//! when the application is not calling in (credits returned, frames forwarded, failed rails
//! drained, keepalives sent, closing connections flushed).
//!
//! Application calls (`isend`, `irecv`, `test`) make progress on their own connection too, so
//! a polling application does not wait for this thread. The thread spins while there is work,
//! then backs off to sleeps of up to 1 ms when there is none.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What one pump of an item found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PumpState {
    /// It did something.
    Busy,
    /// Nothing to do.
    Idle,
    /// It is done; drop it.
    Finished,
}

/// Something the progress thread drives.
pub trait Pump: Send + Sync {
    /// Makes what progress is possible without blocking.
    fn pump(&self) -> PumpState;
}

/// The registry of items and the thread that pumps them.
pub struct Progress {
    items: Mutex<Vec<Arc<dyn Pump>>>,
    stop: AtomicBool,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("items", &self.items.lock().map(|v| v.len()).unwrap_or(0))
            .finish()
    }
}

impl Progress {
    /// Starts the thread (named `name`).
    ///
    /// Errors: the OS refused a thread.
    pub fn start(name: String) -> std::io::Result<Arc<Progress>> {
        let p = Arc::new(Progress {
            items: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let t = p.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || t.run())?;
        Ok(p)
    }

    /// Adds an item.
    pub fn add(&self, item: Arc<dyn Pump>) {
        self.items
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(item);
    }

    /// Number of items.
    pub fn len(&self) -> usize {
        self.items.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// `true` when no item is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stops the thread (it drops its items).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    fn run(self: Arc<Self>) {
        let mut idle_rounds: u32 = 0;
        while !self.stop.load(Ordering::Relaxed) {
            let items: Vec<Arc<dyn Pump>> =
                self.items.lock().unwrap_or_else(|p| p.into_inner()).clone();
            let mut busy = false;
            let mut finished = Vec::new();
            for (i, it) in items.iter().enumerate() {
                match it.pump() {
                    PumpState::Busy => busy = true,
                    PumpState::Idle => {}
                    PumpState::Finished => finished.push(i),
                }
            }
            if !finished.is_empty() {
                let mut v = self.items.lock().unwrap_or_else(|p| p.into_inner());
                v.retain(|x| !finished.iter().any(|&i| Arc::ptr_eq(x, &items[i])));
            }
            drop(items);
            if busy {
                // Let the soft provider's threads (ACKs, timers) run between rounds.
                idle_rounds = 0;
                std::thread::yield_now();
                continue;
            }
            idle_rounds = idle_rounds.saturating_add(1);
            if idle_rounds < 8 {
                std::thread::yield_now();
            } else {
                let us = 20u64 << (idle_rounds - 8).min(6);
                std::thread::sleep(Duration::from_micros(us.min(1000)));
            }
        }
        self.items.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod test {
    use super::*;
    use std::sync::atomic::AtomicU32;

    struct Count(AtomicU32, u32);

    impl Pump for Count {
        fn pump(&self) -> PumpState {
            let n = self.0.fetch_add(1, Ordering::Relaxed) + 1;
            if n >= self.1 {
                PumpState::Finished
            } else {
                PumpState::Busy
            }
        }
    }

    #[test]
    fn pumps_until_finished_then_drops() {
        let p = Progress::start("test-progress".into()).unwrap();
        let c = Arc::new(Count(AtomicU32::new(0), 100));
        p.add(c.clone());
        let t = std::time::Instant::now();
        while !p.is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(c.0.load(Ordering::Relaxed), 100);
        p.stop();
    }
}
