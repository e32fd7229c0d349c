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
#pragma once

#include "collectives/kernels/vec_types.h"

namespace snccl::kernels::SNCCL_KERNEL_ISA {

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

// IEEE binary16: 1-5-10, bias 15.
struct Fp16 {
  using Elem = uint16_t;
  using Acc = float;
  static constexpr size_t kLanes = kNarrowLanes;
  using VE = Vec<Elem, kLanes>;
  using VA = VF;

  static VF widenSoft(VE h16) {
    VU h = zext<Elem>(h16);
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
    return trunc<Elem>(r | sign);
  }

#if defined(SNCCL_KERNEL_F16C)
  // One vcvtph2ps / vcvtps2ph per register, with the same bits as the software recipes (the
  // tests compare both tables, NaN payloads included).
  static constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
#if defined(SNCCL_KERNEL_AVX2)
  static VF widen(VE h) { return (VF)_mm256_cvtph_ps((__m128i)h); }
  static VE narrow(VF f) { return (VE)_mm256_cvtps_ph((__m256)f, kRound); }
#else  // F16C without AVX2 (Ivy Bridge): 4 lanes, 8 bytes of storage
  static VF widen(VE h) { return (VF)_mm_cvtph_ps(_mm_cvtsi64_si128(std::bit_cast<int64_t>(h))); }
  static VE narrow(VF f) { return std::bit_cast<VE>(_mm_cvtsi128_si64(_mm_cvtps_ph((__m128)f, kRound))); }
#endif
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

  static VF widen(VE h) { return floatOf(zext<Elem>(h) << 16); }
  static VE narrow(VF f) {
    VU x = bitsOf(f);
    // Ties to even on the dropped 16 bits; overflow carries into infinity, as IEEE rounds.
    VU rounded = (x + 0x7FFFu + ((x >> 16) & 1u)) >> 16;
    VU nan = (x >> 16) | 0x40u;  // rounding could turn a NaN into infinity: keep it quiet NaN
    VU r = lanes(x & 0x7FFFFFFFu) > 0x7F800000 ? nan : rounded;
    return trunc<Elem>(r);
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
#if defined(SNCCL_KERNEL_F16C) && defined(SNCCL_KERNEL_AVX2)
    if constexpr (kExpBits == 5 && kManBits == 2) {  // e5m2 << 8 is the fp16 of the same value
      const __m128i bytes = _mm_cvtsi64_si128(std::bit_cast<int64_t>(h8));
      return (VF)_mm256_cvtph_ps(_mm_slli_epi16(_mm_cvtepu8_epi16(bytes), 8));
    }
#endif
    VU h = zext<Elem>(h8);
    VU sign = (h & 0x80u) << 24;
    VU em = h & 0x7Fu;
    VU normal = (em << kShift) + ((127 - kBias) << 23);
    VU sub = bitsOf(intToFloat(em) * pow2f(1 - int(kBias) - kManBits));
    VU r = lanes(em) < int(1u << kManBits) ? sub : normal;
    if constexpr (kHasInf) {
      // Infinity, or a NaN made quiet with its payload kept: the bits vcvtph2ps gives for
      // the same fp16 (e5m2 is the top byte of an fp16), so both paths agree.
      VU special = (em << kShift) | 0x7F800000u | ((VU)(lanes(em) > int(kInfCode)) & 0x00400000u);
      r = lanes(em) >= int(kInfCode) ? special : r;
    } else {
      r = lanes(em) >= int(kFirstNaN) ? splat<VU>(0x7FC00000u) : r;
    }
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
    return trunc<Elem>(r | sign);
  }
};
using Fp8E4M3 = Fp8<4, 3, false>;
using Fp8E5M2 = Fp8<5, 2, true>;

}  // namespace snccl::kernels::SNCCL_KERNEL_ISA
