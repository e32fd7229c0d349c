// Automatic registration (src/core/auto_register.h): which buffers are taken (glibc's own
// mappings only), the second sighting, and what the program must not notice: bytes and
// pointers unchanged, free giving the memory back, realloc, fork, and a communicator that
// ends while its buffers live on.
#include "core/auto_register.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "core/user_pages.h"

namespace {

using namespace snccl;

constexpr size_t kBytes = size_t(1) << 20;

uint8_t pattern(size_t i) { return uint8_t(i * 13 + 5); }

void fill(void* p, size_t bytes) {
  auto* c = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i) c[i] = pattern(i);
}

bool intact(const void* p, size_t bytes) {
  const auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i)
    if (c[i] != pattern(i)) return false;
  return true;
}

class AutoRegister : public ::testing::Test {
 protected:
  // Large allocations are glibc mappings of their own whatever was freed before.
  void SetUp() override {
    if (!glibcMallocInUse()) GTEST_SKIP() << "malloc is not glibc's (a sanitizer's?): nothing is registered";
    ASSERT_EQ(mallopt(M_MMAP_THRESHOLD, 128 * 1024), 1);
  }
};

#if !defined(__SANITIZE_ADDRESS__)
// The probe finds glibc's malloc in a plain build.
TEST(AutoRegisterProbe, FindsGlibcsMalloc) { EXPECT_TRUE(glibcMallocInUse()); }
#else
// Under AddressSanitizer malloc is the sanitizer's: the probe says so (reading the words in
// front of its chunk without a report), and nothing is registered.
TEST(AutoRegisterProbe, RefusesTheSanitizersMalloc) {
  EXPECT_FALSE(glibcMallocInUse());
  void* p = std::malloc(kBytes);
  AutoRegistrations regs(4096);
  EXPECT_FALSE(regs.offer(p, kBytes));
  EXPECT_FALSE(regs.offer(p, kBytes));
  EXPECT_EQ(userpages::find(p, kBytes).ref.ino, 0u);
  std::free(p);
}
#endif

