// CPU sets, the calling thread's affinity, and the ranks that share CPUs (see cpu_set.h).
#include "common/cpu_set.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <vector>

namespace snccl {

static_assert(CpuSet::kBits == CPU_SETSIZE, "CpuSet mirrors glibc's cpu_set_t");

CpuSet CpuSet::all() {
  CpuSet s;
  s.words.fill(~uint64_t(0));
  return s;
}

void CpuSet::add(int cpu) {
  if (cpu >= 0 && cpu < kBits) words[size_t(cpu) / 64] |= uint64_t(1) << (cpu % 64);
}

bool CpuSet::has(int cpu) const { return cpu >= 0 && cpu < kBits && (words[size_t(cpu) / 64] >> (cpu % 64) & 1) != 0; }

int CpuSet::count() const {
  int n = 0;
  for (uint64_t w : words) n += std::popcount(w);
  return n;
}

bool CpuSet::overlaps(const CpuSet& other) const {
  for (size_t i = 0; i < words.size(); ++i)
    if ((words[i] & other.words[i]) != 0) return true;
  return false;
}

CpuSet& CpuSet::operator|=(const CpuSet& other) {
  for (size_t i = 0; i < words.size(); ++i) words[i] |= other.words[i];
  return *this;
}

std::vector<int> CpuSet::list() const {
  std::vector<int> out;
  for (int c = 0; c < kBits; ++c)
    if (has(c)) out.push_back(c);
  return out;
}

std::optional<CpuSet> threadCpuSet() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return std::nullopt;
  CpuSet s;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) s.add(c);
  if (s.count() == 0) return std::nullopt;
  return s;
}

CpuSet currentCpuSet() { return threadCpuSet().value_or(CpuSet::all()); }

CpuShare cpuShare(std::span<const CpuSet> sets, size_t self, int online) {
  if (self >= sets.size()) return CpuShare{1, std::max(online, 1)};
  // Grow the group from sets[self] until no other set overlaps its union: a few passes
  // over a node's ranks, once per communicator.
  std::vector<bool> in(sets.size(), false);
  in[self] = true;
  CpuSet spanned = sets[self];
  int ranks = 1;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t r = 0; r < sets.size(); ++r)
      if (!in[r] && sets[r].overlaps(spanned)) {
        in[r] = true;
        spanned |= sets[r];
        ++ranks;
        grew = true;
      }
  }
  return CpuShare{ranks, std::clamp(spanned.count(), 1, std::max(online, 1))};
}

int cpusSpanned(std::span<const CpuSet> sets, int online) {
  CpuSet spanned;
  for (const CpuSet& s : sets) spanned |= s;
  return std::clamp(spanned.count(), 1, std::max(online, 1));
}

bool oversubscribed(const CpuShare& group, int nodeRanks, int online, int helperThreads) {
  return group.ranks > group.cpus || nodeRanks + helperThreads > std::max(online, 1);
}

}  // namespace snccl
