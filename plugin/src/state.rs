//! The plugin's process-wide state and its lifetime.
//!
//! - One mesh node per process, shared by every communicator: `init` takes a reference
//!   (per communicator with v11+, whose `init` returns a context; once for v10 and older, whose
//!   tables have no `finalize`), and the last `finalize` drops the node, closes every comm
//!   NCCL left open, and waits (`RDMESH_FINALIZE_WAIT_MS`) until every rdmesh thread
//!   (`rdmesh-*`) has exited.
//! - NCCL 2.28+ dlcloses the plugin after its last communicator. The first `init` pins the
//!   library (`dlopen(self, RTLD_NOLOAD | RTLD_NODELETE)`), so a thread still finishing, or a
//!   pointer NCCL kept from `getProperties` (`name`, `pciPath`), never points into unmapped
//!   code or data; v10-and-older tables, which get no `finalize`, rely on this.
//! - The pointers NCCL holds (contexts, comms, registrations, requests) are keys into a
//!   registry (module `registry`): every call looks its pointer up, so a stale or foreign
//!   pointer is an `ncclInternalError`, never a wild dereference.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdmesh_host::mesh::{Connector, MeshNode};

use crate::abi::types::{NCCL_INIT, NCCL_NET};
use crate::comm::{ListenComm, Mr, RecvC, Request, SendC};
use crate::config::PluginConfig;
use crate::device::{devices_of, NetDevice};
use crate::error::{PluginError, Result};
use crate::registry;
use crate::{info, warn};

/// A communicator's context (v11+ `init`).
#[derive(Debug)]
pub struct Ctx {
    /// NCCL's `commId`.
    pub comm_id: u64,
    /// `config->trafficClass` (-1: unset).
    pub traffic_class: i32,
}

/// The running plugin: the mesh node and its devices.
pub struct Plugin {
    /// The mesh node.
    pub node: MeshNode,
    /// NCCL's devices.
    pub devices: Vec<NetDevice>,
    /// The configuration it started with.
    pub config: PluginConfig,
    /// Connections being set up, by (peer node id, listen id).
    pub pending: Mutex<HashMap<(u64, u32), Connector>>,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Plugin({:?}, {} devices)", self.node, self.devices.len())
    }
}

/// An object NCCL holds a pointer to.
#[derive(Debug, Clone)]
pub enum Object {
    /// `init`'s context.
    Ctx(Arc<Ctx>),
    /// `listenComm`.
    Listen(Arc<ListenComm>),
    /// `sendComm`.
    Send(Arc<SendC>),
    /// `recvComm`.
    Recv(Arc<RecvC>),
    /// `mhandle`.
    Mr(Arc<Mr>),
    /// `request`.
    Request(Arc<Request>),
}

impl Object {
    /// The address NCCL sees.
    pub fn key(&self) -> usize {
        match self {
            Object::Ctx(a) => Arc::as_ptr(a) as usize,
            Object::Listen(a) => Arc::as_ptr(a) as usize,
            Object::Send(a) => Arc::as_ptr(a) as usize,
            Object::Recv(a) => Arc::as_ptr(a) as usize,
            Object::Mr(a) => Arc::as_ptr(a) as usize,
            Object::Request(a) => Arc::as_ptr(a) as usize,
        }
    }
}

#[derive(Default)]
struct Slot {
    plugin: Option<Arc<Plugin>>,
    refs: usize,
}

static SLOT: Mutex<Option<Slot>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn slot() -> MutexGuard<'static, Option<Slot>> {
    SLOT.lock().unwrap_or_else(|p| p.into_inner())
}

