// Faults with ranks as processes: a rank killed mid-collective, mismatched collectives,
// ncclCommAbort with absent or dead peers, a rank that never joins init, and /dev/shm
// segments left behind (the ranks run under mp/fault_harness.h's coordinator).
// GCC 12 reports a false -Wmaybe-uninitialized inside <regex> when built with sanitizers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <dirent.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "mp/fault_harness.h"
#include "support/temp_dir.h"

namespace {

using mp::Mentions;
using mp::nowSec;
using namespace faults;

// ---- a rank dies mid-collective ----

const std::vector<std::pair<std::string, std::string>> kTimeout20 = {{"SNCCL_TIMEOUT", "20"}};

// Survivors loop over large allreduces until one fails.
// raiseAt >= 0: the victim kills itself before its collective number raiseAt (0: before
// the first, while the others set up connections to it).
void allreduceLoop(int rank, Shared* sh, int n, int victim, int raiseAt) {
  ncclComm_t comm = initRank(sh, rank, n);
  if (comm == nullptr) return;
  const size_t count = size_t(2) << 20;  // 8 MiB of floats
  std::vector<float> in(count, float(rank)), out(count);
  for (int it = 0; it < 100000; ++it) {
    if (rank == victim && it == raiseAt) {
      sh->tEvent = nowSec();
      raise(SIGKILL);
    }
    ncclResult_t res = ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr);
    if (res != ncclSuccess) {
      record(sh, rank, res);
      break;
    }
    __atomic_store_n(&sh->r[rank].iters, it + 1, __ATOMIC_RELEASE);
    if (out[count - 1] != float(n * (n - 1) / 2)) {
      std::snprintf(sh->r[rank].msg, sizeof sh->r[rank].msg, "wrong result %f", out[count - 1]);
      sh->r[rank].code = 100;
      break;
    }
  }
  double t0 = nowSec();
  ncclCommAbort(comm);
  sh->r[rank].tExtra = nowSec() - t0;
}

void checkSurvivors(const Shared* sh, int n, int victim) {
  std::string all = describe(sh, n);
  EXPECT_TRUE(killedBySigkill(sh->r[victim])) << all;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    const RankResult& x = sh->r[r];
    EXPECT_EQ(x.code, ncclRemoteError) << "survivor " << r << "\n" << all;
    EXPECT_LT(x.tEnd - sh->tEvent, 10.0) << "survivor " << r << " needed more than half of SNCCL_TIMEOUT\n" << all;
    EXPECT_TRUE(namesRank(x.msg, victim)) << "survivor " << r << "'s error does not name dead rank " << victim << "\n"
                                          << all;
  }
  std::printf("%s", all.c_str());
}

TEST(Faults, RankRaisesSigkillBetweenCollectives) {
  const int n = 4, victim = 2;
  sntest::Watchdog dog(180, "raise(SIGKILL) scenario");
  Shared* sh = runScenario(n, kTimeout20, [&](int r, Shared* s) { allreduceLoop(r, s, n, victim, 3); });
  ASSERT_NE(sh, nullptr);
  checkSurvivors(sh, n, victim);
  mp::freeShared(sh);
}

// The survivors are in connection setup (bootstrap recv): the comm's peer watch notices
// the dead process there.
TEST(Faults, RankDiesBeforeFirstCollective) {
  const int n = 4, victim = 3;
  sntest::Watchdog dog(180, "death before the first collective");
  Shared* sh = runScenario(n, kTimeout20, [&](int r, Shared* s) { allreduceLoop(r, s, n, victim, 0); });
  ASSERT_NE(sh, nullptr);
  checkSurvivors(sh, n, victim);
  mp::freeShared(sh);
}

