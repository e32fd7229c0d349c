// Backoff, the executor's wait policy: how many polls come before a yield or a sleep, and
// that the yield budget ends in a sleep. Counts of calls, not timings: the only sleep here
// makes a budget certainly spent.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "common/wait.h"

namespace snccl {
namespace {

using Phase = Backoff::Phase;

// No budgets (a host with more ranks than cores and no yield): 15 polls, then the 16th
// call, the first that reads the clock, says sleep.
TEST(Backoff, PollsBeforeAnythingElse) {
  Backoff b(0, 0);
  for (int i = 0; i < 15; ++i) ASSERT_EQ(b.idle(), Phase::kSpin) << "poll " << i;
  EXPECT_EQ(b.idle(), Phase::kSleep);
  // reset() starts a fresh wait: the polls again.
  b.reset();
  for (int i = 0; i < 15; ++i) ASSERT_EQ(b.idle(), Phase::kSpin) << "after reset, poll " << i;
  EXPECT_EQ(b.idle(), Phase::kSleep);
}

// A spin budget far longer than the test keeps it spinning.
TEST(Backoff, SpinsWithinItsBudget) {
  Backoff b(60 * 1000 * 1000, 0);  // 60 s
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(b.idle(), Phase::kSpin) << "call " << i;
}

// Spin 0, yield 1 s: after the polls it yields, and keeps yielding within the budget.
// Yield 1 ms: once the millisecond has passed, a sleep comes within the next 16 calls
// (the clock is read every 16th).
TEST(Backoff, YieldsThenSleepsWhenTheYieldBudgetIsSpent) {
  Backoff longYield(0, 1000 * 1000);
  for (int i = 0; i < 15; ++i) ASSERT_EQ(longYield.idle(), Phase::kSpin);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(longYield.idle(), Phase::kYield) << "call " << i;
  Backoff b(0, 1000);
  for (int i = 0; i < 15; ++i) ASSERT_EQ(b.idle(), Phase::kSpin);
  EXPECT_EQ(b.idle(), Phase::kYield);
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  Phase p = Phase::kYield;
  for (int i = 0; i < 16 && p != Phase::kSleep; ++i) p = b.idle();
  EXPECT_EQ(p, Phase::kSleep);
}

// A wait on a ring polled in user space (extendNs, SNCCL_NET_POLL_US) goes on in the
// budgets' last phase past them: yielding where they yield, spinning where they do not,
// and sleeps only once the extension is spent too.
TEST(Backoff, AnExtendedWaitPollsOnInItsLastPhaseThenSleeps) {
  const int64_t longNs = int64_t(60) * 1000 * 1000 * 1000;  // 60 s
  Backoff yields(0, 1);                                     // spin 0, yield 1 us: spent after the first clock read
  for (int i = 0; i < 15; ++i) ASSERT_EQ(yields.idle(longNs), Phase::kSpin);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(yields.idle(longNs), Phase::kYield) << "call " << i;
  EXPECT_EQ(yields.idle(0), Phase::kSleep) << "without the extension the budget is spent";

  Backoff spins(1, 0);  // spin 1 us, no yield (CPUs not oversubscribed)
  for (int i = 0; i < 15; ++i) ASSERT_EQ(spins.idle(longNs), Phase::kSpin);
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int i = 0; i < 100; ++i) ASSERT_EQ(spins.idle(longNs), Phase::kSpin) << "call " << i;

  Backoff shortExtension(0, 0);
  for (int i = 0; i < 15; ++i) ASSERT_EQ(shortExtension.idle(1000 * 1000), Phase::kSpin);  // 1 ms
  ASSERT_EQ(shortExtension.idle(1000 * 1000), Phase::kSpin);  // the 16th call: the clock starts
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  Phase p = Phase::kSpin;
  for (int i = 0; i < 16 && p != Phase::kSleep; ++i) p = shortExtension.idle(1000 * 1000);
  EXPECT_EQ(p, Phase::kSleep);
}

}  // namespace
}  // namespace snccl
