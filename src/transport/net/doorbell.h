// Doorbell: turns futex wake-ups on ring words into readiness of an eventfd, so the proxy
// can sleep in one poll() on its sockets and still wake when an executor posts a message
// or frees a slot.
//
// The executor side of a Connection announces work by bumping a futex word (tailSeq
// after a post, headSeq after a release) and waking it, but only while the other end's
// "sleeping" flag is set; the proxy sets those flags just before it sleeps. Linux cannot
// poll() a futex, so a small thread waits on all the words at once (futex_waitv, Linux
// 5.16+) and writes the eventfd when one moves. Where futex_waitv is missing, or for words
// beyond the first kMaxWords, available() says so and the proxy falls back to a short
// poll timeout instead.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace snccl::net {

class Doorbell {
 public:
  static constexpr size_t kMaxWords = 127;  // FUTEX_WAITV_MAX less the control word

  // eventFd: written (value 1) whenever a watched word moves; not owned.
  explicit Doorbell(int eventFd);
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  // False when futex_waitv is unavailable: the caller must poll on a timer.
  bool available() const { return available_; }

  // Replaces the watched words and returns once the waiting thread no longer uses the
  // previous ones (their memory may be freed afterwards). Words past kMaxWords are not
  // watched.
  void setWords(std::vector<std::atomic<uint32_t>*> words);

 private:
  void run();

  const int eventFd_;
  bool available_ = false;
  std::atomic<uint32_t> control_{0};  // bumped by setWords and the destructor
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::atomic<uint32_t>*> words_;  // guarded by mu_
  uint64_t generation_ = 0;                    // of words_, guarded by mu_
  uint64_t adopted_ = 0;                       // generation the thread waits on, guarded by mu_
  bool stop_ = false;                          // guarded by mu_
  std::thread thread_;
};

}  // namespace snccl::net
