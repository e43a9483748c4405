//! Connections of the mesh transport, as NCCL's net API sees them: a [`SendComm`] (what
//! `connect` returns) and a [`RecvComm`] (what `accept` returns), one direction each, with
//! non-blocking `isend`/`irecv` that return a request (or "not now") and requests that are
//! polled with `test`.
//!
//! A connection is the rails of its first hop ([`RailSet`]) and the tagged-messaging state
//! ([`Tagged`]). With one progress thread it makes progress whenever the application calls in,
//! and on that thread otherwise; with several ([`crate::mesh::progress`]) all of its work runs
//! on its shard's thread, and `isend`/`irecv`/`test` only hand requests over, wake the shard
//! and read completions (a `test` that finds the shard at work answers "not yet" at once) —
//! except that the frames of a small `isend` (at most `MeshConfig::inline_bytes`) and of an
//! `irecv`'s CTS are posted by the calling thread itself, so they leave without waiting for the
//! shard's next round (its completions stay the shard's).
//! Dropping a comm sends CLOSE to the peer (the progress thread flushes it for up to 2 s).
//!
//! An `irecv`'s CTS waits for the calling thread's next call into the transport (any
//! connection's `isend`, `irecv` or `test`; a send posts its own frames first), at most
//! [`CTS_HOLD`], instead of leaving inside the `irecv`: an application that answers a
//! receive with a send (a ping-pong; NCCL's proxy, which posts receives ahead and tests them
//! on its next pass) has that send leave first, and the peer takes the CTS in while it waits
//! for the data (docs/benchmarks.md, 2026-12-03 06:20–07:00 UTC). With one progress thread
//! an `isend` also posts its frames before the round's receive, which usually finds nothing.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError, Weak};
use std::time::{Duration, Instant};

use crate::mesh::buffer::Buffer;
use crate::mesh::error::{MeshError, Result};
use crate::mesh::frame::{text_frame, FrameKind, RailKeys, MAX_PLACE_RAILS, MAX_RECVS};
use crate::mesh::progress::{Progress, Pulse, PulseSeen, Pump, PumpState};
use crate::mesh::rail::FrameBody;
use crate::mesh::railset::{Consumed, RailSet, NO_TOKEN};
use crate::mesh::tagged::{Eager, Placement, PlacementStats, RecvBuf, RecvSizes, Tagged};
use crate::verbs::{AccessFlags, LentMemory, MemoryRegion, ProtectionDomain, Recovery};

/// How long a closing connection may take to flush its CLOSE frame.
const CLOSE_FLUSH: Duration = Duration::from_secs(2);

/// Longest an `irecv`'s CTS waits for its thread's next call (module docs); after it the
/// connection's next round sends it (a shard's, or with one shard the progress thread's,
/// which comes within 1 ms).
pub const CTS_HOLD: Duration = Duration::from_micros(50);

thread_local! {
    /// Connections whose CTS frames wait for this thread's next call (module docs).
    static HELD: std::cell::RefCell<std::collections::VecDeque<Weak<ConnShared>>> =
        const { std::cell::RefCell::new(std::collections::VecDeque::new()) };
}

/// Nanoseconds since the first call (the clock of [`ConnShared::cts_held`]).
fn now_ns() -> u64 {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// Sends the CTS frames this thread's `irecv`s hold (module docs).
fn release_held() {
    // One at a time, oldest first, the list not borrowed while a CTS goes (it keeps its
    // capacity: no allocation per receive).
    while let Some(conn) = HELD.with(|h| h.borrow_mut().pop_front()) {
        if let Some(conn) = conn.upgrade() {
            conn.release_cts();
        }
    }
}

/// One link of a connection's first hop.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RouteLink {
    /// Local netdev.
    pub netdev: String,
    /// Local address.
    pub local: IpAddr,
    /// The next hop's address.
    pub remote: IpAddr,
    /// The rail's weight, Gb/s.
    pub gbps: f64,
    /// The loss recovery both ends of the rail agreed on in the handshake (JSON:
    /// `"go-back-n"` or `"selective"`).
    #[serde(serialize_with = "recovery_name")]
    pub recovery: Recovery,
    /// The rail's path MTU, bytes: the route's toward the next hop, capped at IBTA's 4096 and
    /// by the other end.
    pub path_mtu: u32,
}

fn recovery_name<S: serde::Serializer>(r: &Recovery, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(match r {
        Recovery::GoBackN => "go-back-n",
        Recovery::Selective => "selective",
    })
}

/// Where a connection goes: the peer, the relays in between, and the rails of the first hop.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Route {
    /// The peer node id (hex).
    pub peer: String,
    /// Relay node ids (hex), in order; empty for a direct connection.
    pub via: Vec<String>,
    /// The rails of the first hop.
    pub links: Vec<RouteLink>,
}

