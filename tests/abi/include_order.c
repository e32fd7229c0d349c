/* snccl's nccl.h together with the CUDA runtime headers, in either order (C). The
 * runtime first works in C99 (the header then does not repeat the cudaStream_t typedef);
 * the runtime after the header repeats the identical typedef, which needs C11.
 * (CUDA's fp16/bf16 headers declare no types in C, so there is nothing more to check.) */
#if SNCCL_ABI_CUDA_FIRST
#include <cuda_runtime.h>
#include <nccl.h>
#else
#include <nccl.h>
#include <cuda_runtime.h>
#endif

ncclResult_t sncclAbiIncludeOrderC(cudaStream_t stream);
ncclResult_t sncclAbiIncludeOrderC(cudaStream_t stream) {
  struct CUstream_st* s = stream; /* same type as CUDA's */
  return s == NULL ? ncclSuccess : ncclInvalidArgument;
}
