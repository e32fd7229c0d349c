// The issue order of a communicator's operations: tickets, and the turn of each.
//
// Operations execute in issue order: take() hands out tickets when an operation is
// issued, its runner waits for its turn and calls finish() when it is done. Taking a
// ticket, and finding one's turn has come, take no lock (the common case: one thread
// issuing blocking calls). A thread that must wait registers in waiters_ before it
// re-checks done_ under mutex_; a finisher bumps done_, then notifies cv_ only when it
// sees a waiter (both sequentially consistent, so one of the two always sees the other).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace snccl {

class CommOrdering {
 public:
  // A new ticket, in issue order (no lock).
  uint64_t take() { return issued_.fetch_add(1); }
  // Whether every ticket before `ticket` has finished (no lock).
  bool isTurn(uint64_t ticket) const { return done_.load() == ticket; }

  enum class Wait { kTurn, kAborted, kTimedOut };
  // Waits until isTurn(ticket), or `abort` is set, or timeoutNs (> 0) passed. Takes the
  // lock: callers try isTurn() first.
  Wait waitTurn(uint64_t ticket, const std::atomic<bool>& abort, int64_t timeoutNs);
  // Ends the running ticket's turn, waking waiters only if there are any.
  void finish() {
    done_.fetch_add(1);
    if (waiters_.load() != 0) {
      // Taking the lock orders this notify after a waiter's check-then-wait.
      std::lock_guard<std::mutex> lock(mutex_);
      cv_.notify_all();
    }
  }
  // Waits until every ticket issued so far has finished.
  void waitAll();
  // Runners queued on a stream are counted from their creation until their destruction,
  // which a stream's worker may finish after their tickets (core/executor.h, LiveToken).
  void runnerBorn() { runners_.fetch_add(1); }
  void runnerGone() { runners_.fetch_sub(1, std::memory_order_release); }
  // Waits until no counted runner is left (before the communicator is freed).
  void waitRunnersGone();

  uint64_t collSeq = 0;  // collectives issued; the basis of operation signatures

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> issued_{0};
  std::atomic<uint64_t> done_{0};
  std::atomic<uint32_t> waiters_{0};
  std::atomic<int64_t> runners_{0};
};

}  // namespace snccl
