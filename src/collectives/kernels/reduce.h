// CPU reduction kernels for the 12 NCCL datatypes.
//
// fp16, bf16 and the two fp8 formats are widened to fp32, combined, and rounded back to
// nearest even, element by element, so every rank and every kernel width gives the same
// bits. Kernels are vectorised (the compiler's auto-vectoriser on simple loops plus
// explicit unrolling); tests compare them against a scalar reference for every type/op.
#pragma once

#include <cstddef>
#include <cstdint>

#include "snccl/nccl.h"

namespace snccl::kernels {

// A fully resolved reduction: base op plus the PreMulSum scalar and Avg's divisor.
struct RedOpSpec {
  ncclRedOp_t base = ncclSum;  // ncclSum, ncclProd, ncclMax or ncclMin only
  bool hasScalar = false;      // PreMulSum: inputs are multiplied by `scalar` (same dtype)
  alignas(8) unsigned char scalar[8] = {};
  uint32_t divisor = 0;        // Avg: final values are divided by this (0: none)
};

size_t typeSize(ncclDataType_t dt);      // 0 for an invalid type
const char* typeName(ncclDataType_t dt); // nccl-tests names: "int8", "float", "bfloat16", "f8e4m3", ...
const char* opName(ncclRedOp_t op);      // "sum", "prod", "max", "min", "avg"

// dst[i] = a[i] (op) g(b[i]) for i < count, where g multiplies by the PreMulSum scalar when
// scaleB is set; then, when `finalize`, divides by op.divisor if non-zero.
// dst may equal a or b (exactly, no partial overlap).
void reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt, const RedOpSpec& op,
            bool scaleB, bool finalize);

// dst[i] = g(src[i]) with the same scale/finalize rules; plain memcpy when neither applies.
// dst may equal src.
void copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const RedOpSpec& op, bool scale,
          bool finalize);

}  // namespace snccl::kernels
