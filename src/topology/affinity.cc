// NUMA placement helpers (getcpu / sched_setaffinity).
#include "topology/affinity.h"

#include <sched.h>

#include <cerrno>
#include <set>

#include "common/log.h"
#include "common/params.h"
#include "topology/discovery.h"

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

std::vector<int> helperCpus(const System& sys, int numa, bool enabled) {
  if (!enabled || numa < 0) return {};
  std::set<int> nodes;
  for (int c : sys.cpus()) nodes.insert(sys.node(c).cpu.numaId);
  if (nodes.size() < 2) return {};
  return cpusOfNuma(sys, numa);
}

int placeHelperThread(int numa, const char* what) {
  bool enabled = params::getInt(params::Id::NumaBind) != 0;
  if (!enabled || numa < 0) return 0;
  const Result<System>& sys = processSystem();
  if (!sys.ok()) return 0;
  std::vector<int> cpus = helperCpus(sys.value(), numa, enabled);
  if (cpus.empty()) return 0;
  Status st = bindCurrentThread(cpus);
  if (!st.ok()) {
    SN_INFO(log::kInit, "%s: not pinned to NUMA node %d: %s", what, numa, st.message().c_str());
    return 0;
  }
  SN_INFO(log::kInit, "%s: pinned to the %zu CPUs of NUMA node %d", what, cpus.size(), numa);
  return static_cast<int>(cpus.size());
}

}  // namespace snccl::topo
