// Logging as a user sees it: fresh processes (fork + exec of this binary in helper mode)
// run with NCCL_DEBUG / NCCL_DEBUG_SUBSYS / NCCL_DEBUG_FILE; the file must hold NCCL's
// line shapes (INFO: "host:pid:tid [dev] NCCL INFO msg"; WARN: an empty line, then
// "[YYYY-MM-DD HH:MM:SS] host:pid:tid [dev] file.cc:N NCCL WARN msg").
// GCC 12 reports a false -Wmaybe-uninitialized inside <regex> when built with sanitizers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <dirent.h>
#include <fcntl.h>
#include <sched.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <regex>

#include "mp/helper_run.h"
#include "mp/mp_util.h"

namespace {

using mp::dump;
using mp::HelperRun;
using mp::runHelper;
using mp::TempDir;

constexpr const char* kHelperVar = "SNCCL_MP_LOG_HELPER";

// Helper mode: a 2-rank clique, one allreduce, one invalid argument, teardown.
int helperMain() {
  ncclComm_t comms[2] = {nullptr, nullptr};
  if (ncclCommInitAll(comms, 2, nullptr) != ncclSuccess) return 2;
  std::vector<std::thread> threads;
  int failures = 0;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      float x = 1.0f, y = 0.0f;
      if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comms[r], nullptr) != ncclSuccess || y != 2.0f) failures++;
    });
  for (auto& t : threads) t.join();
  float x = 0, y = 0;
  if (ncclAllReduce(&x, &y, 1, ncclDataType_t(99), ncclSum, comms[0], nullptr) != ncclInvalidArgument) failures++;
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return failures == 0 ? 0 : 3;
}

constexpr const char* kPinnedHelperVar = "SNCCL_MP_PINNED_HELPER";

// Helper mode: 2 ranks, each initialised by a thread bound to the CPU SNCCL_TEST_RANK_CPUS
// names for it ("a,b"), then one allreduce. SNCCL_SPIN_US is the default's.
int pinnedHelperMain() {
  unsetenv("SNCCL_SPIN_US");
  int cpu[2] = {-1, -1};
  const char* spec = std::getenv("SNCCL_TEST_RANK_CPUS");
  if (spec == nullptr || std::sscanf(spec, "%d,%d", &cpu[0], &cpu[1]) != 2) return 4;
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 2;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(cpu[r], &set);
      ncclComm_t comm = nullptr;
      if (sched_setaffinity(0, sizeof set, &set) != 0 || ncclCommInitRank(&comm, 2, id, r) != ncclSuccess) {
        failures++;
        return;
      }
      float x = 1.0f, y = 0.0f;
      if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess || y != 2.0f) failures++;
      ncclCommDestroy(comm);
    });
  for (auto& t : threads) t.join();
  return failures == 0 ? 0 : 3;
}

std::string shortHost() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  if (char* dot = std::strchr(h, '.')) *dot = '\0';
  return h;
}


