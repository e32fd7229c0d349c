// The reduction kernel's fatbinary (device/kernels/reduce_kernel.cu built by nvcc for
// the architectures src/CMakeLists.txt lists), embedded in the library. Empty when the
// build had no nvcc: the real driver then has no kernel to load (the CPU stand-in needs
// none: it runs the host build of the same source).
#pragma once

#include <cstddef>

namespace snccl::device {

extern const unsigned char kReduceKernelImage[];
extern const size_t kReduceKernelImageBytes;

}  // namespace snccl::device
