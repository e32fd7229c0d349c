// NUMA placement helpers (getcpu / sched_setaffinity).
#include "topology/affinity.h"

#include <sched.h>

#include <cerrno>

namespace snccl::topo {

int currentNumaNode() {
  unsigned cpu = 0, node = 0;
  if (getcpu(&cpu, &node) != 0) return -1;
  return static_cast<int>(node);
}

std::vector<int> cpusOfNuma(const System& sys, int numa) {
  for (int c : sys.cpus())
    if (sys.node(c).cpu.numaId == numa) return sys.cpuList(c);
  return {};
}

Status bindCurrentThread(std::span<const int> cpus) {
  if (cpus.empty()) return OkStatus();
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) {
    if (c < 0 || c >= CPU_SETSIZE) return InvalidArgument("cpu %d is outside the affinity mask (max %d)", c, CPU_SETSIZE - 1);
    CPU_SET(c, &set);
  }
  if (sched_setaffinity(0, sizeof set, &set) != 0) return ErrnoError(errno, "sched_setaffinity");
  return OkStatus();
}

}  // namespace snccl::topo
