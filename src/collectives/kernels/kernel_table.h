// Private to src/collectives/kernels (and its tests/benchmarks): the per-ISA tables of typed
// reduction loops behind reduce() and copy().
//
// reduce.cc resolves (dtype, base op, flags) to one function pointer per call, so the loops
// never branch on the type. There is one table per instruction set the library was built
// for (kernels_generic.cc: the x86-64 SSE2 baseline or whatever -march says; kernels_avx2.cc:
// AVX2 + F16C). Every table produces the same bits for the same inputs, so ranks on
// different CPUs agree; tests run every table this CPU supports against a scalar reference.
#pragma once

#include <cstddef>

#include "collectives/kernels/reduce.h"

namespace snccl::kernels {

inline constexpr int kNumBaseOps = 4;  // ncclSum, ncclProd, ncclMax, ncclMin

// dst[i] = a[i] (op) b[i], then divided by op.divisor when the table slot is the finalize one.
using ReduceFn = void (*)(void* dst, const void* a, const void* b, size_t count, const RedOpSpec& op);
// (out[k] + outOffset bytes)[i] = a[i] (op) b[i] for every k < nout, with streaming stores
// to out[0, nstream) (reduce.h: reduceStream).
using ReduceStreamFn = void (*)(void* const* out, int nout, int nstream, size_t outOffset, const void* a,
                                const void* b, size_t count, const RedOpSpec& op);
// dst[i] = src[i] scaled by op.scalar and/or divided by op.divisor, as the slot says.
using MapFn = void (*)(void* dst, const void* src, size_t count, const RedOpSpec& op);
// Conversions between a narrow float format and fp32 (exact bits, used by the tests).
using ToFloatFn = void (*)(float* dst, const void* src, size_t count);
using FromFloatFn = void (*)(void* dst, const float* src, size_t count);

struct KernelTable {
  const char* isa;                                // "generic" or "avx2"
  ReduceFn reduce[ncclNumTypes][kNumBaseOps][2];  // [dtype][base op][finalize]
  ReduceStreamFn reduceStream[ncclNumTypes][kNumBaseOps][2];  // as reduce
  MapFn map[ncclNumTypes][2][2];                  // [dtype][scale][finalize]; [0][0] copies
  ToFloatFn toFloat[ncclNumTypes];                // fp16, bf16, fp8 only; nullptr otherwise
  FromFloatFn fromFloat[ncclNumTypes];            // round to nearest even (fp8: saturating)
};

const KernelTable& genericKernels();
// nullptr when the library was not built for x86-64 or this CPU lacks AVX2 or F16C.
const KernelTable* avx2Kernels();
// The fastest table this CPU runs, chosen once per process.
const KernelTable& bestKernels();

// reduce() and copy() on an explicit table; the public functions use bestKernels().
void reduceWith(const KernelTable& k, void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt,
                const RedOpSpec& op, bool scaleB, bool finalize);
void reduceStreamWith(const KernelTable& k, void* const* out, int nout, int nstream, const void* a, const void* b,
                      size_t count, ncclDataType_t dt, const RedOpSpec& op, bool scaleB, bool finalize);
void copyWith(const KernelTable& k, void* dst, const void* src, size_t count, ncclDataType_t dt, const RedOpSpec& op,
              bool scale, bool finalize);

}  // namespace snccl::kernels
