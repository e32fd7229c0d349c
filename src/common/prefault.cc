#include "common/prefault.h"

#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace snccl {

namespace {
size_t pageBytes() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}
}  // namespace

void touchPagesForWrite(void* base, size_t bytes) {
  char* p = static_cast<char*>(base);
  const size_t page = pageBytes();
  for (size_t off = 0; off < bytes; off += page) std::atomic_ref<char>(p[off]).fetch_or(0, std::memory_order_relaxed);
  if (bytes > 0) std::atomic_ref<char>(p[bytes - 1]).fetch_or(0, std::memory_order_relaxed);
}

void touchPagesForRead(const void* base, size_t bytes) {
  const volatile char* p = static_cast<const volatile char*>(base);
  const size_t page = pageBytes();
  char sink = 0;
  for (size_t off = 0; off < bytes; off += page) sink = char(sink ^ p[off]);
  if (bytes > 0) sink = char(sink ^ p[bytes - 1]);
  (void)sink;
}

}  // namespace snccl
