//! Types and constants shared by every version of NCCL's net plugin ABI, with NVIDIA's x86-64
//! layouts. Source: NVIDIA/nccl `src/include/plugin/nccl_net.h`, `plugins/net/example/nccl/
//! {net.h,common.h,err.h,net_device.h}` (2.30.7), as summarized in
//! `reference/nccl-plugin.md` §1.3.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_ulong, c_void};
use std::mem::{offset_of, size_of};

/// `ncclResult_t`: a 4-byte C enum (`err.h`). Plugins return only the values below.
pub type ncclResult_t = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: ncclResult_t = 0;
/// `ncclUnhandledCudaError`.
pub const NCCL_UNHANDLED_CUDA_ERROR: ncclResult_t = 1;
/// `ncclSystemError`: a network or OS failure.
pub const NCCL_SYSTEM_ERROR: ncclResult_t = 2;
/// `ncclInternalError`: NCCL misused the API (bad pointer, unknown comm, bad count).
pub const NCCL_INTERNAL_ERROR: ncclResult_t = 3;
/// `ncclInvalidArgument`.
pub const NCCL_INVALID_ARGUMENT: ncclResult_t = 4;
/// `ncclInvalidUsage`: a user or configuration error.
pub const NCCL_INVALID_USAGE: ncclResult_t = 5;
/// `ncclRemoteError`.
pub const NCCL_REMOTE_ERROR: ncclResult_t = 6;

/// `ncclDebugLogLevel` values (`common.h`).
pub const NCCL_LOG_NONE: c_int = 0;
/// `NCCL_LOG_VERSION`.
pub const NCCL_LOG_VERSION: c_int = 1;
/// `NCCL_LOG_WARN`.
pub const NCCL_LOG_WARN: c_int = 2;
/// `NCCL_LOG_INFO`.
pub const NCCL_LOG_INFO: c_int = 3;
/// `NCCL_LOG_ABORT`.
pub const NCCL_LOG_ABORT: c_int = 4;
/// `NCCL_LOG_TRACE`.
pub const NCCL_LOG_TRACE: c_int = 5;

/// `ncclDebugLogSubSys` flag `NCCL_INIT`.
pub const NCCL_INIT: c_ulong = 1;
/// `NCCL_NET` subsystem flag (what `NCCL_DEBUG_SUBSYS=NET` selects).
pub const NCCL_NET: c_ulong = 16;
/// `NCCL_ENV` subsystem flag.
pub const NCCL_ENV: c_ulong = 128;

/// `ncclDebugLogger_t`: `void (*)(ncclDebugLogLevel level, unsigned long flags, const char*
/// file, int line, const char* fmt, ...)`. rdmesh always passes `fmt = "%s"` and one
/// preformatted string.
pub type ncclDebugLogger_t = Option<
    unsafe extern "C" fn(
        level: c_int,
        flags: c_ulong,
        file: *const c_char,
        line: c_int,
        fmt: *const c_char,
        ...
    ),
>;

/// `ncclProfilerCallback_t` (v10+ `init`): `ncclResult_t (*)(void** eHandle, int type, void*
/// pHandle, int64_t pluginId, void* extData)`. rdmesh does not call it.
pub type ncclProfilerCallback_t = Option<
    unsafe extern "C" fn(
        e_handle: *mut *mut c_void,
        ty: c_int,
        p_handle: *mut c_void,
        plugin_id: i64,
        ext_data: *mut c_void,
    ) -> ncclResult_t,
>;

/// `ncclNetDeviceType` (`net_device.h`), a 4-byte enum.
pub type ncclNetDeviceType = c_int;
/// `NCCL_NET_DEVICE_HOST`: the plugin runs on the host (no device offload).
pub const NCCL_NET_DEVICE_HOST: ncclNetDeviceType = 0;
/// `NCCL_NET_DEVICE_UNPACK`.
pub const NCCL_NET_DEVICE_UNPACK: ncclNetDeviceType = 1;
/// `NCCL_NET_DEVICE_INVALID_VERSION`.
pub const NCCL_NET_DEVICE_INVALID_VERSION: c_int = 0;

/// `ncclNetDeviceHandle_v7_t` … `_v12_t` (all the same, 32 bytes). Host-only plugins leave the
/// `connect`/`accept` out-pointer untouched.
#[repr(C)]
#[derive(Debug)]
pub struct ncclNetDeviceHandle_t {
    /// `netDeviceType`.
    pub net_device_type: ncclNetDeviceType,
    /// `netDeviceVersion`.
    pub net_device_version: c_int,
    /// `handle`.
    pub handle: *mut c_void,
    /// `size`, bytes.
    pub size: usize,
    /// `needsProxyProgress`.
    pub needs_proxy_progress: c_int,
}

