// Waiting without burning the machine: spin briefly, then yield, then sleep on a futex.
//
// A virtual machine charges ~10 us for a futex wake-up and ~1 us per system call: a wait spins
// first (cheap when the peer runs on another core), yields when cores are oversubscribed
// (8 ranks on 2 cores must still finish quickly), and only then sleeps. Every sleep has a
// bounded timeout so the caller can check its deadline, the abort flag and peer liveness.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace snccl {

inline void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Process-shared futex on a 32-bit word (works across processes mapping the same page).
// Returns when *word != expected, on a wake-up, or after timeoutUs (spurious returns allowed).
void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeoutUs);
void futexWakeAll(std::atomic<uint32_t>* word);

// Escalating backoff for one wait: call idle() each time no progress was made and reset()
// after progress. idle() returns the phase it is in, so the caller knows when to sleep.
class Backoff {
 public:
  enum class Phase { kSpin, kYield, kSleep };

  // spinUs: how long to spin before yielding; yieldUs: how long to yield before sleeping.
  Backoff(int64_t spinUs, int64_t yieldUs) : spinNs_(spinUs * 1000), yieldNs_(yieldUs * 1000) {}

  void reset() { iter_ = 0; }
  // Spins or yields once, or returns kSleep when the caller should sleep on a futex.
  // extendNs: how much longer than the two budgets this wait polls before kSleep (a wait
  // on a ring polled in user space, SNCCL_NET_POLL_US); it goes on yielding where the
  // budgets yield (yieldUs > 0), else spinning.
  Phase idle(int64_t extendNs = 0);

  static int64_t nowNs() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  int64_t spinNs_;
  int64_t yieldNs_;
  int64_t startNs_ = 0;
  int64_t elapsedNs_ = 0;
  uint64_t iter_ = 0;  // calls since the last reset (64 bits: never wraps)
};

// Spin budget of a rank: SNCCL_SPIN_US, or 0 when the threads that must progress outnumber
// the CPUs they may run on (`oversubscribed`, common/cpu_set.h: spinning then only steals
// the time slice of the thread it waits for), unless the user set SNCCL_SPIN_US.
int64_t spinBudgetUs(bool oversubscribed);

// How long a rank yields (sched_yield) between spinning and sleeping: only when
// oversubscribed. Otherwise each thread has a CPU, and a yield only hands ours to
// unrelated load for a whole time slice (milliseconds) while the peer's message is about
// to arrive.
int64_t yieldBudgetUs(bool oversubscribed);

}  // namespace snccl