impl fmt::Display for Route {
    /// `direct over 2 rails: veth0 10.0.0.1 -> 10.0.0.2 (30 Gb/s), …` or
    /// `via relay 0123… over 1 rail: …`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.via.is_empty() {
            write!(f, "direct")?;
        } else {
            write!(f, "via relay {}", self.via.join(" -> "))?;
        }
        write!(
            f,
            " over {} rail{}: ",
            self.links.len(),
            if self.links.len() == 1 { "" } else { "s" }
        )?;
        for (i, l) in self.links.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(
                f,
                "{} {} -> {} ({} Gb/s{})",
                l.netdev,
                l.local,
                l.remote,
                l.gbps,
                if l.recovery == Recovery::Selective {
                    ", selective repeat"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

pub(crate) struct Conn {
    rails: RailSet,
    tagged: Tagged,
    closing: Option<Instant>,
    keepalive: Duration,
    /// Rails up when the striping weights were last handed to `tagged` (rails only go down, so
    /// a change of the count is a change of the set); `usize::MAX` before the first time.
    live_seen: usize,
    /// Progress rounds so far (what paces the keepalive check).
    rounds: u32,
}

impl Conn {
    /// Hands the rails that work now and their weights to `tagged` when they changed (not on
    /// every progress round: that would allocate twice per poll).
    fn update_live_rails(&mut self) {
        let up = self.rails.rails().iter().filter(|r| r.is_up()).count();
        if up == self.live_seen {
            return;
        }
        self.live_seen = up;
        let live = self
            .rails
            .live()
            .into_iter()
            .map(|i| (i, self.rails.rails()[i].gbps()))
            .collect();
        self.tagged.set_live_rails(live);
    }

    fn flush_outbox(&mut self) -> bool {
        let out = self.tagged.take_outbox();
        let any = out.len() > 0;
        for (rail, token, body) in out {
            self.rails.push(rail, token, body);
        }
        any
    }

    /// One round of progress; returns whether anything happened. With `hold_outbox` (a CTS
    /// held for its thread's next call, [`ConnShared::holding_cts`]) the outbox stays unsent.
    fn progress(&mut self, hold_outbox: bool) -> bool {
        let mut any = self.rails.pump();
        for t in self.rails.take_done() {
            self.tagged.on_sent(t);
        }
        self.update_live_rails();
        let tagged = &mut self.tagged;
        any |= self.rails.poll_frames(|_, bytes| {
            tagged.on_frame(bytes);
            Consumed::Yes
        });
        if let Some(e) = self.rails.failure() {
            self.tagged.fail(e);
        }
        if !hold_outbox && self.flush_outbox() {
            // Post what the round produced (a CTS, a send's chunks) without polling the rails
            // again: they were polled at the top of this round, and each poll of a soft rail
            // that finds its CQ empty is a `recvmsg` — about 1 µs before every small send on
            // the 2-core VM (docs/benchmarks.md, 2026-11-26 19:40 UTC). The next round takes
            // the completions.
            any = true;
            self.rails.post_now();
        }
        // The keepalive's idle bound is milliseconds: look at the clock every 64th round.
        self.rounds = self.rounds.wrapping_add(1);
        if self.rounds % 64 == 0 && (self.tagged.waiting() || self.rails.has_queued()) {
            self.rails.keepalive(self.keepalive);
        }
        any
    }
}

/// Who drives a connection: its progress shard, and whether application calls leave the work
/// to it.
pub(crate) struct Driver {
    progress: Weak<Progress>,
    shard: usize,
    offload: bool,
    pulse: Arc<Pulse>,
    seen: PulseSeen,
}

impl Driver {
    /// Shard `shard` of `progress`.
    pub(crate) fn new(progress: &Arc<Progress>, shard: usize) -> Driver {
        Driver {
            progress: Arc::downgrade(progress),
            shard,
            offload: progress.offloads(),
            pulse: progress.pulse(shard),
            seen: PulseSeen::default(),
        }
    }

    fn wake(&self) {
        if let Some(p) = self.progress.upgrade() {
            p.wake(self.shard);
        }
    }
}

/// The shared state of one connection end.
pub(crate) struct ConnShared {
    core: Mutex<Conn>,
    route: Route,
    driver: Driver,
    /// Sends of at most this many bytes, and CTS frames when it is not 0, are posted by the
    /// application's thread with several shards (`MeshConfig::inline_bytes`).
    inline_bytes: usize,
    /// With several shards: the rails' devices, which the shard drives (receives, checks,
    /// places, acknowledges, and sends what the ACKs release) before it takes the connection,
    /// so that NCCL's `isend`/`irecv` (which wait for the connection) and `test` (which
    /// reports "not yet" while the shard holds it) meet only the short bookkeeping part of a
    /// round. Empty with one shard: polling the rails drives them.
    devices: Vec<crate::verbs::Device>,
    /// A shard round drove the devices but found the connection taken: completions may wait
    /// in the rails' CQs for the next round that gets it.
    behind: AtomicBool,
    /// An application call queued frames on the rails (a send's chunks, a CTS) for the shard:
    /// its next round posts them before it drives the devices.
    handed: AtomicBool,
    /// When (ns, [`now_ns`]) an `irecv` began holding the CTS frames it queued for its
    /// thread's next call (module docs); 0: none held. An atomic, so that the release takes
    /// no lock with several shards (the shard that holds the connection sends them).
    cts_held: AtomicU64,
}

impl ConnShared {
    /// A connection end over `rails` with `config`'s settings and the eager sends agreed in
    /// the handshake.
    pub(crate) fn new(
        mut rails: RailSet,
        route: Route,
        peer_label: String,
        config: &crate::mesh::MeshConfig,
        eager: Eager,
        driver: Driver,
    ) -> Arc<ConnShared> {
        let (max_requests, stripe_min, keepalive) =
            (config.max_requests, config.stripe_min, config.keepalive);
        // Placement needs the receiver's rails to be the sender's: a direct connection.
        let placed_rails = if config.placement && route.via.is_empty() {
            rails.rails().len()
        } else {
            0
        };
        let tagged = Tagged::new(peer_label, max_requests, stripe_min)
            .with_eager(eager)
            .with_placement(placed_rails, config.placed_chunk);
        let devices = if driver.offload {
            rails.drive_outside()
        } else {
            Vec::new()
        };
        Arc::new(ConnShared {
            core: Mutex::new(Conn {
                rails,
                tagged,
                closing: None,
                keepalive,
                live_seen: usize::MAX,
                rounds: 0,
            }),
            route,
            driver,
            inline_bytes: config.inline_bytes,
            devices,
            behind: AtomicBool::new(false),
            handed: AtomicBool::new(false),
            cts_held: AtomicU64::new(0),
        })
    }

    /// After an application call changed the connection: make progress here (one shard), or
    /// wake the shard that owns it (several). Measured on NCCL (docs/benchmarks.md): letting
    /// the application's thread also make progress when the connection is free serializes the
    /// channels on NCCL's proxy thread again and halves the large-message bandwidth. With
    /// `post` (a small send, a CTS) the calling thread also posts this call's frames as far as
    /// credits allow — no receive, no completion, no other message's chunks: they leave without
    /// waiting for the shard's next round, which still gets the completions. When older frames
    /// still wait in the rails' queues (credits ran out, a large message is going out), the new
    /// ones queue behind them for the shard, as before.
    fn advance(&self, c: &mut Conn, post: bool) {
        if self.driver.offload {
            let post = post && !c.rails.has_queued();
            c.flush_outbox();
            if post {
                c.rails.post_now();
            }
            if c.rails.has_queued() {
                self.handed.store(true, Ordering::Release);
            }
            self.driver.wake();
        } else {
            // What this call queued leaves first, without the round's receive before it (a
            // `recvmsg` that usually finds nothing); the next `test` makes the round.
            if c.flush_outbox() {
                c.rails.post_now();
                if !c.rails.has_queued() {
                    return;
                }
            }
            c.progress(self.holding_cts());
        }
    }

    /// Holds the CTS frames `irecv` just queued (the caller holds the connection's lock)
    /// until this thread's next call (module docs).
    fn hold_cts(self: &Arc<Self>) {
        if self.cts_held.load(Ordering::Relaxed) == 0 {
            self.cts_held.store(now_ns().max(1), Ordering::Relaxed);
            HELD.with(|h| h.borrow_mut().push_back(Arc::downgrade(self)));
        }
    }

    /// Whether a CTS is held and younger than [`CTS_HOLD`] (an older hold ends here: the
    /// round sends it).
    fn holding_cts(&self) -> bool {
        let since = self.cts_held.load(Ordering::Relaxed);
        if since == 0 {
            return false;
        }
        if now_ns().saturating_sub(since) < CTS_HOLD.as_nanos() as u64 {
            return true;
        }
        let _ = self
            .cts_held
            .compare_exchange(since, 0, Ordering::Relaxed, Ordering::Relaxed);
        false
    }

    /// Sends the CTS frames held on this connection, if any (they went out already when a
    /// round found them older than [`CTS_HOLD`]): with several shards the shard's next round
    /// (woken; no lock taken here, the shard may hold it), else here.
    fn release_cts(&self) {
        if self.cts_held.swap(0, Ordering::Relaxed) == 0 {
            return;
        }
        if self.driver.offload && !self.posts_inline(None) {
            self.driver.wake();
        } else {
            let mut c = self.lock();
            self.advance(&mut c, self.posts_inline(None));
        }
    }

    /// Whether a send of `len` bytes (`Some`) or a receive's CTS (`None`) is posted by the
    /// calling thread ([`ConnShared::advance`]).
    fn posts_inline(&self, len: Option<usize>) -> bool {
        self.inline_bytes > 0
            && match len {
                Some(n) => n <= self.inline_bytes,
                None => true,
            }
    }

    /// Runs `f` on the connection for a `test`: after a round of progress (one shard), or as
    /// it is (several: the shard's thread makes the progress); `None` while the shard's thread
    /// holds the connection. With several shards a `test` wakes nobody: the shard sleeps only
    /// with nothing to do, and a datagram on its sockets or a hand-off wakes it (NCCL's proxy
    /// calls `test` without pause, and a wake per call kept every shard that has a
    /// connection spinning).
    fn test<T>(&self, f: impl FnOnce(&mut Conn) -> T) -> Option<T> {
        if !self.driver.offload {
            let mut c = self.lock();
            c.progress(self.holding_cts());
            return Some(f(&mut c));
        }
        // The shard's thread gets no CPU (a host with fewer free CPUs than busy threads): do
        // its round for this connection here, where NCCL's proxy would only spin.
        if self.driver.pulse.starved(&self.driver.seen) {
            self.pump();
        }
        let mut c = match self.core.try_lock() {
            Ok(c) => c,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(f(&mut c))
    }

    fn lock(&self) -> MutexGuard<'_, Conn> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes this connection end: CLOSE goes to the peer (flushed by the progress thread).
    pub(crate) fn close(&self, why: &str) {
        let mut c = self.lock();
        if c.closing.is_some() {
            return;
        }
        c.closing = Some(Instant::now());
        c.rails.push(
            None,
            NO_TOKEN,
            FrameBody::Bytes(text_frame(FrameKind::Close, 0, why)),
        );
        c.progress(self.holding_cts());
    }
}

#[cfg(test)]
impl ConnShared {
    /// The devices its pump drives, and how many of its rails drive theirs when polled.
    pub(crate) fn driving(&self) -> (usize, usize) {
        let c = self.lock();
        let polls_drive = c.rails.rails().iter().filter(|r| r.drives()).count();
        (self.devices.len(), polls_drive)
    }
}

impl Pump for ConnShared {
    fn pump(&self) -> PumpState {
        // What an application call handed over leaves first: driving the devices begins with
        // a receive that usually finds nothing (~1 µs in a VM), and the round's bookkeeping
        // would come before the posting too (docs/benchmarks.md, 2026-12-02 00:07 UTC).
        if self.handed.swap(false, Ordering::Acquire) {
            if let Ok(mut c) = self.core.try_lock() {
                c.rails.post_now();
            } else {
                self.handed.store(true, Ordering::Release);
            }
        }
        // The device work first, without the connection (see `ConnShared::devices`).
        let mut driven = 0;
        for d in &self.devices {
            driven += d.progress(None);
        }
        // The application holds the lock. One shard: it is making progress itself. Several:
        // it is in a `test` (which wakes nobody) or handing work over (which wakes the shard);
        // what the devices delivered, now or in a round that also found the lock taken, waits
        // in the rails' CQs until a round gets the lock: the shard must not sleep before.
        let Ok(mut c) = self.core.try_lock() else {
            if driven > 0 {
                self.behind.store(true, Ordering::Relaxed);
            }
            return if driven > 0 || self.behind.load(Ordering::Relaxed) {
                PumpState::Busy
            } else {
                PumpState::Idle
            };
        };
        self.behind.store(false, Ordering::Relaxed);
        let busy = c.progress(self.holding_cts()) || driven > 0;
        if let Some(t) = c.closing {
            if !c.rails.busy() || t.elapsed() > CLOSE_FLUSH || c.rails.failure().is_some() {
                return PumpState::Finished;
            }
        }
        if busy {
            PumpState::Busy
        } else {
            PumpState::Idle
        }
    }

    fn devices(&self) -> &[crate::verbs::Device] {
        &self.devices
    }
}

/// The keys of a lane's rails as a placement carries them.
///
/// Errors: [`MeshError::Request`] for more than [`MAX_PLACE_RAILS`] rails.
fn rail_keys(keys: impl IntoIterator<Item = u32>) -> Result<RailKeys> {
    let mut out = RailKeys::new();
    for k in keys {
        out.push(k).map_err(|_| {
            MeshError::Request(format!(
                "a registration spans more than {MAX_PLACE_RAILS} rails of one lane"
            ))
        })?;
    }
    Ok(out)
}

fn wait_until<T>(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let start = Instant::now();
    let mut spins = 0u32;
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(MeshError::Request(format!(
                "{what} did not complete within {timeout:?}"
            )));
        }
        spins += 1;
        if spins < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// The lanes of one connection end ([`crate::mesh::messages::Lane`]): messages take them in
/// turn, the k-th send and the k-th receive on lane k mod n, so FIFO matching per lane is
/// NCCL's FIFO matching per connection.
struct Lanes {
    lanes: Vec<Arc<ConnShared>>,
    /// The lane of the next message.
    next: Mutex<usize>,
}

impl Lanes {
    fn new(lanes: Vec<Arc<ConnShared>>) -> Lanes {
        assert!(!lanes.is_empty(), "a connection has at least one lane");
        Lanes {
            lanes,
            next: Mutex::new(0),
        }
    }

    /// Runs `post` on the next lane (with its index); the turn moves on when it posted
    /// (`Ok(Some)`).
    fn post<T>(
        &self,
        post: impl FnOnce(usize, &Arc<ConnShared>) -> Result<Option<T>>,
    ) -> Result<Option<(Arc<ConnShared>, T)>> {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let index = *next % self.lanes.len();
        let lane = &self.lanes[index];
        Ok(post(index, lane)?.map(|v| {
            *next = (*next + 1) % self.lanes.len();
            (lane.clone(), v)
        }))
    }

    /// [`ConnShared::driving`] of every lane.
    #[cfg(test)]
    fn driving(&self) -> Vec<(usize, usize)> {
        self.lanes.iter().map(|l| l.driving()).collect()
    }

    fn route(&self) -> &Route {
        &self.lanes[0].route
    }

    /// Registers memory for every rail of every lane (see [`RecvComm::register`]).
    fn register(&self, lend: Lend<'_>) -> Result<Registration> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let host = |e: crate::Error| MeshError::Host(format!("registering memory: {e}"));
        // The PD of each rail, per lane.
        let pds: Vec<Vec<ProtectionDomain>> = self
            .lanes
            .iter()
            .map(|l| {
                l.lock()
                    .rails
                    .rails()
                    .iter()
                    .map(|r| r.pd().clone())
                    .collect()
            })
            .collect();
        let mut mrs: Vec<MemoryRegion> = Vec::new();
        let mut keys: Vec<RailKeys> = Vec::new();
        match lend {
            Lend::Once(mem) => {
                let all: Vec<&ProtectionDomain> = pds.iter().flatten().collect();
                let mr = ProtectionDomain::register_lent_on(&all, mem, access).map_err(host)?;
                keys = pds
                    .iter()
                    .map(|l| rail_keys(std::iter::repeat(mr.rkey()).take(l.len())))
                    .collect::<Result<_>>()?;
                mrs.push(mr);
            }
            Lend::PerDevice(make) => {
                // One region per distinct PD.
                let mut by_pd: Vec<(ProtectionDomain, u32)> = Vec::new();
                for lane in &pds {
                    let mut lane_keys = Vec::with_capacity(lane.len());
                    for pd in lane {
                        let key = match by_pd.iter().find(|(p, _)| p.same(pd)) {
                            Some((_, k)) => *k,
                            None => {
                                let mr = pd.register_lent(make(), access).map_err(host)?;
                                let k = mr.rkey();
                                by_pd.push((pd.clone(), k));
                                mrs.push(mr);
                                k
                            }
                        };
                        lane_keys.push(key);
                    }
                    keys.push(rail_keys(lane_keys)?);
                }
            }
        }
        let Some(first) = mrs.first() else {
            return Err(MeshError::Host(
                "registering memory: the connection has no rails".into(),
            ));
        };
        if let Some(other) = mrs
            .iter()
            .find(|m| (m.addr(), m.len()) != (first.addr(), first.len()))
        {
            return Err(MeshError::Request(format!(
                "registering memory: the loans of one registration differ ({:#x} + {} bytes \
                 and {:#x} + {} bytes); Lend::PerDevice must lend the same memory each time",
                first.addr(),
                first.len(),
                other.addr(),
                other.len()
            )));
        }
        Ok(Registration {
            addr: first.addr(),
            len: first.len(),
            keys,
            lanes: self.lanes.iter().map(|l| Arc::as_ptr(l) as usize).collect(),
            mrs,
        })
    }

    /// Bytes moved by path, summed over the lanes.
    fn stats(&self) -> PlacementStats {
        let mut t = PlacementStats::default();
        for l in &self.lanes {
            let s = l.lock().tagged.stats();
            t.placed += s.placed;
            t.copied += s.copied;
            t.sent_placed += s.sent_placed;
            t.sent_copied += s.sent_copied;
            t.sent_from_registration += s.sent_from_registration;
        }
        t
    }

    fn close(&self, why: &str) {
        for l in &self.lanes {
            l.close(why);
        }
    }
}

/// The sending end of a connection (NCCL's `sendComm`).
pub struct SendComm {
    lanes: Lanes,
}

impl fmt::Debug for SendComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendComm({})", self.lanes.route())
    }
}

impl SendComm {
    /// A send comm over `lanes` (at least one).
    pub(crate) fn new(lanes: Vec<Arc<ConnShared>>) -> SendComm {
        SendComm {
            lanes: Lanes::new(lanes),
        }
    }

    /// Number of lanes (mesh connections taken in turn).
    pub fn lanes(&self) -> usize {
        self.lanes.lanes.len()
    }

    /// Starts sending `len` bytes of `buf` from `offset` with `tag` (NCCL's `isend`).
    /// `Ok(None)`: the connection has its maximum of requests in flight (at least 32); call
    /// again later. The bytes are read from `buf` while the request is in flight.
    ///
    /// Errors: the connection's failure ([`MeshError::LinkDown`] naming the link,
    /// [`MeshError::Closed`]); [`MeshError::Request`] for a range outside `buf`.
    pub fn isend(
        &self,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: i32,
    ) -> Result<Option<SendRequest>> {
        self.isend_registered(buf, offset, len, tag, None)
    }

    /// [`SendComm::isend`] of bytes that lie in memory registered with this comm
    /// ([`SendComm::register`]; `reg`: the registration and the virtual address of the send's
    /// first byte): where the receiver announced a placement, the chunks are RDMA WRITTEN
    /// straight from the registered memory, with no copy into a send slot.
    ///
    /// Errors: as [`SendComm::isend`]; [`MeshError::Request`] for a registration of another
    /// comm or a send outside it.
    pub fn isend_registered(
        &self,
        buf: &Buffer,
        offset: usize,
        len: usize,
        tag: i32,
        reg: Option<(&Registration, u64)>,
    ) -> Result<Option<SendRequest>> {
        let reg = match reg {
            Some((r, va)) if len > 0 => Some(r.check(&self.lanes, va, len)?),
            _ => None,
        };
        let posted = self.lanes.post(|lane, shared| {
            let local = reg.map(|(r, va)| Placement {
                va,
                keys: r.keys[lane].clone(),
            });
            let mut c = shared.lock();
            c.update_live_rails();
            let id = c.tagged.isend_registered(buf, offset, len, tag, local)?;
            shared.advance(&mut c, shared.posts_inline(Some(len)));
            Ok(id)
        });
        // After this send's own frames: the CTS frames the thread's receives held.
        release_held();
        Ok(posted?.map(|(shared, id)| SendRequest { shared, id }))
    }

    /// Per lane: the devices its shard drives outside the connection, and the rails whose polls
    /// drive their device.
    #[cfg(test)]
    pub(crate) fn driving(&self) -> Vec<(usize, usize)> {
        self.lanes.driving()
    }

    /// The route of the connection (of its first lane; every lane takes the same route).
    pub fn route(&self) -> &Route {
        self.lanes.route()
    }

    /// Registers memory the application lends with the connection's devices (see
    /// [`RecvComm::register`]): sends from it ([`SendComm::isend_registered`]) are RDMA
    /// WRITTEN from there into receives the peer registered.
    ///
    /// Errors: as [`RecvComm::register`].
    pub fn register(&self, lend: Lend<'_>) -> Result<Registration> {
        self.lanes.register(lend)
    }

    /// Bytes sent by path (placed chunks, DATA frames), summed over the lanes.
    pub fn placement_stats(&self) -> PlacementStats {
        self.lanes.stats()
    }
}

impl Drop for SendComm {
    fn drop(&mut self) {
        self.lanes.close("send side closed");
    }
}

/// An `isend` in flight.
pub struct SendRequest {
    shared: Arc<ConnShared>,
    id: u64,
}

impl fmt::Debug for SendRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SendRequest({})", self.id)
    }
}

