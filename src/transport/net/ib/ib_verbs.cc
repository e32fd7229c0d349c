// libibverbs.so.1 through dlopen: the real Verbs table.
#include "transport/net/ib/ib_verbs.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <fstream>
#include <mutex>
#include <string>

namespace snccl::net::ib {

namespace {

int postSendOps(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) { return qp->context->ops.post_send(qp, wr, bad); }
int postRecvOps(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) { return qp->context->ops.post_recv(qp, wr, bad); }
int pollCqOps(ibv_cq* cq, int n, ibv_wc* wc) { return cq->context->ops.poll_cq(cq, n, wc); }
int reqNotifyCqOps(ibv_cq* cq, int solicitedOnly) { return cq->context->ops.req_notify_cq(cq, solicitedOnly); }

std::string sysfsDevice(const char* dev) { return std::string("/sys/class/infiniband/") + dev; }

std::optional<std::string> sysfsGidType(const char* dev, int port, int index) {
  std::ifstream f(sysfsDevice(dev) + "/ports/" + std::to_string(port) + "/gid_attrs/types/" + std::to_string(index));
  std::string line;
  if (!f || !std::getline(f, line)) return std::nullopt;
  return line;
}

std::string sysfsPciPath(const char* dev) {
  char buf[PATH_MAX];
  if (realpath((sysfsDevice(dev) + "/device").c_str(), buf) == nullptr) return "";
  std::string p = buf;
  // A software device's "device" is its netdev's parent or absent; only PCI paths count.
  return p.find("/pci") != std::string::npos ? p : "";
}

std::string sysfsGidNetdev(const char* dev, int port, int index) {
  std::ifstream f(sysfsDevice(dev) + "/ports/" + std::to_string(port) + "/gid_attrs/ndevs/" + std::to_string(index));
  std::string line;
  if (!f || !std::getline(f, line)) return "";
  return line;
}

int sysfsNumaNode(const char* dev) {
  std::ifstream f(sysfsDevice(dev) + "/device/numa_node");
  int node = -1;
  if (!(f >> node)) return -1;
  return node;
}

template <typename Fn>
bool load(void* lib, const char* name, const char* version, Fn* out) {
  *out = reinterpret_cast<Fn>(dlvsym(lib, name, version));
  return *out != nullptr;
}

Result<Verbs> loadVerbs() {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return SystemError("libibverbs.so.1 cannot be loaded (%s); install rdma-core's libibverbs1", dlerror());
  Verbs v{};
  const char* missing = nullptr;
#define SN_IBV(field, sym)                                  \
  if (missing == nullptr && !load(lib, sym, "IBVERBS_1.1", &v.field)) missing = sym;
  SN_IBV(getDeviceList, "ibv_get_device_list")
  SN_IBV(freeDeviceList, "ibv_free_device_list")
  SN_IBV(getDeviceName, "ibv_get_device_name")
  SN_IBV(openDevice, "ibv_open_device")
  SN_IBV(closeDevice, "ibv_close_device")
  SN_IBV(queryDevice, "ibv_query_device")
  SN_IBV(queryGid, "ibv_query_gid")
  SN_IBV(allocPd, "ibv_alloc_pd")
  SN_IBV(deallocPd, "ibv_dealloc_pd")
  SN_IBV(deregMr, "ibv_dereg_mr")
  SN_IBV(createCq, "ibv_create_cq")
  SN_IBV(destroyCq, "ibv_destroy_cq")
  SN_IBV(createQp, "ibv_create_qp")
  SN_IBV(modifyQp, "ibv_modify_qp")
  SN_IBV(destroyQp, "ibv_destroy_qp")
  SN_IBV(getAsyncEvent, "ibv_get_async_event")
  SN_IBV(ackAsyncEvent, "ibv_ack_async_event")
  SN_IBV(wcStatusStr, "ibv_wc_status_str")
  SN_IBV(eventTypeStr, "ibv_event_type_str")
#undef SN_IBV
  // ibv_query_port and ibv_reg_mr are macros in verbs.h; the exported functions take the
  // same arguments (the port attributes they fill are a prefix of ibv_port_attr, which
  // holds everything read here, link_layer included).
  if (missing == nullptr && !load(lib, "ibv_query_port", "IBVERBS_1.1", &v.queryPort)) missing = "ibv_query_port";
  if (missing == nullptr && !load(lib, "ibv_reg_mr", "IBVERBS_1.1", &v.regMr)) missing = "ibv_reg_mr";
  if (missing != nullptr) {
    dlclose(lib);
    return SystemError("libibverbs.so.1 lacks %s@IBVERBS_1.1", missing);
  }
  load(lib, "ibv_reg_mr_iova2", "IBVERBS_1.8", &v.regMrIova2);  // optional
  // Completion channels (optional; the channel calls exist only in version 1.0).
  if (!load(lib, "ibv_create_comp_channel", "IBVERBS_1.0", &v.createCompChannel) ||
      !load(lib, "ibv_destroy_comp_channel", "IBVERBS_1.0", &v.destroyCompChannel) ||
      !load(lib, "ibv_get_cq_event", "IBVERBS_1.1", &v.getCqEvent) ||
      !load(lib, "ibv_ack_cq_events", "IBVERBS_1.1", &v.ackCqEvents)) {
    v.createCompChannel = nullptr;
  } else {
    v.reqNotifyCq = reqNotifyCqOps;
  }
  v.postSend = postSendOps;
  v.postRecv = postRecvOps;
  v.pollCq = pollCqOps;
  v.readGidType = sysfsGidType;
  v.pciPath = sysfsPciPath;
  v.numaNode = sysfsNumaNode;
  v.gidNetdev = sysfsGidNetdev;
  return v;  // the library stays loaded for the life of the process
}

}  // namespace

Result<const Verbs*> systemVerbs() {
  static std::once_flag once;
  static Result<Verbs> loaded = Status(ncclInternalError, "unset");
  std::call_once(once, [] { loaded = loadVerbs(); });
  if (!loaded.ok()) return loaded.status();
  return &loaded.value();
}

}  // namespace snccl::net::ib
