// What the paths of different connections between the same two addresses share
// (transport/net/socket/rail_share.h): the data ahead of a new chunk at the rail's rate,
// less the extra time acknowledgements take to come back, on clocks of any offset; the
// rate, bytes over busy time however the acknowledgements bunch up; the delay beyond the
// expected arrival (floor) that tells a rail with a standing queue; the bytes of a failed
// path or an ended connection given back; one rail per address pair.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>

#include "transport/net/socket/rail_share.h"

namespace snccl::net::socknet {
namespace {

using Clock = RailShare::Clock;
using std::chrono::milliseconds;
constexpr size_t kMB = 1000 * 1000;

// The receiver's clock: `offsetNs` from ours, and an acknowledgement written `oneWayMs`
// before it arrives at `at`.
int64_t stamp(Clock::time_point at, double oneWayMs, int64_t offsetNs) {
  return int64_t(uint64_t(steadyNs(at)) - uint64_t(oneWayMs * 1e6) + uint64_t(offsetNs));  // wraps
}

void checkLagIsTakenOff(int64_t offsetNs) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(4 * kMB, t0);
  EXPECT_EQ(r.unacked(), 4 * kMB);
  EXPECT_EQ(r.ahead(), 0) << "no rate yet";
  // 1 MB in 10 ms: 100 MB/s; the quickest acknowledgement so far, so nothing is taken off.
  EXPECT_TRUE(r.acked(kMB, t0 + milliseconds(10), stamp(t0 + milliseconds(10), 1, offsetNs), t0, 0));
  EXPECT_NEAR(r.rate(), 100e6, 1e3);
  EXPECT_NEAR(r.ahead(), 0.030, 1e-6);  // 3 MB at 100 MB/s
  // The next one waited 4 ms longer on its way back: 4 ms of what is unacknowledged has
  // arrived already.
  EXPECT_TRUE(r.acked(kMB, t0 + milliseconds(20), stamp(t0 + milliseconds(20), 5, offsetNs), t0, 0));
  EXPECT_NEAR(r.rate(), 100e6, 1e3);
  EXPECT_NEAR(r.ahead(), 0.020 - 0.004, 1e-6);
  // Back to the quickest: nothing is taken off again.
  EXPECT_TRUE(r.acked(kMB, t0 + milliseconds(30), stamp(t0 + milliseconds(30), 1, offsetNs), t0, 0));
  EXPECT_NEAR(r.ahead(), 0.010, 1e-6);
}

TEST(RailShare, DataAheadIsTheUnacknowledgedBytesLessWhatOnlyWaitsForItsAcknowledgement) { checkLagIsTakenOff(0); }

TEST(RailShare, TheReceiversClockMayBeAnywhere) {
  checkLagIsTakenOff(3'600'000'000'000);  // an hour ahead
  checkLagIsTakenOff(-7'000'000'000'000'000'000);
  checkLagIsTakenOff(INT64_MAX);  // the difference wraps
}

TEST(RailShare, AClockThatJumpsTakesOffAtMostFiftyMilliseconds) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(20 * kMB, t0);
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(10), stamp(t0 + milliseconds(10), 1, 0), t0, 0));
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(20), stamp(t0 + milliseconds(20), 1, -1'000'000'000), t0, 0));
  EXPECT_NEAR(r.ahead(), 0.180 - 0.050, 1e-6);  // 18 MB at 100 MB/s, less the cap
  // A bogus stamp is a number like any other.
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(30), INT64_MIN, t0, 0));
  EXPECT_GE(r.ahead(), 0.170 - 0.050 - 1e-6);
}

// A rail that other flows keep loaded delivers 25 MB/s, its acknowledgements in bursts:
// 250 kB after 18 ms, then 250 kB more 2 ms later. The estimate is the long-run rate,
// bytes over busy time, not the mean of a slow and a fast sample's rates (70 MB/s here).
TEST(RailShare, AcknowledgementsInBurstsDoNotHideALoadedRailsRate) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  constexpr size_t kPart = 250'000;
  r.sent(200 * kPart, t0);  // never drains
  Clock::time_point t = t0;
  for (int k = 0; k < 40; ++k) {
    t += milliseconds(k % 2 == 0 ? 18 : 2);
    ASSERT_TRUE(r.acked(kPart, t, stamp(t, 1, 0), t0, 0));
  }
  EXPECT_NEAR(r.rate(), 25e6, 0.15 * 25e6) << "just after a burst";
  t += milliseconds(18);
  ASSERT_TRUE(r.acked(kPart, t, stamp(t, 1, 0), t0, 0));
  EXPECT_NEAR(r.rate(), 25e6, 0.15 * 25e6) << "just after a wait";
}

