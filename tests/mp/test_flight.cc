// The flight recorder and sn_doctor against real faults, ranks as processes: each
// scenario writes its dumps into a fresh SNCCL_FLIGHT_DIR, and sn_doctor's reasoning
// (tools/flight_doctor.h) must name the right rank and collective from them alone: a
// killed rank, a stopped rank, a mismatched call, a slow rank; a healthy job dumped on
// request or on SNCCL_FLIGHT_SIGNAL shows no fault. The cut link is in
// tests/net/test_net_netns.cc (it needs network namespaces).
#include <dirent.h>
#include <signal.h>

#include <fstream>

#include "flight_doctor.h"
#include "mp/fault_harness.h"
#include "support/run_tool.h"
#include "support/temp_dir.h"

namespace {

using namespace faults;
using snccl::doctor::Diagnosis;
using snccl::doctor::Dump;
using snccl::doctor::Verdict;

constexpr size_t kCount = 1 << 16;  // floats per AllReduce

// Every rank loops over AllReduces until one fails (or `iters` are done); `before(it)` runs
// before each call (the victim's fault). Aborts at the end, as a job that gives up does.
void loopRank(int rank, Shared* sh, int n, int iters, const std::function<void(int)>& before) {
  ncclComm_t comm = initRank(sh, rank, n);
  if (comm == nullptr) return;
  std::vector<float> in(kCount, float(rank)), out(kCount);
  ncclResult_t res = ncclSuccess;
  for (int it = 0; it < iters; ++it) {
    if (before) before(it);
    res = ncclAllReduce(in.data(), out.data(), kCount, ncclFloat, ncclSum, comm, nullptr);
    if (res != ncclSuccess) break;
    __atomic_store_n(&sh->r[rank].iters, it + 1, __ATOMIC_RELEASE);
  }
  record(sh, rank, res);
  ncclCommAbort(comm);
}

std::vector<Dump> readDumps(const std::string& dir) {
  std::vector<Dump> out;
  for (const std::string& f : snccl::doctor::dumpFiles(dir)) {
    Dump dump;
    std::string err;
    EXPECT_TRUE(snccl::doctor::readDump(f, &dump, &err)) << f << ": " << err;
    out.push_back(std::move(dump));
  }
  return out;
}

// The diagnosis of the one communicator the scenario used, printed for the log.
Diagnosis diagnoseDir(const std::string& dir, size_t expectDumps, const Shared* sh, int n) {
  std::vector<Dump> dumps = readDumps(dir);
  EXPECT_EQ(dumps.size(), expectDumps) << describe(sh, n);
  auto groups = snccl::doctor::byComm(dumps);
  EXPECT_EQ(groups.size(), 1u) << "one communicator";
  if (groups.empty()) return {};
  Diagnosis d = snccl::doctor::diagnose(groups.begin()->second);
  std::printf("sn_doctor: %s: %s\n", snccl::doctor::verdictName(d.verdict), d.summary.c_str());
  for (const std::string& line : d.details) std::printf("  %s\n", line.c_str());
  // The tool itself says the same, with the exit status its usage promises.
  sntest::ToolRun tool = sntest::runTool(std::string(SNCCL_SN_DOCTOR) + " " + dir);
  EXPECT_EQ(tool.status, d.verdict == Verdict::kNoFault ? 0 : 1) << tool.out;
  EXPECT_NE(tool.out.find(std::string("verdict: ") + snccl::doctor::verdictName(d.verdict)), std::string::npos)
      << tool.out;
  EXPECT_NE(tool.out.find(d.summary), std::string::npos) << tool.out;
  return d;
}

std::vector<std::pair<std::string, std::string>> flightEnv(const sntest::TempDir& dir, const char* timeout) {
  return {{"SNCCL_FLIGHT_DIR", dir.path}, {"SNCCL_TIMEOUT", timeout}};
}

// Without a dump to read, or without an argument, the tool says so with status 2.
TEST(Flight, DoctorWithoutDumpsExitsWithTwo) {
  sntest::TempDir dir("snccl-flight");
  sntest::ToolRun empty = sntest::runTool(std::string(SNCCL_SN_DOCTOR) + " " + dir.path);
  EXPECT_EQ(empty.status, 2) << empty.out;
  EXPECT_NE(empty.out.find("no flight recorder dump"), std::string::npos) << empty.out;
  std::ofstream(dir.path + "/snccl-flight-0-r0.txt") << "not a dump\n";
  sntest::ToolRun bad = sntest::runTool(std::string(SNCCL_SN_DOCTOR) + " " + dir.path);
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("snccl-flight-0-r0.txt"), std::string::npos) << "names the file it refused: " << bad.out;
  EXPECT_EQ(sntest::runTool(SNCCL_SN_DOCTOR).status, 2);
  EXPECT_EQ(sntest::runTool(std::string(SNCCL_SN_DOCTOR) + " --help").status, 0);
}

