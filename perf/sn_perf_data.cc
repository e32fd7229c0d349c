// Datatypes, exact-result input patterns and the output checker (see sn_perf_data.h).
#include "sn_perf_data.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace snperf {

namespace {

// Largest integer magnitude used as an input, so 64-bit types stay far from overflow.
constexpr double kInputCap = double(1 << 20);

const TypeDesc kTypes[ncclNumTypes] = {
    {ncclInt8, "int8", 1, false, true, 0, 0, 0, 127.0},
    {ncclUint8, "uint8", 1, false, false, 0, 0, 0, 255.0},
    {ncclInt32, "int32", 4, false, true, 0, 0, 0, 2147483647.0},
    {ncclUint32, "uint32", 4, false, false, 0, 0, 0, 4294967295.0},
    {ncclInt64, "int64", 8, false, true, 0, 0, 0, 4611686018427387904.0},
    {ncclUint64, "uint64", 8, false, false, 0, 0, 0, 9223372036854775808.0},
    {ncclFloat16, "half", 2, true, true, 5, 10, 15, 2048.0},
    {ncclFloat32, "float", 4, true, true, 8, 23, 127, 16777216.0},
    {ncclFloat64, "double", 8, true, true, 11, 52, 1023, 9007199254740992.0},
    {ncclBfloat16, "bfloat16", 2, true, true, 8, 7, 127, 256.0},
    {ncclFloat8e4m3, "f8e4m3", 1, true, true, 4, 3, 7, 16.0},
    {ncclFloat8e5m2, "f8e5m2", 1, true, true, 5, 2, 15, 8.0},
};

// splitmix64's finaliser: a cheap, well-mixed hash of an element's coordinates.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t hashOf(uint64_t seed, int rank, size_t idx) {
  return mix64(seed ^ mix64((uint64_t(uint32_t(rank)) << 40) ^ uint64_t(idx)));
}

// Small formats (half, bf16, fp8) are encoded field by field; float and double natively.
uint64_t encodeSmall(const TypeDesc& t, double v) {
  const int M = t.mantBits;
  uint64_t sign = std::signbit(v) ? uint64_t(1) << (t.expBits + M) : 0;
  double a = std::fabs(v);
  if (a == 0) return sign;
  int ex = 0;
  double f = std::frexp(a, &ex);  // a = f * 2^ex, f in [0.5, 1)
  int e = ex - 1;
  if (e + t.bias >= 1) {
    uint64_t m = uint64_t(std::llround((2 * f - 1) * std::ldexp(1.0, M)));
    return sign | (uint64_t(e + t.bias) << M) | m;
  }
  return sign | uint64_t(std::llround(a / std::ldexp(1.0, 1 - t.bias - M)));  // subnormal
}

double decodeSmall(const TypeDesc& t, uint64_t bits) {
  const int M = t.mantBits, E = t.expBits;
  const uint64_t expMask = (uint64_t(1) << E) - 1, mantMask = (uint64_t(1) << M) - 1;
  const bool neg = (bits >> (E + M)) & 1;
  const uint64_t e = (bits >> M) & expMask, m = bits & mantMask;
  // e4m3 ("fn") has no infinities: only S.1111.111 is NaN.
  const bool e4m3 = t.dt == ncclFloat8e4m3;
  double v;
  if (e == expMask && !e4m3) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == expMask && m == mantMask) {
    v = NAN;
  } else if (e == 0) {
    v = std::ldexp(double(m), 1 - t.bias - M);
  } else {
    v = std::ldexp(1.0 + std::ldexp(double(m), -M), int(e) - t.bias);
  }
  return neg ? -v : v;
}

}  // namespace

const char* opKindName(int op) {
  static const char* kNames[kNumOpKinds] = {"sum", "prod", "max", "min", "avg", "mulsum"};
  return op >= 0 && op < kNumOpKinds ? kNames[op] : "none";
}

const TypeDesc& typeDesc(ncclDataType_t dt) { return kTypes[int(dt)]; }

const TypeDesc* findType(const char* name) {
  for (const TypeDesc& t : kTypes)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

uint64_t encodeValue(const TypeDesc& t, double v) {
  if (!t.isFloat) {
    uint64_t mask = t.size == 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * t.size)) - 1;
    return uint64_t(int64_t(v)) & mask;
  }
  if (t.dt == ncclFloat32) {
    float f = float(v);
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
  }
  if (t.dt == ncclFloat64) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  }
  return encodeSmall(t, v);
}

