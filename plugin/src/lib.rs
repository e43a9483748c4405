//! rdmesh-nccl: the NCCL net plugin `libnccl-net-rdmesh.so` over rdmesh's mesh transport.
