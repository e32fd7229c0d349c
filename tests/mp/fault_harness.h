// Ranks as forked processes for the fault tests (test_faults.cc, test_flight.cc): a
// coordinator that sets the environment, creates the unique id and forks the ranks, and
// results that come back through shared memory.
//
// The gtest process itself never calls snccl (parameters are read once per process).
#pragma once

// GCC 12 reports a false -Wmaybe-uninitialized inside <regex> when built with sanitizers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <signal.h>
#include <sys/wait.h>

#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mp/mp_util.h"

namespace faults {

using mp::nowSec;

constexpr int kMaxRanks = 8;

struct RankResult {
  int code;       // result of the call under test (ncclResult_t), -1 = not reached
  int done;       // the rank finished its work (it may linger afterwards)
  int iters;      // collectives completed
  double tEnd;    // when the call under test returned
  double tExtra;  // seconds some secondary call took (abort, destroy)
  int status;     // wait status of the process (set by the coordinator)
  int exited;
  char msg[1500];
};

struct Shared {
  ncclUniqueId id;
  RankResult r[kMaxRanks];
  double tEvent;  // when the fault happened (kill, abort)
  int stop;       // lingering ranks may exit
  int go;         // a supervisor's signal to the ranks, for the tests that need one
  uint64_t measured;  // what a supervisor measured (it runs in the coordinator's process)
  int idState;    // 0: not yet, 1: id valid, 2: the coordinator failed to make one
  int coordinatorOk;
  char coordinatorMsg[256];
};

using RankFn = std::function<void(int rank, Shared* sh)>;
using SuperviseFn = std::function<void(Shared* sh, const std::vector<pid_t>& pids)>;

inline void record(Shared* sh, int rank, ncclResult_t code) {
  RankResult& r = sh->r[rank];
  r.tEnd = nowSec();
  r.code = code;
  std::snprintf(r.msg, sizeof r.msg, "%s", ncclGetLastError(nullptr));
}

inline void linger(Shared* sh, double maxSec) {
  double end = nowSec() + maxSec;
  while (!__atomic_load_n(&sh->stop, __ATOMIC_ACQUIRE) && nowSec() < end) usleep(2000);
}

inline ncclComm_t initRank(Shared* sh, int rank, int n) {
  ncclComm_t comm = nullptr;
  ncclResult_t res = ncclCommInitRank(&comm, n, sh->id, rank);
  if (res != ncclSuccess) {
    record(sh, rank, res);
    std::fprintf(stderr, "rank %d: init failed: %s\n", rank, ncclGetLastError(nullptr));
    return nullptr;
  }
  return comm;
}

// The coordinator: environment, id, ranks, prompt reaping, deadline.
// lateReap: this rank's process is not reaped (stays a zombie once dead) until every
// other rank has exited, as under a launcher that is slow to wait() for its children.
inline int coordinate(Shared* sh, int n, const std::vector<std::pair<std::string, std::string>>& env,
                      const RankFn& rankFn, const SuperviseFn& supervise, int deadlineSec, int lateReap) {
  for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
  for (int r = 0; r < n; ++r) sh->r[r].code = -1;
  // Ranks are forked before ncclGetUniqueId starts the bootstrap root thread here: a fork
  // while that thread holds an allocator lock (ASan's) would deadlock the child.
  std::vector<pid_t> pids(n);
  for (int r = 0; r < n; ++r) {
    pids[r] = fork();
    if (pids[r] == 0) {
      double idDeadline = nowSec() + deadlineSec;
      while (__atomic_load_n(&sh->idState, __ATOMIC_ACQUIRE) == 0 && nowSec() < idDeadline) usleep(1000);
      if (__atomic_load_n(&sh->idState, __ATOMIC_ACQUIRE) != 1) _exit(5);
      rankFn(r, sh);
      __atomic_store_n(&sh->r[r].done, 1, __ATOMIC_RELEASE);
      std::fflush(stdout);
      std::fflush(stderr);
      _exit(0);
    }
  }
  if (ncclGetUniqueId(&sh->id) != ncclSuccess) {
    std::snprintf(sh->coordinatorMsg, sizeof sh->coordinatorMsg, "ncclGetUniqueId: %s", ncclGetLastError(nullptr));
    __atomic_store_n(&sh->idState, 2, __ATOMIC_RELEASE);
    for (pid_t p : pids) waitpid(p, nullptr, 0);
    return 1;
  }
  __atomic_store_n(&sh->idState, 1, __ATOMIC_RELEASE);
  std::thread sup;
  if (supervise) sup = std::thread([&] { supervise(sh, pids); });
  double deadline = nowSec() + deadlineSec;
  int left = n;
  while (left > 0) {
    bool reaped = false;
    for (int r = 0; r < n; ++r) {
      if (sh->r[r].exited || (r == lateReap && left > 1)) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        sh->r[r].status = status, sh->r[r].exited = 1, --left;
        reaped = true;
      }
    }
    if (reaped) continue;
    bool allDone = true;
    for (int r = 0; r < n; ++r) allDone &= sh->r[r].exited || __atomic_load_n(&sh->r[r].done, __ATOMIC_ACQUIRE);
    if (allDone) __atomic_store_n(&sh->stop, 1, __ATOMIC_RELEASE);
    if (nowSec() > deadline) {
      std::snprintf(sh->coordinatorMsg, sizeof sh->coordinatorMsg, "ranks still running after %d s: hang", deadlineSec);
      for (int r = 0; r < n; ++r)
        if (!sh->r[r].exited) kill(pids[r], SIGKILL);
      deadline = nowSec() + 1e9;
    }
    usleep(1000);
  }
  if (sup.joinable()) sup.join();
  sh->coordinatorOk = sh->coordinatorMsg[0] == '\0';
  return sh->coordinatorOk ? 0 : 1;
}

