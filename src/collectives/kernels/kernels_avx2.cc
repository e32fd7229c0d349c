// The reduction kernels compiled for AVX2 + F16C, used when the CPU has both (Haswell and
// later, Zen): twice the lanes of the SSE2 baseline, hardware fp16 conversion, and the
// variable shifts and blends the bf16/fp8 recipes need. FMA is deliberately not enabled:
// contracting a*b+c would change PreMulSum/Prod results versus the generic table.
#include "collectives/kernels/kernel_table.h"

#if defined(__x86_64__)

// Every header the kernels use is included above the target pragma, so functions declared
// by the standard library keep the baseline target; only our own templates, which live in
// the avx2 namespace, are compiled for AVX2. Otherwise a shared inline function could be
// emitted with AVX2 code and picked by the linker for the baseline table.
#include <cpuid.h>
#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,f16c")
#endif
#define SNCCL_KERNEL_ISA avx2
#define SNCCL_KERNEL_AVX2 1  // the pragma does not define __AVX2__/__F16C__ in C++
#define SNCCL_KERNEL_F16C 1
#include "collectives/kernels/vec_loops.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC reset_options
#endif

namespace snccl::kernels {

const KernelTable* avx2Kernels() {
  static const KernelTable* table = []() -> const KernelTable* {
    // AVX2 through the compiler's check, which also asks the OS whether it saves YMM state;
    // F16C straight from CPUID (leaf 1, ECX bit 29), which not every compiler can name.
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    if (!__builtin_cpu_supports("avx2") || !f16c) return nullptr;
    static const KernelTable t = avx2::makeTable("avx2");
    return &t;
  }();
  return table;
}

}  // namespace snccl::kernels

#else

namespace snccl::kernels {
const KernelTable* avx2Kernels() { return nullptr; }
}  // namespace snccl::kernels

#endif
