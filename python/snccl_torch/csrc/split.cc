// Communicator split: subgroups made from this group with ncclCommSplit instead of a new
// communicator from scratch (a unique id through the store and a full bootstrap).
#include <algorithm>

#include "op.h"

namespace snccl_torch {

c10::intrusive_ptr<ProcessGroupSnccl> ProcessGroupSnccl::splitRanks(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    std::chrono::milliseconds timeout) {
  TORCH_CHECK(canSplit(), "snccl backend: the library has no ncclCommSplit");
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  // The ranks lists of one split do not overlap, so each one's smallest rank is a color
  // that every member computes alike and no other list shares. The key orders the child's
  // ranks as `ranks` lists them.
  const int color = me == ranks.end() ? kSplitNoColor : *std::min_element(ranks.begin(), ranks.end());
  const int key = static_cast<int>(me - ranks.begin());
  ncclComm_t child = nullptr;
  {
    std::lock_guard<std::mutex> lock(commMutex_);
    if (!aborted_.empty()) SNCCL_THROW("snccl backend: the communicator was aborted: " + aborted_);
    check(api_.CommSplit(comm_, color, key, &child, nullptr), "ncclCommSplit");
    ++splits_;
  }
  if (me == ranks.end()) {
    TORCH_CHECK(child == nullptr, "snccl backend: ncclCommSplit without a color made a communicator");
    return {};
  }
  TORCH_CHECK(child != nullptr, "snccl backend: ncclCommSplit made no communicator");
  return c10::make_intrusive<ProcessGroupSnccl>(store, key, static_cast<int>(ranks.size()),
                                                timeout, child);
}

#if SNCCL_TORCH_SPLIT
c10::intrusive_ptr<c10d::Backend> ProcessGroupSnccl::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  const auto timeout = opts && opts->timeout.count() > 0 ? opts->timeout : timeout_;
  return splitRanks(store, ranks, timeout);
}

c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupSnccl::getBackendOptions() {
  return c10::make_intrusive<Options>(getBackendName(), timeout_);
}
#endif

}  // namespace snccl_torch
