//! A mesh node: this process's NICs, its handshake listener, what it knows of other nodes, and
//! the background threads that set up and drive connections. The non-blocking `listen`,
//! `connect` and `accept` of NCCL's net API are [`MeshNode::listen`], [`MeshNode::connect`] +
//! [`Connector::poll`], and [`Listener::accept`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::mesh::comm::{ConnShared, Driver, RecvComm, Route, SendComm};
use crate::mesh::config::MeshConfig;
use crate::mesh::counters::NicCountersSnapshot;
use crate::mesh::error::{MeshError, Result};
use crate::mesh::handle::{Handle, NodeInfo};
use crate::mesh::handshake::{self, client_hop, HopRequest};
use crate::mesh::lane_groups::LaneGroups;
use crate::mesh::messages::{Lane, RequestKind, MAX_LANES, MAX_TOPOLOGY};
use crate::mesh::nic::{nics_from_topology, Nic, NicSpec};
use crate::mesh::progress::Progress;
use crate::mesh::rail::{Rail, RailParams};
use crate::mesh::railset::RailSet;
use crate::mesh::route::{direct_rails, shortest_path};
use crate::mesh::tagged::Eager;
use crate::topo::Topology;

/// Most handshakes served at once; more incoming connections are closed.
const MAX_HANDSHAKES: usize = 64;
/// Most nodes remembered.
const MAX_KNOWN: usize = 1024;

/// What a listener accepted: complete connections, and lanes waiting for the rest of their
/// connection ([`Lane`], [`LaneGroups`]).
pub(crate) struct Accepted {
    ready: VecDeque<RecvComm>,
    groups: LaneGroups<Arc<ConnShared>>,
    /// How long a lane waits for the rest of its connection: twice the handshake timeout.
    max_wait: Duration,
}

impl Accepted {
    fn new(handshake_timeout: Duration) -> Accepted {
        Accepted {
            ready: VecDeque::new(),
            groups: LaneGroups::default(),
            max_wait: handshake_timeout * 2,
        }
    }

    /// Adds the accepted lane `lane` of a connection; the connection is ready once all its
    /// lanes are. Lanes whose connection never completed in time are closed.
    pub(crate) fn add_lane(&mut self, lane: Lane, conn: Arc<ConnShared>) {
        let now = Instant::now();
        self.expire(now);
        let (done, stray) = self.groups.add(lane, conn, now);
        if let Some(c) = stray {
            c.close("a second lane with the same index arrived");
        }
        if let Some(lanes) = done {
            self.ready.push_back(RecvComm::new(lanes));
        }
    }

    fn expire(&mut self, now: Instant) {
        for c in self.groups.expire(now, self.max_wait) {
            c.close("the other lanes of this connection never arrived");
        }
    }

    fn pop(&mut self) -> Option<RecvComm> {
        self.expire(Instant::now());
        self.ready.pop_front()
    }
}

type AcceptQueue = Arc<Mutex<Accepted>>;

/// The shared state of a node.
pub(crate) struct NodeInner {
    pub(crate) id: u64,
    pub(crate) config: MeshConfig,
    pub(crate) nics: Vec<Arc<Nic>>,
    pub(crate) tcp_port: u16,
    listeners: Mutex<HashMap<u32, AcceptQueue>>,
    next_listen: AtomicU32,
    peers: Mutex<BTreeMap<u64, NodeInfo>>,
    pub(crate) progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    handshakes: AtomicUsize,
}

impl Drop for NodeInner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.progress.stop();
    }
}

impl NodeInner {
    /// A connection end over `rails` on progress shard `shard`, with this node's settings and
    /// the eager sends agreed in the handshake, handed to that shard.
    pub(crate) fn start_conn(
        self: &Arc<Self>,
        rails: Vec<Rail>,
        route: Route,
        label: String,
        shard: usize,
        eager: Eager,
    ) -> Arc<ConnShared> {
        let conn = ConnShared::new(
            RailSet::new(rails),
            route,
            label,
            &self.config,
            eager,
            Driver::new(&self.progress, shard),
        );
        self.progress.add_to(shard, conn.clone());
        conn
    }

    /// This node's description.
    pub(crate) fn info(&self) -> NodeInfo {
        NodeInfo {
            id: self.id,
            tcp_port: self.tcp_port,
            relays: self.config.relay,
            addrs: self.nics.iter().map(|n| n.spec.addr).collect(),
        }
    }

