// Tests of the CPU reduction kernels (src/collectives/kernels) against a scalar reference
// built on the test-side datatype model (tests/support/dtypes.h): small floats are decoded
// with ldexp and rounded with frexp/nearbyint, never with the kernels' bit recipes. Every kernel table this CPU can run
// (generic, avx2) is checked, for every dtype x op x {scale, finalize}, odd counts,
// unaligned starts, in place and out of place, with guard bytes around each output.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/kernels/kernel_table.h"
#include "collectives/kernels/reduce.h"
#include "support/dtypes.h"

namespace snccl::kernels {
namespace {

// ---------------------------------------------------------------- reference

using sntest::TypeInfo;
using sntest::typeInfo;

// How the reference computes a dtype: integers in 64-bit two's complement, fp32 and fp64
// natively, the small formats (fp16, bf16, fp8) through their decoded value.
enum class Kind { kSigned, kUnsigned, kF32, kF64, kSmall };

Kind kindOf(const TypeInfo& t) {
  if (!t.isFloat) return t.isSigned ? Kind::kSigned : Kind::kUnsigned;
  return t.size == 4 ? Kind::kF32 : t.size == 8 ? Kind::kF64 : Kind::kSmall;
}

// The special codes of a small format, which sntest's encoder leaves to its callers.
uint32_t signBit(const TypeInfo& t) { return 1u << (t.expBits + t.mantBits); }
uint32_t infCode(const TypeInfo& t) { return ((1u << t.expBits) - 1) << t.mantBits; }  // e4m3: a NaN
uint32_t nanCode(const TypeInfo& t) { return infCode(t) | (t.finiteAllOnes ? (1u << t.mantBits) - 1 : 1u); }
uint32_t maxCode(const TypeInfo& t) { return t.finiteAllOnes ? nanCode(t) - 1 : infCode(t) - 1; }
bool saturates(const TypeInfo& t) { return t.size == 1; }  // fp8: __NV_SATFINITE

double refDecode(uint64_t code, const TypeInfo& t) { return sntest::decodeSmallFloat(code, t); }

// Round to nearest even; out of range, fp16/bf16 overflow to infinity and fp8 saturates to
// max finite (infinities too).
uint64_t refEncode(double v, const TypeInfo& t) {
  if (std::isnan(v)) return nanCode(t);
  const uint64_t sign = std::signbit(v) ? signBit(t) : 0, overflow = saturates(t) ? maxCode(t) : infCode(t);
  if (std::isinf(v)) return sign | overflow;
  // Encoded without its sign, a value that rounds past max finite shows as a larger code.
  const uint64_t magnitude = sntest::encodeSmallFloat(std::fabs(v), t);
  return sign | (magnitude > maxCode(t) ? overflow : magnitude);
}

// Values travel as their raw bits in a uint64_t; this is what a lane of a result must be.
uint64_t refIntOp(ncclRedOp_t op, ncclDataType_t dt, uint64_t a, uint64_t b) {
  const bool aLess = typeInfo(dt).isSigned ? sntest::decodeInt(dt, a) < sntest::decodeInt(dt, b) : a < b;
  switch (op) {
    case ncclSum:
      return sntest::encodeInt(dt, int64_t(a + b));
    case ncclProd:
      return sntest::encodeInt(dt, int64_t(a * b));
    case ncclMax:
      return aLess ? b : a;
    default:
      return aLess ? a : b;
  }
}

uint64_t refIntDiv(ncclDataType_t dt, uint64_t v, uint32_t d) {
  if (typeInfo(dt).isSigned) return sntest::encodeInt(dt, sntest::decodeInt(dt, v) / int64_t(d));
  return v / d;
}

template <class F>
F refFloatOp(ncclRedOp_t op, F a, F b) {
  const bool nan = std::isnan(a) || std::isnan(b);
  switch (op) {
    case ncclSum:
      return a + b;
    case ncclProd:
      return a * b;
    case ncclMax:
      if (nan) return F(NAN);
      if (a == b) return std::signbit(a) && std::signbit(b) ? a : std::fabs(a) == 0 ? F(0) : a;
      return a > b ? a : b;
    default:
      if (nan) return F(NAN);
      if (a == b) return std::signbit(a) || std::signbit(b) ? (a == 0 ? -F(0) : a) : a;
      return a < b ? a : b;
  }
}

struct Case {
  ncclDataType_t dt;
  ncclRedOp_t op;  // base op
  bool scale, finalize;
  uint64_t scalar;  // raw bits of one element
  uint32_t divisor;
};

// g(x): the PreMulSum premultiplication, rounded to the dtype.
uint64_t refScale(const Case& c, uint64_t x) {
  const TypeInfo& t = typeInfo(c.dt);
  switch (kindOf(t)) {
    case Kind::kSigned:
    case Kind::kUnsigned:
      return sntest::encodeInt(c.dt, int64_t(x * c.scalar));
    case Kind::kF32: {  // volatile: the product is rounded even if the compiler could fuse
      volatile float p = std::bit_cast<float>(uint32_t(x)) * std::bit_cast<float>(uint32_t(c.scalar));
      return std::bit_cast<uint32_t>(float(p));
    }
    case Kind::kF64: {
      volatile double p = std::bit_cast<double>(x) * std::bit_cast<double>(c.scalar);
      return std::bit_cast<uint64_t>(double(p));
    }
    default:
      return refEncode(float(refDecode(x, t)) * float(refDecode(c.scalar, t)), t);
  }
}

// reduce(): a op g(b), then / divisor.
uint64_t refReduce(const Case& c, uint64_t a, uint64_t b) {
  const TypeInfo& t = typeInfo(c.dt);
  if (c.scale) b = refScale(c, b);
  switch (kindOf(t)) {
    case Kind::kSigned:
    case Kind::kUnsigned: {
      uint64_t r = refIntOp(c.op, c.dt, a, b);
      return c.finalize ? refIntDiv(c.dt, r, c.divisor) : r;
    }
    case Kind::kF32: {
      float r = refFloatOp(c.op, std::bit_cast<float>(uint32_t(a)), std::bit_cast<float>(uint32_t(b)));
      if (c.finalize) r /= float(c.divisor);
      return std::bit_cast<uint32_t>(r);
    }
    case Kind::kF64: {
      double r = refFloatOp(c.op, std::bit_cast<double>(a), std::bit_cast<double>(b));
      if (c.finalize) r /= double(c.divisor);
      return std::bit_cast<uint64_t>(r);
    }
    default: {
      float r = refFloatOp(c.op, float(refDecode(a, t)), float(refDecode(b, t)));
      if (c.finalize) r /= float(c.divisor);  // in fp32, before the one rounding to the dtype
      return refEncode(r, t);
    }
  }
}

// copy(): g(src), then / divisor; a plain copy of the bits when neither applies.
uint64_t refCopy(const Case& c, uint64_t x) {
  const TypeInfo& t = typeInfo(c.dt);
  if (c.scale) x = refScale(c, x);
  if (!c.finalize) return x;
  switch (kindOf(t)) {
    case Kind::kSigned:
    case Kind::kUnsigned:
      return refIntDiv(c.dt, x, c.divisor);
    case Kind::kF32:
      return std::bit_cast<uint32_t>(std::bit_cast<float>(uint32_t(x)) / float(c.divisor));
    case Kind::kF64:
      return std::bit_cast<uint64_t>(std::bit_cast<double>(x) / double(c.divisor));
    default:
      return refEncode(float(refDecode(x, t)) / float(c.divisor), t);
  }
}

bool isNaN(ncclDataType_t dt, uint64_t v) { return typeInfo(dt).isFloat && std::isnan(sntest::decodeFloat(dt, v)); }

// NaN payloads and signs are not specified; every other result must match to the bit.
bool same(ncclDataType_t dt, uint64_t got, uint64_t want) { return isNaN(dt, want) ? isNaN(dt, got) : got == want; }

// ---------------------------------------------------------------- inputs

uint64_t mask(size_t size) { return size == 8 ? ~0ull : (1ull << (8 * size)) - 1; }

uint64_t specialValue(ncclDataType_t dt, std::mt19937_64& rng) {
  const TypeInfo& t = typeInfo(dt);
  const size_t pick = rng() % 12;
  switch (kindOf(t)) {
    case Kind::kSigned:
    case Kind::kUnsigned: {
      const uint64_t m = mask(t.size), top = (m >> 1) + 1;
      const uint64_t v[] = {0, 1, m, top, top - 1, 2, m - 1, 3, top + 1, 5, m - 4, 7};
      return v[pick];
    }
    case Kind::kF32: {
      const float v[] = {NAN,    -NAN,           INFINITY,        -INFINITY,     0.0f,           -0.0f,
                         1e-45f, 1.1754942e-38f, 1.17549435e-38f, 3.4028235e38f, -3.4028235e38f, 1.5f};
      return std::bit_cast<uint32_t>(v[pick]);
    }
    case Kind::kF64: {
      const double v[] = {NAN,
                          -NAN,
                          INFINITY,
                          -INFINITY,
                          0.0,
                          -0.0,
                          5e-324,
                          2.2250738585072009e-308,
                          2.2250738585072014e-308,
                          1.7976931348623157e308,
                          -1.7976931348623157e308,
                          0.75};
      return std::bit_cast<uint64_t>(v[pick]);
    }
    default: {
      // Zeros, smallest and largest subnormal, smallest normal, max finite, NaN, infinity.
      const uint32_t minNormal = 1u << t.mantBits, inf = t.finiteAllOnes ? 1u : infCode(t);
      const uint32_t v[] = {0,
                            signBit(t),
                            1,
                            minNormal - 1,
                            minNormal,
                            maxCode(t),
                            maxCode(t) | signBit(t),
                            nanCode(t),
                            nanCode(t) | signBit(t),
                            inf,
                            inf | signBit(t),
                            uint32_t(refEncode(1.0, t))};
      return v[pick];
    }
  }
}

uint64_t randomValue(ncclDataType_t dt, std::mt19937_64& rng) {
  const TypeInfo& t = typeInfo(dt);
  const unsigned kind = rng() % 8;
  if (kind < 2) return specialValue(dt, rng);
  if (kind < 5) return rng() & mask(t.size);  // any bit pattern: every exponent, NaNs included
  // Moderate magnitudes, so sums and products mostly stay in range and exercise rounding.
  std::uniform_real_distribution<double> dist(-8.0, 8.0);
  const double x = dist(rng);
  switch (kindOf(t)) {
    case Kind::kSigned:
    case Kind::kUnsigned:
      return sntest::encodeInt(dt, int64_t(x * 16));
    case Kind::kF32:
      return std::bit_cast<uint32_t>(float(x));
    case Kind::kF64:
      return std::bit_cast<uint64_t>(x);
    default:
      return refEncode(float(x), t);
  }
}

uint64_t scalarFor(ncclDataType_t dt, int which) {
  const double v[] = {0.3, -2.5, 3.0};
  const int64_t iv[] = {3, -1, 0x55};
  switch (kindOf(typeInfo(dt))) {
    case Kind::kSigned:
    case Kind::kUnsigned:
      return sntest::encodeInt(dt, iv[which % 3]);
    case Kind::kF32:
      return std::bit_cast<uint32_t>(float(v[which % 3]));
    case Kind::kF64:
      return std::bit_cast<uint64_t>(v[which % 3]);
    default:
      return refEncode(v[which % 3], typeInfo(dt));
  }
}

RedOpSpec specFor(const Case& c) {
  RedOpSpec op;
  op.base = c.op;
  op.hasScalar = c.scale;
  std::memcpy(op.scalar, &c.scalar, sizeof op.scalar);
  op.divisor = c.divisor;
  return op;
}

// Elements from a 64-byte aligned base plus `offset` elements, with patterned guard bytes
// before and after them.
class Buffer {
 public:
  Buffer(size_t count, size_t size, size_t offset) : bytes_((count + offset + 64) * size + 64) {
    for (size_t i = 0; i < bytes_.size(); ++i) bytes_[i] = pattern(i);
    const auto addr = reinterpret_cast<uintptr_t>(bytes_.data());
    begin_ = (64 - addr % 64) % 64 + offset * size;
    end_ = begin_ + count * size;
  }
  unsigned char* data() { return bytes_.data() + begin_; }
  // True when nothing outside the elements changed.
  bool guardsIntact() const {
    for (size_t i = 0; i < bytes_.size(); ++i) {
      if ((i < begin_ || i >= end_) && bytes_[i] != pattern(i)) return false;
    }
    return true;
  }

