// The process's ncclMemAlloc blocks. Each is an anonymous memory file (memfd) mapped
// shared and prefaulted, so that a rank of the same node in another process can map the
// same pages (through /proc/<pid>/fd/<fd>) and read the buffer directly: the single-copy
// AllReduce (core/mapped_allreduce.h) reads its peers' inputs and outputs that way.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"

namespace snccl::memblocks {

// A user buffer inside a block, as another process can find it.
struct FileRef {
  int32_t fd = -1;      // the owner's descriptor of the memory file
  uint64_t ino = 0;     // its inode number (0: not in a block)
  uint64_t offset = 0;  // of the buffer in the file
};

Result<void*> allocate(size_t size);
Status release(void* ptr);
// The block holding all of [p, p + bytes), if any (ino 0 otherwise).
FileRef find(const void* p, size_t bytes);

}  // namespace snccl::memblocks