impl SendRequest {
    /// NCCL's `test`: `Ok(Some(size))` once every byte was handed to the next hop (the buffer
    /// may be reused), `Ok(None)` before. After `Some` or an error the request is gone; testing
    /// it again is an error.
    ///
    /// Errors: [`MeshError::Truncated`] (the matching receive is smaller, both sizes named),
    /// [`MeshError::TagMismatch`], the connection's failure.
    pub fn test(&self) -> Result<Option<usize>> {
        release_held();
        self.shared
            .test(|c| c.tagged.test_send(self.id))
            .unwrap_or(Ok(None))
    }

    /// Calls [`SendRequest::test`] until it completes or `timeout` passes.
    ///
    /// Errors: those of `test`; [`MeshError::Request`] on timeout.
    pub fn wait(&self, timeout: Duration) -> Result<usize> {
        wait_until(timeout, "send", || self.test())
    }
}

/// The receiving end of a connection (NCCL's `recvComm`).
pub struct RecvComm {
    lanes: Lanes,
}

impl fmt::Debug for RecvComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecvComm({})", self.lanes.route())
    }
}

impl RecvComm {
    /// A receive comm over `lanes` (at least one), in lane order.
    pub(crate) fn new(lanes: Vec<Arc<ConnShared>>) -> RecvComm {
        RecvComm {
            lanes: Lanes::new(lanes),
        }
    }

