// Connection: publishing, releasing, sleeping and poisoning on the slot ring.
#include "transport/connection.h"

#include <unistd.h>

#include <algorithm>
#include <new>

#include "common/process_barrier.h"
#include "common/wait.h"

namespace snccl {

Connection::Connection(ConnCtrl* ctrl, char* slots, std::unique_ptr<ConnMemory> memory, int peer,
                       pid_t peerPid, const char* transport)
    : ctrl_(ctrl),
      slots_(slots),
      memory_(std::move(memory)),
      nsteps_(ctrl->nsteps),
      slotBytes_(ctrl->slotBytes),
      inline_(memory_ && memory_->inlineMessages()),
      drivable_(memory_ && memory_->drivable()),
      light_(memory_ && memory_->lightPublish()),
      atPointers_(memory_ && memory_->sendsAtPointers()),
      recvAtPointers_(memory_ && memory_->receivesAtPointers()),
      peer_(peer),
      peerPid_(peerPid),
      transport_(transport) {}

void Connection::post(uint32_t bytes, uint64_t sig) {
  postEntry(bytes, sig, inline_ && bytes <= kInlineBytes ? kInline : kInSlot, nullptr);
}

void Connection::postAt(const char* src, uint32_t bytes, uint64_t sig) {
  postEntry(bytes, sig, kAtPointer, src);
  lastAtPointer_ = step_;  // executor-local: only sendsDone() and senderReady() read it
}

void Connection::postEntry(uint32_t bytes, uint64_t sig, uint32_t where, const char* at) {
  ConnFifoEntry& e = ctrl_->fifo[step_ % nsteps_];
  e.bytes = bytes;
  e.sig = sig;
  // Set on every ring: an entry reused after a postAt must not keep its kAtPointer.
  e.where = where;
  if (where == kAtPointer) e.at = at;
  ++step_;
  if (inline_) e.seq.store(step_, std::memory_order_release);  // the receiver polls this
  publish(ctrl_->tail, ctrl_->recvSleeping, ctrl_->tailSeq);
}

void Connection::release() {
  ++step_;
  publish(ctrl_->head, ctrl_->sendSleeping, ctrl_->headSeq);
}

// Store the counter, then load the peer's sleeping flag: the store must be visible before
// the load (connection.h). With light publishing the peer's processBarrier() provides
// that, so only the compiler must keep the order.
void Connection::publish(std::atomic<uint64_t>& counter, std::atomic<uint32_t>& sleeping,
                         std::atomic<uint32_t>& seq) {
  bool asleep;
  if (light_) {
    counter.store(step_, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    asleep = sleeping.load(std::memory_order_relaxed) != 0;
  } else {
    counter.store(step_, std::memory_order_seq_cst);
    asleep = sleeping.load(std::memory_order_seq_cst) != 0;
  }
  if (asleep) {
    seq.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(&seq);
  }
}

void Connection::sleep(bool sender, int64_t timeoutUs) {
  std::atomic<uint32_t>& flag = sender ? ctrl_->sendSleeping : ctrl_->recvSleeping;
  std::atomic<uint32_t>& word = sender ? ctrl_->headSeq : ctrl_->tailSeq;
  if (!announced_) {
    flag.store(1, std::memory_order_seq_cst);
    // Without the barrier a publisher's counter store may still sit in its store buffer
    // while its load saw no flag, so nobody would wake us: nap briefly instead (the caller
    // polls again), never longer than 50 us.
    if (light_ && !processBarrier()) {
      flag.store(0, std::memory_order_relaxed);
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
  bool ready = sender ? senderReady(ctrl_->head.load(std::memory_order_seq_cst))
                      : ctrl_->tail.load(std::memory_order_seq_cst) > step_;
  if (!ready && !poisoned()) futexWait(&word, seq, timeoutUs);
}

void Connection::wakeUp() {
  (sender_ ? ctrl_->sendSleeping : ctrl_->recvSleeping).store(0, std::memory_order_relaxed);
  announced_ = false;
}

void Connection::poison(uint32_t code) {
  uint32_t expected = 0;
  ctrl_->poison.compare_exchange_strong(expected, code);
  ctrl_->tailSeq.fetch_add(1);
  ctrl_->headSeq.fetch_add(1);
  futexWakeAll(&ctrl_->tailSeq);
  futexWakeAll(&ctrl_->headSeq);
}

size_t connCtrlBytes() {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (sizeof(ConnCtrl) + page - 1) / page * page;
}

void initConnCtrl(ConnCtrl* ctrl, uint32_t nsteps, uint32_t slotBytes) {
  new (ctrl) ConnCtrl();
  ctrl->tail.store(0);
  ctrl->head.store(0);
  ctrl->tailSeq.store(0);
  ctrl->headSeq.store(0);
  ctrl->recvSleeping.store(0);
  ctrl->sendSleeping.store(0);
  ctrl->poison.store(0);
  ctrl->nsteps = nsteps;
  ctrl->slotBytes = slotBytes;
  for (ConnFifoEntry& e : ctrl->fifo) e.seq.store(0);
}

}  // namespace snccl
