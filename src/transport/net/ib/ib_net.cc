// The IB Net: glue between the Net interface and the devices, setup and endpoints.
#include "transport/net/ib/ib_net.h"

#include <sched.h>

#include <algorithm>
#include <cstring>

#include "common/log.h"
#include "common/params.h"
#include "common/socket.h"
#include "transport/net/ib/ib_conn.h"
#include "transport/net/routing.h"
#include "transport/net/socket/rail_order.h"
#include "transport/net/socket/socket_setup.h"
#include "transport/net/socket/socket_wire.h"

namespace snccl::net {

namespace ib {
namespace {

// The handle: HandleHead, the TCP control listener's socket-net handle, then the stage
// of an in-progress connect (magic + pointer), as the socket net keeps its own.
constexpr size_t kSockOffset = sizeof(HandleHead);
constexpr size_t kStageOffset = kSockOffset + sockwire::kHandleBytes;
constexpr size_t kHandleBytes = kStageOffset + 16;
constexpr uint64_t kStageMagic = 0x73746167652d6962ull;

struct Params {
  HcaFilter filter;
  GidPolicy gid;
  ConnParams conn;
  bool relaxed = false;
  int rails = 1;
  Routing routing = Routing::kAuto;
};

Result<Params> readParams() {
  Params p;
  SNCCL_ASSIGN_OR_RETURN(p.filter, HcaFilter::parse(params::getString(params::Id::IbHca)));
  SNCCL_ASSIGN_OR_RETURN(p.gid, gidPolicyFromValues(params::getInt(params::Id::IbGidIndex),
                                                    params::getInt(params::Id::IbRoceVersionNum),
                                                    params::getString(params::Id::IbAddrFamily)));
  SNCCL_ASSIGN_OR_RETURN(p.conn.qp, qpParamsFromValues(params::getInt(params::Id::IbTimeout),
                                                       params::getInt(params::Id::IbRetryCnt),
                                                       params::getInt(params::Id::IbTc), params::getInt(params::Id::IbSl),
                                                       params::getInt(params::Id::IbQpsPerConnection),
                                                       params::getInt(params::Id::IbSplitBytes)));
  const int64_t probe = params::getInt(params::Id::IbProbeTimeoutMs);
  if (probe < 1 || probe > 3600 * 1000)
    return InvalidArgument("SNCCL_IB_PROBE_TIMEOUT_MS=%lld is out of range 1..3600000", static_cast<long long>(probe));
  p.conn.probeTimeoutMs = int(probe);
  p.relaxed = params::getInt(params::Id::IbPciRelaxedOrdering) == 1;
  const int64_t rails = params::getInt(params::Id::IbRails);
  if (rails < 1 || rails > kMaxRails)
    return InvalidArgument("SNCCL_IB_RAILS=%lld is out of range 1..%d", static_cast<long long>(rails), kMaxRails);
  if (rails * p.conn.qp.qpsPerConn > kMaxQps)
    return InvalidArgument("SNCCL_IB_RAILS=%lld with NCCL_IB_QPS_PER_CONNECTION=%d makes %lld queue pairs per "
                           "connection; at most %d",
                           static_cast<long long>(rails), p.conn.qp.qpsPerConn,
                           static_cast<long long>(rails * p.conn.qp.qpsPerConn), kMaxQps);
  p.rails = int(rails);
  SNCCL_ASSIGN_OR_RETURN(p.routing, routingFromParams());
  return p;
}

// The Net devices: groups of up to `rails` ports, one connection striped over each
// group's ports. With several rails, the ports on the NUMA nodes this process runs on
// come first (as the socket net orders its interfaces), so each group stays near the
// rank's memory; with one, a device is a port, in discovery order.
std::vector<std::vector<const IbPort*>> groupPorts(const std::vector<IbPort>& ports, int rails) {
  std::vector<size_t> order(ports.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  cpu_set_t affinity;
  if (rails > 1 && sched_getaffinity(0, sizeof affinity, &affinity) == 0) {
    std::vector<int> nodes;
    for (const IbPort& p : ports) nodes.push_back(p.numaNode);
    order = socknet::localityOrder(nodes, socknet::numaNodesOf("/sys", affinity));
  }
  std::vector<std::vector<const IbPort*>> groups;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i % size_t(rails) == 0) groups.emplace_back();
    groups.back().push_back(&ports[order[i]]);
  }
  return groups;
}

class IbListen : public ListenComm {
 public:
  int dev = 0;
  std::unique_ptr<socknet::SocketListen> tcp;
  std::unique_ptr<Setup> setup;
};

struct Stage {
  int dev = 0;
  std::unique_ptr<socknet::Connector> tcp;
  std::unique_ptr<Setup> setup;
};

Stage* stagedConnect(const Handle& h) {
  if (h.bytes.size() != kHandleBytes) return nullptr;
  uint64_t magic = 0;
  std::memcpy(&magic, h.bytes.data() + kStageOffset, sizeof magic);
  if (magic != kStageMagic) return nullptr;
  Stage* s = nullptr;
  std::memcpy(&s, h.bytes.data() + kStageOffset + 8, sizeof s);
  return s;
}

void setStage(Handle* h, Stage* s) {
  if (h->bytes.size() != kHandleBytes) return;
  uint64_t magic = s != nullptr ? kStageMagic : 0;
  std::memcpy(h->bytes.data() + kStageOffset, &magic, sizeof magic);
  std::memcpy(h->bytes.data() + kStageOffset + 8, &s, sizeof s);
}

Endpoint* endpointOf(const Comm* c) {
  if (auto* s = dynamic_cast<const IbSendComm*>(c)) return s->ep.get();
  if (auto* r = dynamic_cast<const IbRecvComm*>(c)) return r->ep.get();
  return nullptr;
}

class IbNet : public Net {
 public:
  explicit IbNet(const Verbs* verbs) : verbs_(verbs) {}