    /// Number of lanes (mesh connections taken in turn).
    pub fn lanes(&self) -> usize {
        self.lanes.lanes.len()
    }

    /// Posts a receive into 1 to 8 buffers (NCCL's `irecv`; several buffers make a grouped
    /// receive whose sends are told apart by tag). `Ok(None)`: the maximum of requests is in
    /// flight; call again later.
    ///
    /// Errors: the connection's failure; [`MeshError::Request`] for no buffers, more than 8,
    /// more than one on a connection of several lanes, or a range outside a buffer.
    pub fn irecv(&self, bufs: &[RecvBuf]) -> Result<Option<RecvRequest>> {
        self.irecv_registered(bufs, &[])
    }

    /// Registers memory the application lends with the connection's devices, for receives
    /// that peers RDMA WRITE into ([`RecvComm::irecv_registered`]; NCCL's `regMr`): with
    /// [`Lend::Once`] one region in the protection domains of every rail of every lane, with
    /// [`Lend::PerDevice`] one region (one loan) per protection domain. The memory stays
    /// registered until the [`Registration`] and every buffer made from it are dropped.
    ///
    /// Errors: [`MeshError::Host`] when a registration fails (e.g. the vfio provider, whose
    /// regions are DMA memory it allocates).
    pub fn register(&self, lend: Lend<'_>) -> Result<Registration> {
        self.lanes.register(lend)
    }

