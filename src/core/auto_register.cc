// Automatic registration of recurring AllReduce buffers (core/auto_register.h).
#include "core/auto_register.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "common/log.h"
#include "core/user_pages.h"

namespace snccl {

namespace {

bool anonymousReadWrite(uintptr_t a, uintptr_t b) {
  return userpages::privateAnonymous(reinterpret_cast<const void*>(a), reinterpret_cast<const void*>(b), false);
}

// glibcChunkBytes without asking whether glibc's malloc is the process's. It reads the two
// words in front of p, outside the buffer, on purpose: AddressSanitizer must not
// instrument those loads (its malloc is not glibc's, so the probe says no under it, but
// the probe itself reads them).
__attribute__((no_sanitize("address"))) size_t chunkBytes(const void* p, size_t bytes) {
  if (bytes == 0) return 0;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t mem = reinterpret_cast<uintptr_t>(p);
  // glibc's chunk header is the two words before the pointer: prev_size (for a chunk
  // mapped on its own: its offset from the mapping's start) and size with the flags in
  // its low bits (IS_MMAPPED = 2, NON_MAIN_ARENA = 4).
  constexpr uintptr_t kHeader = 2 * sizeof(size_t);
  if (mem < kHeader + page || mem % kHeader != 0) return 0;  // glibc's chunks are 16-byte aligned
  const uintptr_t chunk = mem - kHeader;
  // The header must be readable before it is read: the page it is on is checked with the
  // mapping below, so check that page alone first.
  if (!anonymousReadWrite(chunk / page * page, chunk / page * page + page)) return 0;
  // Plain loads, not memcpy (which AddressSanitizer intercepts and checks).
  const auto* header = reinterpret_cast<const volatile size_t*>(chunk);
  const size_t prevSize = header[0], sizeWord = header[1];
  if ((sizeWord & 2) == 0 || (sizeWord & 4) != 0) return 0;
  const uintptr_t csize = sizeWord & ~uintptr_t(7);
  if (prevSize > chunk || prevSize >= (uintptr_t(1) << 30)) return 0;
  const uintptr_t start = chunk - prevSize, end = chunk + csize;
  if (start % page != 0 || (prevSize + csize) % page != 0 || end < chunk || mem + bytes > end) return 0;
  return anonymousReadWrite(start, end) ? size_t(end - mem) : 0;
}

}  // namespace

// glibc's malloc is the one the program calls: no LD_PRELOADed or linked-in allocator
// such as jemalloc or tcmalloc, whose chunks have no glibc header and which may assume
// that MADV_DONTNEED zeroes pages, untrue for pages of a memory file. Asked of malloc
// itself, because comparing symbols misleads (an executable that takes malloc's address
// exports a stub of its own): a request above glibc's largest mmap threshold (32 MiB)
// must come back as a chunk mapped on its own, and free must unmap it at once, which
// allocators that cache memory do not.
bool glibcMallocInUse() {
  static const bool yes = [] {
    constexpr size_t kProbe = size_t(33) << 20;
    void* (*volatile allocate)(size_t) = std::malloc;  // not elided with the free below
    void (*volatile release)(void*) = std::free;
    void* p = allocate(kProbe);
    if (p == nullptr) return false;
    const size_t chunk = chunkBytes(p, kProbe);
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t start = reinterpret_cast<uintptr_t>(p) / page * page;
    release(p);
    return chunk >= kProbe && !anonymousReadWrite(start, start + page);
  }();
  return yes;
}

size_t glibcChunkBytes(const void* p, size_t bytes) { return glibcMallocInUse() ? chunkBytes(p, bytes) : 0; }

AutoRegistrations::~AutoRegistrations() {
  for (const Seen& s : seen_) userpages::detach(s.id);
}

size_t AutoRegistrations::shared() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return size_t(std::count_if(seen_.begin(), seen_.end(), [](const Seen& s) { return userpages::alive(s.id); }));
}

void AutoRegistrations::sweepLocked() {
  lastSweep_ = ticks_;
  for (Seen& s : seen_)
    if (s.id != 0 && !userpages::alive(s.id)) died(s);
}

void AutoRegistrations::died(Seen& s) {
  // Freed (or remapped). A buffer at this address later is another allocation; a program
  // that frees and allocates around its calls would pay a registration copy every other
  // call, so each death makes the address wait longer before the next registration.
  s.id = 0;
  s.backoff = s.backoff == 0 ? kFirstBackoff : std::min(s.backoff * kFirstBackoff, kMaxBackoff);
  s.skip = s.backoff;
}

void AutoRegistrations::tick() {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (++ticks_ - lastSweep_ >= kSweepEvery) sweepLocked();
}

bool AutoRegistrations::offer(void* p, size_t bytes) {
  if (!enabled() || bytes < minBytes_) return false;
  char* c = static_cast<char*>(p);
  std::lock_guard<std::mutex> lock(mutex_);
  ++clock_;
  auto it = std::find_if(seen_.begin(), seen_.end(), [&](const Seen& s) { return s.p == c; });
  if (it == seen_.end()) {
    // A new buffer: often one that replaced a freed one, so forget the freed first (not on
    // every call of a program that passes a new buffer each time: a readlink per range).
    if (ticks_ - lastSweep_ >= kSweepAtNewEvery) sweepLocked();
    if (seen_.size() >= kMaxSeen) {
      // The least recently used sighting that holds no registration makes room.
      auto victim = std::min_element(seen_.begin(), seen_.end(), [](const Seen& x, const Seen& y) {
        return std::pair(x.id != 0, x.lastUse) < std::pair(y.id != 0, y.lastUse);
      });
      if (victim->id != 0) return false;  // every sighting holds a live registration
      seen_.erase(victim);
    }
    seen_.push_back(Seen{c, clock_});
    return false;
  }
  it->lastUse = clock_;
  if (it->refused) return false;
  if (it->id != 0) {
    // Shared before, but the op found it unreadable: freed and allocated again at the same
    // address (alive() forgets the old range).
    if (userpages::alive(it->id)) return false;
    died(*it);
  }
  if (it->skip > 0) {
    --it->skip;
    return false;
  }
  const size_t live = size_t(std::count_if(seen_.begin(), seen_.end(), [](const Seen& s) { return s.id != 0; }));
  if (live >= kMaxShared) return false;
  const size_t chunk = glibcChunkBytes(p, bytes);
  if (chunk == 0) {
    it->refused = true;
    if (!refusalLogged_)
      SN_INFO(log::kReg, "AllReduce buffer %p (%zu bytes) is not registered automatically: it is not a mapping "
              "of its own from glibc's malloc (logged once per communicator)", p, bytes);
    refusalLogged_ = true;
    return false;
  }
  it->id = userpages::share(p, chunk);
  if (it->id == 0) {
    it->refused = true;
    return false;
  }
  SN_INFO(log::kReg, "AllReduce buffer %p (%zu bytes, %zu in its allocation) registered automatically on its "
          "second use", p, bytes, chunk);
  return true;
}

}  // namespace snccl