/// `NCCL_NET_HANDLE_MAXSIZE`: bytes NCCL copies from `listen`'s handle to the peer.
pub const NCCL_NET_HANDLE_MAXSIZE: usize = 128;
/// `NCCL_PTR_HOST`.
pub const NCCL_PTR_HOST: c_int = 0x1;
/// `NCCL_PTR_CUDA`.
pub const NCCL_PTR_CUDA: c_int = 0x2;
/// `NCCL_PTR_DMABUF`.
pub const NCCL_PTR_DMABUF: c_int = 0x4;
/// `NCCL_NET_MAX_REQUESTS` (since 2.19): requests every comm must sustain.
pub const NCCL_NET_MAX_REQUESTS: usize = 32;
/// `NCCL_NET_OPTIONAL_RECV_COMPLETION`: the value NCCL stores in `*request` before an
/// `irecv` whose completion it may skip (v9+).
pub const NCCL_NET_OPTIONAL_RECV_COMPLETION: usize = 0x1;
/// `NCCL_MAX_NET_SIZE_BYTES`: 1 TiB, the upper bound of `maxP2pBytes`/`maxCollBytes`.
pub const NCCL_MAX_NET_SIZE_BYTES: usize = 1 << 40;
/// `NCCL_NET_ID_UNDEF` (v12 `railId`/`planeId`).
pub const NCCL_NET_ID_UNDEF: i16 = -1;
/// `NCCL_NET_TRAFFIC_CLASS_UNDEF`.
pub const NCCL_NET_TRAFFIC_CLASS_UNDEF: c_int = -1;

/// `ncclNetCommConfig_v10_t` / `_v11_t` / `_v12_t`: `{int trafficClass}` (-1 = unset).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetCommConfig_t {
    /// `trafficClass`.
    pub traffic_class: c_int,
}

/// `ncclNetVDeviceProps_v9_t` … `_v11_t`: `{int ndevs; int devs[4]}` (20 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetVDeviceProps_v9_t {
    /// `ndevs`.
    pub ndevs: c_int,
    /// `devs[NCCL_NET_MAX_DEVS_PER_NIC_V11]` (4).
    pub devs: [c_int; 4],
}

/// `ncclNetVDeviceProps_v12_t`: `{int ndevs; int devs[8]}` (36 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetVDeviceProps_v12_t {
    /// `ndevs`.
    pub ndevs: c_int,
    /// `devs[NCCL_NET_MAX_DEVS_PER_NIC]` (8).
    pub devs: [c_int; 8],
}

/// One direction of `ncclNetAttr_v11_t`: concurrency hints, int32 each.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetCommAttr_t {
    /// `maxConcurrentPeers`.
    pub max_concurrent_peers: i32,
    /// `minConcurrentPeers`.
    pub min_concurrent_peers: i32,
    /// `maxFlowsPerPeer`.
    pub max_flows_per_peer: i32,
    /// `minFlowsPerPeer`.
    pub min_flows_per_peer: i32,
}

/// `ncclNetAttr_v11_t` / `_v12_t` (`setNetAttr`'s traffic hints): send and receive hints, then
/// `op`, `algo`, `proto` as u32 (44 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ncclNetAttr_t {
    /// `sendCommAttr`.
    pub send_comm_attr: ncclNetCommAttr_t,
    /// `recvCommAttr`.
    pub recv_comm_attr: ncclNetCommAttr_t,
    /// `op`.
    pub op: u32,
    /// `algo`.
    pub algo: u32,
    /// `proto`.
    pub proto: u32,
}

