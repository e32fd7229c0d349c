// Peer block mappings: open through /proc, check the inode, map, cache, evict.
#include "core/peer_buffers.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "common/prefault.h"

namespace snccl {

PeerBuffers::~PeerBuffers() {
  for (const Entry& e : entries_) munmap(e.base, e.bytes);
}

// Grows the touched span of `e` to cover [offset, offset + bytes): populates the page
// tables for the new part and writes each of its pages once without changing a byte, so
// the reductions do not pay the hypervisor's first-access trap page by page
// (common/prefault.h). The span stays one interval: a gap between two calls' ranges is
// touched too.
void PeerBuffers::touch(Entry& e, size_t offset, size_t bytes) {
  if (bytes == 0) return;
  const size_t lo = e.touchedHi > e.touchedLo ? std::min(e.touchedLo, offset) : offset;
  const size_t hi = e.touchedHi > e.touchedLo ? std::max(e.touchedHi, offset + bytes) : offset + bytes;
  auto fresh = [&](size_t a, size_t b) {
    if (b <= a) return;
    static const size_t page = size_t(sysconf(_SC_PAGESIZE));
    const size_t pa = a / page * page, pb = std::min(e.bytes, (b + page - 1) / page * page);
    (void)madvise(e.base + pa, pb - pa, MADV_POPULATE_WRITE);  // a speed-up only; the touch follows
    touchPagesForWrite(e.base + a, b - a);
  };
  if (e.touchedHi > e.touchedLo) {
    fresh(lo, e.touchedLo);
    fresh(e.touchedHi, hi);
  } else {
    fresh(lo, hi);
  }
  e.touchedLo = lo;
  e.touchedHi = hi;
}

Result<char*> PeerBuffers::resolve(int peer, pid_t pid, const memblocks::FileRef& ref, size_t bytes) {
  if (ref.ino == 0) return InvalidUsage("rank %d's buffer was not allocated with ncclMemAlloc", peer);
  ++clock_;
  for (Entry& e : entries_)
    if (e.peer == peer && e.ino == ref.ino) {
      // The owner's block only grows by being freed and replaced (a new inode): a range
      // past its end is a protocol error, never to be read.
      if (ref.offset > e.bytes || bytes > e.bytes - ref.offset)
        return InternalError("rank %d's buffer (%zu bytes at offset %llu) is outside its %zu-byte block", peer, bytes,
                             (unsigned long long)ref.offset, e.bytes);
      e.lastUse = clock_;
      touch(e, ref.offset, bytes);
      return e.base + ref.offset;
    }
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/fd/%d", int(pid), int(ref.fd));
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, "cannot open rank %d's memory file %s", peer, path);
  struct stat st {};
  if (fstat(fd, &st) != 0 || uint64_t(st.st_ino) != ref.ino) {
    close(fd);
    return SystemError("%s is no longer rank %d's buffer (inode %llu, expected %llu)", path, peer,
                       (unsigned long long)st.st_ino, (unsigned long long)ref.ino);
  }
  const size_t size = size_t(st.st_size);
  if (ref.offset > size || bytes > size - ref.offset) {
    close(fd);
    return InternalError("rank %d's buffer (%zu bytes at offset %llu) is outside its %zu-byte block", peer, bytes,
                         (unsigned long long)ref.offset, size);
  }
  // Not populated here: only the pages calls use are (touch()); the owner's pages exist.
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (base == MAP_FAILED) return ErrnoError(err, "cannot map rank %d's memory file %s (%zu bytes)", peer, path, size);
  if (std::count_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.peer == peer; }) >= kPerPeer) {
    auto oldest = entries_.end();
    for (auto it = entries_.begin(); it != entries_.end(); ++it)
      if (it->peer == peer && (oldest == entries_.end() || it->lastUse < oldest->lastUse)) oldest = it;
    munmap(oldest->base, oldest->bytes);
    entries_.erase(oldest);
  }
  entries_.push_back(Entry{peer, ref.ino, static_cast<char*>(base), size, clock_});
  touch(entries_.back(), ref.offset, bytes);
  return static_cast<char*>(base) + ref.offset;
}

}  // namespace snccl
