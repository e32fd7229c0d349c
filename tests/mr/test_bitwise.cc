// Every rank must get the same bits from a floating-point AllReduce. The grid in
// test_collectives.cc uses inputs whose sums are exact in any order, so it cannot see
// ranks that combine the inputs in different orders; here the inputs are arbitrary
// floats (sums round differently per order) and the ranks' outputs are compared byte for
// byte. Run once per AllReduce algorithm (tests/mr/CMakeLists.txt sets SNCCL_ALGO).
//
// Counts span one element, several blocks per rank and several connection slots;
// sum, avg and PreMulSum (rounding ops) for float, double, half and bfloat16.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "snccl/nccl.h"
#include "support/harness.h"
#include "support/values.h"

namespace {

using namespace sntest;

struct Call {
  ncclDataType_t dt;
  int op;  // kOpSum, kOpAvg or kOpPreMulImm
  size_t count;
};

// Every type and op with one and 1031 elements; 300007 elements (several 128 KiB slots per
// message stream with the default SNCCL_BUFFSIZE) for a few combinations, to bound the time.
std::vector<Call> calls() {
  std::vector<Call> v;
  for (ncclDataType_t dt : {ncclFloat32, ncclFloat64, ncclFloat16, ncclBfloat16})
    for (int op : {int(kOpSum), int(kOpAvg), int(kOpPreMulImm)})
      for (size_t count : {size_t{1}, size_t{1031}}) v.push_back({dt, op, count});
  v.push_back({ncclFloat32, kOpAvg, 300007});
  v.push_back({ncclBfloat16, kOpSum, 300007});
  v.push_back({ncclFloat64, kOpPreMulImm, 300007});
  return v;
}

// Arbitrary finite values of magnitude ~1 (varied exponents and mantissas).
void fill(std::vector<unsigned char>* buf, ncclDataType_t dt, size_t count, int rank, size_t call) {
  const size_t es = typeInfo(dt).size;
  buf->assign(count * es, 0);
  for (size_t i = 0; i < count; ++i) {
    const uint64_t h = mix64((uint64_t(rank) << 40) ^ (uint64_t(call) << 32) ^ i);
    const double x = (double(h >> 11) / double(uint64_t(1) << 53) - 0.5) * 3.0;  // [-1.5, 1.5)
    storeBits(buf->data(), i, es, encodeFloat(dt, x));
  }
}

class Bitwise : public ::testing::TestWithParam<int> {};

TEST_P(Bitwise, EveryRankGetsTheSameBits) {
  const int n = GetParam();
  const std::vector<Call> plan = calls();
  // outs[rank][call]: written by the rank's thread, compared after all joined.
  using Bytes = std::vector<unsigned char>;
  std::vector<std::vector<Bytes>> outs(size_t(n), std::vector<Bytes>(plan.size()));
  runRanks(Mode::kThreads, n, [&](ncclComm_t comm, int rank, int) {
    for (size_t k = 0; k < plan.size(); ++k) {
      const Call& c = plan[k];
      Bytes in;
      fill(&in, c.dt, c.count, rank, k);
      ncclRedOp_t op = c.op == kOpSum ? ncclSum : ncclAvg;
      const bool preMul = c.op == kOpPreMulImm;
      alignas(8) unsigned char scalar[8] = {};
      storeBits(scalar, 0, typeInfo(c.dt).size, encodeFloat(c.dt, 0.7));
      if (preMul && !ncclOk(ncclRedOpCreatePreMulSum(&op, scalar, c.dt, ncclScalarHostImmediate, comm),
                            "ncclRedOpCreatePreMulSum", rank))
        return false;
      Bytes& out = outs[size_t(rank)][k];
      const bool inPlace = k % 2 == 1;
      if (inPlace) out = in; else out.assign(in.size(), 0);
      if (!ncclOk(ncclAllReduce(inPlace ? out.data() : in.data(), out.data(), c.count, c.dt, op, comm, nullptr),
                  "ncclAllReduce", rank))
        return false;
      if (preMul && !ncclOk(ncclRedOpDestroy(op, comm), "ncclRedOpDestroy", rank)) return false;
    }
    return true;
  });
  for (size_t k = 0; k < plan.size(); ++k) {
    const Call& c = plan[k];
    const size_t es = typeInfo(c.dt).size;
    for (int r = 1; r < n; ++r) {
      const auto& a = outs[0][k];
      const auto& b = outs[size_t(r)][k];
      ASSERT_EQ(a.size(), b.size());
      if (std::memcmp(a.data(), b.data(), a.size()) == 0) continue;
      size_t i = 0;
      while (std::memcmp(a.data() + i * es, b.data() + i * es, es) == 0) ++i;
      ADD_FAILURE() << typeName(c.dt) << " " << opKindName(c.op) << " count=" << c.count << " nranks=" << n
                    << ": element " << i << " is " << showElem(c.dt, loadBits(a.data(), i, es)) << " on rank 0 but "
                    << showElem(c.dt, loadBits(b.data(), i, es)) << " on rank " << r;
      break;
    }
  }
}

// The single-copy AllReduce ("single": ranks that are threads map each other's buffers;
// 300007 floats are over the 128 KiB SNCCL_SINGLE_COPY_BYTES default) folds the inputs in
// rank order, ((x0 + x1) + x2) + ..., as src/core/mapped_allreduce.cc states: every rank's
// output must equal that fold computed here in fp32, bit for bit. A fold in another
// order, or a fall back to the rings (whose order differs), fails it. Runs where the
// selector may pick it: SNCCL_ALGO unset or "single" (forcing another algorithm forbids it).
TEST(SingleCopy, FoldsInRankOrder) {
  for (const char* var : {"SNCCL_ALGO", "NCCL_ALGO"}) {
    const char* algo = std::getenv(var);
    if (algo != nullptr && *algo != '\0' && std::string(algo) != "single")
      GTEST_SKIP() << var << "=" << algo << " leaves the single copy out";
  }
  constexpr size_t kCount = 300007;
  for (int n : {3, 4}) {
    std::vector<std::vector<unsigned char>> ins(static_cast<size_t>(n)), outs(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      fill(&ins[size_t(r)], ncclFloat32, kCount, r, 1000);
      outs[size_t(r)].assign(kCount * sizeof(float), 0);
    }
    runRanks(Mode::kThreads, n, [&](ncclComm_t comm, int rank, int) {
      return ncclOk(ncclAllReduce(ins[size_t(rank)].data(), outs[size_t(rank)].data(), kCount, ncclFloat32, ncclSum,
                                  comm, nullptr),
                    "ncclAllReduce", rank);
    });
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0;
      for (int r = 0; r < n; ++r) {
        float x = 0;
        std::memcpy(&x, ins[size_t(r)].data() + i * sizeof(float), sizeof x);
        want = r == 0 ? x : want + x;
      }
      for (int r = 0; r < n; ++r) {
        float got = 0;
        std::memcpy(&got, outs[size_t(r)].data() + i * sizeof(float), sizeof got);
        ASSERT_EQ(std::memcmp(&got, &want, sizeof got), 0)
            << "nranks=" << n << " rank " << r << " element " << i << ": " << got << ", the rank-order fold gives "
            << want;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, Bitwise, ::testing::Values(2, 3, 5, 8),
                         [](const ::testing::TestParamInfo<int>& info) { return std::to_string(info.param); });

}  // namespace
