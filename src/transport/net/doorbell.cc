// Doorbell: futex_waitv over the ring words, eventfd towards the proxy's poll().
#include "transport/net/doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include "common/wait.h"

namespace snccl::net {

namespace {

#ifdef SYS_futex_waitv
constexpr long kFutexWaitv = SYS_futex_waitv;
#else
constexpr long kFutexWaitv = 449;  // the number on every architecture that has it
#endif

futex_waitv waiter(std::atomic<uint32_t>* word, uint32_t expected) {
  futex_waitv w{};
  w.val = expected;
  w.uaddr = reinterpret_cast<uintptr_t>(word);
  w.flags = FUTEX_32;  // shared (no FUTEX_PRIVATE_FLAG), like futexWakeAll's FUTEX_WAKE
  return w;
}

// Blocks until one of the words differs from its expected value or is woken.
long waitv(futex_waitv* w, unsigned n) { return syscall(kFutexWaitv, w, n, 0, nullptr, CLOCK_MONOTONIC); }

bool probeWaitv() {
  std::atomic<uint32_t> word{1};
  futex_waitv w = waiter(&word, 0);  // mismatch: returns EAGAIN at once where supported
  return waitv(&w, 1) == 0 || errno != ENOSYS;
}

}  // namespace

Doorbell::Doorbell(int eventFd) : eventFd_(eventFd) {
  available_ = probeWaitv();
  if (available_) thread_ = std::thread([this] { run(); });
}

Doorbell::~Doorbell() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  control_.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(&control_);
  if (thread_.joinable()) thread_.join();
}

void Doorbell::setWords(std::vector<std::atomic<uint32_t>*> words) {
  if (!available_) return;
  if (words.size() > kMaxWords) words.resize(kMaxWords);
  std::unique_lock<std::mutex> lock(mu_);
  words_ = std::move(words);
  uint64_t gen = ++generation_;
  control_.fetch_add(1, std::memory_order_seq_cst);
  futexWakeAll(&control_);
  cv_.wait(lock, [&] { return adopted_ >= gen || stop_; });
}

void Doorbell::run() {
  std::vector<std::atomic<uint32_t>*> words;
  std::vector<uint32_t> seen;  // the value of each word when we last rang (or adopted it)
  std::vector<futex_waitv> w;
  uint64_t gen = 0;
  for (;;) {
    uint32_t control = control_.load(std::memory_order_seq_cst);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      if (generation_ != gen) {
        // Words kept from the old list keep what we saw of them; new ones start now.
        std::vector<uint32_t> next;
        for (auto* word : words_) {
          auto it = std::find(words.begin(), words.end(), word);
          next.push_back(it != words.end() ? seen[size_t(it - words.begin())] : word->load(std::memory_order_seq_cst));
        }
        gen = generation_;
        words = words_;
        seen = std::move(next);
      }
      adopted_ = gen;
    }
    cv_.notify_all();
    // Compare with what we saw before, not with a fresh read: a bump that happened while
    // this thread was busy ringing must still ring, or the proxy sleeps through it.
    bool moved = false;
    for (size_t i = 0; i < words.size(); ++i) {
      uint32_t now = words[i]->load(std::memory_order_seq_cst);
      moved = moved || now != seen[i];
      seen[i] = now;
    }
    if (moved) {
      uint64_t one = 1;
      ssize_t k = write(eventFd_, &one, sizeof one);
      (void)k;
    }
    w.clear();
    for (size_t i = 0; i < words.size(); ++i) w.push_back(waiter(words[i], seen[i]));
    w.push_back(waiter(&control_, control));
    // Returns when a word moves or differs from `seen` already (EAGAIN); the next pass
    // finds out which and rings.
    (void)waitv(w.data(), unsigned(w.size()));
  }
}

}  // namespace snccl::net
