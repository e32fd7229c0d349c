// Logging: NCCL line shapes, level and subsystem parsing, NCCL_DEBUG_FILE, last error,
// and that concurrent lines stay intact.
//
// Most tests reconfigure in-process with resetForTesting (the log configuration is the
// one thing allowed to re-read the environment). FirstUseInFreshProcess checks the
// ordinary first-use path in a re-executed child process.
// GCC 12 reports a false -Wmaybe-uninitialized inside <regex>/<functional> when built with
// -fsanitize=address (SNCCL_SANITIZE=ON) and -Werror; the warning points into the system
// headers, so it must be silenced before the first of them is included.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "common/log.h"

#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace snccl::log {
namespace {

namespace fs = std::filesystem;

const char* const kLogVars[] = {"SNCCL_DEBUG", "NCCL_DEBUG", "SNCCL_DEBUG_SUBSYS",
                                "NCCL_DEBUG_SUBSYS", "SNCCL_DEBUG_FILE", "NCCL_DEBUG_FILE"};

std::string shortHost() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  std::string h = buf;
  return h.substr(0, h.find('.'));
}

std::string escapeRegex(const std::string& s) {
  static const std::regex special(R"([.^$|()\[\]{}*+?\\])");
  return std::regex_replace(s, special, R"(\$&)");
}

// "host:pid:tid" of the calling thread, as a regex.
std::string idsRegex() {
  return escapeRegex(shortHost()) + ":" + std::to_string(getpid()) + ":" +
         std::to_string(gettid());
}

std::vector<std::string> readLines(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

class LogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           ("snccl_log_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    file_ = dir_ / "log.txt";
    setThreadDevice(0);
  }
  void TearDown() override {
    for (const char* v : kLogVars) unsetenv(v);
    resetForTesting();
    fs::remove_all(dir_);
  }

  // Points the log at file_ with the given NCCL_DEBUG / NCCL_DEBUG_SUBSYS (nullptr = unset).
  void configure(const char* level, const char* subsys = nullptr) {
    for (const char* v : kLogVars) unsetenv(v);
    if (level) setenv("NCCL_DEBUG", level, 1);
    if (subsys) setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
    setenv("NCCL_DEBUG_FILE", file_.c_str(), 1);
    resetForTesting();
  }
  std::vector<std::string> lines() { return readLines(file_); }

  fs::path dir_;
  fs::path file_;
};

TEST_F(LogTest, InfoLineShape) {
  configure("INFO", "INIT");
  SN_INFO(kInit, "hello %d", 42);
  auto l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(std::regex_match(l[0], std::regex("^" + idsRegex() + R"( \[0\] NCCL INFO hello 42$)")))
      << l[0];
}

TEST_F(LogTest, WarnLineShapeAndLastError) {
  configure("WARN");
  const int line = __LINE__ + 1;
  SN_WARN("disk %s is %d%% full", "sda", 99);
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_EQ(l[0], "");  // NCCL separates WARNs from the INFO noise with an empty line
  std::regex shape("^\\[\\d{4}-\\d{2}-\\d{2} \\d{2}:\\d{2}:\\d{2}\\] " + idsRegex() +
                   " \\[0\\] test_log\\.cc:" + std::to_string(line) +
                   " NCCL WARN disk sda is 99% full$");
  EXPECT_TRUE(std::regex_match(l[1], shape)) << l[1];
  EXPECT_STREQ(lastError(), "disk sda is 99% full");
}

TEST_F(LogTest, TraceLineShapeAndDevice) {
  configure("TRACE", "ALL");
  setThreadDevice(3);
  const int line = __LINE__ + 1;
  SN_TRACE(kColl, "step %d", 7);
  SN_TRACE(kCall, "ncclAllReduce(%d)", 1);
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  std::regex trace("^" + idsRegex() + R"( \[3\] \d+\.\d{6} test_log\.cc:)" +
                   std::to_string(line) + " NCCL TRACE step 7$");
  EXPECT_TRUE(std::regex_match(l[0], trace)) << l[0];
  EXPECT_TRUE(std::regex_match(l[1], std::regex("^" + idsRegex() + " NCCL CALL ncclAllReduce\\(1\\)$")))
      << l[1];
}