  const char* name() const override { return "IB"; }

  Status init() override {
    if (params::getInt(params::Id::IbDisable) == 1) {
      SN_INFO(log::kNet | log::kInit, "NET/IB : disabled by NCCL_IB_DISABLE=1");
      return OkStatus();
    }
    if (verbs_ == nullptr) {
      Result<const Verbs*> v = systemVerbs();
      if (!v.ok()) {
        SN_INFO(log::kNet | log::kInit, "NET/IB : off: %s", v.status().message().c_str());
        return v.status();
      }
      verbs_ = v.value();
    }
    SNCCL_ASSIGN_OR_RETURN(params_, readParams());
    SNCCL_ASSIGN_OR_RETURN(iface_, sock::chooseLocalInterface());
    SNCCL_ASSIGN_OR_RETURN(tuning_, socknet::socketTuningFromParams());
    SNCCL_ASSIGN_OR_RETURN(ports_, discoverPorts(verbs_, params_.filter, params_.gid, params_.relaxed, nullptr));
    if (ports_.empty()) SN_INFO(log::kNet | log::kInit, "NET/IB : no active RDMA port (NCCL_IB_HCA filters them)");
    devs_ = groupPorts(ports_, params_.rails);
    for (size_t d = 0; d < devs_.size() && devs_[d].size() > 1; ++d)
      SN_INFO(log::kNet | log::kInit, "NET/IB : device %zu stripes each connection over %s, %s routing", d,
              devName(d).c_str(), connParams(int(d)).adaptive ? "adaptive" : "static");
    return OkStatus();
  }

  int devices() const override { return int(devs_.size()); }

