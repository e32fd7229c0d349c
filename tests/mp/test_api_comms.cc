// Communicator life cycle through the API: InitRankConfig (blocking and non-blocking),
// InitRankScalable, Split, Shrink, Finalize/Destroy, and host streams (ordering, overlap,
// two streams on two communicators, asynchronous errors).
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <set>

#include "mp/mp_util.h"

namespace {

using mp::CommSet;
using mp::lastError;
using mp::Mentions;

// n threads join one communicator through ncclCommInitRankConfig.
void initWithConfig(int n, int blocking) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr);
  std::atomic<int> inProgress{0};
  mp::parallel(n, [&](int rank) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclResult_t r = ncclCommInitRankConfig(&comms[rank], n, id, rank, &cfg);
    if (blocking) {
      ASSERT_EQ(r, ncclSuccess) << lastError();
    } else {
      ASSERT_TRUE(r == ncclSuccess || r == ncclInProgress) << ncclGetErrorString(r) << ": " << lastError();
      if (r == ncclInProgress) inProgress++;
      ASSERT_NE(comms[rank], nullptr) << "a non-blocking init must hand out the communicator at once";
      ASSERT_EQ(mp::waitComm(comms[rank]), ncclSuccess) << lastError();
    }
    int count = 0, me = -1;
    EXPECT_EQ(ncclCommCount(comms[rank], &count), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(comms[rank], &me), ncclSuccess);
    EXPECT_EQ(count, n);
    EXPECT_EQ(me, rank);
    mp::allreduceCheck(comms[rank], rank + 1, n * (n + 1) / 2);
  });
  if (!blocking) std::printf("non-blocking init: %d of %d ranks saw ncclInProgress\n", inProgress.load(), n);
  for (ncclComm_t c : comms)
    if (c) {
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    }
}

TEST(Comms, InitRankConfigBlocking) { initWithConfig(3, 1); }

// Every rank asks for a different channel count through minCTAs/maxCTAs (1, 2, 3): the
// ranks agree on one range at init (the largest minimum where they cross), so all split
// each call alike and the results are right; a rank that used its own count would split
// differently from its peers and its messages would not match theirs. A split inherits
// the parent's range.
TEST(Comms, RanksAskingForDifferentChannelsAgree) {
  const int n = 3;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr), halves(n, nullptr);
  mp::parallel(n, [&](int rank) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.minCTAs = rank + 1;
    cfg.maxCTAs = rank + 1;
    ASSERT_EQ(ncclCommInitRankConfig(&comms[rank], n, id, rank, &cfg), ncclSuccess) << lastError();
    for (size_t count : {size_t(1), size_t(7), size_t(1031), size_t(1) << 18})
      mp::allreduceCheck(comms[rank], rank + 1, n * (n + 1) / 2, count, nullptr, "agreed channels");
    ASSERT_EQ(ncclCommSplit(comms[rank], rank % 2, rank, &halves[rank], nullptr), ncclSuccess) << lastError();
    const int64_t sum = rank % 2 == 0 ? 1 + 3 : 2;
    mp::allreduceCheck(halves[rank], rank + 1, sum, size_t(1) << 16, nullptr, "split");
  });
  for (auto* v : {&halves, &comms})
    for (ncclComm_t c : *v)
      if (c) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
}
TEST(Comms, InitRankConfigNonBlocking) { initWithConfig(4, 0); }