// A path that was late (stalled: a receiver that stopped reading, a pulled cable) and
// recovers: the stall is not delivery, and the rate stays what it was, so the path gets
// chunks again and is measured anew.
TEST(RailShare, AStallGivesNoRateSample) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(20 * kMB, t0);
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(10), stamp(t0 + milliseconds(10), 1, 0), t0, 0));
  ASSERT_NEAR(r.rate(), 100e6, 1e3);
  Clock::time_point t = t0 + milliseconds(510);  // half a second without an acknowledgement
  EXPECT_FALSE(r.acked(4 * kMB, t, stamp(t, 1, 0), t0, 0, /*stalled=*/true));
  EXPECT_NEAR(r.rate(), 100e6, 1e3);
  EXPECT_EQ(r.unacked(), 15 * kMB) << "the bytes leave the backlog all the same";
  t += milliseconds(10);
  ASSERT_TRUE(r.acked(kMB, t, stamp(t, 1, 0), t0, 0));
  EXPECT_NEAR(r.rate(), 100e6, 1e3) << "the next sample is the rail's rate again";
}

// A wait that no late flag caught (a segment waiting for TCP's retransmission timer)
// counts as 50 ms of busy time at most: a rail of 100 MB/s whose next 1 MB took 200 ms is
// estimated at 1 MB over (0.75 x 10 + 0.25 x 50) ms, 50 MB/s, not 17.
TEST(RailShare, AWaitCountsForFiftyMillisecondsAtMost) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(20 * kMB, t0);
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(10), stamp(t0 + milliseconds(10), 1, 0), t0, 0));
  const Clock::time_point t = t0 + milliseconds(210);
  ASSERT_TRUE(r.acked(kMB, t, stamp(t, 1, 0), t0, 0));
  EXPECT_NEAR(r.rate(), 50e6, 1e3);
}

// An estimate that had no sample for half a second is replaced by the next one: a rail
// measured at 100 MB/s, then left idle for two seconds, whose next chunk (a probe) goes at
// 20 MB/s, is estimated at 20 MB/s, not smoothed toward it from 100.
TEST(RailShare, AStaleEstimateIsReplaced) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(kMB, t0);
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(10), stamp(t0 + milliseconds(10), 1, 0), t0, 0));
  ASSERT_NEAR(r.rate(), 100e6, 1e3);
  const Clock::time_point probe = t0 + std::chrono::seconds(2);
  r.sent(200'000, probe);
  ASSERT_TRUE(r.acked(200'000, probe + milliseconds(10), stamp(probe + milliseconds(10), 1, 0), probe, 0));
  EXPECT_NEAR(r.rate(), 20e6, 1e3);
}

TEST(RailShare, ForgottenBytesLeaveTheBacklog) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(3 * kMB, t0);
  r.forget(kMB);
  EXPECT_EQ(r.unacked(), 2 * kMB);
  r.forget(5 * kMB);  // more than there is: none left, not a wrapped count
  EXPECT_EQ(r.unacked(), 0u);
  ASSERT_TRUE(r.acked(kMB, t0 + milliseconds(10), stamp(t0 + milliseconds(10), 1, 0), t0, 0));
  EXPECT_EQ(r.unacked(), 0u);
  EXPECT_EQ(r.ahead(), 0);
}

// A chunk given at `sent`, expected `expectMs` later, that reached the receiver `lateMs`
// after that, acknowledged at `at` (1 ms on the way back), on a receiver clock `offsetNs`
// from ours.
void ackLate(RailShare& r, Clock::time_point sent, double expectMs, double lateMs, Clock::time_point at,
             int64_t offsetNs) {
  const Clock::time_point arrived =
      sent + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(expectMs + lateMs));
  const int64_t stampNs = int64_t(uint64_t(steadyNs(arrived)) + uint64_t(offsetNs));
  r.acked(kMB / 10, at, stampNs, sent, 1e-3 * expectMs);
}

