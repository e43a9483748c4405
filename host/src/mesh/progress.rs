//! The background progress threads of a mesh node: they keep every connection and relay moving
//! (frames posted and received, credits returned, frames forwarded, failed rails drained,
//! keepalives sent, closing connections flushed).
//!
//! A node has one or more **shards** (`RDMESH_PROGRESS_THREADS`), each a thread with its own
//! items. With one shard, application calls (`isend`, `irecv`, `test`) make progress on their
//! own connection too, so a polling application does not wait for the thread. With several,
//! each connection belongs to one shard whose thread does all of its work — and the soft
//! devices of the connection's rails are that shard's own (one UDP socket per shard and NIC,
//! [`crate::mesh::nic::Nic::shard`]) — while the application's calls only hand requests over
//! and read completions: the channels of a NCCL communicator use as many cores as there are
//! shards instead of NCCL's one proxy thread. A shard drives a connection's devices (receive,
//! ICRC, placement, ACKs) before it takes the connection's lock, so that those calls, which
//! need the lock, only wait for the bookkeeping part of a round (`comm::ConnShared::devices`). A shard spins while there is work, then backs off
//! to parked waits of up to 1 ms that [`Progress::wake`] cuts short.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// How long a shard (of several) keeps polling after its last work before it parks.
const SPIN: Duration = Duration::from_millis(2);

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

struct Shard {
    items: Mutex<Vec<Arc<dyn Pump>>>,
    thread: OnceLock<Thread>,
}

/// The registry of items and the threads (shards) that pump them.
pub struct Progress {
    shards: Vec<Shard>,
    stop: AtomicBool,
    next: AtomicUsize,
    /// Shard threads that have not left their loop yet.
    running: AtomicUsize,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress")
            .field("shards", &self.shards.len())
            .field("items", &self.len())
            .finish()
    }
}

impl Progress {
    /// Starts `shards` threads (at least one), named `name` and, for shard i > 0, `name` with
    /// `/i` after its first word (`rdmesh-mesh/1 0123abcd`: Linux keeps 15 bytes of a name).
    ///
    /// Errors: the OS refused a thread.
    pub fn start(name: String, shards: usize) -> std::io::Result<Arc<Progress>> {
        let p = Arc::new(Progress {
            shards: (0..shards.max(1))
                .map(|_| Shard {
                    items: Mutex::new(Vec::new()),
                    thread: OnceLock::new(),
                })
                .collect(),
            stop: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            running: AtomicUsize::new(shards.max(1)),
        });
        for i in 0..p.shards.len() {
            let t = p.clone();
            let h = std::thread::Builder::new()
                .name(match (i, name.split_once(' ')) {
                    (0, _) => name.clone(),
                    (_, Some((first, rest))) => format!("{first}/{i} {rest}"),
                    (_, None) => format!("{name}/{i}"),
                })
                .spawn(move || t.run(i))?;
            let _ = p.shards[i].thread.set(h.thread().clone());
        }
        Ok(p)
    }

    /// Number of shards.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// Whether application calls hand their work to the shards (more than one) instead of
    /// making progress themselves.
    pub fn offloads(&self) -> bool {
        self.shards.len() > 1
    }

    /// The shard for the next connection, round robin.
    pub fn next_shard(&self) -> usize {
        self.next.fetch_add(1, Ordering::Relaxed) % self.shards.len()
    }

    /// Adds an item to shard `shard` (modulo the number of shards) and wakes it.
    pub fn add_to(&self, shard: usize, item: Arc<dyn Pump>) {
        let s = &self.shards[shard % self.shards.len()];
        s.items.lock().unwrap_or_else(|p| p.into_inner()).push(item);
        self.wake(shard);
    }

    /// Wakes shard `shard`'s thread if it is parked (cheap when it is running).
    pub fn wake(&self, shard: usize) {
        if let Some(t) = self.shards[shard % self.shards.len()].thread.get() {
            t.unpark();
        }
    }

    /// Number of items, all shards.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.items.lock().unwrap_or_else(|p| p.into_inner()).len())
            .sum()
    }

    /// `true` when no item is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Shard threads still in their loop (after [`Progress::stop`]: those finishing a round).
    pub fn running(&self) -> usize {
        self.running.load(Ordering::Acquire)
    }

    /// Stops the threads (they drop their items).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for i in 0..self.shards.len() {
            self.wake(i);
        }
    }

    fn run(self: Arc<Self>, shard: usize) {
        let me = &self.shards[shard];
        let mut idle_rounds: u32 = 0;
        let mut last_busy = std::time::Instant::now();
        while !self.stop.load(Ordering::Relaxed) {
            let items: Vec<Arc<dyn Pump>> =
                me.items.lock().unwrap_or_else(|p| p.into_inner()).clone();
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
                let mut v = me.items.lock().unwrap_or_else(|p| p.into_inner());
                v.retain(|x| !finished.iter().any(|&i| Arc::ptr_eq(x, &items[i])));
            }
            drop(items);
            if busy {
                // Let the soft provider's threads (ACKs, timers) run between rounds.
                idle_rounds = 0;
                last_busy = std::time::Instant::now();
                std::thread::yield_now();
                continue;
            }
            idle_rounds = idle_rounds.saturating_add(1);
            // A shard of several keeps polling for SPIN after its last work (the next packet
            // of a pipeline is usually that close; a parked shard would add a wake-up to it).
            let spin = self.shards.len() > 1 && last_busy.elapsed() < SPIN;
            if idle_rounds < 8 || spin {
                std::thread::yield_now();
            } else {
                let us = 20u64 << (idle_rounds - 8).min(6);
                std::thread::park_timeout(Duration::from_micros(us.min(1000)));
            }
        }
        me.items.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.running.fetch_sub(1, Ordering::Release);
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
        let p = Progress::start("test-progress".into(), 1).unwrap();
        let c = Arc::new(Count(AtomicU32::new(0), 100));
        p.add_to(0, c.clone());
        let t = std::time::Instant::now();
        while !p.is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(c.0.load(Ordering::Relaxed), 100);
        p.stop();
    }

    #[test]
    fn shards_pump_their_own_items() {
        let p = Progress::start("test-shards".into(), 3).unwrap();
        assert_eq!(p.shards(), 3);
        assert!(p.offloads());
        let items: Vec<_> = (0..6)
            .map(|_| Arc::new(Count(AtomicU32::new(0), 50)))
            .collect();
        for c in &items {
            p.add_to(p.next_shard(), c.clone());
        }
        let t = std::time::Instant::now();
        while !p.is_empty() {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(items.iter().all(|c| c.0.load(Ordering::Relaxed) == 50));
        p.stop();
    }
}
