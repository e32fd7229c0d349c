// Coalescing (torch >= 2.6): the operations between startCoalescing and endCoalescing form
// one NCCL group, and the coalesced tensor collectives are built on it.
#include "op.h"

#if SNCCL_TORCH_COALESCING

namespace snccl_torch {

void ProcessGroupSnccl::startCoalescing() {
  std::lock_guard<std::mutex> lock(commMutex_);
  TORCH_CHECK(!coalescing_, "snccl backend: startCoalescing inside a coalescing region");
  if (!aborted_.empty()) SNCCL_THROW("snccl backend: the communicator was aborted: " + aborted_);
  check(api_.GroupStart(), "ncclGroupStart");
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::endCoalescing() {
  auto all = c10::make_intrusive<WorkSnccl>(c10d::OpType::COALESCED, std::vector<at::Tensor>{});
  std::vector<c10::intrusive_ptr<WorkSnccl>> works;
  std::string error;
  {
    std::lock_guard<std::mutex> lock(commMutex_);
    TORCH_CHECK(coalescing_, "snccl backend: endCoalescing without startCoalescing");
    coalescing_ = false;
    works.swap(coalesced_);
    works.push_back(all);
    ncclResult_t r = api_.GroupEnd();  // queues (or, without host streams, runs) the group
    if (r != ncclSuccess && r != ncclInProgress) {
      failed_ = true;
      error = errorText(r, "ncclGroupEnd (coalesced operations)");
    } else if (stream_) {
      enqueueLocked(works);
      return all;
    }
  }
  // outside commMutex_, as in launch: completion runs the copies and releases
  auto eptr = error.empty() ? nullptr : std::make_exception_ptr(std::runtime_error(error));
  for (auto& w : works) w->complete(eptr);
  if (!error.empty()) SNCCL_THROW(error);
  return all;
}

namespace {

// Runs `each(i)` for every pair as one coalesced group; the group is closed on an error too.
template <typename F>
c10::intrusive_ptr<c10d::Work> coalesced(ProcessGroupSnccl& pg, size_t n, F&& each) {
  pg.startCoalescing();
  try {
    for (size_t i = 0; i < n; ++i) each(i);
  } catch (...) {
    try {
      pg.endCoalescing();
    } catch (...) {  // the first error is the one to report
    }
    throw;
  }
  return pg.endCoalescing();
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "snccl backend: allgather_into_tensor_coalesced needs one output per input");
  return coalesced(*this, inputs.size(),
                   [&](size_t i) { _allgather_base(outputs[i], inputs[i], opts); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "snccl backend: reduce_scatter_tensor_coalesced needs one output per input");
  return coalesced(*this, inputs.size(),
                   [&](size_t i) { _reduce_scatter_base(outputs[i], inputs[i], opts); });
}

}  // namespace snccl_torch

#endif  // SNCCL_TORCH_COALESCING
