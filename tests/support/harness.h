// Multi-rank test harness: ranks as threads of this process or as forked processes,
// always under a watchdog so that a hang becomes a failure with a message.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "snccl/nccl.h"

namespace sntest {

enum class Mode { kThreads, kProcesses };
inline const char* modeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }

// Body of one rank. It reports failures with gtest assertions (threads) or by returning
// false (processes: the exit code carries it).
using RankBody = std::function<bool(ncclComm_t comm, int rank, int nranks)>;

// Fails the test and kills the whole process if `seconds` pass before disarm().
class Watchdog {
 public:
  Watchdog(int seconds, std::string what) : what_(std::move(what)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "WATCHDOG: %s did not finish within %d s: hang\n", what_.c_str(), seconds);
        std::fflush(stderr);
        _exit(97);
      }
    });
  }
  ~Watchdog() { disarm(); }
  void disarm() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::string what_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// Runs body on n ranks. Threads: ncclCommInitAll + one thread per rank. Processes: the
// parent creates the unique id and forks n children that join with ncclCommInitRank.
inline void runRanks(Mode mode, int n, const RankBody& body, int timeoutSec = 120) {
  std::string what = std::string(modeName(mode)) + " run with " + std::to_string(n) + " ranks";
  Watchdog dog(timeoutSec, what);
  if (mode == Mode::kThreads) {
    std::vector<ncclComm_t> comms(n);
    ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        if (!body(comms[r], r, n)) failures++;
      });
    for (auto& t : threads) t.join();
    for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    EXPECT_EQ(failures.load(), 0) << what;
    return;
  }
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ncclComm_t comm = nullptr;
      ncclResult_t res = ncclCommInitRank(&comm, n, id, r);
      if (res != ncclSuccess) {
        std::fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", r, ncclGetLastError(nullptr));
        _exit(2);
      }
      bool ok = body(comm, r, n) && !::testing::Test::HasFailure();
      ncclCommDestroy(comm);
      std::fflush(stdout);
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (int r = 0; r < n; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << what << ": rank " << r << " ended with status " << status;
  }
}

}  // namespace sntest
