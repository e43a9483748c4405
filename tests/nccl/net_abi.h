/*
 * NCCL net plugin ABI, versions 8 to 12, as the NCCL harness (tests/nccl/harness.c) sees it.
 *
 * Declared here on purpose, independently of the plugin's Rust declarations (plugin/src/abi),
 * so that a layout mistake on either side shows up as a failing harness instead of being
 * shared by both. Source of every layout: NVIDIA/nccl src/include/plugin/net/net_v{8..12}.h and
 * net_device.h (x86-64 offsets as summarised in the project's nccl-plugin reference, §1.3-§1.5);
 * every size and offset is asserted below.
 *
 * Names are the harness's own (hx_ = "harness"); each says which NCCL member it mirrors.
 */
#ifndef RDMESH_TESTS_NCCL_NET_ABI_H
#define RDMESH_TESTS_NCCL_NET_ABI_H

#include <stddef.h>
#include <stdint.h>

/* ncclResult_t: a 4-byte C enum. */
typedef int hx_result;
#define HX_SUCCESS 0
#define HX_UNHANDLED_CUDA_ERROR 1
#define HX_SYSTEM_ERROR 2
#define HX_INTERNAL_ERROR 3
#define HX_INVALID_ARGUMENT 4
#define HX_INVALID_USAGE 5
#define HX_REMOTE_ERROR 6

/* NCCL_NET_HANDLE_MAXSIZE: the listen handle NCCL copies to the peer, bytes. */
#define HX_HANDLE_MAXSIZE 128
/* NCCL_PTR_HOST / NCCL_PTR_CUDA / NCCL_PTR_DMABUF (ptrSupport bits, regMr type). */
#define HX_PTR_HOST 0x1
#define HX_PTR_CUDA 0x2
#define HX_PTR_DMABUF 0x4
/* NCCL_NET_MAX_REQUESTS: requests every send/recv comm must sustain (NCCL >= 2.19). */
#define HX_MAX_REQUESTS 32
/* ncclNetDeviceType values. */
#define HX_NET_DEVICE_HOST 0
#define HX_NET_DEVICE_UNPACK 1
/* NCCL_NET_TRAFFIC_CLASS_UNDEF, NCCL_NET_ATTR_UNDEF. */
#define HX_TRAFFIC_CLASS_UNDEF (-1)
#define HX_ATTR_UNDEF (-1)
/* NCCL_MAX_NET_SIZE_BYTES: upper bound of maxP2pBytes / maxCollBytes (1 TiB). */
#define HX_MAX_NET_SIZE_BYTES (1ULL << 40)
/* NCCL_NET_OPTIONAL_RECV_COMPLETION: the value NCCL stores in *request before an irecv. */
#define HX_OPTIONAL_RECV_COMPLETION ((void *)0x1)

/* ncclDebugLogLevel values and subsystem flags used by the harness. */
#define HX_LOG_WARN 2
#define HX_LOG_INFO 3
#define HX_LOG_TRACE 5
#define HX_LOG_NET 16

/* ncclDebugLogger_t: (level, subsystem flags, file, line, printf format, ...). */
typedef void (*hx_logger)(int level, unsigned long flags, const char *file, int line,
                          const char *fmt, ...);
/* ncclProfilerCallback_t (v10+ init). */
typedef hx_result (*hx_profiler_cb)(void **event_handle, int type, void *parent_handle,
                                    int64_t plugin_id, void *ext_data);

/* ncclNetDeviceHandle_v7..v12_t (32 bytes). */
typedef struct {
  int netDeviceType;
  int netDeviceVersion;
  void *handle;
  size_t size;
  int needsProxyProgress;
} hx_dev_handle;

/* ncclNetCommConfig_v10..v12_t. */
typedef struct {
  int trafficClass;
} hx_comm_config;

/* ncclNetVDeviceProps_v9..v11_t (4 devices) and _v12_t (8 devices). */
typedef struct {
  int ndevs;
  int devs[4];
} hx_vprops4;
typedef struct {
  int ndevs;
  int devs[8];
} hx_vprops8;

