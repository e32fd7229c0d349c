// Multi-"node" runs for the net tests: ranks as forked processes, grouped into nodes by
// SNCCL_HOSTID and optionally placed in network namespaces, under a watchdog.
//
// Parameters are read once per process, so the gtest process never calls snccl: every
// rank sets its environment (and joins its namespace) right after fork, and rank 0
// creates the unique id and publishes it to the others through shared memory.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "snccl/nccl.h"
#include "support/harness.h"

namespace nettest {

constexpr int kMaxRanks = 16;

inline double nowSec() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct RankReport {
  int code;        // result of the call the test cares about (ncclResult_t), -1: not reached
  int iters;       // iterations completed (loops)
  double tEnd;     // when that call returned
  int asyncCode;   // ncclCommGetAsyncError() after it (tests that record it)
  char msg[1500];  // failure text or ncclGetLastError()
};

struct Shared {
  ncclUniqueId id;
  int idState;     // 0 pending, 1 ready, 2 failed
  int go;          // set by the parent for tests that inject a fault while ranks run
  int initDone;    // ranks whose ncclCommInitRank returned (either way)
  int finished;    // ranks done with their last call, for tests that end together
  RankReport r[kMaxRanks];
};

struct Cluster {
  int nranks = 2;
  int ranksPerNode = 1;
  std::vector<std::string> netns;  // per node; empty: all in the test's namespace
  std::vector<std::pair<std::string, std::string>> env;
  // Per rank, set after env (a setting only some ranks have); may be shorter than nranks.
  std::vector<std::vector<std::pair<std::string, std::string>>> rankEnv;
  int timeoutSec = 180;
};

// A rank's work. Returns success; sets *abort to end with ncclCommAbort instead of
// ncclCommDestroy (after an expected failure).
using Body = std::function<bool(ncclComm_t comm, int rank, int nranks, Shared* sh, bool* abort)>;
// Runs in the parent while the ranks run (fault injection); may be empty.
using Supervise = std::function<void(Shared* sh, const std::vector<pid_t>& pids)>;

inline void report(Shared* sh, int rank, int code, const std::string& msg) {
  RankReport& r = sh->r[rank];
  r.code = code;
  r.tEnd = nowSec();
  std::snprintf(r.msg, sizeof r.msg, "%s", msg.c_str());
}

// Enters the namespace as `ip netns exec` does, with /sys remounted in a mount namespace
// of the rank's own, so that what reads /sys/class/net (UCX's device list) sees the
// namespace's interfaces and not the host's. Remounting is best effort.
inline bool joinNetns(const std::string& name) {
  int fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  if (ok && unshare(CLONE_NEWNS) == 0 && mount("", "/", nullptr, MS_SLAVE | MS_REC, nullptr) == 0 &&
      umount2("/sys", MNT_DETACH) == 0)
    (void)mount(name.c_str(), "/sys", "sysfs", 0, nullptr);
  return ok;
}

[[noreturn]] inline void rankMain(const Cluster& c, int rank, Shared* sh, const Body& body, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(3);
  int node = rank / c.ranksPerNode;
  if (!c.netns.empty() && !joinNetns(c.netns[size_t(node)])) {
    report(sh, rank, -1, "cannot join network namespace " + c.netns[size_t(node)]);
    _exit(4);
  }
  for (const auto& [k, v] : c.env) setenv(k.c_str(), v.c_str(), 1);
  if (size_t(rank) < c.rankEnv.size())
    for (const auto& [k, v] : c.rankEnv[size_t(rank)]) setenv(k.c_str(), v.c_str(), 1);
  setenv("SNCCL_HOSTID", ("nettest-node-" + std::to_string(node)).c_str(), 1);
  // The log reads NCCL_DEBUG* once per process: a parent that logged before forking (a
  // test that drove a net in-process) would hand its rank its own configuration.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  if (rank == 0) {
    ncclResult_t res = ncclGetUniqueId(&sh->id);
    __atomic_store_n(&sh->idState, res == ncclSuccess ? 1 : 2, __ATOMIC_RELEASE);
    if (res != ncclSuccess) {
      report(sh, rank, res, std::string("ncclGetUniqueId: ") + ncclGetLastError(nullptr));
      _exit(2);
    }
  } else {
    double deadline = nowSec() + 60;
    while (__atomic_load_n(&sh->idState, __ATOMIC_ACQUIRE) == 0 && nowSec() < deadline) usleep(1000);
    if (__atomic_load_n(&sh->idState, __ATOMIC_ACQUIRE) != 1) _exit(2);
  }
  ncclComm_t comm = nullptr;
  ncclResult_t res = ncclCommInitRank(&comm, c.nranks, sh->id, rank);
  __atomic_add_fetch(&sh->initDone, 1, __ATOMIC_ACQ_REL);
  if (res != ncclSuccess) {
    report(sh, rank, res, std::string("ncclCommInitRank: ") + ncclGetLastError(nullptr));
    _exit(2);
  }
  bool abort = false;
  bool ok = body(comm, rank, c.nranks, sh, &abort);
  if (abort) {
    ncclCommAbort(comm);
  } else if (ncclCommDestroy(comm) != ncclSuccess) {
    report(sh, rank, -1, std::string("ncclCommDestroy: ") + ncclGetLastError(nullptr));
    ok = false;
  }
  // Rank 0 hosts the bootstrap root: it stays until every rank is through init, so a
  // rank that fails fast does not turn a slow peer's init into a different failure.
  if (rank == 0) {
    double deadline = nowSec() + 60;
    while (__atomic_load_n(&sh->initDone, __ATOMIC_ACQUIRE) < c.nranks && nowSec() < deadline) usleep(1000);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(ok ? 0 : 1);
}

struct Outcome {
  std::vector<int> status;  // waitpid status per rank
  std::vector<RankReport> reports;
  bool allExitedZero() const {
    for (int s : status)
      if (!WIFEXITED(s) || WEXITSTATUS(s) != 0) return false;
    return true;
  }
  std::string describe() const {
    std::string out;
    for (size_t r = 0; r < status.size(); ++r) {
      out += "rank " + std::to_string(r) + ": status " + std::to_string(status[r]);
      if (reports[r].msg[0] != '\0') out += " (" + std::string(reports[r].msg) + ")";
      out += "\n";
    }
    return out;
  }
};

// Runs body on every rank; the watchdog kills the ranks (and runs onHang, e.g. namespace
// cleanup) if they are not done within c.timeoutSec.
inline Outcome runCluster(const Cluster& c, const Body& body, const Supervise& supervise = {},
                          const std::function<void()>& onHang = {}) {
  Outcome out;
  auto* sh = static_cast<Shared*>(
      mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  if (sh == MAP_FAILED) {
    ADD_FAILURE() << "mmap of the shared block failed";
    return out;
  }
  std::memset(static_cast<void*>(sh), 0, sizeof *sh);
  for (int r = 0; r < c.nranks; ++r) sh->r[r].code = -1;
  std::vector<pid_t> pids;
  pids.reserve(size_t(c.nranks));
  std::string what = std::to_string(c.nranks) + " ranks, " + std::to_string(c.ranksPerNode) + " per node";
  pid_t parent = getpid();
  std::fflush(stdout);
  std::fflush(stderr);
  // Fork before the watchdog thread exists: a child forked while another thread holds an
  // allocator lock (sanitizer allocators have no fork handlers) would deadlock in malloc.
  for (int r = 0; r < c.nranks; ++r) {
    pid_t pid = fork();
    if (pid == 0) rankMain(c, r, sh, body, parent);
    if (pid < 0) {
      ADD_FAILURE() << "fork failed";
      break;
    }
    pids.push_back(pid);
  }
  sntest::Watchdog dog(c.timeoutSec, what, [&] {
    std::fprintf(stderr, "WATCHDOG: ranks still running:");
    for (size_t r = 0; r < pids.size(); ++r) {
      siginfo_t info{};
      if (waitid(P_PID, pids[r], &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == 0)
        std::fprintf(stderr, " %zu", r);
    }
    std::fprintf(stderr, "\n");
    for (pid_t p : pids) kill(p, SIGKILL);
    if (onHang) onHang();
  });
  if (supervise) supervise(sh, pids);
  out.status.assign(pids.size(), -1);
  for (size_t r = 0; r < pids.size(); ++r) waitpid(pids[r], &out.status[r], 0);
  dog.disarm();
  out.reports.assign(sh->r, sh->r + c.nranks);
  munmap(sh, sizeof *sh);
  return out;
}

}  // namespace nettest
