// Unit tests of the perf tools' pieces: the checker (does it see a damaged element, does
// it accept every correct reduction order), the data patterns' exactness, the collective
// table's counts and factors, the command line, and the exact nccl-tests output format.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "sn_perf.h"
#include "sn_perf_colls.h"
#include "sn_perf_data.h"
#include "sn_perf_report.h"

namespace snperf {
namespace {

// ---- A reference reduction, written without the pattern's tables -------------------

// Nearest representable value of a small (8- or 16-bit) floating type.
uint64_t nearestBits(const TypeDesc& t, double v) {
  static std::map<int, std::vector<std::pair<double, uint64_t>>> tables;
  auto& tab = tables[int(t.dt)];
  if (tab.empty()) {
    for (uint64_t b = 0; b < (uint64_t(1) << (8 * t.size)); ++b) {
      double d = decodeFloat(t, b);
      if (std::isfinite(d)) tab.push_back({d, b});
    }
    std::sort(tab.begin(), tab.end());
  }
  auto it = std::lower_bound(tab.begin(), tab.end(), std::make_pair(v, uint64_t(0)));
  if (it == tab.end()) return std::prev(it)->second;
  if (it != tab.begin() && std::fabs(std::prev(it)->first - v) < std::fabs(it->first - v)) return std::prev(it)->second;
  return it->second;
}

int64_t asInt(const TypeDesc& t, uint64_t bits) {
  if (t.size == 8 || !t.isSigned) return int64_t(bits);
  const int shift = 64 - 8 * t.size;
  return int64_t(bits << shift) >> shift;
}

// Reduces the ranks' inputs in the given order, rounding to the type after every step as
// a library would. Returns the result's bits.
uint64_t reduceInOrder(const Pattern& p, int op, const std::vector<int>& order, size_t idx) {
  const TypeDesc& t = p.type();
  const double s = mulSumScalar(t);
  if (!t.isFloat) {
    int64_t acc = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      int64_t v = asInt(t, p.input(order[i], idx));
      if (op == kMulSum) v *= int64_t(s);
      if (i == 0) acc = v;
      else if (op == kProd) acc *= v;
      else if (op == kMax) acc = std::max(acc, v);
      else if (op == kMin) acc = std::min(acc, v);
      else acc += v;
    }
    if (op == kAvg) acc /= int64_t(order.size());
    return encodeValue(t, double(acc));
  }
  double acc = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    double v = decodeFloat(t, p.input(order[i], idx));
    if (op == kMulSum) v *= s;
    if (i == 0) acc = v;
    else if (op == kProd) acc *= v;
    else if (op == kMax) acc = std::max(acc, v);
    else if (op == kMin) acc = std::min(acc, v);
    else acc += v;
    // Every partial result must already be representable: rounding changes nothing.
    const double rounded = t.dt == ncclFloat32 ? double(float(acc))
                           : t.dt == ncclFloat64 ? acc : decodeFloat(t, nearestBits(t, acc));
    EXPECT_EQ(rounded, acc) << t.name << " " << opKindName(op);
  }
  if (op == kAvg) acc /= double(order.size());
  if (t.dt == ncclFloat32) return encodeValue(t, double(float(acc)));
  if (t.dt == ncclFloat64) return encodeValue(t, acc);
  return nearestBits(t, acc);
}

void store(void* buf, size_t i, int size, uint64_t bits) {
  std::memcpy(static_cast<char*>(buf) + i * size, &bits, size);  // little-endian
}

// ---- The checker ---------------------------------------------------------------------

TEST(PerfChecker, AcceptsEveryReductionOrderAndCatchesOneDamagedElement) {
  std::mt19937 rng(7);
  for (int dt = 0; dt < ncclNumTypes; ++dt) {
    const TypeDesc& t = typeDesc(ncclDataType_t(dt));
    for (int op = 0; op < kNumOpKinds; ++op) {
      for (int n : {1, 2, 3, 8, 20}) {
        Pattern p;
        p.build(t.dt, op, n, 42 + n);
        const size_t count = Pattern::kPeriod + 7;
        std::vector<char> out(count * t.size);
        std::vector<int> order(n);
        for (int r = 0; r < n; ++r) order[r] = r;
        for (size_t i = 0; i < count; ++i) {
          std::shuffle(order.begin(), order.end(), rng);
          store(out.data(), i, t.size, reduceInOrder(p, op, order, i));
        }
        const OutBlock all{0, count, -1, 0};
        ASSERT_EQ(p.countWrong(all, out.data()), 0u) << t.name << " " << opKindName(op) << " n=" << n;
        out[(count / 2 + 1) * t.size - 1] ^= 0x40;  // what SNCCL_PERF_INJECT_WRONG does
        EXPECT_EQ(p.countWrong(all, out.data()), 1u) << t.name << " " << opKindName(op) << " n=" << n;
      }
    }
  }
}

