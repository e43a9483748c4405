//! Net ABI v9 (NCCL 2.24 – 2.25 pick it): `ncclNetProperties_v9_t` (104 bytes) and
//! `ncclNet_v9_t` (name + 19 function pointers, 160 bytes). Source: NVIDIA/nccl
//! `src/include/plugin/net/net_v9.h`; offsets from `reference/nccl-plugin.md` §1.4–1.5.
//!
//! New in v9: `forceFlush`, `vProps {int ndevs; int devs[4]}` (an array, not a pointer: the
//! mistake of one prior plugin), `maxP2pBytes`, `maxCollBytes`, `size_t` sizes in
//! `isend`/`irecv`, and `makeVDevice`.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use super::types::*;

/// `ncclNetProperties_v9_t` (also `_v10_t`, which has the same layout).
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v9_t {
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
}

const _: () = assert!(size_of::<ncclNetProperties_v9_t>() == 104);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, name) == 0);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, pci_path) == 8);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, guid) == 16);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, ptr_support) == 24);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, reg_is_global) == 28);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, force_flush) == 32);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, speed) == 36);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, port) == 40);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, latency) == 44);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, max_comms) == 48);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, max_recvs) == 52);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, net_device_type) == 56);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, net_device_version) == 60);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, v_props) == 64);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, max_p2p_bytes) == 88);
const _: () = assert!(offset_of!(ncclNetProperties_v9_t, max_coll_bytes) == 96);

/// `ncclNet_v9_t`.
#[repr(C)]
pub struct ncclNet_v9_t {
    /// `name`.
    pub name: *const c_char,
    /// `init(logFunction)`.
    pub init: Option<unsafe extern "C" fn(ncclDebugLogger_t) -> ncclResult_t>,
    /// `devices`.
    pub devices: DevicesFn,
    /// `getProperties`.
    pub get_properties:
        Option<unsafe extern "C" fn(c_int, *mut ncclNetProperties_v9_t) -> ncclResult_t>,
    /// `listen(dev, handle, listenComm)`.
    pub listen: Option<unsafe extern "C" fn(c_int, *mut c_void, *mut *mut c_void) -> ncclResult_t>,
    /// `connect(dev, handle, sendComm, sendDevComm)`.
    pub connect: Option<
        unsafe extern "C" fn(
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
    /// `isend` (`size_t` size).
    pub isend: IsendV9Fn,
    /// `irecv` (`size_t*` sizes).
    pub irecv: IrecvV9Fn,
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
    /// `makeVDevice(int* d, ncclNetVDeviceProps_v9_t* props)`; NULL disables NIC fusion.
    pub make_v_device:
        Option<unsafe extern "C" fn(*mut c_int, *mut ncclNetVDeviceProps_v9_t) -> ncclResult_t>,
}

// SAFETY: the table is immutable after construction; `name` points at a 'static C string.
unsafe impl Sync for ncclNet_v9_t {}

const _: () = assert!(size_of::<ncclNet_v9_t>() == 160);
const _: () = assert!(offset_of!(ncclNet_v9_t, name) == 0);
const _: () = assert!(offset_of!(ncclNet_v9_t, init) == 8);
const _: () = assert!(offset_of!(ncclNet_v9_t, devices) == 16);
const _: () = assert!(offset_of!(ncclNet_v9_t, get_properties) == 24);
const _: () = assert!(offset_of!(ncclNet_v9_t, listen) == 32);
const _: () = assert!(offset_of!(ncclNet_v9_t, connect) == 40);
const _: () = assert!(offset_of!(ncclNet_v9_t, accept) == 48);
const _: () = assert!(offset_of!(ncclNet_v9_t, reg_mr) == 56);
const _: () = assert!(offset_of!(ncclNet_v9_t, reg_mr_dma_buf) == 64);
const _: () = assert!(offset_of!(ncclNet_v9_t, dereg_mr) == 72);
const _: () = assert!(offset_of!(ncclNet_v9_t, isend) == 80);
const _: () = assert!(offset_of!(ncclNet_v9_t, irecv) == 88);
const _: () = assert!(offset_of!(ncclNet_v9_t, iflush) == 96);
const _: () = assert!(offset_of!(ncclNet_v9_t, test) == 104);
const _: () = assert!(offset_of!(ncclNet_v9_t, close_send) == 112);
const _: () = assert!(offset_of!(ncclNet_v9_t, close_recv) == 120);
const _: () = assert!(offset_of!(ncclNet_v9_t, close_listen) == 128);
const _: () = assert!(offset_of!(ncclNet_v9_t, get_device_mr) == 136);
const _: () = assert!(offset_of!(ncclNet_v9_t, irecv_consumed) == 144);
const _: () = assert!(offset_of!(ncclNet_v9_t, make_v_device) == 152);
