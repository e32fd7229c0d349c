// The verbs calls the IB net makes, as a table of function pointers.
//
// The real table comes from libibverbs.so.1, opened with dlopen at run time: a build of
// snccl runs on machines without rdma-core, and says why the IB net is off. Control-path
// calls are the library's exported symbols (version IBVERBS_1.1, as every rdma-core since
// 2008 exports them); the data-path calls (post_send, post_recv, poll_cq) are inline
// functions in verbs.h that jump through the context's provider ops, and the table wraps
// those. Tests install a fake table (a provider in process memory) to provoke what is
// hard to provoke on a real device: error completions, RNR, a completion for no request,
// asynchronous events.
#pragma once

#include <infiniband/verbs.h>

#include <optional>
#include <string>

#include "common/status.h"

namespace snccl::net::ib {

struct Verbs {
  // Control path (exported symbols of libibverbs).
  ibv_device** (*getDeviceList)(int* num);
  void (*freeDeviceList)(ibv_device** list);
  const char* (*getDeviceName)(ibv_device* dev);
  ibv_context* (*openDevice)(ibv_device* dev);
  int (*closeDevice)(ibv_context* ctx);
  int (*queryDevice)(ibv_context* ctx, ibv_device_attr* attr);
  int (*queryPort)(ibv_context* ctx, uint8_t port, ibv_port_attr* attr);
  int (*queryGid)(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
  ibv_pd* (*allocPd)(ibv_context* ctx);
  int (*deallocPd)(ibv_pd* pd);
  ibv_mr* (*regMr)(ibv_pd* pd, void* addr, size_t len, int access);
  // Optional (IBVERBS_1.8): registration with flags such as IBV_ACCESS_RELAXED_ORDERING.
  ibv_mr* (*regMrIova2)(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned access);
  int (*deregMr)(ibv_mr* mr);
  ibv_cq* (*createCq)(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* channel, int vector);
  int (*destroyCq)(ibv_cq* cq);
  ibv_qp* (*createQp)(ibv_pd* pd, ibv_qp_init_attr* attr);
  int (*modifyQp)(ibv_qp* qp, ibv_qp_attr* attr, int mask);
  int (*destroyQp)(ibv_qp* qp);
  int (*getAsyncEvent)(ibv_context* ctx, ibv_async_event* event);
  void (*ackAsyncEvent)(ibv_async_event* event);
  const char* (*wcStatusStr)(ibv_wc_status status);
  const char* (*eventTypeStr)(ibv_event_type type);

  // Completion events, so that a waiting thread can sleep in poll() on the channel's fd.
  // Optional: without them the IB net's comms are polled on a timer.
  ibv_comp_channel* (*createCompChannel)(ibv_context* ctx);
  int (*destroyCompChannel)(ibv_comp_channel* channel);
  int (*getCqEvent)(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext);
  void (*ackCqEvents)(ibv_cq* cq, unsigned n);
  int (*reqNotifyCq)(ibv_cq* cq, int solicitedOnly);

  // Data path.
  int (*postSend)(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
  int (*postRecv)(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
  int (*pollCq)(ibv_cq* cq, int n, ibv_wc* wc);

  // Where the port's sysfs attributes are read (the GID types: "RoCE v2", "IB/RoCE v1").
  // Returns nullopt when the file cannot be read, as in containers that do not map every
  // GID. The real table reads /sys/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<i>.
  std::optional<std::string> (*readGidType)(const char* dev, int port, int index);
  // The device's PCI path (the resolved /sys/class/infiniband/<dev>/device link) and NUMA
  // node; "" and -1 when it has none (a software device such as rxe).
  std::string (*pciPath)(const char* dev);
  // RoCE: the network interface behind a GID (gid_attrs/ndevs/<i>); "" when unknown.
  // Optional (null: unknown).
  std::string (*gidNetdev)(const char* dev, int port, int index);
  int (*numaNode)(const char* dev);
};

// libibverbs.so.1, loaded once per process. The error says why it is unusable (library
// missing, symbol missing), for the log and sn_info.
Result<const Verbs*> systemVerbs();

}  // namespace snccl::net::ib
