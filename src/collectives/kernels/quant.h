// Block quantization of fp32 values for the quantized AllReduce (snccl.h: sncclAllReduceQuantized;
// core/quant_allreduce.h runs it).
//
// Values are cut into blocks of `block` elements; each block keeps one fp32 scale, the largest
// magnitude in the block divided by qmax (127 for int8, 7 for int4), and every element becomes the
// integer nearest value / scale, in [-qmax, qmax]. Decoding gives q * scale, so one encoding loses
// at most scale / 2 per element: half a step of its block.
//
// An encoded run of n elements is laid out as
//   [fp32 scale of each block][payload]
// where the payload is n bytes of int8, or ceil(n / 2) bytes of int4 pairs (element 2k in the low
// nibble of byte k, two's complement). Blocks hold an even number of elements, so every block but
// the last starts on a byte.
//
// Decoding is exact IEEE arithmetic (a product, then a sum or quotient, never fused), so every rank
// that decodes the same bytes gets the same bits, whatever its CPU. Encoding runs on one rank only
// and needs no such guarantee.
//
// A block holding a NaN or an infinity decodes to NaN everywhere (its scale is NaN); the residual
// of such a block is reset to 0 so that one bad step does not poison later ones.
#pragma once

#include <cstddef>
#include <cstdint>

namespace snccl::kernels::quant {

struct Format {
  int bits = 8;          // 8 or 4
  uint32_t block = 256;  // elements per scale
};

inline constexpr uint32_t kMinBlock = 8;
inline constexpr uint32_t kMaxBlock = 4096;
inline constexpr uint32_t kDefaultBlock = 256;

// bits 8 or 4, block even and in [kMinBlock, kMaxBlock].
bool validFormat(int bits, size_t block);
inline int qmax(const Format& f) { return f.bits == 8 ? 127 : 7; }
inline size_t numBlocks(size_t count, const Format& f) { return (count + f.block - 1) / f.block; }
inline size_t payloadBytes(size_t count, const Format& f) { return f.bits == 8 ? count : (count + 1) / 2; }
// Bytes of an encoded run of `count` elements.
inline size_t encodedBytes(size_t count, const Format& f) {
  return numBlocks(count, f) * sizeof(float) + payloadBytes(count, f);
}

// One encoding of `count` elements, fused with what the quantized AllReduce does around it:
//   v[i]   = a[i] + decode(prev)[i] (when prev) + residual[i] (when residual)
//   enc    = encode(v)
//   residual[i] = v[i] - decode(enc)[i]       (when residual)
//   out[i] = decode(enc)[i] / divisor         (when out; divisor 0 or 1: no
//   division)
// `out` may equal `a` (exactly); the other buffers must not overlap.
void encode(const Format& f, size_t count, const float* a, const uint8_t* prev, float* residual, uint8_t* enc,
            float* out, uint32_t divisor);
// out[i] = decode(enc)[i] / divisor (divisor 0 or 1: no division).
void decode(const Format& f, size_t count, const uint8_t* enc, float* out, uint32_t divisor);

}  // namespace snccl::kernels::quant
