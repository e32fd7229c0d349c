// Block quantization (collectives/kernels/quant.h) and the chunking of the quantized AllReduce
// (core/quant_allreduce.h): the error bound of one encoding, the byte layout, the fused forms the
// ring uses, non-finite and tiny blocks, and chunks on block boundaries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "collectives/kernels/quant.h"
#include "core/quant_allreduce.h"

namespace {

namespace quant = snccl::kernels::quant;
using quant::Format;

std::vector<float> randomValues(size_t n, uint32_t seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  return v;
}

// The largest magnitude of each block of v, divided by qmax: the block's scale.
std::vector<float> scalesOf(const std::vector<float>& v, const Format& f) {
  std::vector<float> s(quant::numBlocks(v.size(), f), 0.0f);
  for (size_t i = 0; i < v.size(); ++i) s[i / f.block] = std::max(s[i / f.block], std::fabs(v[i]));
  for (float& x : s) x /= float(quant::qmax(f));
  return s;
}

struct Case {
  int bits;
  uint32_t block;
  size_t count;
};

class QuantRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(QuantRoundTrip, ErrorIsAtMostHalfAStepOfItsBlock) {
  const Case c = GetParam();
  const Format f{c.bits, c.block};
  const std::vector<float> v = randomValues(c.count, 7 + c.count);
  std::vector<uint8_t> enc(quant::encodedBytes(c.count, f) + 1, 0xa5);
  std::vector<float> out(c.count, -1.0f), dec(c.count, -2.0f);
  quant::encode(f, c.count, v.data(), nullptr, nullptr, enc.data(), out.data(), 0);
  EXPECT_EQ(enc.back(), 0xa5) << "encode wrote past encodedBytes";
  quant::decode(f, c.count, enc.data(), dec.data(), 0);
  const std::vector<float> scale = scalesOf(v, f);
  for (size_t i = 0; i < c.count; ++i) {
    ASSERT_EQ(std::memcmp(&out[i], &dec[i], sizeof(float)), 0) << "encode's output differs from decode at " << i;
    const float bound = scale[i / f.block] * 0.5f * (1 + 1e-5f);
    ASSERT_LE(std::fabs(dec[i] - v[i]), bound) << "element " << i << " value " << v[i];
  }
  // The stored scales are the blocks' scales, and each block's largest element is exact up to
  // rounding of that scale.
  for (size_t b = 0; b < scale.size(); ++b) {
    float s;
    std::memcpy(&s, enc.data() + b * sizeof(float), sizeof s);
    EXPECT_FLOAT_EQ(s, scale[b]) << "block " << b;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantRoundTrip,
                         ::testing::Values(Case{8, 256, 0}, Case{8, 256, 1}, Case{8, 256, 256}, Case{8, 256, 1000},
                                           Case{8, 8, 77}, Case{8, 4096, 10001}, Case{4, 256, 1}, Case{4, 256, 255},
                                           Case{4, 256, 1000}, Case{4, 8, 77}, Case{4, 64, 4097}, Case{4, 4096, 9999}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return "int" + std::to_string(i.param.bits) + "_block" + std::to_string(i.param.block) +
                                  "_count" + std::to_string(i.param.count);
                         });

TEST(Quant, EncodedBytesAreScalesPlusPayload) {
  EXPECT_EQ(quant::encodedBytes(0, Format{8, 256}), 0u);
  EXPECT_EQ(quant::encodedBytes(1, Format{8, 256}), 4u + 1u);
  EXPECT_EQ(quant::encodedBytes(256, Format{8, 256}), 4u + 256u);
  EXPECT_EQ(quant::encodedBytes(257, Format{8, 256}), 8u + 257u);
  EXPECT_EQ(quant::encodedBytes(257, Format{4, 256}), 8u + 129u);
  EXPECT_EQ(quant::encodedBytes(1 << 20, Format{4, 1024}), 4096u + (1u << 19));
}

TEST(Quant, ValidFormats) {
  EXPECT_TRUE(quant::validFormat(8, 256));
  EXPECT_TRUE(quant::validFormat(4, 8));
  EXPECT_TRUE(quant::validFormat(4, 4096));
  EXPECT_FALSE(quant::validFormat(2, 256));
  EXPECT_FALSE(quant::validFormat(16, 256));
  EXPECT_FALSE(quant::validFormat(8, 6));
  EXPECT_FALSE(quant::validFormat(8, 255));
  EXPECT_FALSE(quant::validFormat(8, 8192));
}

// Every integer of the format survives a round trip: the packing of int4 nibbles (sign included)
// and int8 bytes.
TEST(Quant, EveryLevelRoundTrips) {
  for (int bits : {8, 4}) {
    const Format f{bits, 4096};  // one block, whose scale is 1
    const int qm = quant::qmax(f);
    std::vector<float> v;
    for (int q = -qm; q <= qm; ++q) v.push_back(float(q));
    v.push_back(float(qm));  // an odd count
    std::vector<uint8_t> enc(quant::encodedBytes(v.size(), f));
    std::vector<float> dec(v.size());
    quant::encode(f, v.size(), v.data(), nullptr, nullptr, enc.data(), nullptr, 0);
    quant::decode(f, v.size(), enc.data(), dec.data(), 0);
    for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(dec[i], v[i]) << bits << "-bit level " << v[i];
  }
}

// The fused form the reduce-scatter uses: encode(a + decode(prev) + residual), the new residual is
// exactly what was lost, and the output is the decoded value over the divisor.
TEST(Quant, FusedEncodeAddsPreviousAndResidual) {
  for (int bits : {8, 4}) {
    const Format f{bits, 64};
    const size_t n = 1000;
    const std::vector<float> a = randomValues(n, 1), b = randomValues(n, 2);
    std::vector<float> res = randomValues(n, 3, 0.01f);
    const std::vector<float> res0 = res;
    std::vector<uint8_t> prev(quant::encodedBytes(n, f)), enc(prev.size()), ref(prev.size());
    quant::encode(f, n, b.data(), nullptr, nullptr, prev.data(), nullptr, 0);
    std::vector<float> prevDec(n);
    quant::decode(f, n, prev.data(), prevDec.data(), 0);
    std::vector<float> out(n);
    quant::encode(f, n, a.data(), prev.data(), res.data(), enc.data(), out.data(), 3);
    std::vector<float> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = (a[i] + prevDec[i]) + res0[i];
    quant::encode(f, n, v.data(), nullptr, nullptr, ref.data(), nullptr, 0);
    EXPECT_EQ(enc, ref) << bits << "-bit: fused encoding differs from encoding the sum";
    std::vector<float> dec(n);
    quant::decode(f, n, enc.data(), dec.data(), 0);
    std::vector<float> dec3(n);
    quant::decode(f, n, enc.data(), dec3.data(), 3);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(res[i], v[i] - dec[i]) << "residual at " << i;
      ASSERT_EQ(out[i], dec[i] / 3.0f) << "output at " << i;
      ASSERT_EQ(dec3[i], out[i]) << "decode with divisor at " << i;
    }
  }
}

// In place (out == a), as the owner's chunk of an in-place AllReduce.
TEST(Quant, EncodeInPlace) {
  const Format f{8, 256};
  std::vector<float> a = randomValues(700, 4);
  std::vector<uint8_t> enc(quant::encodedBytes(a.size(), f));
  std::vector<float> expect(a.size());
  quant::encode(f, a.size(), a.data(), nullptr, nullptr, enc.data(), expect.data(), 0);
  quant::encode(f, a.size(), a.data(), nullptr, nullptr, enc.data(), a.data(), 0);
  EXPECT_EQ(a, expect);
}

TEST(Quant, NonFiniteBlockDecodesToNaNAndResetsItsResidual) {
  const Format f{8, 16};
  std::vector<float> a = randomValues(48, 5);
  a[20] = std::numeric_limits<float>::infinity();
  a[40] = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> res(48, 0.25f);
  std::vector<uint8_t> enc(quant::encodedBytes(48, f));
  std::vector<float> out(48);
  quant::encode(f, 48, a.data(), nullptr, res.data(), enc.data(), out.data(), 0);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_TRUE(std::isfinite(out[i])) << i;
    EXPECT_LE(std::fabs(res[i]), 1.0f) << i;
  }
  for (size_t i = 16; i < 48; ++i) {
    EXPECT_TRUE(std::isnan(out[i])) << i;
    EXPECT_EQ(res[i], 0.0f) << i;
  }
}

