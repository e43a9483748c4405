//! Net ABI v11 (NCCL 2.28 – 2.29 pick it; PyTorch 2.11's NCCL 2.28.9 loads v11 at most):
//! `ncclNetProperties_v11_t` (112 bytes) and `ncclNet_v11_t` (name + 21 function pointers, 176
//! bytes). Source: NVIDIA/nccl `src/include/plugin/net/net_v11.h`;
//! `reference/nccl-plugin.md` §1.4–1.5.
//!
//! New in v11: `init` per communicator returning a context, which `listen`/`connect` take;
//! `finalize(ctx)`; `setNetAttr`; `maxMultiRequestSize` in the properties.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use super::types::*;

/// `ncclNetProperties_v11_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v11_t {
    /// `name`.
    pub name: *mut c_char,
    /// `pciPath`.
    pub pci_path: *mut c_char,
    /// `guid`.
    pub guid: u64,
    /// `ptrSupport`.
    pub ptr_support: c_int,
    /// `regIsGlobal`.
    pub reg_is_global: c_int,
    /// `forceFlush`.
    pub force_flush: c_int,
    /// `speed`, Mb/s.
    pub speed: c_int,
    /// `port`.
    pub port: c_int,
    /// `latency`, µs.
    pub latency: f32,
    /// `maxComms`.
    pub max_comms: c_int,
    /// `maxRecvs`.
    pub max_recvs: c_int,
    /// `netDeviceType`.
    pub net_device_type: ncclNetDeviceType,
    /// `netDeviceVersion`.
    pub net_device_version: c_int,
    /// `vProps`.
    pub v_props: ncclNetVDeviceProps_v9_t,
    /// `maxP2pBytes`.
    pub max_p2p_bytes: usize,
    /// `maxCollBytes`.
    pub max_coll_bytes: usize,
    /// `maxMultiRequestSize`.
    pub max_multi_request_size: c_int,
}

const _: () = assert!(size_of::<ncclNetProperties_v11_t>() == 112);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, name) == 0);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, pci_path) == 8);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, guid) == 16);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, ptr_support) == 24);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, reg_is_global) == 28);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, force_flush) == 32);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, speed) == 36);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, port) == 40);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, latency) == 44);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, max_comms) == 48);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, max_recvs) == 52);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, net_device_type) == 56);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, net_device_version) == 60);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, v_props) == 64);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, max_p2p_bytes) == 88);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, max_coll_bytes) == 96);
const _: () = assert!(offset_of!(ncclNetProperties_v11_t, max_multi_request_size) == 104);

/// `ncclNet_v11_t`: per-communicator `init` with a context, `finalize` and `setNetAttr`.
#[repr(C)]
pub struct ncclNet_v11_t {
    /// `name`.
    pub name: *const c_char,
    /// `init(void** ctx, uint64_t commId, ncclNetCommConfig_t* config, logFunction,
    /// profFunction)`.
    pub init: Option<
        unsafe extern "C" fn(
            *mut *mut c_void,
            u64,
            *mut ncclNetCommConfig_t,
            ncclDebugLogger_t,
            ncclProfilerCallback_t,
        ) -> ncclResult_t,
    >,
    /// `devices`.
    pub devices: DevicesFn,
    /// `getProperties`.
    pub get_properties:
        Option<unsafe extern "C" fn(c_int, *mut ncclNetProperties_v11_t) -> ncclResult_t>,
    /// `listen(ctx, dev, handle, listenComm)`.
    pub listen: Option<
        unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, *mut *mut c_void) -> ncclResult_t,
    >,
    /// `connect(ctx, dev, handle, sendComm, sendDevComm)`.
    pub connect: Option<
        unsafe extern "C" fn(
            *mut c_void,
            c_int,
            *mut c_void,
            *mut *mut c_void,
            *mut *mut ncclNetDeviceHandle_t,
        ) -> ncclResult_t,
    >,
    /// `accept`.
    pub accept: AcceptFn,
    /// `regMr`.
    pub reg_mr: RegMrFn,
    /// `regMrDmaBuf`.
    pub reg_mr_dma_buf: RegMrDmaBufFn,
    /// `deregMr`.
    pub dereg_mr: DeregMrFn,
    /// `isend` (with `phandle`).
    pub isend: IsendV10Fn,
    /// `irecv` (with `phandles`).
    pub irecv: IrecvV10Fn,
    /// `iflush`.
    pub iflush: IflushFn,
    /// `test`.
    pub test: TestFn,
    /// `closeSend`.
    pub close_send: CloseFn,
    /// `closeRecv`.
    pub close_recv: CloseFn,
    /// `closeListen`.
    pub close_listen: CloseFn,
    /// `getDeviceMr`.
    pub get_device_mr: GetDeviceMrFn,
    /// `irecvConsumed`.
    pub irecv_consumed: IrecvConsumedFn,
    /// `makeVDevice`; NULL disables NIC fusion.
    pub make_v_device:
        Option<unsafe extern "C" fn(*mut c_int, *mut ncclNetVDeviceProps_v9_t) -> ncclResult_t>,
    /// `finalize(ctx)`: called once per communicator, without a NULL check.
    pub finalize: CloseFn,
    /// `setNetAttr(ctx, ncclNetAttr_t*)`: traffic hints (optional).
    pub set_net_attr: Option<unsafe extern "C" fn(*mut c_void, *mut ncclNetAttr_t) -> ncclResult_t>,
}

// SAFETY: the table is immutable after construction; `name` points at a 'static C string.
unsafe impl Sync for ncclNet_v11_t {}

const _: () = assert!(size_of::<ncclNet_v11_t>() == 176);
const _: () = assert!(offset_of!(ncclNet_v11_t, name) == 0);
const _: () = assert!(offset_of!(ncclNet_v11_t, init) == 8);
const _: () = assert!(offset_of!(ncclNet_v11_t, devices) == 16);
const _: () = assert!(offset_of!(ncclNet_v11_t, get_properties) == 24);
const _: () = assert!(offset_of!(ncclNet_v11_t, listen) == 32);
const _: () = assert!(offset_of!(ncclNet_v11_t, connect) == 40);
const _: () = assert!(offset_of!(ncclNet_v11_t, accept) == 48);
const _: () = assert!(offset_of!(ncclNet_v11_t, reg_mr) == 56);
const _: () = assert!(offset_of!(ncclNet_v11_t, reg_mr_dma_buf) == 64);
const _: () = assert!(offset_of!(ncclNet_v11_t, dereg_mr) == 72);
const _: () = assert!(offset_of!(ncclNet_v11_t, isend) == 80);
const _: () = assert!(offset_of!(ncclNet_v11_t, irecv) == 88);
const _: () = assert!(offset_of!(ncclNet_v11_t, iflush) == 96);
const _: () = assert!(offset_of!(ncclNet_v11_t, test) == 104);
const _: () = assert!(offset_of!(ncclNet_v11_t, close_send) == 112);
const _: () = assert!(offset_of!(ncclNet_v11_t, close_recv) == 120);
const _: () = assert!(offset_of!(ncclNet_v11_t, close_listen) == 128);
const _: () = assert!(offset_of!(ncclNet_v11_t, get_device_mr) == 136);
const _: () = assert!(offset_of!(ncclNet_v11_t, irecv_consumed) == 144);
const _: () = assert!(offset_of!(ncclNet_v11_t, make_v_device) == 152);
const _: () = assert!(offset_of!(ncclNet_v11_t, finalize) == 160);
const _: () = assert!(offset_of!(ncclNet_v11_t, set_net_attr) == 168);