    /// Bytes received by path (placed by the sender's RDMA WRITE, copied from DATA frames),
    /// summed over the lanes.
    pub fn placement_stats(&self) -> PlacementStats {
        self.lanes.stats()
    }

    /// [`RecvComm::irecv`] where buffer `i` may lie in registered memory: `regs[i]` is its
    /// registration (made by this comm) and the virtual address of its first posted byte
    /// (missing entries: not registered). On a direct connection whose sender supports it,
    /// the sender then RDMA WRITES the matched send into that memory instead of sending it in
    /// DATA frames to be copied (docs/mesh.md, direct placement). The buffer itself (what a
    /// fallback copy writes) must be the same memory: [`Registration::buffer`], or the
    /// application's loan of it.
    ///
    /// Errors: as [`RecvComm::irecv`]; [`MeshError::Request`] for a registration of another
    /// comm or a buffer outside its registration.
    pub fn irecv_registered(
        &self,
        bufs: &[RecvBuf],
        regs: &[Option<(&Registration, u64)>],
    ) -> Result<Option<RecvRequest>> {
        if bufs.len() > 1 && self.lanes() > 1 {
            // The sender cannot tell which of its sends a grouped receive takes, so it could
            // not put them on that receive's lane.
            return Err(MeshError::Request(format!(
                "a grouped receive of {} buffers needs a single-lane connection; this one has {} \
                 lanes (RDMESH_LANES=1 on the sending node)",
                bufs.len(),
                self.lanes()
            )));
        }
        // On the stack (no allocation per receive): a receive has at most MAX_RECVS buffers
        // (more are refused by `irecv_placed`, before it reads a placement).
        let mut places = heapless::Vec::<_, MAX_RECVS>::new();
        for (i, b) in bufs.iter().enumerate().take(MAX_RECVS) {
            let p = match regs.get(i).copied().flatten() {
                Some((reg, va)) => Some(reg.check(&self.lanes, va, b.len)?),
                None => None,
            };
            let _ = places.push(p);
        }
        release_held();
        let posted = self.lanes.post(|lane, shared| {
            let places: heapless::Vec<Option<Placement>, MAX_RECVS> = places
                .iter()
                .map(|p| {
                    p.map(|(reg, va)| Placement {
                        va,
                        keys: reg.keys[lane].clone(),
                    })
                })
                .collect();
            let mut c = shared.lock();
            let seq = c.tagged.irecv_placed(bufs, &places)?;
            if seq.is_some() {
                shared.hold_cts();
            }
            Ok(seq)
        })?;
        Ok(posted.map(|(shared, id)| RecvRequest { shared, id }))
    }

