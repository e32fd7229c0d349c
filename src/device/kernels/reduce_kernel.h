// The device reduction kernel's arguments and body, shared by the nvcc build
// (reduce_kernel.cu: one thread per element stride) and host builds (the CPU stand-in of
// the driver API runs the same body as one loop).
//
// One kernel, sncclReduceKernel(ReduceKernelArgs), does what the CPU kernels' reduce()
// and copy() do (collectives/kernels/reduce.h), element i of every pointer at a time:
// - b != nullptr: dst[i] = a[i] (op) g(b[i]), g the PreMulSum scaling when kScaleB;
// - b == nullptr: dst[i] = g(a[i]), g the scaling when kScaleB;
// then the division by `divisor` when kFinalize and divisor > 1. dst may equal a or b.
// Every pointer is device memory and element-aligned.
#pragma once

#include <stdint.h>

#include "device/kernels/elem.h"
#include "snccl/nccl.h"

namespace snccl::device::kernels {

// The kernel's name in the module (cuModuleGetFunction).
inline constexpr const char* kReduceKernelName = "sncclReduceKernel";

struct ReduceKernelArgs {
  void* dst;
  const void* a;
  const void* b;  // nullptr: a copy of a (scaled and/or divided)
  uint64_t count;
  int32_t dt;    // ncclDataType_t
  int32_t base;  // ncclSum, ncclProd, ncclMax or ncclMin
  uint32_t divisor;
  uint32_t flags;       // kScaleB | kFinalize
  uint64_t scalarBits;  // PreMulSum's scalar: one element of dt in the low bytes
};
inline constexpr uint32_t kScaleB = 1;    // apply the PreMulSum scalar to b (or to a when copying)
inline constexpr uint32_t kFinalize = 2;  // divide by divisor (when it is above 1)

template <class Tr, int kOp>
SNCCL_HD typename Tr::A combine(typename Tr::A x, typename Tr::A y) {
  if constexpr (kOp == ncclSum) {
    return opSum(x, y);
  } else if constexpr (kOp == ncclProd) {
    return opProd(x, y);
  } else if constexpr (kOp == ncclMax) {
    return opMax(x, y);
  } else {
    return opMin(x, y);
  }
}

// kOp < 0: the copy form (b unused).
template <class Tr, int kOp>
SNCCL_HD void reduceLoop(const ReduceKernelArgs& k, uint64_t begin, uint64_t stride) {
  using E = typename Tr::E;
  using A = typename Tr::A;
  E scalarElem;
  memcpy(&scalarElem, &k.scalarBits, sizeof scalarElem);
  const A s = Tr::widen(scalarElem);
  const bool scale = (k.flags & kScaleB) != 0, divide = (k.flags & kFinalize) != 0 && k.divisor > 1;
  E* d = static_cast<E*>(k.dst);
  const E* a = static_cast<const E*>(k.a);
  const E* b = static_cast<const E*>(k.b);
  for (uint64_t i = begin; i < k.count; i += stride) {
    A r;
    if constexpr (kOp < 0) {
      if (!scale && !divide) {  // a plain copy keeps every bit (NaN payloads, fp8 infinities)
        d[i] = a[i];
        continue;
      }
      r = Tr::widen(a[i]);
      if (scale) r = scaleBy<Tr>(r, s);
    } else {
      A y = Tr::widen(b[i]);
      if (scale) y = Tr::widen(Tr::narrow(scaleBy<Tr>(y, s)));
      r = combine<Tr, kOp>(Tr::widen(a[i]), y);
    }
    if (divide) r = divideBy(r, k.divisor);
    d[i] = Tr::narrow(r);
  }
}

template <class Tr>
SNCCL_HD void reduceType(const ReduceKernelArgs& k, uint64_t begin, uint64_t stride) {
  if (k.b == nullptr) return reduceLoop<Tr, -1>(k, begin, stride);
  switch (k.base) {
    case ncclSum:
      return reduceLoop<Tr, ncclSum>(k, begin, stride);
    case ncclProd:
      return reduceLoop<Tr, ncclProd>(k, begin, stride);
    case ncclMax:
      return reduceLoop<Tr, ncclMax>(k, begin, stride);
    case ncclMin:
      return reduceLoop<Tr, ncclMin>(k, begin, stride);
    default:
      return;
  }
}

// Elements begin, begin + stride, ... of the operation.
SNCCL_HD void reduceRange(const ReduceKernelArgs& k, uint64_t begin, uint64_t stride) {
  switch (k.dt) {
    case ncclInt8:
      return reduceType<Plain<int8_t>>(k, begin, stride);
    case ncclUint8:
      return reduceType<Plain<uint8_t>>(k, begin, stride);
    case ncclInt32:
      return reduceType<Plain<int32_t>>(k, begin, stride);
    case ncclUint32:
      return reduceType<Plain<uint32_t>>(k, begin, stride);
    case ncclInt64:
      return reduceType<Plain<int64_t>>(k, begin, stride);
    case ncclUint64:
      return reduceType<Plain<uint64_t>>(k, begin, stride);
    case ncclFloat16:
      return reduceType<Fp16>(k, begin, stride);
    case ncclFloat32:
      return reduceType<Plain<float>>(k, begin, stride);
    case ncclFloat64:
      return reduceType<Plain<double>>(k, begin, stride);
    case ncclBfloat16:
      return reduceType<Bf16>(k, begin, stride);
    case ncclFloat8e4m3:
      return reduceType<Fp8E4M3>(k, begin, stride);
    case ncclFloat8e5m2:
      return reduceType<Fp8E5M2>(k, begin, stride);
    default:
      return;
  }
}

}  // namespace snccl::device::kernels