TEST_F(LogTest, DeviceIsPerThread) {
  configure("INFO", "INIT");
  setThreadDevice(5);
  std::thread([] { SN_INFO(kInit, "other"); }).join();
  SN_INFO(kInit, "mine");
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NE(l[0].find(" [0] NCCL INFO other"), std::string::npos) << l[0];
  EXPECT_NE(l[1].find(" [5] NCCL INFO mine"), std::string::npos) << l[1];
}

TEST_F(LogTest, LevelParsing) {
  struct Case { const char* env; int level; };
  const Case cases[] = {{nullptr, kNone}, {"VERSION", kVersion}, {"warn", kWarn},
                        {"Info", kInfo},  {"ABORT", kAbort},     {"trace", kTrace},
                        {"bogus", kNone}, {"", kNone}};
  for (const Case& c : cases) {
    configure(c.env, "ALL");
    for (int l = kVersion; l <= kTrace; ++l)
      EXPECT_EQ(enabled(Level(l), kInit), l <= c.level) << (c.env ? c.env : "(unset)") << " " << l;
  }
}

// NCCL_DEBUG that names no level leaves logging off, but says so once, naming the
// variable and the levels it accepts.
TEST_F(LogTest, UnknownLevelWarnsOnce) {
  configure("bogus", "ALL");
  ::testing::internal::CaptureStdout();
  EXPECT_FALSE(enabled(kWarn, kInit));
  EXPECT_FALSE(enabled(kInfo, kInit));
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("NCCL WARN Invalid value 'bogus' for NCCL_DEBUG"), std::string::npos) << out;
  EXPECT_NE(out.find("VERSION, WARN, INFO, ABORT, TRACE"), std::string::npos) << out;
  EXPECT_EQ(out.find("NCCL WARN"), out.rfind("NCCL WARN")) << "once\n" << out;
  EXPECT_NE(std::string(lastError()).find("NCCL_DEBUG"), std::string::npos);
}

TEST_F(LogTest, SncclPrefixWinsOverAlias) {
  configure("INFO", "ALL");
  setenv("SNCCL_DEBUG", "WARN", 1);
  resetForTesting();
  EXPECT_TRUE(enabled(kWarn, kInit));
  EXPECT_FALSE(enabled(kInfo, kInit));
}

TEST_F(LogTest, LowerLevelsAreFiltered) {
  configure("WARN", "ALL");
  SN_INFO(kInit, "quiet");
  SN_TRACE(kInit, "quiet");
  SN_WARN("loud");
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);
  EXPECT_NE(l[1].find("NCCL WARN loud"), std::string::npos);
}

TEST_F(LogTest, SubsystemFiltering) {
  configure("INFO");  // default INIT,BOOTSTRAP,ENV
  EXPECT_TRUE(enabled(kInfo, kInit));
  EXPECT_TRUE(enabled(kInfo, kBootstrap));
  EXPECT_TRUE(enabled(kInfo, kEnv));
  EXPECT_FALSE(enabled(kInfo, kColl));

  configure("INFO", "net, coll");
  EXPECT_TRUE(enabled(kInfo, kNet));
  EXPECT_TRUE(enabled(kInfo, kColl));
  EXPECT_FALSE(enabled(kInfo, kInit));
  EXPECT_TRUE(enabled(kInfo, kInit | kNet));  // any bit of a multi-subsystem message

  configure("INFO", "^INIT,NET");
  EXPECT_FALSE(enabled(kInfo, kInit));
  EXPECT_FALSE(enabled(kInfo, kNet));
  EXPECT_TRUE(enabled(kInfo, kColl));
  EXPECT_TRUE(enabled(kInfo, kRas));

  configure("INFO", "ALL");
  for (uint64_t bit = 1; bit <= kRas; bit <<= 1) EXPECT_TRUE(enabled(kInfo, bit)) << bit;

  configure("INFO", "^ALL");
  EXPECT_FALSE(enabled(kInfo, kAll));

  configure("INFO", "NVLS,PROFILE,RAS,REG,PROXY,CALL,ALLOC,TUNING,GRAPH,SHM,P2P,nonsense");
  EXPECT_FALSE(enabled(kInfo, kInit | kColl | kNet | kEnv | kBootstrap));
  for (uint64_t b : {kNvls, kProfile, kRas, kReg, kProxy, kCall, kAlloc, kTuning, kGraph, kShm, kP2P})
    EXPECT_TRUE(enabled(kInfo, b)) << b;

  // Filtering reaches the output, not just enabled().
  configure("INFO", "^INIT");
  SN_INFO(kInit, "hidden");
  SN_INFO(kNet, "shown");
  auto l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_NE(l[0].find("NCCL INFO shown"), std::string::npos);
}

