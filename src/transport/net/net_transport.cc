// The net transport: local rings for the executor, a net comm per connection, the proxy
// between them.
//
// Handshake (transport.h): the receiver allocates its ring, listens and sends the listen
// handle in the ConnBlob; the sender allocates its own ring and connects. Setup finishes
// in the proxy thread (accept and connect are non-blocking), so neither rank waits here;
// the executor simply finds no credit / no data until the connection is up, under its
// usual deadline.
#include "transport/net/net_transport.h"

#include <sys/mman.h>

#include <cstring>

#include "common/log.h"
#include "common/params.h"
#include "common/prefault.h"
#include "transport/net/net.h"
#include "transport/net/net_device.h"
#include "transport/net/net_entry.h"
#include "transport/net/proxy.h"

namespace snccl {

namespace {

using net::Proxy;

// The ring's memory; releases the proxy entry (which may first flush what the executor
// posted) before the memory goes away. The ring's other end is the proxy, so the executor
// may drive the entry itself while it waits (net/proxy.h), and, with a plugin that uses
// unregistered host memory, the proxy sends from or receives into the executor's memory.
class NetRing : public ConnMemory, Drivable, ZeroCopySend, ZeroCopyRecv {
 public:
  // atPointers: a send ring that sends from the executor's memory (postAt), or a receive
  // ring that receives into it (planRecvs).
  NetRing(void* base, size_t bytes, bool send, bool atPointers, bool pollsInUserSpace)
      : base_(base),
        bytes_(bytes),
        send_(send),
        atPointers_(atPointers),
        pollsInUserSpace_(pollsInUserSpace),
        proxy_(&Proxy::instance()) {}
  ~NetRing() override {
    if (entry_ != nullptr) proxy_->release(entry_);
    munmap(base_, bytes_);
  }
  ConnCaps caps() override {
    return {.drivable = this,
            .zeroCopySend = send_ && atPointers_ ? static_cast<ZeroCopySend*>(this) : nullptr,
            .zeroCopyRecv = !send_ && atPointers_ ? static_cast<ZeroCopyRecv*>(this) : nullptr,
            .pollsInUserSpace = pollsInUserSpace_};
  }
  void claimDrive() override { entry_->claim(); }
  void releaseDrive(bool waiting) override {
    if (entry_->unclaimAfterDriving(waiting)) proxy_->unclaimed();
  }
  bool drive() override { return entry_->tryDrive(); }
  void planRecvs(uint64_t first, std::span<const RecvTarget> targets) override { plan_.set(first, targets); }
  void quiesce() override {
    if (entry_ != nullptr) entry_->quiesce();
  }
  void setEntry(net::ProxyEntry* e) { entry_ = e; }
  ConnCtrl* ctrl() const { return static_cast<ConnCtrl*>(base_); }
  char* slots() const { return static_cast<char*>(base_) + connCtrlBytes(); }
  net::RingView view(const ConnRequest& req) {
    return {ctrl(), slots(), req.nsteps, req.slotBytes, &note_, !send_ && atPointers_ ? &plan_ : nullptr};
  }
  std::string failureDetail() const override { return note_.get(); }

