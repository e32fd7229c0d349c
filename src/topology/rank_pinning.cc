// Placement of oversubscribed ranks on CPUs (see rank_pinning.h).
#include "topology/rank_pinning.h"

#include "common/cpu_set.h"

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
  const std::optional<CpuSet> set = threadCpuSet();
  return set ? set->list() : std::vector<int>();
}

}  // namespace snccl::topo