TEST(PerfChecker, ReductionBlockOffsetsFollowTheGlobalIndex) {
  Pattern p;
  p.build(ncclInt32, kSum, 3, 5);
  const size_t pc = 700;  // ReduceScatter block of rank 2 starts at 1400, not at 0
  std::vector<int32_t> out(pc);
  for (size_t k = 0; k < pc; ++k) out[k] = int32_t(reduceInOrder(p, kSum, {0, 1, 2}, 2 * pc + k));
  EXPECT_EQ(p.countWrong({0, pc, -1, 2 * pc}, out.data()), 0u);
  EXPECT_GT(p.countWrong({0, pc, -1, 0}, out.data()), pc / 2);
}

TEST(PerfChecker, DataMovementComparesBitsIncludingNaNs) {
  Pattern p;
  p.build(ncclFloat32, -1, 4, 9);
  const size_t count = 5000;
  std::vector<uint32_t> src(count), out(count);
  p.fill(3, src.data(), count);
  out = src;
  EXPECT_EQ(p.countWrong({0, count, 3, 0}, out.data()), 0u);
  EXPECT_EQ(p.countWrong({0, count, 2, 0}, out.data()), count);  // another rank's data
  EXPECT_GT(p.countWrong({0, count - 1, 3, 1}, out.data()), count / 2);  // shifted by one
  size_t nans = 0;
  for (uint32_t b : src) nans += std::isnan(decodeFloat(typeDesc(ncclFloat32), b));
  EXPECT_GT(nans, 0u) << "raw patterns should include NaN encodings";
}

TEST(PerfChecker, AverageAllowsTwoUlpAndNoMore) {
  Pattern p;
  p.build(ncclFloat32, kAvg, 3, 11);
  const TypeDesc& t = typeDesc(ncclFloat32);
  const size_t count = Pattern::kPeriod;
  std::vector<float> out(count);
  for (size_t i = 0; i < count; ++i)
    out[i] = float(decodeFloat(t, reduceInOrder(p, kAvg, {0, 1, 2}, i)));
  for (size_t i = 0; i < count; ++i) out[i] = std::nextafter(out[i], INFINITY);
  EXPECT_EQ(p.countWrong({0, count, -1, 0}, out.data()), 0u);
  size_t far = 0;
  for (size_t i = 0; i < count; ++i) {
    float e = out[i];
    for (int k = 0; k < 3; ++k) e = std::nextafter(e, INFINITY);
    far += e != out[i];
    out[i] = e;
  }
  EXPECT_EQ(p.countWrong({0, count, -1, 0}, out.data()), far);
}

TEST(PerfChecker, PatternsAreIdenticalOnEveryProcessAndDifferPerSeed) {
  Pattern a, b, c;
  a.build(ncclBfloat16, kSum, 4, 77);
  b.build(ncclBfloat16, kSum, 4, 77);
  c.build(ncclBfloat16, kSum, 4, 78);
  size_t same = 0;
  for (size_t i = 0; i < 2000; ++i) {
    EXPECT_EQ(a.input(2, i), b.input(2, i));
    same += a.input(2, i) == c.input(2, i);
  }
  EXPECT_LT(same, 1000u);
}

TEST(PerfTypes, SmallFloatEncodingsRoundTrip) {
  for (ncclDataType_t dt : {ncclFloat16, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2}) {
    const TypeDesc& t = typeDesc(dt);
    for (double v = -t.exactLimit; v <= t.exactLimit; v += 1) EXPECT_EQ(decodeFloat(t, encodeValue(t, v)), v) << t.name;
  }
  EXPECT_EQ(encodeValue(typeDesc(ncclFloat16), 1.0), 0x3C00u);
  EXPECT_EQ(encodeValue(typeDesc(ncclBfloat16), -2.0), 0xC000u);
  EXPECT_EQ(encodeValue(typeDesc(ncclFloat8e4m3), 16.0), 0x58u);
  EXPECT_EQ(encodeValue(typeDesc(ncclFloat8e5m2), 8.0), 0x48u);
  EXPECT_TRUE(std::isnan(decodeFloat(typeDesc(ncclFloat8e4m3), 0x7F)));
  EXPECT_EQ(decodeFloat(typeDesc(ncclFloat8e4m3), 0x7E), 448.0);
  EXPECT_TRUE(std::isinf(decodeFloat(typeDesc(ncclFloat8e5m2), 0x7C)));
  EXPECT_EQ(ulpOf(typeDesc(ncclFloat16), 1.0), std::ldexp(1.0, -10));
}

// ---- The collective table --------------------------------------------------------------

