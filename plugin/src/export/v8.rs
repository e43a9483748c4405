//! `ncclNetPlugin_v8`: the v8 table (NCCL 2.20 – 2.23 choose it).

use std::ffi::{c_int, c_void};

use super::*;
use crate::abi::v8::{ncclNetProperties_v8_t, ncclNet_v8_t};

unsafe extern "C" fn init(logger: ncclDebugLogger_t) -> ncclResult_t {
    guard("init", || {
        net::init(logger, None, NCCL_NET_TRAFFIC_CLASS_UNDEF).map(|_| ())
    })
}

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v8_t,
) -> ncclResult_t {
    guard("getProperties", || {
        non_null(props, "props")?;
        let p = net::properties(dev)?;
        // SAFETY: NCCL passes a valid ncclNetProperties_v8_t to fill.
        let props = unsafe { &mut *props };
        fill_common!(props, p);
        Ok(())
    })
}

unsafe extern "C" fn listen(
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    listen_common(None, dev, handle, listen_comm)
}

unsafe extern "C" fn connect(
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    _send_dev_comm: *mut *mut ncclNetDeviceHandle_t,
) -> ncclResult_t {
    connect_common(None, dev, handle, send_comm)
}

unsafe extern "C" fn isend(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: c_int,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    if size < 0 {
        if !request.is_null() {
            put(request, std::ptr::null_mut());
        }
        return guard("isend", || {
            Err(PluginError::internal(format!("isend of {size} bytes")))
        });
    }
    isend_common(send_comm, data, size as usize, tag, mhandle, request)
}

unsafe extern "C" fn irecv(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut c_int,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    let size_of = |i: usize| -> Result<usize> {
        non_null(sizes, "sizes")?;
        // SAFETY: NCCL passes n sizes; irecv_common calls this for i < n only.
        let s = unsafe { *sizes.add(i) };
        usize::try_from(s).map_err(|_| PluginError::internal(format!("irecv size {s}")))
    };
    irecv_common(recv_comm, n, data, size_of, tags, mhandles, request)
}

/// The v8 table.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v8: ncclNet_v8_t = ncclNet_v8_t {
    name: NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(listen),
    connect: Some(connect),
    accept: Some(accept),
    reg_mr: Some(reg_mr),
    reg_mr_dma_buf: Some(reg_mr_dma_buf),
    dereg_mr: Some(dereg_mr),
    isend: Some(isend),
    irecv: Some(irecv),
    iflush: Some(iflush),
    test: Some(test),
    close_send: Some(close_send),
    close_recv: Some(close_recv),
    close_listen: Some(close_listen),
    get_device_mr: Some(get_device_mr),
    irecv_consumed: Some(irecv_consumed),
};