    pub(crate) fn nic_specs(&self) -> Vec<NicSpec> {
        self.nics.iter().map(|n| n.spec.clone()).collect()
    }

    /// Remembers (or updates) a node.
    pub(crate) fn learn(&self, n: NodeInfo) {
        if n.id == self.id || n.addrs.is_empty() {
            return;
        }
        let mut p = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        if p.len() < MAX_KNOWN || p.contains_key(&n.id) {
            p.insert(n.id, n);
        }
    }

    pub(crate) fn known(&self, id: u64) -> Option<NodeInfo> {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    pub(crate) fn known_nodes(&self) -> Vec<NodeInfo> {
        self.peers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    /// This node and the nodes it knows, at most [`MAX_TOPOLOGY`].
    pub(crate) fn topology_table(&self) -> Vec<NodeInfo> {
        let mut t = vec![self.info()];
        t.extend(self.known_nodes().into_iter().take(MAX_TOPOLOGY - 1));
        t
    }

    pub(crate) fn listener_queue(&self, id: u32) -> Option<AcceptQueue> {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    fn local_text(&self) -> String {
        self.nics
            .iter()
            .map(|n| n.spec.label())
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn unreachable(&self, target: &NodeInfo, reason: String) -> MeshError {
        MeshError::Unreachable {
            peer: target.id_hex(),
            reason,
            peer_addrs: target.addrs_text(),
            local: self.local_text(),
        }
    }
}

/// A mesh node (see the module docs). Cloning yields another handle to the same node; the
/// node's threads stop when the last handle is dropped.
#[derive(Clone)]
pub struct MeshNode {
    inner: Arc<NodeInner>,
}

impl std::fmt::Debug for MeshNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MeshNode({:016x}, port {}, NICs: {})",
            self.inner.id,
            self.inner.tcp_port,
            self.inner.local_text()
        )
    }
}

/// A NIC's identity and counters, as [`MeshNode::nic_counters`] reports them.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NicReport {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u32,
    /// Netdev.
    pub netdev: String,
    /// Address, CIDR.
    pub addr: String,
    /// Ceiling (striping weight), Gb/s.
    pub gbps: f64,
    /// Counters.
    pub counters: NicCountersSnapshot,
    /// The NIC's soft device: UDP datagrams and the drops the provider counted.
    pub udp: DeviceStats,
}

/// A soft device's packet counters ([`crate::soft::DeviceCounters`]), as reported with a NIC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceStats {
    /// UDP datagrams sent.
    pub tx_packets: u64,
    /// UDP datagrams received.
    pub rx_packets: u64,
    /// Sends the kernel refused.
    pub tx_errors: u64,
    /// Received packets dropped for a bad ICRC.
    pub icrc_errors: u64,
    /// Received packets for a QP that does not exist.
    pub unknown_qp: u64,
    /// Received packets from an address that is not the QP's peer.
    pub wrong_source: u64,
}

/// `RDMESH_PROVIDER` over the NIC list: every NIC that is not a vfio function of its own gets
/// `provider`. One vfio function serves one NIC.
///
/// Errors: [`MeshError::Config`] when `vfio:BDF` would serve several NICs.
fn apply_provider(
    mut specs: Vec<NicSpec>,
    provider: Option<&crate::verbs::ProviderKind>,
) -> Result<Vec<NicSpec>> {
    use crate::verbs::ProviderKind;
    let Some(p) = provider else {
        return Ok(specs);
    };
    let mut taken = 0;
    for s in &mut specs {
        if matches!(s.provider, ProviderKind::Vfio(_)) {
            continue;
        }
        s.provider = p.clone();
        taken += 1;
    }
    if matches!(p, ProviderKind::Vfio(_)) && taken > 1 {
        return Err(MeshError::Config(format!(
            "{}={p} would drive {taken} NICs with one function; list each NIC's function in \
             RDMESH_NICS=vfio:BDF=addr/len,...",
            crate::verbs::PROVIDER_ENV
        )));
    }
    Ok(specs)
}

