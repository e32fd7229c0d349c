// The binary interface of NCCL's external network plugins (libnccl-net*.so), versions 6
// to 12: the tables a plugin exports as `ncclNetPlugin_vN` and the property structs its
// getProperties fills. Only the point-to-point net is declared (not the collective net).
//
// These layouts are a contract with libraries built against NCCL's own headers, so every
// field keeps NCCL's order and type; the static_asserts at the end pin the sizes that an
// accidental edit would change. What changed from version to version:
//  v6   the oldest snccl loads: int sizes, init(logger).
//  v7   connect/accept take a device-offload handle; properties name the offload type;
//       getDeviceMr, irecvConsumed.
//  v8   regMr takes a size_t size; properties add regIsGlobal.
//  v9   isend/irecv sizes are size_t; properties add forceFlush, virtual-NIC members and
//       maxP2pBytes/maxCollBytes; makeVDevice.
//  v10  init takes a profiler callback; connect takes a comm config (traffic class);
//       isend/irecv take profiler handles.
//  v11  init creates a context (per communicator in NCCL) that listen and connect take, and
//       takes the config in place of connect; finalize, setNetAttr; properties add
//       maxMultiRequestSize.
//  v12  virtual NICs of up to 8 devices; properties add railId and planeId.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snccl/nccl.h"  // ncclResult_t

namespace snccl::net::abi {

constexpr int kOldestVersion = 6;
constexpr int kNewestVersion = 12;

// Bytes of the listen handle that travels from receiver to sender.
constexpr size_t kHandleBytes = 128;
// Requests a comm may have in flight: 8 for v6 plugins, 32 from v7 on.
constexpr int kMaxRequestsV6 = 8;
constexpr int kMaxRequests = 32;
// The largest message NCCL sends to a plugin that does not state its own (before v9).
constexpr size_t kMaxNetSizeBeforeV9 = size_t(1) << 30;
constexpr int kMaxRecvs = 8;  // NCCL_NET_MAX_RECVS: the grouped receives NCCL ever posts

enum PtrType : int { kPtrHost = 0x1, kPtrCuda = 0x2, kPtrDmaBuf = 0x4 };
enum DeviceType : int { kDeviceHost = 0, kDeviceUnpack = 1 };

enum LogLevel : int { kLogNone = 0, kLogVersion = 1, kLogWarn = 2, kLogInfo = 3, kLogAbort = 4, kLogTrace = 5 };
using Logger = void (*)(LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...);
using ProfilerCallback = ncclResult_t (*)(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData);

struct DeviceHandle {  // ncclNetDeviceHandle_v7_t .. v12: the same struct
  DeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
};

struct CommConfig {  // v10 .. v12
  int trafficClass;  // -1: undefined
};
constexpr int kTrafficClassUndef = -1;

template <int kDevs>
struct VDeviceProps {
  int ndevs;
  int devs[kDevs];
};

struct CommAttr {
  int32_t maxConcurrentPeers, minConcurrentPeers, maxFlowsPerPeer, minFlowsPerPeer;
};
struct NetAttr {  // v11 .. v12 setNetAttr
  CommAttr sendCommAttr, recvCommAttr;
  uint32_t op, algo, proto;
};

// ---- properties ----

struct PropsV6 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;  // Mbps
  int port;
  float latency;  // us
  int maxComms;
  int maxRecvs;
};

struct PropsV7 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
};

struct PropsV8 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
};

// v9 and v10 share a layout; v11 appends maxMultiRequestSize; v12 widens the virtual-NIC
// list and appends railId and planeId.
struct PropsV9 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
  VDeviceProps<4> vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
};
using PropsV10 = PropsV9;

struct PropsV11 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
  VDeviceProps<4> vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
};

struct PropsV12 {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  DeviceType netDeviceType;
  int netDeviceVersion;
  VDeviceProps<8> vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;
  int16_t planeId;
};

// ---- the plugin tables ----

struct NetV6 {
  const char* name;
  ncclResult_t (*init)(Logger logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, PropsV6* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm);
  ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
};

// v7 and v8 differ in regMr's size type and the properties.
template <typename Props, typename RegSize>
struct NetV7Family {
  const char* name;
  ncclResult_t (*init)(Logger logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, Props* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, RegSize size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
};
using NetV7 = NetV7Family<PropsV7, int>;
using NetV8 = NetV7Family<PropsV8, size_t>;

struct NetV9 {
  const char* name;
  ncclResult_t (*init)(Logger logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, PropsV9* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, VDeviceProps<4>* props);
};

struct NetV10 {
  const char* name;
  ncclResult_t (*init)(Logger logFunction, ProfilerCallback profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, PropsV10* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, CommConfig* config, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, VDeviceProps<4>* props);
};

// v11 and v12 differ in the properties and the virtual-NIC width.
template <typename Props, int kVDevs>
struct NetV11Family {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, CommConfig* config, Logger logFunction,
                       ProfilerCallback profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, Props* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm, DeviceHandle** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, DeviceHandle** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles, void** phandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, VDeviceProps<kVDevs>* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, NetAttr* netAttr);
};
using NetV11 = NetV11Family<PropsV11, 4>;
using NetV12 = NetV11Family<PropsV12, 8>;

// Version -> table and properties.
template <int V>
struct Version;
template <>
struct Version<6> {
  using Net = NetV6;
  using Props = PropsV6;
};
template <>
struct Version<7> {
  using Net = NetV7;
  using Props = PropsV7;
};
template <>
struct Version<8> {
  using Net = NetV8;
  using Props = PropsV8;
};
template <>
struct Version<9> {
  using Net = NetV9;
  using Props = PropsV9;
};
template <>
struct Version<10> {
  using Net = NetV10;
  using Props = PropsV10;
};
template <>
struct Version<11> {
  using Net = NetV11;
  using Props = PropsV11;
};
template <>
struct Version<12> {
  using Net = NetV12;
  using Props = PropsV12;
};

// Sizes and offsets on LP64 that NCCL's headers give; a changed field breaks every real plugin.
static_assert(sizeof(PropsV6) == 48 && sizeof(PropsV7) == 56 && sizeof(PropsV8) == 64);
static_assert(sizeof(PropsV9) == 104 && sizeof(PropsV11) == 112 && sizeof(PropsV12) == 128);
static_assert(offsetof(PropsV9, maxP2pBytes) == 88 && offsetof(PropsV12, railId) == 124);
static_assert(sizeof(NetV6) == 17 * sizeof(void*) && sizeof(NetV7) == 19 * sizeof(void*));
static_assert(sizeof(NetV8) == 19 * sizeof(void*) && sizeof(NetV9) == 20 * sizeof(void*));
static_assert(sizeof(NetV10) == 20 * sizeof(void*) && sizeof(NetV11) == 22 * sizeof(void*));
static_assert(sizeof(NetV12) == 22 * sizeof(void*));

}  // namespace snccl::net::abi
