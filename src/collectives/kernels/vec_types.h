// Private to src/collectives/kernels: the vector vocabulary of the kernel loops -- GCC vector
// types one register wide, and the integer lane plumbing the narrow float formats need.
//
// Included (through vec_formats.h) by exactly one translation unit per ISA, which first
// defines SNCCL_KERNEL_ISA: that namespace keeps each ISA's instantiation of these inline
// functions and templates apart (same names, different machine code, so sharing them across
// TUs would be an ODR violation). kernels_avx2.cc raises the ISA with a target pragma, which
// in C++ does not update macros such as __AVX2__, so it also defines SNCCL_KERNEL_AVX2 and
// SNCCL_KERNEL_F16C itself; the generic TU derives them from the compiler's flags.
#pragma once

#ifndef SNCCL_KERNEL_ISA
#error "define SNCCL_KERNEL_ISA before including the kernel headers"
#endif

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__AVX2__) && !defined(SNCCL_KERNEL_AVX2)
#define SNCCL_KERNEL_AVX2 1
#endif
#if defined(__F16C__) && !defined(SNCCL_KERNEL_F16C)
#define SNCCL_KERNEL_F16C 1
#endif
#if defined(__x86_64__)
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

// Arithmetic vectors are one register: 32 bytes with AVX2, else 16 (SSE2, NEON). Wider GCC
// vectors would be split by the compiler anyway, and passing them by value between helpers
// has no stable ABI (-Wpsabi). AVX-512 is not used: these loops are bound by memory.
#if defined(SNCCL_KERNEL_AVX2)
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

// fp32 lanes, and the same lanes as integers, for the formats that compute in fp32.
inline constexpr size_t kNarrowLanes = kVecBytes / sizeof(float);
using VF = Vec<float, kNarrowLanes>;
using VI = Vec<int32_t, kNarrowLanes>;
using VU = Vec<uint32_t, kNarrowLanes>;

inline VU bitsOf(VF f) { return (VU)f; }
inline VF floatOf(VU u) { return (VF)u; }
inline VF intToFloat(VU small) { return __builtin_convertvector((VI)small, VF); }
// Lane masks come from signed compares: every value compared is < 2^31 (sign bits are masked
// off first), and x86 has signed vector compares only, so unsigned ones cost more.
inline VI lanes(VU v) { return (VI)v; }

// Zero-extends 8- or 16-bit storage lanes to 32 bits, and truncates back (the lanes must fit).
// GCC's __builtin_convertvector between these sizes goes through general registers a byte at
// a time on x86, so x86 uses the unpack/pack instructions; other targets use the builtin.
template <class E>
inline VU zext(Vec<E, kNarrowLanes> v) {
#if defined(__x86_64__)
  // Move the 4, 8 or 16 storage bytes in as one integer: a narrow store followed by a wide
  // reload through memory would stall store forwarding.
  __m128i in;
  if constexpr (sizeof v == 4) {
    in = _mm_cvtsi32_si128(std::bit_cast<int>(v));
  } else if constexpr (sizeof v == 8) {
    in = _mm_cvtsi64_si128(std::bit_cast<long long>(v));
  } else {
    in = (__m128i)v;
  }
#if defined(SNCCL_KERNEL_AVX2)
  const __m256i w = sizeof(E) == 1 ? _mm256_cvtepu8_epi32(in) : _mm256_cvtepu16_epi32(in);
#else
  const __m128i z = _mm_setzero_si128();
  const __m128i w = _mm_unpacklo_epi16(sizeof(E) == 1 ? _mm_unpacklo_epi8(in, z) : in, z);
#endif
  return (VU)w;
#else
  return __builtin_convertvector(v, VU);
#endif
}

template <class E>
inline Vec<E, kNarrowLanes> trunc(VU v) {
#if defined(__x86_64__)
#if defined(SNCCL_KERNEL_AVX2)
  const __m256i w = (__m256i)v;
  __m128i x = _mm_packus_epi32(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
  if constexpr (sizeof(E) == 1) x = _mm_packus_epi16(x, x);
#else
  __m128i x = (__m128i)v;
  if constexpr (sizeof(E) == 1) {
    x = _mm_packs_epi32(x, x);  // lanes <= 0xFF: signed saturation never triggers
    x = _mm_packus_epi16(x, x);
  } else {
    // SSE2 only packs with signed saturation: sign-extend bit 15 first so it never triggers.
    x = _mm_srai_epi32(_mm_slli_epi32(x, 16), 16);
    x = _mm_packs_epi32(x, x);
  }
#endif
  using R = Vec<E, kNarrowLanes>;
  if constexpr (sizeof(R) == 4) {
    return std::bit_cast<R>(_mm_cvtsi128_si32(x));
  } else if constexpr (sizeof(R) == 8) {
    return std::bit_cast<R>(_mm_cvtsi128_si64(x));
  } else {
    return (R)x;
  }
#else
  return __builtin_convertvector(v, Vec<E, kNarrowLanes>);
#endif
}

template <class V>
inline V loadVec(const unsigned char* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

template <class V>
inline void storeVec(unsigned char* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

}  // namespace snccl::kernels::SNCCL_KERNEL_ISA
