// snccl's nccl.h together with the CUDA runtime headers, in either order (C++), as CUDA
// users write it: cudaStream_t must be CUDA's own type, and with the runtime included
// first snccl's header pulls in the fp16/bf16/fp8 headers as NVIDIA's does.
#if SNCCL_ABI_CUDA_FIRST
#include <cuda_runtime.h>
#include <nccl.h>
#ifndef __CUDA_BF16_TYPES_EXIST__
#error "nccl.h after cuda_runtime.h should provide the bf16 types (cuda_bf16.h)"
#endif
#ifndef __CUDA_FP8_TYPES_EXIST__
#error "nccl.h after cuda_runtime.h should provide the fp8 types in C++ (cuda_fp8.h)"
#endif
#else
#include <nccl.h>
#include <cuda_runtime.h>
#endif

#include <type_traits>

static_assert(std::is_same_v<cudaStream_t, struct CUstream_st*>);
static_assert(std::is_same_v<decltype(&ncclAllReduce),
                             ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                              cudaStream_t)>);

ncclResult_t sncclAbiIncludeOrderCxx(cudaStream_t stream);
ncclResult_t sncclAbiIncludeOrderCxx(cudaStream_t stream) {
  return stream == nullptr ? ncclSuccess : ncclInvalidArgument;
}
