// Element arithmetic of the device reduction kernels, one element at a time, written so
// that nvcc (device code) and the host compiler (the CPU stand-in of the driver, tests)
// build the very same source.
//
// The results are bit for bit those of the CPU kernels (collectives/kernels/reduce.h
// states the rules: wrapping integers, Avg truncating toward zero in 64 bits, fp16/bf16
// and fp8 combined in fp32 and rounded to nearest even once, fp8 saturating, float
// Max/Min with NaN and -0 < +0, PreMulSum's product rounded to the dtype before it is
// combined), so ranks whose buffers live on different engines agree. The narrowing
// recipes are the CPU kernels' software ones (collectives/kernels/vec_formats.h) on one
// lane. The device build must not contract a*b+c into a fused multiply-add (-fmad=false).
#pragma once

#include <stdint.h>
#include <string.h>

#include <type_traits>

#if defined(__CUDACC__)
#define SNCCL_HD __host__ __device__ __forceinline__
#else
#define SNCCL_HD inline
#endif

namespace snccl::device::kernels {

SNCCL_HD uint32_t bitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
SNCCL_HD float floatOf(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
// 2^e for a normal fp32 exponent.
SNCCL_HD float pow2f(int e) { return floatOf(uint32_t(127 + e) << 23); }

// Storage type E, arithmetic type A, widen/narrow between them.
template <class T>
struct Plain {
  using E = T;
  using A = T;
  static SNCCL_HD A widen(E e) { return e; }
  static SNCCL_HD E narrow(A a) { return a; }
};

struct Fp16 {
  using E = uint16_t;
  using A = float;
  static SNCCL_HD float widen(uint16_t h16) {
    const uint32_t h = h16, sign = (h & 0x8000u) << 16, em = h & 0x7FFFu;
    uint32_t r;
    if (em < 0x400u) {
      r = bitsOf(float(em) * pow2f(-24));  // subnormal: exact in fp32
    } else if (em >= 0x7C00u) {
      r = (em << 13) | 0x7F800000u | (em > 0x7C00u ? 0x00400000u : 0u);  // inf, quiet NaN
    } else {
      r = (em << 13) + (112u << 23);
    }
    return floatOf(r | sign);
  }
  static SNCCL_HD uint16_t narrow(float f) {
    const uint32_t x = bitsOf(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7FFFFFFFu;
    uint32_t r;
    if (ax > 0x7F800000u) {
      r = 0x7E00u | ((ax >> 13) & 0x3FFu);
    } else if (ax >= 0x477FF000u) {
      r = 0x7C00u;
    } else if (ax >= 0x38800000u) {
      r = (ax + 0xFFFu + ((ax >> 13) & 1u) - (112u << 23)) >> 13;
    } else {
      r = bitsOf(floatOf(ax) + 0.5f) - 0x3F000000u;
    }
    return uint16_t(r | sign);
  }
};

struct Bf16 {
  using E = uint16_t;
  using A = float;
  static SNCCL_HD float widen(uint16_t h) { return floatOf(uint32_t(h) << 16); }
  static SNCCL_HD uint16_t narrow(float f) {
    const uint32_t x = bitsOf(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((x >> 16) | 0x40u);
    return uint16_t((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
  }
};

// OCP fp8: E4M3FN (no infinities, 0x7F is NaN, max 448) and E5M2 (IEEE-like, max 57344).
template <int kExpBits, int kManBits, bool kHasInf>
struct Fp8 {
  using E = uint8_t;
  using A = float;
  static constexpr uint32_t kBias = (1u << (kExpBits - 1)) - 1;
  static constexpr uint32_t kInfCode = ((1u << kExpBits) - 1) << kManBits;
  static constexpr uint32_t kMaxCode = kHasInf ? kInfCode - 1 : 0x7Eu;
  static constexpr uint32_t kShift = 23 - kManBits;
  static constexpr uint32_t kRebias = (127 - kBias) << kManBits;
  static constexpr uint32_t kMinNormalBits = (128 - kBias) << 23;
  static constexpr uint32_t kSubMagicBits = (127 + 1 - kBias - kManBits + 23) << 23;

  static SNCCL_HD float widen(uint8_t h8) {
    const uint32_t h = h8, sign = (h & 0x80u) << 24, em = h & 0x7Fu;
    uint32_t r;
    if (em < (1u << kManBits)) {
      r = bitsOf(float(em) * pow2f(1 - int(kBias) - kManBits));
    } else {
      r = (em << kShift) + ((127 - kBias) << 23);
    }
    if (kHasInf) {
      if (em >= kInfCode) r = (em << kShift) | 0x7F800000u | (em > kInfCode ? 0x00400000u : 0u);
    } else if (em >= 0x7Fu) {
      r = 0x7FC00000u;
    }
    return floatOf(r | sign);
  }
  static SNCCL_HD uint8_t narrow(float f) {
    const uint32_t x = bitsOf(f), sign = (x >> 24) & 0x80u, ax = x & 0x7FFFFFFFu;
    uint32_t r;
    if (ax >= kMinNormalBits) {
      r = ((ax + ((1u << (kShift - 1)) - 1) + ((ax >> kShift) & 1u)) >> kShift) - kRebias;
    } else {
      r = bitsOf(floatOf(ax) + floatOf(kSubMagicBits)) - kSubMagicBits;
    }
    if (r > kMaxCode) r = kMaxCode;  // saturate; infinity lands here too
    if (ax > 0x7F800000u) r = 0x7Fu;
    return uint8_t(r | sign);
  }
};
using Fp8E4M3 = Fp8<4, 3, false>;
using Fp8E5M2 = Fp8<5, 2, true>;

template <class A>
inline constexpr bool kIsFloat = A(0.5) != A(0);

// The unsigned integer of an arithmetic type's width: wrapping Sum and Prod of integers
// without undefined behaviour, and the bits of floats.
template <class A>
struct UnsignedOf {
  using T = std::conditional_t<sizeof(A) == 1, uint8_t,
                               std::conditional_t<sizeof(A) == 2, uint16_t,
                                                  std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>>>;
};

template <class A>
SNCCL_HD typename UnsignedOf<A>::T floatBits(A v) {
  typename UnsignedOf<A>::T u;
  memcpy(&u, &v, sizeof u);
  return u;
}
template <class A>
SNCCL_HD A fromBits(typename UnsignedOf<A>::T u) {
  A v;
  memcpy(&v, &u, sizeof v);
  return v;
}

// The base operations on arithmetic values (ncclSum, ncclProd, ncclMax, ncclMin).
template <class A>
SNCCL_HD A opSum(A x, A y) {
  if constexpr (kIsFloat<A>) {
    return x + y;
  } else {
    using U = typename UnsignedOf<A>::T;
    return A(U(U(x) + U(y)));
  }
}
template <class A>
SNCCL_HD A opProd(A x, A y) {
  if constexpr (kIsFloat<A>) {
    return x * y;
  } else {
    using U = typename UnsignedOf<A>::T;
    return A(U(U(x) * U(y)));
  }
}
// Float Max/Min: a NaN operand gives NaN (the OR of both bit patterns), equal values
// give +0 for Max and -0 for Min (AND / OR of the bits): commutative to the bit.
template <class A>
SNCCL_HD A opMax(A x, A y) {
  if constexpr (kIsFloat<A>) {
    if (x > y) return x;
    if (x < y) return y;
    const auto xb = floatBits(x), yb = floatBits(y);
    return fromBits<A>(x == y ? (xb & yb) : (xb | yb));
  } else {
    return x > y ? x : y;
  }
}
template <class A>
SNCCL_HD A opMin(A x, A y) {
  if constexpr (kIsFloat<A>) {
    if (x < y) return x;
    if (x > y) return y;
    return fromBits<A>(floatBits(x) | floatBits(y));
  } else {
    return x < y ? x : y;
  }
}

// Avg's division: in the arithmetic type for floats, truncating in 64 bits for integers.
template <class A>
SNCCL_HD A divideBy(A v, uint32_t divisor) {
  if constexpr (kIsFloat<A>) {
    return v / A(divisor);
  } else if constexpr (A(-1) < A(0)) {
    return A(int64_t(v) / int64_t(divisor));
  } else {
    return A(uint64_t(v) / uint64_t(divisor));
  }
}

// PreMulSum: x * scalar rounded to the dtype (and widened again).
template <class Tr>
SNCCL_HD typename Tr::A scaleBy(typename Tr::A v, typename Tr::A s) {
  using A = typename Tr::A;
  if constexpr (kIsFloat<A>) {
    return Tr::widen(Tr::narrow(v * s));
  } else {
    using U = typename UnsignedOf<A>::T;
    return A(U(U(v) * U(s)));
  }
}

}  // namespace snccl::device::kernels
