// Collectives on the memory torch and MPI programs pass (mp/user_buffers.h): malloc'd
// buffers freed and reallocated between calls, and registered buffers in a process that
// forks, on 2 and 3 ranks as processes (shared memory) and as threads.
#include "mp/user_buffers.h"

#include <tuple>

#include "support/harness.h"

namespace {

using Param = std::tuple<sntest::Mode, int>;

class UserBuffers : public ::testing::TestWithParam<Param> {};

TEST_P(UserBuffers, EveryCollectiveOnReallocatedMallocBuffers) {
  const auto [mode, n] = GetParam();
  sntest::runRanks(mode, n, [](ncclComm_t comm, int rank, int nranks) {
    bool ok = userbuf::reallocBody(comm, rank, nranks);
    EXPECT_TRUE(ok) << "rank " << rank;
    return ok;
  }, 240);
}

TEST_P(UserBuffers, ForkAfterRegisterLeavesTheParentWorking) {
  const auto [mode, n] = GetParam();
  sntest::runRanks(mode, n, [](ncclComm_t comm, int rank, int nranks) {
    bool ok = userbuf::forkBody(comm, rank, nranks);
    EXPECT_TRUE(ok) << "rank " << rank;
    return ok;
  }, 240);
}

INSTANTIATE_TEST_SUITE_P(Ranks, UserBuffers,
                         ::testing::Combine(::testing::Values(sntest::Mode::kProcesses, sntest::Mode::kThreads),
                                            ::testing::Values(2, 3)),
                         sntest::modeRanksName);

}  // namespace
