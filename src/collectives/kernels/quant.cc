// Block quantization kernels (quant.h). Built with -ffp-contract=off: decoding must give the same
// bits on every rank, so no product and sum may be fused.
#include "collectives/kernels/quant.h"

#include <algorithm>
#include <cstring>

namespace snccl::kernels::quant {

// The loops inline into the AVX2 and baseline clones of encode() and decode().
#define SNCCL_QUANT_INLINE [[gnu::always_inline]] inline

namespace {

// (x + kRound) - kRound is x rounded to the nearest integer (ties to even) for |x| < 2^22, with
// plain adds that vectorise on any x86-64.
constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
// A block whose largest magnitude is below this encodes as zeros (its scale is 0): the reciprocal
// of a smaller scale could overflow. Its values stay in the residual.
constexpr float kTiny = 1e-30f;
constexpr uint32_t kExpMask = 0x7f800000u;  // magnitude bits at or above: inf or NaN

inline uint32_t magBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u & 0x7fffffffu;
}
inline float fromBits(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// dst[j] = q_j * scale for the n elements of one block whose payload starts at p.
template <int Bits>
SNCCL_QUANT_INLINE void decodeBlock(const uint8_t* p, size_t n, float scale, float* dst) {
  if constexpr (Bits == 8) {
    const int8_t* q = reinterpret_cast<const int8_t*>(p);
    for (size_t j = 0; j < n; ++j) dst[j] = float(q[j]) * scale;
  } else {
    const size_t pairs = n / 2;
    for (size_t k = 0; k < pairs; ++k) {
      const int8_t b = int8_t(p[k]);
      dst[2 * k] = float(int8_t(b << 4) >> 4) * scale;
      dst[2 * k + 1] = float(b >> 4) * scale;
    }
    if (n & 1) dst[n - 1] = float(int8_t(p[pairs] << 4) >> 4) * scale;
  }
}

template <int Bits>
SNCCL_QUANT_INLINE void storePayload(const int32_t* q, size_t n, uint8_t* p) {
  if constexpr (Bits == 8) {
    for (size_t j = 0; j < n; ++j) p[j] = uint8_t(int8_t(q[j]));
  } else {
    const size_t pairs = n / 2;
    for (size_t k = 0; k < pairs; ++k) p[k] = uint8_t((q[2 * k] & 0xf) | ((q[2 * k + 1] & 0xf) << 4));
    if (n & 1) p[pairs] = uint8_t(q[n - 1] & 0xf);
  }
}

SNCCL_QUANT_INLINE void divideInto(const float* d, size_t n, uint32_t divisor, float* out) {
  if (divisor > 1) {
    const float div = float(divisor);
    for (size_t j = 0; j < n; ++j) out[j] = d[j] / div;
  } else {
    for (size_t j = 0; j < n; ++j) out[j] = d[j];
  }
}

// One block of encode(): n <= kMaxBlock elements.
template <int Bits>
SNCCL_QUANT_INLINE void encodeBlock(const Format& f, size_t n, const float* a, const uint8_t* prevScales,
                                    const uint8_t* prevPayload, float* residual, float* scaleOut, uint8_t* payload,
                                    float* out, uint32_t divisor) {
  // The values to encode: `a` itself, or a + decode(prev) + residual in v. Loops, not
  // memcpy: a call per block costs more than the copy.
  alignas(64) float vbuf[kMaxBlock];
  alignas(64) float d[kMaxBlock];
  alignas(64) int32_t q[kMaxBlock];
  const float* v = a;
  if (prevScales != nullptr) {
    float ps;
    std::memcpy(&ps, prevScales, sizeof ps);
    decodeBlock<Bits>(prevPayload, n, ps, d);
    for (size_t j = 0; j < n; ++j) vbuf[j] = a[j] + d[j];
    v = vbuf;
  }
  if (residual != nullptr) {
    for (size_t j = 0; j < n; ++j) vbuf[j] = v[j] + residual[j];
    v = vbuf;
  }
  uint32_t mag = 0;
  for (size_t j = 0; j < n; ++j) mag = std::max(mag, magBits(v[j]));
  const float qm = float(qmax(f));
  float scale;
  if (mag >= kExpMask) {  // an infinity or NaN in the block
    scale = fromBits(0x7fc00000u);
    std::fill(q, q + n, 0);
    if (residual != nullptr) std::fill(residual, residual + n, 0.0f);
  } else if (fromBits(mag) < kTiny) {
    scale = 0.0f;
    std::fill(q, q + n, 0);
  } else {
    const float amax = fromBits(mag);
    scale = amax / qm;
    const float inv = qm / amax;
    const int32_t lim = qmax(f);
    for (size_t j = 0; j < n; ++j) {
      const float r = (v[j] * inv + kRound) - kRound;
      q[j] = std::clamp(int32_t(r), -lim, lim);
    }
  }
  std::memcpy(scaleOut, &scale, sizeof scale);
  storePayload<Bits>(q, n, payload);
  // What every rank will decode from these bytes: the same expression as decodeBlock.
  for (size_t j = 0; j < n; ++j) d[j] = float(q[j]) * scale;
  if (residual != nullptr && mag < kExpMask)
    for (size_t j = 0; j < n; ++j) residual[j] = v[j] - d[j];
  if (out != nullptr) divideInto(d, n, divisor, out);
}

template <int Bits>
SNCCL_QUANT_INLINE void encodeRun(const Format& f, size_t count, const float* a, const uint8_t* prev, float* residual,
                                  uint8_t* enc, float* out, uint32_t divisor) {
  const size_t nb = numBlocks(count, f);
  float* scales = reinterpret_cast<float*>(enc);
  uint8_t* payload = enc + nb * sizeof(float);
  const uint8_t* prevPayload = prev != nullptr ? prev + nb * sizeof(float) : nullptr;
  for (size_t b = 0; b < nb; ++b) {
    const size_t first = b * f.block;
    const size_t n = std::min<size_t>(f.block, count - first);
    const size_t poff = Bits == 8 ? first : first / 2;
    encodeBlock<Bits>(f, n, a + first, prev != nullptr ? prev + b * sizeof(float) : nullptr,
                      prevPayload != nullptr ? prevPayload + poff : nullptr,
                      residual != nullptr ? residual + first : nullptr, scales + b, payload + poff,
                      out != nullptr ? out + first : nullptr, divisor);
  }
}

template <int Bits>
SNCCL_QUANT_INLINE void decodeRun(const Format& f, size_t count, const uint8_t* enc, float* out, uint32_t divisor) {
  const size_t nb = numBlocks(count, f);
  const uint8_t* payload = enc + nb * sizeof(float);
  alignas(64) float d[kMaxBlock];
  for (size_t b = 0; b < nb; ++b) {
    const size_t first = b * f.block;
    const size_t n = std::min<size_t>(f.block, count - first);
    float scale;
    std::memcpy(&scale, enc + b * sizeof(float), sizeof scale);
    const uint8_t* p = payload + (Bits == 8 ? first : first / 2);
    if (divisor > 1) {
      decodeBlock<Bits>(p, n, scale, d);
      divideInto(d, n, divisor, out + first);
    } else {
      decodeBlock<Bits>(p, n, scale, out + first);
    }
  }
}

}  // namespace

bool validFormat(int bits, size_t block) {
  return (bits == 8 || bits == 4) && block >= kMinBlock && block <= kMaxBlock && block % 2 == 0;
}

// Cloned for AVX2 (picked once by the loader from the CPU), everything above inlined: the loops
// above are twice as wide there. The arithmetic is the same IEEE operations either way, so the
// clone changes no bits. Not under ThreadSanitizer: the loader runs the clones' resolver while
// it relocates the library, before the sanitizer's runtime is set up, and the resolver's
// instrumentation then crashes every program at start.
#if defined(__SANITIZE_THREAD__)
#define SNCCL_QUANT_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SNCCL_QUANT_CLONES
#endif
#endif
#ifndef SNCCL_QUANT_CLONES
#define SNCCL_QUANT_CLONES __attribute__((target_clones("avx2", "default")))
#endif

SNCCL_QUANT_CLONES void encode(const Format& f, size_t count, const float* a, const uint8_t* prev, float* residual,
                               uint8_t* enc, float* out, uint32_t divisor) {
  if (f.bits == 8)
    encodeRun<8>(f, count, a, prev, residual, enc, out, divisor);
  else
    encodeRun<4>(f, count, a, prev, residual, enc, out, divisor);
}

SNCCL_QUANT_CLONES void decode(const Format& f, size_t count, const uint8_t* enc, float* out, uint32_t divisor) {
  if (f.bits == 8)
    decodeRun<8>(f, count, enc, out, divisor);
  else
    decodeRun<4>(f, count, enc, out, divisor);
}

}  // namespace snccl::kernels::quant
