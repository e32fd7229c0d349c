// A communicator's mappings of its peers' ncclMemAlloc blocks (core/mem_blocks.h): the
// single-copy AllReduce reads peers' inputs and writes their outputs through them. A
// block is mapped read-write on first use, through /proc/<pid>/fd/<fd> of its owner
// (which needs the same rights as reading that process's descriptors: same user, or
// root), and kept for later calls on the same buffers; at most kPerPeer blocks per peer
// stay mapped (least recently used go). The pages a call uses are prefaulted and touched
// before the call reads or writes them (common/prefault.h), once per mapping: only the
// span calls have used, so a large block of which calls use a little costs little.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "core/mem_blocks.h"

namespace snccl {

class PeerBuffers {
 public:
  PeerBuffers() = default;
  PeerBuffers(const PeerBuffers&) = delete;
  PeerBuffers& operator=(const PeerBuffers&) = delete;
  ~PeerBuffers();

  // Where `bytes` of peer `peer`'s (process `pid`) buffer at `ref` are in this process.
  Result<char*> resolve(int peer, pid_t pid, const memblocks::FileRef& ref, size_t bytes);

 private:
  static constexpr int kPerPeer = 8;
  struct Entry {
    int peer;
    uint64_t ino;
    char* base;
    size_t bytes;
    uint64_t lastUse;
    size_t touchedLo = 0, touchedHi = 0;  // the span of the block already touched
  };
  static void touch(Entry& e, size_t offset, size_t bytes);
  std::vector<Entry> entries_;
  uint64_t clock_ = 0;
};

}  // namespace snccl
