// Multi-rank test harness: ranks as threads of this process or as forked processes,
// always under a watchdog so that a hang becomes a failure with a message.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <mutex>
#include <new>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "snccl/nccl.h"

namespace sntest {

enum class Mode { kThreads, kProcesses };
inline const char* modeName(Mode m) { return m == Mode::kThreads ? "threads" : "processes"; }
inline void PrintTo(Mode m, std::ostream* os) { *os << modeName(m); }

// gtest name suffix for (mode, nranks) parameters: "threads_3".
inline std::string modeRanksName(const ::testing::TestParamInfo<std::tuple<Mode, int>>& info) {
  return std::string(modeName(std::get<0>(info.param))) + "_" + std::to_string(std::get<1>(info.param));
}

// The rank counts a multi-rank grid runs: COUNTS, less those above 5 in a sanitizer build
// (SNCCL_TEST_SANITIZED). 8 ranks run the same code as 2 to 5 (odd and even, full and
// partial trees) and are nearly half of a grid's time on 2 cores under a sanitizer; the
// release build runs every count.
inline std::vector<int> gridRankCounts(std::initializer_list<int> counts) {
  std::vector<int> out;
  for (int n : counts) {
#ifdef SNCCL_TEST_SANITIZED
    if (n > 5) continue;
#endif
    out.push_back(n);
  }
  return out;
}

// Body of one rank. It reports failures with gtest assertions (threads) or by returning
// false (processes: the exit code carries it).
using RankBody = std::function<bool(ncclComm_t comm, int rank, int nranks)>;

// Fails the test and kills the whole process if `seconds` pass before disarm().
// onTimeout (optional) runs first, on the watchdog thread: it names what is still
// running and kills child processes so that a hang never leaves orphans behind.
class Watchdog {
 public:
  Watchdog(int seconds, std::string what, std::function<void()> onTimeout = {})
      : what_(std::move(what)), onTimeout_(std::move(onTimeout)) {
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lock(mu_);
      started_ = true;
      cv_.notify_all();
      if (!cv_.wait_for(lock, std::chrono::seconds(seconds), [this] { return done_; })) {
        std::fprintf(stderr, "WATCHDOG: %s did not finish within %d s: hang\n", what_.c_str(), seconds);
        if (onTimeout_) onTimeout_();
        std::fflush(stderr);
        _exit(97);
      }
    });
    // Return only once the thread sleeps in wait_for (it released mu_ there): a starting
    // thread allocates, and a test that forks right after us must not fork while it holds
    // an allocator lock (ASan's allocator is not fork-safe; the child would deadlock).
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return started_; });
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
  std::function<void()> onTimeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  bool started_ = false;
  std::thread thread_;
};

// Reports a failed NCCL call (with the library's last error) as a test failure.
// Returns true when res is ncclSuccess, so bodies can write `if (!ncclOk(...)) return false;`.
inline bool ncclOk(ncclResult_t res, const std::string& what, int rank = -1) {
  if (res == ncclSuccess) return true;
  ADD_FAILURE() << "rank " << rank << ": " << what << " returned " << ncclGetErrorString(res) << " ("
                << int(res) << "): " << ncclGetLastError(nullptr);
  return false;
}

