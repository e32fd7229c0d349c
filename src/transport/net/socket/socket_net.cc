// The socket Net: glue between the Net interface and the connection/setup classes.
#include "transport/net/socket/socket_net.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <utility>

#include "common/log.h"
#include "common/params.h"
#include "common/socket.h"
#include "transport/net/routing.h"
#include "transport/net/socket/multipath_conn.h"
#include "transport/net/socket/rail_order.h"
#include "transport/net/socket/socket_conn.h"
#include "transport/net/socket/socket_link.h"
#include "transport/net/socket/socket_setup.h"

namespace snccl::net {

namespace socknet {
namespace {

constexpr int kLingerMs = 1000;  // how long a clean close waits for the receiver's goodbye
// Bytes at the end of the handle where an in-progress connect keeps its state.
// The socket handle: the listener's wire description, then, while a connect is under
// way, the connector it staged.
constexpr size_t kSocketHandleBytes = sockwire::kHandleBytes;
constexpr size_t kStageOffset = kSocketHandleBytes - 16;
constexpr uint64_t kStageMagic = 0x73746167652d736bull;
static_assert(sizeof(sockwire::HandleWire) <= kStageOffset, "handle wire overlaps the connect stage");

// Adaptive routing's chunk size when SNCCL_SOCKET_CHUNKSIZE is 0. Requests complete in
// order, so a message waits for its last chunk: with more than two paths, a 512 KiB slot
// (the default) cut into 128 KiB chunks is one chunk per path, and a path a little behind
// holds up the message; 32 KiB chunks let the others take up the slack. With two paths
// both sizes do as well on tbf-shaped veth rails (docs/performance.md, "Several rails"),
// and 128 KiB costs a quarter of the records and system calls per byte.
size_t defaultChunkBytes(int paths) { return paths > 2 ? size_t(32) << 10 : size_t(128) << 10; }

// Either end of a connection: a Conn (static routing) or a MultipathConn (adaptive).
class SocketEnd {
 public:
  SocketEnd(bool sender, std::vector<sock::Socket> socks, std::string what, const MultipathConfig* adaptive,
            const std::vector<sock::Interface>& rails) {
    // Each socket's rail: the local interface whose address it is bound to (a multi-rail
    // connector binds every socket to a rail; a listener on the wildcard address accepts
    // on the interface the peer's socket arrived at).
    for (const sock::Socket& so : socks) {
      const char* name = rails.empty() ? "" : rails[0].name.c_str();
      if (Result<sock::Address> local = so.localAddress(); local.ok())
        for (const sock::Interface& r : rails)
          if (r.addr.hostString() == local.value().hostString()) name = r.name.c_str();
      railOf_.push_back(name);
    }
    if (adaptive != nullptr) {
      mp_ = std::make_unique<MultipathConn>(sender, std::move(socks), std::move(what), *adaptive);
    } else {
      conn_ = std::make_unique<Conn>(sender, std::move(socks), std::move(what));
    }
  }
  // Calls f with whichever connection this end is.
  template <class F>
  decltype(auto) with(F&& f) {
    return mp_ != nullptr ? f(*mp_) : f(*conn_);
  }
  template <class F>
  decltype(auto) with(F&& f) const {
    return mp_ != nullptr ? f(std::as_const(*mp_)) : f(std::as_const(*conn_));
  }
  // Net::railBytes: the sockets' payload bytes summed by rail.
  void railBytes(std::vector<RailBytes>* out) const {
    out->clear();
    for (size_t i = 0; i < railOf_.size(); ++i) {
      const uint64_t b = mp_ != nullptr ? mp_->pathBytes(int(i)) : conn_->socketBytes(int(i));
      auto it = std::find_if(out->begin(), out->end(), [&](const RailBytes& r) { return r.name == railOf_[i]; });
      if (it == out->end()) {
        out->push_back(RailBytes{railOf_[i], b});
      } else {
        it->bytes += b;
      }
    }
  }

