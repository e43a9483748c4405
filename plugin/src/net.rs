//! The plugin's operations, independent of the ABI version: the exported tables
//! (`crate::export`) check and convert their C arguments and call these. NCCL's opaque
//! pointers are registry keys ([`crate::state`]); the bytes of NCCL's buffers are read and
//! written by the FFI layer through the closures and [`Completion`]s passed here.

use std::net::IpAddr;
use std::sync::Arc;

use rdmesh_host::mesh::{Buffer, Handle, RecvBuf, RecvSizes, Route, HANDLE_LEN};

use crate::abi::types::{ncclDebugLogger_t, NCCL_INIT, NCCL_NET, NCCL_PTR_CUDA, NCCL_PTR_HOST};
use crate::comm::{ListenComm, Mr, RecvC, ReqKind, Request, SendC};
use crate::device::{Properties, MAX_RECVS};
use crate::error::{PluginError, Result};
use crate::info;
use crate::state::{self, Ctx, Object, Plugin};

/// `init`: remembers the logger and takes a reference on the plugin. With `comm_id` (v11+),
/// returns a context key.
///
/// Errors: those of [`state::acquire`].
pub fn init(
    logger: ncclDebugLogger_t,
    comm_id: Option<u64>,
    traffic_class: i32,
) -> Result<Option<usize>> {
    crate::log::set_logger(logger);
    let p = state::acquire()?;
    let Some(comm_id) = comm_id else {
        return Ok(None);
    };
    info!(
        NCCL_INIT | NCCL_NET,
        "init for communicator {comm_id:#018x}, traffic class {traffic_class}, {} device(s)",
        p.devices.len()
    );
    Ok(Some(state::register(Object::Ctx(Arc::new(Ctx {
        comm_id,
        traffic_class,
    })))))
}

/// `finalize(ctx)`: drops the context's reference (the last stops everything).
///
/// Errors: `ncclInternalError` for an unknown context.
pub fn finalize(ctx: usize) -> Result<()> {
    match state::unregister(ctx, "context")? {
        Object::Ctx(c) => {
            info!(
                NCCL_INIT | NCCL_NET,
                "finalize for communicator {:#018x}", c.comm_id
            );
            state::release();
            Ok(())
        }
        other => {
            state::register(other);
            Err(PluginError::internal(format!("{ctx:#x} is not a context")))
        }
    }
}

fn check_ctx(ctx: Option<usize>) -> Result<()> {
    match ctx {
        None => Ok(()),
        Some(k) => match state::lookup(k, "context")? {
            Object::Ctx(_) => Ok(()),
            _ => Err(PluginError::internal(format!("{k:#x} is not a context"))),
        },
    }
}

/// `devices`: the number of devices.
///
/// Errors: not initialized.
pub fn devices() -> Result<i32> {
    Ok(state::current()?.devices.len() as i32)
}

fn device(p: &Plugin, dev: i32) -> Result<usize> {
    usize::try_from(dev)
        .ok()
        .filter(|d| *d < p.devices.len())
        .ok_or_else(|| {
            PluginError::internal(format!(
                "device {dev} does not exist (rdmesh has {} device(s))",
                p.devices.len()
            ))
        })
}

/// `getProperties(dev)`.
///
/// Errors: not initialized; an unknown device.
pub fn properties(dev: i32) -> Result<Properties> {
    let p = state::current()?;
    let d = device(&p, dev)?;
    Ok(p.devices[d].properties_for(p.node.single_buffer_receives()))
}

/// `listen(dev)`: the 128-byte handle and the listen comm's key. Never blocks.
///
/// Errors: not initialized; an unknown device or context.
pub fn listen(ctx: Option<usize>, dev: i32) -> Result<([u8; HANDLE_LEN], usize)> {
    check_ctx(ctx)?;
    let p = state::current()?;
    let d = device(&p, dev)?;
    let listener = p.node.listen()?;
    let bytes = listener.handle().to_bytes();
    let key = state::register(Object::Listen(Arc::new(ListenComm { listener, dev: d })));
    Ok((bytes, key))
}

