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
//! need the lock, only wait for the bookkeeping part of a round (`comm::ConnShared::devices`).
//!
//! A shard spins while there is work. With nothing to do it keeps polling for [`SPIN`] (the
//! next packet of a pipeline is usually that close), unless it shares its CPU: a `sched_yield`
//! (every round, or every [`YIELD_EVERY`] rounds of a shard of several whose yields come back
//! at once)
//! that returns only after [`CONTENDED_YIELD`] means other threads wanted the CPU, and a shard
//! that spins on then takes time from the threads with work (the peer's shards on the same
//! host among them). Then, and after the spin, a shard of several sleeps in `poll(2)` on its
//! devices' sockets and an eventfd that [`Progress::wake`] writes: a datagram for any of its
//! connections, or work an application call hands over, wakes it at once. NCCL's `test` wakes
//! nobody (the proxy calls it without pause). A shard without sockets to wait on (one shard:
//! the application's calls drive; vfio rails) parks for up to 1 ms instead, cut short by
//! [`Progress::wake`].
//!
//! A shard that gets no CPU (more busy threads than free CPUs) would stall its connections
//! while NCCL's proxy spins in `test`: after [`STARVED_TESTS`] tests that saw the shard awake
//! and without a round, `test` does the shard's round for that connection itself
//! ([`Pulse::starved`]). On a 2-CPU VM with two shards per rank, the harness's NCCL-shaped
//! stream went from 0.29 to 1.7–1.9 GB/s and its 8 KiB ping-pong from 5 ms to 16 µs
//! (docs/benchmarks.md, 2026-11-28 10:05–11:43 UTC).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::verbs::Device;

/// How long a shard (of several) keeps polling after its last work before it sleeps.
pub const SPIN: Duration = Duration::from_millis(2);
/// A `sched_yield` of an idle shard that took this long gave the CPU to another thread: the
/// shard stops spinning and sleeps until a packet or a hand-off comes.
pub const CONTENDED_YIELD: Duration = Duration::from_micros(50);
/// Rounds a busy or spinning shard of several makes between two `sched_yield`s while its
/// yields come back at once (within [`QUICK_YIELD`]: no other thread wanted its CPU). A lone
/// shard, and a shard whose last yield let another thread run, yields every round. The yield
/// lets the soft provider's threads and any other thread of the CPU run, but it is a system
/// call, and a datagram or a hand-off that comes during it waits for it: on the 16-CPU host
/// the shards' rounds were one `recvmsg` and one `sched_yield` each (36 and 37 per 8 KiB
/// message), while on a 2-CPU VM with two shards per rank the yield of every round is what
/// lets the other busy threads run (the harness's stream lost 15–22 % without it).
pub const YIELD_EVERY: u32 = 16;
/// A `sched_yield` that returns within this long ran no other thread (see [`YIELD_EVERY`]).
pub const QUICK_YIELD: Duration = Duration::from_micros(5);

/// `test` calls in a row that may find a shard's thread awake without a round made before the
/// calling thread does the shard's work itself ([`Pulse::starved`]).
pub const STARVED_TESTS: u32 = 256;

/// What application threads can see of a shard's thread: the rounds it made and whether it
/// sleeps in `poll(2)`.
#[derive(Debug, Default)]
pub struct Pulse {
    /// Rounds begun and items pumped: it moves while the thread runs.
    rounds: AtomicU64,
    /// The shard is (about to be) asleep in `poll(2)`.
    sleeping: AtomicBool,
}

/// An application thread's view of a [`Pulse`]: the round count it last saw and the calls
/// that saw it unchanged.
#[derive(Debug, Default)]
pub struct PulseSeen {
    rounds: AtomicU64,
    calls: std::sync::atomic::AtomicU32,
}