    /// Per lane: the devices its shard drives outside the connection, and the rails whose polls
    /// drive their device.
    #[cfg(test)]
    pub(crate) fn driving(&self) -> Vec<(usize, usize)> {
        self.lanes.driving()
    }

    /// The route of the connection (the first hop from this end toward the sender).
    pub fn route(&self) -> &Route {
        self.lanes.route()
    }
}

impl Drop for RecvComm {
    fn drop(&mut self) {
        self.lanes.close("receive side closed");
    }
}

/// An `irecv` in flight.
pub struct RecvRequest {
    shared: Arc<ConnShared>,
    id: u64,
}

impl fmt::Debug for RecvRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RecvRequest({})", self.id)
    }
}

impl RecvRequest {
    /// NCCL's `test`: `Ok(Some(sizes))` with the actual size of the send that filled each
    /// buffer, once all are filled; `Ok(None)` before. After `Some` or an error the request is
    /// gone.
    ///
    /// Errors: [`MeshError::Truncated`] (a send larger than its buffer, both sizes named), the
    /// connection's failure ([`MeshError::LinkDown`], [`MeshError::Closed`]).
    pub fn test(&self) -> Result<Option<RecvSizes>> {
        release_held();
        self.shared
            .test(|c| c.tagged.test_recv(self.id))
            .unwrap_or(Ok(None))
    }