// The dead process stays a zombie (its parent has not waited for it yet): it is dead all
// the same, and the survivors must see that.
// kill(pid, 0) succeeds on a zombie: processGone() reads its state from /proc.
TEST(Faults, DeadRankNotYetReapedByItsParent) {
  const int n = 3, victim = 1;
  sntest::Watchdog dog(180, "zombie scenario");
  Shared* sh = runScenario(
      n, kTimeout20, [&](int r, Shared* s) { allreduceLoop(r, s, n, victim, 3); }, nullptr, 90, victim);
  ASSERT_NE(sh, nullptr);
  checkSurvivors(sh, n, victim);
  mp::freeShared(sh);
}

TEST(Faults, RankKilledByParentMidCollective) {
  const int n = 4, victim = 1;
  sntest::Watchdog dog(180, "SIGKILL from the parent scenario");
  Shared* sh = runScenario(
      n, kTimeout20, [&](int r, Shared* s) { allreduceLoop(r, s, n, victim, -1); },
      [&](Shared* s, const std::vector<pid_t>& pids) {
        waitForIters(s, n, 3);
        usleep(3000);  // somewhere inside the next allreduce
        s->tEvent = nowSec();
        kill(pids[victim], SIGKILL);
      });
  ASSERT_NE(sh, nullptr);
  checkSurvivors(sh, n, victim);
  mp::freeShared(sh);
}

// A stopped rank (SIGSTOP, a debugger) is alive, so only SNCCL_TIMEOUT ends the wait, on
// every survivor within moments: each must name the stopped rank, not the neighbour it
// happened to wait on, nor one that timed out just before it and poisoned its rings.
TEST(Faults, StoppedRankIsNamedByEverySurvivor) {
  const int n = 4, victim = 2;
  sntest::Watchdog dog(180, "SIGSTOP scenario");
  Shared* sh = runScenario(
      n, {{"SNCCL_TIMEOUT", "3"}}, [&](int r, Shared* s) { allreduceLoop(r, s, n, victim, -1); },
      [&](Shared* s, const std::vector<pid_t>& pids) {
        waitForIters(s, n, 3);
        usleep(3000);
        s->tEvent = nowSec();
        stopUntilSurvivorsDone(s, n, victim, pids);
      });
  ASSERT_NE(sh, nullptr);
  checkSurvivors(sh, n, victim);
  mp::freeShared(sh);
}

// The survivors of a dead rank shrink it away (NCCL_SHRINK_ABORT) and carry on.
TEST(Faults, SurvivorsShrinkAwayADeadRank) {
  const int n = 4, victim = 2;
  sntest::Watchdog dog(180, "shrink after death");
  Shared* sh = runScenario(n, kTimeout20, [&](int rank, Shared* s) {
    ncclComm_t comm = initRank(s, rank, n);
    if (comm == nullptr) return;
    std::vector<int64_t> in(1 << 18, rank + 1), out(1 << 18);
    ncclResult_t res = ncclSuccess;
    for (int it = 0; res == ncclSuccess && it < 100000; ++it) {
      if (rank == victim && it == 2) {
        s->tEvent = nowSec();
        raise(SIGKILL);
      }
      res = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt64, ncclSum, comm, nullptr);
    }
    const double tError = nowSec();  // the survivor's failing call returned
    int exclude[1] = {victim};
    ncclComm_t small = nullptr;
    res = ncclCommShrink(comm, exclude, 1, &small, nullptr, NCCL_SHRINK_ABORT);
    if (res == ncclSuccess) {
      res = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt64, ncclSum, small, nullptr);
      if (res == ncclSuccess && out[12345] != 1 + 2 + 4) res = ncclInternalError;
      __atomic_store_n(&s->r[rank].iters, 1, __ATOMIC_RELEASE);
    }
    record(s, rank, res);
    s->r[rank].tExtra = tError;
    if (small) ncclCommDestroy(small);
    ncclCommAbort(comm);
  });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  for (int r = 0; r < n; ++r) {
    if (r != victim) {
      EXPECT_EQ(sh->r[r].code, ncclSuccess) << "rank " << r << " after shrink\n" << all;
      // From the kill: when the survivor's call failed, and when the shrunk communicator's
      // first AllReduce returned the right sum (docs/operations.md quotes these).
      std::printf("rank %d: error after %.1f ms, recovered after %.1f ms\n", r, 1e3 * (sh->r[r].tExtra - sh->tEvent),
                  1e3 * (sh->r[r].tEnd - sh->tEvent));
    }
  }
  mp::freeShared(sh);
}