 private:
  static unsigned char pattern(size_t i) { return static_cast<unsigned char>(0xA5 ^ (i * 7)); }
  std::vector<unsigned char> bytes_;
  size_t begin_ = 0, end_ = 0;
};

std::vector<const KernelTable*> tables() {
  std::vector<const KernelTable*> t{&genericKernels()};
  if (avx2Kernels()) t.push_back(avx2Kernels());
  return t;
}

constexpr ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                     ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                     ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
constexpr ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin};
constexpr size_t kCounts[] = {0, 1, 7, 15, 16, 17, 1023, 4099};

std::string show(ncclDataType_t dt, uint64_t bits) { return sntest::showElem(dt, bits); }

std::string describe(const KernelTable& k, const Case& c, size_t count, const char* where) {
  return std::string(k.isa) + " " + typeName(c.dt) + " " + opName(c.op) + (c.scale ? " scaled" : "") +
         (c.finalize ? " finalized" : "") + " count=" + std::to_string(count) + " " + where;
}

enum class Alias { kNone, kDstIsA, kDstIsB };

// Runs one reduce case on fresh random inputs and checks every element and the guards.
::testing::AssertionResult checkReduce(const KernelTable& k, const Case& c, size_t count, Alias alias,
                                       std::mt19937_64& rng) {
  const size_t size = typeSize(c.dt);
  const size_t offA = count % 4, offB = (count + 1) % 3, offD = (count + 2) % 5;
  Buffer a(count, size, offA), b(count, size, offB), d(count, size, offD);
  std::vector<uint64_t> va(count), vb(count);
  for (size_t i = 0; i < count; ++i) {
    sntest::storeBits(a.data(), i, size, va[i] = randomValue(c.dt, rng));
    sntest::storeBits(b.data(), i, size, vb[i] = randomValue(c.dt, rng));
  }
  Buffer& out = alias == Alias::kDstIsA ? a : alias == Alias::kDstIsB ? b : d;
  reduceWith(k, out.data(), a.data(), b.data(), count, c.dt, specFor(c), c.scale, c.finalize);
  const char* where = alias == Alias::kDstIsA ? "dst==a" : alias == Alias::kDstIsB ? "dst==b" : "out of place";
  for (size_t i = 0; i < count; ++i) {
    const uint64_t got = sntest::loadBits(out.data(), i, size), want = refReduce(c, va[i], vb[i]);
    if (!same(c.dt, got, want)) {
      return ::testing::AssertionFailure()
             << describe(k, c, count, where) << ": element " << i << " a=" << show(c.dt, va[i])
             << " b=" << show(c.dt, vb[i]) << " got " << show(c.dt, got) << " want " << show(c.dt, want);
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if ((&out != &a && sntest::loadBits(a.data(), i, size) != va[i]) ||
        (&out != &b && sntest::loadBits(b.data(), i, size) != vb[i])) {
      return ::testing::AssertionFailure() << describe(k, c, count, where) << ": changed an input";
    }
  }
  if (!a.guardsIntact() || !b.guardsIntact() || !d.guardsIntact()) {
    return ::testing::AssertionFailure() << describe(k, c, count, where) << ": wrote outside the buffer";
  }
  return ::testing::AssertionSuccess();
}

// reduceStream() to several outputs at once. Streamed (the first nstream): one 64-byte
// aligned (streaming stores), one 16 bytes past that (streaming stores, each line
// straddling two cache lines), and a itself (aligned) when `alias` is kDstIsA. Then plain
// stores: one aligned, one an element past alignment, and b itself (aligned) when `alias`
// is kDstIsB. Every output must hold reduce()'s result, and nothing else may change.
::testing::AssertionResult checkReduceStream(const KernelTable& k, const Case& c, size_t count, Alias alias,
                                             std::mt19937_64& rng) {
  const size_t size = typeSize(c.dt);
  // An input that is also an output starts 64-byte aligned, so it gets streaming stores.
  Buffer a(count, size, alias == Alias::kDstIsA ? 0 : count % 4);
  Buffer b(count, size, alias == Alias::kDstIsB ? 0 : (count + 1) % 3);
  Buffer d0(count, size, 0), d1(count, size, 16 / size), d2(count, size, 1), d3(count, size, 0);
  std::vector<uint64_t> va(count), vb(count);
  for (size_t i = 0; i < count; ++i) {
    sntest::storeBits(a.data(), i, size, va[i] = randomValue(c.dt, rng));
    sntest::storeBits(b.data(), i, size, vb[i] = randomValue(c.dt, rng));
  }
  std::vector<Buffer*> outs{&d0, &d1};
  if (alias == Alias::kDstIsA) outs.insert(outs.begin() + 1, &a);
  const int nstream = int(outs.size());
  outs.push_back(&d3);
  outs.push_back(&d2);
  if (alias == Alias::kDstIsB) outs.push_back(&b);
  std::vector<void*> ptrs;
  for (Buffer* o : outs) ptrs.push_back(o->data());
  reduceStreamWith(k, ptrs.data(), int(ptrs.size()), nstream, a.data(), b.data(), count, c.dt, specFor(c), c.scale, c.finalize);
  const char* where = alias == Alias::kDstIsA   ? "stream, an output is a"
                      : alias == Alias::kDstIsB ? "stream, an output is b"
                                                : "stream";
  for (size_t o = 0; o < outs.size(); ++o) {
    for (size_t i = 0; i < count; ++i) {
      const uint64_t got = sntest::loadBits(outs[o]->data(), i, size), want = refReduce(c, va[i], vb[i]);
      if (!same(c.dt, got, want)) {
        return ::testing::AssertionFailure()
               << describe(k, c, count, where) << ": output " << o << " element " << i << " a=" << show(c.dt, va[i])
               << " b=" << show(c.dt, vb[i]) << " got " << show(c.dt, got) << " want " << show(c.dt, want);
      }
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if ((alias != Alias::kDstIsA && sntest::loadBits(a.data(), i, size) != va[i]) ||
        (alias != Alias::kDstIsB && sntest::loadBits(b.data(), i, size) != vb[i])) {
      return ::testing::AssertionFailure() << describe(k, c, count, where) << ": changed an input";
    }
  }
  for (const Buffer* buf : {&a, &b, &d0, &d1, &d2}) {
    if (!buf->guardsIntact())
      return ::testing::AssertionFailure() << describe(k, c, count, where) << ": wrote outside a buffer";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult checkCopy(const KernelTable& k, const Case& c, size_t count, bool inPlace,
                                     std::mt19937_64& rng) {
  const size_t size = typeSize(c.dt);
  Buffer s(count, size, count % 3), d(count, size, (count + 1) % 4);
  std::vector<uint64_t> vs(count);
  for (size_t i = 0; i < count; ++i) sntest::storeBits(s.data(), i, size, vs[i] = randomValue(c.dt, rng));
  Buffer& out = inPlace ? s : d;
  copyWith(k, out.data(), s.data(), count, c.dt, specFor(c), c.scale, c.finalize);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t got = sntest::loadBits(out.data(), i, size), want = refCopy(c, vs[i]);
    if (!same(c.dt, got, want)) {
      return ::testing::AssertionFailure()
             << describe(k, c, count, inPlace ? "copy in place" : "copy") << ": element " << i
             << " src=" << show(c.dt, vs[i]) << " got " << show(c.dt, got) << " want " << show(c.dt, want);
    }
  }
  for (size_t i = 0; i < count && !inPlace; ++i) {
    if (sntest::loadBits(s.data(), i, size) != vs[i]) {
      return ::testing::AssertionFailure() << describe(k, c, count, "copy") << ": changed the source";
    }
  }
  if (!s.guardsIntact() || !d.guardsIntact()) {
    return ::testing::AssertionFailure() << describe(k, c, count, "copy") << ": wrote outside the buffer";
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------- tests

TEST(KernelNames, TypesAndOps) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  const char* names[] = {"int8", "uint8", "int32",  "uint32",   "int64",  "uint64",
                         "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  for (int i = 0; i < ncclNumTypes; ++i) {
    EXPECT_EQ(typeSize(ncclDataType_t(i)), sizes[i]);
    EXPECT_STREQ(typeName(ncclDataType_t(i)), names[i]);
  }
  EXPECT_EQ(typeSize(ncclNumTypes), 0u);
  EXPECT_EQ(typeSize(ncclDataType_t(-1)), 0u);
  EXPECT_STREQ(opName(ncclSum), "sum");
  EXPECT_STREQ(opName(ncclProd), "prod");
  EXPECT_STREQ(opName(ncclMax), "max");
  EXPECT_STREQ(opName(ncclMin), "min");
  EXPECT_STREQ(opName(ncclAvg), "avg");
  EXPECT_STREQ(opName(ncclNumOps), "premulsum");
  EXPECT_STREQ(opName(ncclRedOp_t(1000)), "premulsum");
}

TEST(Kernels, EveryTableIsFilled) {
  for (const KernelTable* k : tables()) {
    for (ncclDataType_t dt : kTypes) {
      for (int op = 0; op < kNumBaseOps; ++op) {
        EXPECT_NE(k->reduce[dt][op][0], nullptr);
        EXPECT_NE(k->reduce[dt][op][1], nullptr);
        EXPECT_NE(k->reduceStream[dt][op][0], nullptr);
        EXPECT_NE(k->reduceStream[dt][op][1], nullptr);
      }
      for (int s = 0; s < 2; ++s) {
        EXPECT_NE(k->map[dt][s][0], nullptr);
        EXPECT_NE(k->map[dt][s][1], nullptr);
      }
      EXPECT_EQ(k->toFloat[dt] != nullptr, kindOf(typeInfo(dt)) == Kind::kSmall) << typeName(dt);
    }
  }
}

// Every table x dtype x op x {scale, finalize} x count x {out of place, dst == a, dst == b},
// each on fresh random inputs through `check` (checkReduce or checkReduceStream).
template <class Check>
void forEveryReduceCase(uint64_t seed, Check check) {
  std::mt19937_64 rng(seed);
  for (const KernelTable* k : tables()) {
    for (ncclDataType_t dt : kTypes) {
      for (ncclRedOp_t op : kOps) {
        for (int flags = 0; flags < 4; ++flags) {
          for (size_t n = 0; n < std::size(kCounts); ++n) {
            const Case c{dt, op, (flags & 1) != 0, (flags & 2) != 0, scalarFor(dt, int(n)), uint32_t(3 + n % 3)};
            for (Alias alias : {Alias::kNone, Alias::kDstIsA, Alias::kDstIsB}) {
              ASSERT_TRUE(check(*k, c, kCounts[n], alias, rng));
            }
          }
        }
      }
    }
  }
}

TEST(Kernels, ReduceMatchesReference) { forEveryReduceCase(12345, checkReduce); }

TEST(Kernels, ReduceStreamMatchesReference) { forEveryReduceCase(4242, checkReduceStream); }

TEST(Kernels, CopyMatchesReference) {
  std::mt19937_64 rng(777);
  for (const KernelTable* k : tables()) {
    for (ncclDataType_t dt : kTypes) {
      for (int flags = 0; flags < 4; ++flags) {
        for (size_t n = 0; n < std::size(kCounts); ++n) {
          const Case c{dt, ncclSum, (flags & 1) != 0, (flags & 2) != 0, scalarFor(dt, int(n)), uint32_t(2 + n % 5)};
          ASSERT_TRUE(checkCopy(*k, c, kCounts[n], false, rng));
          ASSERT_TRUE(checkCopy(*k, c, kCounts[n], true, rng));
        }
      }
    }
  }
}

// PreMulSum scales b in blocks; counts far past one block, and not a multiple of it.
TEST(Kernels, ScaledReduceAcrossBlocks) {
  std::mt19937_64 rng(99);
  for (const KernelTable* k : tables()) {
    for (ncclDataType_t dt : kTypes) {
      const Case c{dt, ncclSum, true, true, scalarFor(dt, 1), 7};
      for (Alias alias : {Alias::kNone, Alias::kDstIsB}) {
        ASSERT_TRUE(checkReduce(*k, c, 20011, alias, rng));
        ASSERT_TRUE(checkReduceStream(*k, c, 20011, alias, rng));
      }
    }
  }
}

// Without the flags (or with a divisor of 0 or 1, or no scalar) the bits pass through
// untouched: NaN payloads, e5m2 infinities and all.
TEST(Kernels, CopyWithoutWorkIsExact) {
  std::mt19937_64 rng(5);
  for (ncclDataType_t dt : kTypes) {
    const size_t size = typeSize(dt), count = 1000;
    std::vector<unsigned char> src(count * size), dst(count * size);
    for (auto& byte : src) byte = static_cast<unsigned char>(rng());
    for (uint32_t divisor : {0u, 1u}) {
      RedOpSpec op;
      op.divisor = divisor;
      copy(dst.data(), src.data(), count, dt, op, true, true);  // scale requested, no scalar
      EXPECT_EQ(src, dst) << typeName(dt) << " divisor " << divisor;
      copy(src.data(), src.data(), count, dt, op, false, false);
    }
  }
}

TEST(Kernels, ZeroCountTouchesNothing) {
  RedOpSpec op;
  op.divisor = 4;
  for (ncclDataType_t dt : kTypes) {
    reduce(nullptr, nullptr, nullptr, 0, dt, op, true, true);
    void* none = nullptr;
    reduceStream(&none, 1, 1, nullptr, nullptr, 0, dt, op, true, true);
    reduceStream(nullptr, 0, 0, nullptr, nullptr, 0, dt, op, true, true);
    copy(nullptr, nullptr, 0, dt, op, true, true);
  }
}

// The public entry points run the best table; check they agree with it on one large case.
TEST(Kernels, PublicApiUsesBestTable) {
  const std::vector<const KernelTable*> all = tables();
  EXPECT_EQ(&bestKernels(), all.back());
  std::vector<float> a(1000), b(1000), viaApi(1000), viaTable(1000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = float(i) * 0.25f;
    b[i] = 1.0f / float(i + 1);
  }
  RedOpSpec op;
  op.divisor = 3;
  reduce(viaApi.data(), a.data(), b.data(), a.size(), ncclFloat32, op, false, true);
  reduceWith(bestKernels(), viaTable.data(), a.data(), b.data(), a.size(), ncclFloat32, op, false, true);
  EXPECT_EQ(viaApi, viaTable);
  std::vector<float> streamed(1000);
  void* out = streamed.data();
  reduceStream(&out, 1, 1, a.data(), b.data(), a.size(), ncclFloat32, op, false, true);
  streamFence();
  EXPECT_EQ(streamed, viaTable);
}

// ---------------------------------------------------------------- conversions

constexpr ncclDataType_t kSmallTypes[] = {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

std::vector<uint64_t> allCodes(size_t size) {
  std::vector<uint64_t> codes(size_t(1) << (8 * size));
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = i;
  return codes;
}

std::vector<unsigned char> pack(const std::vector<uint64_t>& codes, size_t size) {
  std::vector<unsigned char> out(codes.size() * size);
  for (size_t i = 0; i < codes.size(); ++i) sntest::storeBits(out.data(), i, size, codes[i]);
  return out;
}

// Every code widens to its exact value, and narrows back to itself; NaN stays NaN, and the
// saturating fp8 formats turn infinity into max finite.
TEST(Conversions, ExhaustiveRoundTrip) {
  for (const KernelTable* k : tables()) {
    for (ncclDataType_t dt : kSmallTypes) {
      const TypeInfo& t = typeInfo(dt);
      const size_t size = typeSize(dt);
      const std::vector<uint64_t> codes = allCodes(size);
      const std::vector<unsigned char> packed = pack(codes, size);
      std::vector<float> wide(codes.size());
      k->toFloat[dt](wide.data(), packed.data(), codes.size());
      std::vector<unsigned char> back(packed.size());
      k->fromFloat[dt](back.data(), wide.data(), codes.size());
      for (size_t i = 0; i < codes.size(); ++i) {
        const double want = refDecode(i, t);
        const uint64_t again = sntest::loadBits(back.data(), i, size);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(wide[i])) << k->isa << " " << typeName(dt) << " code " << i;
          ASSERT_TRUE(std::isnan(refDecode(again, t))) << k->isa << " " << typeName(dt) << " " << i;
          continue;
        }
        ASSERT_EQ(std::bit_cast<uint64_t>(double(wide[i])), std::bit_cast<uint64_t>(want))
            << k->isa << " " << typeName(dt) << " code " << i;
        const uint64_t expect = std::isinf(want) && saturates(t) ? (i & signBit(t)) | maxCode(t) : i;
        ASSERT_EQ(again, expect) << k->isa << " " << typeName(dt) << " code " << i;
      }
    }
  }
}

// Narrowing fp32 values that are not codes: every midpoint between neighbouring codes (the
// ties), one fp32 ulp either side of it, and random fp32 bit patterns.
TEST(Conversions, NarrowingRoundsToNearestEven) {
  std::mt19937_64 rng(2024);
  for (ncclDataType_t dt : kSmallTypes) {
    const TypeInfo& t = typeInfo(dt);
    const size_t size = typeSize(dt);
    std::vector<float> in;
    for (uint32_t code = 0; code < (1u << (8 * size)); ++code) {
      const double lo = refDecode(code, t), hi = refDecode(code + 1, t);
      if (std::isnan(lo) || std::isnan(hi) || std::isinf(lo) || std::isinf(hi) ||
          (code & signBit(t)) != ((code + 1) & signBit(t)))
        continue;
      const float mid = float((lo + hi) / 2);  // exact: fewer significant bits than fp32
      in.insert(in.end(), {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, INFINITY), -mid});
    }
    for (int i = 0; i < 200000; ++i) in.push_back(std::bit_cast<float>(uint32_t(rng())));
    in.insert(in.end(), {INFINITY, -INFINITY, NAN, 1e-45f, -1e-45f, 65519.996f, 65520.0f, 448.0f, 464.0f, 464.00003f,
                         57344.0f, 61440.0f, 61439.996f, 3.4028235e38f});
    for (const KernelTable* k : tables()) {
      std::vector<unsigned char> out(in.size() * size);
      k->fromFloat[dt](out.data(), in.data(), in.size());
      for (size_t i = 0; i < in.size(); ++i) {
        const uint64_t got = sntest::loadBits(out.data(), i, size), want = refEncode(in[i], t);
        ASSERT_TRUE(same(dt, got, want)) << k->isa << " " << typeName(dt) << " "
                                         << sntest::showElem(ncclFloat32, std::bit_cast<uint32_t>(in[i])) << " got "
                                         << show(dt, got) << " want " << show(dt, want);
      }
    }
  }
}

// Ranks may run different tables (mixed CPUs, or F16C versus software fp16): they must agree
// to the bit, NaN payloads included.
TEST(Conversions, TablesAgreeBitForBit) {
  if (!avx2Kernels()) GTEST_SKIP() << "this CPU runs only the generic table";
  const KernelTable &g = genericKernels(), &v = *avx2Kernels();
  std::mt19937_64 rng(31337);
  std::vector<float> in(1 << 20);
  for (float& f : in) f = std::bit_cast<float>(uint32_t(rng()));
  for (ncclDataType_t dt : kSmallTypes) {
    const size_t size = typeSize(dt);
    std::vector<unsigned char> outG(in.size() * size), outV(in.size() * size);
    g.fromFloat[dt](outG.data(), in.data(), in.size());
    v.fromFloat[dt](outV.data(), in.data(), in.size());
    EXPECT_EQ(outG, outV) << typeName(dt);
    const std::vector<unsigned char> codes = pack(allCodes(size), size);
    const size_t n = codes.size() / size;
    std::vector<float> wideG(n), wideV(n);
    g.toFloat[dt](wideG.data(), codes.data(), n);
    v.toFloat[dt](wideV.data(), codes.data(), n);
    EXPECT_EQ(0, std::memcmp(wideG.data(), wideV.data(), n * sizeof(float))) << typeName(dt);
  }
}

}  // namespace
}  // namespace snccl::kernels
