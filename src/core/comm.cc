// Communicator runtime: validity and errors, connections, thread placement, finalize/free/abort
// (creation: comm_create.cc).
#include "core/comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/params.h"
#include "core/executor.h"
#include "core/flight_dump.h"
#include "core/user_pages.h"
#include "topology/affinity.h"
#include "topology/rank_pinning.h"

namespace snccl {

CommCaches::CommCaches(std::shared_ptr<net::RegCache> regs) : scratchPool{std::move(regs)} {}
CommCaches::~CommCaches() = default;

Registration* CommRegistrations::add(void* buff, size_t size, bool share) {
  // Shared before the net may register the pages with a NIC: a registration pins the
  // physical pages, which must be the ones the addresses keep.
  const uint64_t shared = share ? userpages::share(buff, size) : 0;
  auto reg = std::make_unique<Registration>(Registration{buff, size, net->add(buff, size), shared});
  Registration* handle = reg.get();
  std::lock_guard<std::mutex> lock(mutex_);
  list_.push_back(std::move(reg));
  return handle;
}

size_t CommRedOps::add(const PreMulOp& op) {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t idx = 0;
  while (idx < preMul_.size() && preMul_[idx].live) ++idx;
  if (idx == preMul_.size()) preMul_.push_back(op);
  else preMul_[idx] = op;
  return idx;
}

bool CommRedOps::remove(size_t idx) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idx >= preMul_.size() || !preMul_[idx].live) return false;
  preMul_[idx].live = false;
  return true;
}

std::optional<PreMulOp> CommRedOps::find(size_t idx) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (idx >= preMul_.size() || !preMul_[idx].live) return std::nullopt;
  return preMul_[idx];
}

PreMulOp CommRedOps::at(size_t idx) {
  std::lock_guard<std::mutex> lock(mutex_);
  return preMul_[idx];
}

CommRegistrations::~CommRegistrations() {
  for (const auto& r : list_) userpages::release(r->sharedId);
}

bool CommRegistrations::remove(const void* handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find_if(list_.begin(), list_.end(), [&](const auto& r) { return r.get() == handle; });
  if (it == list_.end()) return false;
  net->remove((*it)->netId);
  userpages::release((*it)->sharedId);
  list_.erase(it);
  return true;
}

void commPlaceThread(ncclComm* comm) {
  // A thread that gets a recycled id of a placed one is not placed: harmless (no pin).
  const std::thread::id self = std::this_thread::get_id();
  if (comm->placedThread.load(std::memory_order_relaxed) == self) return;
  comm->placedThread.store(self, std::memory_order_relaxed);
  if (params::getInt(params::Id::PinRanks) == 0) return;
  // Only a thread that may run on every online CPU: one a launcher or the user bound
  // (to one CPU, or to a share of the node per rank) is left where it is. The node is
  // oversubscribed when it has more ranks than CPUs; with every rank unbound, the cost
  // model and the spin budget judge it so too (common/cpu_set.h).
  const std::vector<int> allowed = topo::currentThreadCpus();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 2 || static_cast<long>(allowed.size()) != online) return;
  const int cpu = topo::pinnedCpuFor(comm->peers.localRank, comm->peers.localRanks, allowed);
  if (cpu < 0) return;
  Status st = topo::bindCurrentThread(std::span<const int>(&cpu, 1));
  if (!st.ok()) {
    SN_INFO(log::kInit, "rank %d: not pinned to CPU %d: %s", comm->rank, cpu, st.message().c_str());
    return;
  }
  SN_INFO(log::kInit, "rank %d (local %d of %d on %zu CPUs): thread pinned to CPU %d (SNCCL_PIN_RANKS)", comm->rank,
          comm->peers.localRank, comm->peers.localRanks, allowed.size(), cpu);
}