fn link_text(p: &Plugin, local: IpAddr) -> String {
    match p.devices.iter().find(|d| d.ips.contains(&local)) {
        Some(d) => {
            let gid = match local {
                IpAddr::V4(v4) => v4.to_ipv6_mapped().to_string(),
                IpAddr::V6(v6) => v6.to_string(),
            };
            format!(
                "{}:{} GID {gid} port MTU {}",
                d.name.to_string_lossy(),
                d.port,
                d.mtu
            )
        }
        None => "device ?".into(),
    }
}

/// The per-connection INFO line: the route and the connection's lanes.
fn route_text(p: &Plugin, route: &Route, lanes: usize) -> String {
    let rails: Vec<String> = route
        .links
        .iter()
        .map(|l| {
            format!(
                "{} {} -> {} ({} Gb/s, path MTU {}, {})",
                l.netdev,
                l.local,
                l.remote,
                l.gbps,
                l.path_mtu,
                link_text(p, l.local)
            )
        })
        .collect();
    format!(
        "{} over {} rail(s), {lanes} lane(s): {}",
        if route.via.is_empty() {
            "direct".to_string()
        } else {
            format!("via relay {}", route.via.join(" -> "))
        },
        route.links.len(),
        rails.join(", ")
    )
}

/// `connect(dev, handle)`: `Ok(None)` while the handshake runs (call again with the same
/// handle), the send comm's key once up. Never blocks. The connection in progress is found
/// again by the handle's node id and listen id (not by the handle's address, which NCCL need
/// not keep); one listen handle thus has at most one connect in progress per process at a
/// time (NCCL uses one listen comm per connection; a reused listen comm connects in turn).
///
/// Errors: a handle that does not decode (`ncclInternalError`); the handshake's failure
/// (`ncclSystemError`: unreachable peer, timeout naming the addresses tried; `ncclInvalidUsage`
/// for an authentication failure).
pub fn connect(ctx: Option<usize>, dev: i32, handle: &[u8; HANDLE_LEN]) -> Result<Option<usize>> {
    check_ctx(ctx)?;
    let p = state::current()?;
    let d = device(&p, dev)?;
    let h = Handle::from_bytes(handle)?;
    let key = (h.node().id, h.listen_id());
    let mut pending = p.pending.lock().unwrap_or_else(|e| e.into_inner());
    let connector = pending.entry(key).or_insert_with(|| p.node.connect(&h));
    let polled = connector.poll();
    let comm = match polled {
        Ok(None) => return Ok(None),
        Ok(Some(c)) => c,
        Err(e) => {
            pending.remove(&key);
            return Err(e.into());
        }
    };
    pending.remove(&key);
    drop(pending);
    info!(
        NCCL_INIT | NCCL_NET,
        "send connection dev {d} {} -> node {} listen {} ({}): {}",
        p.devices[d].name.to_string_lossy(),
        h.node().id_hex(),
        h.listen_id(),
        h.node().addrs_text(),
        route_text(&p, comm.route(), comm.lanes())
    );
    Ok(Some(state::register(Object::Send(Arc::new(SendC {
        comm,
        id: state::next_id(),
    })))))
}

/// `accept(listenComm)`: `Ok(None)` until a connection arrives, then the receive comm's key.
/// Never blocks.
///
/// Errors: an unknown listen comm.
pub fn accept(listen: usize) -> Result<Option<usize>> {
    let l = match state::lookup(listen, "listen comm")? {
        Object::Listen(l) => l,
        _ => {
            return Err(PluginError::internal(format!(
                "{listen:#x} is not a listen comm"
            )))
        }
    };
    let Some(comm) = l.listener.accept()? else {
        return Ok(None);
    };
    let p = state::current()?;
    info!(
        NCCL_INIT | NCCL_NET,
        "receive connection dev {} {} <- node {}: {}",
        l.dev,
        p.devices[l.dev].name.to_string_lossy(),
        comm.route().peer,
        route_text(&p, comm.route(), comm.lanes())
    );
    Ok(Some(state::register(Object::Recv(Arc::new(RecvC {
        comm,
        id: state::next_id(),
    })))))
}

