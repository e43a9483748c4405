//! `ncclNetPlugin_v9`: the v9 table (NCCL 2.24 – 2.25 choose it).

use std::ffi::{c_int, c_void};

use super::*;
use crate::abi::v9::{ncclNetProperties_v9_t, ncclNet_v9_t};

unsafe extern "C" fn init(logger: ncclDebugLogger_t) -> ncclResult_t {
    guard("init", || {
        net::init(logger, None, NCCL_NET_TRAFFIC_CLASS_UNDEF).map(|_| ())
    })
}

/// Fills a v9/v10 properties struct.
pub(crate) fn fill_v9(dev: c_int, props: *mut ncclNetProperties_v9_t) -> ncclResult_t {
    guard("getProperties", || {
        non_null(props, "props")?;
        let p = net::properties(dev)?;
        // SAFETY: NCCL passes a valid ncclNetProperties_v9_t (or _v10_t, the same layout).
        let props = unsafe { &mut *props };
        fill_common!(props, p);
        props.force_flush = 0;
        props.v_props = ncclNetVDeviceProps_v9_t {
            ndevs: 1,
            devs: [p.dev, 0, 0, 0],
        };
        props.max_p2p_bytes = p.max_bytes;
        props.max_coll_bytes = p.max_bytes;
        Ok(())
    })
}

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v9_t,
) -> ncclResult_t {
    fill_v9(dev, props)
}

pub(crate) unsafe extern "C" fn listen(
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
    size: usize,
    tag: c_int,
    mhandle: *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    isend_common(send_comm, data, size, tag, mhandle, request)
}

/// `irecv` with `size_t` sizes (v9 – v12).
pub(crate) fn irecv_sized(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    let size_of = |i: usize| -> Result<usize> {
        non_null(sizes, "sizes")?;
        // SAFETY: NCCL passes n sizes; irecv_common calls this for i < n only.
        Ok(unsafe { *sizes.add(i) })
    };
    irecv_common(recv_comm, n, data, size_of, tags, mhandles, request)
}

unsafe extern "C" fn irecv(
    recv_comm: *mut c_void,
    n: c_int,
    data: *mut *mut c_void,
    sizes: *mut usize,
    tags: *mut c_int,
    mhandles: *mut *mut c_void,
    request: *mut *mut c_void,
) -> ncclResult_t {
    irecv_sized(recv_comm, n, data, sizes, tags, mhandles, request)
}

/// The v9 table. `makeVDevice` is NULL: no NIC fusion (the mesh already stripes over every
/// NIC that reaches a peer).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v9: ncclNet_v9_t = ncclNet_v9_t {
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
    make_v_device: None,
};
