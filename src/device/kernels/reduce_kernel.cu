// The device build of the reduction kernel (reduce_kernel.h): a grid-stride loop, one
// element per thread per step. Built by nvcc into the fatbinary the library embeds
// (src/CMakeLists.txt) and loads with cuModuleLoadData.
#include "device/kernels/reduce_kernel.h"

extern "C" __global__ void sncclReduceKernel(snccl::device::kernels::ReduceKernelArgs args) {
  const uint64_t begin = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  snccl::device::kernels::reduceRange(args, begin, stride);
}
