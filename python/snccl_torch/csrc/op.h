// Internal to the backend's sources: one operation being prepared (its staged tensors and
// what happens on success), and helpers shared by the operation files.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <utility>
#include <vector>

#include "process_group.h"

namespace snccl_torch {

inline void checkCpu(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "snccl backend: only CPU tensors are supported, got ",
              t.device());
  TORCH_CHECK(t.layout() == at::kStrided, "snccl backend: only dense (strided) tensors");
}

// Bytes of a tensor as the NCCL element count of ncclUint8 (data movement of any dtype).
inline size_t nbytes(const at::Tensor& t) { return t.numel() * t.element_size(); }

// One operation being prepared: the tensors the library touches and what happens on success.
struct ProcessGroupSnccl::Op {
  explicit Op(c10d::OpType t) : type(t) {}
  c10d::OpType type;
  std::vector<at::Tensor> outputs;                          // what the future yields
  std::vector<at::Tensor> keep;                             // alive until the end
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;   // (dst, src) after success
  std::function<void()> release;

  at::Tensor in(const at::Tensor& t) {
    checkCpu(t);
    at::Tensor c = t.contiguous();
    keep.push_back(c);
    return c;
  }
  at::Tensor out(const at::Tensor& t) {
    checkCpu(t);
    if (t.is_contiguous()) {
      keep.push_back(t);
      return t;
    }
    at::Tensor c = t.contiguous();  // also carries the input of in-place operations
    keep.push_back(c);
    copies.emplace_back(t, c);
    return c;
  }
};

// Runs calls between ncclGroupStart and ncclGroupEnd (ending the group on an error too).
template <typename F>
void grouped(const NcclApi& api, ncclResult_t* end, F&& calls) {
  api.GroupStart();
  try {
    calls();
  } catch (...) {
    api.GroupEnd();
    throw;
  }
  *end = api.GroupEnd();
}

}  // namespace snccl_torch