    /// Calls [`RecvRequest::test`] until it completes or `timeout` passes.
    ///
    /// Errors: those of `test`; [`MeshError::Request`] on timeout.
    pub fn wait(&self, timeout: Duration) -> Result<RecvSizes> {
        wait_until(timeout, "receive", || self.test())
    }
}

/// How the application lends memory to [`RecvComm::register`] / [`SendComm::register`].
pub enum Lend<'a> {
    /// One loan: one region, in the protection domain of every rail of every lane.
    Once(Box<dyn LentMemory>),
    /// A loan per protection domain: `make` is called once for each distinct one, each
    /// returning the same memory (a region per device, each with its own lock; every access
    /// reaches just the range it touches, so the regions' accesses never overlap a chunk
    /// another is placing).
    PerDevice(&'a dyn Fn() -> Box<dyn LentMemory>),
}

impl fmt::Debug for Lend<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Lend::Once(m) => write!(f, "Lend::Once({} bytes at {:#x})", m.len(), m.addr()),
            Lend::PerDevice(_) => f.write_str("Lend::PerDevice"),
        }
    }
}

/// Memory registered with the devices of one connection (NCCL's `mhandle`): a region per
/// protection domain of its rails (or one in all of them), and the rkey of each rail of each
/// lane. Dropping it (and every [`Buffer`] made from it) deregisters the memory.
#[derive(Debug)]
pub struct Registration {
    addr: u64,
    len: usize,
    /// Per lane: the key of each rail (the soft provider's lkey and rkey are one).
    keys: Vec<RailKeys>,
    /// The comm's lanes, by address (compared, never dereferenced).
    lanes: Vec<usize>,
    mrs: Vec<MemoryRegion>,
}

