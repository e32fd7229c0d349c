// Scratch memory of operations (staged sends of in-place p2p groups, kScratch buffers of
// schedules), reused across operations of one communicator. A fresh page costs ~13 us to
// fault in on a virtual machine, so a 32 MiB temporary allocated per call would cost 100 ms;
// blocks here are mapped prefaulted once and then handed out again.
//
// Invariants: a block is owned by at most one Lease at a time; the pool outlives every
// Lease taken from it (the communicator owns the pool and destroys its runners first).
//
// A pool given a RegCache (the communicator's) enters every block it maps there for as
// long as the block stays mapped, so that net plugins that need registration may send
// from and receive into scratch memory in place (transport/net/reg_cache.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "transport/net/reg_cache.h"

namespace snccl {

class ScratchPool;

class ScratchLease {
 public:
  ScratchLease() = default;
  ScratchLease(ScratchLease&& o) noexcept { *this = std::move(o); }
  ScratchLease& operator=(ScratchLease&& o) noexcept;
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  ~ScratchLease() { release(); }

  // Makes data() hold at least `bytes` (keeps the current block when it is big enough).
  // Returns false when memory is exhausted.
  bool ensure(ScratchPool& pool, size_t bytes);
  void release();
  char* data() const { return data_; }
  size_t capacity() const { return bytes_; }

 private:
  ScratchPool* pool_ = nullptr;
  char* data_ = nullptr;
  size_t bytes_ = 0;
  uint64_t regId_ = 0;
};

class ScratchPool {
 public:
  ScratchPool() = default;
  explicit ScratchPool(std::shared_ptr<net::RegCache> regs) : regs_(std::move(regs)) {}
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;
  ~ScratchPool();

 private:
  friend class ScratchLease;
  struct Block {
    char* data;
    size_t bytes;
    uint64_t regId;  // its range in regs_ (0: none)
  };
  void unmap(const Block& b);
  // The smallest free block of at least `bytes`, or a new one; {nullptr, 0} on failure.
  Block take(size_t bytes);
  void give(Block b);

  static constexpr size_t kMaxFree = 4;  // free blocks kept; more are unmapped
  std::mutex mu_;
  std::vector<Block> free_;  // under mu_
  std::shared_ptr<net::RegCache> regs_;
};

}  // namespace snccl