TEST_F(LogTest, FileNameExpansion) {
  for (const char* v : kLogVars) unsetenv(v);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", (dir_ / "n.%h.%p.%%.%x").c_str(), 1);
  resetForTesting();
  SN_INFO(kInit, "expanded");
  fs::path expect = dir_ / ("n." + shortHost() + "." + std::to_string(getpid()) + ".%.%x");
  auto l = readLines(expect);
  ASSERT_EQ(l.size(), 1u) << expect;
  EXPECT_NE(l[0].find("NCCL INFO expanded"), std::string::npos);
}

TEST_F(LogTest, UnopenableFileFallsBackToStdoutWithWarn) {
  for (const char* v : kLogVars) unsetenv(v);
  setenv("NCCL_DEBUG", "INFO", 1);
  const std::string bad = (dir_ / "missing" / "log").string();
  setenv("NCCL_DEBUG_FILE", bad.c_str(), 1);
  resetForTesting();
  ::testing::internal::CaptureStdout();
  SN_INFO(kInit, "to stdout");
  std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("NCCL WARN Cannot open debug file " + bad), std::string::npos) << out;
  EXPECT_NE(out.find("NCCL INFO to stdout"), std::string::npos) << out;
  EXPECT_NE(std::string(lastError()).find(bad), std::string::npos);
}

TEST_F(LogTest, SilentStillRecordsLastErrorAndCreatesNoFile) {
  configure(nullptr);
  SN_WARN("recorded %s", "anyway");
  SN_INFO(kInit, "dropped");
  EXPECT_STREQ(lastError(), "recorded anyway");
  EXPECT_FALSE(fs::exists(file_));
}

TEST_F(LogTest, VersionBanner) {
  configure("VERSION");
  ::testing::internal::CaptureStdout();
  printVersionBanner("NCCL version 2.28.9+snccl");
  SN_WARN("not at VERSION");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "NCCL version 2.28.9+snccl\n");

  configure("INFO");
  printVersionBanner("NCCL version 2.28.9+snccl");
  auto l = lines();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(std::regex_match(l[0], std::regex("^" + idsRegex() + R"( \[0\] NCCL INFO NCCL version 2\.28\.9\+snccl$)")))
      << l[0];

  configure(nullptr);
  ::testing::internal::CaptureStdout();
  printVersionBanner("NCCL version 2.28.9+snccl");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

TEST_F(LogTest, LastErrorPointerIsPerThreadSnapshot) {
  setLastError("first");
  const char* mine = lastError();
  std::thread([] { setLastError("second"); }).join();
  EXPECT_STREQ(mine, "first");  // still valid: this thread has not called again
  EXPECT_STREQ(lastError(), "second");
  setLastError("");
  EXPECT_STREQ(lastError(), "");
}

TEST_F(LogTest, TrailingNewlineAndLongMessages) {
  configure("WARN");
  const std::string big(10000, 'x');
  SN_WARN("%s\n", big.c_str());
  auto l = lines();
  ASSERT_EQ(l.size(), 2u);  // the empty separator line, then one line, no extra blank
  EXPECT_EQ(l[1].substr(l[1].size() - big.size()), big);
  EXPECT_EQ(std::string(lastError()), big);
}