// Runs a scenario; returns the shared results (caller frees with mp::freeShared).
inline Shared* runScenario(int n, const std::vector<std::pair<std::string, std::string>>& env, const RankFn& rankFn,
                           const SuperviseFn& supervise = nullptr, int deadlineSec = 90, int lateReap = -1) {
  Shared* sh = mp::sharedBlock<Shared>();
  if (sh == nullptr) return nullptr;
  std::string how;
  int rc = mp::runChild([&] { return coordinate(sh, n, env, rankFn, supervise, deadlineSec, lateReap); },
                        deadlineSec + 30, &how);
  EXPECT_EQ(rc, 0) << "coordinator: " << how << ": " << sh->coordinatorMsg;
  return sh;
}

inline std::string describe(const Shared* sh, int n) {
  std::ostringstream os;
  for (int r = 0; r < n; ++r) {
    const RankResult& x = sh->r[r];
    os << "  rank " << r << ": code " << x.code << " ("
       << (x.code >= 0 ? ncclGetErrorString(ncclResult_t(x.code)) : "-") << ") iters " << x.iters << " t "
       << (x.tEnd > 0 ? x.tEnd - sh->tEvent : 0.0) << " s, status " << x.status << ": " << x.msg << "\n";
  }
  return os.str();
}

inline bool namesRank(const std::string& msg, int rank) {
  return std::regex_search(msg, std::regex("\\brank " + std::to_string(rank) + "\\b"));
}

inline bool killedBySigkill(const RankResult& r) {
  return r.exited && WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGKILL;
}

// The supervisor's wait until every rank completed `iters` collectives (60 s at most).
inline void waitForIters(Shared* s, int n, int iters) {
  double end = nowSec() + 60;
  auto minIters = [&] {
    int m = 1 << 30;
    for (int r = 0; r < n; ++r) m = std::min(m, __atomic_load_n(&s->r[r].iters, __ATOMIC_ACQUIRE));
    return m;
  };
  while (minIters() < iters && nowSec() < end) usleep(1000);
}

// The supervisor of a stopped-rank scenario, once the ranks run: stops the victim
// (SIGSTOP, as a debugger would), waits until every survivor recorded its result (60 s at
// most), then kills the victim, which would otherwise never exit.
inline void stopUntilSurvivorsDone(Shared* s, int n, int victim, const std::vector<pid_t>& pids) {
  kill(pids[size_t(victim)], SIGSTOP);
  auto survivorsDone = [&] {
    for (int r = 0; r < n; ++r)
      if (r != victim && __atomic_load_n(&s->r[r].done, __ATOMIC_ACQUIRE) == 0) return false;
    return true;
  };
  const double end = nowSec() + 60;
  while (!survivorsDone() && nowSec() < end) usleep(2000);
  kill(pids[size_t(victim)], SIGKILL);
}

}  // namespace faults