 private:
  void* base_;
  size_t bytes_;
  bool send_;
  bool atPointers_;  // the user allows it (with a plugin that needs registration, only
                     // registered memory is used in place: net_entry.h)
  bool pollsInUserSpace_;  // net::Net::pollsInUserSpace
  Proxy* proxy_;  // this process's (Proxy::instance() takes a lock: not on the hot path)
  net::ProxyEntry* entry_ = nullptr;
  // Both written by the entry, which release() detaches before they go.
  net::FailureNote note_;
  net::RecvPlan plan_;
};

Result<std::unique_ptr<NetRing>> allocRing(const ConnRequest& req, const net::Net& n, bool send, bool atPointers) {
  size_t bytes = connCtrlBytes() + size_t(req.nsteps) * req.slotBytes;
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (base == MAP_FAILED) return ErrnoError(errno, "net transport: mmap of a %zu-byte ring failed", bytes);
  touchPagesForWrite(base, bytes);  // the proxy writes received slots, the executor sent ones
  initConnCtrl(static_cast<ConnCtrl*>(base), req.nsteps, req.slotBytes);
  return std::make_unique<NetRing>(base, bytes, send, atPointers, n.pollsInUserSpace());
}

Result<net::Net*> netFor(const ConnRequest& req) {
  Result<net::Net*> n = net::defaultNet();
  if (!n.ok()) {
    Status s = n.status();
    return s.addContext(format("net transport between rank %d and rank %d", req.rank, req.peer));
  }
  return n;
}

int timeoutSec() { return int(std::max<int64_t>(0, params::getInt(params::Id::Timeout))); }

net::EntryInfo entryInfo(const ConnRequest& req, bool send, int dev) {
  return {format("rank %d %s rank %d channel %d (comm %016llx)", req.rank, send ? "->" : "<-", req.peer, req.channel,
                 (unsigned long long)req.commHash),
          req.rank, req.peer, timeoutSec(), dev, req.regs, req.rails, send};
}

// "IB/mlx5_0": the plugin and the device's name (its index when it has none).
std::string linkName(const net::Net& n, int dev) {
  net::Properties props;
  if (n.getProperties(dev, &props).ok() && !props.name.empty()) return format("%s/%s", n.name(), props.name.c_str());
  return format("%s/%d", n.name(), dev);
}

// Different processes: local and shm come first in the table, so this is reached for
// ranks on other nodes, or on this node when shm is disabled.
bool canConnect(const PeerInfo& self, const PeerInfo& peer) { return self.processToken != peer.processToken; }

Result<std::unique_ptr<Connection>> createRecv(const ConnRequest& req, ConnBlob* blob) {
  SNCCL_ASSIGN_OR_RETURN(net::Net * n, netFor(req));
  SNCCL_ASSIGN_OR_RETURN(auto ring, allocRing(req, *n, false, params::getInt(params::Id::NetRecvUserBuffers) != 0));
  net::Handle handle{};
  net::ListenComm* listen = nullptr;
  const int dev = net::pickNetDevice(*n, req.nic, req.channel);
  SNCCL_TRY(n->listen(dev, &handle, &listen));
  if (handle.bytes.size() > kMaxConnPayload) {
    (void)n->closeListen(listen);
    return InternalError("net plugin %s: a %zu-byte listen handle (at most %zu)", n->name(), handle.bytes.size(),
                         kMaxConnPayload);
  }
  *blob = ConnBlob{};
  std::strncpy(blob->transport, "net", sizeof blob->transport - 1);
  blob->words[0] = req.nsteps;
  blob->words[1] = req.slotBytes;
  blob->payload = handle.bytes;  // any length: commConnect sends it after the fixed fields
  net::RingView view = ring->view(req);
  auto entry = std::make_unique<net::RecvEntry>(n, view, listen, entryInfo(req, false, dev));
  ring->setEntry(entry.get());
  Proxy::instance().add(std::move(entry));
  SN_INFO(log::kNet, "Channel %02d/0 : %d[%d] -> %d[%d] [receive] via NET/%s/%d", req.channel, req.peer,
          req.remote->cudaDev,
          req.rank, req.self->cudaDev, n->name(), dev);
  ConnCtrl* ctrl = ring->ctrl();
  char* slots = ring->slots();
  auto conn = std::make_unique<Connection>(ctrl, slots, std::move(ring), req.peer, 0, "net");
  conn->setLink(linkName(*n, dev));
  return conn;
}

Result<std::unique_ptr<Connection>> connectSend(const ConnRequest& req, const ConnBlob& blob) {
  if (blob.words[0] != req.nsteps || blob.words[1] != req.slotBytes)
    return InvalidUsage(
        "rank %d and rank %d disagree on connection geometry (%u x %u vs %llu x %llu bytes): "
        "set SNCCL_STEPS/SNCCL_BUFFSIZE (SNCCL_NET_STEPS/SNCCL_NET_BUFFSIZE across nodes) and "
        "SNCCL_NET identically on all ranks",
        req.rank, req.peer, req.nsteps, req.slotBytes, (unsigned long long)blob.words[0],
        (unsigned long long)blob.words[1]);
  SNCCL_ASSIGN_OR_RETURN(net::Net * n, netFor(req));
  SNCCL_ASSIGN_OR_RETURN(auto ring, allocRing(req, *n, true, params::getInt(params::Id::NetSendUserBuffers) != 0));
  net::Handle handle{blob.payload};
  net::RingView view = ring->view(req);
  const int dev = net::pickNetDevice(*n, req.nic, req.channel);
  auto entry = std::make_unique<net::SendEntry>(n, view, handle, entryInfo(req, true, dev));
  ring->setEntry(entry.get());
  Proxy::instance().add(std::move(entry));
  SN_INFO(log::kNet, "Channel %02d/0 : %d[%d] -> %d[%d] [send] via NET/%s/%d", req.channel, req.rank,
          req.self->cudaDev, req.peer,
          req.remote->cudaDev, n->name(), dev);
  ConnCtrl* ctrl = ring->ctrl();
  char* slots = ring->slots();
  auto conn = std::make_unique<Connection>(ctrl, slots, std::move(ring), req.peer, 0, "net");
  conn->setLink(linkName(*n, dev));
  return conn;
}

}  // namespace

TransportDef netTransport() {
  return {"net", "ranks on different nodes (or shm disabled): a net plugin (SNCCL_NET) driven by the proxy thread",
          canConnect, createRecv, connectSend};
}

}  // namespace snccl