impl MeshNode {
    /// Starts a node: finds its NICs (from `config.nics`, or by topology discovery: every up
    /// port selected by `RDMESH_HCA`, one NIC per link address), opens a soft device on each,
    /// binds the handshake TCP port on all addresses, and starts the handshake and progress
    /// threads.
    ///
    /// Errors: [`MeshError::NoNic`] when no NIC is left; [`MeshError::Handle`] when the NICs'
    /// addresses do not fit in a 128-byte handle; [`MeshError::Host`] when a device or the TCP
    /// port cannot be opened; discovery errors as [`MeshError::Config`].
    pub fn new(config: MeshConfig) -> Result<MeshNode> {
        let specs: Vec<NicSpec> = match &config.nics {
            Some(list) => list
                .iter()
                .filter(|s| {
                    config
                        .hca
                        .as_ref()
                        .map_or(true, |f| f.selects(&s.device, s.port, Some(&s.netdev)))
                })
                .map(|s| {
                    let mut s = s.clone();
                    if let Some((_, g)) = config.gbps_overrides.iter().find(|(n, _)| *n == s.netdev)
                    {
                        s.gbps = *g;
                    }
                    s
                })
                .collect(),
            None => {
                let topo = Topology::discover(&config.discover)
                    .map_err(|e| MeshError::Config(format!("topology discovery: {e}")))?;
                nics_from_topology(&topo, config.hca.as_ref(), &config.gbps_overrides)
            }
        };
        let specs = apply_provider(specs, config.provider.as_ref())?;
        if specs.is_empty() {
            return Err(MeshError::NoNic(format!(
                "no device port is up with an address{}; check `rdmesh topo`",
                config
                    .hca
                    .as_ref()
                    .map(|f| format!(" and selected by RDMESH_HCA={f}"))
                    .unwrap_or_default()
            )));
        }
        let mut nics = Vec::new();
        for (i, s) in specs.into_iter().enumerate() {
            nics.push(Arc::new(Nic::open(
                i,
                s,
                config.udp_port,
                config.progress_threads,
            )?));
        }
        let listener = bind_tcp(config.tcp_port)?;
        let tcp_port = listener
            .local_addr()
            .map_err(|e| MeshError::Host(format!("reading the handshake port: {e}")))?
            .port();
        let mut idb = [0u8; 8];
        crate::mesh::auth::fill_random(&mut idb);
        let id = u64::from_be_bytes(idb).max(1);
        let progress = Progress::start(format!("rdmesh-mesh {id:08x}"), config.progress_threads)
            .map_err(|e| MeshError::Host(format!("starting the progress thread: {e}")))?;
        let inner = Arc::new(NodeInner {
            id,
            config,
            nics,
            tcp_port,
            listeners: Mutex::new(HashMap::new()),
            next_listen: AtomicU32::new(1),
            peers: Mutex::new(BTreeMap::new()),
            progress,
            stop: Arc::new(AtomicBool::new(false)),
            handshakes: AtomicUsize::new(0),
        });
        Handle::new(inner.info(), 0)?;
        let weak = Arc::downgrade(&inner);
        let stop = inner.stop.clone();
        std::thread::Builder::new()
            .name(format!("rdmesh-mesh-hs {tcp_port}"))
            .spawn(move || accept_loop(listener, weak, stop))
            .map_err(|e| MeshError::Host(format!("starting the handshake thread: {e}")))?;
        tracing::info!(
            node = format_args!("{id:016x}"),
            tcp_port,
            nics = %inner.local_text(),
            "mesh node up"
        );
        Ok(MeshNode { inner })
    }

    /// The node id.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The handshake TCP port.
    pub fn tcp_port(&self) -> u16 {
        self.inner.tcp_port
    }

    /// This node's description (id, port, link addresses).
    pub fn info(&self) -> NodeInfo {
        self.inner.info()
    }

    /// The NICs in use.
    pub fn nics(&self) -> Vec<NicSpec> {
        self.inner.nic_specs()
    }

    /// The nodes this node knows (from handles, handshakes and topology queries).
    pub fn known_nodes(&self) -> Vec<NodeInfo> {
        self.inner.known_nodes()
    }

    /// Adds what a handle says about its node to the topology (relay paths are computed over
    /// the nodes known).
    pub fn add_peer(&self, handle: &Handle) {
        self.inner.learn(handle.node().clone());
    }

    /// The node's progress shards (tests stop them to see what application calls do alone).
    #[cfg(test)]
    pub(crate) fn progress(&self) -> &Arc<Progress> {
        &self.inner.progress
    }

