// ncclMemAlloc's blocks: memfd files mapped shared, and the registry that finds them.
#include "core/mem_blocks.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>

#include "common/prefault.h"

namespace snccl::memblocks {

namespace {

struct Block {
  size_t mapBytes;  // of the whole mapping, which starts one page before the user pointer
  int fd;
  uint64_t ino;
};

// The live blocks by user pointer, so that ncclMemFree can reject a pointer it did not
// hand out, or one freed already, instead of unmapping someone else's memory, and so that
// find() can tell where a buffer lives. This allocator's registry is its only
// process-wide state.
struct Registry {
  std::mutex mutex;
  std::map<const char*, Block> blocks;
};
Registry& registry() {
  static Registry r;
  return r;
}

size_t pageBytes() { return size_t(sysconf(_SC_PAGESIZE)); }

}  // namespace

// The largest size allocate() accepts: its pages plus the guard page must fit an off_t
// (the memory file's size) without wrapping. Larger sizes cannot be mapped anyway.
size_t maxAllocBytes() { return (size_t(PTRDIFF_MAX) / pageBytes() - 1) * pageBytes(); }

Result<void*> allocate(size_t size) {
  const size_t page = pageBytes();
  if (size > maxAllocBytes())
    return ErrnoError(ENOMEM, "cannot allocate %zu bytes: more than the largest mapping (%zu bytes)", size,
                      maxAllocBytes());
  // One page in front of the user's pointer: a pointer to the mapping's start was never
  // returned, so freeing one is caught.
  const size_t bytes = page + (size + page - 1) / page * page;
  int fd = memfd_create("snccl-mem", MFD_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "memfd_create failed");
  if (ftruncate(fd, off_t(bytes)) != 0) {
    int e = errno;
    close(fd);
    return ErrnoError(e, "cannot size a %zu-byte memory file", bytes);
  }
  struct stat st {};
  (void)fstat(fd, &st);
  // Prefaulted and touched: a first write costs ~5-13 us per page on our VMs
  // (common/prefault.h); the caller's first use should not pay it.
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    close(fd);
    return ErrnoError(e, "mmap of %zu bytes failed", bytes);
  }
  touchPagesForWrite(base, bytes);
  char* user = static_cast<char*>(base) + page;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  reg.blocks[user] = Block{bytes, fd, uint64_t(st.st_ino)};
  return static_cast<void*>(user);
}

Status release(void* ptr) {
  Block b{};
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mutex);
    auto it = reg.blocks.find(static_cast<const char*>(ptr));
    if (it == reg.blocks.end())
      return InvalidArgument("%p was not returned by ncclMemAlloc (or was freed already)", ptr);
    b = it->second;
    reg.blocks.erase(it);
  }
  munmap(static_cast<char*>(ptr) - pageBytes(), b.mapBytes);
  close(b.fd);
  return OkStatus();
}

FileRef find(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  const size_t page = pageBytes();
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = reg.blocks.upper_bound(c);  // first block starting after p
  if (it == reg.blocks.begin()) return {};
  --it;
  const char* start = it->first;
  const size_t userBytes = it->second.mapBytes - page;
  if (c < start || size_t(c - start) > userBytes || bytes > userBytes - size_t(c - start)) return {};
  return FileRef{it->second.fd, it->second.ino, uint64_t(c - start) + page};
}

}  // namespace snccl::memblocks