fn comm_id(key: usize) -> Result<u64> {
    match state::lookup(key, "comm")? {
        Object::Send(s) => Ok(s.id),
        Object::Recv(r) => Ok(r.id),
        _ => Err(PluginError::internal(format!(
            "{key:#x} is not a send or receive comm"
        ))),
    }
}

/// `regMr(comm, data, size, type)`: host memory only. With direct placement on
/// (`RDMESH_PLACEMENT=1`, the default) the range is also registered with every device of
/// the connection (a region per protection domain,
/// [`rdmesh_host::mesh::Lend::PerDevice`]): receives posted in it are placed by the sender's
/// RDMA WRITEs, and sends from it are WRITTEN from it (docs/mesh.md, direct placement); where
/// that fails the registration only checks ranges and transfers copy.
///
/// Errors: `ncclInvalidUsage` for CUDA (or any non-host) memory: rdmesh reports
/// `ptrSupport` = HOST, so NCCL stages GPU data through host buffers; an unknown comm.
pub fn reg_mr(comm: usize, addr: usize, size: usize, ty: i32) -> Result<usize> {
    comm_id(comm)?;
    if ty != NCCL_PTR_HOST {
        return Err(PluginError::usage(format!(
            "regMr of {size} bytes at {addr:#x} with pointer type {ty}{}: rdmesh supports host memory only (ptrSupport = NCCL_PTR_HOST, no GPUDirect); NCCL stages GPU buffers through host memory when the plugin reports HOST",
            if ty == NCCL_PTR_CUDA { " (CUDA)" } else { "" }
        )));
    }
    if addr == 0 && size > 0 {
        return Err(PluginError::internal(format!(
            "regMr of {size} bytes at NULL"
        )));
    }
    let make = || crate::export::memory::lend_registered(addr, size);
    let lend = rdmesh_host::mesh::Lend::PerDevice(&make);
    // Direct placement off (RDMESH_PLACEMENT=0): the range is only checked.
    let placement = state::current().is_ok_and(|p| p.config.mesh.placement);
    let reg = match state::lookup(comm, "comm")? {
        o @ (Object::Recv(_) | Object::Send(_)) if size > 0 && placement => {
            let r = match &o {
                Object::Recv(r) => r.comm.register(lend),
                Object::Send(s) => s.comm.register(lend),
                _ => unreachable!("matched above"),
            };
            match r {
                Ok(reg) => Some(reg),
                Err(e) => {
                    info!(
                        NCCL_NET,
                        "regMr of {size} bytes: no direct placement ({e}); transfers copy"
                    );
                    None
                }
            }
        }
        Object::Send(_) | Object::Recv(_) => None,
        _ => {
            return Err(PluginError::internal(format!(
                "{comm:#x} is not a send or receive comm"
            )))
        }
    };
    Ok(state::register(Object::Mr(Arc::new(Mr {
        addr,
        size,
        reg,
    }))))
}

/// `deregMr(comm, mhandle)`. The comm is not looked up: a registration does not depend on it,
/// and a caller may deregister after closing the comm.
///
/// Errors: an unknown registration.
pub fn dereg_mr(_comm: usize, mhandle: usize) -> Result<()> {
    match state::unregister(mhandle, "memory handle")? {
        Object::Mr(_) => Ok(()),
        other => {
            state::register(other);
            Err(PluginError::internal(format!(
                "{mhandle:#x} is not a memory handle"
            )))
        }
    }
}