// ---- mismatched collectives ----

enum class Mismatch { kCollective, kCount, kDatatype };

void mismatchRank(int rank, Shared* sh, int n, Mismatch kind) {
  ncclComm_t comm = initRank(sh, rank, n);
  if (comm == nullptr) return;
  const size_t count = 100000;
  std::vector<float> in(count * n, 1.0f), out(count * n);
  // One good operation first: connections exist, sequence numbers are past 0.
  if (ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
    record(sh, rank, ncclInternalError);
    return;
  }
  sh->tEvent = nowSec();
  ncclResult_t res;
  if (rank == 1 && kind == Mismatch::kCollective) {
    res = ncclAllGather(in.data(), out.data(), count, ncclFloat, comm, nullptr);
  } else if (rank == 1 && kind == Mismatch::kDatatype) {
    res = ncclAllReduce(in.data(), out.data(), count, ncclInt32, ncclSum, comm, nullptr);
  } else {
    size_t c = rank == 1 && kind == Mismatch::kCount ? 2 * count : count;
    res = ncclAllReduce(in.data(), out.data(), c, ncclFloat, ncclSum, comm, nullptr);
  }
  record(sh, rank, res);
  ncclCommAbort(comm);
}

void checkMismatch(Mismatch kind, const char* a, const char* b) {
  const int n = 3;
  sntest::Watchdog dog(120, "mismatch scenario");
  Shared* sh = runScenario(n, kTimeout20, [&](int r, Shared* s) { mismatchRank(r, s, n, kind); });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  int invalidUsage = 0, naming = 0;
  for (int r = 0; r < n; ++r) {
    const RankResult& x = sh->r[r];
    EXPECT_TRUE(x.code == ncclInvalidUsage || x.code == ncclRemoteError) << "rank " << r << "\n" << all;
    EXPECT_LT(x.tEnd - sh->tEvent, 10.0) << "rank " << r << " waited for the timeout instead of detecting\n" << all;
    if (x.code == ncclInvalidUsage) {
      ++invalidUsage;
      if (Mentions(x.msg, a) && Mentions(x.msg, b)) ++naming;
    }
  }
  EXPECT_GE(invalidUsage, 1) << all;
  EXPECT_GE(naming, 1) << "no ncclInvalidUsage message names both '" << a << "' and '" << b << "'\n" << all;
  std::printf("%s", all.c_str());
  mp::freeShared(sh);
}

TEST(Faults, DifferentCollectivesAreInvalidUsage) { checkMismatch(Mismatch::kCollective, "AllReduce", "AllGather"); }
TEST(Faults, DifferentCountsAreInvalidUsage) { checkMismatch(Mismatch::kCount, "count", "AllReduce"); }
TEST(Faults, DifferentDatatypesAreInvalidUsage) { checkMismatch(Mismatch::kDatatype, "float", "int32"); }

// Mismatches the message signatures alone cannot catch in the call: ranks that pass
// different roots to a rooted collective (a rank that believes it is the root of a
// Broadcast receives nothing; the Reduce roots wait for messages nobody sends), and
// counts whose 15-bit hash in the signature collides (65621 and 65770) on the
// single-copy AllReduce, where a rank writes straight into its peers' outputs. Each must
// fail the call on every rank with ncclInvalidUsage naming what differs, leave the bytes
// after each rank's output alone, and never report success.
enum class Rooted { kBroadcastRoot, kReduceRoot, kCountCollision };

