// Placement of oversubscribed ranks on CPUs (see rank_pinning.h).
#include "topology/rank_pinning.h"

#include <sched.h>

namespace snccl::topo {

int pinnedCpuFor(int localRank, int localRanks, std::span<const int> allowed) {
  const int n = static_cast<int>(allowed.size());
  if (n < 2 || localRanks <= n || localRank < 0) return -1;
  if ((n & (n - 1)) != 0) return allowed[static_cast<size_t>(localRank % n)];  // see rank_pinning.h
  int k = 0;  // n = 2^k
  while ((1 << k) < n) ++k;
  int code = 0;
  for (int bit = 0; (localRank >> bit) != 0; ++bit)
    if ((localRank >> bit) & 1) code ^= bit < k ? 1 << bit : 1 + (bit - k) % (n - 1);
  return allowed[static_cast<size_t>(code)];
}

std::vector<int> currentThreadCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace snccl::topo
