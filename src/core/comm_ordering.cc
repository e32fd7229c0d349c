#include "core/comm_ordering.h"

#include <chrono>
#include <thread>

#include "common/wait.h"

namespace snccl {

CommOrdering::Wait CommOrdering::waitTurn(uint64_t ticket, const std::atomic<bool>& abort, int64_t timeoutNs) {
  std::unique_lock<std::mutex> lock(mutex_);
  waiters_.fetch_add(1);
  int64_t start = Backoff::nowNs();
  Wait result = Wait::kTurn;
  while (done_.load() != ticket) {
    if (abort.load()) {
      result = Wait::kAborted;
      break;
    }
    if (timeoutNs > 0 && Backoff::nowNs() - start > timeoutNs) {
      result = Wait::kTimedOut;
      break;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(10));
  }
  waiters_.fetch_sub(1);
  return result;
}

void CommOrdering::waitRunnersGone() {
  // Only destructors remain to run once every ticket has finished: a short wait.
  while (runners_.load(std::memory_order_acquire) != 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void CommOrdering::waitAll() {
  std::unique_lock<std::mutex> lock(mutex_);
  waiters_.fetch_add(1);
  while (done_.load() != issued_.load()) cv_.wait_for(lock, std::chrono::milliseconds(10));
  waiters_.fetch_sub(1);
}

}  // namespace snccl