impl Pulse {
    /// Called on every `test` of a connection the shard drives: `true` once [`STARVED_TESTS`]
    /// calls in a row found the shard's thread awake (not asleep in `poll(2)`, where it holds
    /// its devices' receive) without a round made since, and on every call after that until
    /// it makes one. The caller then does the shard's work for that connection itself. A
    /// polling thread that never pauses (NCCL's proxy) otherwise holds, on a host with fewer
    /// free CPUs than busy threads, the CPU time of the very shard whose work it waits for (a
    /// 2-CPU VM, two shards per rank: the polling threads took 80–90 % of a CPU each, the
    /// shards 5–10 %).
    pub fn starved(&self, seen: &PulseSeen) -> bool {
        let r = self.rounds.load(Ordering::Relaxed);
        if r != seen.rounds.load(Ordering::Relaxed) {
            seen.rounds.store(r, Ordering::Relaxed);
            seen.calls.store(0, Ordering::Relaxed);
            return false;
        }
        // Asleep in poll(2), it holds its devices' receive: nothing to do here.
        if self.sleeping.load(Ordering::Relaxed) {
            return false;
        }
        seen.calls.fetch_add(1, Ordering::Relaxed) + 1 >= STARVED_TESTS
    }
}

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

    /// The devices whose sockets bring this item's work: a shard with nothing to do sleeps
    /// until one of them is readable (or [`Progress::wake`]). None by default: the shard then
    /// parks for up to 1 ms at a time.
    fn devices(&self) -> &[Device] {
        &[]
    }
}

struct Shard {
    items: Mutex<Vec<Arc<dyn Pump>>>,
    thread: OnceLock<Thread>,
    /// Written by [`Progress::wake`] while the shard sleeps in `poll(2)` (`None`: the OS gave
    /// no eventfd; the shard then parks instead of sleeping on its sockets).
    wake_fd: Option<OwnedFd>,
    pulse: Arc<Pulse>,
    /// [`Progress::wake`] calls so far: a shard about to sleep that sees this move since its
    /// round began was handed work that round may have missed.
    wakes: AtomicU64,
}

/// The registry of items and the threads (shards) that pump them.
pub struct Progress {
    shards: Vec<Shard>,
    stop: AtomicBool,
    next: AtomicUsize,
    /// Shard threads that have not left their loop yet.
    running: AtomicUsize,
    /// Test hook: every shard stops pumping, awake (a shard that gets no CPU).
    #[cfg(test)]
    frozen: AtomicBool,
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
                    wake_fd: rustix::event::eventfd(
                        0,
                        rustix::event::EventfdFlags::CLOEXEC
                            | rustix::event::EventfdFlags::NONBLOCK,
                    )
                    .ok(),
                    pulse: Arc::default(),
                    wakes: AtomicU64::new(0),
                })
                .collect(),
            stop: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            running: AtomicUsize::new(shards.max(1)),
            #[cfg(test)]
            frozen: AtomicBool::new(false),
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

    /// What application threads can see of shard `shard`'s thread (modulo the number of
    /// shards).
    pub fn pulse(&self, shard: usize) -> Arc<Pulse> {
        self.shards[shard % self.shards.len()].pulse.clone()
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

    /// Tells shard `shard` that it has work: wakes its thread if it is parked or asleep in
    /// `poll(2)` (an eventfd write then), and keeps it from going to sleep if it is about to
    /// (cheap when it is running: two atomic operations and an unpark).
    pub fn wake(&self, shard: usize) {
        let s = &self.shards[shard % self.shards.len()];
        s.wakes.fetch_add(1, Ordering::SeqCst);
        if let Some(t) = s.thread.get() {
            t.unpark();
        }
        if s.pulse.sleeping.load(Ordering::SeqCst) {
            if let Some(fd) = &s.wake_fd {
                let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
            }
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

    /// Test hook: freezes (`true`) or thaws every shard: a frozen shard makes no round and
    /// does not sleep, as a thread that gets no CPU.
    #[cfg(test)]
    pub(crate) fn freeze(&self, on: bool) {
        self.frozen.store(on, Ordering::SeqCst);
    }

    /// Rounds begun and items pumped so far, all shards.
    #[cfg(test)]
    pub(crate) fn rounds(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.pulse.rounds.load(Ordering::Relaxed))
            .sum()
    }

    /// Shards asleep in `poll(2)` now.
    #[cfg(test)]
    pub(crate) fn asleep(&self) -> usize {
        self.shards
            .iter()
            .filter(|s| s.pulse.sleeping.load(Ordering::SeqCst))
            .count()
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
        let several = self.shards.len() > 1;
        let mut idle_rounds: u32 = 0;
        let mut last_busy = Instant::now();
        let mut contended = false;
        let mut yields = YieldPacer::new(several);
        // Yields when one is due; returns how long it took, if it yielded.
        let mut yield_if_due = || {
            if !yields.due() {
                return None;
            }
            let t = Instant::now();
            std::thread::yield_now();
            let took = t.elapsed();
            yields.yielded(took);
            Some(took)
        };
        // This round's items, copied out of the shared list (whose lock `Progress::add_to`
        // takes); the copy keeps its capacity from round to round.
        let mut items: Vec<Arc<dyn Pump>> = Vec::new();
        while !self.stop.load(Ordering::Relaxed) {
            #[cfg(test)]
            if self.frozen.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_micros(100));
                continue;
            }
            let epoch = me.wakes.load(Ordering::SeqCst);
            me.pulse.rounds.fetch_add(1, Ordering::Relaxed);
            items.clear();
            items.extend(
                me.items
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .cloned(),
            );
            let bursts = rx_bursts(&items);
            let mut busy = false;
            let mut finished = Vec::new();
            for (i, it) in items.iter().enumerate() {
                // Counted per item: a long round over many connections is no starved shard.
                me.pulse.rounds.fetch_add(1, Ordering::Relaxed);
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
            if busy {
                // Let the soft provider's threads (ACKs, timers) run between rounds.
                idle_rounds = 0;
                last_busy = Instant::now();
                contended = false;
                yield_if_due();
                continue;
            }
            idle_rounds = idle_rounds.saturating_add(1);
            // A shard of several keeps polling for SPIN after its last work (the next packet
            // of a pipeline is usually that close; a sleeping shard would add a wake-up to
            // it) while it has a CPU to itself.
            let spin = several && !contended && last_busy.elapsed() < SPIN;
            if idle_rounds < 8 || spin {
                if yield_if_due().is_some_and(|took| several && took >= CONTENDED_YIELD) {
                    contended = true;
                }
                continue;
            }
            let us = (20u64 << (idle_rounds - 8).min(6)).min(1000);
            let timeout = Duration::from_micros(us);
            match me.sleep_on_sockets(several, &items, (epoch, bursts), timeout) {
                Sleep::Slept => {}
                Sleep::Again => std::thread::yield_now(),
                Sleep::Unavailable => std::thread::park_timeout(timeout),
            }
        }
        me.items.lock().unwrap_or_else(|p| p.into_inner()).clear();
        self.running.fetch_sub(1, Ordering::Release);
    }
}

