// The live traffic counters (SNCCL_STATS_DIR, src/core/comm_stats.h) and sn_top's reading
// of them (tools/traffic_stats.h), ranks as processes: the counts are exact for a ring
// AllReduce, the two ends of every pair agree, and a reader sees them grow while the job
// runs.
#include <signal.h>

#include <fstream>
#include <iterator>
#include <numeric>

#include "mp/fault_harness.h"
#include "support/run_tool.h"
#include "support/temp_dir.h"
#include "traffic_stats.h"

namespace {

using namespace faults;
namespace tr = snccl::traffic;

std::vector<tr::RankCounters> readDir(const std::string& dir) {
  std::vector<tr::RankCounters> out;
  for (const std::string& f : tr::counterFiles(dir)) {
    tr::RankCounters r;
    std::string err;
    EXPECT_TRUE(tr::readCounters(f, &r, &err)) << f << ": " << err;
    out.push_back(std::move(r));
  }
  return out;
}

uint64_t totalSent(const std::vector<tr::RankCounters>& ranks) {
  uint64_t s = 0;
  for (const auto& r : ranks)
    for (const auto& p : r.peers) s += p.sendBytes;
  return s;
}

// A ring AllReduce sends every byte of the buffer n-1 times in its reduce-scatter and n-1
// times in its all-gather, whatever the chunking: 2 (n-1) x bytes over all ranks.
TEST(Traffic, RingAllReduceCountsAreExactAndPairsAgree) {
  const int n = 3, iters = 12;
  const size_t count = 100003;  // odd: blocks of different sizes
  sntest::Watchdog dog(120, "traffic counters");
  sntest::TempDir dir("snccl-stats");
  Shared* sh = runScenario(
      n, {{"SNCCL_STATS_DIR", dir.path}, {"SNCCL_ALGO", "ring"}, {"SNCCL_SINGLE_COPY_BYTES", "0"}},
      [&](int rank, Shared* s) {
        ncclComm_t comm = initRank(s, rank, n);
        if (comm == nullptr) return;
        std::vector<float> in(count, 1.0f), out(count);
        ncclResult_t res = ncclSuccess;
        for (int it = 0; it < iters && res == ncclSuccess; ++it) {
          res = ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr);
          __atomic_store_n(&s->r[rank].iters, it + 1, __ATOMIC_RELEASE);
          // Half way, wait until the supervisor has read the counters live.
          if (it == iters / 2 - 1)
            for (double end = nowSec() + 30; !__atomic_load_n(&s->go, __ATOMIC_ACQUIRE) && nowSec() < end;)
              usleep(1000);
        }
        if (res == ncclSuccess && out[count - 1] != float(n)) res = ncclInternalError;
        record(s, rank, res);
        if (res == ncclSuccess) res = ncclCommDestroy(comm);
      },
      [&](Shared* s, const std::vector<pid_t>&) {
        waitForIters(s, n, iters / 2);
        s->measured = totalSent(readDir(dir.path));
        // The live view, while the job waits: one refresh of rates, every pair on shm.
        sntest::ToolRun live = sntest::runTool(std::string(SNCCL_SN_TOP) + " -i 0.2 -n 1 " + dir.path);
        EXPECT_EQ(live.status, 0) << live.out;
        EXPECT_NE(live.out.find("per second over 0.2 s"), std::string::npos) << live.out;
        EXPECT_NE(live.out.find("shm"), std::string::npos) << live.out;
        __atomic_store_n(&s->go, 1, __ATOMIC_RELEASE);
      });
  ASSERT_NE(sh, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(sh->r[r].code, ncclSuccess) << describe(sh, n);
  const uint64_t perOp = 2 * uint64_t(n - 1) * count * sizeof(float);
  EXPECT_EQ(sh->measured, perOp * (iters / 2)) << "read while the ranks waited half way";

  auto comms = tr::byComm(readDir(dir.path));
  ASSERT_EQ(comms.size(), 1u);
  const std::vector<tr::RankCounters>& ranks = comms.begin()->second;
  ASSERT_EQ(ranks.size(), size_t(n));
  EXPECT_EQ(totalSent(ranks), perOp * iters);
  for (const auto& r : ranks)
    for (const auto& p : r.peers) EXPECT_EQ(p.directBytes, 0u) << "no single copy here";
  for (const auto& a : ranks) {
    EXPECT_EQ(a.nranks, n);
    EXPECT_EQ(a.peers[size_t(a.rank)].sendBytes, 0u) << "nothing to itself";
    for (const auto& b : ranks) {
      if (a.rank == b.rank) continue;
      const auto& ab = a.peers[size_t(b.rank)];
      const auto& ba = b.peers[size_t(a.rank)];
      EXPECT_EQ(ab.sendBytes, ba.recvBytes) << a.rank << " -> " << b.rank;
      EXPECT_EQ(ab.sendMsgs, ba.recvMsgs) << a.rank << " -> " << b.rank;
      if (ab.sendBytes + ab.recvBytes > 0) {
        EXPECT_EQ(ab.link, "shm") << a.rank << " - " << b.rank;
      }
    }
  }
  const std::string table = tr::renderTable(ranks, nullptr, 0);
  EXPECT_NE(table.find("shm"), std::string::npos) << table;
  const std::string svg = tr::renderSvg(ranks);
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  size_t cells = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1)) ++cells;
  EXPECT_GE(cells, size_t(n * n)) << "a cell per pair of ranks, plus the links";
  std::printf("%s", table.c_str());

  // The tool on the files the run left: the same table, and the picture in a file.
  char hash[32];
  std::snprintf(hash, sizeof hash, "%016llx", (unsigned long long)ranks[0].hash);
  sntest::ToolRun once = sntest::runTool(std::string(SNCCL_SN_TOP) + " --once " + dir.path);
  EXPECT_EQ(once.status, 0) << once.out;
  EXPECT_NE(once.out.find(std::string("communicator ") + hash + " (3 of 3 ranks)"), std::string::npos) << once.out;
  EXPECT_NE(once.out.find(table), std::string::npos) << once.out;
  const std::string svgPath = dir.path + "/run.svg";
  sntest::ToolRun picture = sntest::runTool(std::string(SNCCL_SN_TOP) + " --svg " + svgPath + " " + dir.path);
  EXPECT_EQ(picture.status, 0) << picture.out;
  std::ifstream svgFile(svgPath);
  const std::string written((std::istreambuf_iterator<char>(svgFile)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written, svg);
  mp::freeShared(sh);
}