Status checkComm(ncclComm* comm, bool requireReady) {
  if (comm == nullptr) return InvalidArgument("comm argument is NULL");
  if (comm->magic != ncclComm::kMagic) return InvalidArgument("comm argument %p is not a valid communicator", (void*)comm);
  if (!requireReady) return OkStatus();
  // A non-blocking init may still be running: collectives wait for it.
  while (comm->errors.state.load() == int(CommState::kInitializing))
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  int state = comm->errors.state.load();
  if (state == int(CommState::kFailed)) return comm->errors.failure();
  if (state == int(CommState::kRevoked)) return InvalidUsage("communicator was revoked");
  if (state == int(CommState::kFinalized)) return InvalidUsage("communicator was finalized");
  return OkStatus();
}

void commSetError(ncclComm* comm, const Status& status) {
  if (!comm->errors.setFirst(status)) return;
  // Peers blocked on us fail now rather than at their timeout; the poison word also
  // names the rank where the failure started, so every survivor can report it.
  int culprit = comm->errors.culprit.load();
  uint32_t word = encodePoison(status.code() == ncclSuccess ? ncclInternalError : status.code(),
                               culprit >= 0 ? culprit : comm->rank);
  for (auto& c : comm->conns.send)
    if (c) c->poison(word);
  for (auto& c : comm->conns.recv)
    if (c) c->poison(word);
  flight::dumpToConfiguredDir(comm, "error");
}

namespace {

constexpr uint32_t kTagConnect = 0x434f4e00;  // "CON"

// A ConnBlob over the bootstrap: its fixed fields and the payload's length in one
// message, then the payload in a second (messages of one tag between two ranks arrive
// in the order they were sent).
struct ConnBlobWire {
  char transport[16];
  uint64_t words[4];
  char name[96];
  int32_t channel;
  uint32_t payloadBytes;
};

Status sendConnBlob(Bootstrap& boot, int peer, const ConnBlob& blob) {
  if (blob.payload.size() > kMaxConnPayload)
    return InternalError("a %zu-byte connection description (at most %zu)", blob.payload.size(), kMaxConnPayload);
  ConnBlobWire w{};
  std::memcpy(w.transport, blob.transport, sizeof w.transport);
  std::memcpy(w.words, blob.words, sizeof w.words);
  std::memcpy(w.name, blob.name, sizeof w.name);
  w.channel = blob.channel;
  w.payloadBytes = uint32_t(blob.payload.size());
  SNCCL_TRY(boot.send(peer, kTagConnect, &w, sizeof w));
  if (!blob.payload.empty()) SNCCL_TRY(boot.send(peer, kTagConnect, blob.payload.data(), blob.payload.size()));
  return OkStatus();
}

Status recvConnBlob(Bootstrap& boot, int peer, ConnBlob* blob) {
  ConnBlobWire w{};
  SNCCL_TRY(boot.recv(peer, kTagConnect, &w, sizeof w));
  if (w.payloadBytes > kMaxConnPayload)
    return InternalError("rank %d described a connection with %u bytes (at most %zu)", peer, w.payloadBytes,
                         kMaxConnPayload);
  std::memcpy(blob->transport, w.transport, sizeof w.transport);
  std::memcpy(blob->words, w.words, sizeof w.words);
  std::memcpy(blob->name, w.name, sizeof w.name);
  blob->channel = w.channel;
  blob->payload.resize(w.payloadBytes);
  if (w.payloadBytes > 0) SNCCL_TRY(boot.recv(peer, kTagConnect, blob->payload.data(), w.payloadBytes));
  return OkStatus();
}

}  // namespace

