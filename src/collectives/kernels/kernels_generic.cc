// The reduction kernels for the build's baseline ISA (x86-64: SSE2, unless SNCCL_NATIVE
// adds -march=native). Every CPU the library loads on can run this table.
#define SNCCL_KERNEL_ISA generic
#include "collectives/kernels/vec_loops.h"

namespace snccl::kernels {

const KernelTable& genericKernels() {
  static const KernelTable table = generic::makeTable("generic");
  return table;
}

}  // namespace snccl::kernels