TEST(Quant, TinyBlockEncodesAsZerosAndKeepsItsValuesInTheResidual) {
  const Format f{8, 8};
  std::vector<float> a(8, 1e-35f), res(8, 0.0f), out(8, 1.0f);
  std::vector<uint8_t> enc(quant::encodedBytes(8, f));
  quant::encode(f, 8, a.data(), nullptr, res.data(), enc.data(), out.data(), 0);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(out[i], 0.0f);
    EXPECT_EQ(res[i], 1e-35f);
  }
}

TEST(QuantChunks, CoverTheDataOnBlockBoundaries) {
  for (size_t count : {size_t(0), size_t(1), size_t(255), size_t(256), size_t(1000), size_t(100003)})
    for (uint32_t block : {8u, 256u, 4096u})
      for (int n = 1; n <= 9; ++n) {
        size_t next = 0;
        for (int c = 0; c < n; ++c) {
          const snccl::ChunkRange r = snccl::quantChunk(count, block, n, c);
          ASSERT_EQ(r.first, next) << count << " " << block << " " << n << " " << c;
          if (r.first < count) {
            ASSERT_EQ(r.first % block, 0u);
          }
          next = r.first + r.count;
        }
        ASSERT_EQ(next, count) << count << " " << block << " " << n;
      }
}

}  // namespace