// The CPUs the calling thread may run on.
std::vector<int> threadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// More ranks on a node than CPUs: online CPUs + 1 rank threads (4 on 2 CPUs), unbound.
// With SNCCL_PIN_RANKS=1 (the ctest twin test_api_pin_on) the thread that runs a rank's
// operations ends pinned to one CPU, on 2 CPUs recursive-doubling partners apart: ranks 0
// and 3 on the first, 1 and 2 on the second (topology/rank_pinning.h). By default (off)
// every mask stays as it was.
TEST(Comms, OversubscribedRanksArePinned) {
  const std::vector<int> cpus = threadCpus();
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 2 || online > 7 || long(cpus.size()) != online)
    GTEST_SKIP() << "needs 2-7 online CPUs, all usable by this thread (" << online << " online, " << cpus.size()
                 << " usable): the test runs one rank more than CPUs";
  const char* env = std::getenv("SNCCL_PIN_RANKS");
  const bool on = env != nullptr && std::string(env) == "1";
  const int n = online == 2 ? 4 : int(online) + 1;
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr);
  std::vector<std::vector<int>> before(n), after(n);
  mp::parallel(n, [&](int rank) {
    ASSERT_EQ(ncclCommInitRank(&comms[rank], n, id, rank), ncclSuccess) << lastError();
    before[rank] = threadCpus();  // init alone moves nothing: the thread running operations is placed
    mp::allreduceCheck(comms[rank], rank + 1, n * (n + 1) / 2);
    mp::allreduceCheck(comms[rank], rank + 1, n * (n + 1) / 2, 3, nullptr, "second call");
    after[rank] = threadCpus();
  });
  std::vector<int> used;
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(before[r], cpus) << "rank " << r;
    if (!on) {
      EXPECT_EQ(after[r], cpus) << "rank " << r << " was moved with pinning off";
      continue;
    }
    ASSERT_EQ(after[r].size(), 1u) << "rank " << r << " is not pinned to one CPU";
    used.push_back(after[r][0]);
  }
  if (on) {
    if (online == 2) {
      EXPECT_EQ(used, (std::vector<int>{cpus[0], cpus[1], cpus[1], cpus[0]}));
    }
    EXPECT_EQ(std::set<int>(used.begin(), used.end()).size(), size_t(online)) << "a CPU got no rank";
  }
  for (ncclComm_t c : comms)
    if (c) {
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    }
}


TEST(Comms, InitRankBadArguments) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclCommInitRank"));
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "rank 2"));
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(nullptr, 1, id, 0), ncclInvalidArgument);
  ncclUniqueId junk;
  std::memset(&junk, 0x3c, sizeof junk);
  EXPECT_EQ(ncclCommInitRank(&comm, 1, junk, 0), ncclInvalidArgument);
  EXPECT_EQ(comm, nullptr);
  EXPECT_EQ(ncclCommInitAll(nullptr, 2, nullptr), ncclInvalidArgument);
  ncclComm_t one = nullptr;
  EXPECT_EQ(ncclCommInitAll(&one, 0, nullptr), ncclInvalidArgument);
  // The id is still good for a proper 1-rank communicator.
  ASSERT_EQ(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess) << lastError();
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// ncclCommInitAll starts a thread per rank: past its documented cap (512) it fails at
// once instead of starting thousands. Run in a child: without the cap the call would
// take the machine's threads for minutes.
TEST(Comms, InitAllAboveTheCapFails) {
  std::string how;
  int rc = mp::runChild(
      [] {
        std::vector<ncclComm_t> comms(100000, nullptr);
        if (ncclCommInitAll(comms.data(), 100000, nullptr) != ncclInvalidArgument) return 1;
        if (!Mentions(ncclGetLastError(nullptr), "512")) return 2;
        if (ncclCommInitAll(comms.data(), 513, nullptr) != ncclInvalidArgument) return 3;
        for (ncclComm_t c : comms)
          if (c != nullptr) return 4;
        return 0;
      },
      60, &how);
  EXPECT_EQ(rc, 0) << how;
}

TEST(Comms, InitRankScalable) {
  const int n = 5;
  ncclUniqueId ids[2];
  ASSERT_EQ(ncclGetUniqueId(&ids[0]), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&ids[1]), ncclSuccess);
  std::vector<ncclComm_t> comms(n, nullptr);
  mp::parallel(n, [&](int rank) {
    ASSERT_EQ(ncclCommInitRankScalable(&comms[rank], n, rank, 2, ids, nullptr), ncclSuccess) << lastError();
    mp::allreduceCheck(comms[rank], rank + 1, n * (n + 1) / 2);
    std::vector<int> all = mp::allgatherInts(comms[rank], rank * 3);
    for (int r = 0; r < int(all.size()); ++r) EXPECT_EQ(all[r], r * 3);
  });
  for (ncclComm_t c : comms)
    if (c) {
      EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    }
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRankScalable(&c, 1, 0, 0, ids, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRankScalable(&c, 1, 0, 1, nullptr, nullptr), ncclInvalidArgument);
}

