// The local transport: the receiver allocates the ring on the heap (prefaulted) and
// passes its address to the sender, which is in the same address space.
#include "transport/local/local_transport.h"

#include <sys/mman.h>

#include <cstring>

namespace snccl {

namespace {

class Mapping : public ConnMemory {
 public:
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~Mapping() override { munmap(base_, bytes_); }

 private:
  void* base_;
  size_t bytes_;
};

// Shared ownership between the two ends: the ring lives until both have released it.
class SharedMemoryRef : public ConnMemory {
 public:
  explicit SharedMemoryRef(std::shared_ptr<Mapping> m) : m_(std::move(m)) {}

 private:
  std::shared_ptr<Mapping> m_;
};

bool canConnect(const PeerInfo& self, const PeerInfo& peer) { return self.processToken == peer.processToken; }

Result<std::unique_ptr<Connection>> createRecv(const ConnRequest& req, ConnBlob* blob) {
  size_t bytes = connCtrlBytes() + size_t(req.nsteps) * req.slotBytes;
  // MAP_POPULATE: page faults cost ~13 us each here; take them once, now.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (base == MAP_FAILED) return ErrnoError(errno, "local transport: mmap of %zu bytes failed", bytes);
  auto ctrl = static_cast<ConnCtrl*>(base);
  initConnCtrl(ctrl, req.nsteps, req.slotBytes);
  // The sender takes a second reference through the blob; a heap-allocated shared_ptr
  // carries it across (released by the sender in connectSend).
  auto shared = std::make_shared<Mapping>(base, bytes);
  auto* handoff = new std::shared_ptr<Mapping>(shared);
  std::memset(blob, 0, sizeof *blob);
  std::strncpy(blob->transport, "local", sizeof blob->transport - 1);
  blob->words[0] = reinterpret_cast<uintptr_t>(base);
  blob->words[1] = reinterpret_cast<uintptr_t>(handoff);
  char* slots = static_cast<char*>(base) + connCtrlBytes();
  return std::make_unique<Connection>(ctrl, slots, std::make_unique<SharedMemoryRef>(shared), req.peer, 0,
                                      "local");
}

Result<std::unique_ptr<Connection>> connectSend(const ConnRequest& req, const ConnBlob& blob) {
  auto* base = reinterpret_cast<char*>(static_cast<uintptr_t>(blob.words[0]));
  auto* handoff = reinterpret_cast<std::shared_ptr<Mapping>*>(static_cast<uintptr_t>(blob.words[1]));
  std::shared_ptr<Mapping> shared = std::move(*handoff);
  delete handoff;
  auto ctrl = reinterpret_cast<ConnCtrl*>(base);
  if (ctrl->nsteps != req.nsteps || ctrl->slotBytes != req.slotBytes)
    return InvalidUsage("rank %d and rank %d disagree on connection geometry (%u x %u vs %u x %u bytes): "
                        "set SNCCL_STEPS/SNCCL_BUFFSIZE identically on all ranks",
                        req.rank, req.peer, req.nsteps, req.slotBytes, ctrl->nsteps, ctrl->slotBytes);
  return std::make_unique<Connection>(ctrl, base + connCtrlBytes(), std::make_unique<SharedMemoryRef>(shared),
                                      req.peer, 0, "local");
}

}  // namespace

TransportDef localTransport() {
  return {"local", "ranks in one process: rings on the heap, shared by pointer", canConnect, createRecv,
          connectSend};
}

}  // namespace snccl