struct RootedCase {
  Rooted kind;
  int n;
  bool memAlloc;  // buffers from ncclMemAlloc (the single copy maps them), else malloc
};

constexpr size_t kCollideSmall = 65621, kCollideLarge = 65770;  // equal 15-bit count hash
constexpr size_t kGuardElems = 4096;                             // past each rank's count

void rootedRank(int rank, Shared* sh, const RootedCase& c) {
  ncclComm_t comm = initRank(sh, rank, c.n);
  if (comm == nullptr) return;
  const size_t count = c.kind == Rooted::kCountCollision ? (rank == 1 ? kCollideLarge : kCollideSmall) : 5000;
  const size_t elems = kCollideLarge + kGuardElems;
  void* in = nullptr;
  void* out = nullptr;
  if (c.memAlloc) {
    if (ncclMemAlloc(&in, elems * 4) != ncclSuccess || ncclMemAlloc(&out, elems * 4) != ncclSuccess) {
      record(sh, rank, ncclSystemError);
      return;
    }
  } else {
    in = std::malloc(elems * 4);
    out = std::malloc(elems * 4);
  }
  auto* fin = static_cast<float*>(in);
  auto* fout = static_cast<float*>(out);
  for (size_t i = 0; i < elems; ++i) fin[i] = float(rank + 1), fout[i] = -1.0f;
  ncclResult_t res = ncclAllReduce(in, out, 1000, ncclFloat, ncclSum, comm, nullptr);  // connections exist
  for (size_t i = 0; i < elems; ++i) fout[i] = -1.0f;
  sh->tEvent = nowSec();
  if (res != ncclSuccess) {
    record(sh, rank, res);
  } else if (c.kind == Rooted::kCountCollision) {
    res = ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, nullptr);
  } else {
    // Ranks 0 and 1 agree on root 0; the last rank names itself (at 2 ranks: both roots).
    const int root = rank == c.n - 1 ? rank : 0;
    res = c.kind == Rooted::kBroadcastRoot ? ncclBroadcast(in, out, count, ncclFloat, root, comm, nullptr)
                                           : ncclReduce(in, out, count, ncclFloat, ncclSum, root, comm, nullptr);
  }
  record(sh, rank, res);
  size_t touched = 0;
  for (size_t i = count; i < elems; ++i) touched += fout[i] != -1.0f;
  sh->r[rank].iters = int(touched);  // elements written past this rank's count
  ncclCommAbort(comm);
  if (c.memAlloc) {
    ncclMemFree(in);
    ncclMemFree(out);
  } else {
    std::free(in);
    std::free(out);
  }
}

std::string rootedText(const RootedCase& c) {
  static const char* kKind[] = {"BroadcastRoot", "ReduceRoot", "CountCollision"};
  return std::string(kKind[int(c.kind)]) + "_" + std::to_string(c.n) + "_" + (c.memAlloc ? "memalloc" : "malloc");
}
void PrintTo(const RootedCase& c, std::ostream* os) { *os << rootedText(c); }

class RootedMismatch : public ::testing::TestWithParam<RootedCase> {};

TEST_P(RootedMismatch, FailsEveryRankNamingIt) {
  const RootedCase c = GetParam();
  sntest::Watchdog dog(120, "rooted mismatch scenario");
  std::vector<std::pair<std::string, std::string>> env = {{"SNCCL_TIMEOUT", "20"}};
  if (c.kind == Rooted::kCountCollision) {
    env.push_back({"SNCCL_SINGLE_COPY_BYTES", "4"});
    env.push_back({"NCCL_ALGO", "single"});
  }
  Shared* sh = runScenario(c.n, env, [&](int r, Shared* s) { rootedRank(r, s, c); });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, c.n);
  const char* what = c.kind == Rooted::kCountCollision ? "count" : "root";
  for (int r = 0; r < c.n; ++r) {
    const RankResult& x = sh->r[r];
    EXPECT_NE(x.code, ncclSuccess) << "rank " << r << "\n" << all;
    EXPECT_EQ(x.iters, 0) << "rank " << r << ": elements written past its count\n" << all;
    EXPECT_EQ(x.code, ncclInvalidUsage) << "rank " << r << "\n" << all;
    EXPECT_TRUE(Mentions(x.msg, what)) << "rank " << r << " does not name the " << what << "\n" << all;
  }
  std::printf("%s", all.c_str());
  mp::freeShared(sh);
}