// 7 ranks: colors 7 (ranks 0,3,6), 13 (ranks 1,4) and NOCOLOR (ranks 2,5); keys reverse
// the order. Children compute over their members only, parent stays correct throughout.
TEST(Comms, SplitColorsKeysAndNoColor) {
  const int n = 7;
  CommSet parent(n);
  ASSERT_TRUE(parent.ok());
  auto colorOf = [](int r) { return r % 3 == 0 ? 7 : r % 3 == 1 ? 13 : NCCL_SPLIT_NOCOLOR; };
  mp::parallel(n, [&](int rank) {
    ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
    ASSERT_EQ(ncclCommSplit(parent[rank], colorOf(rank), n - rank, &child, nullptr), ncclSuccess) << lastError();
    std::vector<int> members;  // parent ranks of the child, in child-rank order
    for (int r = n - 1; r >= 0; --r)
      if (colorOf(r) == colorOf(rank)) members.push_back(r);
    if (colorOf(rank) == NCCL_SPLIT_NOCOLOR) {
      EXPECT_EQ(child, nullptr);
      mp::allreduceCheck(parent[rank], rank, n * (n - 1) / 2, 1031, nullptr, "parent");
      mp::allreduceCheck(parent[rank], 1, n, 17, nullptr, "parent again");
      return;
    }
    ASSERT_NE(child, nullptr);
    int count = 0, me = -1;
    ASSERT_EQ(ncclCommCount(child, &count), ncclSuccess);
    ASSERT_EQ(ncclCommUserRank(child, &me), ncclSuccess);
    EXPECT_EQ(count, int(members.size()));
    EXPECT_EQ(me, int(std::find(members.begin(), members.end(), rank) - members.begin())) << "key order";
    int64_t childSum = 0;
    for (int m : members) childSum += m + 1;
    mp::allreduceCheck(child, rank + 1, childSum, 1031, nullptr, "child");
    mp::allreduceCheck(parent[rank], rank, n * (n - 1) / 2, 1031, nullptr, "parent");
    EXPECT_EQ(mp::allgatherInts(child, rank), members);
    mp::allreduceCheck(parent[rank], 1, n, 17, nullptr, "parent again");
    EXPECT_EQ(ncclCommDestroy(child), ncclSuccess);
  });
}

// Equal keys keep the parent's order; a child can be split again; a non-blocking child.
TEST(Comms, SplitEqualKeysNestedAndNonBlocking) {
  const int n = 6;
  CommSet parent(n);
  ASSERT_TRUE(parent.ok());
  mp::parallel(n, [&](int rank) {
    ncclComm_t half = nullptr;
    ASSERT_EQ(ncclCommSplit(parent[rank], rank % 2, 0, &half, nullptr), ncclSuccess) << lastError();
    std::vector<int> expect;
    for (int r = rank % 2; r < n; r += 2) expect.push_back(r);
    EXPECT_EQ(mp::allgatherInts(half, rank), expect);
    int hr = -1;
    ASSERT_EQ(ncclCommUserRank(half, &hr), ncclSuccess);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t single = nullptr;
    ncclResult_t r = ncclCommSplit(half, hr, 0, &single, &cfg);  // every rank alone
    ASSERT_TRUE(r == ncclSuccess || r == ncclInProgress) << lastError();
    ASSERT_NE(single, nullptr);
    ASSERT_EQ(mp::waitComm(single), ncclSuccess) << lastError();
    int cnt = 0;
    EXPECT_EQ(ncclCommCount(single, &cnt), ncclSuccess);
    EXPECT_EQ(cnt, 1);
    mp::allreduceCheck(single, rank, rank, 100, nullptr, "single");
    mp::allreduceCheck(half, 1, int64_t(expect.size()), 100, nullptr, "half");
    EXPECT_EQ(ncclCommDestroy(single), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(half), ncclSuccess);
    mp::allreduceCheck(parent[rank], 2, 2 * n, 100, nullptr, "parent");
  });
}