Status commConnect(ncclComm* comm, const std::vector<ConnKey>& sends, const std::vector<ConnKey>& recvs) {
  const PeerInfo& self = comm->peers.info[comm->rank];
  auto request = [&](ConnKey k) {
    return ConnRequest{comm->peers.commHash, comm->rank, k.peer, k.channel, comm->conns.nsteps,
                       comm->conns.slotBytes, &self, &comm->peers.info[k.peer], comm->regs.net,
                       &comm->conns.nic, comm->stats.railTally(k.peer)};
  };
  for (const std::vector<ConnKey>* keys : {&sends, &recvs})
    for (ConnKey k : *keys)
      if (k.peer == comm->rank || k.peer < 0 || k.peer >= comm->nranks || k.channel < 0 || k.channel >= kMaxChannels)
        return InternalError("schedule connects to rank %d channel %d (this is rank %d of %d)", k.peer, k.channel,
                             comm->rank, comm->nranks);
  // Receivers create and announce first (the sends are buffered), then senders attach:
  // no rank waits before it has announced everything its peers wait for.
  for (ConnKey k : recvs) {
    std::unique_ptr<Connection>& conn = comm->conns.recvOf(k);
    if (conn) continue;
    SNCCL_ASSIGN_OR_RETURN(const TransportDef* t, selectTransport(comm->peers.info[k.peer], self));
    ConnBlob blob{};
    SNCCL_ASSIGN_OR_RETURN(conn, t->createRecv(request(k), &blob));
    comm->stats.setLink(k.peer, conn->link());
    if (conn->receivesAtPointers()) comm->conns.plansRecvs.store(true, std::memory_order_relaxed);
    blob.channel = k.channel;
    SNCCL_TRY(sendConnBlob(*comm->bootstrap, k.peer, blob));
    SN_INFO(log::kInit, "Channel %02d : %d[%d] -> %d[%d] via %s", k.channel, k.peer, comm->peers.info[k.peer].cudaDev,
            comm->rank, self.cudaDev, t->name);
  }
  for (ConnKey k : sends) {
    std::unique_ptr<Connection>& conn = comm->conns.sendOf(k);
    if (conn) continue;
    ConnBlob blob{};
    SNCCL_TRY(recvConnBlob(*comm->bootstrap, k.peer, &blob));
    blob.transport[sizeof blob.transport - 1] = '\0';
    const TransportDef* t = findTransport(blob.transport);
    if (t == nullptr) return InternalError("rank %d offered unknown transport '%s'", k.peer, blob.transport);
    if (blob.channel != k.channel)
      return InternalError("rank %d offered its channel %d connection where channel %d was expected (the ranks "
                           "split a call differently)",
                           k.peer, blob.channel, k.channel);
    SNCCL_ASSIGN_OR_RETURN(conn, t->connectSend(request(k), blob));
    comm->stats.setLink(k.peer, conn->link());
  }
  return OkStatus();
}

Status commFinalize(ncclComm* comm) {
  comm->ordering.waitAll();
  int expected = int(CommState::kReady);
  comm->errors.state.compare_exchange_strong(expected, int(CommState::kFinalized));
  return OkStatus();
}

void commFree(ncclComm* comm) {
  if (comm->initThread.joinable()) comm->initThread.join();
  flight::unregisterComm(comm);
  comm->ordering.waitAll();  // queued host-stream work still references the communicator
  comm->ordering.waitRunnersGone();
  comm->magic = 0;
  delete comm;
}

void commAbort(ncclComm* comm) {
  comm->errors.abortFlag.store(true);
  if (comm->bootstrap) {
    // Peers may be in connection setup with us (waiting for our blob, or connecting):
    // tell them, ring neighbours first, within a short budget. NCCL's abort is purely
    // local; ours stays local in effect but spares the peers their full timeout.
    std::vector<int> order;
    int n = comm->nranks;
    for (int d = 1; d <= n / 2; ++d) {
      order.push_back((comm->rank + d) % n);
      if (n - d != d) order.push_back((comm->rank - d + n) % n);
    }
    const int culprit = comm->errors.culprit.load();
    comm->bootstrap->notifyAbort(order, std::chrono::milliseconds(500), culprit >= 0 ? culprit : comm->rank);
    comm->bootstrap->abort();
  }
  // Connections may be mid-creation in the init thread; poison only after it is gone.
  if (comm->initThread.joinable()) comm->initThread.join();
  commSetError(comm, RemoteError("rank %d aborted the communicator", comm->rank));
  commFree(comm);
}

}  // namespace snccl