/// When a shard's round ends with a `sched_yield` ([`YIELD_EVERY`], [`QUICK_YIELD`]).
#[derive(Debug)]
struct YieldPacer {
    /// The node has several shards (a lone one shares the application's CPUs: every round).
    several: bool,
    /// Rounds since the last yield.
    since: u32,
    /// The last yield came back within [`QUICK_YIELD`].
    quick: bool,
}

impl YieldPacer {
    fn new(several: bool) -> YieldPacer {
        YieldPacer {
            several,
            since: 0,
            quick: false,
        }
    }

    /// Called once per round: whether this one yields.
    fn due(&mut self) -> bool {
        self.since += 1;
        if self.several && self.quick && self.since < YIELD_EVERY {
            return false;
        }
        self.since = 0;
        true
    }

    /// The yield [`due`](Self::due) asked for took `took`.
    fn yielded(&mut self, took: Duration) {
        self.quick = took < QUICK_YIELD;
    }
}

/// What [`Shard::sleep_on_sockets`] did.
enum Sleep {
    /// Slept until a datagram, a wake or the timeout.
    Slept,
    /// Did not sleep: work came, or may have, since the round began (a wake, a receive by
    /// another thread): the shard makes another round at once.
    Again,
    /// Did not sleep: nothing to wait on (one shard, no eventfd, no device, or a device
    /// without a socket to wait on).
    Unavailable,
}

/// The receive bursts of `items`' devices so far (a sum, a device counted once per item that
/// has it: it moves when any of them does).
fn rx_bursts(items: &[Arc<dyn Pump>]) -> u64 {
    items
        .iter()
        .flat_map(|it| it.devices())
        .fold(0u64, |n, d| n.wrapping_add(d.rx_bursts()))
}

