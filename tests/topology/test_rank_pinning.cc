// Placement of an oversubscribed node's ranks (topology/rank_pinning.h): when it applies,
// that recursive-doubling partners never share a CPU on 2^k CPUs, and that every CPU gets ranks.
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
  // The placement on 2 CPUs: ranks 0 3 5 6 on one, 1 2 4 7 on the other.
  const std::vector<int> cpus = {2, 7};  // any CPU ids: the result is one of them
  const int expected[] = {2, 7, 7, 2, 7, 2, 2, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(pinnedCpuFor(r, 8, cpus), expected[r]) << "rank " << r;
}

TEST(RankPinning, PartnersApartAndCpusEven) {
  for (int ncpus : {2, 4, 8, 16}) {
    std::vector<int> cpus;
    for (int c = 0; c < ncpus; ++c) cpus.push_back(10 + 2 * c);
    for (int ranks : {ncpus + 1, 2 * ncpus, 64}) {
      std::map<int, int> load;
      for (int r = 0; r < ranks; ++r) {
        const int c = pinnedCpuFor(r, ranks, cpus);
        ASSERT_GE(c, 10) << ncpus << " CPUs, rank " << r;
        ASSERT_LT(c, 10 + 2 * ncpus) << ncpus << " CPUs, rank " << r;
        ASSERT_EQ(c % 2, 0) << "not one of the given CPUs";
        ++load[c];
        for (int bit = 1; bit < ranks; bit <<= 1) {
          if ((r ^ bit) >= ranks) continue;
          EXPECT_NE(c, pinnedCpuFor(r ^ bit, ranks, cpus)) << ncpus << " CPUs: ranks " << r << " and " << (r ^ bit);
        }
      }
      if ((ranks & (ranks - 1)) == 0) {  // a power of two: exactly even
        EXPECT_EQ(load.size(), size_t(ncpus));
        for (const auto& [cpu, k] : load) EXPECT_EQ(k, ranks / ncpus) << ncpus << " CPUs, CPU " << cpu;
      }
    }
  }
}

TEST(RankPinning, OtherCpuCountsUseEveryCpu) {
  // 3, 6 or 12 CPUs: round robin, so no CPU idles while others carry several ranks.
  for (int ncpus : {3, 6, 12}) {
    std::vector<int> cpus;
    for (int c = 0; c < ncpus; ++c) cpus.push_back(c);
    for (int ranks : {ncpus + 1, 2 * ncpus + 1}) {
      std::map<int, int> load;
      for (int r = 0; r < ranks; ++r) ++load[pinnedCpuFor(r, ranks, cpus)];
      EXPECT_EQ(load.size(), size_t(ncpus)) << ncpus << " CPUs, " << ranks << " ranks";
      for (const auto& [cpu, k] : load) EXPECT_LE(k, ranks / ncpus + 1) << ncpus << " CPUs, CPU " << cpu;
    }
  }
}

}  // namespace
}  // namespace snccl::topo