 private:
  std::unique_ptr<Conn> conn_;
  std::unique_ptr<MultipathConn> mp_;
  std::vector<const char*> railOf_;  // per socket: its rail's name, owned by SocketNet::rails_
};

class SocketSend : public SendComm {
 public:
  template <class... A>
  explicit SocketSend(A&&... a) : end(true, std::forward<A>(a)...) {}
  SocketEnd end;
};

class SocketRecv : public RecvComm {
 public:
  template <class... A>
  explicit SocketRecv(A&&... a) : end(false, std::forward<A>(a)...) {}
  SocketEnd end;
};

// The request's connection kind decides its class (SockReqBase::multipath).
template <class F>
decltype(auto) withRequest(Request* req, F&& f) {
  auto* base = static_cast<SockReqBase*>(req);
  return base->multipath ? f(static_cast<MpRequest*>(base)) : f(static_cast<SockRequest*>(base));
}

// The end a comm is, or null for a listen comm.
const SocketEnd* endOf(const Comm* comm) {
  if (auto* s = dynamic_cast<const SocketSend*>(comm)) return &s->end;
  if (auto* r = dynamic_cast<const SocketRecv*>(comm)) return &r->end;
  return nullptr;
}

int readSpeedMbps(const std::string& ifname) {
  std::ifstream f("/sys/class/net/" + ifname + "/speed");
  int speed = 0;
  // Virtual links (veth, lo) report -1 or nothing; assume 10 Gb/s like NCCL does.
  if (!(f >> speed) || speed <= 0) speed = 10000;
  return speed;
}

Connector* stagedConnector(const Handle& h) {
  if (h.bytes.size() != kSocketHandleBytes) return nullptr;
  uint64_t magic = 0;
  std::memcpy(&magic, h.bytes.data() + kStageOffset, sizeof magic);
  if (magic != kStageMagic) return nullptr;
  Connector* c = nullptr;
  std::memcpy(&c, h.bytes.data() + kStageOffset + 8, sizeof c);
  return c;
}

void setStage(Handle* h, Connector* c) {
  if (h->bytes.size() != kSocketHandleBytes) return;  // not a socket handle: Connector::start refused it
  uint64_t magic = c != nullptr ? kStageMagic : 0;
  std::memcpy(h->bytes.data() + kStageOffset, &magic, sizeof magic);
  std::memcpy(h->bytes.data() + kStageOffset + 8, &c, sizeof c);
}

// The rails: what SNCCL_SOCKET_IFNAME matched, NICs on this process's NUMA nodes first
// (rail_order.h), at most maxRails of them; `where` gets each rail's NUMA node and class.
std::vector<sock::Interface> orderRails(const std::vector<sock::Interface>& found, size_t maxRails,
                                        std::vector<std::pair<int, RailLocality>>* where) {
  std::vector<int> local;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) local = numaNodesOf("/sys", mask);
  std::vector<int> nodes;
  for (const sock::Interface& i : found) nodes.push_back(nicNumaNode("/sys", i.name));
  std::vector<sock::Interface> rails;
  for (size_t k : localityOrder(nodes, local)) {
    if (rails.size() == maxRails) break;
    rails.push_back(found[k]);
    where->push_back({nodes[k], railLocality(nodes[k], local)});
  }
  return rails;
}

class SocketNet : public Net {
 public:
  const char* name() const override { return "Socket"; }

  Status init() override {
    const size_t maxRails = size_t(params::getIntClamped(params::Id::SocketRails, 1, sockwire::kMaxRails));
    SNCCL_ASSIGN_OR_RETURN(const std::vector<sock::Interface> found, sock::chooseLocalInterfaces(SIZE_MAX));
    std::vector<std::pair<int, RailLocality>> where;
    rails_ = orderRails(found, maxRails, &where);
    iface_ = rails_[0];
    nstreams_ = socketStreamsFromParams(params::getIntClamped(params::Id::SocketNthreads, 1, 16),
                                        params::getIntClamped(params::Id::NsocksPerThread, 1, sockwire::kMaxStreams));
    SNCCL_ASSIGN_OR_RETURN(tuning_, socknet::socketTuningFromParams());
    SNCCL_ASSIGN_OR_RETURN(const Routing routing, routingFromParams());
    adaptive_ = routesAdaptively(routing, rails_.size());
    // 0 (the default): chosen per connection in listen(), from its number of paths.
    if (params::getInt(params::Id::SocketChunkSize) != 0)
      mpConfig_.chunkBytes = size_t(params::getIntClamped(params::Id::SocketChunkSize, 4096, 16 << 20));
    else
      mpConfig_.chunkBytes = 0;
    mpConfig_.stallMs = int(params::getIntClamped(params::Id::SocketPathTimeout, 100, 600000));
    std::string names;
    for (size_t k = 0; k < rails_.size(); ++k) {
      names += format("%s[%zu]%s:%s", k > 0 ? " " : "", k, rails_[k].name.c_str(), rails_[k].addr.hostString().c_str());
      if (where[k].first >= 0) names += format(" (NUMA %d, %s)", where[k].first, railLocalityName(where[k].second));
    }
    if (found.size() > rails_.size())
      names += format(" (%zu more match; SNCCL_SOCKET_RAILS=%zu)", found.size() - rails_.size(), maxRails);
    SN_INFO(log::kNet | log::kInit, "NET/Socket : Using %s, %d streams per rail, %s routing, congestion control %s",
            names.c_str(), nstreams_, adaptive_ ? "adaptive" : "static",
            tuning_.congestion.empty() ? "(system default)" : tuning_.congestion.c_str());
    return OkStatus();
  }

