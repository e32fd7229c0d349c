// The parameter registry: integer syntax, table integrity, and, in fresh processes (the
// registry is read once per process), defaults, alias precedence, malformed values and
// first-use thread safety.
#include "common/params.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/wait.h"

namespace snccl::params {
namespace {

namespace fs = std::filesystem;

TEST(ParseInt, Accepts) {
  const std::pair<const char*, int64_t> cases[] = {
      {"0", 0},
      {"42", 42},
      {"-7", -7},
      {"+5", 5},
      {"010", 10},  // decimal, not octal
      {"0x10", 16},
      {"0XfF", 255},
      {"-0x10", -16},
      {"4K", 4096},
      {"4k", 4096},
      {"2M", 2 << 20},
      {"1G", int64_t(1) << 30},
      {"-3K", -3072},
      {"0x1K", 1024},
      {"  12\t", 12},
      {"9223372036854775807", INT64_MAX},
      {"-9223372036854775808", INT64_MIN},
      {"8589934591G", (int64_t(8589934591) << 30)},
      {"-8589934592G", INT64_MIN},
  };
  for (const auto& [text, value] : cases) {
    auto got = parseInt(text);
    ASSERT_TRUE(got.has_value()) << text;
    EXPECT_EQ(*got, value) << text;
  }
}

TEST(ParseInt, Rejects) {
  const char* cases[] = {"",    " ",   "abc", "12abc", "1.5",  "0x",   "K",   "--1",
                         "+-1", "1KK", "1 K", "-",     "0xg",  "1e3",  "0b1", "12 34",
                         "9223372036854775808", "-9223372036854775809", "8589934592G",
                         "99999999999999999999999"};
  for (const char* text : cases) EXPECT_FALSE(parseInt(text).has_value()) << "'" << text << "'";
}

TEST(Table, Integrity) {
  auto defs = all();
  ASSERT_EQ(defs.size(), static_cast<size_t>(Id::kCount));
  std::set<std::string> names;
  for (size_t i = 0; i < defs.size(); ++i) {
    const Def& d = defs[i];
    SCOPED_TRACE(d.name);
    EXPECT_EQ(static_cast<size_t>(d.id), i);
    EXPECT_EQ(&def(d.id), &d);
    EXPECT_EQ(std::string(d.name).rfind("SNCCL_", 0), 0u);
    EXPECT_TRUE(names.insert(d.name).second) << "duplicate name";
    for (const std::string& alias : aliases(d)) {
      EXPECT_EQ(alias.rfind("NCCL_", 0), 0u);
      EXPECT_TRUE(names.insert(alias).second) << "alias " << alias << " collides with another name";
    }
    ASSERT_NE(d.help, nullptr);
    EXPECT_GT(std::string(d.help).size(), 10u) << "every parameter needs a real help line";
    ASSERT_NE(d.defaultValue, nullptr);
    if (d.type == Type::kInt) {
      EXPECT_TRUE(parseInt(d.defaultValue).has_value()) << "bad default";
    }
  }
}

// ---- Fresh-process tests --------------------------------------------------------------
//
// The registry is filled once per process, so each scenario runs in a child: the
// "threadsafe" death-test style re-executes this binary, so the child's statics start
// empty. The child clears every variable in the table, applies `env`, and runs `body`,
// which returns "" or a failure description. alarm() turns a deadlock into a failure.

using Env = std::vector<std::pair<const char*, const char*>>;

[[noreturn]] void runChild(const Env& env, const std::function<std::string()>& body) {
  alarm(30);
  for (const Def& d : all()) {
    unsetenv(d.name);
    for (const std::string& alias : aliases(d)) unsetenv(alias.c_str());
  }
  for (const auto& [k, v] : env) setenv(k, v, 1);
  std::string failure = body();
  std::fprintf(stderr, "%s\n", failure.empty() ? "CHILD OK" : failure.c_str());
  std::_Exit(failure.empty() ? 0 : 1);
}

void expectInFreshProcess(const Env& env, const std::function<std::string()>& body) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(runChild(env, body), ::testing::ExitedWithCode(0), "CHILD OK");
}

#define CHILD_CHECK(cond)                                                          \
  do {                                                                             \
    if (!(cond)) return std::string(__FILE__ ":") + std::to_string(__LINE__) + ": " #cond; \
  } while (0)

std::vector<std::string> readLines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::string childLogPath() {
  return (fs::path(::testing::TempDir()) / ("snccl_params_" + std::to_string(getpid()))).string();
}

TEST(Registry, Defaults) {
  expectInFreshProcess(Env{}, [] {
    CHILD_CHECK(getInt(Id::Steps) == 8);
    CHILD_CHECK(getInt(Id::Timeout) == 600);
    CHILD_CHECK(getInt(Id::CommBlocking) == -1);
    CHILD_CHECK(getString(Id::Steps) == "8");
    CHILD_CHECK(getString(Id::Algo).empty());
    CHILD_CHECK(getString(Id::DebugSubsys) == "INIT,BOOTSTRAP,ENV");
    CHILD_CHECK(!isSet(Id::Steps));
    CHILD_CHECK(std::string(source(Id::Steps)) == "default");
    return std::string();
  });
}

TEST(Registry, AliasAndPrecedence) {
  Env env = {{"NCCL_BUFFSIZE", "2M"},          // alias only
             {"SNCCL_HOSTID", "mine"},         // both: SNCCL_ wins
             {"NCCL_HOSTID", "theirs"},
             {"SNCCL_SHM_DISABLE", "0x1"},
             {"NCCL_SHM_DISABLE", "0"},
             {"SNCCL_SPIN_US", "-5"},
             {"SNCCL_TIMEOUT", "1K"},
             {"SNCCL_STEPS", ""},              // empty = unset
             {"NCCL_SOCKET_FAMILY", "AF_INET"}};
  expectInFreshProcess(env, [] {
    CHILD_CHECK(getInt(Id::BuffSize) == 2097152);
    CHILD_CHECK(std::string(source(Id::BuffSize)) == "NCCL_BUFFSIZE");
    CHILD_CHECK(isSet(Id::BuffSize));
    CHILD_CHECK(getString(Id::HostId) == "mine");
    CHILD_CHECK(std::string(source(Id::HostId)) == "SNCCL_HOSTID");
    CHILD_CHECK(getInt(Id::ShmDisable) == 1);
    CHILD_CHECK(getInt(Id::SpinUs) == -5);
    CHILD_CHECK(getInt(Id::Timeout) == 1024);
    CHILD_CHECK(getInt(Id::Steps) == 8);
    CHILD_CHECK(!isSet(Id::Steps));
    CHILD_CHECK(getString(Id::SocketFamily) == "AF_INET");
    return std::string();
  });
}

// A parameter with several NCCL names (NCCL_MAX_CTAS, then the older NCCL_MAX_NCHANNELS)
// takes the older one when only it is set, and the current one when both are.
TEST(Registry, OlderNcclNamesAreHonouredAfterTheCurrentOne) {
  Env env = {{"NCCL_MIN_NCHANNELS", "3"},  // older name only
             {"NCCL_MAX_CTAS", "6"},       // both: the current name wins
             {"NCCL_MAX_NCHANNELS", "9"}};
  expectInFreshProcess(env, [] {
    CHILD_CHECK(getInt(Id::MinNchannels) == 3);
    CHILD_CHECK(std::string(source(Id::MinNchannels)) == "NCCL_MIN_NCHANNELS");
    CHILD_CHECK(getInt(Id::MaxNchannels) == 6);
    CHILD_CHECK(std::string(source(Id::MaxNchannels)) == "NCCL_MAX_CTAS");
    CHILD_CHECK((aliases(def(Id::MaxNchannels)) == std::vector<std::string>{"NCCL_MAX_CTAS", "NCCL_MAX_NCHANNELS"}));
    return std::string();
  });
}

TEST(Registry, ValuesAreReadOnceAndStable) {
  expectInFreshProcess((Env{{"SNCCL_ALGO", "ring"}}), [] {
    const std::string& first = getString(Id::Algo);
    setenv("SNCCL_ALGO", "tree", 1);
    CHILD_CHECK(&getString(Id::Algo) == &first);  // references stay valid
    CHILD_CHECK(getString(Id::Algo) == "ring");   // the cache does not follow the env
    CHILD_CHECK(readUncached(Id::Algo) == "tree");
    return std::string();
  });
}

// Malformed as the very first registry use, with logging on: getInt's WARN initialises the
// logger from inside the registry's first use, which must neither deadlock nor recurse.
TEST(Registry, MalformedWarnsOnceAndUsesDefault) {
  expectInFreshProcess((Env{{"SNCCL_STEPS", "12abc"}, {"NCCL_DEBUG", "WARN"}}), [] {
    const std::string path = childLogPath();
    setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
    CHILD_CHECK(getInt(Id::Steps) == 8);
    CHILD_CHECK(getInt(Id::Steps) == 8);
    CHILD_CHECK(isSet(Id::Steps));
    std::string err = log::lastError();
    CHILD_CHECK(err.find("SNCCL_STEPS") != std::string::npos);
    CHILD_CHECK(err.find("'12abc'") != std::string::npos);
    auto lines = readLines(path);
    std::remove(path.c_str());
    int warns = 0;
    for (const auto& l : lines) warns += l.find("NCCL WARN Invalid value '12abc' for SNCCL_STEPS") != std::string::npos;
    CHILD_CHECK(warns == 1);
    CHILD_CHECK(lines.size() == 2);  // the empty separator and the WARN
    return std::string();
  });
}

TEST(Registry, MalformedAliasNamesTheAlias) {
  expectInFreshProcess((Env{{"NCCL_BUFFSIZE", "lots"}}), [] {
    CHILD_CHECK(getInt(Id::BuffSize) == 1048576);
    std::string err = log::lastError();  // recorded although NCCL_DEBUG is unset
    CHILD_CHECK(err.find("NCCL_BUFFSIZE") != std::string::npos);
    CHILD_CHECK(err.find("'lots'") != std::string::npos);
    return std::string();
  });
}

TEST(Registry, AnnouncesUserSetValuesOnceUnderEnv) {
  expectInFreshProcess((Env{{"SNCCL_STEPS", "16"}, {"NCCL_DEBUG", "INFO"}, {"NCCL_DEBUG_SUBSYS", "ENV"}}), [] {
    const std::string path = childLogPath();
    setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
    CHILD_CHECK(getInt(Id::Steps) == 16);
    CHILD_CHECK(getInt(Id::Steps) == 16);
    (void)getInt(Id::Timeout);  // unset: nothing to announce
    auto lines = readLines(path);
    std::remove(path.c_str());
    CHILD_CHECK(lines.size() == 1);
    CHILD_CHECK(lines[0].find("NCCL INFO SNCCL_STEPS set by environment to 16") != std::string::npos);
    return std::string();
  });
}

// A negative SNCCL_TIMEOUT means nothing (it used to disable every timeout): it is
// rejected like a malformed value, with a WARN naming the variable, and the default used.
TEST(Registry, NegativeTimeoutIsRejectedWithWarn) {
  expectInFreshProcess((Env{{"SNCCL_TIMEOUT", "-5"}, {"NCCL_DEBUG", "WARN"}}), [] {
    const std::string path = childLogPath();
    setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
    CHILD_CHECK(getInt(Id::Timeout) == 600);
    CHILD_CHECK(getInt(Id::Timeout) == 600);
    const std::string err = log::lastError();
    CHILD_CHECK(err.find("SNCCL_TIMEOUT") != std::string::npos);
    CHILD_CHECK(err.find("'-5'") != std::string::npos);
    auto lines = readLines(path);
    std::remove(path.c_str());
    int warns = 0;
    for (const auto& l : lines) warns += l.find("NCCL WARN Invalid value '-5' for SNCCL_TIMEOUT") != std::string::npos;
    CHILD_CHECK(warns == 1);
    return std::string();
  });
}

// A value the code clamps is reported once: the variable, the value given, the value used.
TEST(Registry, ClampedValueWarnsOnce) {
  expectInFreshProcess((Env{{"SNCCL_SPIN_US", "-3"}, {"NCCL_DEBUG", "WARN"}}), [] {
    const std::string path = childLogPath();
    setenv("NCCL_DEBUG_FILE", path.c_str(), 1);
    CHILD_CHECK(spinBudgetUs(false) == 0);
    CHILD_CHECK(spinBudgetUs(false) == 0);
    const std::string err = log::lastError();
    CHILD_CHECK(err.find("SNCCL_SPIN_US=-3") != std::string::npos);
    CHILD_CHECK(err.find("using 0") != std::string::npos);
    auto lines = readLines(path);
    std::remove(path.c_str());
    int warns = 0;
    for (const auto& l : lines) warns += l.find("NCCL WARN SNCCL_SPIN_US=-3") != std::string::npos;
    CHILD_CHECK(warns == 1);
    return std::string();
  });
}

TEST(Registry, ConcurrentFirstUse) {
  expectInFreshProcess((Env{{"SNCCL_BUFFSIZE", "0x40K"}, {"SNCCL_COMM_ID", "10.0.0.1:9999"}}), [] {
    constexpr int kThreads = 8;
    std::vector<int64_t> ints(kThreads);
    std::vector<const std::string*> strs(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        ints[t] = getInt(Id::BuffSize);
        strs[t] = &getString(Id::CommId);
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) {
      CHILD_CHECK(ints[t] == 65536);
      CHILD_CHECK(strs[t] == strs[0]);
    }
    CHILD_CHECK(*strs[0] == "10.0.0.1:9999");
    return std::string();
  });
}

}  // namespace
}  // namespace snccl::params

namespace snccl::params {
namespace {

// Oversubscription turns the spin off, unless the user set SNCCL_SPIN_US; the yield comes
// only then.
TEST(Registry, ExplicitSpinWinsOverOversubscription) {
  expectInFreshProcess(Env{}, [] {
    CHILD_CHECK(spinBudgetUs(true) == 0);
    CHILD_CHECK(spinBudgetUs(false) == 1000);
    CHILD_CHECK(yieldBudgetUs(true) == 500);
    CHILD_CHECK(yieldBudgetUs(false) == 0);
    return std::string();
  });
  expectInFreshProcess((Env{{"SNCCL_SPIN_US", "250"}}), [] {
    CHILD_CHECK(spinBudgetUs(true) == 250);
    CHILD_CHECK(spinBudgetUs(false) == 250);
    return std::string();
  });
}

}  // namespace
}  // namespace snccl::params
