// Automatic registration of the host buffers a program passes to AllReduce again and
// again (SNCCL_AUTO_REGISTER): MPI and C programs allocate with malloc and never call
// ncclCommRegister, so their AllReduces take the rings, about half the speed of the
// single copy. A communicator of one node's processes shares (core/user_pages.h) such a
// buffer itself, the second time the same buffer (its address) comes to an AllReduce, so
// that from then on it takes the single copy like an ncclMemAlloc one.
//
// Only a buffer that is certainly safe to move is taken: one that glibc's malloc (when it
// is the process's malloc) placed in a mapping of its own (glibcChunkBytes), as it does
// for allocations above its mmap threshold (128 KiB, raised to the largest size freed, at
// most 32 MiB), and only through the pointer malloc returned (a slice further in is not
// recognised). Such a buffer is freed by munmap, so:
// - free gives the memory back: the pages leave the process with the mapping, and the
//   memory file is closed once the communicator notices (alive(): at its next new buffer,
//   at most every kSweepEvery AllReduces, or its destruction), and peers unmap it as
//   their LRU of mappings moves on (core/peer_buffers.h);
// - realloc still works: glibc grows such a chunk with mremap, which fails on the now
//   split mapping, and then falls back to malloc, copy and free;
// - a new buffer at the same address is a new anonymous mapping, not the file, and is
//   registered again only after a back-off (8 sightings, then 64, ... up to 4096), so a
//   program that allocates and frees around every call does not pay a registration copy
//   every other call;
// - fork gives the child its own copy (user_pages.h).
// Heap memory (smaller buffers, or any other allocator's) is never taken: its pages are
// reused by other allocations after free, which another thread could write while the
// pages were moved.
//
// The move happens on the thread that runs the AllReduce, before any peer is told where
// the buffer is: the op's own buffers are not written by the program during the call (the
// NCCL contract), and no earlier op of the communicator still uses them. It copies the
// buffer once, as ncclCommRegister does: a one-time cost of about a dozen AllReduces of
// it where first-touch page faults are slow (docs/performance.md). When the communicator
// ends, its registrations are detached, not copied back (user_pages.h: detach), because
// the program may be freeing those buffers on another thread meanwhile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace snccl {

// When [p, p + bytes) lies in a chunk that glibc's malloc mapped on its own, the bytes
// from p to the chunk's end (at least `bytes`); 0 otherwise. It is one when glibc is the
// process's malloc, the chunk header in front of p says "mmapped" and describes a
// page-aligned mapping that covers the buffer, and /proc/self/maps shows that range as
// private anonymous read-write memory.
size_t glibcChunkBytes(const void* p, size_t bytes);

// Whether the process's malloc is glibc's (not a sanitizer's, jemalloc or tcmalloc):
// probed once, by the chunk it returns for a large request and by free unmapping it.
// Without it nothing is registered automatically.
bool glibcMallocInUse();

class AutoRegistrations {
 public:
  // minBytes: the smallest buffer taken; 0 turns automatic registration off.
  explicit AutoRegistrations(size_t minBytes) : minBytes_(minBytes) {}
  AutoRegistrations(const AutoRegistrations&) = delete;
  AutoRegistrations& operator=(const AutoRegistrations&) = delete;
  ~AutoRegistrations();  // detaches every registration made here

  bool enabled() const { return minBytes_ != 0; }
  // An AllReduce's own buffer that peers cannot map: counts a sighting of its address, and
  // on the second shares the pages of its whole chunk (glibcChunkBytes), so that later
  // calls on a larger or smaller part of it find it shared too. True when the buffer was
  // shared now (then describe it again).
  bool offer(void* p, size_t bytes);
  // Once per single-copy AllReduce: every kSweepEvery calls, forgets the registrations
  // whose buffers were freed, so their memory files are closed.
  void tick();
  // Buffers shared here and still alive (tests).
  size_t shared() const;

 private:
  static constexpr size_t kMaxSeen = 64;    // sightings remembered (least recently used go)
  static constexpr size_t kMaxShared = 32;  // buffers shared at once by one communicator
  static constexpr uint64_t kSweepEvery = 64;
  static constexpr uint64_t kSweepAtNewEvery = 8;  // a new buffer sweeps if this many calls passed
  // After the n-th registration at an address died, the next kFirstBackoff^n sightings
  // there (at most kMaxBackoff) are not registered.
  static constexpr uint32_t kFirstBackoff = 8;
  static constexpr uint32_t kMaxBackoff = 4096;
  struct Seen {
    char* p;
    uint64_t lastUse;
    uint64_t id = 0;        // userpages range; 0: not shared
    bool refused = false;   // not glibc's own mapping, or share() said no: never tried again
    uint32_t backoff = 0;   // sightings skipped after the last registration here died
    uint32_t skip = 0;      // of which still to come
  };
  void sweepLocked();
  void died(Seen& s);
  const size_t minBytes_;
  mutable std::mutex mutex_;  // the runner of the moment; held briefly
  std::vector<Seen> seen_;
  uint64_t clock_ = 0;
  uint64_t ticks_ = 0, lastSweep_ = 0;
  bool refusalLogged_ = false;
};

}  // namespace snccl