  // A device's properties are its first port's (the nearest), with the rails' names and
  // speeds summed.
  Status getProperties(int dev, Properties* p) const override {
    SNCCL_TRY(checkDev(dev));
    const IbPort& port = *devs_[size_t(dev)].front();
    *p = Properties{};
    p->name = devName(size_t(dev));
    p->pciPath = port.pciPath;
    p->netdev = port.netdev;
    p->guid = port.guid;
    p->ptrSupport = kPtrHost;
    p->speedMbps = 0;
    p->maxComms = port.hca->maxQp() / params_.conn.qp.qpsPerConn;
    for (const IbPort* rail : devs_[size_t(dev)]) {
      p->speedMbps += rail->speedMbps;
      p->maxComms = std::min(p->maxComms, rail->hca->maxQp() / params_.conn.qp.qpsPerConn);
    }
    p->port = port.port;
    p->latencyUs = 0;
    p->maxRecvs = 1;
    p->maxP2pBytes = size_t(1) << 30;
    p->imm = true;
    return OkStatus();
  }

  Status listen(int dev, Handle* handle, ListenComm** out) override {
    *out = nullptr;
    SNCCL_TRY(checkDev(dev));
    sock::Address bind = iface_.addr;
    bind.setPort(0);
    Handle sockHandle;
    auto l = std::make_unique<IbListen>();
    l->dev = dev;
    SNCCL_ASSIGN_OR_RETURN(l->tcp, socknet::SocketListen::create(bind, 0, tuning_, &sockHandle));
    handle->bytes.assign(kHandleBytes, 0);
    HandleHead head{kHandleMagic, kMetaVersion, 0};
    std::memcpy(handle->bytes.data(), &head, sizeof head);
    std::memcpy(handle->bytes.data() + kSockOffset, sockHandle.bytes.data(), sockHandle.bytes.size());
    *out = l.release();
    return OkStatus();
  }

  Status connect(int dev, Handle* handle, SendComm** out) override {
    *out = nullptr;
    SNCCL_TRY(checkDev(dev));
    Stage* st = stagedConnect(*handle);
    if (st == nullptr) {
      HandleHead head{};
      if (handle->bytes.size() != kHandleBytes) return InternalError("NET/IB: the peer's listen handle has %zu bytes, "
                                                                     "not the IB net's %zu (a different net, or "
                                                                     "SNCCL_NET_COMPRESS not set alike on every rank?)",
                                                                     handle->bytes.size(), kHandleBytes);
      std::memcpy(&head, handle->bytes.data(), sizeof head);
      if (head.magic != kHandleMagic || head.version != kMetaVersion)
        return InternalError("NET/IB: the peer's listen handle is not an IB net handle of version %u", kMetaVersion);
      Handle sockHandle;
      sockHandle.bytes.assign(handle->bytes.begin() + kSockOffset, handle->bytes.begin() + kStageOffset);
      auto fresh = std::make_unique<Stage>();
      fresh->dev = dev;
      SNCCL_ASSIGN_OR_RETURN(fresh->tcp, socknet::Connector::start(sockHandle, tuning_));
      st = fresh.release();
      setStage(handle, st);
    }
    Status s = stepConnect(st, out);
    if (!s.ok() || *out != nullptr) cancelConnect(handle);
    return s;
  }

  Status accept(ListenComm* lc, RecvComm** out) override {
    *out = nullptr;
    auto* l = static_cast<IbListen*>(lc);
    if (!l->setup) {
      SNCCL_ASSIGN_OR_RETURN(auto socks, l->tcp->tryAccept());
      if (socks.empty()) return OkStatus();
      l->setup = std::make_unique<Setup>(devs_[size_t(l->dev)], false, connParams(l->dev), std::move(socks[0]));
    }
    Result<std::unique_ptr<Endpoint>> ep = l->setup->step();
    if (!ep.ok()) {
      l->setup.reset();
      return ep.status();
    }
    if (!ep.value()) return OkStatus();
    l->setup.reset();
    auto* r = new IbRecvComm();
    r->ep = std::move(ep).value();
    *out = r;
    return OkStatus();
  }

  void cancelConnect(Handle* handle) override {
    delete stagedConnect(*handle);
    setStage(handle, nullptr);
  }