// Runs body on n ranks. Threads: ncclCommInitAll + one thread per rank. Processes: the
// parent forks n children, then creates the unique id; they join with ncclCommInitRank.
// A watchdog turns a hang into a failure naming the ranks that had not finished.
inline void runRanks(Mode mode, int n, const RankBody& body, int timeoutSec = 120) {
  std::string what = std::string(modeName(mode)) + " run with " + std::to_string(n) + " ranks";
  if (mode == Mode::kThreads) {
    std::vector<std::atomic<bool>> finished(n);
    for (auto& f : finished) f = false;
    Watchdog dog(timeoutSec, what, [&] {
      std::fprintf(stderr, "WATCHDOG: ranks still running:");
      for (int r = 0; r < n; ++r)
        if (!finished[r]) std::fprintf(stderr, " %d", r);
      std::fprintf(stderr, "\n");
    });
    std::vector<ncclComm_t> comms(n);
    ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        if (!body(comms[r], r, n)) failures++;
        finished[r] = true;
      });
    for (auto& t : threads) t.join();
    for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
    EXPECT_EQ(failures.load(), 0) << what;
    return;
  }
  // The children are forked before this process starts any thread that allocates (the
  // bootstrap root of ncclGetUniqueId, the watchdog): a fork while another thread holds an
  // allocator lock (ASan's in particular) leaves the child deadlocked. They wait for the
  // id in shared memory, as ranks of a real job wait for it from their launcher.
  struct IdBox {
    std::atomic<int> state;  // 0: not yet, 1: id valid, 2: the parent failed to make one
    ncclUniqueId id;
  };
  void* box = mmap(nullptr, sizeof(IdBox), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(box, MAP_FAILED);
  auto* idBox = new (box) IdBox{};
  std::vector<pid_t> pids;
  pids.reserve(n);  // the watchdog reads pids: no reallocation while it may run
  pid_t parent = getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  for (int r = 0; r < n; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      for (pid_t p : pids) kill(p, SIGKILL);
      FAIL() << "fork failed";
    }
    if (pid == 0) {
      // Die with the test process (e.g. when its watchdog fires).
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(3);
      for (int waited = 0; idBox->state.load(std::memory_order_acquire) == 0; ++waited) {
        if (waited > timeoutSec * 1000) _exit(4);
        usleep(1000);
      }
      if (idBox->state.load(std::memory_order_acquire) != 1) _exit(5);
      ncclComm_t comm = nullptr;
      ncclResult_t res = ncclCommInitRank(&comm, n, idBox->id, r);
      if (res != ncclSuccess) {
        std::fprintf(stderr, "rank %d: ncclCommInitRank: %s\n", r, ncclGetLastError(nullptr));
        _exit(2);
      }
      bool ok = body(comm, r, n) && !::testing::Test::HasFailure();
      if (ncclCommDestroy(comm) != ncclSuccess) {
        std::fprintf(stderr, "rank %d: ncclCommDestroy: %s\n", r, ncclGetLastError(nullptr));
        ok = false;
      }
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  Watchdog dog(timeoutSec, what, [&] {
    // Name the children that have not exited (WNOWAIT: do not reap), then kill them all.
    std::fprintf(stderr, "WATCHDOG: ranks still running:");
    for (size_t r = 0; r < pids.size(); ++r) {
      siginfo_t info{};
      if (waitid(P_PID, pids[r], &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0)
        std::fprintf(stderr, " %zu", r);
    }
    std::fprintf(stderr, "\n");
    for (pid_t p : pids) kill(p, SIGKILL);
  });
  ncclResult_t idRes = ncclGetUniqueId(&idBox->id);
  idBox->state.store(idRes == ncclSuccess ? 1 : 2, std::memory_order_release);
  EXPECT_EQ(idRes, ncclSuccess) << ncclGetLastError(nullptr);
  for (int r = 0; r < n; ++r) {
    int status = 0;
    waitpid(pids[r], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << what << ": rank " << r << " ended with status " << status;
  }
  munmap(box, sizeof(IdBox));
}

// Body of the single-thread multi-communicator pattern (nccl-tests -g): one thread owns
// every communicator of the clique.
using CliqueBody = std::function<bool(const std::vector<ncclComm_t>& comms)>;

// ncclCommInitAll(n) and body on the calling thread, under a watchdog.
inline void runOneThread(int n, const CliqueBody& body, int timeoutSec = 120) {
  std::string what = "single-thread run with " + std::to_string(n) + " communicators";
  Watchdog dog(timeoutSec, what);
  std::vector<ncclComm_t> comms(n);
  ASSERT_EQ(ncclCommInitAll(comms.data(), n, nullptr), ncclSuccess) << ncclGetLastError(nullptr);
  EXPECT_TRUE(body(comms)) << what;
  for (auto c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

}  // namespace sntest
