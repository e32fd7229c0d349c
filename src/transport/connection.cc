// Connection: the executor's end of the ring, out of line: posting, releasing, sleeping,
// poisoning.
#include "transport/connection.h"

#include <algorithm>

#include "common/wait.h"

namespace snccl {

Connection::Connection(ConnCtrl* ctrl, char* slots, std::unique_ptr<ConnMemory> memory, int peer,
                       pid_t peerPid, const char* transport, RingConfig config)
    : ring_(ctrl, slots, config), memory_(std::move(memory)), peer_(peer), peerPid_(peerPid), transport_(transport), link_(transport) {
  if (memory_) {
    ConnCaps caps = memory_->caps();
    drivable_ = caps.drivable;
    zeroCopySend_ = caps.zeroCopySend;
    zeroCopyRecv_ = caps.zeroCopyRecv;
    pollsInUserSpace_ = caps.pollsInUserSpace;
  }
}

void Connection::post(uint32_t bytes, uint64_t sig) {
  ring_.post(step_, bytes, sig, ring_.placement(bytes), nullptr);
  ++step_;
}

void Connection::postAt(const char* src, uint32_t bytes, uint64_t sig) {
  ring_.post(step_, bytes, sig, kAtPointer, src);
  ++step_;
  lastAtPointer_ = step_;  // executor-local: only sendsDone() and senderReady() read it
}

void Connection::release() {
  ++step_;
  ring_.release(step_);
}

void Connection::sleep(bool sender, int64_t timeoutUs) {
  RingSide side = sender ? RingSide::kSender : RingSide::kReceiver;
  std::atomic<uint32_t>& word = ring_.wakeWord(side);
  if (!announced_) {
    // Without the barrier nobody is sure to wake us: nap briefly instead (the caller
    // polls again), never longer than 50 us.
    if (!ring_.announce(side)) {
      futexWait(&word, word.load(std::memory_order_relaxed), std::min<int64_t>(timeoutUs, 50));
      return;
    }
    announced_ = true;
    sender_ = sender;
  }
  // The flag is visible to every later publish (it stays set across sleep slices), and
  // every publish before the barrier is visible here: a counter that does not show the
  // message yet will bump the futex word once it does.
  uint32_t seq = word.load(std::memory_order_seq_cst);
  bool ready = sender ? senderReady(ring_.head(std::memory_order_seq_cst))
                      : ring_.tail(std::memory_order_seq_cst) > step_;
  if (!ready && !poisoned()) futexWait(&word, seq, timeoutUs);
}

void Connection::wakeUp() {
  ring_.withdraw(sender_ ? RingSide::kSender : RingSide::kReceiver);
  announced_ = false;
}

void Connection::poison(uint32_t code) { ring_.poison(code); }

}  // namespace snccl