TEST(PerfColls, CountsAndFactorsFollowNcclTests) {
  const CollDesc* ag = findColl("allgather");
  ASSERT_NE(ag, nullptr);
  EXPECT_EQ(ag->counts(8, 4, 2).param, 0u);  // per-rank blocks round down to 16 bytes
  Counts k = ag->counts(128, 4, 3);  // 42 bytes per rank -> 32 -> 8 floats
  EXPECT_EQ(k.param, 8u);
  EXPECT_EQ(k.recv, 24u);
  EXPECT_EQ(k.sendInplaceOff, 8u);
  k = findColl("reducescatter")->counts(1200, 4, 3);
  EXPECT_EQ(k.param, 100u);
  EXPECT_EQ(k.send, 300u);
  EXPECT_EQ(k.recvInplaceOff, 100u);
  const int n = 4;
  struct F {
    const char* name;
    double alg, bus;
  } want[] = {{"allreduce", 1, 1.5},  {"allgather", 4, 0.75}, {"reducescatter", 4, 0.75}, {"broadcast", 1, 1},
              {"reduce", 1, 1},       {"alltoall", 4, 0.75},  {"gather", 4, 0.75},        {"scatter", 4, 0.75},
              {"sendrecv", 1, 1},     {"hypercube", 3, 1}};
  for (const F& f : want) {
    const CollDesc* c = findColl(f.name);
    ASSERT_NE(c, nullptr) << f.name;
    EXPECT_DOUBLE_EQ(c->algFactor(n), f.alg) << f.name;
    EXPECT_DOUBLE_EQ(c->busFactor(n), f.bus) << f.name;
  }
  EXPECT_EQ(allColls().size(), 10u);
  EXPECT_EQ(findColl("hypercube")->steps(8), 3);
}

TEST(PerfColls, OutputsNameTheirSources) {
  Counts k = findColl("alltoall")->counts(1200, 4, 3);
  std::vector<OutBlock> b;
  findColl("alltoall")->outputs(1, 3, -1, k, &b);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[2].src, 2);
  EXPECT_EQ(b[2].outOff, 2 * k.param);
  EXPECT_EQ(b[2].srcOff, 1 * k.param);
  b.clear();
  findColl("gather")->outputs(1, 3, 0, k, &b);
  EXPECT_TRUE(b.empty()) << "only the root's output is defined";
  findColl("sendrecv")->outputs(0, 3, -1, findColl("sendrecv")->counts(64, 4, 3), &b);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].src, 2);
}

// ---- Command line ------------------------------------------------------------------------

int parse(std::vector<const char*> args, Options* o) {
  args.insert(args.begin(), "sn_test_perf");
  std::vector<char*> argv;
  for (const char* a : args) argv.push_back(const_cast<char*>(a));
  argv.push_back(nullptr);
  return parseOptions(int(args.size()), argv.data(), "sn_test_perf", o);
}

TEST(PerfArgs, SizesAcceptSuffixes) {
  size_t v = 0;
  EXPECT_TRUE(parseSize("8", &v) && v == 8);
  EXPECT_TRUE(parseSize("64K", &v) && v == 65536);
  EXPECT_TRUE(parseSize("1.5k", &v) && v == 1536);
  EXPECT_TRUE(parseSize("128M", &v) && v == (size_t(128) << 20));
  EXPECT_TRUE(parseSize("2G", &v) && v == (size_t(2) << 30));
  EXPECT_FALSE(parseSize("x", &v));
  EXPECT_FALSE(parseSize("4Q", &v));
  EXPECT_FALSE(parseSize("-1", &v));
}

TEST(PerfArgs, ParsesNcclTestsFlags) {
  Options o;
  EXPECT_EQ(parse({"-b", "8", "-e", "128M", "-f", "2", "-g", "2", "-t", "3", "-o", "all", "-d", "all", "-r", "all",
                   "-c", "0", "-n", "7", "-w", "3", "-m", "2", "-N", "2", "-z", "1", "-a", "3", "-T", "9", "-J",
                   "x.json", "-p", "1", "-y", "1", "-C", "1", "-S", "1", "-R", "1", "-u", "1", "-M", "1", "-G", "0"},
                  &o),
            -1);
  EXPECT_EQ(o.minBytes, 8u);
  EXPECT_EQ(o.maxBytes, size_t(128) << 20);
  EXPECT_EQ(o.stepFactor, 2);
  EXPECT_EQ(o.nGpus * o.nThreads, 6);
  EXPECT_EQ(o.ops.size(), size_t(kNumOpKinds));
  EXPECT_EQ(o.types.size(), size_t(ncclNumTypes));
  EXPECT_EQ(o.root, -1);
  EXPECT_EQ(o.check, 0);
  EXPECT_EQ(o.iters + o.warmup + o.aggIters + o.cycles, 14);
  EXPECT_EQ(o.jsonFile, "x.json");
  EXPECT_TRUE(o.cpuTime && o.timestamps && o.memReport && o.parallelInit && o.streamNull);
  Options d;
  EXPECT_EQ(parse({"--minbytes", "1K", "--datatype", "bfloat16", "--op", "mulsum"}, &d), -1);
  EXPECT_EQ(d.types[0], ncclBfloat16);
  EXPECT_EQ(d.ops[0], kMulSum);
}