double decodeFloat(const TypeDesc& t, uint64_t bits) {
  if (t.dt == ncclFloat32) {
    uint32_t b = uint32_t(bits);
    float f;
    std::memcpy(&f, &b, 4);
    return f;
  }
  if (t.dt == ncclFloat64) {
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  return decodeSmall(t, bits);
}

double ulpOf(const TypeDesc& t, double v) {
  int e = 1 - t.bias;  // subnormals are spaced like the smallest normal binade
  if (v != 0) {
    int ex = 0;
    std::frexp(std::fabs(v), &ex);
    e = std::max(ex - 1, e);
  }
  return std::ldexp(1.0, e - t.mantBits);
}

double mulSumScalar(const TypeDesc& t) { return t.isFloat ? 2.0 : 3.0; }

void poison(void* dst, size_t bytes) { std::memset(dst, 0xFF, bytes); }

// Input (an integer) of rank `rank` at residue j. Ranges keep every partial result of any
// order exact: n * max|input| * scalar <= exactLimit; past that only the first ranks are
// non-zero. Products: +-1, and 2 on at most log2(limit) ranks per element.
int64_t Pattern::reductionInput(int rank, size_t j) const {
  const TypeDesc& t = *type_;
  const uint64_t h = hashOf(seed_, rank, j);
  if (op_ == kProd) {
    const int twos = int(std::floor(std::log2(t.exactLimit)));
    if ((size_t(rank) + j) % 4 == 0 && rank / 4 < twos) return 2;
    return (t.isSigned && h % 3 == 0) ? -1 : 1;
  }
  double b;
  if (op_ == kMax || op_ == kMin) {
    b = std::min(t.exactLimit, kInputCap);
  } else {
    const double per = std::floor(t.exactLimit / (op_ == kMulSum ? mulSumScalar(t) : 1.0));
    b = std::min(std::floor(per / n_), kInputCap);
    if (b < 1) {
      if (rank >= per) return 0;
      b = 1;
    }
  }
  const int64_t hi = int64_t(b);
  const int64_t lo = (!t.isSigned || (op_ == kAvg && t.isFloat)) ? 0 : -hi;
  return lo + int64_t(h % uint64_t(hi - lo + 1));
}

void Pattern::buildReduction() {
  const TypeDesc& t = *type_;
  const double s = mulSumScalar(t);
  in_.assign(size_t(n_) * kPeriod, 0);
  expBits_.assign(kPeriod, 0);
  expVal_.assign(kPeriod, 0);
  std::vector<int64_t> v(n_);
  for (size_t j = 0; j < kPeriod; ++j) {
    for (int r = 0; r < n_; ++r) {
      v[r] = reductionInput(r, j);
      in_[size_t(r) * kPeriod + j] = encodeValue(t, double(v[r]));
    }
    // Every partial result is an exact integer below 2^53, so int64 arithmetic is exact
    // for all types; only the average's division differs between float and integer.
    int64_t acc = v[0];
    for (int r = 1; r < n_; ++r) {
      switch (op_) {
        case kProd: acc *= v[r]; break;
        case kMax: acc = std::max(acc, v[r]); break;
        case kMin: acc = std::min(acc, v[r]); break;
        default: acc += v[r]; break;
      }
    }
    if (op_ == kMulSum) acc *= int64_t(s);
    double val = double(acc);
    if (op_ == kAvg) {
      val = t.isFloat ? val / n_ : double(acc / n_);  // integers truncate toward zero, as NCCL
      if (!t.isFloat) acc /= n_;
    }
    expVal_[j] = val;
    expBits_[j] = t.isFloat ? (op_ == kAvg ? 0 : encodeValue(t, val)) : encodeValue(t, double(acc));
  }
}

void Pattern::build(ncclDataType_t dt, int op, int nranks, uint64_t seed) {
  type_ = &typeDesc(dt);
  op_ = op;
  n_ = std::max(nranks, 1);
  seed_ = mix64(seed);
  mask_ = type_->size == 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * type_->size)) - 1;
  scalarBits_ = encodeValue(*type_, mulSumScalar(*type_));
  in_.clear();
  expBits_.clear();
  expVal_.clear();
  if (op_ >= 0) buildReduction();
}

uint64_t Pattern::input(int rank, size_t idx) const {
  if (op_ < 0) return hashOf(seed_, rank, idx) & mask_;
  return in_[size_t(rank) * kPeriod + idx % kPeriod];
}

bool Pattern::acceptsReduced(size_t j, uint64_t got) const {
  const TypeDesc& t = *type_;
  if (!t.isFloat) return got == expBits_[j];
  if (op_ != kAvg && got == expBits_[j]) return true;
  const double g = decodeFloat(t, got), e = expVal_[j];
  if (g == e) return true;  // -0 for +0, or an exactly divisible average
  return op_ == kAvg && std::fabs(g - e) <= 2 * ulpOf(t, e);
}

template <typename U>
void Pattern::fillT(int rank, U* dst, size_t count) const {
  if (op_ < 0) {
    for (size_t i = 0; i < count; ++i) dst[i] = U(hashOf(seed_, rank, i));
    return;
  }
  const uint64_t* row = &in_[size_t(rank) * kPeriod];
  for (size_t i = 0, j = 0; i < count; ++i) {
    dst[i] = U(row[j]);
    if (++j == kPeriod) j = 0;
  }
}

void Pattern::fill(int rank, void* dst, size_t count) const {
  switch (type_->size) {
    case 1: fillT(rank, static_cast<uint8_t*>(dst), count); break;
    case 2: fillT(rank, static_cast<uint16_t*>(dst), count); break;
    case 4: fillT(rank, static_cast<uint32_t*>(dst), count); break;
    default: fillT(rank, static_cast<uint64_t*>(dst), count); break;
  }
}

template <typename U>
size_t Pattern::countWrongT(const OutBlock& b, const U* out) const {
  size_t wrong = 0;
  const U* o = out + b.outOff;
  if (b.src >= 0) {
    for (size_t k = 0; k < b.len; ++k) wrong += o[k] != U(hashOf(seed_, b.src, b.srcOff + k));
    return wrong;
  }
  const bool bitsOnly = !type_->isFloat;
  for (size_t k = 0, j = b.srcOff % kPeriod; k < b.len; ++k) {
    const uint64_t got = o[k];
    if (!(bitsOnly ? got == expBits_[j] : acceptsReduced(j, got))) ++wrong;
    if (++j == kPeriod) j = 0;
  }
  return wrong;
}

size_t Pattern::countWrong(const OutBlock& b, const void* out) const {
  switch (type_->size) {
    case 1: return countWrongT(b, static_cast<const uint8_t*>(out));
    case 2: return countWrongT(b, static_cast<const uint16_t*>(out));
    case 4: return countWrongT(b, static_cast<const uint32_t*>(out));
    default: return countWrongT(b, static_cast<const uint64_t*>(out));
  }
}

}  // namespace snperf
