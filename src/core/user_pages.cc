// Shared user pages: move registered private pages onto a memory file and back.
#include "core/user_pages.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>

#include "common/log.h"
#include "common/prefault.h"

namespace snccl::userpages {

namespace {

// Smaller ranges are not worth a memory file and a peer mapping: the single copy only
// runs from SNCCL_SINGLE_COPY_BYTES on, and registration of a small buffer is cheap to
// leave as it is.
constexpr size_t kMinPages = 4;

struct Range {
  size_t bytes;
  int fd;  // -1: detached (no peer can map it any more; tracked for fork)
  uint64_t ino;
  uint64_t serial;  // in the file's name, which find() checks the mapping by
  int refs;
};

// The shared ranges by start address. Pages are per process, so this is process-wide
// state, like ncclMemAlloc's registry (core/mem_blocks.cc).
struct Registry {
  std::mutex mutex;
  std::map<char*, Range> ranges;
  uint64_t nextSerial = 1;
  bool warned = false;
  int forkPipe[2] = {-1, -1};  // across one fork: the child says its copies are made
};
Registry& registry() {
  static Registry r;
  return r;
}

size_t pageBytes() { return size_t(sysconf(_SC_PAGESIZE)); }

std::string fileName(uint64_t serial) { return "snccl-user-" + std::to_string(serial); }

// Whether [start, start + r.bytes) is still exactly the mapping share() made: one mapping
// of the range's file (procfs lists a file-backed mapping under its exact bounds, and
// its link names the file; reading the link needs no privilege, unlike opening it).
bool stillMapped(const char* start, const Range& r) {
  char path[80];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", (unsigned long)(uintptr_t)start,
                (unsigned long)(uintptr_t)(start + r.bytes));
  char link[128];
  const ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return false;
  link[n] = '\0';
  const std::string want = "/memfd:" + fileName(r.serial);
  return std::strncmp(link, want.c_str(), want.size()) == 0 &&
         (link[want.size()] == '\0' || link[want.size()] == ' ');
}

// Copies [start, start + bytes) into fresh private anonymous pages and moves them over
// the range (mremap replaces the shared mapping in one step, and the copy is not made
// twice).
bool makePrivate(char* start, size_t bytes) {
  void* fresh = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (fresh == MAP_FAILED) return false;
  std::memcpy(fresh, start, bytes);
  if (mremap(fresh, bytes, bytes, MREMAP_MAYMOVE | MREMAP_FIXED, start) == MAP_FAILED) {
    munmap(fresh, bytes);
    return false;
  }
  return true;
}

// fork: the child must not share the parent's pages. The registry is locked across
// fork (so no share() or release() is half done in the child); the child makes every
// range private again and forgets them (its communicators are not usable anyway), and
// fork returns in the parent only once the child has its copies, so the forking thread's
// later writes never reach the child. (Other threads of the parent writing a shared
// range while fork runs may reach it: the copy is not the kernel's atomic snapshot.)
void lockForFork() {
  Registry& reg = registry();
  reg.mutex.lock();
  if (!reg.ranges.empty() && pipe2(reg.forkPipe, O_CLOEXEC) != 0) reg.forkPipe[0] = reg.forkPipe[1] = -1;
}
void unlockInParent() {
  Registry& reg = registry();
  if (reg.forkPipe[0] >= 0) {
    close(reg.forkPipe[1]);
    char c = 0;
    // One byte once the child's copies are made; end of file if it died first.
    while (read(reg.forkPipe[0], &c, 1) < 0 && errno == EINTR) {
    }
    close(reg.forkPipe[0]);
    reg.forkPipe[0] = reg.forkPipe[1] = -1;
  }
  reg.mutex.unlock();
}
void privatizeInChild() {
  Registry& reg = registry();
  for (auto& [start, r] : reg.ranges) {
    if (stillMapped(start, r) && !makePrivate(start, r.bytes)) {
      // The child keeps sharing this range with the parent: say so loudly, it is rare
      // (no memory for the copy) and the child's writes would reach the parent.
      static const char msg[] = "snccl: fork: could not copy a registered buffer into the child's own memory\n";
      (void)!write(2, msg, sizeof msg - 1);
    }
    if (r.fd >= 0) close(r.fd);
  }
  reg.ranges.clear();
  if (reg.forkPipe[0] >= 0) {
    close(reg.forkPipe[0]);
    const char c = 1;
    (void)!write(reg.forkPipe[1], &c, 1);
    close(reg.forkPipe[1]);
    reg.forkPipe[0] = reg.forkPipe[1] = -1;
  }
  reg.mutex.unlock();
}

void installForkHandlers() {
  static std::once_flag once;
  std::call_once(once, [] { pthread_atfork(lockForFork, unlockInParent, privatizeInChild); });
}

void refuse(Registry& reg, const char* why, const void* p, size_t bytes) {
  if (reg.warned) return;
  reg.warned = true;
  SN_INFO(log::kReg, "registered buffer %p (%zu bytes) stays private: %s; peers on this node read it through "
          "the rings (logged once)", p, bytes, why);
}

}  // namespace