  int devices() const override { return 1; }

  Status getProperties(int dev, Properties* p) const override {
    SNCCL_TRY(checkDev(dev));
    *p = Properties{};
    p->name = iface_.name;
    p->ptrSupport = kPtrHost;
    p->speedMbps = readSpeedMbps(iface_.name);
    p->maxComms = 65536;
    p->maxRecvs = 1;
    p->maxP2pBytes = size_t(1) << 31;
    return OkStatus();
  }

  Status listen(int dev, Handle* handle, ListenComm** out) override {
    *out = nullptr;
    SNCCL_TRY(checkDev(dev));
    sock::Address bind = iface_.addr;
    bind.setPort(0);
    RailPlan plan;
    for (const sock::Interface& r : rails_) plan.rails.push_back(r.addr);
    plan.adaptive = adaptive_;
    // Static: a control socket plus nstreams_ streams per rail. Adaptive: every socket is
    // a path, nstreams_ per rail (the handle counts the sockets after the first).
    const int sockets = nstreams_ * int(rails_.size());  // over all rails
    plan.chunkBytes = mpConfig_.chunkBytes != 0 ? mpConfig_.chunkBytes : defaultChunkBytes(sockets);
    const int streams = std::min(adaptive_ ? sockets - 1 : sockets, sockwire::kMaxStreams);
    SNCCL_ASSIGN_OR_RETURN(auto l, SocketListen::create(bind, streams, tuning_, handle, plan));
    *out = l.release();
    return OkStatus();
  }

  Status connect(int dev, Handle* handle, SendComm** out) override {
    *out = nullptr;
    SNCCL_TRY(checkDev(dev));
    Connector* c = stagedConnector(*handle);
    if (c == nullptr) {
      std::vector<sock::Address> locals;
      for (const sock::Interface& r : rails_) locals.push_back(r.addr);
      SNCCL_ASSIGN_OR_RETURN(auto fresh, Connector::start(*handle, tuning_, locals));
      c = fresh.release();
      setStage(handle, c);
    }
    Result<std::vector<sock::Socket>> socks = c->step();
    if (socks.ok() && socks.value().empty()) return OkStatus();
    std::string what = "send to " + c->target().toString();
    MultipathConfig mp = mpConfig_;
    mp.rails = railBook_;
    mp.chunkBytes = c->chunkBytes();  // the receiver's
    const bool adaptive = c->adaptive();
    const int rails = c->rails();
    cancelConnect(handle);
    if (!socks.ok()) return withLocalLink(socks.status());
    SN_INFO(log::kNet, "NET/Socket : %s: connected, %zu sockets over %d rails, %s routing", what.c_str(),
            socks.value().size(), rails, adaptive ? "adaptive" : "static");
    *out = new SocketSend(std::move(socks).value(), what, adaptive ? &mp : nullptr, rails_);
    return OkStatus();
  }

  Status accept(ListenComm* lc, RecvComm** out) override {
    *out = nullptr;
    auto* l = static_cast<SocketListen*>(lc);
    SNCCL_ASSIGN_OR_RETURN(auto socks, l->tryAccept());
    if (socks.empty()) return OkStatus();
    std::string what = "receive from " + socks[0].peer().toString() + " on " + l->address().toString();
    const bool adaptive = l->plan().adaptive;
    MultipathConfig mp = mpConfig_;
    mp.chunkBytes = l->plan().chunkBytes;
    SN_INFO(log::kNet, "NET/Socket : %s: accepted, %zu sockets, %s routing%s", what.c_str(), socks.size(),
            adaptive ? "adaptive" : "static", adaptive ? format(" in %zu-byte chunks", mp.chunkBytes).c_str() : "");
    *out = new SocketRecv(std::move(socks), what, adaptive ? &mp : nullptr, rails_);
    return OkStatus();
  }

  void cancelConnect(Handle* handle) override {
    delete stagedConnector(*handle);
    setStage(handle, nullptr);
  }

  Status regMr(Comm*, void*, size_t, int type, MemHandle** mh) override {
    *mh = nullptr;
    if (type != kPtrHost) return InvalidArgument("NET/Socket: only host memory can be sent over sockets");
    return OkStatus();
  }
  Status deregMr(Comm*, MemHandle*) override { return OkStatus(); }
  bool usesUnregisteredHostMemory() const override { return true; }  // send(2) reads any of it, recv(2) writes any