    /// Each NIC's counters.
    pub fn nic_counters(&self) -> Vec<NicReport> {
        self.inner
            .nics
            .iter()
            .map(|n| NicReport {
                device: n.spec.device.clone(),
                port: n.spec.port,
                netdev: n.spec.netdev.clone(),
                addr: n.spec.addr.to_string(),
                gbps: n.spec.gbps,
                counters: n.counters.snapshot(),
                udp: n
                    .devices()
                    .map(|d| d.counters())
                    .fold(DeviceStats::default(), |mut a, d| {
                        a.tx_packets += d.tx_packets;
                        a.rx_packets += d.rx_packets;
                        a.tx_errors += d.tx_errors;
                        a.icrc_errors += d.icrc_errors;
                        a.unknown_qp += d.unknown_qp;
                        a.wrong_source += d.wrong_source;
                        a
                    }),
            })
            .collect()
    }

    /// Lanes of a direct connection this node opens (`RDMESH_LANES`): with more than one, a
    /// receive takes a single buffer (grouped receives need one lane).
    pub fn lanes(&self) -> usize {
        self.inner.config.lanes.max(1)
    }

    /// Whether a receive takes a single buffer on this node's connections: with several lanes
    /// (grouped receives need one lane) or eager sends taken (`RDMESH_EAGER_BYTES` > 0; the
    /// sender must know which receive its k-th send meets). NCCL's `maxRecvs` is then 1.
    pub fn single_buffer_receives(&self) -> bool {
        self.lanes() > 1 || self.inner.config.eager_bytes > 0
    }

    /// Number of connections and relays the progress thread drives.
    pub fn active(&self) -> usize {
        self.inner.progress.len()
    }

    /// NCCL's `listen`: a new listener and its handle. Never blocks.
    ///
    /// Errors: [`MeshError::Handle`] when the node's addresses do not fit a handle (checked at
    /// start, so not expected here).
    pub fn listen(&self) -> Result<Listener> {
        let id = self.inner.next_listen.fetch_add(1, Ordering::Relaxed);
        let handle = Handle::new(self.inner.info(), id)?;
        let queue: AcceptQueue = Arc::new(Mutex::new(Accepted::new(
            self.inner.config.handshake_timeout,
        )));
        self.inner
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, queue.clone());
        Ok(Listener {
            node: self.inner.clone(),
            id,
            handle,
            queue,
        })
    }

    /// NCCL's `connect`: starts connecting to the listener of `handle` and returns at once.
    /// Poll the [`Connector`] until it yields the [`SendComm`].
    ///
    /// When no local NIC shares a subnet with the peer and relaying is off, the connector
    /// fails on its first poll without any network traffic (the error names the peer's and the
    /// local addresses).
    pub fn connect(&self, handle: &Handle) -> Connector {
        let state = Arc::new(Mutex::new(ConnectState::Pending));
        let node = self.inner.clone();
        let target = handle.node().clone();
        node.learn(target.clone());
        if target.id != node.id
            && direct_rails(&node.nic_specs(), &target.addrs).is_empty()
            && !node.config.relay
        {
            let e = node.unreachable(
                &target,
                "no local NIC shares a subnet with it and relaying is off (RDMESH_RELAY=0)".into(),
            );
            *state.lock().unwrap_or_else(|p| p.into_inner()) = ConnectState::Failed(e);
            return Connector { state };
        }
        let listen_id = handle.listen_id();
        let st = state.clone();
        let spawned = std::thread::Builder::new()
            .name("rdmesh-mesh-connect".into())
            .spawn(move || {
                let r = connect_blocking(&node, &target, listen_id);
                let mut s = st.lock().unwrap_or_else(|p| p.into_inner());
                *s = match r {
                    Ok(c) => ConnectState::Ready(c),
                    Err(e) => ConnectState::Failed(e),
                };
            });
        if let Err(e) = spawned {
            *state.lock().unwrap_or_else(|p| p.into_inner()) =
                ConnectState::Failed(MeshError::Host(format!("starting a connect thread: {e}")));
        }
        Connector { state }
    }
}

