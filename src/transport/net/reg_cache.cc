// Registration cache of the net transport (reg_cache.h).
#include "transport/net/reg_cache.h"

#include <algorithm>

#include "common/log.h"

namespace snccl::net {

uint64_t RegCache::add(const void* addr, size_t bytes) {
  if (addr == nullptr || bytes == 0) return 0;
  // First, before any comm can find the range: a registration of the pages that were at
  // this address before may still be shareable (one made by a comm racing with the
  // remove() of that memory, or memory freed without ncclCommDeregister). The new range
  // must get registrations of its own pages.
  std::vector<Net*> nets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    nets = nets_;
  }
  for (Net* n : nets) n->forgetRange(addr, bytes);
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t id = nextId_++;
  auto begin = reinterpret_cast<uintptr_t>(addr);
  ranges_.push_back({begin, begin + bytes, id});
  version_.fetch_add(1, std::memory_order_release);
  return id;
}

bool RegCache::remove(uint64_t id) {
  Range gone{};
  std::vector<Net*> nets;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find_if(ranges_.begin(), ranges_.end(), [id](const Range& r) { return r.id == id; });
    if (it == ranges_.end()) return false;
    gone = *it;
    ranges_.erase(it);
    version_.fetch_add(1, std::memory_order_release);
    nets = nets_;
  }
  // Before the caller frees the memory: a net must not reuse a registration of these pages
  // for whatever is mapped at the address next, even while a comm still holds one.
  for (Net* n : nets) n->forgetRange(reinterpret_cast<const void*>(gone.begin), gone.end - gone.begin);
  return true;
}

void RegCache::watch(Net* net) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::find(nets_.begin(), nets_.end(), net) == nets_.end()) nets_.push_back(net);
}

std::vector<RegCache::Range> RegCache::snapshot(uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  // Read under the lock: every change bumps it under the lock too, so the pair agrees.
  *version = version_.load(std::memory_order_relaxed);
  return ranges_;
}

CommMrs::~CommMrs() {
  if (ring_ != nullptr || !mrs_.empty() || !retired_.empty())
    SN_WARN("NET : %zu memory registration(s) left on a comm that was not released", live());
}

Status CommMrs::registerRing(Comm* comm, void* base, size_t bytes) {
  if (ringRegistered_) return OkStatus();
  SNCCL_TRY(net_->regMr(comm, base, bytes, kPtrHost, &ring_));
  ringRegistered_ = true;
  return OkStatus();
}

void CommMrs::sync(uint64_t posted) {
  ranges_ = regs_->snapshot(&seen_);
  // Handles of ranges that left the cache are no longer found; they are deregistered once
  // nothing in flight can use them (reclaim).
  auto gone = std::stable_partition(mrs_.begin(), mrs_.end(), [&](const Mr& m) {
    return std::any_of(ranges_.begin(), ranges_.end(), [&](const RegCache::Range& r) { return r.id == m.id; });
  });
  for (auto it = gone; it != mrs_.end(); ++it)
    if (it->mh != nullptr) retired_.push_back({it->begin, it->end, it->id, it->mh, posted});
  mrs_.erase(gone, mrs_.end());
}

MemHandle* CommMrs::lookup(Comm* comm, const void* addr, size_t bytes, uint64_t posted) {
  if (regs_ == nullptr) return nullptr;
  if (regs_->version() != seen_) sync(posted);
  auto begin = reinterpret_cast<uintptr_t>(addr);
  uintptr_t end = begin + bytes;
  for (const Mr& m : mrs_)
    if (m.begin <= begin && end <= m.end) return m.mh;
  for (const RegCache::Range& r : ranges_) {
    if (r.begin > begin || end > r.end) continue;
    MemHandle* mh = nullptr;
    Status s = net_->regMr(comm, reinterpret_cast<void*>(r.begin), r.end - r.begin, kPtrHost, &mh);
    if (!s.ok()) {
      SN_INFO(log::kNet, "NET/%s : registering %zu bytes at %p failed (%s); they go through slots", net_->name(),
              size_t(r.end - r.begin), reinterpret_cast<void*>(r.begin), s.message().c_str());
      mh = nullptr;
    }
    mrs_.push_back({r.begin, r.end, r.id, mh, 0});
    return mh;
  }
  return nullptr;
}

void CommMrs::dereg(Comm* comm, MemHandle* mh) {
  Status s = net_->deregMr(comm, mh);
  if (!s.ok()) SN_INFO(log::kNet, "NET/%s : deregMr: %s", net_->name(), s.message().c_str());
}

void CommMrs::reclaimRetired(Comm* comm, uint64_t completed) {
  auto keep = std::stable_partition(retired_.begin(), retired_.end(),
                                    [&](const Mr& m) { return m.usedBefore > completed; });
  for (auto it = keep; it != retired_.end(); ++it) dereg(comm, it->mh);
  retired_.erase(keep, retired_.end());
}

void CommMrs::releaseAll(Comm* comm) {
  reclaimRetired(comm, UINT64_MAX);
  for (const Mr& m : mrs_)
    if (m.mh != nullptr) dereg(comm, m.mh);
  mrs_.clear();
  if (ringRegistered_ && ring_ != nullptr) dereg(comm, ring_);
  ring_ = nullptr;
  ringRegistered_ = false;
}

}  // namespace snccl::net