TEST(PerfArgs, RefusesWhatHostMemoryCannotDo) {
  Options o;
  testing::internal::CaptureStderr();
  EXPECT_EQ(parse({"-G", "1"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-D", "1"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-x", "1"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-V", "16"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-K", "1"}, &o), kNotImplemented);
  EXPECT_EQ(parse({"-d", "float17"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-o", "xor"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-b", "2K", "-e", "1K"}, &o), kInvalidUsage);
  EXPECT_EQ(parse({"-t", "0"}, &o), kInvalidUsage);
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("needs CUDA"), std::string::npos) << err;
  testing::internal::CaptureStdout();
  EXPECT_EQ(parse({"-h"}, &o), kOk);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("USAGE"), std::string::npos);
}

// ---- Output format -----------------------------------------------------------------------

TEST(PerfReport, ReproducesTheReferenceTableByteForByte) {
  // A table printed by nccl-tests 2.19.6, verbatim.
  const std::vector<std::string> ref = {
      "#                                                              out-of-place                       in-place",
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
      "#wrong",
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
      "(GB/s)"};
  EXPECT_EQ(tableHeader(false), ref);
  HalfResult out{1377.7, 97.42, 170.49, 0, true}, in{1376.1, 97.53, 170.68, 0, true};
  EXPECT_EQ(formatRowStart(134217728, 33554432, "float", "sum", -1) + formatHalf(out) + formatHalf(in),
            "   134217728      33554432     float     sum      -1   1377.7   97.42  170.49      0   1376.1   97.53  "
            "170.68      0");
  DevRec d{0, 12345, 0, 0, "host1"};
  EXPECT_EQ(formatDevice(d), "#  Rank  0 Group  0 Pid  12345 on      host1 device  0 [0000:00:00] host memory (CPU)");
  EXPECT_EQ(tableHeader(true)[1].substr(52, 9), "  cputime");
}

TEST(PerfReport, FitsNumbersIntoTheirColumns) {
  EXPECT_EQ(fitNumber(0.001, 6), "0.00");
  EXPECT_EQ(fitNumber(170.49, 6), "170.49");
  EXPECT_EQ(fitNumber(1046.53, 6), "1046.5");
  EXPECT_EQ(fitNumber(123456.7, 6), "123457");
  EXPECT_EQ(fitNumber(1234567.0, 6), "1e+06");
  EXPECT_EQ(formatTime(24.244), "24.24");
  EXPECT_EQ(formatTime(136.64), "136.6");
  EXPECT_EQ(formatTime(99.996), "100.00");  // nccl-tests picks the format before rounding too
  EXPECT_EQ(formatTime(12345.6), "12346");
  EXPECT_EQ(formatTime(1.5e8), "1.5e+08");
  HalfResult unchecked{1.0, 2.0, 3.0, 0, false};
  EXPECT_EQ(formatHalf(unchecked), "     1.00    2.00    3.00    N/A");
  HalfResult wrong{1.0, 2.0, 3.0, 12, true};
  EXPECT_EQ(formatHalf(wrong), "     1.00    2.00    3.00     12");
}

TEST(PerfReport, WrongDataOrLowBandwidthExitSeven) {
  EXPECT_EQ(finalExitCode(0, true), kOk);
  EXPECT_EQ(finalExitCode(1, true), kWrongResults);
  EXPECT_EQ(finalExitCode(0, false), kWrongResults);
  Options o;
  RunInfo info{"sn_allreduce_perf", "threads of one process", 1, 2, o.maxBytes};
  Report r(o, info, true);
  RowResult row;
  row.type = "float";
  row.redop = "sum";
  testing::internal::CaptureStdout();
  r.startRow(row);
  r.addHalf(0, {1.0, 1.0, 1.0, 3, true});
  r.addHalf(1, {1.0, 1.0, 3.0, 0, true});
  r.endRow();
  EXPECT_EQ(r.finish(1), kWrongResults);
  std::string text = testing::internal::GetCapturedStdout();
  EXPECT_NE(text.find("# Out of bounds values : 1 FAILED\n"), std::string::npos) << text;
  EXPECT_NE(text.find("# Avg bus bandwidth    : 2 \n"), std::string::npos) << text;
  EXPECT_NE(text.find("# Collective test concluded: sn_allreduce_perf\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace snperf
