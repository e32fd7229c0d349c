// The ring protocol's cold half: announcing a sleeper, poisoning, laying out the control
// block.
#include "transport/ring.h"

#include <unistd.h>

#include <new>

#include "common/process_barrier.h"

namespace snccl {

bool Ring::announce(RingSide side) {
  std::atomic<uint32_t>& f = flag(side);
  f.store(1, std::memory_order_seq_cst);
  // Without the barrier a publisher's counter store may still sit in its store buffer
  // while its load saw no flag, so nobody would wake us.
  if (light_ && !processBarrier()) {
    f.store(0, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void Ring::poison(uint32_t code) {
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
  ctrl->syncKey = reinterpret_cast<uintptr_t>(ctrl);
  for (ConnFifoEntry& e : ctrl->fifo) e.seq.store(0);
}

}  // namespace snccl
