//! Net ABI v8 (NCCL 2.20 – 2.23 pick it; later NCCLs still load it): `ncclNetProperties_v8_t`
//! (64 bytes) and `ncclNet_v8_t` (name + 18 function pointers, 152 bytes). Source: NVIDIA/nccl
//! `src/include/plugin/net/net_v8.h`; offsets from `reference/nccl-plugin.md` §1.4–1.5.
//!
//! v8 differences from later versions: no `forceFlush`/`vProps`/`maxP2pBytes`/`maxCollBytes`,
//! `isend` takes an `int` size and `irecv` `int*` sizes, no `makeVDevice`.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};

use super::types::*;

/// `ncclNetProperties_v8_t`.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetProperties_v8_t {
    /// `name`: for logs.
    pub name: *mut c_char,
    /// `pciPath`: the `/sys` device directory, NULL for a virtual NIC.
    pub pci_path: *mut c_char,
    /// `guid`: with `port`, identifies a fabric port.
    pub guid: u64,
    /// `ptrSupport`: `NCCL_PTR_*` bits.
    pub ptr_support: c_int,
    /// `regIsGlobal`.
    pub reg_is_global: c_int,
    /// `speed`, Mb/s.
    pub speed: c_int,
    /// `port`.
    pub port: c_int,
    /// `latency`, µs (0: NCCL's default).
    pub latency: f32,
    /// `maxComms`.
    pub max_comms: c_int,
    /// `maxRecvs`: largest grouped receive.
    pub max_recvs: c_int,
    /// `netDeviceType`.
    pub net_device_type: ncclNetDeviceType,
    /// `netDeviceVersion`.
    pub net_device_version: c_int,
}

const _: () = assert!(size_of::<ncclNetProperties_v8_t>() == 64);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, name) == 0);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, pci_path) == 8);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, guid) == 16);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, ptr_support) == 24);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, reg_is_global) == 28);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, speed) == 32);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, port) == 36);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, latency) == 40);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, max_comms) == 44);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, max_recvs) == 48);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, net_device_type) == 52);
const _: () = assert!(offset_of!(ncclNetProperties_v8_t, net_device_version) == 56);

/// `ncclNet_v8_t`.
#[repr(C)]
pub struct ncclNet_v8_t {
    /// `name`: what `NCCL_NET` is matched against.
    pub name: *const c_char,
    /// `init(logFunction)`.
    pub init: Option<unsafe extern "C" fn(ncclDebugLogger_t) -> ncclResult_t>,
    /// `devices(int* ndev)`.
    pub devices: Option<unsafe extern "C" fn(*mut c_int) -> ncclResult_t>,
    /// `getProperties(dev, props)`.
    pub get_properties:
        Option<unsafe extern "C" fn(c_int, *mut ncclNetProperties_v8_t) -> ncclResult_t>,
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
    /// `accept(listenComm, recvComm, recvDevComm)`.
    pub accept: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *mut *mut c_void,
            *mut *mut ncclNetDeviceHandle_t,
        ) -> ncclResult_t,
    >,
    /// `regMr(comm, data, size_t size, type, mhandle)`.
    pub reg_mr: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *mut c_void,
            usize,
            c_int,
            *mut *mut c_void,
        ) -> ncclResult_t,
    >,
    /// `regMrDmaBuf(comm, data, size, type, offset, fd, mhandle)`.
    pub reg_mr_dma_buf: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *mut c_void,
            usize,
            c_int,
            u64,
            c_int,
            *mut *mut c_void,
        ) -> ncclResult_t,
    >,
    /// `deregMr(comm, mhandle)`.
    pub dereg_mr: Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> ncclResult_t>,
    /// `isend(sendComm, data, int size, tag, mhandle, request)`.
    pub isend: Option<
        unsafe extern "C" fn(
            *mut c_void,
            *mut c_void,
            c_int,
            c_int,
            *mut c_void,
            *mut *mut c_void,
        ) -> ncclResult_t,
    >,
    /// `irecv(recvComm, n, data, int* sizes, tags, mhandles, request)`.
    pub irecv: Option<
        unsafe extern "C" fn(
            *mut c_void,
            c_int,
            *mut *mut c_void,
            *mut c_int,
            *mut c_int,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> ncclResult_t,
    >,
    /// `iflush(recvComm, n, data, int* sizes, mhandles, request)`.
    pub iflush: Option<
        unsafe extern "C" fn(
            *mut c_void,
            c_int,
            *mut *mut c_void,
            *mut c_int,
            *mut *mut c_void,
            *mut *mut c_void,
        ) -> ncclResult_t,
    >,
    /// `test(request, done, sizes)`.
    pub test: Option<unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int) -> ncclResult_t>,
    /// `closeSend(sendComm)`.
    pub close_send: Option<unsafe extern "C" fn(*mut c_void) -> ncclResult_t>,
    /// `closeRecv(recvComm)`.
    pub close_recv: Option<unsafe extern "C" fn(*mut c_void) -> ncclResult_t>,
    /// `closeListen(listenComm)`.
    pub close_listen: Option<unsafe extern "C" fn(*mut c_void) -> ncclResult_t>,
    /// `getDeviceMr(comm, mhandle, dptr_mhandle)`.
    pub get_device_mr:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> ncclResult_t>,
    /// `irecvConsumed(recvComm, n, request)`.
    pub irecv_consumed:
        Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> ncclResult_t>,
}

// SAFETY: the table is immutable after construction; `name` points at a 'static C string.
unsafe impl Sync for ncclNet_v8_t {}

const _: () = assert!(size_of::<ncclNet_v8_t>() == 152);
const _: () = assert!(offset_of!(ncclNet_v8_t, name) == 0);
const _: () = assert!(offset_of!(ncclNet_v8_t, init) == 8);
const _: () = assert!(offset_of!(ncclNet_v8_t, devices) == 16);
const _: () = assert!(offset_of!(ncclNet_v8_t, get_properties) == 24);
const _: () = assert!(offset_of!(ncclNet_v8_t, listen) == 32);
const _: () = assert!(offset_of!(ncclNet_v8_t, connect) == 40);
const _: () = assert!(offset_of!(ncclNet_v8_t, accept) == 48);
const _: () = assert!(offset_of!(ncclNet_v8_t, reg_mr) == 56);
const _: () = assert!(offset_of!(ncclNet_v8_t, reg_mr_dma_buf) == 64);
const _: () = assert!(offset_of!(ncclNet_v8_t, dereg_mr) == 72);
const _: () = assert!(offset_of!(ncclNet_v8_t, isend) == 80);
const _: () = assert!(offset_of!(ncclNet_v8_t, irecv) == 88);
const _: () = assert!(offset_of!(ncclNet_v8_t, iflush) == 96);
const _: () = assert!(offset_of!(ncclNet_v8_t, test) == 104);
const _: () = assert!(offset_of!(ncclNet_v8_t, close_send) == 112);
const _: () = assert!(offset_of!(ncclNet_v8_t, close_recv) == 120);
const _: () = assert!(offset_of!(ncclNet_v8_t, close_listen) == 128);
const _: () = assert!(offset_of!(ncclNet_v8_t, get_device_mr) == 136);
const _: () = assert!(offset_of!(ncclNet_v8_t, irecv_consumed) == 144);