std::string rootedName(const ::testing::TestParamInfo<RootedCase>& info) { return rootedText(info.param); }

INSTANTIATE_TEST_SUITE_P(Faults, RootedMismatch,
                         ::testing::Values(RootedCase{Rooted::kBroadcastRoot, 2, false},
                                           RootedCase{Rooted::kBroadcastRoot, 3, false},
                                           RootedCase{Rooted::kBroadcastRoot, 2, true},
                                           RootedCase{Rooted::kBroadcastRoot, 3, true},
                                           RootedCase{Rooted::kReduceRoot, 2, false},
                                           RootedCase{Rooted::kReduceRoot, 3, false},
                                           RootedCase{Rooted::kReduceRoot, 2, true},
                                           RootedCase{Rooted::kReduceRoot, 3, true},
                                           RootedCase{Rooted::kCountCollision, 2, false},
                                           RootedCase{Rooted::kCountCollision, 3, false},
                                           RootedCase{Rooted::kCountCollision, 2, true},
                                           RootedCase{Rooted::kCountCollision, 3, true}),
                         rootedName);

// SNCCL_SINGLE_COPY_BYTES decides per call whether the ranks of one node run the
// single-copy protocol or the rings, so it must agree: a rank with another value fails
// every rank's init with a message naming the variable, instead of a size mismatch in
// the middle of some later AllReduce.
TEST(Faults, DifferentSingleCopyThresholdsFailAtInit) {
  const int n = 3;
  sntest::Watchdog dog(120, "single-copy threshold scenario");
  Shared* sh = runScenario(n, kTimeout20, [&](int r, Shared* s) {
    setenv("SNCCL_SINGLE_COPY_BYTES", r == 2 ? "65536" : "131072", 1);  // read at this rank's first init
    ncclComm_t comm = nullptr;
    ncclResult_t res = ncclCommInitRank(&comm, n, s->id, r);
    record(s, r, res);
    if (res == ncclSuccess) ncclCommDestroy(comm);
  });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  for (int r = 0; r < n; ++r) {
    const RankResult& x = sh->r[r];
    EXPECT_EQ(x.code, ncclInvalidUsage) << "rank " << r << "\n" << all;
    EXPECT_TRUE(Mentions(x.msg, "SNCCL_SINGLE_COPY_BYTES")) << "rank " << r << "\n" << all;
    EXPECT_TRUE(Mentions(x.msg, "65536") && namesRank(x.msg, 2)) << "rank " << r << "\n" << all;
  }
  mp::freeShared(sh);
}

// ---- abort ----

// Ranks 0 and 1 enter an allreduce; rank 2 aborts instead and stays alive, so only the
// abort (not a process exit) can release them.
void abortScenario(bool warmup) {
  const int n = 3;
  sntest::Watchdog dog(120, "abort scenario");
  Shared* sh = runScenario(n, kTimeout20, [&](int rank, Shared* s) {
    ncclComm_t comm = initRank(s, rank, n);
    if (comm == nullptr) return;
    std::vector<float> in(1 << 20, 1.0f), out(1 << 20);
    if (warmup && ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
      record(s, rank, ncclInternalError);
      return;
    }
    if (rank == 2) {
      usleep(1000000);  // the others are blocked in the allreduce by now
      s->tEvent = nowSec();
      ncclResult_t res = ncclCommAbort(comm);
      s->r[rank].tExtra = nowSec() - s->tEvent;
      record(s, rank, res);
      __atomic_store_n(&s->r[rank].done, 1, __ATOMIC_RELEASE);
      linger(s, 30);
      return;
    }
    ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    record(s, rank, res);
    ncclCommAbort(comm);
  });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  EXPECT_EQ(sh->r[2].code, ncclSuccess) << all;
  std::printf("ncclCommAbort took %.3f s\n%s", sh->r[2].tExtra, all.c_str());
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(sh->r[r].code, ncclSuccess) << all;
    EXPECT_NE(sh->r[r].code, -1) << all;
    EXPECT_LT(sh->r[r].tEnd - sh->tEvent, 10.0) << "rank " << r << " was not released by the abort\n" << all;
  }
  mp::freeShared(sh);
}

