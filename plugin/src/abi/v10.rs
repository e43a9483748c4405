//! Net ABI v10 (NCCL 2.26 – 2.27 pick it): `ncclNetProperties_v10_t` (the v9 layout, 104
//! bytes) and `ncclNet_v10_t` (name + 19 function pointers, 160 bytes). Source: NVIDIA/nccl
//! `src/include/plugin/net/net_v10.h`; `reference/nccl-plugin.md` §1.4–1.5.
//!
//! New in v10: `init(logger, profiler)`, `connect(dev, config, handle, …)` with the traffic
//! class per connect, and profiler handles (`phandle`) in `isend`/`irecv`.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use super::types::*;
pub use super::v9::ncclNetProperties_v9_t as ncclNetProperties_v10_t;

/// `ncclNet_v10_t`.
#[repr(C)]
pub struct ncclNet_v10_t {
    /// `name`.
    pub name: *const c_char,
    /// `init(logFunction, profFunction)`.
    pub init:
        Option<unsafe extern "C" fn(ncclDebugLogger_t, ncclProfilerCallback_t) -> ncclResult_t>,
    /// `devices`.
    pub devices: DevicesFn,
    /// `getProperties`.
    pub get_properties:
        Option<unsafe extern "C" fn(c_int, *mut ncclNetProperties_v10_t) -> ncclResult_t>,
    /// `listen(dev, handle, listenComm)`.
    pub listen: Option<unsafe extern "C" fn(c_int, *mut c_void, *mut *mut c_void) -> ncclResult_t>,
    /// `connect(dev, config, handle, sendComm, sendDevComm)`.
    pub connect: Option<
        unsafe extern "C" fn(
            c_int,
            *mut ncclNetCommConfig_t,
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
    /// `makeVDevice(int* d, ncclNetVDeviceProps_v10_t* props)`; NULL disables NIC fusion.
    pub make_v_device:
        Option<unsafe extern "C" fn(*mut c_int, *mut ncclNetVDeviceProps_v9_t) -> ncclResult_t>,
}

// SAFETY: the table is immutable after construction; `name` points at a 'static C string.
unsafe impl Sync for ncclNet_v10_t {}

const _: () = assert!(size_of::<ncclNet_v10_t>() == 160);
const _: () = assert!(offset_of!(ncclNet_v10_t, name) == 0);
const _: () = assert!(offset_of!(ncclNet_v10_t, init) == 8);
const _: () = assert!(offset_of!(ncclNet_v10_t, devices) == 16);
const _: () = assert!(offset_of!(ncclNet_v10_t, get_properties) == 24);
const _: () = assert!(offset_of!(ncclNet_v10_t, listen) == 32);
const _: () = assert!(offset_of!(ncclNet_v10_t, connect) == 40);
const _: () = assert!(offset_of!(ncclNet_v10_t, accept) == 48);
const _: () = assert!(offset_of!(ncclNet_v10_t, reg_mr) == 56);
const _: () = assert!(offset_of!(ncclNet_v10_t, reg_mr_dma_buf) == 64);
const _: () = assert!(offset_of!(ncclNet_v10_t, dereg_mr) == 72);
const _: () = assert!(offset_of!(ncclNet_v10_t, isend) == 80);
const _: () = assert!(offset_of!(ncclNet_v10_t, irecv) == 88);
const _: () = assert!(offset_of!(ncclNet_v10_t, iflush) == 96);
const _: () = assert!(offset_of!(ncclNet_v10_t, test) == 104);
const _: () = assert!(offset_of!(ncclNet_v10_t, close_send) == 112);
const _: () = assert!(offset_of!(ncclNet_v10_t, close_recv) == 120);
const _: () = assert!(offset_of!(ncclNet_v10_t, close_listen) == 128);
const _: () = assert!(offset_of!(ncclNet_v10_t, get_device_mr) == 136);
const _: () = assert!(offset_of!(ncclNet_v10_t, irecv_consumed) == 144);
const _: () = assert!(offset_of!(ncclNet_v10_t, make_v_device) == 152);
