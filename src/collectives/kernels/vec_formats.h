// Private to src/collectives/kernels: lane-parallel datatype traits for the reduction loops.
//
// Each dtype gets a traits struct naming its storage element (Elem), the type arithmetic
// happens in (Acc: fp32 for fp16/bf16/fp8, the type itself otherwise), a lane count, and
// widen/narrow between storage and arithmetic vectors. Everything is written on GCC vector
// types, so one source becomes SSE2 code in kernels_generic.cc and AVX2 code in
// kernels_avx2.cc, and the body and the tail of a buffer run the very same lane code.
//
// Narrowing rounds to nearest even. fp16 and bf16 overflow to infinity (IEEE); the fp8
// formats saturate to +-max finite, infinities included, like CUDA's __NV_SATFINITE, which
// NCCL's fp8 reductions use. NaN stays NaN (payload and sign are not specified; e4m3 and
// e5m2 produce 0x7F|sign). The bit recipes never touch an fp32 subnormal on a path whose
// result is kept, so they give the same bits under FTZ/DAZ.
//
// Included by exactly one translation unit per ISA, which first defines SNCCL_KERNEL_ISA:
// the namespace keeps each ISA's instantiation of these templates apart (same names,
// different machine code, so sharing them across TUs would be an ODR violation).
#pragma once

#ifndef SNCCL_KERNEL_ISA
#error "define SNCCL_KERNEL_ISA before including vec_formats.h"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

// kernels_avx2.cc raises the ISA with a target pragma, which (in C++) does not update macros
// such as __AVX2__, so it states its vector width and F16C explicitly.
#if defined(__F16C__) && !defined(SNCCL_KERNEL_F16C)
#define SNCCL_KERNEL_F16C 1
#endif
#if defined(SNCCL_KERNEL_F16C)
#include <immintrin.h>
#endif

namespace snccl::kernels::SNCCL_KERNEL_ISA {

template <class T, size_t N>
struct VecOf {
  typedef T type __attribute__((vector_size(N * sizeof(T))));
};
// N lanes of T.
template <class T, size_t N>
using Vec = typename VecOf<T, N>::type;

// Arithmetic vectors are one register of the ISA this TU is compiled for. Wider GCC vectors
// would be split by the compiler anyway, and passing them by value between helpers has no
// stable ABI (-Wpsabi).
#if defined(SNCCL_KERNEL_VEC_BYTES)
inline constexpr size_t kVecBytes = SNCCL_KERNEL_VEC_BYTES;
#elif defined(__AVX512F__)
inline constexpr size_t kVecBytes = 64;
#elif defined(__AVX__)
inline constexpr size_t kVecBytes = 32;
#else
inline constexpr size_t kVecBytes = 16;
#endif

template <class V, class T>
inline V splat(T x) {
  return V{} + x;  // GCC broadcasts a scalar operand to every lane
}

// 2^e as a compile-time float (std::ldexp is not constexpr in C++20).
constexpr float pow2f(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}

// int8..int64, uint*, float and double: stored and computed as themselves.
template <class T>
struct Plain {
  using Elem = T;
  using Acc = T;
  static constexpr size_t kLanes = kVecBytes / sizeof(T);
  using VE = Vec<Elem, kLanes>;
  using VA = VE;
  static VA widen(VE v) { return v; }
  static VE narrow(VA v) { return v; }
};

// The formats that compute in fp32: one register of fp32 lanes.
inline constexpr size_t kNarrowLanes = kVecBytes / sizeof(float);
using VF = Vec<float, kNarrowLanes>;
using VI = Vec<int32_t, kNarrowLanes>;
using VU = Vec<uint32_t, kNarrowLanes>;

inline VU bitsOf(VF f) { return (VU)f; }
inline VF floatOf(VU u) { return (VF)u; }
inline VF intToFloat(VU small) { return __builtin_convertvector((VI)small, VF); }
// Lane masks from signed compares: every value compared below is < 2^31 (sign bits are
// masked off first), and x86 has signed vector compares only, so unsigned ones cost more.
inline VI lanes(VU v) { return (VI)v; }

// IEEE binary16: 1-5-10, bias 15.
struct Fp16 {
  using Elem = uint16_t;
  using Acc = float;
  static constexpr size_t kLanes = kNarrowLanes;
  using VE = Vec<Elem, kLanes>;
  using VA = VF;