// Misuse: no directory, a directory without counter files, an unwritable picture.
TEST(Traffic, TopRefusesWhatItCannotShow) {
  sntest::TempDir dir("snccl-stats");
  EXPECT_EQ(sntest::runTool(SNCCL_SN_TOP).status, 2);
  EXPECT_EQ(sntest::runTool(std::string(SNCCL_SN_TOP) + " -i 0 " + dir.path).status, 2);
  EXPECT_EQ(sntest::runTool(std::string(SNCCL_SN_TOP) + " --help").status, 0);
  sntest::ToolRun empty = sntest::runTool(std::string(SNCCL_SN_TOP) + " --once " + dir.path);
  EXPECT_EQ(empty.status, 1) << empty.out;
  EXPECT_NE(empty.out.find("no counter file"), std::string::npos) << empty.out;
}

// The single-copy AllReduce moves no ring bytes for its data: each rank writes its block
// straight into every peer's output, (n-1) x bytes over all ranks, counted as direct. Its
// protocol's small messages are counted as messages.
TEST(Traffic, SingleCopyBytesCountAsDirect) {
  const int n = 3, iters = 5;
  const size_t count = 300001;
  sntest::Watchdog dog(120, "traffic counters, single copy");
  sntest::TempDir dir("snccl-stats");
  Shared* sh =
      runScenario(n, {{"SNCCL_STATS_DIR", dir.path}, {"SNCCL_SINGLE_COPY_BYTES", "1"}}, [&](int rank, Shared* s) {
        ncclComm_t comm = initRank(s, rank, n);
        if (comm == nullptr) return;
        void *in = nullptr, *out = nullptr;
        ncclResult_t res = ncclMemAlloc(&in, count * sizeof(float));
        if (res == ncclSuccess) res = ncclMemAlloc(&out, count * sizeof(float));
        for (size_t i = 0; res == ncclSuccess && i < count; ++i) static_cast<float*>(in)[i] = 1.0f;
        for (int it = 0; it < iters && res == ncclSuccess; ++it)
          res = ncclAllReduce(in, out, count, ncclFloat, ncclSum, comm, nullptr);
        if (res == ncclSuccess && static_cast<float*>(out)[count - 1] != float(n)) res = ncclInternalError;
        record(s, rank, res);
        if (res == ncclSuccess) res = ncclCommDestroy(comm);
        ncclMemFree(in);
        ncclMemFree(out);
      });
  ASSERT_NE(sh, nullptr);
  for (int r = 0; r < n; ++r) ASSERT_EQ(sh->r[r].code, ncclSuccess) << describe(sh, n);
  auto comms = tr::byComm(readDir(dir.path));
  ASSERT_EQ(comms.size(), 1u);
  uint64_t direct = 0;
  for (const auto& r : comms.begin()->second)
    for (const auto& p : r.peers) direct += p.directBytes;
  EXPECT_EQ(direct, uint64_t(n - 1) * count * sizeof(float) * iters);
  EXPECT_LT(totalSent(comms.begin()->second), uint64_t(count)) << "only the protocol's small messages on rings";
  // Those are counted too: per call, each rank tells each peer where its buffers are, its
  // verdict, and that it is done.
  for (const auto& r : comms.begin()->second)
    for (size_t p = 0; p < r.peers.size(); ++p)
      if (int(p) != r.rank) {
        EXPECT_EQ(r.peers[p].sendMsgs, uint64_t(3 * iters)) << "rank " << r.rank << " to " << p;
        EXPECT_EQ(r.peers[p].recvMsgs, uint64_t(3 * iters)) << "rank " << r.rank << " from " << p;
      }
  std::printf("%s", tr::renderTable(comms.begin()->second, nullptr, 0).c_str());
  mp::freeShared(sh);
}

TEST(Traffic, NotCounterFilesAreRefused) {
  sntest::TempDir dir("snccl-stats");
  const std::string path = dir.path + "/snccl-stats-0-r0.bin";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("not a counter file, but long enough to hold a header of the right size.............", f);
  std::fclose(f);
  tr::RankCounters r;
  std::string err;
  EXPECT_FALSE(tr::readCounters(path, &r, &err));
  EXPECT_FALSE(err.empty());
  EXPECT_FALSE(tr::readCounters(dir.path + "/missing", &r, &err));
}

}  // namespace
