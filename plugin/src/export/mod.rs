//! The FFI layer: the exported `ncclNetPlugin_v8` … `_v12` tables and the `extern "C"`
//! functions in them. Every function catches panics (none crosses into NCCL), checks its
//! pointers, converts its arguments and calls [`crate::net`]; an error is logged at WARN
//! level (subsystem NET) and returned as its `ncclResult_t`. This module (with [`memory`], NCCL's
//! buffers lent to the mesh) and `log`/`pin` are the only places with `unsafe`.

pub(crate) mod memory;
pub mod v10;
pub mod v11;
pub mod v12;
pub mod v8;
pub mod v9;

use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::abi::types::*;
use crate::error::{PluginError, Result};
use crate::net::{self, RecvSpec};
use crate::warn;

/// The plugin's name: what `NCCL_NET=rdmesh` matches (case-insensitively).
pub const NAME: &std::ffi::CStr = c"rdmesh";

/// Runs `f`, turning an error into its code (logged) and a panic into `ncclInternalError`.
pub(crate) fn guard(op: &str, f: impl FnOnce() -> Result<()>) -> ncclResult_t {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => NCCL_SUCCESS,
        Ok(Err(e)) => {
            warn!(NCCL_NET, "{op} failed: {e}");
            e.code
        }
        Err(p) => {
            let what = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown".into());
            warn!(
                NCCL_NET,
                "{op}: internal error (panic: {what}); please report it"
            );
            NCCL_INTERNAL_ERROR
        }
    }
}

/// Fails with `ncclInternalError` when `p` is NULL.
pub(crate) fn non_null<T>(p: *const T, what: &str) -> Result<()> {
    if p.is_null() {
        Err(PluginError::internal(format!("{what} is NULL")))
    } else {
        Ok(())
    }
}

/// Writes `v` through `out` (checked non-NULL by the caller).
pub(crate) fn put<T>(out: *mut T, v: T) {
    // SAFETY: callers check `out` for NULL; NCCL passes a valid, aligned out-parameter.
    unsafe { out.write(v) }
}

/// Fills the common part of every properties version.
macro_rules! fill_common {
    ($props:expr, $p:expr) => {{
        let p = &$p;
        $props.name = p.name as *mut std::ffi::c_char;
        $props.pci_path = p.pci_path as *mut std::ffi::c_char;
        $props.guid = p.guid;
        $props.ptr_support = p.ptr_support;
        $props.reg_is_global = p.reg_is_global;
        $props.speed = p.speed;
        $props.port = p.port;
        $props.latency = 0.0;
        $props.max_comms = p.max_comms;
        $props.max_recvs = p.max_recvs;
        $props.net_device_type = NCCL_NET_DEVICE_HOST;
        $props.net_device_version = NCCL_NET_DEVICE_INVALID_VERSION;
    }};
}
pub(crate) use fill_common;

