//! `ncclNetPlugin_v12`: the v12 table (NCCL 2.30 chooses it).

use std::ffi::c_int;

use super::*;
use crate::abi::v12::{ncclNetProperties_v12_t, ncclNet_v12_t};

unsafe extern "C" fn get_properties(
    dev: c_int,
    props: *mut ncclNetProperties_v12_t,
) -> ncclResult_t {
    guard("getProperties", || {
        non_null(props, "props")?;
        let p = net::properties(dev)?;
        // SAFETY: NCCL passes a valid ncclNetProperties_v12_t to fill.
        let props = unsafe { &mut *props };
        fill_common!(props, p);
        props.force_flush = 0;
        props.v_props = ncclNetVDeviceProps_v12_t {
            ndevs: 1,
            devs: [p.dev, 0, 0, 0, 0, 0, 0, 0],
        };
        props.max_p2p_bytes = p.max_bytes;
        props.max_coll_bytes = p.max_bytes;
        props.max_multi_request_size = 1;
        props.rail_id = NCCL_NET_ID_UNDEF;
        props.plane_id = NCCL_NET_ID_UNDEF;
        Ok(())
    })
}

/// The v12 table (the v11 functions with the v12 properties).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static ncclNetPlugin_v12: ncclNet_v12_t = ncclNet_v12_t {
    name: NAME.as_ptr(),
    init: Some(super::v11::init),
    devices: Some(devices),
    get_properties: Some(get_properties),
    listen: Some(super::v11::listen),
    connect: Some(super::v11::connect),
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