uint64_t share(void* p, size_t bytes) {
  const size_t page = pageBytes();
  char* c = static_cast<char*>(p);
  char* a = reinterpret_cast<char*>((uintptr_t(c) + page - 1) / page * page);
  char* b = reinterpret_cast<char*>((uintptr_t(c) + bytes) / page * page);
  if (b <= a || size_t(b - a) < kMinPages * page) return 0;
  if (memblocks::find(p, bytes).ino != 0) return 0;  // ncclMemAlloc memory is shared already
  installForkHandlers();
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  // Detached ranges whose buffer was freed are forgotten here (they hold no memory).
  std::erase_if(reg.ranges, [](const auto& e) { return e.second.fd < 0 && !stillMapped(e.first, e.second); });
  auto it = reg.ranges.upper_bound(a);
  if (it != reg.ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.bytes > a) {
      // A detached range cannot be shared again: its file can no longer be opened, and
      // copying it back could race with the program's other threads.
      if (prev->second.fd >= 0 && b <= prev->first + prev->second.bytes && stillMapped(prev->first, prev->second)) {
        ++prev->second.refs;  // inside a shared range: the same pages
        return prev->second.serial;
      }
      refuse(reg, "it overlaps another registered buffer", p, bytes);
      return 0;
    }
  }
  if (it != reg.ranges.end() && it->first < b) {
    refuse(reg, "it overlaps another registered buffer", p, bytes);
    return 0;
  }
  if (!privateAnonymous(a, b, true)) {
    refuse(reg, "its pages are not private anonymous read-write memory", p, bytes);
    return 0;
  }
  const size_t len = size_t(b - a);
  const uint64_t serial = reg.nextSerial++;
  int fd = memfd_create(fileName(serial).c_str(), MFD_CLOEXEC);
  if (fd < 0) {
    refuse(reg, "memfd_create failed", p, bytes);
    return 0;
  }
  struct stat st {};
  void* copy = MAP_FAILED;
  if (ftruncate(fd, off_t(len)) == 0 && fstat(fd, &st) == 0)
    copy = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (copy == MAP_FAILED) {
    close(fd);
    refuse(reg, "no memory for its shared copy", p, bytes);
    return 0;
  }
  std::memcpy(copy, a, len);
  munmap(copy, len);
  // The same addresses, now the file's pages: one mmap replaces every mapping in the range.
  if (mmap(a, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
    // MAP_FIXED failing leaves the old mapping in place (the kernel checks before it
    // unmaps); nothing changed for the user.
    close(fd);
    refuse(reg, "mapping its shared copy failed", p, bytes);
    return 0;
  }
  touchPagesForWrite(a, len);
  reg.ranges[a] = Range{len, fd, uint64_t(st.st_ino), serial, 1};
  SN_INFO(log::kReg, "registered buffer %p: %zu bytes of whole pages shared with the node's processes", p, len);
  return serial;
}