  static VF widenSoft(VE h16) {
    VU h = __builtin_convertvector(h16, VU);
    VU sign = (h & 0x8000u) << 16;
    VU em = h & 0x7FFFu;
    VU normal = (em << 13) + (112u << 23);  // rebias 15 -> 127
    // Subnormal halves are normal fp32 values: em * 2^-24, exact.
    VU sub = bitsOf(intToFloat(em) * pow2f(-24));
    // Inf/NaN: NaNs come out quiet with the payload kept, as vcvtph2ps does.
    VU special = (em << 13) | 0x7F800000u | ((VU)(lanes(em) > 0x7C00) & 0x00400000u);
    VU r = lanes(em) < 0x400 ? sub : (lanes(em) >= 0x7C00 ? special : normal);
    return floatOf(r | sign);
  }

  static VE narrowSoft(VF f) {
    VU x = bitsOf(f);
    VU sign = (x >> 16) & 0x8000u;
    VU ax = x & 0x7FFFFFFFu;
    // Normal results: add just under half an ulp plus the ulp's low bit (ties to even), drop
    // 13 bits, rebias. Carries ripple into the exponent, which is the correct rounding.
    VU normal = (ax + 0xFFFu + ((ax >> 13) & 1u) - (112u << 23)) >> 13;
    // Below 2^-14 the ulp is 2^-24; adding 0.5f (whose ulp is 2^-24) lets the FPU round.
    VU sub = bitsOf(floatOf(ax) + 0.5f) - 0x3F000000u;
    VU nan = 0x7E00u | ((ax >> 13) & 0x3FFu);  // quiet, payload truncated (as vcvtps2ph)
    VU r = lanes(ax) >= 0x38800000 ? normal : sub;
    r = lanes(ax) >= 0x477FF000 ? splat<VU>(0x7C00u) : r;  // >= 65520 rounds to infinity
    r = lanes(ax) > 0x7F800000 ? nan : r;
    return __builtin_convertvector(r | sign, VE);
  }

#if defined(SNCCL_KERNEL_F16C)
  // Same bits as the software recipes (the tests compare both tables), one vcvtph2ps or
  // vcvtps2ph per 4 lanes. With AVX the 8-lane forms cover a whole register.
  static VF widen(VE h) {
    VF r;
    constexpr size_t kStep = kLanes >= 8 ? 8 : 4;
    for (size_t i = 0; i < kLanes; i += kStep) {
      __m128i in{};
      std::memcpy(&in, reinterpret_cast<const char*>(&h) + i * 2, kStep * 2);
      if constexpr (kStep == 8) {
        __m256 f = _mm256_cvtph_ps(in);
        std::memcpy(reinterpret_cast<char*>(&r) + i * 4, &f, sizeof f);
      } else {
        __m128 f = _mm_cvtph_ps(in);
        std::memcpy(reinterpret_cast<char*>(&r) + i * 4, &f, sizeof f);
      }
    }
    return r;
  }
  static VE narrow(VF v) {
    VE r;
    constexpr size_t kStep = kLanes >= 8 ? 8 : 4;
    constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (size_t i = 0; i < kLanes; i += kStep) {
      __m128i h;
      if constexpr (kStep == 8) {
        __m256 f;
        std::memcpy(&f, reinterpret_cast<const char*>(&v) + i * 4, sizeof f);
        h = _mm256_cvtps_ph(f, kMode);
      } else {
        __m128 f;
        std::memcpy(&f, reinterpret_cast<const char*>(&v) + i * 4, sizeof f);
        h = _mm_cvtps_ph(f, kMode);
      }
      std::memcpy(reinterpret_cast<char*>(&r) + i * 2, &h, kStep * 2);
    }
    return r;
  }
#else
  static VF widen(VE h) { return widenSoft(h); }
  static VE narrow(VF f) { return narrowSoft(f); }
#endif
};

// bfloat16: the top half of an fp32.
struct Bf16 {
  using Elem = uint16_t;
  using Acc = float;
  static constexpr size_t kLanes = kNarrowLanes;
  using VE = Vec<Elem, kLanes>;
  using VA = VF;

