// membarrier(2) wrappers (common/process_barrier.h).
#include "common/process_barrier.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace snccl {

namespace {

long membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0u, 0); }

}  // namespace

bool registerProcessBarrier() {
  long cmds = membarrier(MEMBARRIER_CMD_QUERY);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0) return false;
  return membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

bool processBarrier() { return membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) == 0; }

}  // namespace snccl
