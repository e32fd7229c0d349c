// CPU reduction kernels for the 12 NCCL datatypes.
//
// fp16, bf16 and the two fp8 formats are widened to fp32, combined, and rounded back to
// nearest even, element by element, so every rank and every kernel width gives the same
// bits. Kernels are vectorised (GCC vector types, one register wide, SSE2 baseline plus an
// AVX2/F16C table picked once per process from the CPU); tests compare every table against
// a scalar reference for every type/op.
//
// Semantics every rank relies on (so results agree bit for bit across ranks and CPUs):
// - Integers: Sum and Prod wrap modulo 2^bits; Avg divides by truncation toward zero.
// - Float Max/Min: NaN if either operand is NaN; -0 < +0. Both ops are commutative.
// - NaN stays NaN, but its payload and sign are not specified.
// - fp16/bf16 overflow to infinity. fp8 (OCP E4M3FN and E5M2) saturates to +-max finite,
//   infinities included (CUDA's __NV_SATFINITE, as NCCL's fp8 reductions), so an e5m2
//   infinity that goes through arithmetic comes out as +-57344; a plain copy keeps it.
// - PreMulSum: g(x) = x * scalar rounded to the dtype, then combined, so that
//   reduce(a, b, scaleB) == reduce(a, copy(b, scale)). Never a fused multiply-add.
// - Avg: float types divide the combined value in fp32 (fp16/bf16/fp8/float) or double,
//   before the one rounding to the dtype. A divisor of 0 or 1 means no division.
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
const char* opName(ncclRedOp_t op);      // "sum", "prod", "max", "min", "avg"; "premulsum" from ncclNumOps up

// dst[i] = a[i] (op) g(b[i]) for i < count, where g multiplies by the PreMulSum scalar when
// scaleB is set; then, when `finalize`, divides by op.divisor if non-zero.
// dst may equal a or b (exactly, no partial overlap). Pointers need only element alignment;
// count may be 0. An invalid dtype or base op does nothing (the API layer validates first).
void reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt, const RedOpSpec& op,
            bool scaleB, bool finalize);

// out[k][i] = a[i] (op) g(b[i]) for every k < nout, as reduce() computes it. The first
// nstream outputs are written with streaming (non-temporal) stores where 16-byte aligned:
// for results nobody reads soon (a large AllReduce's outputs), each line is written
// without first being read into the cache, a third less memory traffic than a cached
// store. The others get plain stores: an output that is also an input of the call (in
// place) has its lines in the cache already, and streaming over them is slower
// (perf/bench_kernels fold_in_place: 2.7x at 32 MiB, 6x at 1 MiB on one core). Every
// out[k] may equal a or b exactly. The stores are weakly ordered: call streamFence()
// before telling another thread the data is there.
void reduceStream(void* const* out, int nout, int nstream, const void* a, const void* b, size_t count,
                  ncclDataType_t dt, const RedOpSpec& op, bool scaleB, bool finalize);
// Makes this thread's streaming stores visible to others before its later stores.
void streamFence();

// dst[i] = g(src[i]) with the same scale/finalize rules; plain memcpy when neither applies.
// dst may equal src.
void copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const RedOpSpec& op, bool scale,
          bool finalize);

}  // namespace snccl::kernels