impl Shard {
    /// Sleeps up to `timeout` in `poll(2)` on the sockets of `items`' devices and the wake-up
    /// eventfd, holding each device's receive meanwhile ([`Device::socket_wait`]); every
    /// device must be [`Device::waitable`]. `seen`:
    /// [`Shard::wakes`] and [`rx_bursts`] when the round that found nothing began. The sleep
    /// does not start when either moved since: a hand-off whose wake missed the sleeping
    /// flag, or completions that another thread's receive (the device's progress thread
    /// running its timers) pushed after this round polled the CQs; nor when another thread
    /// holds a receive now. Only a shard of `several` sleeps this way.
    fn sleep_on_sockets(
        &self,
        several: bool,
        items: &[Arc<dyn Pump>],
        seen: (u64, u64),
        timeout: Duration,
    ) -> Sleep {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let Some(wake_fd) = self.wake_fd.as_ref().filter(|_| several) else {
            return Sleep::Unavailable;
        };
        let devices = Device::distinct(items.iter().flat_map(|it| it.devices()));
        // A device whose work comes without a socket (vfio) could complete work while the
        // shard sleeps on the others: park, as with no socket at all.
        if devices.is_empty() || !devices.iter().all(|d| d.waitable()) {
            return Sleep::Unavailable;
        }
        let mut waits = Vec::with_capacity(devices.len());
        for d in devices {
            match d.socket_wait() {
                Some(w) => waits.push(w),
                None => return Sleep::Again,
            }
        }
        if rx_bursts(items) != seen.1 {
            return Sleep::Again;
        }
        self.pulse.sleeping.store(true, Ordering::SeqCst);
        // A wake counts before it looks at the flag: one that came after the round began and
        // did not see the flag shows in the count.
        if self.wakes.load(Ordering::SeqCst) != seen.0 {
            self.pulse.sleeping.store(false, Ordering::SeqCst);
            return Sleep::Again;
        }
        let sockets: Vec<_> = waits.iter().map(|w| w.fd()).collect();
        let mut fds: Vec<PollFd<'_>> = sockets
            .iter()
            .map(|fd| PollFd::new(fd, PollFlags::IN))
            .collect();
        fds.push(PollFd::new(wake_fd, PollFlags::IN));
        let ts = Timespec {
            tv_sec: timeout.as_secs() as _,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let woken = matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
            && fds.last().is_some_and(|f| !f.revents().is_empty());
        if woken {
            let _ = rustix::io::read(wake_fd.as_fd(), &mut [0u8; 8]);
        }
        self.pulse.sleeping.store(false, Ordering::SeqCst);
        Sleep::Slept
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
    fn a_shard_of_several_yields_every_round_until_its_yields_come_back_at_once() {
        // Rounds in 64 that yield, each yield taking `took`.
        let yields_in_64 = |several: bool, took: Duration| {
            let mut p = YieldPacer::new(several);
            (0..64)
                .filter(|_| {
                    let due = p.due();
                    if due {
                        p.yielded(took);
                    }
                    due
                })
                .count()
        };
        let quick = Duration::from_nanos(500);
        let slow = QUICK_YIELD * 4;
        // Quick yields: the first round yields (nothing known yet), then every YIELD_EVERY-th.
        assert_eq!(yields_in_64(true, quick), 1 + (63 / YIELD_EVERY as usize));
        // A yield that ran another thread: every round, as a lone shard always does.
        assert_eq!(yields_in_64(true, slow), 64);
        assert_eq!(yields_in_64(false, quick), 64);
        // One slow yield among quick ones brings the next round's yield back at once.
        let mut p = YieldPacer::new(true);
        assert!(p.due());
        p.yielded(quick);
        assert!(!p.due());
        let mut p = YieldPacer::new(true);
        assert!(p.due());
        p.yielded(slow);
        assert!(p.due());
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
    fn a_shard_is_starved_after_enough_tests_without_a_round_while_awake() {
        let pulse = Pulse::default();
        let seen = PulseSeen::default();
        for _ in 1..STARVED_TESTS {
            assert!(!pulse.starved(&seen));
        }
        assert!(
            pulse.starved(&seen),
            "{STARVED_TESTS} calls without a round"
        );
        assert!(pulse.starved(&seen), "still none");
        // a round: not starved, and the count starts again
        pulse.rounds.fetch_add(1, Ordering::Relaxed);
        assert!(!pulse.starved(&seen));
        pulse.sleeping.store(true, Ordering::Relaxed);
        for _ in 0..2 * STARVED_TESTS {
            assert!(
                !pulse.starved(&seen),
                "asleep in poll(2): waiting, not starved"
            );
        }
        pulse.sleeping.store(false, Ordering::Relaxed);
        for _ in 1..STARVED_TESTS {
            assert!(!pulse.starved(&seen));
        }
        assert!(pulse.starved(&seen), "awake again, and still no round");
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
