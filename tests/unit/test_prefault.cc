// Page touching (common/prefault.h): it must reach every page of any range, aligned or
// not, and never change a byte, even one another thread writes meanwhile (the sender
// of a connection touches slots the receiver may already map).
#include "common/prefault.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace snccl {
namespace {

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

struct Mapping {
  explicit Mapping(size_t bytes) : bytes(bytes) {
    base = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  }
  ~Mapping() { munmap(base, bytes); }
  char* base;
  size_t bytes;
};

// Pages of a fresh anonymous mapping that were never touched are absent from mincore's
// resident set; touching must bring in exactly the pages of the range.
std::vector<bool> resident(const Mapping& m) {
  std::vector<unsigned char> v(m.bytes / kPage);
  EXPECT_EQ(mincore(m.base, m.bytes, v.data()), 0);
  std::vector<bool> r;
  for (unsigned char c : v) r.push_back((c & 1) != 0);
  return r;
}

TEST(Prefault, WriteTouchReachesEveryPageOfTheRangeOnly) {
  // Ranges starting and ending mid-page, one byte, exactly one page, and empty.
  struct Case {
    size_t offset, bytes;
  } cases[] = {{100, 3 * kPage}, {kPage - 1, 2}, {2 * kPage, kPage}, {kPage + 5, 1}, {kPage, 0}};
  for (const Case& c : cases) {
    Mapping m(8 * kPage);
    touchPagesForWrite(m.base + c.offset, c.bytes);
    std::vector<bool> r = resident(m);
    for (size_t p = 0; p < r.size(); ++p) {
      const size_t lo = p * kPage, hi = lo + kPage;
      const bool inRange = c.bytes > 0 && lo < c.offset + c.bytes && c.offset < hi;
      EXPECT_EQ(r[p], inRange) << "page " << p << " of range at " << c.offset << " + " << c.bytes;
    }
  }
}

TEST(Prefault, ReadTouchReachesEveryPageOfAReadOnlyMapping) {
  Mapping m(6 * kPage);
  ASSERT_EQ(mprotect(m.base, m.bytes, PROT_READ), 0);  // a write would fault
  touchPagesForRead(m.base + 10, 4 * kPage);
  std::vector<bool> r = resident(m);
  // A read of a never-written anonymous page maps the shared zero page: resident.
  EXPECT_TRUE(r[0] && r[1] && r[2] && r[3] && r[4]);
  EXPECT_FALSE(r[5]);
}

TEST(Prefault, WriteTouchKeepsEveryByte) {
  Mapping m(5 * kPage);
  for (size_t i = 0; i < m.bytes; ++i) m.base[i] = char(i * 131 + 7);
  touchPagesForWrite(m.base + 3, m.bytes - 9);
  for (size_t i = 0; i < m.bytes; ++i) ASSERT_EQ(m.base[i], char(i * 131 + 7)) << "byte " << i;
}

TEST(Prefault, WriteTouchLosesNoConcurrentWrite) {
  // A writer counts in the first byte of each page while another thread touches the
  // pages over and over: a touch made of a plain load and store would sometimes store
  // back a stale count.
  Mapping m(4 * kPage);
  for (size_t p = 0; p < 4; ++p) m.base[p * kPage] = 0;
  constexpr int kCounts = 200000;
  std::atomic<bool> stop{false};
  std::thread toucher([&] {
    while (!stop.load(std::memory_order_relaxed)) touchPagesForWrite(m.base, m.bytes);
  });
  for (int i = 0; i < kCounts; ++i)
    for (size_t p = 0; p < 4; ++p) std::atomic_ref<char>(m.base[p * kPage]).fetch_add(1, std::memory_order_relaxed);
  stop = true;
  toucher.join();
  for (size_t p = 0; p < 4; ++p) EXPECT_EQ(uint8_t(m.base[p * kPage]), uint8_t(kCounts % 256)) << "page " << p;
}

}  // namespace
}  // namespace snccl