TEST(Logging, InfoAndWarnHaveNcclsShape) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(kHelperVar, dir.path, {{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", dir.path + "/nccl.%h.%p.log"}});
  ASSERT_EQ(run.rc, 0);
  ASSERT_EQ(run.files.size(), 1u);
  EXPECT_EQ(run.files[0], "nccl." + shortHost() + "." + std::to_string(run.pid) + ".log") << "%h and %p expansion";
  const std::string host = shortHost(), pid = std::to_string(run.pid);
  std::regex info("^([^ :]+):([0-9]+):([0-9]+) \\[(-?[0-9]+)\\] NCCL INFO (.+)$");
  std::regex warn("^\\[[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\] ([^ :]+):([0-9]+):([0-9]+) "
                  "\\[(-?[0-9]+)\\] [A-Za-z0-9_]+\\.(cc|h|cpp):[0-9]+ NCCL WARN (.+)$");
  int infos = 0, warns = 0;
  bool initComplete = false, version = false, warnNamesCall = false;
  for (size_t i = 0; i < run.lines.size(); ++i) {
    const std::string& l = run.lines[i];
    std::smatch m;
    if (std::regex_match(l, m, info)) {
      ++infos;
      EXPECT_EQ(m[1], host) << l;
      EXPECT_EQ(m[2], pid) << l;
      initComplete |= l.find("Init COMPLETE") != std::string::npos;
      std::smatch k;
      if (std::regex_search(l, k, std::regex("nRanks ([0-9]+) localRanks ([0-9]+)"))) {
        EXPECT_EQ(k[1], k[2]) << "both ranks are threads of one process, so every rank is local: " << l;
      }
      version |= l.find("NCCL version 2.28.9") != std::string::npos;
    } else if (std::regex_match(l, m, warn)) {
      ++warns;
      EXPECT_EQ(m[1], host) << l;
      EXPECT_EQ(m[2], pid) << l;
      EXPECT_TRUE(i > 0 && run.lines[i - 1].empty()) << "a WARN is preceded by an empty line:\n" << dump(run);
      warnNamesCall |= l.find("ncclAllReduce") != std::string::npos && l.find("99") != std::string::npos;
      EXPECT_EQ(l.find("ncclAllReduce: ncclAllReduce:"), std::string::npos) << "call name repeated: " << l;
    } else if (!l.empty()) {
      ADD_FAILURE() << "line of neither INFO nor WARN shape: '" << l << "'";
    }
  }
  EXPECT_GE(infos, 2) << dump(run);
  EXPECT_TRUE(initComplete) << "no '... Init COMPLETE' INFO line\n" << dump(run);
  EXPECT_TRUE(version) << "no 'NCCL version 2.28.9' banner at INFO\n" << dump(run);
  EXPECT_EQ(warns, 1) << dump(run);
  EXPECT_TRUE(warnNamesCall) << "the WARN should name ncclAllReduce and the bad datatype 99\n" << dump(run);
}

TEST(Logging, WarnLevelPrintsOnlyWarnings) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(kHelperVar, dir.path, {{"NCCL_DEBUG", "WARN"}, {"NCCL_DEBUG_FILE", dir.path + "/w.%p"}});
  ASSERT_EQ(run.rc, 0);
  int warns = 0;
  for (const std::string& l : run.lines) {
    EXPECT_EQ(l.find("NCCL INFO"), std::string::npos) << l;
    warns += l.find("NCCL WARN") != std::string::npos;
  }
  EXPECT_EQ(warns, 1) << dump(run);
}

TEST(Logging, SubsystemMaskFiltersInfo) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(kHelperVar, dir.path, {{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "^INIT,BOOTSTRAP,ENV"},
                                 {"NCCL_DEBUG_FILE", dir.path + "/s.%p"}});
  ASSERT_EQ(run.rc, 0);
  int warns = 0;
  for (const std::string& l : run.lines) {
    EXPECT_EQ(l.find("Init COMPLETE"), std::string::npos) << "INIT is masked out: " << l;
    warns += l.find("NCCL WARN") != std::string::npos;
  }
  EXPECT_EQ(warns, 1) << "WARN is not subject to the subsystem mask\n" << dump(run);
}

TEST(Logging, SilentWithoutNcclDebug) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(kHelperVar, dir.path, {{"NCCL_DEBUG_FILE", dir.path + "/quiet.%p"}});
  ASSERT_EQ(run.rc, 0);
  EXPECT_TRUE(run.lines.empty()) << dump(run);
}

// The lines of `run` that contain `needle`.
std::vector<std::string> linesWith(const HelperRun& run, const char* needle) {
  std::vector<std::string> out;
  for (const std::string& l : run.lines)
    if (l.find(needle) != std::string::npos) out.push_back(l);
  return out;
}

