// The quantized all_reduce (sncclAllReduceQuantized, snccl.h): what snccl_torch's
// quantized DDP hook calls, with the residual of error feedback kept by the caller.
#include "op.h"

namespace snccl_torch {

c10::intrusive_ptr<c10d::Work> ProcessGroupSnccl::allreduceQuantized(
    at::Tensor& tensor, at::Tensor& residual, int64_t bits, int64_t blockSize, bool average) {
  TORCH_CHECK(api_.AllReduceQuantized != nullptr, "snccl backend: ", api_.path,
              " has no sncclAllReduceQuantized (not an snccl library?)");
  TORCH_CHECK(tensor.scalar_type() == at::kFloat,
              "snccl backend: quantized all_reduce takes float32 tensors, got ",
              tensor.scalar_type());
  TORCH_CHECK(bits == 8 || bits == 4, "snccl backend: quantized all_reduce takes 8 or 4 bits, got ",
              bits);
  TORCH_CHECK(blockSize >= 0, "snccl backend: negative block size");
  Op op(c10d::OpType::ALLREDUCE);
  op.outputs = {tensor};
  at::Tensor b = op.out(tensor);
  float* res = nullptr;
  if (residual.defined() && residual.numel() > 0) {
    checkCpu(residual);
    TORCH_CHECK(
        residual.scalar_type() == at::kFloat && residual.is_contiguous() &&
            residual.numel() == tensor.numel(),
        "snccl backend: the residual must be a contiguous float32 tensor of the tensor's size (",
        tensor.numel(), " elements)");
    op.keep.push_back(residual);
    res = residual.data_ptr<float>();
  }
  return launch(op, [&](ncclComm_t comm) {
    check(api_.AllReduceQuantized(b.data_ptr(), b.data_ptr(), b.numel(), ncclFloat32,
                                  average ? ncclAvg : ncclSum, static_cast<int>(bits),
                                  static_cast<size_t>(blockSize), res, comm, asCuda(stream_)),
          "sncclAllReduceQuantized");
  });
}

}  // namespace snccl_torch