TEST(Flight, KilledRankIsNamedAsDead) {
  const int n = 4, victim = 2;
  sntest::Watchdog dog(180, "flight: kill");
  sntest::TempDir dir("snccl-flight");
  Shared* sh = runScenario(n, flightEnv(dir, "20"), [&](int r, Shared* s) {
    loopRank(r, s, n, 100000, [&](int it) {
      if (r == victim && it == 5) raise(SIGKILL);
    });
  });
  ASSERT_NE(sh, nullptr);
  Diagnosis d = diagnoseDir(dir.path, n - 1, sh, n);
  EXPECT_EQ(d.verdict, Verdict::kRankDied) << d.summary;
  EXPECT_EQ(d.rank, victim) << d.summary;
  EXPECT_EQ(d.seq, 5) << d.summary;
  mp::freeShared(sh);
}

TEST(Flight, StoppedRankIsNamedAsStopped) {
  const int n = 3, victim = 1;
  sntest::Watchdog dog(180, "flight: stop");
  sntest::TempDir dir("snccl-flight");
  Shared* sh = runScenario(
      n, flightEnv(dir, "3"), [&](int r, Shared* s) { loopRank(r, s, n, 100000, nullptr); },
      [&](Shared* s, const std::vector<pid_t>& pids) {
        waitForIters(s, n, 3);
        stopUntilSurvivorsDone(s, n, victim, pids);
      });
  ASSERT_NE(sh, nullptr);
  Diagnosis d = diagnoseDir(dir.path, n - 1, sh, n);
  EXPECT_EQ(d.verdict, Verdict::kRankStopped) << d.summary;
  EXPECT_EQ(d.rank, victim) << d.summary;
  EXPECT_GE(d.seq, 3) << d.summary;
  mp::freeShared(sh);
}

// Rank 1 calls AllGather where the others call AllReduce, at collective #2; the doctor
// finds it from the records, whatever each rank's error says.
TEST(Flight, MismatchedCallIsNamed) {
  const int n = 3;
  sntest::Watchdog dog(120, "flight: mismatch");
  sntest::TempDir dir("snccl-flight");
  Shared* sh = runScenario(n, flightEnv(dir, "20"), [&](int rank, Shared* s) {
    ncclComm_t comm = initRank(s, rank, n);
    if (comm == nullptr) return;
    std::vector<float> in(kCount * n, 1.0f), out(kCount * n);
    ncclResult_t res = ncclSuccess;
    for (int it = 0; it < 3 && res == ncclSuccess; ++it) {
      res = rank == 1 && it == 2 ? ncclAllGather(in.data(), out.data(), kCount, ncclFloat, comm, nullptr)
                                 : ncclAllReduce(in.data(), out.data(), kCount, ncclFloat, ncclSum, comm, nullptr);
    }
    record(s, rank, res);
    ncclCommAbort(comm);
  });
  ASSERT_NE(sh, nullptr);
  Diagnosis d = diagnoseDir(dir.path, n, sh, n);
  EXPECT_EQ(d.verdict, Verdict::kMismatch) << d.summary;
  EXPECT_EQ(d.rank, 1) << d.summary;
  EXPECT_EQ(d.seq, 2) << d.summary;
  EXPECT_NE(d.summary.find("AllGather"), std::string::npos) << d.summary;
  mp::freeShared(sh);
}

// Rank 2 sleeps before collective #4 for longer than SNCCL_TIMEOUT: the others time out
// waiting on it (or on each other). Rank 2 is alive and dumps too: it reached #4 late, or
// its communicator failed before it got there.
TEST(Flight, SlowRankIsNamed) {
  const int n = 3, slow = 2;
  sntest::Watchdog dog(120, "flight: slow rank");
  sntest::TempDir dir("snccl-flight");
  Shared* sh = runScenario(n, flightEnv(dir, "2"), [&](int r, Shared* s) {
    loopRank(r, s, n, 6, [&](int it) {
      if (r == slow && it == 4) usleep(4500 * 1000);
    });
  });
  ASSERT_NE(sh, nullptr);
  Diagnosis d = diagnoseDir(dir.path, n, sh, n);
  EXPECT_EQ(d.verdict, Verdict::kSlowRank) << d.summary;
  EXPECT_EQ(d.rank, slow) << d.summary;
  EXPECT_EQ(d.seq, 4) << d.summary;
  mp::freeShared(sh);
}

