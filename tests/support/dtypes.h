// Test-side model of the 12 NCCL datatypes, written independently of the library:
// element sizes, names, and encoders/decoders for the small floating formats
// (IEEE half, bfloat16, fp8 e4m3 "fn" with bias 7 and no infinities, fp8 e5m2 with bias
// 15). Expected results are computed in double (floats) or in 64-bit two's complement
// (integers) and compared against what the library wrote.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <string>

#include "snccl/nccl.h"

namespace sntest {

struct TypeInfo {
  ncclDataType_t dt;
  const char* name;
  size_t size;
  bool isFloat;
  bool isSigned;
  // Floating formats: exponent bits, mantissa bits, bias, and whether the all-ones
  // exponent still encodes finite numbers (e4m3 "fn").
  int expBits, mantBits, bias;
  bool finiteAllOnes;
};

inline const TypeInfo& typeInfo(ncclDataType_t dt) {
  static const TypeInfo kTypes[ncclNumTypes] = {
      {ncclInt8, "int8", 1, false, true, 0, 0, 0, false},
      {ncclUint8, "uint8", 1, false, false, 0, 0, 0, false},
      {ncclInt32, "int32", 4, false, true, 0, 0, 0, false},
      {ncclUint32, "uint32", 4, false, false, 0, 0, 0, false},
      {ncclInt64, "int64", 8, false, true, 0, 0, 0, false},
      {ncclUint64, "uint64", 8, false, false, 0, 0, 0, false},
      {ncclFloat16, "half", 2, true, true, 5, 10, 15, false},
      {ncclFloat32, "float", 4, true, true, 8, 23, 127, false},
      {ncclFloat64, "double", 8, true, true, 11, 52, 1023, false},
      {ncclBfloat16, "bfloat16", 2, true, true, 8, 7, 127, false},
      {ncclFloat8e4m3, "f8e4m3", 1, true, true, 4, 3, 7, true},
      {ncclFloat8e5m2, "f8e5m2", 1, true, true, 5, 2, 15, false},
  };
  return kTypes[int(dt)];
}

inline const char* typeName(ncclDataType_t dt) { return typeInfo(dt).name; }

// Decodes a small floating format (half, bf16, fp8) from its bit pattern.
inline double decodeSmallFloat(uint64_t bits, const TypeInfo& t) {
  const int M = t.mantBits, E = t.expBits;
  const uint64_t expMask = (uint64_t(1) << E) - 1, mantMask = (uint64_t(1) << M) - 1;
  bool neg = (bits >> (E + M)) & 1;
  uint64_t e = (bits >> M) & expMask, m = bits & mantMask;
  double v;
  if (e == expMask && !t.finiteAllOnes) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == expMask && t.finiteAllOnes && m == mantMask) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(double(m), 1 - t.bias - M);
  } else {
    v = std::ldexp(double(m | (uint64_t(1) << M)), int(e) - t.bias - M);
  }
  return neg ? -v : v;
}

// Encodes a finite double into a small floating format, rounding to nearest even.
// Tests only feed values that are exactly representable; rounding is there so that a
// wrong expectation shows as a mismatch rather than as garbage bits.
inline uint64_t encodeSmallFloat(double x, const TypeInfo& t) {
  const int M = t.mantBits;
  uint64_t sign = std::signbit(x) ? uint64_t(1) << (t.expBits + M) : 0;
  double a = std::fabs(x);
  if (a == 0) return sign;
  int e2;
  std::frexp(a, &e2);
  int unb = e2 - 1;  // a = 1.f * 2^unb
  int minNormal = 1 - t.bias;
  if (unb < minNormal) {
    // Subnormal: the integer mantissa counts units of 2^(minNormal - M). A carry into
    // 2^M lands on the smallest normal, which the plain bit pattern also expresses.
    uint64_t q = uint64_t(std::nearbyint(std::ldexp(a, M - minNormal)));
    return sign | q;
  }
  uint64_t q = uint64_t(std::nearbyint(std::ldexp(a, M - unb)));
  if (q == (uint64_t(2) << M)) {
    q >>= 1;
    ++unb;
  }
  uint64_t field = uint64_t(unb + t.bias);
  return sign | (field << M) | (q & ((uint64_t(1) << M) - 1));
}

// One element as raw bits (little-endian, low `size` bytes). Fixed-size copies so the
// compiler inlines them: these run once per element of multi-MiB buffers.
inline uint64_t loadBits(const void* base, size_t i, size_t size) {
  const char* p = static_cast<const char*>(base) + i * size;
  switch (size) {
    case 1: return uint8_t(*p);
    case 2: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { uint64_t v; std::memcpy(&v, p, 8); return v; }
  }
}
inline void storeBits(void* base, size_t i, size_t size, uint64_t bits) {
  char* p = static_cast<char*>(base) + i * size;
  switch (size) {
    case 1: *p = char(bits); break;
    case 2: { uint16_t v = uint16_t(bits); std::memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = uint32_t(bits); std::memcpy(p, &v, 4); break; }
    default: std::memcpy(p, &bits, 8); break;
  }
}

// Floating types: bits <-> double.
inline uint64_t encodeFloat(ncclDataType_t dt, double x) {
  const TypeInfo& t = typeInfo(dt);
  if (dt == ncclFloat32) {
    float f = float(x);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  if (dt == ncclFloat64) {
    uint64_t b;
    std::memcpy(&b, &x, 8);
    return b;
  }
  return encodeSmallFloat(x, t);
}
inline double decodeFloat(ncclDataType_t dt, uint64_t bits) {
  if (dt == ncclFloat32) {
    uint32_t b = uint32_t(bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (dt == ncclFloat64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  return decodeSmallFloat(bits, typeInfo(dt));
}

// Integer types: bits <-> int64 (sign-extended for signed types, zero-extended else).
inline uint64_t encodeInt(ncclDataType_t dt, int64_t v) {
  size_t s = typeInfo(dt).size;
  return s == 8 ? uint64_t(v) : uint64_t(v) & ((uint64_t(1) << (8 * s)) - 1);
}
inline int64_t decodeInt(ncclDataType_t dt, uint64_t bits) {
  const TypeInfo& t = typeInfo(dt);
  if (t.size == 8) return int64_t(bits);
  int shift = 64 - int(8 * t.size);
  if (t.isSigned) return int64_t(bits << shift) >> shift;
  return int64_t(bits & ((uint64_t(1) << (8 * t.size)) - 1));
}

// Distance of one unit in the last place of `t` at magnitude |x| (normal or subnormal).
inline double ulpOf(ncclDataType_t dt, double x) {
  const TypeInfo& t = typeInfo(dt);
  double a = std::fabs(x);
  int unb = 1 - t.bias;
  if (a > 0) {
    int e2;
    std::frexp(a, &e2);
    unb = std::max(e2 - 1, 1 - t.bias);
  }
  return std::ldexp(1.0, unb - t.mantBits);
}

// Human-readable element for failure messages.
inline std::string showElem(ncclDataType_t dt, uint64_t bits) {
  char buf[96];
  if (typeInfo(dt).isFloat)
    std::snprintf(buf, sizeof buf, "%.17g (0x%llx)", decodeFloat(dt, bits), (unsigned long long)bits);
  else if (dt == ncclUint64)
    std::snprintf(buf, sizeof buf, "%llu", (unsigned long long)bits);
  else
    std::snprintf(buf, sizeof buf, "%lld", (long long)decodeInt(dt, bits));
  return buf;
}

}  // namespace sntest
