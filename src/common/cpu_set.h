// The CPUs a rank may run on, and how many ranks share them.
//
// Whether a waiting rank may spin (wait.h) and how oversubscribed the cost model thinks a
// node is depend on the CPUs the ranks can use, not on the CPUs the host has: two ranks a
// launcher, taskset or a container's cpuset confined to one CPU share that CPU however
// many the host has online. Each rank reports its thread's affinity at init (PeerInfo), so
// every rank judges its node from the same table.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace snccl {

// CPU ids 0..1023, a bit each: glibc's cpu_set_t. Trivially copyable (it travels in PeerInfo).
struct CpuSet {
  static constexpr int kBits = 1024;
  std::array<uint64_t, kBits / 64> words{};

  static CpuSet all();  // every id: what a rank reports when its affinity is unknown
  void add(int cpu);    // ids outside 0..kBits-1 are ignored
  bool has(int cpu) const;
  int count() const;
  bool overlaps(const CpuSet& other) const;
  CpuSet& operator|=(const CpuSet& other);
  std::vector<int> list() const;  // the ids, ascending
};

// The CPUs the calling thread may run on (sched_getaffinity); nullopt when the call fails
// (a kernel with more than 1024 CPU ids) or names none.
std::optional<CpuSet> threadCpuSet();
// The same, all() when unknown: such a rank shares every CPU with every rank of its node.
CpuSet currentCpuSet();

// The ranks whose CPU sets overlap sets[self], directly or through one another's, and how
// many CPUs those sets span together (at most `online`, the host's online CPUs: an
// unknown set names every id). A rank pinned to a CPU of its own shares it with nobody;
// ranks all allowed every CPU share all of them.
struct CpuShare {
  int ranks = 1;
  int cpus = 1;
};
CpuShare cpuShare(std::span<const CpuSet> sets, size_t self, int online);

// The CPUs the ranks of `sets` can use together, at most `online`.
int cpusSpanned(std::span<const CpuSet> sets, int online);

// Whether a rank's waits must not spin: its CPU group (cpuShare) holds more ranks than
// CPUs, or its node's `nodeRanks` plus `helperThreads` (the proxy and doorbell threads of
// net peers) outnumber the node's `online` CPUs. The helpers count only
// node-wide: they mostly sleep while an operation runs (the executor drives its net rings
// itself), so a rank bound to a CPU of its own keeps spinning on it.
bool oversubscribed(const CpuShare& group, int nodeRanks, int online, int helperThreads);

}  // namespace snccl
