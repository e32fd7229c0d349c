// Smoke test: allreduce of floats over threads and processes.
#include <vector>

#include "support/harness.h"

namespace {

bool allreduceFloat(ncclComm_t comm, int rank, int n) {
  for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1023), size_t(1 << 20) + 3}) {
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = float(rank + int(i % 5));
    if (ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
      ADD_FAILURE() << "rank " << rank << ": " << ncclGetLastError(comm);
      return false;
    }
    for (size_t i = 0; i < count; ++i) {
      float expect = float(n * (n - 1) / 2 + n * int(i % 5));
      if (out[i] != expect) {
        ADD_FAILURE() << "rank " << rank << " count " << count << " elem " << i << ": " << out[i] << " != " << expect;
        return false;
      }
    }
  }
  return true;
}

class Smoke : public ::testing::TestWithParam<std::tuple<sntest::Mode, int>> {};

TEST_P(Smoke, AllReduceFloat) {
  auto [mode, n] = GetParam();
  sntest::runRanks(mode, n, allreduceFloat);
}

INSTANTIATE_TEST_SUITE_P(All, Smoke,
                         ::testing::Combine(::testing::Values(sntest::Mode::kThreads, sntest::Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 4, 5, 8)));

}  // namespace