// The floor in ms on a receiver clock without offset.
double floorMs(const RailShare& r) {
  int64_t f = 0;
  EXPECT_TRUE(r.floorNs(&f));
  return 1e-6 * double(f);
}

void checkFloorsCompare(int64_t offsetNs) {
  RailShare quick, queued;
  const Clock::time_point t0 = Clock::now();
  int64_t q = 0, s = 0;
  EXPECT_FALSE(quick.floorNs(&q)) << "no sample yet";
  quick.sent(kMB, t0);
  queued.sent(kMB, t0);
  // The quick rail delivers 1 ms after the expected time at best, the other 21 ms (a
  // queue that another flow keeps full): 20 ms apart, whatever the receiver's clock.
  ackLate(quick, t0, 2, 3, t0 + milliseconds(6), offsetNs);
  ackLate(quick, t0 + milliseconds(5), 2, 1, t0 + milliseconds(9), offsetNs);
  ackLate(queued, t0, 5, 25, t0 + milliseconds(31), offsetNs);
  ackLate(queued, t0 + milliseconds(10), 5, 21, t0 + milliseconds(37), offsetNs);
  ASSERT_TRUE(quick.floorNs(&q));
  ASSERT_TRUE(queued.floorNs(&s));
  EXPECT_NEAR(double(int64_t(uint64_t(s) - uint64_t(q))), 20e6, 1e3);
}

TEST(RailShare, FloorsOfTwoRailsDifferByTheDelayTheSendersDataDoesNotExplain) {
  checkFloorsCompare(0);
  checkFloorsCompare(3'600'000'000'000);
  checkFloorsCompare(INT64_MAX);  // the difference wraps
}

TEST(RailShare, FloorFollowsAQueueThatEnds) {
  RailShare r;
  const Clock::time_point t0 = Clock::now();
  r.sent(10 * kMB, t0);
  ackLate(r, t0, 2, 20, t0 + milliseconds(23), 0);
  EXPECT_NEAR(floorMs(r), 20, 1e-3);
  // Later samples that saw a shorter queue take over within two periods (100 ms each).
  ackLate(r, t0 + milliseconds(120), 2, 1, t0 + milliseconds(124), 0);
  EXPECT_NEAR(floorMs(r), 1, 1e-3);
  ackLate(r, t0 + milliseconds(230), 2, 3, t0 + milliseconds(236), 0);
  ackLate(r, t0 + milliseconds(340), 2, 4, t0 + milliseconds(347), 0);
  EXPECT_NEAR(floorMs(r), 3, 1e-3) << "the 1 ms sample is two periods old";
  // Periods without samples keep the last one that had some: a rail that takes no chunk
  // keeps the delay it was last seen with.
  ackLate(r, t0 + milliseconds(900), 2, 6, t0 + milliseconds(909), 0);
  EXPECT_NEAR(floorMs(r), 4, 1e-3);
  // An acknowledgement of no new chunk (a default `sent`) is no sample, whatever its stamp.
  r.acked(0, t0 + milliseconds(1200), stamp(t0 + milliseconds(1200), 1, 0), Clock::time_point{}, 0);
  EXPECT_NEAR(floorMs(r), 4, 1e-3);
}

TEST(RailBook, PathsBetweenTheSameAddressesShareOneRail) {
  RailBook book;
  std::shared_ptr<RailShare> a = book.get("10.0.0.1 -> 10.0.0.2");
  std::shared_ptr<RailShare> b = book.get("10.0.0.1 -> 10.0.0.2");
  std::shared_ptr<RailShare> c = book.get("10.0.1.1 -> 10.0.1.2");
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  a->sent(kMB, Clock::now());
  EXPECT_EQ(b->unacked(), kMB);
  EXPECT_EQ(book.size(), 2u);
  // When no path holds a rail any more, the next connection starts afresh.
  a.reset();
  b.reset();
  EXPECT_EQ(book.get("10.0.0.1 -> 10.0.0.2")->unacked(), 0u);
  // Rails nobody holds are forgotten when a rail is made: the book does not grow with
  // every peer the process ever talked to.
  c.reset();
  std::shared_ptr<RailShare> d = book.get("10.0.2.1 -> 10.0.2.2");
  EXPECT_EQ(book.size(), 1u);
}

}  // namespace
}  // namespace snccl::net::socknet