  static VF widen(VE h) { return floatOf(__builtin_convertvector(h, VU) << 16); }
  static VE narrow(VF f) {
    VU x = bitsOf(f);
    // Ties to even on the dropped 16 bits; overflow carries into infinity, as IEEE rounds.
    VU rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    VU nan = (x >> 16) | 0x40u;  // rounding could turn a NaN into infinity: keep it quiet NaN
    VU r = lanes(x & 0x7FFFFFFFu) > 0x7F800000 ? nan : rounded;
    return __builtin_convertvector(r, VE);
  }
};

// OCP fp8: E4M3FN (bias 7, no infinities, S.1111.111 is NaN, max 448) and E5M2 (bias 15,
// IEEE-like, max 57344). Narrowing saturates to max finite (see the header comment).
template <int kExpBits, int kManBits, bool kHasInf>
struct Fp8 {
  using Elem = uint8_t;
  using Acc = float;
  static constexpr size_t kLanes = kNarrowLanes;
  using VE = Vec<Elem, kLanes>;
  using VA = VF;

  static constexpr uint32_t kBias = (1u << (kExpBits - 1)) - 1;
  static constexpr uint32_t kInfCode = ((1u << kExpBits) - 1) << kManBits;  // e5m2 only
  static constexpr uint32_t kFirstNaN = kHasInf ? kInfCode + 1 : 0x7Fu;
  static constexpr uint32_t kMaxCode = kHasInf ? kInfCode - 1 : 0x7Eu;
  static constexpr uint32_t kShift = 23 - kManBits;
  static constexpr uint32_t kRebias = (127 - kBias) << kManBits;
  static constexpr uint32_t kMinNormalBits = (128 - kBias) << 23;  // 2^(1-bias) as fp32 bits
  // A float whose ulp is the fp8 subnormal step 2^(1-bias-M): adding it makes the FPU round.
  static constexpr float kSubMagic = pow2f(1 - int(kBias) - kManBits + 23);
  static constexpr uint32_t kSubMagicBits = (127 + 1 - kBias - kManBits + 23) << 23;

  static VF widen(VE h8) {
    VU h = __builtin_convertvector(h8, VU);
    VU sign = (h & 0x80u) << 24;
    VU em = h & 0x7Fu;
    VU normal = (em << kShift) + ((127 - kBias) << 23);
    VU sub = bitsOf(intToFloat(em) * pow2f(1 - int(kBias) - kManBits));
    VU r = lanes(em) < int(1u << kManBits) ? sub : normal;
    if constexpr (kHasInf) r = lanes(em) == int(kInfCode) ? splat<VU>(0x7F800000u) : r;
    r = lanes(em) >= int(kFirstNaN) ? splat<VU>(0x7FC00000u) : r;
    return floatOf(r | sign);
  }

  static VE narrow(VF f) {
    VU x = bitsOf(f);
    VU sign = (x >> 24) & 0x80u;
    VU ax = x & 0x7FFFFFFFu;
    VU normal = ((ax + ((1u << (kShift - 1)) - 1) + ((ax >> kShift) & 1u)) >> kShift) - kRebias;
    VU sub = bitsOf(floatOf(ax) + kSubMagic) - kSubMagicBits;
    VU r = lanes(ax) >= int(kMinNormalBits) ? normal : sub;
    r = lanes(r) > int(kMaxCode) ? splat<VU>(kMaxCode) : r;  // saturate; infinity lands here too
    r = lanes(ax) > 0x7F800000 ? splat<VU>(0x7Fu) : r;
    return __builtin_convertvector(r | sign, VE);
  }
};
using Fp8E4M3 = Fp8<4, 3, false>;
using Fp8E5M2 = Fp8<5, 2, true>;

}  // namespace snccl::kernels::SNCCL_KERNEL_ISA
