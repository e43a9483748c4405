//! `ncclNetPlugin_v10`: the v10 table (NCCL 2.26 – 2.27 choose it).

use std::ffi::{c_int, c_void};

use super::*;
use crate::abi::v10::{ncclNetProperties_v10_t, ncclNet_v10_t};

unsafe extern "C" fn init(
    logger: ncclDebugLogger_t,
    _prof: ncclProfilerCallback_t,
) -> ncclResult_t {
    guard("init", || {
        net::init(logger, None, NCCL_NET_TRAFFIC_CLASS_UNDEF).map(|_| ())
    })
}

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v10_t,
) -> ncclResult_t {
    super::v9::fill_v9(dev, props)
}

unsafe extern "C" fn connect(
    dev: c_int,
    config: *mut ncclNetCommConfig_t,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    _send_dev_comm: *mut *mut ncclNetDeviceHandle_t,
) -> ncclResult_t {
    let _ = traffic_class(config);
    connect_common(None, dev, handle, send_comm)
}

/// `isend` with a profiler handle (v10 – v12).
pub(crate) unsafe extern "C" fn isend(
    send_comm: *mut c_void,
    data: *mut c_void,
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    _phandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    isend_common(send_comm, data, size, tag, mhandle, request)
}

/// `irecv` with profiler handles (v10 – v12).
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe extern "C" fn irecv(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    _phandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    super::v9::irecv_sized(recv_comm, n, data, sizes, tags, mhandles, request)
}

/// The v10 table.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v10: ncclNet_v10_t = ncclNet_v10_t {
    name: NAME.as_ptr(),
    init: Some(init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(super::v9::listen),
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
    make_v_device: None,
};
