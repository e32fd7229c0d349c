// The IB net's cut of a message over queue pairs (ib_split.h): the per-pair rate
// estimate from completions, and parts in proportion to it.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "transport/net/ib/ib_split.h"

namespace {

namespace ib = snccl::net::ib;

constexpr size_t kMiB = size_t(1) << 20;

// Pair q delivers `rates[q]` bytes/s: each round posts a part of `bytes` on every pair
// and completes it when that pair would have finished it; one pair's parts queue
// behind each other.
void drive(ib::QpRates* r, const std::vector<double>& rates, size_t bytes, int rounds, double* now) {
  std::vector<double> busyUntil(rates.size(), *now);
  for (int k = 0; k < rounds; ++k) {
    for (size_t q = 0; q < rates.size(); ++q) {
      r->posted(int(q), bytes, *now);
      busyUntil[q] = std::max(busyUntil[q], *now) + double(bytes) / rates[q];
      r->completed(int(q), busyUntil[q]);
    }
    *now = *std::max_element(busyUntil.begin(), busyUntil.end());
  }
}

std::vector<size_t> cut(size_t size, const std::vector<double>& rates, std::vector<size_t> backlog = {}) {
  std::vector<size_t> len(rates.size());
  backlog.resize(rates.size());
  int n = ib::splitByRate(size, int(rates.size()), 65536, rates, backlog, len.data());
  len.resize(size_t(n));
  return len;
}

TEST(IbSplit, RatesFollowWhatEachPairDelivers) {
  ib::QpRates r(2);
  double now = 1.0;
  EXPECT_EQ(r.rate(0, now), 0.0) << "unknown before the first completion";
  drive(&r, {400e6, 100e6}, kMiB, 20, &now);
  EXPECT_NEAR(r.rate(0, now), 400e6, 4e6);
  EXPECT_NEAR(r.rate(1, now), 100e6, 1e6);
  // Pair 1 recovers: its estimate climbs to the new rate within a few parts.
  drive(&r, {400e6, 400e6}, kMiB, 20, &now);
  EXPECT_NEAR(r.rate(1, now), 400e6, 8e6);
}

// A link that sends part of each part in a burst (a token bucket refilled while idle)
// and the rest at its rate: the estimate stays near the long-run rate, bytes over time,
// not the mean of the parts' rates.
TEST(IbSplit, BurstsDoNotHideTheLongRunRate) {
  ib::QpRates r(1);
  double now = 0;
  for (int k = 0; k < 40; ++k) {
    const size_t bytes = k % 2 == 0 ? 64 * 1024 : kMiB;  // a short part goes in a burst
    const double dt = k % 2 == 0 ? 0.001 : double(kMiB) / 5e6;
    r.posted(0, bytes, now);
    r.completed(0, now + dt);
    now += dt + 0.1;  // idle in between
  }
  const double longRun = double(64 * 1024 + kMiB) / (0.001 + double(kMiB) / 5e6);
  EXPECT_NEAR(r.rate(0, now), longRun, 0.2 * longRun);
}

TEST(IbSplit, SmallPartsGiveNoSample) {
  ib::QpRates r(1);
  double now = 0;
  drive(&r, {1e6}, ib::QpRates::kMinSampleBytes - 1, 5, &now);
  EXPECT_EQ(r.rate(0, now), 0.0);
}

TEST(IbSplit, AStalledPairIsSeenBeforeItsNextCompletion) {
  ib::QpRates r(2);
  double now = 1.0;
  drive(&r, {400e6, 400e6}, kMiB, 10, &now);
  r.posted(0, kMiB, now);
  r.posted(1, kMiB, now);
  r.completed(0, now + kMiB / 400e6);
  // Pair 1's part has been in service for 100 ms: at most 10 MB/s.
  const double later = now + 0.1;
  EXPECT_NEAR(r.rate(0, later), 400e6, 4e6);
  EXPECT_LE(r.rate(1, later), kMiB / 0.1 + 1);
}

TEST(IbSplit, PartsFollowTheRatesAndCoverTheMessage) {
  for (size_t size : {size_t(65536), kMiB + 3, 16 * kMiB + 4095}) {
    SCOPED_TRACE(size);
    std::vector<size_t> len = cut(size, {400e6, 100e6});
    ASSERT_EQ(len.size(), 2u);
    EXPECT_EQ(std::accumulate(len.begin(), len.end(), size_t(0)), size);
    EXPECT_EQ(len[0] % ib::kPartAlign, 0u);
    EXPECT_NEAR(double(len[0]) / double(size), 0.8, 0.01);
  }
  // Four pairs, one unknown (counts as the mean of the others).
  std::vector<size_t> len = cut(8 * kMiB, {300e6, 100e6, 0, 200e6});
  ASSERT_EQ(len.size(), 4u);
  EXPECT_EQ(std::accumulate(len.begin(), len.end(), size_t(0)), 8 * kMiB);
  EXPECT_NEAR(double(len[0]) / double(len[1]), 3.0, 0.05);
  EXPECT_NEAR(double(len[2]) / double(len[3]), 1.0, 0.05);
}

// A pair with a queue gets less, so that both finish together: here pair 1 (as fast as
// pair 0) has 1 MiB outstanding, so of 3 MiB pair 0 takes 2 and pair 1 one; with 4 MiB
// outstanding it gets only the floor until the queue drains.
TEST(IbSplit, APairWithABacklogGetsLessUntilItDrains) {
  std::vector<size_t> len = cut(3 * kMiB, {100e6, 100e6}, {0, kMiB});
  ASSERT_EQ(len.size(), 2u);
  EXPECT_EQ(len[0], 2 * kMiB);
  EXPECT_EQ(len[1], kMiB);
  len = cut(2 * kMiB, {100e6, 100e6}, {0, 4 * kMiB});
  EXPECT_EQ(len[1], 2 * kMiB / 16) << "the floor";
  EXPECT_EQ(len[0] + len[1], 2 * kMiB);
  // The backlog counts where the estimator keeps it.
  ib::QpRates r(2);
  r.posted(1, 5000, 0);
  r.posted(1, 7000, 0);
  r.completed(1, 1);
  EXPECT_EQ(r.outstanding(1), 7000u);
  EXPECT_EQ(r.outstanding(0), 0u);
}

TEST(IbSplit, ASlowPairKeepsAFloorAndUnknownRatesSplitEqually) {
  std::vector<size_t> len = cut(kMiB, {1e9, 1e3});
  ASSERT_EQ(len.size(), 2u);
  EXPECT_GE(len[1], kMiB / 16) << "an eighth of the equal share";
  EXPECT_EQ(len[0] + len[1], kMiB);
  std::vector<size_t> equal = cut(kMiB, {0, 0});
  ASSERT_EQ(equal.size(), 2u);
  EXPECT_EQ(equal[0], kMiB / 2);
  EXPECT_EQ(equal[1], kMiB / 2);
  // Below the split threshold: one part, as splitParts cuts it.
  EXPECT_EQ(cut(65535, {1e9, 1e3}).size(), 1u);
}

}  // namespace