fn connect_blocking(node: &Arc<NodeInner>, target: &NodeInfo, listen_id: u32) -> Result<SendComm> {
    let deadline = Instant::now() + node.config.handshake_timeout;
    let specs = node.nic_specs();
    let me = node.info();
    let (next, path, via) = if target.id == node.id
        || !direct_rails(&specs, &target.addrs).is_empty()
    {
        (target.clone(), Vec::new(), Vec::new())
    } else {
        let find = || {
            shortest_path(
                node.id,
                &me.addrs,
                target,
                &node.known_nodes(),
                node.config.max_hops,
            )
        };
        let path = match find() {
            Some(p) => p,
            None => {
                let budget = Instant::now() + (deadline - Instant::now()) / 2;
                handshake::query_topology(
                    node,
                    &[target.id],
                    node.config.max_hops.saturating_sub(1) as u8,
                    budget,
                );
                find().ok_or_else(|| {
                    let known: Vec<String> = node.known_nodes().iter().map(|n| n.id_hex()).collect();
                    node.unreachable(
                        target,
                        format!(
                            "no local NIC shares a subnet with it and no relay path of at most {} links is known (nodes known: {})",
                            node.config.max_hops,
                            if known.is_empty() { "none".into() } else { known.join(", ") }
                        ),
                    )
                })?
            }
        };
        let next = node.known(path[0]).ok_or_else(|| {
            node.unreachable(target, format!("relay node {:016x} is not known", path[0]))
        })?;
        let via: Vec<String> = path[..path.len() - 1]
            .iter()
            .map(|id| format!("{id:016x}"))
            .collect();
        tracing::info!(target = %target.id_hex(), via = ?via, "mesh: no shared subnet, relaying");
        (next, path[1..].to_vec(), via)
    };
    // Direct connections get the configured lanes; a relayed one has a single lane.
    let lanes = if via.is_empty() {
        node.config.lanes.clamp(1, usize::from(MAX_LANES)) as u8
    } else {
        1
    };
    let mut gb = [0u8; 8];
    crate::mesh::auth::fill_random(&mut gb);
    let group = u64::from_be_bytes(gb);
    let mut conns = Vec::with_capacity(usize::from(lanes));
    for index in 0..lanes {
        let req = HopRequest {
            kind: if via.is_empty() {
                RequestKind::Connect
            } else {
                RequestKind::Relay
            },
            origin: me.clone(),
            target: target.clone(),
            listen_id,
            path: path.clone(),
            hops_left: 0,
            lane: Lane {
                group,
                index,
                count: lanes,
            },
        };
        let shard = node.progress.next_shard();
        let hop = client_hop(node, &next, req, RailParams::DATA_SENDER, shard, deadline)?;
        let r = handshake::route_of(target, via.clone(), &hop.rails);
        let label = handshake::peer_label(target, &r);
        if index == 0 {
            tracing::info!(peer = %label, route = %r, lanes, "mesh connection up");
        }
        let eager = Eager {
            send_bytes: hop.eager_bytes.min(node.config.eager_bytes),
            accept: false,
        };
        conns.push(node.start_conn(hop.rails, r, label, shard, eager));
    }
    Ok(SendComm::new(conns))
}

/// The handshake listener: dual-stack `[::]:port` (the handle may carry IPv6 link addresses,
/// and a peer dials whichever address shares its subnet), or `0.0.0.0:port` where IPv6 is
/// unavailable.
fn bind_tcp(port: u16) -> Result<TcpListener> {
    match bind_tcp_on(SocketAddr::new(Ipv6Addr::UNSPECIFIED.into(), port)) {
        Ok(l) => Ok(l),
        Err(e6) => bind_tcp_on(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), port))
            .map_err(|e4| MeshError::Host(format!("{e4}; on [::] as well: {e6}"))),
    }
}

fn bind_tcp_on(addr: SocketAddr) -> Result<TcpListener> {
    let domain = if addr.is_ipv6() {
        socket2::Domain::IPV6
    } else {
        socket2::Domain::IPV4
    };
    let s = socket2::Socket::new(domain, socket2::Type::STREAM, None)
        .map_err(|e| MeshError::Host(format!("handshake socket: {e}")))?;
    if addr.is_ipv6() {
        s.set_only_v6(false)
            .map_err(|e| MeshError::Host(format!("handshake socket: IPV6_V6ONLY off: {e}")))?;
    }
    let _ = s.set_reuse_address(true);
    s.bind(&addr.into()).map_err(|e| {
        MeshError::Host(format!(
            "binding the handshake TCP port {addr}: {e} (another rdmesh on this port? set RDMESH_MESH_PORT or 0)"
        ))
    })?;
    s.listen(128)
        .map_err(|e| MeshError::Host(format!("listening on {addr}: {e}")))?;
    // accept() honours SO_RCVTIMEO on Linux: the thread wakes up to see whether to stop.
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .map_err(|e| MeshError::Host(format!("handshake socket timeout: {e}")))?;
    Ok(s.into())
}