impl Registration {
    /// Virtual address of the registered memory's first byte.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` for an empty registration.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A [`Buffer`] over the whole registered memory, reached through the registration's
    /// (first) region one range at a time: what a receive into it names.
    pub fn buffer(&self) -> Buffer {
        Buffer::region(self.mrs[0].clone())
    }

    /// The regions (one per protection domain, or one in all).
    pub fn regions(&self) -> &[MemoryRegion] {
        &self.mrs
    }

    /// Checks that this registration belongs to `lanes` and covers `[va, va + len)`.
    fn check(&self, lanes: &Lanes, va: u64, len: usize) -> Result<(&Registration, u64)> {
        let ours = self.lanes.len() == lanes.lanes.len()
            && self
                .lanes
                .iter()
                .zip(&lanes.lanes)
                .all(|(a, l)| *a == Arc::as_ptr(l) as usize);
        if !ours {
            return Err(MeshError::Request(
                "a request names memory registered with another connection".into(),
            ));
        }
        let inside = va >= self.addr
            && (va - self.addr)
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.len as u64);
        if !inside {
            return Err(MeshError::Request(format!(
                "buffer {va:#x} + {len} bytes lies outside its registration \
                 ({:#x} + {} bytes)",
                self.addr, self.len
            )));
        }
        Ok((self, va))
    }
}