const _: () = assert!(size_of::<ncclResult_t>() == 4);
const _: () = assert!(size_of::<ncclDebugLogger_t>() == 8);
const _: () = assert!(size_of::<ncclProfilerCallback_t>() == 8);
const _: () = assert!(size_of::<ncclNetDeviceHandle_t>() == 32);
const _: () = assert!(offset_of!(ncclNetDeviceHandle_t, net_device_type) == 0);
const _: () = assert!(offset_of!(ncclNetDeviceHandle_t, net_device_version) == 4);
const _: () = assert!(offset_of!(ncclNetDeviceHandle_t, handle) == 8);
const _: () = assert!(offset_of!(ncclNetDeviceHandle_t, size) == 16);
const _: () = assert!(offset_of!(ncclNetDeviceHandle_t, needs_proxy_progress) == 24);
const _: () = assert!(size_of::<ncclNetCommConfig_t>() == 4);
const _: () = assert!(offset_of!(ncclNetCommConfig_t, traffic_class) == 0);
const _: () = assert!(size_of::<ncclNetVDeviceProps_v9_t>() == 20);
const _: () = assert!(offset_of!(ncclNetVDeviceProps_v9_t, ndevs) == 0);
const _: () = assert!(offset_of!(ncclNetVDeviceProps_v9_t, devs) == 4);
const _: () = assert!(size_of::<ncclNetVDeviceProps_v12_t>() == 36);
const _: () = assert!(offset_of!(ncclNetVDeviceProps_v12_t, ndevs) == 0);
const _: () = assert!(offset_of!(ncclNetVDeviceProps_v12_t, devs) == 4);
const _: () = assert!(size_of::<ncclNetCommAttr_t>() == 16);
const _: () = assert!(size_of::<ncclNetAttr_t>() == 44);
const _: () = assert!(offset_of!(ncclNetAttr_t, send_comm_attr) == 0);
const _: () = assert!(offset_of!(ncclNetAttr_t, recv_comm_attr) == 16);
const _: () = assert!(offset_of!(ncclNetAttr_t, op) == 32);
const _: () = assert!(offset_of!(ncclNetAttr_t, algo) == 36);
const _: () = assert!(offset_of!(ncclNetAttr_t, proto) == 40);

/// `accept(listenComm, recvComm, recvDevComm)` (v7 – v12).
pub type AcceptFn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *mut *mut c_void,
        *mut *mut ncclNetDeviceHandle_t,
    ) -> ncclResult_t,
>;
/// `regMr(comm, data, size_t size, type, mhandle)` (v8 – v12).
pub type RegMrFn = Option<
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, c_int, *mut *mut c_void) -> ncclResult_t,
>;
/// `regMrDmaBuf(comm, data, size, type, offset, fd, mhandle)` (v6 – v12).
pub type RegMrDmaBufFn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *mut c_void,
        usize,
        c_int,
        u64,
        c_int,
        *mut *mut c_void,
    ) -> ncclResult_t,
>;
/// `deregMr(comm, mhandle)`.
pub type DeregMrFn = Option<unsafe extern "C" fn(*mut c_void, *mut c_void) -> ncclResult_t>;
/// `iflush(recvComm, n, data, int* sizes, mhandles, request)` (sizes stay `int*` through v12).
pub type IflushFn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        c_int,
        *mut *mut c_void,
        *mut c_int,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> ncclResult_t,
>;
/// `test(request, done, int* sizes)`.
pub type TestFn = Option<unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int) -> ncclResult_t>;
/// `closeSend` / `closeRecv` / `closeListen` / `finalize`: one pointer argument.
pub type CloseFn = Option<unsafe extern "C" fn(*mut c_void) -> ncclResult_t>;
/// `getDeviceMr(comm, mhandle, dptr_mhandle)`.
pub type GetDeviceMrFn =
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void, *mut *mut c_void) -> ncclResult_t>;
/// `irecvConsumed(recvComm, n, request)`.
pub type IrecvConsumedFn =
    Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> ncclResult_t>;
/// `devices(int* ndev)`.
pub type DevicesFn = Option<unsafe extern "C" fn(*mut c_int) -> ncclResult_t>;
/// `isend(sendComm, data, size_t size, tag, mhandle, request)` (v9).
pub type IsendV9Fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *mut c_void,
        usize,
        c_int,
        *mut c_void,
        *mut *mut c_void,
    ) -> ncclResult_t,
>;
/// `irecv(recvComm, n, data, size_t* sizes, tags, mhandles, request)` (v9).
pub type IrecvV9Fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        c_int,
        *mut *mut c_void,
        *mut usize,
        *mut c_int,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> ncclResult_t,
>;
/// `isend(sendComm, data, size_t size, tag, mhandle, phandle, request)` (v10 – v12).
pub type IsendV10Fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *mut c_void,
        usize,
        c_int,
        *mut c_void,
        *mut c_void,
        *mut *mut c_void,
    ) -> ncclResult_t,
>;
/// `irecv(recvComm, n, data, size_t* sizes, tags, mhandles, phandles, request)` (v10 – v12).
pub type IrecvV10Fn = Option<
    unsafe extern "C" fn(
        *mut c_void,
        c_int,
        *mut *mut c_void,
        *mut usize,
        *mut c_int,
        *mut *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> ncclResult_t,
>;