pub(crate) unsafe extern "C" fn devices(ndev: *mut c_int) -> ncclResult_t {
    guard("devices", || {
        non_null(ndev, "ndev")?;
        let n = net::devices()?;
        put(ndev, n);
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn accept(
    listen_comm: *mut c_void,
    recv_comm: *mut *mut c_void,
    _recv_dev_comm: *mut *mut ncclNetDeviceHandle_t,
) -> ncclResult_t {
    guard("accept", || {
        non_null(recv_comm, "recvComm")?;
        put(recv_comm, std::ptr::null_mut());
        non_null(listen_comm, "listenComm")?;
        if let Some(k) = net::accept(listen_comm as usize)? {
            put(recv_comm, k as *mut c_void);
        }
        Ok(())
    })
}

/// `listen` for every version: writes the 128-byte handle and the listen comm.
pub(crate) fn listen_common(
    ctx: Option<*mut c_void>,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    guard("listen", || {
        non_null(listen_comm, "listenComm")?;
        put(listen_comm, std::ptr::null_mut());
        non_null(handle, "handle")?;
        if let Some(c) = ctx {
            non_null(c, "ctx")?;
        }
        let (bytes, key) = net::listen(ctx.map(|c| c as usize), dev)?;
        // SAFETY: NCCL's handle buffer holds NCCL_NET_HANDLE_MAXSIZE (128) bytes, and `bytes`
        // is exactly that long; the regions do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                handle as *mut u8,
                NCCL_NET_HANDLE_MAXSIZE,
            )
        };
        put(listen_comm, key as *mut c_void);
        Ok(())
    })
}

/// `connect` for every version: `*sendComm` stays NULL until the connection is up.
pub(crate) fn connect_common(
    ctx: Option<*mut c_void>,
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
) -> ncclResult_t {
    guard("connect", || {
        non_null(send_comm, "sendComm")?;
        put(send_comm, std::ptr::null_mut());
        non_null(handle, "handle")?;
        if let Some(c) = ctx {
            non_null(c, "ctx")?;
        }
        let mut bytes = [0u8; NCCL_NET_HANDLE_MAXSIZE];
        // SAFETY: NCCL's handle buffer holds 128 bytes (the peer's listen handle).
        unsafe {
            std::ptr::copy_nonoverlapping(
                handle as *const u8,
                bytes.as_mut_ptr(),
                NCCL_NET_HANDLE_MAXSIZE,
            )
        };
        if let Some(k) = net::connect(ctx.map(|c| c as usize), dev, &bytes)? {
            put(send_comm, k as *mut c_void);
        }
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn reg_mr(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ty: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    guard("regMr", || {
        non_null(mhandle, "mhandle")?;
        put(mhandle, std::ptr::null_mut());
        non_null(comm, "comm")?;
        let k = net::reg_mr(comm as usize, data as usize, size, ty)?;
        put(mhandle, k as *mut c_void);
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn reg_mr_dma_buf(
    comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    ty: c_int,
    _offset: u64,
    _fd: c_int,
    mhandle: *mut *mut c_void,
) -> ncclResult_t {
    guard("regMrDmaBuf", || {
        non_null(mhandle, "mhandle")?;
        put(mhandle, std::ptr::null_mut());
        non_null(comm, "comm")?;
        if ty != NCCL_PTR_HOST {
            return Err(PluginError::usage(
                "regMrDmaBuf: rdmesh does not support DMA-BUF or CUDA memory (ptrSupport = NCCL_PTR_HOST)",
            ));
        }
        let k = net::reg_mr(comm as usize, data as usize, size, ty)?;
        put(mhandle, k as *mut c_void);
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn dereg_mr(comm: *mut c_void, mhandle: *mut c_void) -> ncclResult_t {
    guard("deregMr", || {
        non_null(comm, "comm")?;
        non_null(mhandle, "mhandle")?;
        net::dereg_mr(comm as usize, mhandle as usize)
    })
}

/// `isend` for every version.
pub(crate) fn isend_common(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    guard("isend", || {
        non_null(request, "request")?;
        put(request, std::ptr::null_mut());
        non_null(send_comm, "sendComm")?;
        let r = net::isend(
            send_comm as usize,
            data as usize,
            size,
            tag,
            mhandle as usize,
        )?;
        if let Some(k) = r {
            put(request, k as *mut c_void);
        }
        Ok(())
    })
}

/// `irecv` for every version; `size_of(i)` reads the i-th posted size (`int` in v8,
/// `size_t` from v9).
pub(crate) fn irecv_common(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    size_of: impl Fn(usize) -> Result<usize>,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    guard("irecv", || {
        non_null(request, "request")?;
        // Always overwritten, also over NCCL_NET_OPTIONAL_RECV_COMPLETION (0x1).
        put(request, std::ptr::null_mut());
        non_null(recv_comm, "recvComm")?;
        let n = usize::try_from(n)
            .ok()
            .filter(|n| (1..=crate::device::MAX_RECVS).contains(n))
            .ok_or_else(|| {
                PluginError::internal(format!(
                    "irecv with n = {n}: rdmesh reports maxRecvs = {}",
                    crate::device::MAX_RECVS
                ))
            })?;
        non_null(data, "data")?;
        non_null(tags, "tags")?;
        // n ≤ MAX_RECVS (checked above): on the stack, no allocation per receive.
        let mut specs = heapless::Vec::<_, { crate::device::MAX_RECVS }>::new();
        for i in 0..n {
            // SAFETY: NCCL passes arrays of n entries for data, tags and (when non-NULL)
            // mhandles; i < n.
            let (addr, tag, mh) = unsafe {
                (
                    *data.add(i) as usize,
                    *tags.add(i),
                    if mhandles.is_null() {
                        0
                    } else {
                        *mhandles.add(i) as usize
                    },
                )
            };
            let spec = RecvSpec {
                addr,
                size: size_of(i)?,
                tag,
                mhandle: mh,
            };
            if specs.push(spec).is_err() {
                return Err(PluginError::internal("irecv: more buffers than maxRecvs"));
            }
        }
        if let Some(k) = net::irecv(recv_comm as usize, &specs)? {
            put(request, k as *mut c_void);
        }
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn iflush(
    recv_comm: *mut c_void,
    _n: c_int,
    _data: *mut *mut c_void,
    _sizes: *mut c_int,
    _mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    // Host memory only: the data is visible once `test` reported the receive done, so there is
    // nothing to flush; a NULL request tells NCCL there is nothing to wait for.
    guard("iflush", || {
        non_null(request, "request")?;
        put(request, std::ptr::null_mut());
        non_null(recv_comm, "recvComm")?;
        match crate::state::lookup(recv_comm as usize, "receive comm")? {
            crate::state::Object::Recv(_) => Ok(()),
            _ => Err(PluginError::internal(
                "iflush on something that is not a receive comm",
            )),
        }
    })
}

pub(crate) unsafe extern "C" fn test(
    request: *mut c_void,
    done: *mut c_int,
    sizes: *mut c_int,
) -> ncclResult_t {
    guard("test", || {
        non_null(done, "done")?;
        put(done, 0);
        non_null(request, "request")?;
        let Some(c) = net::test(request as usize)? else {
            return Ok(());
        };
        if !sizes.is_null() {
            for (i, s) in c.iter().enumerate() {
                // SAFETY: NCCL passes one int for a send and n ints for a receive of n
                // buffers (c has exactly that many entries).
                unsafe { sizes.add(i).write((*s).min(i32::MAX as usize) as c_int) };
            }
        }
        put(done, 1);
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn close_send(comm: *mut c_void) -> ncclResult_t {
    guard("closeSend", || {
        non_null(comm, "sendComm")?;
        net::close(comm as usize, "send comm")
    })
}

pub(crate) unsafe extern "C" fn close_recv(comm: *mut c_void) -> ncclResult_t {
    guard("closeRecv", || {
        non_null(comm, "recvComm")?;
        net::close(comm as usize, "receive comm")
    })
}

pub(crate) unsafe extern "C" fn close_listen(comm: *mut c_void) -> ncclResult_t {
    guard("closeListen", || {
        non_null(comm, "listenComm")?;
        net::close(comm as usize, "listen comm")
    })
}

pub(crate) unsafe extern "C" fn get_device_mr(
    _comm: *mut c_void,
    _mhandle: *mut c_void,
    dptr_mhandle: *mut *mut c_void,
) -> ncclResult_t {
    // Device offload only (netDeviceType HOST: NCCL does not call it); no device-side handle.
    guard("getDeviceMr", || {
        if !dptr_mhandle.is_null() {
            put(dptr_mhandle, std::ptr::null_mut());
        }
        Ok(())
    })
}

pub(crate) unsafe extern "C" fn irecv_consumed(
    _recv_comm: *mut c_void,
    _n: c_int,
    _request: *mut c_void,
) -> ncclResult_t {
    // Device offload only (netDeviceType HOST): nothing to release.
    NCCL_SUCCESS
}

pub(crate) unsafe extern "C" fn finalize(ctx: *mut c_void) -> ncclResult_t {
    guard("finalize", || {
        non_null(ctx, "ctx")?;
        net::finalize(ctx as usize)
    })
}

pub(crate) unsafe extern "C" fn set_net_attr(
    ctx: *mut c_void,
    attr: *mut ncclNetAttr_t,
) -> ncclResult_t {
    // Traffic hints are advisory; the mesh has no per-communicator tuning to apply them to.
    guard("setNetAttr", || {
        non_null(ctx, "ctx")?;
        non_null(attr, "netAttr")?;
        match crate::state::lookup(ctx as usize, "context")? {
            crate::state::Object::Ctx(_) => Ok(()),
            _ => Err(PluginError::internal(
                "setNetAttr on something that is not a context",
            )),
        }
    })
}

/// Reads `config->trafficClass` (-1 when `config` is NULL).
pub(crate) fn traffic_class(config: *mut ncclNetCommConfig_t) -> c_int {
    if config.is_null() {
        NCCL_NET_TRAFFIC_CLASS_UNDEF
    } else {
        // SAFETY: non-NULL config points at NCCL's ncclNetCommConfig_t.
        unsafe { (*config).traffic_class }
    }
}
