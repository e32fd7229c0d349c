// monitored_barrier: rank 0 waits for each rank's arrival through the group's store and
// names the ranks that did not arrive in time, with Gloo's wording; then it releases them.
// The communicator is not used, so a rank that is dead or stuck in a collective is reported
// instead of wedging the barrier.
#include <string>

#include "op.h"

namespace snccl_torch {

void ProcessGroupSnccl::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  using namespace std::chrono;
  const milliseconds timeout = opts.timeout == c10d::kUnsetTimeout ? timeout_ : opts.timeout;
  const auto deadline = steady_clock::now() + timeout;
  auto left = [&] {
    return std::max(milliseconds(1), duration_cast<milliseconds>(deadline - steady_clock::now()));
  };
  // Every rank counts its calls, so the n-th call of each rank uses the same keys.
  const std::string prefix =
      "snccl/monitored_barrier/" + std::to_string(monitoredBarriers_++) + "/";
  const std::string released = prefix + "released";
  const std::vector<uint8_t> one{1};
  if (rank_ != 0) {
    store_->set(prefix + std::to_string(rank_), one);
    try {
      store_->wait({released}, left());
    } catch (const std::exception& e) {
      SNCCL_THROW("[Rank " + std::to_string(rank_) + "]: rank 0 did not release monitoredBarrier in " +
                  std::to_string(timeout.count()) +
                  " ms (it reports the ranks that did not arrive): " + e.what());
    }
    return;
  }
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    const std::string key = prefix + std::to_string(r);
    bool arrived = false;
    try {
      store_->wait({key}, left());
      arrived = true;
    } catch (const std::exception&) {
      arrived = store_->check({key});
    }
    if (!arrived) {
      missing.push_back(r);
      if (!waitAllRanks) break;
    }
  }
  if (!missing.empty()) {
    std::string ranks;
    for (int r : missing) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    SNCCL_THROW("[Rank 0]: Rank" + std::string(missing.size() > 1 ? "s " : " ") + ranks +
                " failed to pass monitoredBarrier in " + std::to_string(timeout.count()) +
                " ms (snccl backend)");
  }
  for (int r = 1; r < size_; ++r) store_->deleteKey(prefix + std::to_string(r));
  store_->set(released, one);
}

}  // namespace snccl_torch