  // NCCL's geometry for its own IB transport: 8 steps of a 4 MiB buffer, 512 KiB slots,
  // twice the window of the TCP defaults. A credit's round trip (the grant's RDMA write,
  // then the data's) goes through the device; a wider window hides more of it. Over
  // Soft-RoCE it made 4 MiB sendrecv 1.27x faster (docs/performance.md).
  SlotDefaults slotDefaults() const override { return {8, 4u << 20}; }
  // ibv_poll_cq reads the completion queue in user space.
  bool pollsInUserSpace() const override { return true; }

  Status regMr(Comm* comm, void* data, size_t size, int type, MemHandle** mh) override {
    *mh = nullptr;
    if (type != kPtrHost) return InvalidArgument("NET/IB: only host memory can be registered (type %d)", type);
    Endpoint* ep = endpointOf(comm);
    if (ep == nullptr) return InvalidArgument("NET/IB: regMr on a comm that is not a send or receive comm");
    // One registration per rail: each device has its own keys.
    auto h = std::make_unique<IbMemHandle>();
    for (int i = 0; i < ep->rails(); ++i) {
      Result<ibv_mr*> mr = ep->port(i)->hca->acquireMr(data, size);
      if (!mr.ok()) {
        release(h.get());
        return mr.status();
      }
      h->hca[size_t(i)] = ep->port(i)->hca;
      h->mr[size_t(i)] = mr.value();
      h->nrails = i + 1;
    }
    *mh = h.release();
    return OkStatus();
  }

  void forgetRange(const void* data, size_t size) override {
    for (const IbPort& p : ports_)  // ports of one device share its Hca: forgetting twice is harmless
      p.hca->forgetMrs(data, size);
  }

  Status deregMr(Comm*, MemHandle* mh) override {
    auto* h = static_cast<IbMemHandle*>(mh);
    if (h == nullptr) return OkStatus();
    release(h);
    delete h;
    return OkStatus();
  }

  Status isend(SendComm* comm, void* data, size_t size, int tag, uint32_t imm, MemHandle* mh, Request** req) override {
    *req = nullptr;
    SNCCL_ASSIGN_OR_RETURN(IbRequest * r, static_cast<IbSendComm*>(comm)->ep->isend(data, size, tag, imm, mh));
    *req = r;
    return OkStatus();
  }

  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle** mhs, Request** req) override {
    *req = nullptr;
    if (n != 1) return InvalidArgument("NET/IB: irecv of %d buffers; this net takes one (maxRecvs 1)", n);
    SNCCL_ASSIGN_OR_RETURN(IbRequest * r, static_cast<IbRecvComm*>(comm)->ep->irecv(data[0], sizes[0], tags[0], mhs[0]));
    *req = r;
    return OkStatus();
  }

  Status irecvWithOffer(RecvComm* comm, void* data, size_t size, int tag, MemHandle* mh, void* offer, size_t offerBytes,
                        MemHandle* offerMh, Request** req, bool* offered) override {
    *req = nullptr;
    SNCCL_ASSIGN_OR_RETURN(IbRequest * r, static_cast<IbRecvComm*>(comm)->ep->irecvWithOffer(
                                              data, size, tag, mh, offer, offerBytes, offerMh, offered));
    *req = r;
    return OkStatus();
  }

  bool retargetRecv(Request* req, void* data, size_t size, MemHandle* mh) override {
    auto* r = static_cast<IbRequest*>(req);
    return r->ep->retarget(r, data, size, mh);
  }

  // Host memory: nothing to flush.
  Status iflush(RecvComm*, int, void**, int*, MemHandle**, Request** req) override {
    *req = nullptr;
    return OkStatus();
  }

  Status test(Request* req, bool* done, size_t* sizes, uint32_t* imm) override {
    auto* r = static_cast<IbRequest*>(req);
    return r->ep->test(r, done, sizes, imm);
  }

