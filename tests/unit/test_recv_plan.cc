// net::RecvPlan (transport/net/net_entry.h): where the receive side of a net ring posts
// each message. Whoever posts asks for steps in increasing order and may ask for one
// step again (an irecv that found no free request is retried); a plan names steps
// relative to the first message of its operation and replaces the previous one; steps it
// does not name, and steps past it, go to their slot.
#include <gtest/gtest.h>

#include <vector>

#include "transport/net/net_entry.h"

namespace snccl::net {
namespace {

TEST(RecvPlan, NamesOnlyItsStepsInOrderAndAgainOnRetry) {
  RecvPlan plan;
  uint32_t bytes = 0;
  EXPECT_EQ(plan.find(0, &bytes), nullptr);  // no plan yet
  char a[8], b[8];
  const std::vector<RecvTarget> targets = {{1, 100, a}, {3, 200, b}};
  plan.set(10, targets);
  EXPECT_EQ(plan.find(10, &bytes), nullptr);
  EXPECT_EQ(plan.find(11, &bytes), a);
  EXPECT_EQ(bytes, 100u);
  EXPECT_EQ(plan.find(11, &bytes), a);  // retried
  EXPECT_EQ(plan.find(12, &bytes), nullptr);
  EXPECT_EQ(plan.find(13, &bytes), b);
  EXPECT_EQ(bytes, 200u);
  EXPECT_EQ(plan.find(14, &bytes), nullptr);
  EXPECT_EQ(plan.find(1000, &bytes), nullptr);
}

TEST(RecvPlan, StepsPostedBeforeThePlanAreSkippedAndANewPlanReplacesTheOld) {
  RecvPlan plan;
  uint32_t bytes = 0;
  char a[8], b[8], c[8];
  const std::vector<RecvTarget> first = {{0, 1, a}, {1, 2, b}, {2, 3, c}};
  plan.set(20, first);
  // Steps 20 and 21 were posted (into slots) before the plan: the poster asks from 22.
  EXPECT_EQ(plan.find(22, &bytes), c);
  EXPECT_EQ(bytes, 3u);
  const std::vector<RecvTarget> second = {{0, 4, b}};
  plan.set(23, second);
  EXPECT_EQ(plan.find(23, &bytes), b);
  EXPECT_EQ(bytes, 4u);
  EXPECT_EQ(plan.find(24, &bytes), nullptr);
  plan.set(30, {});  // an empty plan names nothing
  EXPECT_EQ(plan.find(30, &bytes), nullptr);
}

}  // namespace
}  // namespace snccl::net