// A healthy job: dumps on request (sncclCommDumpFlightRecorder) and on SNCCL_FLIGHT_SIGNAL
// hold the operations as they ran, and the doctor finds no fault.
TEST(Flight, HealthyJobDumpsOnRequestAndOnSignal) {
  const int n = 3;
  sntest::Watchdog dog(120, "flight: healthy");
  sntest::TempDir dir("snccl-flight");
  auto env = flightEnv(dir, "20");
  env.push_back({"SNCCL_FLIGHT_SIGNAL", std::to_string(SIGUSR2)});
  env.push_back({"SNCCL_FLIGHT_RECORDER", "16"});
  Shared* sh = runScenario(
      n, env,
      [&](int rank, Shared* s) {
        ncclComm_t comm = initRank(s, rank, n);
        if (comm == nullptr) return;
        std::vector<float> in(kCount, 1.0f), out(kCount);
        ncclResult_t res = ncclSuccess;
        for (int it = 0; it < 40 && res == ncclSuccess; ++it) {
          res = ncclAllReduce(in.data(), out.data(), it % 2 ? kCount : 7, ncclFloat, ncclSum, comm, nullptr);
          if (res == ncclSuccess) res = ncclBroadcast(in.data(), out.data(), 100, ncclFloat, 1, comm, nullptr);
          __atomic_store_n(&s->r[rank].iters, it + 1, __ATOMIC_RELEASE);
        }
        // The signal's dumps: the supervisor sent it after 10 iterations; wait for the files.
        double end = nowSec() + 10;
        auto files = [&] {
          int k = 0;
          if (DIR* d = opendir(dir.path.c_str())) {
            while (dirent* e = readdir(d)) k += std::string(e->d_name).rfind("snccl-flight-", 0) == 0;
            closedir(d);
          }
          return k;
        };
        while (files() < n && nowSec() < end) usleep(2000);
        if (files() < n) res = ncclSystemError;
        // Then the request: overwrites this rank's file with every op done.
        if (res == ncclSuccess) res = sncclCommDumpFlightRecorder(comm, nullptr);
        const std::string other = dir.path + "/explicit-" + std::to_string(rank) + ".txt";
        if (res == ncclSuccess) res = sncclCommDumpFlightRecorder(comm, other.c_str());
        record(s, rank, res);
        if (res == ncclSuccess) res = ncclCommDestroy(comm);
      },
      [&](Shared* s, const std::vector<pid_t>& pids) {
        waitForIters(s, n, 10);
        for (pid_t p : pids) kill(p, SIGUSR2);
      });
  ASSERT_NE(sh, nullptr);
  for (int r = 0; r < n; ++r) EXPECT_EQ(sh->r[r].code, ncclSuccess) << describe(sh, n);
  Diagnosis d = diagnoseDir(dir.path, n, sh, n);
  EXPECT_EQ(d.verdict, Verdict::kNoFault) << d.summary;
  for (const Dump& dump : readDumps(dir.path)) {
    EXPECT_EQ(dump.reason, "request") << dump.file;
    EXPECT_FALSE(dump.hasError);
    ASSERT_EQ(dump.ops.size(), 16u) << "SNCCL_FLIGHT_RECORDER=16 keeps the last 16";
    const auto& last = dump.ops.back();
    EXPECT_EQ(last.coll, "Broadcast");
    EXPECT_EQ(last.seq, 79u) << "40 AllReduces and 40 Broadcasts: #0..#79";
    EXPECT_EQ(last.root, 1);
    EXPECT_EQ(last.count, 100u);
    EXPECT_EQ(last.state, "done");
    EXPECT_EQ(last.stepsDone, last.stepsTotal);
    const auto& ar = dump.ops[dump.ops.size() - 2];
    EXPECT_EQ(ar.coll, "AllReduce");
    EXPECT_EQ(ar.count, kCount);
    EXPECT_EQ(ar.op, "sum");
    EXPECT_FALSE(ar.algo.empty() || ar.algo == "-");
    EXPECT_GT(ar.startNs, 0);
    EXPECT_GE(ar.endNs, ar.startNs);
    EXPECT_EQ(dump.peers.size(), size_t(n));
  }
  std::ifstream explicitFile(dir.path + "/explicit-0.txt");
  EXPECT_TRUE(explicitFile.good()) << "a dump to the path given";
  mp::freeShared(sh);
}

}  // namespace