  // Completions (credits included: they are written with immediate data) raise events
  // on the comm's completion channel; the control socket brings the peer's notices.
  // pollFds arms the channel, which changes the comm's state: the proxy calls it as the
  // comm's one user at that moment (net.h: one thread at a time).
  bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const override {
    Endpoint* ep = endpointOf(comm);
    return ep != nullptr && ep->armWait(fds);
  }

  // Nothing of a comm waits in software for someone to push it: grants, data and
  // records are handed to the device as they are posted, and the receives and completion
  // queue are sized for everything that can be in flight between two polls. So a comm
  // never owes its peer a test() (net.h).
  bool quiescent(const Comm*) const override { return true; }

  Status closeSend(SendComm* comm, uint32_t abortCode) override {
    auto* s = static_cast<IbSendComm*>(comm);
    s->ep->close(abortCode);
    delete s;
    return OkStatus();
  }
  Status closeRecv(RecvComm* comm, uint32_t abortCode) override {
    auto* r = static_cast<IbRecvComm*>(comm);
    r->ep->close(abortCode);
    delete r;
    return OkStatus();
  }
  uint32_t peerAbortCode(const Comm* comm) const override {
    const Endpoint* ep = endpointOf(comm);
    return ep != nullptr ? ep->peerAbortCode() : 0;
  }
  Status closeListen(ListenComm* comm) override {
    delete static_cast<IbListen*>(comm);
    return OkStatus();
  }

 private:
  Status stepConnect(Stage* st, SendComm** out) {
    if (!st->setup) {
      SNCCL_ASSIGN_OR_RETURN(auto socks, st->tcp->step());
      if (socks.empty()) return OkStatus();
      st->setup = std::make_unique<Setup>(devs_[size_t(st->dev)], true, connParams(st->dev), std::move(socks[0]));
    }
    SNCCL_ASSIGN_OR_RETURN(std::unique_ptr<Endpoint> ep, st->setup->step());
    if (!ep) return OkStatus();
    auto* s = new IbSendComm();
    s->ep = std::move(ep);
    *out = s;
    return OkStatus();
  }

  Status checkDev(int dev) const {
    if (dev < 0 || dev >= int(devs_.size()))
      return InvalidArgument("NET/IB: device %d does not exist (%zu devices)", dev, devs_.size());
    return OkStatus();
  }

  // "mlx5_0" for a device of one port, "mlx5_0+mlx5_1" for one of several.
  std::string devName(size_t dev) const {
    std::string name;
    for (const IbPort* p : devs_[dev]) name += (name.empty() ? "" : "+") + p->hca->name();
    return name;
  }

  // Adaptive routing (SNCCL_ROUTING) by default on a device of several rails.
  ConnParams connParams(int dev) const {
    ConnParams c = params_.conn;
    c.adaptive = routesAdaptively(params_.routing, devs_[size_t(dev)].size());
    return c;
  }

  static void release(IbMemHandle* h) {
    for (int i = 0; i < h->nrails; ++i) h->hca[size_t(i)]->releaseMr(h->mr[size_t(i)]);
    h->nrails = 0;
  }

  const Verbs* verbs_;
  // Set once by init(), read-only afterwards.
  Params params_;
  sock::Interface iface_;
  socknet::SocketTuning tuning_;
  std::vector<IbPort> ports_;
  std::vector<std::vector<const IbPort*>> devs_;  // pointers into ports_
};

}  // namespace

std::unique_ptr<Net> makeIbNet(const Verbs* verbs) { return std::make_unique<IbNet>(verbs); }

Result<std::vector<PortReport>> describePorts(const Verbs* verbs) {
  if (verbs == nullptr) {
    SNCCL_ASSIGN_OR_RETURN(verbs, systemVerbs());
  }
  SNCCL_ASSIGN_OR_RETURN(Params p, readParams());
  std::vector<PortReport> report;
  SNCCL_TRY(discoverPorts(verbs, p.filter, p.gid, false, &report).status());
  return report;
}

}  // namespace ib

Net* ibNet() {
  static Net* const net = new ib::IbNet(nullptr);
  return net;
}

}  // namespace snccl::net
