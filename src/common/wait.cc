// Futex wrappers and the spin/yield/sleep backoff.
#include "common/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "common/params.h"

namespace snccl {

void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeoutUs) {
  struct timespec ts;
  ts.tv_sec = timeoutUs / 1000000;
  ts.tv_nsec = (timeoutUs % 1000000) * 1000;
  // Not FUTEX_PRIVATE: the word may live in memory shared with another process.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futexWakeAll(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

Backoff::Phase Backoff::idle(int64_t extendNs) {
  // Most waits of a small operation end within the first polls: they read no clock. The
  // budgets count from the 16th call; after it the clock is read every 16th, as reading
  // it costs tens of ns.
  ++iter_;
  if (iter_ < 16) {
    cpuRelax();
    return Phase::kSpin;
  }
  if (iter_ == 16) {
    startNs_ = nowNs();
    elapsedNs_ = 0;
  } else if ((iter_ & 15) == 0) {
    elapsedNs_ = nowNs() - startNs_;
  }
  if (elapsedNs_ < spinNs_) {
    cpuRelax();
    return Phase::kSpin;
  }
  if (elapsedNs_ < spinNs_ + yieldNs_) {
    sched_yield();
    return Phase::kYield;
  }
  if (elapsedNs_ < spinNs_ + yieldNs_ + extendNs) {
    if (yieldNs_ > 0) {
      sched_yield();
      return Phase::kYield;
    }
    cpuRelax();
    return Phase::kSpin;
  }
  return Phase::kSleep;
}

int64_t spinBudgetUs(bool oversubscribed) {
  int64_t spin = params::getIntClamped(params::Id::SpinUs, 0, INT64_MAX);
  // With more threads than CPUs, a spinning waiter holds the CPU its peer needs, so it
  // yields at once (Backoff still polls 16 times first). On 2 cores, a 125 us spin made
  // np=4 small AllReduces 10x slower than a 2.5 us one, and no spin at all beat 2.5 us by
  // 1.5-2x at np=4 (8 B-4 KiB, medians of 3: 19-27 vs 32-39 us) and by 5-20% at np=8.
  // Two ranks confined to one CPU (taskset -c 0) with the default 1 ms spin took 1 ms per
  // 8 B AllReduce, against 2-4 us once they polled, yielded and slept instead.
  // An explicit SNCCL_SPIN_US wins: the user may know that the CPUs are free for it.
  if (oversubscribed && !params::isSet(params::Id::SpinUs)) spin = 0;
  return spin < 0 ? 0 : spin;
}

int64_t yieldBudgetUs(bool oversubscribed) { return oversubscribed ? 500 : 0; }

}  // namespace snccl
