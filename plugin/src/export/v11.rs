//! `ncclNetPlugin_v11`: the v11 table (NCCL 2.28 – 2.29 choose it; PyTorch 2.11's NCCL 2.28.9).

use std::ffi::{c_int, c_void};

use super::*;
use crate::abi::v11::{ncclNetProperties_v11_t, ncclNet_v11_t};

/// Per-communicator `init` (v11, v12): returns a context in `*ctx`.
pub(crate) unsafe extern "C" fn init(
    ctx: *mut *mut c_void,
    comm_id: u64,
    config: *mut ncclNetCommConfig_t,
    logger: ncclDebugLogger_t,
    _prof: ncclProfilerCallback_t,
) -> ncclResult_t {
    guard("init", || {
        non_null(ctx, "ctx")?;
        put(ctx, std::ptr::null_mut());
        let k = net::init(logger, Some(comm_id), traffic_class(config))?;
        put(ctx, k.unwrap_or(0) as *mut c_void);
        Ok(())
    })
}

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v11_t,
) -> ncclResult_t {
    guard("getProperties", || {
        non_null(props, "props")?;
        let p = net::properties(dev)?;
        // SAFETY: NCCL passes a valid ncclNetProperties_v11_t to fill.
        let props = unsafe { &mut *props };
        fill_common!(props, p);
        props.force_flush = 0;
        props.v_props = ncclNetVDeviceProps_v9_t {
            ndevs: 1,
            devs: [p.dev, 0, 0, 0],
        };
        props.max_p2p_bytes = p.max_bytes;
        props.max_coll_bytes = p.max_bytes;
        props.max_multi_request_size = 1;
        Ok(())
    })
}

/// `listen(ctx, dev, handle, listenComm)` (v11, v12).
pub(crate) unsafe extern "C" fn listen(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    listen_comm: *mut *mut c_void,
) -> ncclResult_t {
    listen_common(Some(ctx), dev, handle, listen_comm)
}

/// `connect(ctx, dev, handle, sendComm, sendDevComm)` (v11, v12).
pub(crate) unsafe extern "C" fn connect(
    ctx: *mut c_void,
    dev: c_int,
    handle: *mut c_void,
    send_comm: *mut *mut c_void,
    _send_dev_comm: *mut *mut ncclNetDeviceHandle_t,
) -> ncclResult_t {
    connect_common(Some(ctx), dev, handle, send_comm)
}

/// The v11 table. `makeVDevice` is NULL (no NIC fusion).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v11: ncclNet_v11_t = ncclNet_v11_t {
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
    isend: Some(super::v10::isend),
    irecv: Some(super::v10::irecv),
    iflush: Some(iflush),
    test: Some(test),
    close_send: Some(close_send),
    close_recv: Some(close_recv),
    close_listen: Some(close_listen),
    get_device_mr: Some(get_device_mr),
    irecv_consumed: Some(irecv_consumed),
    make_v_device: None,
    finalize: Some(finalize),
    set_net_attr: Some(set_net_attr),
};
