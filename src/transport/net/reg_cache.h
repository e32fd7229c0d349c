// Memory registration for net plugins that need it (Net::usesUnregisteredHostMemory()
// false: verbs, UCX): which host ranges a communicator's net comms may send from and
// receive into without a copy, and each comm's MemHandles for them.
//
// RegCache holds the ranges of one communicator: the buffers the user registered
// (ncclCommRegister) and the communicator's own memory that rings name (scratch). The
// user's thread adds and removes ranges; the threads that drive net comms (the proxy, or
// the executor while it drives a ring) read them. A plugin registers memory per comm, so
// each comm has a CommMrs, used only by the thread that currently uses the comm: it
// registers a range with the comm the first time a message is sent from or received into
// it (lookup), and deregisters it once the range is gone from the RegCache and every
// request posted before that was noticed has completed (reclaim), or when the comm closes
// (releaseAll). Requests count in posting order, as they complete (net.h).
//
// A range removed while an operation still uses it (ncclCommDeregister before the
// operation completed: the user's error, as in NCCL) stops being found at once: messages
// not yet handed to the plugin then go through a slot (a copy), while those already
// posted keep their MemHandle, which stays registered until they completed. The library
// itself never frees, unmaps or writes the range because of it; what a plugin does with
// memory the user freed under a live registration is the plugin's (sockets: nothing;
// verbs: the pages stay pinned until deregMr).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "common/status.h"
#include "transport/net/net.h"

namespace snccl::net {

class RegCache {
 public:
  struct Range {
    uintptr_t begin;
    uintptr_t end;
    uint64_t id;  // unique for the cache's lifetime: a range registered again is a new id
  };

  // Adds [addr, addr + bytes); returns the id that remove() takes (0 for an empty range,
  // which is never found). Tells the nets watching (Net::forgetRange), so that the range
  // gets registrations of the pages mapped there now.
  uint64_t add(const void* addr, size_t bytes);
  // Removes the range `id` and tells the nets watching (Net::forgetRange), before the
  // caller gives the memory back; false when there is none.
  bool remove(uint64_t id);
  // Makes add() and remove() tell `net` (once per net, however often it is asked).
  void watch(Net* net);
  // Changes with every add and remove: a reader compares it with the one it saw last.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // The current ranges and the version they belong to.
  std::vector<Range> snapshot(uint64_t* version) const;

 private:
  mutable std::mutex mu_;
  std::vector<Range> ranges_;  // under mu_
  std::vector<Net*> nets_;     // under mu_: the nets registering these ranges (process-wide plugins)
  uint64_t nextId_ = 1;        // under mu_
  std::atomic<uint64_t> version_{0};
};

class CommMrs {
 public:
  // `regs` may be null (a connection made outside a communicator): then only the ring is
  // registered.
  CommMrs(Net* net, std::shared_ptr<RegCache> regs) : net_(net), regs_(std::move(regs)) {
    if (regs_ != nullptr) regs_->watch(net_);
  }
  CommMrs(const CommMrs&) = delete;
  CommMrs& operator=(const CommMrs&) = delete;
  ~CommMrs();  // expects releaseAll() to have run (a comm that never existed has none)

  // Registers the ring's slot area with `comm`, once the comm exists.
  Status registerRing(Comm* comm, void* base, size_t bytes);
  MemHandle* ring() const { return ring_; }
  // The MemHandle on `comm` of a registered range covering [addr, addr + bytes), or null
  // when no range covers it (the caller then uses a slot). Registers the range with the
  // comm on first use; a range the plugin refuses is remembered and not tried again.
  // `posted`: requests posted on the comm so far.
  MemHandle* lookup(Comm* comm, const void* addr, size_t bytes, uint64_t posted);
  // Notices ranges removed from the RegCache, and deregisters those whose handles no
  // request in flight can use: `completed` requests of the comm have completed.
  void reclaim(Comm* comm, uint64_t posted, uint64_t completed) {
    if (regs_ != nullptr && regs_->version() != seen_) sync(posted);
    if (!retired_.empty()) reclaimRetired(comm, completed);
  }
  // Deregisters everything (the ring too): before the comm is closed.
  void releaseAll(Comm* comm);
  // Registrations made on the comm so far (ring included) and live now, for tests and logs.
  size_t live() const { return (ring_ != nullptr ? 1 : 0) + mrs_.size() + retired_.size(); }

 private:
  struct Mr {
    uintptr_t begin;
    uintptr_t end;
    uint64_t id;
    MemHandle* mh;  // null: the plugin refused the range
    uint64_t usedBefore;  // retired: requests posted before then may use mh
  };
  void sync(uint64_t posted);
  void reclaimRetired(Comm* comm, uint64_t completed);
  void dereg(Comm* comm, MemHandle* mh);

  Net* net_;
  std::shared_ptr<RegCache> regs_;
  MemHandle* ring_ = nullptr;
  bool ringRegistered_ = false;
  uint64_t seen_ = 0;               // regs_->version() that mrs_ and ranges_ reflect
  std::vector<RegCache::Range> ranges_;  // the RegCache's ranges at seen_
  std::vector<Mr> mrs_;             // registered on the comm, range still in the cache
  std::vector<Mr> retired_;         // registered, range removed: deregistered by reclaim()
};

}  // namespace snccl::net
