// Inputs whose reductions are exact in any order (nccl-tests style), and the expected
// results computed independently of the library: double for floating types, 64-bit
// integers for integer types.
//
// Reduction inputs are small integers chosen per datatype so that every partial result of
// any reduction order is representable: e.g. {-1,0,1} for fp8 (|sum| <= 8 for 8 ranks,
// exact in e4m3 and e5m2), products of {1,2,-1} with at most two 2s among 8 ranks.
// Values repeat along the buffer with a prime period, so expectations are tabulated once
// per operation even for million-element buffers. Data-movement collectives use raw
// pseudo-random bit patterns (NaN encodings included): they must move bytes verbatim.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <vector>

#include "support/dtypes.h"

namespace sntest {

// Reduction operators under test: the five built-ins, then PreMulSum with each scalar
// residence.
enum OpKind { kOpSum, kOpProd, kOpMax, kOpMin, kOpAvg, kOpPreMulImm, kOpPreMulDev, kNumOpKinds };
inline const char* opKindName(int op) {
  static const char* kNames[] = {"sum", "prod", "max", "min", "avg", "premulsum(host-immediate)",
                                 "premulsum(device)"};
  return kNames[op];
}

constexpr size_t kPeriod = 97;

inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Raw bits of element `idx` sent by rank `src` in a data-movement test.
// A light mix (it runs once per element of multi-MiB buffers): distinct for distinct
// (src, idx) in practice, so shifted, swapped or stale data never matches.
inline uint64_t rawBits(uint64_t seed, int src, size_t idx, size_t size) {
  uint64_t h = (seed ^ (uint64_t(src) << 52)) + idx * 0x9E3779B97F4A7C15ull;
  h ^= h >> 32;
  h *= 0xD6E8FEB86659FD93ull;
  h ^= h >> 29;
  return size == 8 ? h : h & ((uint64_t(1) << (8 * size)) - 1);
}

// The PreMulSum scalar used for a datatype: exact products with the inputs below.
inline double preMulScalar(ncclDataType_t dt) {
  switch (dt) {
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 2;
    case ncclFloat32:
    case ncclFloat64:
      return 0.5;
    default:
      return 3;
  }
}

// Input value (an integer) of element with residue j on rank r.
inline int64_t inputValue(ncclDataType_t dt, int op, uint64_t seed, int r, size_t j) {
  const TypeInfo& t = typeInfo(dt);
  uint64_t h = mix64(seed * 31 + uint64_t(r) * 1000003ull + j);
  if (op == kOpProd) {
    // Factors of 2 are placed by position, not by hash, so that at most 2 of 8 ranks
    // contribute one (|product| <= 4, exact even in int8 and fp8).
    if ((uint64_t(r) + j) % 4 == 0) return 2;
    return (t.isSigned && h % 3 == 0) ? -1 : 1;
  }
  int64_t lo;
  uint64_t span;
  switch (dt) {
    case ncclInt8: lo = -5; span = 11; break;
    case ncclUint8: lo = 0; span = 11; break;
    case ncclInt32: lo = -1000000; span = 2000001; break;
    case ncclUint32: lo = 0; span = 100000000; break;
    case ncclInt64: lo = -(int64_t(1) << 57); span = (uint64_t(1) << 58) + 1; break;
    case ncclUint64: lo = 0; span = uint64_t(1) << 58; break;
    case ncclFloat16:
    case ncclBfloat16: lo = -8; span = 17; break;
    case ncclFloat32: lo = -1000; span = 2001; break;
    case ncclFloat64: lo = -(int64_t(1) << 40); span = (uint64_t(1) << 41) + 1; break;
    default: lo = -1; span = 3; break;  // fp8
  }
  // Float averages use non-negative inputs so that a zero result is exactly zero.
  if (op == kOpAvg && t.isFloat) {
    span = uint64_t(-lo) + 1;
    lo = 0;
  }
  return lo + int64_t(h % span);
}

inline uint64_t encodeValue(ncclDataType_t dt, double v) {
  return typeInfo(dt).isFloat ? encodeFloat(dt, v) : encodeInt(dt, int64_t(v));
}

// Tabulated inputs and expected result of one reduction over n ranks.
struct ReductionModel {
  ncclDataType_t dt;
  int op = kOpSum;
  int n = 1;
  std::vector<uint64_t> inBits;   // [r * kPeriod + j]
  std::vector<uint64_t> expBits;  // [j] exact (or, for float avg, correctly rounded) result
  std::vector<double> expVal;     // [j] exact result in double (float types)

  void build(ncclDataType_t type, int opKind, int nranks, uint64_t seed) {
    dt = type;
    op = opKind;
    n = nranks;
    const TypeInfo& t = typeInfo(dt);
    inBits.assign(size_t(n) * kPeriod, 0);
    expBits.assign(kPeriod, 0);
    expVal.assign(kPeriod, 0);
    double scalar = preMulScalar(dt);
    for (size_t j = 0; j < kPeriod; ++j) {
      std::vector<int64_t> v(n);
      for (int r = 0; r < n; ++r) {
        v[r] = inputValue(dt, op, seed, r, j);
        inBits[size_t(r) * kPeriod + j] = t.isFloat ? encodeFloat(dt, double(v[r])) : encodeInt(dt, v[r]);
      }
      if (t.isFloat) {
        double acc = op == kOpProd ? 1 : (op == kOpMax ? -INFINITY : (op == kOpMin ? INFINITY : 0));
        for (int r = 0; r < n; ++r) {
          double x = double(v[r]);
          switch (op) {
            case kOpProd: acc *= x; break;
            case kOpMax: acc = std::max(acc, x); break;
            case kOpMin: acc = std::min(acc, x); break;
            case kOpPreMulImm:
            case kOpPreMulDev: acc += scalar * x; break;
            default: acc += x; break;
          }
        }
        if (op == kOpAvg) acc /= n;
        expVal[j] = acc;
        expBits[j] = encodeFloat(dt, acc);
      } else {
        // Every partial result fits in int64 by the choice of ranges; uint64 inputs stay
        // below 2^58, so signed arithmetic is exact for them too.
        int64_t acc = op == kOpProd ? 1 : (op == kOpMax ? INT64_MIN : (op == kOpMin ? INT64_MAX : 0));
        for (int r = 0; r < n; ++r) {
          switch (op) {
            case kOpProd: acc *= v[r]; break;
            case kOpMax: acc = std::max(acc, v[r]); break;
            case kOpMin: acc = std::min(acc, v[r]); break;
            case kOpPreMulImm:
            case kOpPreMulDev: acc += int64_t(scalar) * v[r]; break;
            default: acc += v[r]; break;
          }
        }
        if (op == kOpAvg) acc /= n;  // C++ division truncates toward zero, as NCCL does
        expBits[j] = encodeInt(dt, acc);
        expVal[j] = double(acc);
      }
    }
  }

  uint64_t input(int r, size_t idx) const { return inBits[size_t(r) * kPeriod + idx % kPeriod]; }

  // True when `got` is an acceptable result for element index idx.
  bool accepts(size_t idx, uint64_t got) const {
    size_t j = idx % kPeriod;
    if (got == expBits[j]) return true;
    if (!typeInfo(dt).isFloat) return false;
    double g = decodeFloat(dt, got);
    if (g == expVal[j]) return true;  // e.g. -0 for +0
    // Float averages: within 2 ulp of the type (NCCL may pre-divide or post-divide).
    return op == kOpAvg && std::fabs(g - expVal[j]) <= 2 * ulpOf(dt, expVal[j]);
  }
};

}  // namespace sntest
