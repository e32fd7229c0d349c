// Connection: publishing, releasing, sleeping and poisoning on the slot ring.
#include "transport/connection.h"

#include <unistd.h>

#include <new>

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
      peer_(peer),
      peerPid_(peerPid),
      transport_(transport) {}

void Connection::post(uint32_t bytes, uint64_t sig) {
  ConnFifoEntry& e = ctrl_->fifo[step_ % nsteps_];
  e.bytes = bytes;
  e.sig = sig;
  ++step_;
  if (inline_) {
    e.isInline = bytes <= kInlineBytes;
    e.seq.store(step_, std::memory_order_release);  // the receiver polls this
  }
  // seq_cst store + seq_cst load of the sleeping flag pair with the receiver's
  // store-flag-then-load-tail: one of the two sides always sees the other.
  ctrl_->tail.store(step_, std::memory_order_seq_cst);
  if (ctrl_->recvSleeping.load(std::memory_order_seq_cst)) {
    ctrl_->tailSeq.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(&ctrl_->tailSeq);
  }
}

void Connection::release() {
  ++step_;
  ctrl_->head.store(step_, std::memory_order_seq_cst);
  if (ctrl_->sendSleeping.load(std::memory_order_seq_cst)) {
    ctrl_->headSeq.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(&ctrl_->headSeq);
  }
}

void Connection::sleep(bool sender, int64_t timeoutUs) {
  std::atomic<uint32_t>& flag = sender ? ctrl_->sendSleeping : ctrl_->recvSleeping;
  std::atomic<uint32_t>& word = sender ? ctrl_->headSeq : ctrl_->tailSeq;
  flag.store(1, std::memory_order_seq_cst);
  uint32_t seq = word.load(std::memory_order_seq_cst);
  bool ready = sender ? ctrl_->head.load(std::memory_order_seq_cst) + nsteps_ > step_
                      : ctrl_->tail.load(std::memory_order_seq_cst) > step_;
  if (!ready && !poisoned()) futexWait(&word, seq, timeoutUs);
  flag.store(0, std::memory_order_relaxed);
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