TEST(Faults, AbortReleasesPeersBlockedOnIt) { abortScenario(true); }
// The peers are in connection setup with the aborting rank: its abort notice reaches them.
TEST(Faults, AbortReleasesPeersBlockedInConnectionSetup) { abortScenario(false); }

// Peers have exited (without destroying); Abort and Destroy of the last rank return.
void peersGoneScenario(bool useAbort) {
  const int n = 3;
  sntest::Watchdog dog(120, "peers gone scenario");
  Shared* sh = runScenario(n, kTimeout20, [&](int rank, Shared* s) {
    ncclComm_t comm = initRank(s, rank, n);
    if (comm == nullptr) return;
    std::vector<float> in(1 << 18, 1.0f), out(1 << 18);
    ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    if (rank != 0) {
      record(s, rank, res);
      _exit(0);  // gone without a word
    }
    double end = nowSec() + 30;
    while (!(s->r[1].exited && s->r[2].exited) && nowSec() < end) usleep(1000);
    s->tEvent = nowSec();
    res = useAbort ? ncclCommAbort(comm) : ncclCommDestroy(comm);
    s->r[0].tExtra = nowSec() - s->tEvent;
    record(s, 0, res);
  });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  EXPECT_EQ(sh->r[0].code, ncclSuccess) << all;
  std::printf("%s with peers gone took %.3f s\n", useAbort ? "ncclCommAbort" : "ncclCommDestroy", sh->r[0].tExtra);
  mp::freeShared(sh);
}

TEST(Faults, AbortWithPeersGone) { peersGoneScenario(true); }
TEST(Faults, DestroyWithPeersGone) { peersGoneScenario(false); }

// ---- init with a missing rank ----

void missingRankScenario(bool missingExits) {
  const int n = 3;
  sntest::Watchdog dog(120, "missing rank scenario");
  Shared* sh = runScenario(n, {{"SNCCL_TIMEOUT", "5"}}, [&](int rank, Shared* s) {
    if (rank == 2) {
      s->tEvent = nowSec();
      __atomic_store_n(&s->r[rank].done, 1, __ATOMIC_RELEASE);
      if (!missingExits) linger(s, 30);
      return;
    }
    ncclComm_t comm = nullptr;
    ncclResult_t res = ncclCommInitRank(&comm, n, s->id, rank);
    record(s, rank, res);
    if (comm) ncclCommAbort(comm);
  });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(sh->r[r].code, ncclSuccess) << all;
    EXPECT_NE(sh->r[r].code, -1) << all;
    EXPECT_LT(sh->r[r].tEnd - sh->tEvent, 5.0 + 5.0) << "init did not fail within SNCCL_TIMEOUT=5\n" << all;
    EXPECT_TRUE(namesRank(sh->r[r].msg, 2) || Mentions(sh->r[r].msg, "2 of 3") || Mentions(sh->r[r].msg, "missing"))
        << "the error should say which rank is missing\n" << all;
  }
  std::printf("%s", all.c_str());
  mp::freeShared(sh);
}