fn accept_loop(listener: TcpListener, node: Weak<NodeInner>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let (stream, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                continue
            }
            Err(e) => {
                tracing::warn!(error = %e, "mesh handshake accept failed");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Some(node) = node.upgrade() else { return };
        if node.handshakes.fetch_add(1, Ordering::Relaxed) >= MAX_HANDSHAKES {
            node.handshakes.fetch_sub(1, Ordering::Relaxed);
            tracing::warn!(%peer, "mesh: too many handshakes at once; closing this one");
            continue;
        }
        let _ = stream.set_read_timeout(None);
        let n = node.clone();
        let spawned = std::thread::Builder::new()
            .name("rdmesh-mesh-serve".into())
            .spawn(move || {
                handshake::serve(n.clone(), stream);
                n.handshakes.fetch_sub(1, Ordering::Relaxed);
            });
        if spawned.is_err() {
            node.handshakes.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A listener (NCCL's `listenComm`): its handle goes to the peer, and [`Listener::accept`]
/// yields the connections made to it. Dropping it refuses later connections to its handle.
pub struct Listener {
    node: Arc<NodeInner>,
    id: u32,
    handle: Handle,
    queue: AcceptQueue,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listener({})", self.handle)
    }
}

impl Listener {
    /// The handle to give the connecting peer.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// NCCL's `accept`: the next connection made to this listener, or `None` yet. Never
    /// blocks.
    ///
    /// Errors: none today (a failed incoming handshake is the connecting side's error); the
    /// `Result` keeps NCCL's shape.
    pub fn accept(&self) -> Result<Option<RecvComm>> {
        Ok(self.queue.lock().unwrap_or_else(|p| p.into_inner()).pop())
    }

    /// Calls [`Listener::accept`] until a connection arrives or `timeout` passes.
    ///
    /// Errors: [`MeshError::Request`] on timeout.
    pub fn accept_wait(&self, timeout: Duration) -> Result<RecvComm> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.accept()? {
                return Ok(c);
            }
            if start.elapsed() > timeout {
                return Err(MeshError::Request(format!(
                    "no connection to listener {} within {timeout:?}",
                    self.id
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.node
            .listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.id);
    }
}

enum ConnectState {
    Pending,
    Ready(SendComm),
    Failed(MeshError),
    Taken,
}

/// A connection being set up in the background (NCCL's repeated `connect` calls).
pub struct Connector {
    state: Arc<Mutex<ConnectState>>,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match &*self.state.lock().unwrap_or_else(|p| p.into_inner()) {
            ConnectState::Pending => "pending",
            ConnectState::Ready(_) => "ready",
            ConnectState::Failed(_) => "failed",
            ConnectState::Taken => "taken",
        };
        write!(f, "Connector({s})")
    }
}

impl Connector {
    /// `Ok(None)` while the handshake runs, `Ok(Some(comm))` once (then the connector is
    /// spent). Never blocks.
    ///
    /// Errors: the handshake's error ([`MeshError::Unreachable`], [`MeshError::Handshake`]
    /// naming the addresses tried, [`MeshError::Auth`]), again on every later poll;
    /// [`MeshError::Request`] when polled after the comm was taken.
    pub fn poll(&mut self) -> Result<Option<SendComm>> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match std::mem::replace(&mut *s, ConnectState::Taken) {
            ConnectState::Pending => {
                *s = ConnectState::Pending;
                Ok(None)
            }
            ConnectState::Ready(c) => Ok(Some(c)),
            ConnectState::Failed(e) => {
                *s = ConnectState::Failed(e.clone());
                Err(e)
            }
            ConnectState::Taken => Err(MeshError::Request(
                "this connector already returned its connection".into(),
            )),
        }
    }

    /// Polls until the connection is up or `timeout` passes.
    ///
    /// Errors: those of [`Connector::poll`]; [`MeshError::Request`] on timeout.
    pub fn wait(&mut self, timeout: Duration) -> Result<SendComm> {
        let start = Instant::now();
        loop {
            if let Some(c) = self.poll()? {
                return Ok(c);
            }
            if start.elapsed() > timeout {
                return Err(MeshError::Request(format!(
                    "connection not up within {timeout:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}