  Status isend(SendComm* comm, void* data, size_t size, int tag, uint32_t imm, MemHandle*, Request** req) override {
    *req = nullptr;
    return static_cast<SocketSend*>(comm)->end.with([&](auto& c) -> Status {
      SNCCL_ASSIGN_OR_RETURN(auto* r, c.isend(data, size, tag, imm));
      *req = r;
      return OkStatus();
    });
  }

  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle**, Request** req) override {
    *req = nullptr;
    if (n != 1) return InvalidArgument("NET/Socket: irecv of %d buffers; sockets take one (maxRecvs 1)", n);
    return static_cast<SocketRecv*>(comm)->end.with([&](auto& c) -> Status {
      SNCCL_ASSIGN_OR_RETURN(auto* r, c.irecv(data[0], sizes[0], tags[0]));
      *req = r;
      return OkStatus();
    });
  }

  bool retargetRecv(Request* req, void* data, size_t size, MemHandle*) override {
    return withRequest(req, [&](auto* r) { return r->conn->retarget(r, data, size); });
  }

  // Host memory is coherent: nothing to flush, so no request (the caller treats a null
  // request from iflush as already complete).
  Status iflush(RecvComm*, int, void**, int*, MemHandle**, Request** req) override {
    *req = nullptr;
    return OkStatus();
  }

  Status test(Request* req, bool* done, size_t* sizes, uint32_t* imm) override {
    return withRequest(req, [&](auto* r) { return r->conn->test(r, done, sizes, imm); });
  }

  bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const override {
    if (const SocketEnd* e = endOf(comm)) return e->with([&](const auto& c) { return c.pollFds(fds); });
    if (auto* l = dynamic_cast<const SocketListen*>(comm)) l->pollFds(fds);
    return true;
  }

  bool quiescent(const Comm* comm) const override {
    const SocketEnd* e = endOf(comm);
    return e != nullptr && e->with([](const auto& c) { return c.quiescent(); });
  }

  Status closeSend(SendComm* comm, uint32_t abortCode) override {
    auto* s = static_cast<SocketSend*>(comm);
    s->end.with([&](auto& c) { c.close(abortCode, kLingerMs); });
    delete s;
    return OkStatus();
  }
  Status closeRecv(RecvComm* comm, uint32_t abortCode) override {
    auto* r = static_cast<SocketRecv*>(comm);
    r->end.with([&](auto& c) { c.close(abortCode, kLingerMs); });
    delete r;
    return OkStatus();
  }
  uint32_t peerAbortCode(const Comm* comm) const override {
    const SocketEnd* e = endOf(comm);
    return e == nullptr ? 0 : e->with([](const auto& c) { return c.peerAbortCode(); });
  }
  bool peerClosed(const Comm* comm) const override {
    const SocketEnd* e = endOf(comm);
    return e != nullptr && e->with([](const auto& c) { return c.peerClosed(); });
  }
  Status closeListen(ListenComm* comm) override {
    delete static_cast<SocketListen*>(comm);
    return OkStatus();
  }
  bool railBytes(const Comm* comm, std::vector<RailBytes>* out) const override {
    const SocketEnd* e = endOf(comm);
    if (e == nullptr) return false;
    e->railBytes(out);
    return true;
  }

 private:
  // A connect that failed while this node's own interface is down failed here, not at
  // the peer: say so, as a system error (net_entry.h: the failure started on this rank).
  Status withLocalLink(const Status& s) const {
    std::string local = interfaceProblem(iface_.name);
    if (local.empty()) return s;
    return SystemError("%s; this node's network link is down: %s", s.message().c_str(), local.c_str());
  }

  Status checkDev(int dev) const {
    if (dev != 0) return InvalidArgument("NET/Socket: device %d does not exist (1 device)", dev);
    if (!iface_.addr.valid()) return InternalError("NET/Socket: used before init");
    return OkStatus();
  }

  // Set once by init() (under defaultNet's once-flag), read-only afterwards.
  std::vector<sock::Interface> rails_;
  sock::Interface iface_;  // rails_[0]
  int nstreams_ = 1;       // per rail
  bool adaptive_ = false;
  MultipathConfig mpConfig_;
  // The rails of every connection this Net makes (one Net per process).
  const std::shared_ptr<RailBook> railBook_ = std::make_shared<RailBook>();
  socknet::SocketTuning tuning_;
};

}  // namespace
}  // namespace socknet

int socketStreamsFromParams(int64_t nthreads, int64_t nsocksPerThread) {
  nthreads = std::clamp<int64_t>(nthreads, 1, 16);
  nsocksPerThread = std::clamp<int64_t>(nsocksPerThread, 1, sockwire::kMaxStreams);
  return int(std::min<int64_t>(nthreads * nsocksPerThread, sockwire::kMaxStreams));
}

Net* socketNet() {
  // One per process: connections are independent objects, the Net itself holds only
  // the interface chosen at init.
  static Net* const net = new socknet::SocketNet();
  return net;
}

}  // namespace snccl::net