/// The registration `mhandle` names (`None` for 0), checked to cover `[addr, addr + len)`.
fn check_mr(mhandle: usize, addr: usize, len: usize) -> Result<Option<Arc<Mr>>> {
    if mhandle == 0 {
        return Ok(None);
    }
    match state::lookup(mhandle, "memory handle")? {
        Object::Mr(m) if m.covers(addr, len) => Ok(Some(m)),
        Object::Mr(m) => Err(PluginError::internal(format!(
            "buffer {addr:#x} + {len} bytes lies outside its registration {:#x} + {} bytes",
            m.addr, m.size
        ))),
        _ => Err(PluginError::internal(format!(
            "{mhandle:#x} is not a memory handle"
        ))),
    }
}

/// `isend(sendComm, data, size, tag, mhandle)`: NCCL's `size` bytes at `addr` are lent to the
/// mesh until the request completes (zero copy, [`crate::export::memory`]). `Ok(None)`: the
/// comm has its maximum of requests in flight.
///
/// Errors: an unknown comm or registration, NULL data with a size, the connection's failure.
pub fn isend(
    comm: usize,
    addr: usize,
    size: usize,
    tag: i32,
    mhandle: usize,
) -> Result<Option<usize>> {
    let s = match state::lookup(comm, "send comm")? {
        Object::Send(s) => s,
        _ => {
            return Err(PluginError::internal(format!(
                "{comm:#x} is not a send comm"
            )))
        }
    };
    if addr == 0 && size > 0 {
        return Err(PluginError::internal(format!(
            "isend of {size} bytes from NULL"
        )));
    }
    let mr = check_mr(mhandle, addr, size)?;
    let reg = mr
        .as_ref()
        .and_then(|m| m.reg.as_ref())
        .map(|r| (r, addr as u64));
    let buf = crate::export::memory::lend(addr, size);
    match s.comm.isend_registered(&buf, 0, size, tag, reg) {
        Ok(None) => {
            buf.release();
            Ok(None)
        }
        Ok(Some(req)) => Ok(Some(state::register(Object::Request(Arc::new(Request {
            comm_id: s.id,
            kind: std::sync::Mutex::new(Some(ReqKind::Send { req, buf })),
        }))))),
        Err(e) => {
            buf.release();
            Err(e.into())
        }
    }
}

/// One buffer of an `irecv`: address, posted size, tag, memory handle.
#[derive(Debug, Clone, Copy)]
pub struct RecvSpec {
    /// NCCL's buffer.
    pub addr: usize,
    /// Posted size, bytes.
    pub size: usize,
    /// Tag.
    pub tag: i32,
    /// `mhandle` (0: none).
    pub mhandle: usize,
}

/// `irecv(recvComm, n, …)`: a receive into 1 to 8 buffers. `Ok(None)`: the comm has its
/// maximum of requests in flight.
///
/// Errors: an unknown comm or registration, `n` outside 1..=8, NULL data with a size, the
/// connection's failure.
pub fn irecv(comm: usize, bufs: &[RecvSpec]) -> Result<Option<usize>> {
    let r = match state::lookup(comm, "receive comm")? {
        Object::Recv(r) => r,
        _ => {
            return Err(PluginError::internal(format!(
                "{comm:#x} is not a receive comm"
            )))
        }
    };
    if bufs.is_empty() || bufs.len() > MAX_RECVS {
        return Err(PluginError::internal(format!(
            "irecv with n = {}: rdmesh reports maxRecvs = {MAX_RECVS}",
            bufs.len()
        )));
    }
    for b in bufs {
        if b.addr == 0 && b.size > 0 {
            return Err(PluginError::internal(format!(
                "irecv of {} bytes into NULL",
                b.size
            )));
        }
    }
    // Per buffer (at most MAX_RECVS, checked above): on the stack, no allocation.
    let mrs = bufs
        .iter()
        .map(|b| check_mr(b.mhandle, b.addr, b.size))
        .collect::<Result<heapless::Vec<_, MAX_RECVS>>>()?;
    // Buffers in memory registered with this connection are announced for placement.
    let regs: heapless::Vec<_, MAX_RECVS> = mrs
        .iter()
        .zip(bufs)
        .map(|(m, b)| {
            m.as_ref()
                .and_then(|m| m.reg.as_ref())
                .filter(|_| b.size > 0)
                .map(|reg| (reg, b.addr as u64))
        })
        .collect();
    let lent: heapless::Vec<Buffer, MAX_RECVS> = bufs
        .iter()
        .map(|b| crate::export::memory::lend(b.addr, b.size))
        .collect();
    let rb: heapless::Vec<RecvBuf, MAX_RECVS> = lent
        .iter()
        .zip(bufs)
        .map(|(l, b)| RecvBuf {
            buf: l.clone(),
            offset: 0,
            len: b.size,
            tag: b.tag,
        })
        .collect();
    let release = |lent: &[Buffer]| lent.iter().for_each(Buffer::release);
    match r.comm.irecv_registered(&rb, &regs) {
        Ok(None) => {
            release(&lent);
            Ok(None)
        }
        Ok(Some(req)) => Ok(Some(state::register(Object::Request(Arc::new(Request {
            comm_id: r.id,
            kind: std::sync::Mutex::new(Some(ReqKind::Recv { req, bufs: lent })),
        }))))),
        Err(e) => {
            release(&lent);
            Err(e.into())
        }
    }
}