TEST_F(LogTest, ConcurrentLinesStayIntact) {
  configure("INFO", "ALL");
  constexpr int kThreads = 8, kLines = 300;
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      setThreadDevice(t);
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kLines; ++i) {
        // Payload longer than a typical stdio buffer boundary split, and self-checking.
        std::string pad(100 + (i * 37) % 400, char('a' + t));
        SN_INFO(kColl, "t=%d i=%d %s end", t, i, pad.c_str());
        if (i % 50 == 0) SN_WARN("t=%d warn %d", t, i);
        (void)lastError();
      }
    });
  }
  go = true;
  for (auto& th : threads) th.join();

  std::regex info(R"(^[^ ]+:\d+:\d+ \[(\d)\] NCCL INFO t=(\d) i=(\d+) ([a-h]+) end$)");
  std::regex warn(R"(^\[[-0-9: ]+\] [^ ]+:\d+:\d+ \[(\d)\] test_log\.cc:\d+ NCCL WARN t=(\d) warn \d+$)");
  std::vector<int> seen(kThreads, 0);
  int warns = 0, blanks = 0;
  for (const std::string& l : lines()) {
    std::smatch m;
    if (l.empty()) {
      ++blanks;
    } else if (std::regex_match(l, m, info)) {
      int t = std::stoi(m[2]), i = std::stoi(m[3]);
      EXPECT_EQ(std::stoi(m[1]), t);
      EXPECT_EQ(m[4].str(), std::string(100 + (i * 37) % 400, char('a' + t)));
      EXPECT_EQ(i, seen[t]++);  // one thread's lines stay in program order
    } else if (std::regex_match(l, m, warn)) {
      EXPECT_EQ(m[1], m[2]);
      ++warns;
    } else {
      ADD_FAILURE() << "torn line: " << l.substr(0, 200);
    }
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(seen[t], kLines) << t;
  EXPECT_EQ(warns, kThreads * (kLines / 50));
  EXPECT_EQ(blanks, warns);
}

// The ordinary path: first use in a process, no resetForTesting. The death-test machinery
// re-executes this binary ("threadsafe" style), so the child starts with nothing
// configured; alarm() turns a deadlock in first-use initialisation into a failure.
void firstUseChild(const std::string& path) {
  alarm(30);
  for (const char* v : kLogVars) unsetenv(v);
  setenv("SNCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG", "TRACE", 1);  // the SNCCL_ name must win
  setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
  setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
  std::vector<std::thread> threads;  // several threads race to initialise
  for (int t = 0; t < 4; ++t) threads.emplace_back([] { SN_INFO(kNet, "first"); SN_TRACE(kNet, "no"); });
  for (auto& th : threads) th.join();
  auto l = readLines(path);
  bool ok = l.size() == 4;
  for (const std::string& s : l) ok = ok && s.find("NCCL INFO first") != std::string::npos;
  std::fprintf(stderr, "lines=%zu ok=%d\n", l.size(), ok ? 1 : 0);
  std::remove(path.c_str());
  std::_Exit(ok ? 0 : 1);
}

TEST(LogFreshProcess, FirstUseInFreshProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path =
      (fs::path(::testing::TempDir()) / ("snccl_log_first_" + std::to_string(getpid()))).string();
  EXPECT_EXIT(firstUseChild(path), ::testing::ExitedWithCode(0), "lines=4 ok=1");
  fs::remove(path);
}

}  // namespace
}  // namespace snccl::log

namespace snccl::log {
namespace {

// A repeating warning: `burst` lines per period, the rest counted and reported with the
// next line written.
TEST(WarnLimiter, BurstThenCountsUntilTheNextPeriod) {
  using namespace std::chrono_literals;
  WarnLimiter lim(3, 10s);
  auto t = WarnLimiter::Clock::now();
  int written = 0;
  for (int k = 0; k < 1000; ++k) written += lim.allow(t + std::chrono::milliseconds(k)) ? 1 : 0;
  EXPECT_EQ(written, 3);
  EXPECT_EQ(lim.suppressedTotal(), 997u);
  EXPECT_TRUE(lim.allow(t + 11s));
  EXPECT_EQ(lim.suppressedNote(), " (997 more like this suppressed)");
  EXPECT_EQ(lim.suppressedNote(), "");
}

}  // namespace
}  // namespace snccl::log
