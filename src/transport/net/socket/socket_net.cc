// The socket Net: glue between the Net interface and the connection/setup classes.
#include "transport/net/socket/socket_net.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>

#include "common/log.h"
#include "common/params.h"
#include "common/socket.h"
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

class SocketSend : public SendComm {
 public:
  SocketSend(std::vector<sock::Socket> socks, std::string what) : conn(true, std::move(socks), std::move(what)) {}
  Conn conn;
};

class SocketRecv : public RecvComm {
 public:
  SocketRecv(std::vector<sock::Socket> socks, std::string what) : conn(false, std::move(socks), std::move(what)) {}
  Conn conn;
};

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

class SocketNet : public Net {
 public:
  const char* name() const override { return "Socket"; }

  Status init() override {
    SNCCL_ASSIGN_OR_RETURN(iface_, sock::chooseLocalInterface());
    nstreams_ = socketStreamsFromParams(params::getIntClamped(params::Id::SocketNthreads, 1, 16),
                                        params::getIntClamped(params::Id::NsocksPerThread, 1, sockwire::kMaxStreams));
    SNCCL_ASSIGN_OR_RETURN(tuning_, socknet::socketTuningFromParams());
    SN_INFO(log::kNet | log::kInit, "NET/Socket : Using [0]%s:%s, %d streams per connection, congestion control %s",
            iface_.name.c_str(), iface_.addr.hostString().c_str(), nstreams_,
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
    SNCCL_ASSIGN_OR_RETURN(auto l, SocketListen::create(bind, nstreams_, tuning_, handle));
    *out = l.release();
    return OkStatus();
  }

  Status connect(int dev, Handle* handle, SendComm** out) override {
    *out = nullptr;
    SNCCL_TRY(checkDev(dev));
    Connector* c = stagedConnector(*handle);
    if (c == nullptr) {
      SNCCL_ASSIGN_OR_RETURN(auto fresh, Connector::start(*handle, tuning_));
      c = fresh.release();
      setStage(handle, c);
    }
    Result<std::vector<sock::Socket>> socks = c->step();
    if (socks.ok() && socks.value().empty()) return OkStatus();
    std::string what = "send to " + c->target().toString();
    cancelConnect(handle);
    if (!socks.ok()) return withLocalLink(socks.status());
    SN_INFO(log::kNet, "NET/Socket : %s: connected, %zu streams", what.c_str(), socks.value().size() - 1);
    *out = new SocketSend(std::move(socks).value(), what);
    return OkStatus();
  }

  Status accept(ListenComm* lc, RecvComm** out) override {
    *out = nullptr;
    auto* l = static_cast<SocketListen*>(lc);
    SNCCL_ASSIGN_OR_RETURN(auto socks, l->tryAccept());
    if (socks.empty()) return OkStatus();
    std::string what = "receive from " + socks[0].peer().toString() + " on " + l->address().toString();
    SN_INFO(log::kNet, "NET/Socket : %s: accepted, %zu streams", what.c_str(), socks.size() - 1);
    *out = new SocketRecv(std::move(socks), what);
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
    SNCCL_ASSIGN_OR_RETURN(SockRequest * r, static_cast<SocketSend*>(comm)->conn.isend(data, size, tag, imm));
    *req = r;
    return OkStatus();
  }

  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle**, Request** req) override {
    *req = nullptr;
    if (n != 1) return InvalidArgument("NET/Socket: irecv of %d buffers; sockets take one (maxRecvs 1)", n);
    SNCCL_ASSIGN_OR_RETURN(SockRequest * r, static_cast<SocketRecv*>(comm)->conn.irecv(data[0], sizes[0], tags[0]));
    *req = r;
    return OkStatus();
  }

  bool retargetRecv(Request* req, void* data, size_t size, MemHandle*) override {
    auto* r = static_cast<SockRequest*>(req);
    return r->conn->retarget(r, data, size);
  }

  // Host memory is coherent: nothing to flush, so no request (the caller treats a null
  // request from iflush as already complete).
  Status iflush(RecvComm*, int, void**, int*, MemHandle**, Request** req) override {
    *req = nullptr;
    return OkStatus();
  }

  Status test(Request* req, bool* done, size_t* sizes, uint32_t* imm) override {
    auto* r = static_cast<SockRequest*>(req);
    return r->conn->test(r, done, sizes, imm);
  }

  bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const override {
    if (auto* s = dynamic_cast<const SocketSend*>(comm)) {
      s->conn.pollFds(fds);
    } else if (auto* r = dynamic_cast<const SocketRecv*>(comm)) {
      r->conn.pollFds(fds);
    } else if (auto* l = dynamic_cast<const SocketListen*>(comm)) {
      l->pollFds(fds);
    }
    return true;
  }

  bool quiescent(const Comm* comm) const override {
    if (auto* s = dynamic_cast<const SocketSend*>(comm)) return s->conn.quiescent();
    if (auto* r = dynamic_cast<const SocketRecv*>(comm)) return r->conn.quiescent();
    return false;
  }

  Status closeSend(SendComm* comm, uint32_t abortCode) override {
    auto* s = static_cast<SocketSend*>(comm);
    s->conn.close(abortCode, kLingerMs);
    delete s;
    return OkStatus();
  }
  Status closeRecv(RecvComm* comm, uint32_t abortCode) override {
    auto* r = static_cast<SocketRecv*>(comm);
    r->conn.close(abortCode, kLingerMs);
    delete r;
    return OkStatus();
  }
  uint32_t peerAbortCode(const Comm* comm) const override {
    if (auto* s = dynamic_cast<const SocketSend*>(comm)) return s->conn.peerAbortCode();
    if (auto* r = dynamic_cast<const SocketRecv*>(comm)) return r->conn.peerAbortCode();
    return 0;
  }
  bool peerClosed(const Comm* comm) const override {
    if (auto* s = dynamic_cast<const SocketSend*>(comm)) return s->conn.peerClosed();
    if (auto* r = dynamic_cast<const SocketRecv*>(comm)) return r->conn.peerClosed();
    return false;
  }
  Status closeListen(ListenComm* comm) override {
    delete static_cast<SocketListen*>(comm);
    return OkStatus();
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
  sock::Interface iface_;
  int nstreams_ = 1;
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