/// `test(request)`: `Ok(None)` while in flight; once done the request is unregistered and its
/// sizes returned (one per buffer; the data is in NCCL's memory already).
///
/// Errors: an unknown request; the transfer's failure (the request is gone then too).
pub fn test(request: usize) -> Result<Option<RecvSizes>> {
    let r = match state::lookup(request, "request")? {
        Object::Request(r) => r,
        _ => {
            return Err(PluginError::internal(format!(
                "{request:#x} is not a request"
            )))
        }
    };
    match r.poll() {
        Ok(None) => Ok(None),
        Ok(Some(sizes)) => {
            let _ = state::unregister(request, "request");
            Ok(Some(sizes))
        }
        Err(e) => {
            let _ = state::unregister(request, "request");
            Err(e)
        }
    }
}

/// `closeSend` / `closeRecv` / `closeListen`: frees the comm and every request of it still in
/// flight (NCCL never tests them again). The mesh sends CLOSE to the peer.
///
/// Errors: an unknown comm, or one of another kind than `kind` names.
pub fn close(comm: usize, kind: &str) -> Result<()> {
    let o = state::unregister(comm, kind)?;
    let (id, ok) = match &o {
        Object::Send(s) => (Some(s.id), kind == "send comm"),
        Object::Recv(r) => (Some(r.id), kind == "receive comm"),
        Object::Listen(_) => (None, kind == "listen comm"),
        _ => (None, false),
    };
    if !ok {
        state::register(o);
        return Err(PluginError::internal(format!("{comm:#x} is not a {kind}")));
    }
    let stats = match &o {
        Object::Send(s) => Some(s.comm.placement_stats()),
        Object::Recv(r) => Some(r.comm.placement_stats()),
        _ => None,
    };
    if let Some(st) = stats.filter(|s| s.placed + s.sent_placed + s.copied + s.sent_copied > 0) {
        // the node's transport counters so far, next to the placement counters
        let (retx, timeouts) = state::current().map_or((0, 0), |p| {
            p.node.nic_counters().iter().fold((0, 0), |a, n| {
                (
                    a.0 + n.counters.retransmitted_packets,
                    a.1 + n.counters.ack_timeouts,
                )
            })
        });
        info!(
            NCCL_NET,
            "closing a {kind}: {} bytes placed directly and {} copied on receipt; {} bytes sent \
             as placed chunks ({} from registered memory) and {} in DATA frames; node: {retx} \
             packets retransmitted, {timeouts} ACK timeouts",
            st.placed,
            st.copied,
            st.sent_placed,
            st.sent_from_registration,
            st.sent_copied
        );
    }
    if let Some(id) = id {
        let n = state::drop_requests_of(id);
        if n > 0 {
            info!(NCCL_NET, "closing a {kind} with {n} request(s) in flight");
        }
    }
    drop(o);
    Ok(())
}
