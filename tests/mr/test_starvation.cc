// Oversubscription: 8 ranks on a machine with as few as 2 cores complete thousands of
// small allreduces without starving one another (docs/design.md §7: waits spin briefly, then
// yield, then sleep). There is no timing threshold: the harness watchdog is the only
// limit, and every result is verified so that a rank reading stale data is caught.
#include <string>
#include <vector>

#include "snccl/snccl.h"
#include "support/harness.h"

namespace {

using namespace sntest;

constexpr int kRanks = 8;
constexpr int kIters = 3000;
constexpr int kWatchdogSec = 300;

// Iteration `it` reduces values that differ per iteration, rank and element, so a result
// left over from an earlier iteration never passes.
int64_t value(int it, int rank, size_t i) { return int64_t(it) * 1000 + rank * 10 + int64_t(i); }
int64_t expectedSum(int it, int n, size_t i) {
  return int64_t(n) * it * 1000 + 10 * int64_t(n) * (n - 1) / 2 + int64_t(n) * int64_t(i);
}

// Blocking allreduces (count 1..16, alternating in-place), or, with streams, batches of
// 25 queued on a host stream per synchronize.
bool manySmallAllReduces(ncclComm_t comm, int rank, int n, bool streams) {
  sncclStream_t stream = nullptr;
  if (streams && !ncclOk(sncclStreamCreate(&stream), "sncclStreamCreate", rank)) return false;
  constexpr int kBatch = 25;
  std::vector<std::vector<int64_t>> in(kBatch), out(kBatch);
  bool ok = true;
  for (int base = 0; base < kIters && ok; base += kBatch) {
    for (int b = 0; b < kBatch && ok; ++b) {
      int it = base + b;
      size_t count = 1 + size_t(it % 16);
      bool inPlace = it % 2 == 1;
      in[b].resize(count);
      out[b].assign(count, -1);
      for (size_t i = 0; i < count; ++i) in[b][i] = value(it, rank, i);
      void* dst = inPlace ? in[b].data() : out[b].data();
      ok = ncclOk(ncclAllReduce(in[b].data(), dst, count, ncclInt64, ncclSum, comm, SNCCL_STREAM(stream)),
                  "ncclAllReduce #" + std::to_string(it), rank);
    }
    if (ok && streams) ok = ncclOk(sncclStreamSynchronize(stream), "sncclStreamSynchronize", rank);
    for (int b = 0; b < kBatch && ok; ++b) {
      int it = base + b;
      const std::vector<int64_t>& res = it % 2 == 1 ? in[b] : out[b];
      for (size_t i = 0; i < res.size(); ++i)
        if (res[i] != expectedSum(it, n, i)) {
          ADD_FAILURE() << "rank " << rank << ": allreduce #" << it << " element " << i << " = " << res[i]
                        << ", expected " << expectedSum(it, n, i);
          ok = false;
          break;
        }
    }
  }
  if (stream != nullptr) ncclOk(sncclStreamDestroy(stream), "sncclStreamDestroy", rank);
  return ok;
}

class Starvation : public ::testing::TestWithParam<Mode> {};

TEST_P(Starvation, ThousandsOfSmallAllReducesBlocking) {
  runRanks(GetParam(), kRanks, [](ncclComm_t c, int r, int n) { return manySmallAllReduces(c, r, n, false); },
           kWatchdogSec);
}

TEST_P(Starvation, ThousandsOfSmallAllReducesOnStreams) {
  runRanks(GetParam(), kRanks, [](ncclComm_t c, int r, int n) { return manySmallAllReduces(c, r, n, true); },
           kWatchdogSec);
}

INSTANTIATE_TEST_SUITE_P(All, Starvation, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& info) { return std::string(modeName(info.param)); });

}  // namespace
