// SNCCL_TIMEOUT in a group over two communicators. One thread drives both (runLoop), and
// when nothing moves it sleeps on the first unfinished one only, so the second one's
// deadline is checked only once the first is done. Each operation's timeout counts from
// its first sleep (CommRunner::startTimeoutClock), and in a group every unfinished
// operation starts its clock at the group's first sleep: a peer missing from the second
// communicator fails the call about one timeout after it began, not after the first
// communicator's wait plus a timeout.
//
// Ranks as threads: rank 0 runs {AllReduce on A, AllReduce on B} as one group; rank 1
// joins A only, kLateMs late, and never B. With the group's clock, rank 0 fails after
// about kTimeoutSec; counting B from its own first sleep, after kLateMs + kTimeoutSec.
// The bounds below sit 1.5 s from each of the two (a failure-detection bound, not a
// performance threshold), and a watchdog bounds the whole test.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "snccl/nccl.h"
#include "support/harness.h"

namespace {

constexpr int kTimeoutSec = 4;
constexpr int kLateMs = 3000;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(GroupTimeout, EveryCommunicatorCountsFromTheGroupsFirstSleep) {
  // Read when a communicator is created; this binary runs no other test.
  ASSERT_EQ(setenv("SNCCL_TIMEOUT", std::to_string(kTimeoutSec).c_str(), 1), 0);
  sntest::Watchdog dog(90, "GroupTimeout.EveryCommunicatorCountsFromTheGroupsFirstSleep");
  ncclComm_t a[2], b[2];
  ASSERT_EQ(ncclCommInitAll(a, 2, nullptr), ncclSuccess);
  ASSERT_EQ(ncclCommInitAll(b, 2, nullptr), ncclSuccess);

  // Both ranks on both communicators first: connections are made by the first operation
  // that needs them, with both ends in it (a missing end would fail in the connect, not
  // in the wait this test is about).
  float in[2][4] = {{1, 2, 3, 4}, {10, 20, 30, 40}}, out[2][4];
  auto warmUp = [&](int r) {
    for (ncclComm_t* c : {a, b})
      if (ncclAllReduce(in[r], out[r], 4, ncclFloat, ncclSum, c[r], nullptr) != ncclSuccess) return false;
    return true;
  };
  bool warm1 = false;
  std::thread w1([&] { warm1 = warmUp(1); });
  const bool warm0 = warmUp(0);
  w1.join();
  ASSERT_TRUE(warm0 && warm1) << "the warm-up AllReduces failed";
  ASSERT_EQ(out[0][3], 44.0f);

  ncclResult_t lateResult = ncclInternalError;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(kLateMs));
    lateResult = ncclAllReduce(in[1], out[1], 4, ncclFloat, ncclSum, a[1], nullptr);
  });
  const auto t0 = std::chrono::steady_clock::now();
  ncclGroupStart();
  ncclAllReduce(in[0], out[0], 4, ncclFloat, ncclSum, a[0], nullptr);
  ncclAllReduce(in[0], out[0], 4, ncclFloat, ncclSum, b[0], nullptr);
  const ncclResult_t r = ncclGroupEnd();
  const double took = secondsSince(t0);
  const std::string error = ncclGetLastError(b[0]);
  late.join();

  EXPECT_EQ(lateResult, ncclSuccess) << "rank 1's late AllReduce on A";
  EXPECT_EQ(r, ncclRemoteError) << error;
  EXPECT_NE(error.find("timed out"), std::string::npos) << error;
  EXPECT_GT(took, kTimeoutSec - 1.5) << "failed before the timeout could have passed: " << error;
  EXPECT_LT(took, kTimeoutSec + kLateMs / 1000.0 - 1.5)
      << "B's timeout counted from when A finished, not from the group's first sleep: " << error;
  for (ncclComm_t c : {a[0], a[1], b[0], b[1]}) ncclCommAbort(c);
  dog.disarm();
}

}  // namespace
