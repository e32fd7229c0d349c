#include "core/scratch_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "common/prefault.h"

namespace snccl {

ScratchLease& ScratchLease::operator=(ScratchLease&& o) noexcept {
  if (this != &o) {
    release();
    pool_ = o.pool_;
    data_ = o.data_;
    bytes_ = o.bytes_;
    regId_ = o.regId_;
    o.pool_ = nullptr;
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.regId_ = 0;
  }
  return *this;
}

bool ScratchLease::ensure(ScratchPool& pool, size_t bytes) {
  if (data_ != nullptr && bytes_ >= bytes && pool_ == &pool) return true;
  release();
  if (bytes == 0) return true;
  ScratchPool::Block b = pool.take(bytes);
  if (b.data == nullptr) return false;
  pool_ = &pool;
  data_ = b.data;
  bytes_ = b.bytes;
  regId_ = b.regId;
  return true;
}

void ScratchLease::release() {
  if (pool_ != nullptr && data_ != nullptr) pool_->give({data_, bytes_, regId_});
  pool_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
  regId_ = 0;
}

ScratchPool::~ScratchPool() {
  for (const Block& b : free_) unmap(b);
}

void ScratchPool::unmap(const Block& b) {
  if (regs_ != nullptr && b.regId != 0) regs_->remove(b.regId);
  munmap(b.data, b.bytes);
}

ScratchPool::Block ScratchPool::take(size_t bytes) {
  {
    std::lock_guard<std::mutex> g(mu_);
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it)
      if (it->bytes >= bytes && (best == free_.end() || it->bytes < best->bytes)) best = it;
    if (best != free_.end()) {
      Block b = *best;
      free_.erase(best);
      return b;
    }
  }
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t rounded = (bytes + page - 1) / page * page;
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return {nullptr, 0, 0};
  touchPagesForWrite(p, rounded);  // common/prefault.h
  return {static_cast<char*>(p), rounded, regs_ != nullptr ? regs_->add(p, rounded) : 0};
}

void ScratchPool::give(Block b) {
  std::lock_guard<std::mutex> g(mu_);
  free_.push_back(b);
  if (free_.size() > kMaxFree) {
    // Drop the smallest: the big ones are the expensive ones to fault in again.
    auto smallest = std::min_element(free_.begin(), free_.end(),
                                     [](const Block& x, const Block& y) { return x.bytes < y.bytes; });
    unmap(*smallest);
    free_.erase(smallest);
  }
}

}  // namespace snccl