// INIT says how rings between ranks of this node publish (transport/connection.h): without
// a full fence by default (or, on a kernel that refuses membarrier, with one and why), and
// with one when SNCCL_MEMBARRIER=0.
TEST(Logging, SaysHowRingsPublish) {
  auto publishLines = [](const HelperRun& run) { return linesWith(run, "rings to ranks on this node publish"); };
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun byDefault = runHelper(kHelperVar, dir.path, {{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", dir.path + "/d.%p"}});
  ASSERT_EQ(byDefault.rc, 0) << dump(byDefault);
  std::vector<std::string> lines = publishLines(byDefault);
  ASSERT_EQ(lines.size(), 2u) << "one line per rank\n" << dump(byDefault);
  for (const std::string& l : lines)
    EXPECT_TRUE(l.find("without a full fence") != std::string::npos ||
                l.find("this kernel refuses membarrier") != std::string::npos)
        << l;
  TempDir other;  // runHelper reads every file of its directory
  ASSERT_FALSE(other.path.empty());
  HelperRun fenced = runHelper(kHelperVar, other.path, {{"NCCL_DEBUG", "INFO"}, {"SNCCL_MEMBARRIER", "0"},
                                                        {"NCCL_DEBUG_FILE", other.path + "/f.%p"}});
  ASSERT_EQ(fenced.rc, 0) << dump(fenced);
  lines = publishLines(fenced);
  ASSERT_EQ(lines.size(), 2u) << dump(fenced);
  for (const std::string& l : lines) EXPECT_NE(l.find("with a full fence (SNCCL_MEMBARRIER=0)"), std::string::npos) << l;
}

// A rank's waits spin only when its CPUs are not shared with more ranks than they hold:
// two ranks bound to one CPU (taskset, a container's cpuset) sleep at once, however many
// CPUs the host has online; two ranks bound to a CPU each spin.
TEST(Logging, SaysHowWaitsSpin) {
  auto waitLines = [](const HelperRun& run) { return linesWith(run, ": waits spin "); };
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::vector<int> usable;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) usable.push_back(c);
  ASSERT_FALSE(usable.empty());
  const std::string a = std::to_string(usable[0]);

  TempDir shared;
  ASSERT_FALSE(shared.path.empty());
  HelperRun one = runHelper(kPinnedHelperVar, shared.path,
                            {{"NCCL_DEBUG", "INFO"},
                             {"NCCL_DEBUG_SUBSYS", "INIT"},
                             {"SNCCL_TEST_RANK_CPUS", a + "," + a},
                             {"NCCL_DEBUG_FILE", shared.path + "/s.%p"}});
  ASSERT_EQ(one.rc, 0) << dump(one);
  std::vector<std::string> lines = waitLines(one);
  ASSERT_EQ(lines.size(), 2u) << "one line per rank\n" << dump(one);
  for (const std::string& l : lines)
    EXPECT_NE(l.find("shares 1 CPU with 1 rank of this node: waits spin 0 us, yield 500 us"), std::string::npos) << l;

  if (usable.size() < 2) GTEST_SKIP() << "ranks on CPUs of their own need 2 usable CPUs, this thread has 1";
  TempDir apart;
  ASSERT_FALSE(apart.path.empty());
  HelperRun two = runHelper(kPinnedHelperVar, apart.path,
                            {{"NCCL_DEBUG", "INFO"},
                             {"NCCL_DEBUG_SUBSYS", "INIT"},
                             {"SNCCL_TEST_RANK_CPUS", a + "," + std::to_string(usable[1])},
                             {"NCCL_DEBUG_FILE", apart.path + "/a.%p"}});
  ASSERT_EQ(two.rc, 0) << dump(two);
  lines = waitLines(two);
  ASSERT_EQ(lines.size(), 2u) << "one line per rank\n" << dump(two);
  for (const std::string& l : lines)
    EXPECT_NE(l.find("shares 1 CPU with 0 ranks of this node: waits spin 1000 us, yield 0 us"), std::string::npos) << l;
}

// The SNCCL_ spelling is an alias of the NCCL_ one.
TEST(Logging, SncclAliases) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(kHelperVar, dir.path, {{"SNCCL_DEBUG", "INFO"}, {"SNCCL_DEBUG_FILE", dir.path + "/a.%p"}});
  ASSERT_EQ(run.rc, 0);
  bool info = false;
  for (const std::string& l : run.lines) info |= l.find(" NCCL INFO ") != std::string::npos;
  EXPECT_TRUE(info) << dump(run);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv(kHelperVar) != nullptr) return helperMain();
  if (std::getenv(kPinnedHelperVar) != nullptr) return pinnedHelperMain();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
