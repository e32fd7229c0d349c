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

#include <fstream>
#include <regex>

#include "mp/mp_util.h"

namespace {

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

struct HelperRun {
  int rc = -1;
  pid_t pid = 0;
  std::vector<std::string> files;  // names in the log directory
  std::vector<std::string> lines;  // of all files
};

HelperRun runHelper(const std::string& dir, const std::vector<std::pair<std::string, std::string>>& env) {
  HelperRun run;
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    for (const char* v : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "SNCCL_DEBUG", "SNCCL_DEBUG_SUBSYS",
                          "SNCCL_DEBUG_FILE"})
      unsetenv(v);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    setenv(kHelperVar, "1", 1);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);  // stdout output (no NCCL_DEBUG_FILE) is not ours to check here
    execl("/proc/self/exe", "test_logging_helper", (char*)nullptr);
    _exit(127);
  }
  run.pid = pid;
  double deadline = mp::nowSec() + 60;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (mp::nowSec() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ADD_FAILURE() << "helper hung";
      break;
    }
    usleep(2000);
  }
  run.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      run.files.push_back(e->d_name);
      std::ifstream f(dir + "/" + e->d_name);
      std::string line;
      while (std::getline(f, line)) run.lines.push_back(line);
    }
    closedir(d);
  }
  return run;
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/snccl-log-XXXXXX";
    path = mkdtemp(tmpl) ? tmpl : "";
  }
  ~TempDir() {
    if (!path.empty()) (void)!std::system(("rm -rf '" + path + "'").c_str());
  }
};

std::string shortHost() {
  char h[256] = {};
  gethostname(h, sizeof h - 1);
  if (char* dot = std::strchr(h, '.')) *dot = '\0';
  return h;
}

std::string dump(const HelperRun& run) {
  std::string s;
  for (size_t i = 0; i < run.lines.size() && i < 60; ++i) s += "  | " + run.lines[i] + "\n";
  return s;
}

TEST(Logging, InfoAndWarnHaveNcclsShape) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(dir.path, {{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_FILE", dir.path + "/nccl.%h.%p.log"}});
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
  HelperRun run = runHelper(dir.path, {{"NCCL_DEBUG", "WARN"}, {"NCCL_DEBUG_FILE", dir.path + "/w.%p"}});
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
  HelperRun run = runHelper(dir.path, {{"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "^INIT,BOOTSTRAP,ENV"},
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
  HelperRun run = runHelper(dir.path, {{"NCCL_DEBUG_FILE", dir.path + "/quiet.%p"}});
  ASSERT_EQ(run.rc, 0);
  EXPECT_TRUE(run.lines.empty()) << dump(run);
}

// The SNCCL_ spelling is an alias of the NCCL_ one.
TEST(Logging, SncclAliases) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  HelperRun run = runHelper(dir.path, {{"SNCCL_DEBUG", "INFO"}, {"SNCCL_DEBUG_FILE", dir.path + "/a.%p"}});
  ASSERT_EQ(run.rc, 0);
  bool info = false;
  for (const std::string& l : run.lines) info |= l.find(" NCCL INFO ") != std::string::npos;
  EXPECT_TRUE(info) << dump(run);
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv(kHelperVar) != nullptr) return helperMain();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