void release(uint64_t id) {
  if (id == 0) return;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = std::find_if(reg.ranges.begin(), reg.ranges.end(), [&](const auto& e) { return e.second.serial == id; });
  if (it == reg.ranges.end() || it->second.fd < 0) return;  // dropped or detached already
  if (--it->second.refs > 0) return;
  if (stillMapped(it->first, it->second) && !makePrivate(it->first, it->second.bytes))
    SN_WARN("deregistering %p: could not copy its %zu shared bytes back into private memory; they stay shared "
            "with this node's processes until freed", static_cast<void*>(it->first), it->second.bytes);
  close(it->second.fd);
  reg.ranges.erase(it);
}

void detach(uint64_t id) {
  if (id == 0) return;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = std::find_if(reg.ranges.begin(), reg.ranges.end(), [&](const auto& e) { return e.second.serial == id; });
  if (it == reg.ranges.end() || it->second.fd < 0) return;
  if (--it->second.refs > 0) return;
  close(it->second.fd);
  it->second.fd = -1;
  if (!stillMapped(it->first, it->second)) reg.ranges.erase(it);
}

bool alive(uint64_t id) {
  if (id == 0) return false;
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  auto it = std::find_if(reg.ranges.begin(), reg.ranges.end(), [&](const auto& e) { return e.second.serial == id; });
  if (it == reg.ranges.end() || it->second.fd < 0) return false;
  if (stillMapped(it->first, it->second)) return true;
  close(it->second.fd);
  reg.ranges.erase(it);
  return false;
}

Span find(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  if (reg.ranges.empty()) return {};
  auto it = reg.ranges.upper_bound(const_cast<char*>(c) + bytes);
  if (it == reg.ranges.begin()) return {};
  --it;
  const char* start = it->first;
  const char* end = start + it->second.bytes;
  const char* lo = std::max(start, c);
  const char* hi = std::min(end, c + bytes);
  if (hi <= lo || it->second.fd < 0) return {};
  if (!stillMapped(start, it->second)) {
    // Freed or remapped without ncclCommDeregister: the file no longer holds the
    // buffer. Forget it (its registration's release() finds nothing).
    close(it->second.fd);
    reg.ranges.erase(it);
    return {};
  }
  return Span{memblocks::FileRef{it->second.fd, it->second.ino, uint64_t(lo - start)}, size_t(lo - c),
              size_t(c + bytes - hi)};
}

// Private anonymous read-write memory (the heap, or an anonymous mapping) is the only kind
// whose pages can move to a file without changing what the process sees: a file mapping
// would lose its file, a read-only one its protection, the stack its growth.
bool privateAnonymous(const void* a, const void* b, bool heapToo) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  uintptr_t covered = uintptr_t(a);
  while (covered < uintptr_t(b) && std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0, off = 0, inode = 0;
    char perms[8] = {};
    int dev1 = 0, dev2 = 0, used = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %7s %lx %x:%x %lu %n", &lo, &hi, perms, &off, &dev1, &dev2, &inode,
                    &used) < 7)
      return false;
    if (hi <= covered) continue;
    if (lo > covered) return false;  // a hole
    const std::string path = used > 0 && size_t(used) <= line.size() ? line.substr(size_t(used)) : "";
    if (std::strcmp(perms, "rw-p") != 0 || inode != 0 || !(path.empty() || (heapToo && path == "[heap]")))
      return false;
    covered = hi;
  }
  return covered >= uintptr_t(b);
}

size_t liveRanges() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  return size_t(std::count_if(reg.ranges.begin(), reg.ranges.end(), [](const auto& e) { return e.second.fd >= 0; }));
}

size_t detachedRanges() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mutex);
  return size_t(std::count_if(reg.ranges.begin(), reg.ranges.end(), [](const auto& e) { return e.second.fd < 0; }));
}

}  // namespace snccl::userpages
