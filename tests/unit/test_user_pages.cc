// Shared user pages (src/core/user_pages.h): registered private memory moves onto a memory
// file at the same addresses with the same bytes, goes back when released, is noticed
// when freed behind the registry's back, and is never shared with a forked child.
#include "core/user_pages.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <gtest/gtest.h>

namespace {

using namespace snccl;

const size_t kPage = size_t(sysconf(_SC_PAGESIZE));

// What the range's mapping is: the link procfs keeps for a file-backed mapping with these
// exact bounds ("" for anonymous memory, or bounds that are not one mapping).
std::string mappingOf(const void* start, size_t bytes) {
  char path[80], link[256];
  std::snprintf(path, sizeof path, "/proc/self/map_files/%lx-%lx", (unsigned long)(uintptr_t)start,
                (unsigned long)((uintptr_t)start + bytes));
  ssize_t n = readlink(path, link, sizeof link - 1);
  if (n <= 0) return "";
  link[n] = '\0';
  return link;
}

char* pageUp(void* p) { return reinterpret_cast<char*>((uintptr_t(p) + kPage - 1) / kPage * kPage); }

uint8_t pattern(size_t i) { return uint8_t(i * 31 + 7); }

// A buffer that starts and ends inside a page, in a mapping of its own (what malloc gives
// large requests), filled with a pattern.
struct Buffer {
  size_t bytes;
  char* map;
  char* p;
  explicit Buffer(size_t pages) : bytes(pages * kPage - 100) {
    map = static_cast<char*>(
        mmap(nullptr, (pages + 1) * kPage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    p = map + 40;
    for (size_t i = 0; i < bytes; ++i) p[i] = char(pattern(i));
  }
  ~Buffer() {
    if (map != nullptr) munmap(map, (pages() + 1) * kPage);
  }
  size_t pages() const { return (bytes + 100) / kPage; }
  bool intact() const {
    for (size_t i = 0; i < bytes; ++i)
      if (uint8_t(p[i]) != pattern(i)) return false;
    return true;
  }
};

TEST(UserPages, WholePagesMoveToAFileWithTheSameBytes) {
  Buffer b(16);
  const uint64_t id = userpages::share(b.p, b.bytes);
  ASSERT_NE(id, 0u);
  EXPECT_TRUE(b.intact());
  char* first = pageUp(b.p);
  char* end = reinterpret_cast<char*>((uintptr_t(b.p) + b.bytes) / kPage * kPage);
  const size_t shared = size_t(end - first);  // the whole pages
  EXPECT_NE(mappingOf(first, shared).find("/memfd:snccl-user-"), std::string::npos) << mappingOf(first, shared);
  const userpages::Span s = userpages::find(b.p, b.bytes);
  ASSERT_NE(s.ref.ino, 0u);
  EXPECT_EQ(s.lo, size_t(first - b.p));
  EXPECT_EQ(s.tail, b.bytes - s.lo - shared);
  EXPECT_EQ(s.ref.offset, 0u);
  // Another process maps the same pages: what it reads is what the buffer holds.
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", s.ref.fd);
  int fd = open(path, O_RDWR);
  ASSERT_GE(fd, 0);
  auto* view = static_cast<char*>(mmap(nullptr, shared, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_EQ(std::memcmp(view, first, shared), 0);
  view[5] = 'x';  // a peer's write is the buffer's
  EXPECT_EQ(first[5], 'x');
  first[5] = char(pattern(size_t(first + 5 - b.p)));
  munmap(view, shared);

  // A sub-buffer is found inside the range, at its offset.
  const userpages::Span sub = userpages::find(b.p + 3 * kPage, kPage);
  EXPECT_EQ(sub.ref.ino, s.ref.ino);
  EXPECT_EQ(sub.lo, 0u);
  EXPECT_EQ(sub.tail, 0u);
  EXPECT_EQ(sub.ref.offset, size_t(b.p + 3 * kPage - first));

  userpages::release(id);
  EXPECT_EQ(mappingOf(first, shared), "");  // private anonymous memory again
  EXPECT_TRUE(b.intact());
  EXPECT_EQ(userpages::find(b.p, b.bytes).ref.ino, 0u);
}

TEST(UserPages, RegistrationsOfTheSamePagesShareOneRange) {
  Buffer b(16);
  const size_t before = userpages::liveRanges();
  const uint64_t a = userpages::share(b.p, b.bytes);
  const uint64_t inner = userpages::share(b.p + 2 * kPage, 8 * kPage);  // inside: the same range
  ASSERT_NE(a, 0u);
  EXPECT_EQ(inner, a);
  EXPECT_EQ(userpages::liveRanges(), before + 1);
  userpages::release(a);
  EXPECT_NE(userpages::find(b.p, b.bytes).ref.ino, 0u) << "still registered once";
  userpages::release(inner);
  EXPECT_EQ(userpages::find(b.p, b.bytes).ref.ino, 0u);
  EXPECT_EQ(userpages::liveRanges(), before);
}

TEST(UserPages, OverlapsSmallBuffersAndOtherMemoryStayPrivate) {
  Buffer b(16);
  const uint64_t a = userpages::share(b.p + 4 * kPage, 8 * kPage);
  ASSERT_NE(a, 0u);
  EXPECT_EQ(userpages::share(b.p, b.bytes), 0u) << "overlaps the first range without being inside it";
  userpages::release(a);
  EXPECT_EQ(userpages::share(b.p, 3 * kPage), 0u) << "too small to be worth a file";
  // A file mapping keeps its file, read-only memory its protection.
  char tmpl[] = "/tmp/snccl-user-pages-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  unlink(tmpl);
  ASSERT_EQ(ftruncate(fd, off_t(16 * kPage)), 0);
  void* file = mmap(nullptr, 16 * kPage, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  ASSERT_NE(file, MAP_FAILED);
  EXPECT_EQ(userpages::share(file, 16 * kPage), 0u);
  munmap(file, 16 * kPage);
  void* ro = mmap(nullptr, 16 * kPage, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(ro, MAP_FAILED);
  EXPECT_EQ(userpages::share(ro, 16 * kPage), 0u);
  munmap(ro, 16 * kPage);
}

// Freed without release(), and the address reused by a new mapping: find() must not
// hand out the old file, and the range is forgotten (its memory given back).
TEST(UserPages, AFreedBufferIsNoticedAndForgotten) {
  auto* b = new Buffer(16);
  const size_t before = userpages::liveRanges();
  const uint64_t id = userpages::share(b->p, b->bytes);
  ASSERT_NE(id, 0u);
  char* map = b->map;
  const size_t mapBytes = (b->pages() + 1) * kPage;
  delete b;  // munmap of the whole mapping
  void* again = mmap(map, mapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  ASSERT_EQ(again, static_cast<void*>(map));
  EXPECT_EQ(userpages::find(map + 40, mapBytes - 140).ref.ino, 0u);
  EXPECT_EQ(userpages::liveRanges(), before);
  userpages::release(id);  // the registration's end finds nothing to undo
  munmap(again, mapBytes);
}

// After fork the child owns a private copy: the parent's later writes do not reach it,
// and its writes do not reach the parent.
TEST(UserPages, AForkedChildGetsItsOwnCopy) {
  Buffer b(16);
  const uint64_t id = userpages::share(b.p, b.bytes);
  ASSERT_NE(id, 0u);
  int toChild[2], toParent[2];
  ASSERT_EQ(pipe(toChild), 0);
  ASSERT_EQ(pipe(toParent), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    char c = 0;
    if (read(toChild[0], &c, 1) != 1) _exit(3);  // the parent has scribbled by now
    if (!b.intact()) _exit(1);
    std::memset(b.p, 0x5a, b.bytes);
    if (write(toParent[1], &c, 1) != 1) _exit(4);
    if (userpages::liveRanges() != 0) _exit(2);
    _exit(0);
  }
  close(toChild[0]);  // a child that exits early ends the parent's read
  close(toParent[1]);
  // The parent scribbles: the child must not see it.
  for (size_t i = 0; i < b.bytes; ++i) b.p[i] = char(pattern(i) ^ 0xff);
  char c = 1;
  ASSERT_EQ(write(toChild[1], &c, 1), 1);
  (void)!read(toParent[0], &c, 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: the child saw the parent's writes; 2: it kept the ranges";
  for (size_t i = 0; i < b.bytes; ++i)
    ASSERT_EQ(uint8_t(b.p[i]), uint8_t(pattern(i) ^ 0xff)) << "the child's write reached the parent at " << i;
  EXPECT_NE(userpages::find(b.p, b.bytes).ref.ino, 0u) << "the parent's range is still shared";
  userpages::release(id);
  close(toChild[1]);
  close(toParent[0]);
}

}  // namespace