/* ncclNetCommAttr_v11/12_t and ncclNetAttr_v11/12_t (setNetAttr). */
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} hx_comm_attr;
typedef struct {
  hx_comm_attr sendCommAttr;
  hx_comm_attr recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} hx_net_attr;

/* ncclNetProperties_v8_t (64 bytes). */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed; /* Mb/s */
  int port;
  float latency; /* µs */
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
} hx_props_v8;

/* ncclNetProperties_v9_t and _v10_t (identical, 104 bytes). */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  hx_vprops4 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
} hx_props_v9;

/* ncclNetProperties_v11_t (112 bytes). */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  hx_vprops4 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
} hx_props_v11;

/* ncclNetProperties_v12_t (128 bytes). */
typedef struct {
  char *name;
  char *pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  int netDeviceType;
  int netDeviceVersion;
  hx_vprops8 vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
} hx_props_v12;

/* ncclNet_v8_t (152 bytes: name + 18 functions). */
typedef struct {
  const char *name;
  hx_result (*init)(hx_logger log);
  hx_result (*devices)(int *ndev);
  hx_result (*getProperties)(int dev, hx_props_v8 *props);
  hx_result (*listen)(int dev, void *handle, void **listen_comm);
  hx_result (*connect)(int dev, void *handle, void **send_comm, hx_dev_handle **send_dev_comm);
  hx_result (*accept)(void *listen_comm, void **recv_comm, hx_dev_handle **recv_dev_comm);
  hx_result (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  hx_result (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                           void **mhandle);
  hx_result (*deregMr)(void *comm, void *mhandle);
  hx_result (*isend)(void *send_comm, void *data, int size, int tag, void *mhandle,
                     void **request);
  hx_result (*irecv)(void *recv_comm, int n, void **data, int *sizes, int *tags, void **mhandles,
                     void **request);
  hx_result (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                      void **request);
  hx_result (*test)(void *request, int *done, int *sizes);
  hx_result (*closeSend)(void *send_comm);
  hx_result (*closeRecv)(void *recv_comm);
  hx_result (*closeListen)(void *listen_comm);
  hx_result (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  hx_result (*irecvConsumed)(void *recv_comm, int n, void *request);
} hx_net_v8;

/* ncclNet_v9_t (160 bytes: name + 19 functions). */
typedef struct {
  const char *name;
  hx_result (*init)(hx_logger log);
  hx_result (*devices)(int *ndev);
  hx_result (*getProperties)(int dev, hx_props_v9 *props);
  hx_result (*listen)(int dev, void *handle, void **listen_comm);
  hx_result (*connect)(int dev, void *handle, void **send_comm, hx_dev_handle **send_dev_comm);
  hx_result (*accept)(void *listen_comm, void **recv_comm, hx_dev_handle **recv_dev_comm);
  hx_result (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  hx_result (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                           void **mhandle);
  hx_result (*deregMr)(void *comm, void *mhandle);
  hx_result (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                     void **request);
  hx_result (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                     void **mhandles, void **request);
  hx_result (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                      void **request);
  hx_result (*test)(void *request, int *done, int *sizes);
  hx_result (*closeSend)(void *send_comm);
  hx_result (*closeRecv)(void *recv_comm);
  hx_result (*closeListen)(void *listen_comm);
  hx_result (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  hx_result (*irecvConsumed)(void *recv_comm, int n, void *request);
  hx_result (*makeVDevice)(int *d, hx_vprops4 *props);
} hx_net_v9;

/* ncclNet_v10_t (160 bytes: name + 19 functions). */
typedef struct {
  const char *name;
  hx_result (*init)(hx_logger log, hx_profiler_cb prof);
  hx_result (*devices)(int *ndev);
  hx_result (*getProperties)(int dev, hx_props_v9 *props);
  hx_result (*listen)(int dev, void *handle, void **listen_comm);
  hx_result (*connect)(int dev, hx_comm_config *config, void *handle, void **send_comm,
                       hx_dev_handle **send_dev_comm);
  hx_result (*accept)(void *listen_comm, void **recv_comm, hx_dev_handle **recv_dev_comm);
  hx_result (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);
  hx_result (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset, int fd,
                           void **mhandle);
  hx_result (*deregMr)(void *comm, void *mhandle);
  hx_result (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                     void *phandle, void **request);
  hx_result (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                     void **mhandles, void **phandles, void **request);
  hx_result (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                      void **request);
  hx_result (*test)(void *request, int *done, int *sizes);
  hx_result (*closeSend)(void *send_comm);
  hx_result (*closeRecv)(void *recv_comm);
  hx_result (*closeListen)(void *listen_comm);
  hx_result (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);
  hx_result (*irecvConsumed)(void *recv_comm, int n, void *request);
  hx_result (*makeVDevice)(int *d, hx_vprops4 *props);
} hx_net_v10;

/* ncclNet_v11_t and ncclNet_v12_t (176 bytes: name + 21 functions); P is the properties type,
 * V the virtual-device properties type. */
#define HX_NET_V11_LIKE(P, V)                                                                    \
  struct {                                                                                       \
    const char *name;                                                                            \
    hx_result (*init)(void **ctx, uint64_t comm_id, hx_comm_config *config, hx_logger log,       \
                      hx_profiler_cb prof);                                                      \
    hx_result (*devices)(int *ndev);                                                             \
    hx_result (*getProperties)(int dev, P *props);                                               \
    hx_result (*listen)(void *ctx, int dev, void *handle, void **listen_comm);                   \
    hx_result (*connect)(void *ctx, int dev, void *handle, void **send_comm,                     \
                         hx_dev_handle **send_dev_comm);                                         \
    hx_result (*accept)(void *listen_comm, void **recv_comm, hx_dev_handle **recv_dev_comm);     \
    hx_result (*regMr)(void *comm, void *data, size_t size, int type, void **mhandle);           \
    hx_result (*regMrDmaBuf)(void *comm, void *data, size_t size, int type, uint64_t offset,     \
                             int fd, void **mhandle);                                            \
    hx_result (*deregMr)(void *comm, void *mhandle);                                             \
    hx_result (*isend)(void *send_comm, void *data, size_t size, int tag, void *mhandle,         \
                       void *phandle, void **request);                                           \
    hx_result (*irecv)(void *recv_comm, int n, void **data, size_t *sizes, int *tags,            \
                       void **mhandles, void **phandles, void **request);                        \
    hx_result (*iflush)(void *recv_comm, int n, void **data, int *sizes, void **mhandles,        \
                        void **request);                                                         \
    hx_result (*test)(void *request, int *done, int *sizes);                                     \
    hx_result (*closeSend)(void *send_comm);                                                     \
    hx_result (*closeRecv)(void *recv_comm);                                                     \
    hx_result (*closeListen)(void *listen_comm);                                                 \
    hx_result (*getDeviceMr)(void *comm, void *mhandle, void **dptr_mhandle);                    \
    hx_result (*irecvConsumed)(void *recv_comm, int n, void *request);                           \
    hx_result (*makeVDevice)(int *d, V *props);                                                  \
    hx_result (*finalize)(void *ctx);                                                            \
    hx_result (*setNetAttr)(void *ctx, hx_net_attr *attr);                                       \
  }
typedef HX_NET_V11_LIKE(hx_props_v11, hx_vprops4) hx_net_v11;
typedef HX_NET_V11_LIKE(hx_props_v12, hx_vprops8) hx_net_v12;

/* ---- layout assertions (x86-64 / LP64) ---- */
#define HX_OFF(T, f, o) _Static_assert(offsetof(T, f) == (o), #T "." #f " at " #o)
#define HX_SIZE(T, s) _Static_assert(sizeof(T) == (s), "sizeof " #T " == " #s)

HX_SIZE(hx_dev_handle, 32);
HX_OFF(hx_dev_handle, handle, 8);
HX_OFF(hx_dev_handle, size, 16);
HX_OFF(hx_dev_handle, needsProxyProgress, 24);
HX_SIZE(hx_vprops4, 20);
HX_SIZE(hx_vprops8, 36);
HX_SIZE(hx_net_attr, 44);

HX_SIZE(hx_props_v8, 64);
HX_OFF(hx_props_v8, pciPath, 8);
HX_OFF(hx_props_v8, guid, 16);
HX_OFF(hx_props_v8, ptrSupport, 24);
HX_OFF(hx_props_v8, regIsGlobal, 28);
HX_OFF(hx_props_v8, speed, 32);
HX_OFF(hx_props_v8, port, 36);
HX_OFF(hx_props_v8, latency, 40);
HX_OFF(hx_props_v8, maxComms, 44);
HX_OFF(hx_props_v8, maxRecvs, 48);
HX_OFF(hx_props_v8, netDeviceType, 52);
HX_OFF(hx_props_v8, netDeviceVersion, 56);

HX_SIZE(hx_props_v9, 104);
HX_OFF(hx_props_v9, ptrSupport, 24);
HX_OFF(hx_props_v9, regIsGlobal, 28);
HX_OFF(hx_props_v9, forceFlush, 32);
HX_OFF(hx_props_v9, speed, 36);
HX_OFF(hx_props_v9, port, 40);
HX_OFF(hx_props_v9, latency, 44);
HX_OFF(hx_props_v9, maxComms, 48);
HX_OFF(hx_props_v9, maxRecvs, 52);
HX_OFF(hx_props_v9, netDeviceType, 56);
HX_OFF(hx_props_v9, netDeviceVersion, 60);
HX_OFF(hx_props_v9, vProps, 64);
HX_OFF(hx_props_v9, maxP2pBytes, 88);
HX_OFF(hx_props_v9, maxCollBytes, 96);

HX_SIZE(hx_props_v11, 112);
HX_OFF(hx_props_v11, speed, 36);
HX_OFF(hx_props_v11, maxRecvs, 52);
HX_OFF(hx_props_v11, vProps, 64);
HX_OFF(hx_props_v11, maxP2pBytes, 88);
HX_OFF(hx_props_v11, maxCollBytes, 96);
HX_OFF(hx_props_v11, maxMultiRequestSize, 104);

HX_SIZE(hx_props_v12, 128);
HX_OFF(hx_props_v12, speed, 36);
HX_OFF(hx_props_v12, maxRecvs, 52);
HX_OFF(hx_props_v12, vProps, 64);
HX_OFF(hx_props_v12, maxP2pBytes, 104);
HX_OFF(hx_props_v12, maxCollBytes, 112);
HX_OFF(hx_props_v12, maxMultiRequestSize, 120);
HX_OFF(hx_props_v12, railId, 124);
HX_OFF(hx_props_v12, planeId, 126);

HX_SIZE(hx_net_v8, 152);
HX_OFF(hx_net_v8, init, 8);
HX_OFF(hx_net_v8, isend, 80);
HX_OFF(hx_net_v8, test, 104);
HX_OFF(hx_net_v8, irecvConsumed, 144);
HX_SIZE(hx_net_v9, 160);
HX_OFF(hx_net_v9, makeVDevice, 152);
HX_SIZE(hx_net_v10, 160);
HX_OFF(hx_net_v10, makeVDevice, 152);
HX_SIZE(hx_net_v11, 176);
HX_OFF(hx_net_v11, makeVDevice, 152);
HX_OFF(hx_net_v11, finalize, 160);
HX_OFF(hx_net_v11, setNetAttr, 168);
HX_SIZE(hx_net_v12, 176);
HX_OFF(hx_net_v12, finalize, 160);

#endif
