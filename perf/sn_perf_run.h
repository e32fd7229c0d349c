// Process-wide state of a perf run, shared by the threads that drive its ranks.
#pragma once

#include <atomic>
#include <barrier>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sn_perf.h"
#include "sn_perf_colls.h"
#include "sn_perf_report.h"

namespace snperf {

// -T: when no operation completes for the given time, abort the communicators of this
// process, print nccl-tests' timeout line and exit 4. Started before the launch mode
// connects, so a peer that never shows up is caught too.
class Watchdog {
 public:
  ~Watchdog() { stop(); }
  void start(int seconds, std::string host);
  void stop();
  // Called once per operation: a counter, not a clock read (tens of ns on a virtual machine, a
  // tenth of an 8 B AllReduce). The watchdog thread notices when it stops moving.
  // seconds_ is set before any thread runs operations; without -T nothing is written.
  void beat() {
    if (seconds_ > 0) beats_.store(beats_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  bool fired() const { return fired_.load(); }
  void add(ncclComm_t comm);
  // Out of the list before it is destroyed: a destroyed communicator is never aborted.
  void remove(ncclComm_t comm);

 private:
  static int64_t nowNs();
  [[noreturn]] void fire();

  int seconds_ = 0;
  std::string host_;
  std::atomic<uint64_t> beats_{0};
  std::atomic<bool> fired_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::timed_mutex mutex_;
  std::vector<ncclComm_t> comms_;
};

// One thread's contribution to a result, read by the first thread of its process.
struct ThreadSlot {
  double time = 0;
  uint64_t wrong = 0;
};

struct Job {
  Job(const Options& o, const CollDesc& c, Coordinator& co, Report& r, Watchdog& d, int threads)
      : opt(o), coll(c), coord(co), report(r), dog(d), bar(threads), slots(threads), iterUs(threads) {}

  const Options& opt;
  const CollDesc& coll;
  Coordinator& coord;
  Report& report;
  Watchdog& dog;
  int nProcs = 1;
  int proc = 0;
  int nRanks = 1;
  size_t minBytes = 0;
  size_t maxBytes = 0;
  std::string host;
  ncclUniqueId id{};
  std::barrier<> bar;
  std::vector<ThreadSlot> slots;
  std::vector<std::vector<double>> iterUs;  // -I 1: each thread's time per timed call
  bool injectWrong = false;  // SNCCL_PERF_INJECT_WRONG: the test suite's corruption hook
  double progressSec = 10;   // SNCCL_PERF_PROGRESS: seconds between progress lines, 0 = never
  uint64_t localErrorResults = 0;  // results with wrong data on this process's ranks
};

// Runs thread `t`'s part of the sweep (t == 0 also aggregates, prints and reports).
void runThread(Job& job, int t);

// nccl-tests' failure lines, then the whole job ends with the matching exit code.
[[noreturn]] void failNccl(Job& job, ncclResult_t r, ncclComm_t comm, const char* file, int line);
[[noreturn]] void failInternal(Job& job, const std::string& what, const char* file, int line);

// The sizes of the sweep, in order.
std::vector<size_t> sweepSizes(const Options& o, size_t minBytes, size_t maxBytes);

}  // namespace snperf
