// Registered host memory made readable by the node's other processes. ncclCommRegister
// moves the whole pages of a registered buffer (malloc, posix_memalign, mmap) onto a
// memory file mapped shared at the same addresses, with the same bytes: the user's
// pointers and data do not change, but a peer process can now map the pages through
// /proc/<pid>/fd/<fd> (core/peer_buffers.h) exactly as it maps an ncclMemAlloc block,
// and the single-copy AllReduce (core/mapped_allreduce.cc) applies to user buffers.
//
// What the user sees, and the rules that keep it so:
// - Only whole pages inside the buffer move; the partial pages at either end stay the
//   process's private memory (they may hold other allocations), so Span says which bytes
//   of a buffer are in the file, and the single copy passes the rest through staging.
// - ncclCommDeregister (the last registration of a range) copies the pages back into
//   private anonymous memory at the same addresses, so that freeing the buffer gives the
//   memory back and a later fork copies it as before. Registering and deregistering copy
//   the buffer once each: no other thread may write it during those calls.
// - fork: a child gets private copies of every shared range (atfork handlers: the child
//   copies them, and fork returns in the parent once it has), so its writes never reach
//   the parent and the parent's later writes never reach it. fork takes longer by that
//   copy. A write the parent's other threads make while fork runs may be seen by the
//   child.
// - A buffer freed (or unmapped, or remapped) without being deregistered is noticed: a
//   range counts only while its exact mapping is still the one made here
//   (/proc/self/map_files), otherwise find() says it is not shared and the collective
//   takes the rings.
// The ranges are process-wide (a page is shared once whichever communicators register
// it), refcounted by registration; overlapping registrations that are not the same page
// range or inside one are not shared (they still register).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "core/mem_blocks.h"

namespace snccl::userpages {

// Which bytes of a buffer a peer can map: [lo, bytes - tail) lie in the file `ref`
// (ref.offset is the file offset of byte lo). ref.ino == 0: none of them.
struct Span {
  memblocks::FileRef ref;
  size_t lo = 0;
  size_t tail = 0;
};

// Shares the whole pages inside [p, p + bytes). Returns an id for release(), 0 when
// nothing was shared (too small, overlaps another range, or the system refused: then the
// reason is logged once at INFO; the buffer is unchanged and still usable).
uint64_t share(void* p, size_t bytes);

// Drops one registration of the range `id`; the last makes its pages private again.
void release(uint64_t id);

// Drops one registration of the range `id` without copying: the last closes the memory
// file, so that peers can no longer map the range and freeing the buffer gives its memory
// back, but the pages stay in the file (which behaves as private memory once no peer maps
// it) and fork still gives a child its own copy. For automatic registrations
// (core/auto_register.h): copying back could race with another thread freeing the
// buffer, which the user never promised not to do.
void detach(uint64_t id);

// Whether the range `id` is still shared and mapped where share() put it; a range that is
// not is forgotten (its memory file closed), so that the memory of a buffer freed without
// deregistration is given back.
bool alive(uint64_t id);

// The shared part of [p, p + bytes), validated against the process's mappings.
Span find(const void* p, size_t bytes);

// Whether every page of [a, b) is private anonymous read-write memory (/proc/self/maps),
// the only kind share() moves; the heap counts only with heapToo.
bool privateAnonymous(const void* a, const void* b, bool heapToo);

// The number of live shared ranges, and of detached ones still tracked for fork (tests).
size_t liveRanges();
size_t detachedRanges();

}  // namespace snccl::userpages