// The same over processes (shared-memory transport, bootstrap split between processes).
TEST(Comms, SplitAcrossProcesses) {
  sntest::runRanks(sntest::Mode::kProcesses, 5, [](ncclComm_t comm, int rank, int n) {
    ncclComm_t child = nullptr;
    if (ncclCommSplit(comm, rank % 2 == 0 ? 3 : 1, -rank, &child, nullptr) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: split: %s\n", rank, lastError().c_str());
      return false;
    }
    std::vector<int> members;
    for (int r = n - 1; r >= 0; --r)
      if (r % 2 == rank % 2) members.push_back(r);
    int64_t sum = 0;
    for (int m : members) sum += m;
    bool ok = mp::allreduceCheck(child, rank, sum, 300000, nullptr, "child") && mp::allgatherInts(child, rank) == members &&
              mp::allreduceCheck(comm, 1, n, 1000, nullptr, "parent");
    ncclCommDestroy(child);
    return ok;
  });
}

TEST(Comms, SplitBadArguments) {
  CommSet parent(1);
  ASSERT_TRUE(parent.ok());
  ncclComm_t child = nullptr;
  EXPECT_EQ(ncclCommSplit(nullptr, 0, 0, &child, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommSplit(parent[0], 0, 0, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ncclCommSplit(parent[0], -5, 0, &child, nullptr), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclCommSplit"));
  EXPECT_TRUE(mp::allreduceCheck(parent[0], 9, 9));
}

// Rank 2 of 4 is excluded (and does not call shrink); survivors renumber 0,1,2.
TEST(Comms, ShrinkExcludesARank) {
  const int n = 4;
  CommSet parent(n);
  ASSERT_TRUE(parent.ok());
  mp::parallel(n, [&](int rank) {
    if (rank == 2) return;
    int exclude[1] = {2};
    ncclComm_t small = nullptr;
    ASSERT_EQ(ncclCommShrink(parent[rank], exclude, 1, &small, nullptr, NCCL_SHRINK_DEFAULT), ncclSuccess)
        << lastError();
    ASSERT_NE(small, nullptr);
    int count = 0, me = -1;
    EXPECT_EQ(ncclCommCount(small, &count), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(small, &me), ncclSuccess);
    EXPECT_EQ(count, 3);
    EXPECT_EQ(me, rank < 2 ? rank : rank - 1);
    mp::allreduceCheck(small, rank, 0 + 1 + 3, 5000, nullptr, "shrunk");
    EXPECT_EQ(mp::allgatherInts(small, rank), (std::vector<int>{0, 1, 3}));
    EXPECT_EQ(ncclCommDestroy(small), ncclSuccess);
  });
  // The parent is untouched by a default shrink.
  mp::parallel(n, [&](int rank) { mp::allreduceCheck(parent[rank], rank, 6, 100, nullptr, "parent"); });
  int bad[1] = {4};
  ncclComm_t small = nullptr;
  EXPECT_EQ(ncclCommShrink(parent[0], bad, 1, &small, nullptr, 0), ncclInvalidArgument);
  EXPECT_EQ(ncclCommShrink(parent[0], nullptr, 1, &small, nullptr, 0), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclCommShrink"));
}

// Finalize flushes the queued work; afterwards the comm accepts no collective; Destroy frees.
TEST(Comms, FinalizeThenDestroy) {
  const int n = 3;
  std::vector<ncclComm_t> comms(n, nullptr);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess);
  mp::parallel(n, [&](int rank) {
    sncclStream_t s = nullptr;
    ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
    const int ops = 12;
    std::vector<std::vector<int64_t>> bufs(ops + 1, std::vector<int64_t>(4096, 0));
    std::fill(bufs[0].begin(), bufs[0].end(), rank + 1);
    for (int k = 0; k < ops; ++k)
      ASSERT_EQ(ncclAllReduce(bufs[k].data(), bufs[k + 1].data(), 4096, ncclInt64, ncclSum, comms[rank],
                              SNCCL_STREAM(s)),
                ncclSuccess);
    ASSERT_EQ(mp::settle(ncclCommFinalize(comms[rank]), comms[rank]), ncclSuccess) << lastError();
    int64_t expect = n * (n + 1) / 2;
    for (int k = 1; k < ops; ++k) expect *= n;
    EXPECT_EQ(bufs[ops][4095], expect) << "ncclCommFinalize returned before the queued operations completed";
    std::vector<int64_t> x(8, 1), y(8);
    EXPECT_NE(ncclAllReduce(x.data(), y.data(), 8, ncclInt64, ncclSum, comms[rank], nullptr), ncclSuccess)
        << "collective on a finalized communicator";
    EXPECT_EQ(sncclStreamSynchronize(s), ncclSuccess) << lastError();
    EXPECT_EQ(sncclStreamDestroy(s), ncclSuccess);
    EXPECT_EQ(ncclCommDestroy(comms[rank]), ncclSuccess);
  });
}

// ---- abort from another thread (what a framework watchdog does) ----

// Rank 1 never joins the allreduce; a second thread of rank 0 aborts the communicator and
// the blocked call returns an error instead of waiting for SNCCL_TIMEOUT.
TEST(Comms, AbortFromAnotherThreadReleasesABlockedCollective) {
  CommSet comms(2);
  ASSERT_TRUE(comms.ok());
  sntest::Watchdog dog(60, "abort from a watchdog thread");
  std::atomic<int> result{-1};
  std::atomic<double> returnedAt{0};
  std::thread worker([&] {
    std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
    result = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comms[0], nullptr);
    returnedAt = mp::nowSec();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  double t0 = mp::nowSec();
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  std::printf("ncclCommAbort took %.3f s\n", mp::nowSec() - t0);
  comms.release(0);
  worker.join();
  EXPECT_NE(result.load(), int(ncclSuccess));
  EXPECT_NE(result.load(), -1);
  std::printf("the blocked allreduce returned %.3f s after the abort started\n", returnedAt.load() - t0);
}

// Work queued on a host stream whose peer never comes: abort releases it and
// sncclStreamSynchronize reports the error.
TEST(Comms, AbortReleasesQueuedStreamWork) {
  CommSet comms(2);
  ASSERT_TRUE(comms.ok());
  sntest::Watchdog dog(60, "abort with queued stream work");
  sncclStream_t s;
  ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
  std::vector<float> in(1 << 16, 1.0f), out(1 << 16);
  for (int k = 0; k < 3; ++k)
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comms[0], SNCCL_STREAM(s)),
              ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(sncclStreamQuery(s), ncclInProgress);
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  comms.release(0);
  EXPECT_NE(sncclStreamSynchronize(s), ncclSuccess);
  EXPECT_EQ(sncclStreamDestroy(s), ncclSuccess);
}

// A non-blocking init whose peer never comes can be aborted.
TEST(Comms, AbortDuringNonBlockingInit) {
  sntest::Watchdog dog(60, "abort during a non-blocking init");
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(ncclCommInitRankConfig(&comm, 2, id, 0, &cfg), ncclInProgress) << lastError();
  ASSERT_NE(comm, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ncclResult_t state = ncclSuccess;
  EXPECT_EQ(ncclCommGetAsyncError(comm, &state), ncclSuccess);
  EXPECT_EQ(state, ncclInProgress);
  double t0 = mp::nowSec();
  EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  std::printf("ncclCommAbort during init took %.3f s\n", mp::nowSec() - t0);
}

// ---- host streams ----

// 20 operations on one stream, each reading the previous one's output: only correct in order.
TEST(Streams, ManyOpsOnOneStreamRunInOrder) {
  const int n = 4, ops = 20;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  mp::parallel(n, [&](int rank) {
    sncclStream_t s;
    ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
    const size_t count = 20000;
    std::vector<std::vector<int64_t>> bufs(ops + 1, std::vector<int64_t>(count, 0));
    for (size_t i = 0; i < count; ++i) bufs[0][i] = (rank + 1) * int64_t(1 + i % 3);
    for (int k = 0; k < ops; ++k)
      ASSERT_EQ(ncclAllReduce(bufs[k].data(), bufs[k + 1].data(), count, ncclInt64, ncclSum, comms[rank],
                              SNCCL_STREAM(s)),
                ncclSuccess);
    ASSERT_EQ(sncclStreamSynchronize(s), ncclSuccess) << lastError();
    EXPECT_EQ(sncclStreamQuery(s), ncclSuccess);
    int64_t base = n * (n + 1) / 2;
    for (int k = 1; k <= ops; ++k) {
      for (size_t i = 0; i < count; i += 997) ASSERT_EQ(bufs[k][i], base * int64_t(1 + i % 3)) << "op " << k;
      base *= n;
    }
    EXPECT_EQ(sncclStreamDestroy(s), ncclSuccess);
  });
}

// A stream call returns before completion: rank 1 joins only after rank 0's call returned,
// so a blocking implementation would deadlock (the watchdog catches it).
TEST(Streams, StreamCallReturnsBeforeCompletion) {
  CommSet comms(2);
  ASSERT_TRUE(comms.ok());
  std::atomic<bool> issued{false};
  mp::parallel(2, [&](int rank) {
    std::vector<float> in(100000, float(rank + 1)), out(100000, 0.0f);
    if (rank == 0) {
      sncclStream_t s;
      ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
      ASSERT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comms[0], SNCCL_STREAM(s)),
                ncclSuccess);
      ncclResult_t q = sncclStreamQuery(s);
      EXPECT_EQ(q, ncclInProgress) << "the peer has not even called yet";
      issued = true;
      ASSERT_EQ(sncclStreamSynchronize(s), ncclSuccess) << lastError();
      EXPECT_EQ(sncclStreamDestroy(s), ncclSuccess);
    } else {
      double deadline = mp::nowSec() + 30;
      while (!issued && mp::nowSec() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_TRUE(issued.load()) << "rank 0's stream call did not return while its peer was absent";
      ASSERT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, ncclSum, comms[1], nullptr), ncclSuccess);
    }
    for (float v : out) ASSERT_EQ(v, 3.0f);
  });
}

// Two communicators, one stream each; rank 0 issues A then B, the others B then A. Streams
// are independent, so this must not deadlock, and results are right.
TEST(Streams, TwoStreamsOnTwoComms) {
  const int n = 3;
  CommSet a(n), b(n);
  ASSERT_TRUE(a.ok() && b.ok());
  mp::parallel(n, [&](int rank) {
    sncclStream_t sa, sb;
    ASSERT_EQ(sncclStreamCreate(&sa), ncclSuccess);
    ASSERT_EQ(sncclStreamCreate(&sb), ncclSuccess);
    const int rounds = 6;
    const size_t count = 50000;
    std::vector<std::vector<float>> ina(rounds, std::vector<float>(count, float(rank + 1)));
    std::vector<std::vector<int32_t>> inb(rounds, std::vector<int32_t>(count, rank + 10));
    std::vector<std::vector<float>> outa(rounds, std::vector<float>(count));
    std::vector<std::vector<int32_t>> outb(rounds, std::vector<int32_t>(count * n));
    auto issueA = [&](int k) {
      return ncclAllReduce(ina[k].data(), outa[k].data(), count, ncclFloat, ncclMax, a[rank], SNCCL_STREAM(sa));
    };
    auto issueB = [&](int k) {
      return ncclAllGather(inb[k].data(), outb[k].data(), count, ncclInt32, b[rank], SNCCL_STREAM(sb));
    };
    for (int k = 0; k < rounds; ++k) {
      if (rank == 0) {
        ASSERT_EQ(issueA(k), ncclSuccess);
        ASSERT_EQ(issueB(k), ncclSuccess);
      } else {
        ASSERT_EQ(issueB(k), ncclSuccess);
        ASSERT_EQ(issueA(k), ncclSuccess);
      }
    }
    ASSERT_EQ(sncclStreamSynchronize(sb), ncclSuccess) << lastError();
    ASSERT_EQ(sncclStreamSynchronize(sa), ncclSuccess) << lastError();
    for (int k = 0; k < rounds; ++k) {
      ASSERT_EQ(outa[k][count - 1], float(n));
      for (int r = 0; r < n; ++r) ASSERT_EQ(outb[k][size_t(r) * count + 7], r + 10);
    }
    EXPECT_EQ(sncclStreamDestroy(sa), ncclSuccess);
    EXPECT_EQ(sncclStreamDestroy(sb), ncclSuccess);
  });
}

// Blocking and stream operations on one communicator keep issue order.
TEST(Streams, BlockingCallAfterStreamCallsKeepsOrder) {
  const int n = 3;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  mp::parallel(n, [&](int rank) {
    sncclStream_t s;
    ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
    std::vector<int64_t> x(30000, rank + 1), y(30000), z(30000);
    ASSERT_EQ(ncclAllReduce(x.data(), y.data(), x.size(), ncclInt64, ncclSum, comms[rank], SNCCL_STREAM(s)),
              ncclSuccess);
    ASSERT_EQ(ncclAllReduce(x.data(), z.data(), x.size(), ncclInt64, ncclProd, comms[rank], nullptr), ncclSuccess)
        << lastError();
    ASSERT_EQ(sncclStreamSynchronize(s), ncclSuccess) << lastError();
    EXPECT_EQ(y[0], 6);
    EXPECT_EQ(z[29999], 6);
    EXPECT_EQ(sncclStreamDestroy(s), ncclSuccess);
  });
}

// Ranks pass different counts to an operation queued on a stream: the error surfaces from
// sncclStreamSynchronize and ncclCommGetAsyncError, and the comm refuses further work.
TEST(Streams, AsyncErrorsAreReported) {
  const int n = 2;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  std::vector<ncclResult_t> syncRes(n), asyncRes(n), after(n);
  mp::parallel(n, [&](int rank) {
    sncclStream_t s;
    ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
    size_t count = rank == 0 ? 4096 : 8192;
    std::vector<float> in(8192, 1.0f), out(8192);
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comms[rank], SNCCL_STREAM(s)),
              ncclSuccess);
    syncRes[rank] = sncclStreamSynchronize(s);
    EXPECT_EQ(ncclCommGetAsyncError(comms[rank], &asyncRes[rank]), ncclSuccess);
    after[rank] = ncclAllReduce(in.data(), out.data(), 16, ncclFloat, ncclSum, comms[rank], nullptr);
    EXPECT_EQ(sncclStreamSynchronize(s), ncclSuccess) << "the error is reported once";
    EXPECT_EQ(sncclStreamDestroy(s), ncclSuccess);
  });
  bool sawInvalidUsage = false;
  for (int r = 0; r < n; ++r) {
    EXPECT_NE(syncRes[r], ncclSuccess) << "rank " << r;
    EXPECT_NE(asyncRes[r], ncclSuccess) << "rank " << r;
    EXPECT_NE(after[r], ncclSuccess) << "rank " << r;
    sawInvalidUsage |= syncRes[r] == ncclInvalidUsage;
  }
  EXPECT_TRUE(sawInvalidUsage) << "a count mismatch should be ncclInvalidUsage on the rank that detects it";
}

TEST(Streams, DestroyWaitsForQueuedWork) {
  const int n = 2;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  mp::parallel(n, [&](int rank) {
    sncclStream_t s;
    ASSERT_EQ(sncclStreamCreate(&s), ncclSuccess);
    std::vector<int32_t> in(200000, rank + 1), out(200000, 0);
    for (int k = 0; k < 5; ++k)
      ASSERT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, ncclSum, comms[rank], SNCCL_STREAM(s)),
                ncclSuccess);
    ASSERT_EQ(sncclStreamDestroy(s), ncclSuccess);
    EXPECT_EQ(out[199999], 3);
  });
  EXPECT_EQ(sncclStreamCreate(nullptr), ncclInvalidArgument);
}

}  // namespace
