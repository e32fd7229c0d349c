// Placement of an oversubscribed node's ranks (topology/rank_pinning.h): when it applies,
// that recursive-doubling partners never share a CPU, and that the CPUs fill evenly.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "topology/rank_pinning.h"

namespace snccl::topo {
namespace {

TEST(RankPinning, OnlyWhenRanksOutnumberCpus) {
  const std::vector<int> two = {0, 1}, one = {5};
  EXPECT_EQ(pinnedCpuFor(0, 2, two), -1);  // a CPU per rank: the scheduler does fine
  EXPECT_EQ(pinnedCpuFor(1, 1, two), -1);
  EXPECT_EQ(pinnedCpuFor(0, 4, one), -1);  // one CPU: nothing to choose
  EXPECT_EQ(pinnedCpuFor(0, 4, {}), -1);   // mask unknown
  EXPECT_NE(pinnedCpuFor(0, 3, two), -1);
}

TEST(RankPinning, TwoCpusByParityOfSetBits) {
  // The placement measured on 2 CPUs: ranks 0 3 5 6 on one, 1 2 4 7 on the other.
  const std::vector<int> cpus = {2, 7};  // any CPU ids: the result is one of them
  const int expected[] = {2, 7, 7, 2, 7, 2, 2, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(pinnedCpuFor(r, 8, cpus), expected[r]) << "rank " << r;
}

TEST(RankPinning, PartnersApartAndCpusEven) {
  for (int ncpus : {2, 3, 4, 6, 8, 16}) {
    std::vector<int> cpus;
    for (int c = 0; c < ncpus; ++c) cpus.push_back(10 + 2 * c);
    int used = 1;  // CPUs the placement uses: ncpus rounded down to a power of two
    while (used * 2 <= ncpus) used *= 2;
    for (int ranks : {ncpus + 1, 2 * ncpus, 64}) {
      std::map<int, int> load;
      for (int r = 0; r < ranks; ++r) {
        const int c = pinnedCpuFor(r, ranks, cpus);
        ASSERT_GE(c, 10) << ncpus << " CPUs, rank " << r;
        ASSERT_LT(c, 10 + 2 * used) << ncpus << " CPUs, rank " << r;
        ++load[c];
        for (int bit = 1; bit < ranks; bit <<= 1) {
          if ((r ^ bit) >= ranks) continue;
          EXPECT_NE(c, pinnedCpuFor(r ^ bit, ranks, cpus)) << ncpus << " CPUs: ranks " << r << " and " << (r ^ bit);
        }
      }
      if ((ranks & (ranks - 1)) == 0 && ranks >= used) {  // a power of two: exactly even
        EXPECT_EQ(load.size(), size_t(used));
        for (const auto& [cpu, k] : load) EXPECT_EQ(k, ranks / used) << ncpus << " CPUs, CPU " << cpu;
      }
    }
  }
}

}  // namespace
}  // namespace snccl::topo