/// A fresh comm identity.
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Takes a reference on the plugin, starting the mesh node on the first one.
///
/// Errors: the configuration's (`ncclInvalidUsage`), no NIC (`ncclInvalidUsage`), the node's
/// start (`ncclSystemError`).
pub fn acquire() -> Result<Arc<Plugin>> {
    crate::pin::pin_library();
    let mut g = slot();
    let s = g.get_or_insert_with(Slot::default);
    if let Some(p) = &s.plugin {
        s.refs += 1;
        return Ok(p.clone());
    }
    let config = PluginConfig::from_env()?;
    let node = MeshNode::new(config.mesh.clone())?;
    let devices = devices_of(&node.nics());
    if devices.is_empty() {
        return Err(PluginError::usage("the mesh node has no NIC"));
    }
    info!(
        NCCL_INIT | NCCL_NET,
        "mesh node {:016x} up, handshake port {}, {} device(s): {}",
        node.id(),
        node.tcp_port(),
        devices.len(),
        devices
            .iter()
            .enumerate()
            .map(|(i, d)| format!("[{i}] {}", d.describe()))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let p = Arc::new(Plugin {
        node,
        devices,
        config,
        pending: Mutex::new(HashMap::new()),
    });
    s.plugin = Some(p.clone());
    s.refs = 1;
    Ok(p)
}

/// The running plugin.
///
/// Errors: `ncclInternalError` before `init` or after the last `finalize`.
pub fn current() -> Result<Arc<Plugin>> {
    slot()
        .as_ref()
        .and_then(|s| s.plugin.clone())
        .ok_or_else(|| PluginError::internal("the plugin is not initialized (init was not called, or every communicator was finalized)"))
}

/// Drops a reference; the last one stops the node, closes what NCCL left open and waits for
/// rdmesh's threads to exit.
pub fn release() {
    let (plugin, leftovers) = {
        let mut g = slot();
        let Some(s) = g.as_mut() else { return };
        s.refs = s.refs.saturating_sub(1);
        if s.refs > 0 {
            return;
        }
        // Drained under the slot's lock (the registry's locks nest inside it, never the
        // reverse), so an `init` racing this one registers into an empty registry.
        (s.plugin.take(), registry::remove_where(|_| true))
    };
    let open = leftovers
        .iter()
        .filter(|o| matches!(o, Object::Listen(_) | Object::Send(_) | Object::Recv(_)))
        .count();
    if open > 0 {
        warn!(NCCL_NET, "finalize: closing {open} comm(s) NCCL left open");
    }
    drop(leftovers);
    let Some(plugin) = plugin else { return };
    let wait = plugin.config.finalize_wait;
    let id = plugin.node.id();
    drop(plugin);
    let left = wait_for_threads(wait);
    if left.is_empty() {
        info!(
            NCCL_INIT | NCCL_NET,
            "finalized: mesh node {id:016x} stopped, no rdmesh thread left"
        );
    } else {
        warn!(
            NCCL_NET,
            "finalize: {} rdmesh thread(s) still running after {wait:?}: {} (the library stays loaded, so this is safe)",
            left.len(),
            left.join(", ")
        );
    }
    crate::log::clear_logger();
}

/// The names of this process's threads that rdmesh started (`rdmesh-*`).
pub fn rdmesh_threads() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("comm")).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| s.starts_with("rdmesh-"))
        .collect()
}

fn wait_for_threads(wait: Duration) -> Vec<String> {
    let start = Instant::now();
    loop {
        let t = rdmesh_threads();
        if t.is_empty() || start.elapsed() >= wait {
            return t;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Registers an object; returns the pointer NCCL gets.
pub fn register(o: Object) -> usize {
    registry::insert(o)
}

/// Looks a pointer up.
///
/// Errors: `ncclInternalError` naming `what` when it is not a live object.
pub fn lookup(key: usize, what: &str) -> Result<Object> {
    registry::get(key)
        .ok_or_else(|| PluginError::internal(format!("{what} {key:#x} is not a live rdmesh object (closed already, or never returned by rdmesh)")))
}

/// Removes a pointer; returns the object.
///
/// Errors: as [`lookup`].
pub fn unregister(key: usize, what: &str) -> Result<Object> {
    registry::remove(key)
        .ok_or_else(|| PluginError::internal(format!("{what} {key:#x} is not a live rdmesh object (closed already, or never returned by rdmesh)")))
}

/// Removes every request of comm `comm_id` (closing a comm with requests in flight: NCCL
/// never tests them again). Returns how many there were.
pub fn drop_requests_of(comm_id: u64) -> usize {
    let removed =
        registry::remove_where(|o| matches!(o, Object::Request(r) if r.comm_id == comm_id));
    removed.len()
}

/// Number of live objects of each kind: (contexts, comms, registrations, requests).
pub fn census() -> (usize, usize, usize, usize) {
    let mut c = (0, 0, 0, 0);
    registry::for_each(|o| match o {
        Object::Ctx(_) => c.0 += 1,
        Object::Listen(_) | Object::Send(_) | Object::Recv(_) => c.1 += 1,
        Object::Mr(_) => c.2 += 1,
        Object::Request(_) => c.3 += 1,
    });
    c
}
