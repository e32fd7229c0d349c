// CPU sets and the ranks that share CPUs: what the spin budget and the cost model's
// oversubscription are judged from (common/cpu_set.h).
#include "common/cpu_set.h"

#include <gtest/gtest.h>
#include <sched.h>

#include <initializer_list>
#include <vector>

namespace snccl {
namespace {

CpuSet cpus(std::initializer_list<int> ids) {
  CpuSet s;
  for (int c : ids) s.add(c);
  return s;
}

TEST(CpuSet, AddCountOverlap) {
  CpuSet s = cpus({0, 63, 64, 1023});
  EXPECT_EQ(s.count(), 4);
  EXPECT_TRUE(s.has(63));
  EXPECT_TRUE(s.has(64));
  EXPECT_TRUE(s.has(1023));
  EXPECT_FALSE(s.has(1));
  s.add(-1);
  s.add(1024);  // outside glibc's cpu_set_t: ignored
  EXPECT_EQ(s.count(), 4);
  EXPECT_FALSE(s.has(1024));
  EXPECT_TRUE(s.overlaps(cpus({5, 64})));
  EXPECT_FALSE(s.overlaps(cpus({5, 65})));
  EXPECT_FALSE(s.overlaps(CpuSet{}));
  EXPECT_EQ(CpuSet::all().count(), CpuSet::kBits);
  s |= cpus({1, 64});
  EXPECT_EQ(s.count(), 5);
}

// The calling thread's affinity, as sched_getaffinity gives it.
TEST(CpuSet, CurrentIsTheThreadsAffinity) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  const CpuSet s = currentCpuSet();
  EXPECT_EQ(s.count(), CPU_COUNT(&set));
  for (int c = 0; c < CPU_SETSIZE; ++c) EXPECT_EQ(s.has(c), CPU_ISSET(c, &set) != 0) << "cpu " << c;
}

// Unbound ranks share every CPU of the node.
TEST(CpuShare, UnboundRanksShareTheNode) {
  const std::vector<CpuSet> sets(4, cpus({0, 1, 2, 3, 4, 5, 6, 7}));
  for (size_t r = 0; r < sets.size(); ++r) {
    const CpuShare s = cpuShare(sets, r, 8);
    EXPECT_EQ(s.ranks, 4);
    EXPECT_EQ(s.cpus, 8);
  }
  EXPECT_EQ(cpusSpanned(sets, 8), 8);
}

// Ranks bound to a CPU each share it with nobody; two bound to the same CPU share it.
TEST(CpuShare, BoundRanks) {
  const std::vector<CpuSet> own = {cpus({0}), cpus({1}), cpus({2})};
  for (size_t r = 0; r < own.size(); ++r) {
    const CpuShare s = cpuShare(own, r, 4);
    EXPECT_EQ(s.ranks, 1) << r;
    EXPECT_EQ(s.cpus, 1) << r;
  }
  EXPECT_EQ(cpusSpanned(own, 4), 3);
  const std::vector<CpuSet> same = {cpus({0}), cpus({0})};
  const CpuShare s = cpuShare(same, 1, 2);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.cpus, 1);
  EXPECT_EQ(cpusSpanned(same, 2), 1);
}

// Overlap is followed through other ranks: 0 and 2 share no CPU, but both share one
// with 1, so the three compete for CPUs 0-3; rank 3 is apart.
TEST(CpuShare, OverlapIsTransitive) {
  const std::vector<CpuSet> sets = {cpus({0, 1}), cpus({1, 2}), cpus({2, 3}), cpus({6, 7})};
  for (size_t r : {size_t(0), size_t(1), size_t(2)}) {
    const CpuShare s = cpuShare(sets, r, 8);
    EXPECT_EQ(s.ranks, 3) << r;
    EXPECT_EQ(s.cpus, 4) << r;
  }
  const CpuShare apart = cpuShare(sets, 3, 8);
  EXPECT_EQ(apart.ranks, 1);
  EXPECT_EQ(apart.cpus, 2);
  EXPECT_EQ(cpusSpanned(sets, 8), 6);
}

// An unknown set (all ids) overlaps everyone and counts no more CPUs than are online.
TEST(CpuShare, UnknownSetsAreCappedByOnlineCpus) {
  const std::vector<CpuSet> sets = {CpuSet::all(), cpus({0})};
  const CpuShare s = cpuShare(sets, 1, 2);
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.cpus, 2);
  EXPECT_EQ(cpusSpanned(sets, 2), 2);
  EXPECT_EQ(cpusSpanned({}, 2), 1);
  const CpuShare bad = cpuShare(sets, 5, 2);  // an index out of range: alone on the node
  EXPECT_EQ(bad.ranks, 1);
  EXPECT_EQ(bad.cpus, 2);
}

// oversubscribed() of rank `self` among `sets`, as setWaitBudgets calls it.
bool over(const std::vector<CpuSet>& sets, size_t self, int online, int helpers) {
  return oversubscribed(cpuShare(sets, self, online), int(sets.size()), online, helpers);
}

// Oversubscribed: the rank's CPU group holds more ranks than CPUs, or the node's ranks
// plus the net helper threads outnumber the node's CPUs. Helpers do not count against a
// rank bound to a CPU of its own (launchers bind ranks to a core).
TEST(CpuShare, Oversubscribed) {
  const std::vector<CpuSet> own = {cpus({0}), cpus({1}), cpus({2}), cpus({3})};
  EXPECT_FALSE(over(own, 0, 64, 0));
  EXPECT_FALSE(over(own, 0, 64, 2)) << "4 bound ranks + 2 helpers on a 64-CPU node";
  const std::vector<CpuSet> two = {cpus({0}), cpus({1})};
  EXPECT_TRUE(over(two, 0, 2, 2)) << "2 ranks + 2 helpers on the node's 2 CPUs";
  EXPECT_FALSE(over(two, 0, 2, 0));
  const std::vector<CpuSet> same = {cpus({0}), cpus({0})};
  EXPECT_TRUE(over(same, 1, 64, 0)) << "2 ranks bound to one CPU";
  const std::vector<CpuSet> unbound(3, cpus({0, 1}));
  EXPECT_TRUE(over(unbound, 2, 2, 0)) << "3 unbound ranks on 2 CPUs";
  EXPECT_FALSE(over(std::vector<CpuSet>(2, cpus({0, 1})), 0, 2, 0));
  // Apart on the node but one group crowded: only that group's ranks are.
  const std::vector<CpuSet> mixed = {cpus({0}), cpus({0}), cpus({1, 2, 3})};
  EXPECT_TRUE(over(mixed, 0, 4, 0));
  EXPECT_FALSE(over(mixed, 2, 4, 0));
}

}  // namespace
}  // namespace snccl
