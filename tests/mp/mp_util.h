// Helpers shared by the API, fault and logging tests of tests/mp: ranks as threads with a
// watchdog, forked children with a deadline, message checks and small collective checks.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "snccl/nccl.h"
#include "snccl/snccl.h"
#include "support/harness.h"

namespace mp {

inline std::string lastError() { return ncclGetLastError(nullptr); }

inline std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower((unsigned char)c));
  return s;
}

// Case-insensitive substring check that ignores spaces ("min CTAs" matches "minCTAs").
inline ::testing::AssertionResult Mentions(const std::string& text, const std::string& what) {
  auto squash = [](const std::string& s) {
    std::string out;
    for (char c : s)
      if (c != ' ') out += char(std::tolower((unsigned char)c));
    return out;
  };
  if (squash(text).find(squash(what)) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "message does not mention '" << what << "': \"" << text << "\"";
}

inline double nowSec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // system-wide: comparable across processes
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Runs fn(rank) on n threads under a watchdog.
inline void parallel(int n, const std::function<void(int)>& fn, int timeoutSec = 120, const char* what = "threads") {
  sntest::Watchdog dog(timeoutSec, what);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// n communicators of one clique (ncclCommInitAll), destroyed at scope end.
class CommSet {
 public:
  explicit CommSet(int n, const int* devlist = nullptr) : comms_(n, nullptr) {
    ncclResult_t res = ncclCommInitAll(comms_.data(), n, devlist);
    EXPECT_EQ(res, ncclSuccess) << "ncclCommInitAll(" << n << "): " << lastError();
    if (res != ncclSuccess) comms_.assign(n, nullptr);
  }
  ~CommSet() {
    for (ncclComm_t c : comms_) {
      if (c != nullptr) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess) << lastError();
      }
    }
  }
  CommSet(const CommSet&) = delete;
  CommSet& operator=(const CommSet&) = delete;
  bool ok() const { return !comms_.empty() && comms_[0] != nullptr; }
  ncclComm_t operator[](int i) const { return comms_[i]; }
  int size() const { return int(comms_.size()); }
  // Gives up ownership of comm i (the test destroyed or aborted it itself).
  void release(int i) { comms_[i] = nullptr; }

 private:
  std::vector<ncclComm_t> comms_;
};

// Waits until a (possibly non-blocking) communicator has no pending work; returns its state.
inline ncclResult_t waitComm(ncclComm_t comm, int timeoutSec = 60) {
  double deadline = nowSec() + timeoutSec;
  ncclResult_t state = ncclInProgress;
  while (nowSec() < deadline) {
    ncclResult_t r = ncclCommGetAsyncError(comm, &state);
    if (r != ncclSuccess) return r;
    if (state != ncclInProgress) return state;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return ncclInProgress;
}

// Resolves a call's result for a non-blocking communicator: ncclInProgress means "poll".
inline ncclResult_t settle(ncclResult_t res, ncclComm_t comm) {
  return res == ncclInProgress ? waitComm(comm) : res;
}

// Every rank contributes value[i] = myValue * (1 + i % 7); checks the sum equals
// expectedSum * (1 + i % 7). Returns false (with a gtest failure) on any problem.
inline bool allreduceCheck(ncclComm_t comm, int64_t myValue, int64_t expectedSum, size_t count = 1031,
                           cudaStream_t stream = nullptr, const char* what = "allreduce") {
  std::vector<int64_t> in(count), out(count, -1);
  for (size_t i = 0; i < count; ++i) in[i] = myValue * int64_t(1 + i % 7);
  ncclResult_t res = settle(ncclAllReduce(in.data(), out.data(), count, ncclInt64, ncclSum, comm, stream), comm);
  if (res == ncclSuccess && stream != nullptr) res = sncclStreamSynchronize((sncclStream_t)stream);
  if (res != ncclSuccess) {
    ADD_FAILURE() << what << ": " << ncclGetErrorString(res) << ": " << lastError();
    return false;
  }
  for (size_t i = 0; i < count; ++i)
    if (out[i] != expectedSum * int64_t(1 + i % 7)) {
      ADD_FAILURE() << what << ": element " << i << " is " << out[i] << ", expected " << expectedSum * int64_t(1 + i % 7);
      return false;
    }
  return true;
}

// Allgather of one int per rank; returns the gathered vector (empty on failure).
inline std::vector<int> allgatherInts(ncclComm_t comm, int mine) {
  int n = 0;
  if (ncclCommCount(comm, &n) != ncclSuccess) return {};
  std::vector<int> out(size_t(n), -1);
  ncclResult_t res = settle(ncclAllGather(&mine, out.data(), 1, ncclInt32, comm, nullptr), comm);
  if (res != ncclSuccess) {
    ADD_FAILURE() << "allgather: " << ncclGetErrorString(res) << ": " << lastError();
    return {};
  }
  return out;
}

// Forks a child that runs fn and exits with its return value; a crash or a hang beyond
// timeoutSec is reported. Returns the exit code, or 128 + signal, or -1 on timeout (-2:
// no fork). childPid, when given, gets the child's pid.
inline int runChild(const std::function<int()>& fn, int timeoutSec = 60, std::string* how = nullptr,
                    pid_t* childPid = nullptr) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) return -2;
  if (childPid != nullptr) *childPid = pid;
  if (pid == 0) {
    int rc = 99;
    rc = fn();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(rc);
  }
  double deadline = nowSec() + timeoutSec;
  int status = 0;
  for (;;) {
    pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (nowSec() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      if (how) *how = "timed out (hang)";
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (WIFSIGNALED(status)) {
    if (how) *how = std::string("killed by signal ") + strsignal(WTERMSIG(status));
    return 128 + WTERMSIG(status);
  }
  if (how) *how = "exit code " + std::to_string(WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

// Memory shared by a parent and all its forked descendants.
template <typename T>
T* sharedBlock(size_t n = 1) {
  void* p = mmap(nullptr, sizeof(T) * n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, 0, sizeof(T) * n);
  return static_cast<T*>(p);
}
template <typename T>
void freeShared(T* p, size_t n = 1) {
  if (p) munmap(p, sizeof(T) * n);
}

}  // namespace mp