// The root times out first (ranks wait a grace period past their own deadline for its
// reply), so the error names the missing rank even under load.
TEST(Faults, InitFailsWhenARankNeverJoins) { missingRankScenario(false); }
TEST(Faults, InitFailsWhenARankExitsBeforeJoining) { missingRankScenario(true); }

// ---- /dev/shm segments ----

std::set<std::string> shmEntries() {
  std::set<std::string> out;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "snccl-", 6) == 0) out.insert(e->d_name);
    closedir(d);
  }
  return out;
}

// The communicator hashes the ranks logged ("commHash <16 hex>") and whether shm was used.
std::set<std::string> loggedHashes(const std::string& dir, bool* sawShm, std::string* channels) {
  std::set<std::string> hashes;
  std::regex re("commHash ([0-9a-f]{16})");
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::ifstream f(dir + "/" + e->d_name);
      std::string line;
      while (std::getline(f, line)) {
        std::smatch m;
        if (std::regex_search(line, m, re)) hashes.insert(m[1]);
        if (line.find("via shm") != std::string::npos) *sawShm = true;
        if (line.find(" via ") != std::string::npos) *channels += line + "\n";
      }
    }
    closedir(d);
  }
  return hashes;
}

enum class Ending { kDestroy, kAbort, kKillMidCollective, kKillBeforeFirstOp };

void shmScenario(Ending ending) {
  const int n = 3, victim = 1;
  sntest::Watchdog dog(150, "shm scenario");
  sntest::TempDir dir("snccl-mp");
  ASSERT_FALSE(dir.path.empty());
  std::set<std::string> before = shmEntries();
  std::vector<std::pair<std::string, std::string>> env = {{"SNCCL_TIMEOUT", "20"},
                                                          {"NCCL_DEBUG", "INFO"},
                                                          {"NCCL_DEBUG_SUBSYS", "INIT"},
                                                          {"NCCL_DEBUG_FILE", dir.path + "/rank.%p.log"},
                                                          {"SNCCL_SHM_DISABLE", "0"}};
  Shared* sh = runScenario(n, env, [&](int rank, Shared* s) {
    ncclComm_t comm = initRank(s, rank, n);
    if (comm == nullptr) return;
    if (ending == Ending::kKillBeforeFirstOp && rank == victim) raise(SIGKILL);
    std::vector<float> in(1 << 20, 1.0f), out(1 << 20);
    ncclResult_t res = ncclSuccess;
    for (int it = 0; it < 6 && res == ncclSuccess; ++it) {
      if (ending == Ending::kKillMidCollective && rank == victim && it == 2) raise(SIGKILL);
      res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr);
    }
    record(s, rank, res);
    if (ending == Ending::kDestroy) {
      ncclCommDestroy(comm);
    } else {
      ncclCommAbort(comm);
    }
  });
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  bool sawShm = false;
  std::string channels;
  std::set<std::string> hashes = loggedHashes(dir.path, &sawShm, &channels);
  EXPECT_FALSE(hashes.empty()) << "no 'commHash' in the INFO logs of " << dir.path;
  EXPECT_TRUE(sawShm) << "the ranks did not connect over shm; this test proves nothing\n" << all << channels;
  std::set<std::string> after = shmEntries();
  std::vector<std::string> leaked, unrelated;
  for (const std::string& e : after) {
    if (before.count(e)) continue;
    bool ours = false;
    for (const std::string& h : hashes) ours |= e.find(h) != std::string::npos;
    (ours ? leaked : unrelated).push_back(e);
  }
  std::string list;
  for (const std::string& e : leaked) list += " /dev/shm/" + e;
  EXPECT_TRUE(leaked.empty()) << "segments left behind:" << list << "\n" << all;
  if (!unrelated.empty()) std::printf("(%zu new snccl segments of other communicators ignored)\n", unrelated.size());
  if (ending == Ending::kDestroy || ending == Ending::kAbort) {
    for (int r = 0; r < n; ++r) EXPECT_EQ(sh->r[r].code, ncclSuccess) << all;
  } else {
    std::printf("%s", all.c_str());
  }
  mp::freeShared(sh);
}