TEST_F(AutoRegister, OnlyGlibcsOwnMappingsQualify) {
  void* big = std::malloc(kBytes);
  void* aligned = nullptr;
  ASSERT_EQ(posix_memalign(&aligned, 64, kBytes), 0);
  void* small = std::malloc(4096);  // from the heap
  void* mapped = mmap(nullptr, kBytes + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  std::vector<char> vec(kBytes);  // operator new of 1 MiB: glibc's too
  // The chunk ends at its mapping's end: the request rounded up to pages, less the header.
  const size_t chunkBytes = (kBytes + 16 + 4095) / 4096 * 4096 - 16;
  EXPECT_EQ(glibcChunkBytes(big, kBytes), chunkBytes);
  EXPECT_EQ(glibcChunkBytes(big, kBytes / 2), chunkBytes) << "its first half";
  // A slice further in has no header in front of it: not recognised (taken as not glibc's).
  EXPECT_EQ(0u, glibcChunkBytes(static_cast<char*>(big) + 4096, kBytes - 8192));
  EXPECT_LE(kBytes, glibcChunkBytes(aligned, kBytes));
  EXPECT_LE(kBytes, glibcChunkBytes(vec.data(), vec.size()));
  EXPECT_EQ(0u, glibcChunkBytes(big, kBytes + 8192)) << "past the chunk's end";
  EXPECT_EQ(0u, glibcChunkBytes(small, 4096)) << "heap memory";
  // A plain mapping: at its start the "header" is outside it; further in, it reads zeros.
  EXPECT_EQ(0u, glibcChunkBytes(mapped, kBytes));
  EXPECT_EQ(0u, glibcChunkBytes(static_cast<char*>(mapped) + 4096 + 16, kBytes - 4096));
  char stack[64];
  EXPECT_EQ(0u, glibcChunkBytes(stack, sizeof stack));
  munmap(mapped, kBytes + 4096);
  std::free(small);
  std::free(aligned);
  std::free(big);
}

// The second sighting shares the buffer's whole allocation, with its bytes and address
// unchanged; small or refused buffers are never shared; off shares nothing.
TEST_F(AutoRegister, TheSecondSightingSharesTheBuffer) {
  auto* p = static_cast<char*>(std::malloc(kBytes));
  fill(p, kBytes);
  {
    AutoRegistrations off(0);
    EXPECT_FALSE(off.offer(p, kBytes));
    EXPECT_FALSE(off.offer(p, kBytes));
  }
  AutoRegistrations regs(256 * 1024);
  EXPECT_FALSE(regs.offer(p, kBytes)) << "first sighting";
  EXPECT_EQ(userpages::find(p, kBytes).ref.ino, 0u);
  EXPECT_TRUE(regs.offer(p, kBytes / 2)) << "second sighting, of another part of the same buffer";
  const userpages::Span sp = userpages::find(p, kBytes);  // all of it
  EXPECT_NE(sp.ref.ino, 0u);
  EXPECT_LT(sp.lo, size_t(4096));
  EXPECT_TRUE(intact(p, kBytes));
  EXPECT_EQ(regs.shared(), 1u);
  // Below the threshold, and heap memory: never.
  auto* q = static_cast<char*>(std::malloc(kBytes));
  EXPECT_FALSE(regs.offer(q, 128 * 1024));
  EXPECT_FALSE(regs.offer(q, 128 * 1024));
  std::vector<char*> heap;
  for (int i = 0; i < 2; ++i) {
    void* h = std::malloc(64 * 1024);
    EXPECT_FALSE(regs.offer(h, 64 * 1024));
    heap.push_back(static_cast<char*>(h));
  }
  AutoRegistrations low(4096);
  EXPECT_FALSE(low.offer(heap[0], 64 * 1024));
  EXPECT_FALSE(low.offer(heap[0], 64 * 1024)) << "heap memory is refused";
  for (char* h : heap) std::free(h);
  std::free(q);
  std::free(p);
}

// free gives the memory back (the memory file is closed when noticed), and a new buffer
// at the same address is registered again only after a back-off that grows with each
// death (8 sightings, then 64), so that allocating and freeing around every call does not
// pay a registration copy every other call. A buffer at another address is new: its
// second sighting registers it.
TEST_F(AutoRegister, FreedBuffersAreForgottenAndTheAddressBacksOff) {
  AutoRegistrations regs(256 * 1024);
  char* const first = static_cast<char*>(std::malloc(kBytes));
  ASSERT_FALSE(regs.offer(first, kBytes));
  ASSERT_TRUE(regs.offer(first, kBytes));
  const size_t live = userpages::liveRanges();
  std::free(first);
  EXPECT_EQ(regs.shared(), 0u) << "a freed buffer is not shared any more";
  EXPECT_EQ(userpages::liveRanges(), live - 1) << "and its memory file is closed";
  // Each round: a new allocation (glibc maps the same size at the same address again
  // where it can), offered until registered.
  for (int death = 1; death <= 2; ++death) {
    auto* again = static_cast<char*>(std::malloc(kBytes));
    fill(again, kBytes);
    int refusals = 0;
    while (!regs.offer(again, kBytes) && refusals < 100) ++refusals;
    EXPECT_TRUE(intact(again, kBytes));
    if (again == first) {
      // The back-off, counted from the sighting that finds the old registration dead.
      EXPECT_EQ(refusals, death == 1 ? 8 : 64) << "death " << death;
    } else {
      EXPECT_EQ(refusals, 1) << "another address: registered on its second sighting";
    }
    std::free(again);
  }
}

// realloc of a shared buffer: glibc cannot mremap the split mapping, copies into a new
// chunk and frees the old one; the bytes survive and the memory is given back.
TEST_F(AutoRegister, ReallocKeepsTheBytes) {
  AutoRegistrations regs(256 * 1024);
  auto* p = static_cast<char*>(std::malloc(kBytes));
  fill(p, kBytes);
  ASSERT_FALSE(regs.offer(p, kBytes));
  ASSERT_TRUE(regs.offer(p, kBytes));
  auto* grown = static_cast<char*>(std::realloc(p, 4 * kBytes));
  ASSERT_NE(grown, nullptr);
  EXPECT_TRUE(intact(grown, kBytes));
  std::memset(grown + kBytes, 1, 3 * kBytes);  // the new part is usable memory
  EXPECT_EQ(regs.shared(), 0u);
  auto* shrunk = static_cast<char*>(std::realloc(grown, kBytes / 2));
  ASSERT_NE(shrunk, nullptr);
  EXPECT_TRUE(intact(shrunk, kBytes / 2));
  std::free(shrunk);
}

// When the communicator ends, its registrations are detached: the buffer keeps its bytes
// and stays writable, no peer can map it any more, and it is still private across fork.
TEST_F(AutoRegister, EndingTheCommunicatorDetaches) {
  auto* p = static_cast<char*>(std::malloc(kBytes));
  fill(p, kBytes);
  const size_t detached = userpages::detachedRanges();
  {
    AutoRegistrations regs(256 * 1024);
    ASSERT_FALSE(regs.offer(p, kBytes));
    ASSERT_TRUE(regs.offer(p, kBytes));
  }
  EXPECT_EQ(userpages::find(p, kBytes).ref.ino, 0u);
  EXPECT_EQ(userpages::detachedRanges(), detached + 1);
  EXPECT_TRUE(intact(p, kBytes));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::memset(p, 0x77, kBytes);  // must not reach the parent
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(intact(p, kBytes)) << "the child's writes reached the parent";
  std::free(p);
  // Forgotten at the next share() (which sweeps detached ranges whose buffer is gone).
  auto* q = static_cast<char*>(std::malloc(kBytes));
  const uint64_t id = userpages::share(q, kBytes);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(userpages::detachedRanges(), detached);
  userpages::release(id);
  std::free(q);
}

// fork while shared: the child gets its own copy, the parent keeps its registration.
TEST_F(AutoRegister, AForkedChildGetsItsOwnCopy) {
  AutoRegistrations regs(256 * 1024);
  auto* p = static_cast<char*>(std::malloc(kBytes));
  fill(p, kBytes);
  ASSERT_FALSE(regs.offer(p, kBytes));
  ASSERT_TRUE(regs.offer(p, kBytes));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!intact(p, kBytes)) _exit(1);
    std::memset(p, 0x33, kBytes);
    std::free(p);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child did not see the parent's bytes";
  EXPECT_TRUE(intact(p, kBytes)) << "the child's writes reached the parent";
  EXPECT_EQ(regs.shared(), 1u);
  std::free(p);
}

}  // namespace
