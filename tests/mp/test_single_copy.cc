// The single-copy AllReduce (src/core/mapped_allreduce.cc) across processes: ranks whose
// buffers come from ncclMemAlloc read each other's buffers through mapped memory files;
// one rank with other memory makes every rank fall back to the rings. Each case runs in a
// fresh helper process (this binary again) with SNCCL_SINGLE_COPY_BYTES=4, so that every
// AllReduce but the one-element ones tries the protocol, and with the COLL log on: the log
// says which path the ranks took, the helper's exit code whether every result was exact.
//
// Results: float sums, int32 maxima, float averages and PreMulSum (scalar 0.5) of small
// integers, which are exact; counts 1, 17, 4099 and 1M+3; 2-4 ranks; out of place and in
// place. Then 40 calls on the same buffers, each overwritten as soon as the call returns:
// a rank returning while a peer still reads its input or writes its output (the
// protocol's last round) would corrupt a result.
#include <malloc.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <tuple>

#include "mp/helper_run.h"
#include "mp/mp_util.h"
#include "support/harness.h"

namespace {

constexpr const char* kHelperVar = "SNCCL_SC_HELPER";

// kMixed: rank 1 mallocs, the others ncclMemAlloc. kRegistered: every rank mallocs and
// registers (ncclCommRegister shares the whole pages: src/core/user_pages.h), each at
// another offset into its first page, so the ranks' unshared edges differ.
// kMixedRegistered: rank 1 ncclMemAlloc, the others as kRegistered. kMalloc and kMixed
// run with automatic registration off (SNCCL_AUTO_REGISTER=0); kAuto is kMalloc with it on,
// plus autoRegistration().
enum class Alloc { kMemAlloc, kMalloc, kMixed, kRegistered, kMixedRegistered, kAuto };
enum class Kind { kMemAlloc, kMalloc, kRegistered };

Kind kindOf(Alloc a, int rank) {
  switch (a) {
    case Alloc::kMemAlloc: return Kind::kMemAlloc;
    case Alloc::kMalloc: return Kind::kMalloc;
    case Alloc::kMixed: return rank == 1 ? Kind::kMalloc : Kind::kMemAlloc;
    case Alloc::kRegistered: return Kind::kRegistered;
    case Alloc::kMixedRegistered: return rank == 1 ? Kind::kMemAlloc : Kind::kRegistered;
    case Alloc::kAuto: return Kind::kMalloc;
  }
  return Kind::kMalloc;
}

// One buffer from ncclMemAlloc or malloc (then maybe registered), freed the same way.
struct Buffer {
  void* p = nullptr;
  void* raw = nullptr;
  void* handle = nullptr;
  Kind kind;
  ncclComm_t comm;
  Buffer(size_t bytes, Kind k, ncclComm_t c, int rank) : kind(k), comm(c) {
    if (kind == Kind::kMemAlloc) {
      if (ncclMemAlloc(&p, bytes) != ncclSuccess) p = nullptr;
      return;
    }
    const size_t skew = kind == Kind::kRegistered ? size_t(rank % 4) * 1028 + 4 : 0;
    raw = std::malloc(bytes + skew);
    p = raw != nullptr ? static_cast<char*>(raw) + skew : nullptr;
    if (p != nullptr && kind == Kind::kRegistered && ncclCommRegister(comm, p, bytes, &handle) != ncclSuccess)
      p = nullptr;
  }
  ~Buffer() {
    if (handle != nullptr) ncclCommDeregister(comm, handle);
    if (kind == Kind::kMemAlloc) ncclMemFree(p);
    else std::free(raw);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

bool fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return false;
}

// Each rank contributes in[i] = base + (i * 7 + rank) % 23; `op` names the check. In
// place, the result replaces the input.
bool oneCall(ncclComm_t comm, int rank, int n, Kind useNccl, size_t count, const std::string& op, int base,
             bool inPlace) {
  const bool isInt = op == "max";
  Buffer in(count * 4, useNccl, comm, rank), outBuf(inPlace ? 4 : count * 4, useNccl, comm, rank);
  Buffer& out = inPlace ? in : outBuf;
  if (in.p == nullptr || out.p == nullptr) return fail(rank, "allocation failed");
  const std::string what = op + (inPlace ? " in place" : "");
  auto value = [&](int r, size_t i) { return base + int((i * 7 + size_t(r)) % 23); };
  for (size_t i = 0; i < count; ++i) {
    if (isInt) static_cast<int32_t*>(in.p)[i] = value(rank, i);
    else static_cast<float*>(in.p)[i] = float(value(rank, i));
  }
  if (!inPlace) std::memset(out.p, 0xff, count * 4);
  ncclRedOp_t red = ncclSum;
  if (op == "max") red = ncclMax;
  if (op == "avg") red = ncclAvg;
  float half = 0.5f;
  if (op == "premulsum" &&
      ncclRedOpCreatePreMulSum(&red, &half, ncclFloat, ncclScalarHostImmediate, comm) != ncclSuccess)
    return fail(rank, "ncclRedOpCreatePreMulSum: " + mp::lastError());
  ncclResult_t res = ncclAllReduce(in.p, out.p, count, isInt ? ncclInt32 : ncclFloat, red, comm, nullptr);
  if (op == "premulsum") ncclRedOpDestroy(red, comm);
  if (res != ncclSuccess) return fail(rank, what + ": " + mp::lastError());
  for (size_t i = 0; i < count; ++i) {
    int sum = 0, mx = INT32_MIN;
    for (int r = 0; r < n; ++r) {
      sum += value(r, i);
      mx = std::max(mx, value(r, i));
    }
    if (isInt) {
      if (static_cast<int32_t*>(out.p)[i] != mx)
        return fail(rank, what + ", count " + std::to_string(count) + ": element " + std::to_string(i) + " is " +
                              std::to_string(static_cast<int32_t*>(out.p)[i]) + ", expected " + std::to_string(mx));
      continue;
    }
    float want = float(sum);
    if (op == "avg") want = float(sum) / float(n);
    if (op == "premulsum") want = 0.5f * float(sum);
    float got = static_cast<float*>(out.p)[i];
    if (got != want)
      return fail(rank, what + ", count " + std::to_string(count) + ": element " + std::to_string(i) + " is " +
                            std::to_string(got) + ", expected " + std::to_string(want));
  }
  return true;
}

// Calls on ranges of one pair of large blocks, in an order that grows the span of each
// block the peers have mapped and touched both ways (core/peer_buffers.h) and leaves a
// gap: every range must still be read and written in full.
bool rangesOfOneBlock(ncclComm_t comm, int rank, int n, Kind useNccl) {
  constexpr size_t kElems = size_t(1) << 20;
  Buffer in(kElems * 4, useNccl, comm, rank), out(kElems * 4, useNccl, comm, rank);
  if (in.p == nullptr || out.p == nullptr) return fail(rank, "allocation failed");
  auto* x = static_cast<float*>(in.p);
  auto* y = static_cast<float*>(out.p);
  struct Range {
    size_t offset, count;
  } ranges[] = {{300000, 5000}, {290000, 4000}, {600000, 70001}, {0, 1000}, {0, kElems}};
  for (const Range& g : ranges) {
    for (size_t i = 0; i < g.count; ++i) x[g.offset + i] = float(int((i * 5 + size_t(rank)) % 19));
    for (size_t i = 0; i < g.count; ++i) y[g.offset + i] = -1.0f;
    if (ncclAllReduce(x + g.offset, y + g.offset, g.count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return fail(rank, "range at " + std::to_string(g.offset) + ": " + mp::lastError());
    for (size_t i = 0; i < g.count; ++i) {
      int want = 0;
      for (int r = 0; r < n; ++r) want += int((i * 5 + size_t(r)) % 19);
      if (y[g.offset + i] != float(want))
        return fail(rank, "range at " + std::to_string(g.offset) + " + " + std::to_string(g.count) + ": element " +
                              std::to_string(i) + " is " + std::to_string(y[g.offset + i]) + ", expected " +
                              std::to_string(want));
    }
  }
  return true;
}

// Automatic registration (src/core/auto_register.h) of plain malloc buffers: a buffer
// passed twice is shared from its second call; freed and allocated again (glibc usually
// maps it at the same address), it is shared again after the address's back-off (8
// sightings); grown with realloc, it keeps its bytes; a forked child's writes to it reach
// nobody.
// Every call's result is checked, and the buffers are written between calls, as a
// program does. glibc's mmap threshold is fixed, so that every buffer of 160 KiB and up
// is a mapping of its own (by default freeing one raises the threshold to its size).
bool autoRegistration(ncclComm_t comm, int rank, int n) {
  // A sanitizer's malloc refuses mallopt; nothing is registered then (checked by the test).
  (void)mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  const size_t count = 40099;
  auto check = [&](float* x, float* y, size_t cnt, int call, const char* what) {
    for (size_t i = 0; i < cnt; ++i) x[i] = float(call * 2 + rank + int(i % 7));
    if (ncclAllReduce(x, y, cnt, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return fail(rank, std::string(what) + ": " + mp::lastError());
    for (size_t i = 0; i < cnt; ++i) {
      const float want = float(n * (call * 2 + int(i % 7)) + n * (n - 1) / 2);
      if (y[i] != want)
        return fail(rank, std::string(what) + ", call " + std::to_string(call) + ": element " + std::to_string(i) +
                              " is " + std::to_string(y[i]) + ", expected " + std::to_string(want));
    }
    return true;
  };
  for (int round = 0; round < 2; ++round) {  // the second round: the same sizes after free
    auto* in = static_cast<float*>(std::malloc(count * 4));
    auto* out = static_cast<float*>(std::malloc(count * 4));
    if (in == nullptr || out == nullptr) return fail(rank, "malloc failed");
    for (int call = 0; call < (round == 0 ? 4 : 12); ++call) {
      const bool inPlace = call % 2 == 1;
      if (!check(in, inPlace ? in : out, count, call, round == 0 ? "auto" : "auto, reallocated")) return false;
    }
    if (round == 0) {
      // fork while both buffers are shared: the child's writes must reach neither this
      // process nor its peers (whose next calls read these buffers).
      std::fflush(stdout);
      std::fflush(stderr);
      const float kept = out[0];
      const pid_t child = fork();
      if (child == 0) {
        std::memset(in, 0x55, count * 4);
        std::memset(out, 0x55, count * 4);
        _exit(0);
      }
      int status = 0;
      if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return fail(rank, "the forked child failed");
      if (out[0] != kept) return fail(rank, "the forked child's write reached the parent");
      for (int call = 4; call < 8; ++call)
        if (!check(in, call % 2 == 1 ? in : out, count, call, "auto, after a fork")) return false;
    }
    if (round == 1) {
      // Grown: glibc cannot mremap the split mapping and copies into a new one.
      auto* grown = static_cast<float*>(std::realloc(in, count * 8));
      if (grown == nullptr) return fail(rank, "realloc failed");
      for (size_t i = 0; i < count; ++i)
        if (grown[i] != float(n * (11 * 2 + int(i % 7)) + n * (n - 1) / 2))
          return fail(rank, "realloc lost element " + std::to_string(i));
      in = grown;
      for (int call = 0; call < 3; ++call)
        if (!check(in, in, count * 2, call, "auto, after realloc")) return false;
    }
    std::free(in);
    std::free(out);
  }
  return true;
}

// The helper's ranks: every case, ranges of one block, then the reuse loop.
bool helperBody(ncclComm_t comm, int rank, int n, Alloc alloc) {
  const Kind useNccl = kindOf(alloc, rank);
  if (alloc == Alloc::kAuto && !autoRegistration(comm, rank, n)) return false;
  for (size_t count : {size_t(1), size_t(17), size_t(4099), (size_t(1) << 20) + 3})
    for (const char* op : {"sum", "max", "avg", "premulsum"})
      for (bool inPlace : {false, true})
        if (!oneCall(comm, rank, n, useNccl, count, op, 0, inPlace)) return false;
  if (!rangesOfOneBlock(comm, rank, n, useNccl)) return false;
  // Large enough for registered buffers to be shared (src/core/user_pages.h).
  constexpr size_t kCount = 40099;
  Buffer in(kCount * 4, useNccl, comm, rank), out(kCount * 4, useNccl, comm, rank);
  for (int iter = 0; iter < 40; ++iter) {
    auto* x = static_cast<float*>(in.p);
    // Out of place, in place, then in place on even ranks only: each rank's output is
    // written with streaming or plain stores by whether it is that rank's input.
    const bool inPlace = iter % 3 == 1 || (iter % 3 == 2 && rank % 2 == 0);
    auto* y = static_cast<float*>(inPlace ? in.p : out.p);
    for (size_t i = 0; i < kCount; ++i) x[i] = float(iter * 3 + rank + int(i % 5));
    if (ncclAllReduce(x, y, kCount, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
      return fail(rank, "reuse: " + mp::lastError());
    for (size_t i = 0; i < kCount; ++i) {
      float want = float(n * (iter * 3 + int(i % 5)) + n * (n - 1) / 2);
      if (y[i] != want)
        return fail(rank, "reuse, call " + std::to_string(iter) + ": element " + std::to_string(i) + " is " +
                              std::to_string(y[i]) + ", expected " + std::to_string(want));
    }
    // The caller owns its buffers again: a peer still reading or writing them would
    // see or undo this.
    std::memset(x, 0x7f, kCount * 4);
    std::memset(y, 0x7f, kCount * 4);
  }
  return true;
}

// Runs in the helper process (gtest filter set by main): the case from the environment.
TEST(SingleCopyHelper, DISABLED_Run) {
  const char* mode = std::getenv("SC_MODE");
  const int n = std::atoi(std::getenv("SC_N") ? std::getenv("SC_N") : "0");
  const Alloc alloc = Alloc(std::atoi(std::getenv("SC_ALLOC") ? std::getenv("SC_ALLOC") : "0"));
  ASSERT_TRUE(mode != nullptr && n >= 2);
  sntest::Mode m = std::string(mode) == "threads" ? sntest::Mode::kThreads : sntest::Mode::kProcesses;
  sntest::runRanks(m, n, [&](ncclComm_t comm, int rank, int nranks) {
    bool ok = helperBody(comm, rank, nranks, alloc);
    EXPECT_TRUE(ok) << "rank " << rank;
    return ok;
  }, 240);
}

using Param = std::tuple<sntest::Mode, int, Alloc>;

class SingleCopy : public ::testing::TestWithParam<Param> {};

TEST_P(SingleCopy, ExactResultsOnTheExpectedPath) {
  const auto [mode, n, alloc] = GetParam();
  mp::TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  mp::HelperRun run = mp::runHelper(kHelperVar, dir.path,
                                    {{"SC_MODE", sntest::modeName(mode)},
                                     {"SC_N", std::to_string(n)},
                                     {"SC_ALLOC", std::to_string(int(alloc))},
                                     {"SNCCL_SINGLE_COPY_BYTES", "4"},
                                     {"SNCCL_AUTO_REGISTER", alloc == Alloc::kAuto ? "65536" : "0"},
                                     {"NCCL_DEBUG", "INFO"},
                                     {"NCCL_DEBUG_SUBSYS", "COLL,REG"},
                                     {"NCCL_DEBUG_FILE", dir.path + "/sc.%p"}},
                                    300);
  EXPECT_EQ(run.rc, 0) << "a result was wrong or a call failed (the helper's stderr says which)\n" << mp::dump(run);
  // Which path each rank logged (a line per change of path; "host:pid:tid [dev] NCCL INFO").
  std::set<std::string> single, rings, autoRegistered;
  size_t autoCount = 0;
  for (const std::string& l : run.lines) {
    std::string who = l.substr(0, l.find(' '));  // host:pid:tid
    if (l.find("single copy") != std::string::npos) single.insert(who);
    if (l.find("through the rings") != std::string::npos) rings.insert(who);
    if (l.find("registered automatically on its second use") != std::string::npos) {
      autoRegistered.insert(who);
      ++autoCount;
    }
  }
  const bool mapped = mode == sntest::Mode::kThreads || alloc == Alloc::kMemAlloc;
#if defined(__SANITIZE_ADDRESS__)
  // The sanitizer's malloc is not glibc's: nothing is registered automatically, and the
  // results (checked by the helper) must still be exact.
  constexpr bool kGlibcMalloc = false;
#else
  constexpr bool kGlibcMalloc = true;
#endif
  if (alloc == Alloc::kAuto && !kGlibcMalloc) {
    EXPECT_TRUE(autoRegistered.empty()) << mp::dump(run);
  } else if (alloc == Alloc::kAuto) {
    // Both buffers of both rounds on every rank, and the grown one (at least).
    EXPECT_EQ(autoRegistered.size(), size_t(n)) << mp::dump(run);
    EXPECT_GE(autoCount, size_t(5 * n)) << mp::dump(run);
    EXPECT_EQ(single.size(), size_t(n)) << "every rank should log the single-copy path\n" << mp::dump(run);
  } else {
    EXPECT_TRUE(autoRegistered.empty()) << "SNCCL_AUTO_REGISTER=0\n" << mp::dump(run);
  }
  if (alloc == Alloc::kAuto) {
    // Checked above.
  } else if (alloc == Alloc::kRegistered || alloc == Alloc::kMixedRegistered) {
    // Small registered buffers (below 4 whole pages) stay private and take the rings;
    // the large ones take the single copy.
    EXPECT_EQ(single.size(), size_t(n)) << "every rank should log the single-copy path\n" << mp::dump(run);
  } else if (mapped) {
    EXPECT_EQ(single.size(), size_t(n)) << "every rank should log the single-copy path\n" << mp::dump(run);
    EXPECT_TRUE(rings.empty()) << mp::dump(run);
  } else {
    EXPECT_EQ(rings.size(), size_t(n)) << "every rank should fall back to the rings\n" << mp::dump(run);
    EXPECT_TRUE(single.empty()) << mp::dump(run);
  }
}

std::string paramName(const ::testing::TestParamInfo<Param>& info) {
  static const char* kAlloc[] = {"memalloc", "malloc", "mixed", "registered", "mixed_registered", "auto"};
  return std::string(sntest::modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param)) +
         "_" + kAlloc[int(std::get<2>(info.param))];
}

INSTANTIATE_TEST_SUITE_P(Processes, SingleCopy,
                         ::testing::Combine(::testing::Values(sntest::Mode::kProcesses), ::testing::Values(2, 3, 4),
                                            ::testing::Values(Alloc::kMemAlloc, Alloc::kMalloc, Alloc::kMixed,
                                                              Alloc::kRegistered, Alloc::kMixedRegistered,
                                                              Alloc::kAuto)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Threads, SingleCopy,
                         ::testing::Values(Param{sntest::Mode::kThreads, 3, Alloc::kMalloc},
                                           Param{sntest::Mode::kThreads, 3, Alloc::kMixedRegistered}),
                         paramName);

// Whether an AllReduce takes the single copy is the selector's pick, so ranks of a node
// that allow different AllReduce algorithms (SNCCL_ALGO is read per process) would
// disagree: one running the rings while the others map its buffers. Init refuses that on
// every rank, naming the variable. Rank 1 forbids `single`, rank 0 sets nothing.
TEST(SingleCopyAgreement, RanksWithDifferentAlgorithmSetsFailInit) {
  struct Box {
    std::atomic<int> state;  // 0: no id yet, 1: id valid, 2: no id
    ncclUniqueId id;
    int result[2];
    char error[2][256];
  };
  Box* box = mp::sharedBlock<Box>();
  ASSERT_NE(box, nullptr);
  auto initRank = [box](int rank) {
    ncclComm_t comm = nullptr;
    box->result[rank] = int(ncclCommInitRank(&comm, 2, box->id, rank));
    std::snprintf(box->error[rank], sizeof box->error[rank], "%s", ncclGetLastError(nullptr));
    if (comm != nullptr) ncclCommDestroy(comm);
  };
  std::string how;
  const int rc = mp::runChild(
      [&] {
        unsetenv("SNCCL_ALGO");
        unsetenv("NCCL_ALGO");
        pid_t peer = fork();
        if (peer == 0) {
          prctl(PR_SET_PDEATHSIG, SIGKILL);
          setenv("SNCCL_ALGO", "^single", 1);
          for (int waited = 0; box->state.load() == 0 && waited < 60000; ++waited) usleep(1000);
          if (box->state.load() != 1) _exit(3);
          initRank(1);
          _exit(0);
        }
        if (peer < 0 || ncclGetUniqueId(&box->id) != ncclSuccess) {
          box->state.store(2);
          return 2;
        }
        box->state.store(1);
        initRank(0);
        int status = 0;
        waitpid(peer, &status, 0);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 4;
      },
      90, &how);
  ASSERT_EQ(rc, 0) << how;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(box->result[r], int(ncclInvalidUsage)) << "rank " << r << ": " << box->error[r];
    EXPECT_TRUE(mp::Mentions(box->error[r], "SNCCL_ALGO")) << "rank " << r;
  }
  mp::freeShared(box);
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (std::getenv(kHelperVar) != nullptr) {
    GTEST_FLAG_SET(filter, "SingleCopyHelper.DISABLED_Run");
    GTEST_FLAG_SET(also_run_disabled_tests, true);
  }
  return RUN_ALL_TESTS();
}