// The window between a receiver creating its ring file and its peer mapping (and
// unlinking) it: rank 1 is killed right after its first shm_open (SNCCL_FAULT_SHM_KILL),
// so no peer ever learns the name. The next job on the host removes the file, because
// its owner no longer runs.
TEST(Faults, ShmFileOfRankKilledBeforePeerMappedIsRemovedByNextJob) {
  const int n = 3;
  sntest::Watchdog dog(200, "shm window scenario");
  sntest::TempDir dir("snccl-mp");
  ASSERT_FALSE(dir.path.empty());
  auto job = [&](bool kill, const std::string& logs) {
    std::vector<std::pair<std::string, std::string>> env = {{"SNCCL_TIMEOUT", "5"},
                                                            {"NCCL_DEBUG", "INFO"},
                                                            {"NCCL_DEBUG_SUBSYS", "INIT,SHM"},
                                                            {"NCCL_DEBUG_FILE", logs + "/rank.%p.log"},
                                                            {"SNCCL_SHM_DISABLE", "0"},
                                                            {"SNCCL_FAULT_SHM_KILL", kill ? "2" : "0"}};
    return runScenario(n, env, [&](int rank, Shared* s) {
      ncclComm_t comm = initRank(s, rank, n);
      if (comm == nullptr) return;
      std::vector<float> in(4096, 1.0f), out(4096);
      record(s, rank, ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comm, nullptr));
      if (kill) {
        ncclCommAbort(comm);
      } else {
        ncclCommDestroy(comm);
      }
    });
  };
  std::string firstLogs = dir.path + "/first", secondLogs = dir.path + "/second";
  ASSERT_EQ(mkdir(firstLogs.c_str(), 0700), 0);
  ASSERT_EQ(mkdir(secondLogs.c_str(), 0700), 0);
  auto filesOf = [](const std::set<std::string>& hashes) {
    std::vector<std::string> out;
    for (const std::string& e : shmEntries())
      for (const std::string& h : hashes)
        if (e.find(h) != std::string::npos) out.push_back(e);
    return out;
  };

  Shared* sh = job(true, firstLogs);
  ASSERT_NE(sh, nullptr);
  std::string all = describe(sh, n);
  EXPECT_TRUE(WIFSIGNALED(sh->r[1].status) && WTERMSIG(sh->r[1].status) == SIGKILL) << "rank 1 was not killed\n" << all;
  mp::freeShared(sh);
  bool sawShm = false;
  std::string channels;
  std::set<std::string> hashes = loggedHashes(firstLogs, &sawShm, &channels);
  ASSERT_FALSE(hashes.empty()) << "no 'commHash' in the INFO logs of " << firstLogs;
  std::vector<std::string> left = filesOf(hashes);
  std::printf("after the killed job: %zu of its files in /dev/shm\n", left.size());

  sh = job(false, secondLogs);
  ASSERT_NE(sh, nullptr);
  all = describe(sh, n);
  for (int r = 0; r < n; ++r) EXPECT_EQ(sh->r[r].code, ncclSuccess) << all;
  mp::freeShared(sh);
  std::string list;
  for (const std::string& e : filesOf(hashes)) list += " /dev/shm/" + e;
  EXPECT_TRUE(list.empty()) << "files of the killed job left after the next job:" << list;
}

TEST(Faults, NoShmLeftAfterDestroy) { shmScenario(Ending::kDestroy); }
TEST(Faults, NoShmLeftAfterAbort) { shmScenario(Ending::kAbort); }
TEST(Faults, NoShmLeftAfterSigkillMidCollective) { shmScenario(Ending::kKillMidCollective); }
TEST(Faults, NoShmLeftAfterSigkillBeforeFirstOp) { shmScenario(Ending::kKillBeforeFirstOp); }

}  // namespace
