// The device engine and the device reduction kernel.
//
// DeviceKernels runs the host build of the kernel's source against the CPU kernels, bit
// for bit, for every datatype, operator and flag on random bytes (NaNs, infinities and
// subnormals included): ranks on different engines must agree. It needs no driver.
//
// DeviceEngine runs the engine through the driver SNCCL_CUDA_DRIVER names (the CPU
// stand-in in CI: tests/support/cuda_standin), operands in device memory and in host
// memory in the mixes the executor makes, and its error path. CudaDriverOff (run with
// SNCCL_CUDA_DRIVER naming no library) checks that a process without a driver runs on
// host memory and says why.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "collectives/kernels/reduce.h"
#include "core/engine/device_engine.h"
#include "core/engine/registry.h"
#include "device/cuda_driver.h"
#include "device/kernels/reduce_kernel.h"
#include "support/cuda_test.h"

namespace snccl {
namespace {

using device::kernels::ReduceKernelArgs;

std::vector<unsigned char> randomBytes(size_t n, std::mt19937& rng) {
  std::vector<unsigned char> v(n);
  for (unsigned char& c : v) c = static_cast<unsigned char>(rng());
  return v;
}

struct OpCase {
  ncclDataType_t dt;
  kernels::RedOpSpec op;
  int variant;  // 0 plain, 1 PreMulSum, 2 Avg
};

// Every (datatype, base op, variant) with a random PreMulSum scalar.
std::vector<OpCase> allOps(std::mt19937& rng) {
  std::vector<OpCase> v;
  for (int t = 0; t < ncclNumTypes; ++t)
    for (int base = ncclSum; base <= ncclMin; ++base)
      for (int variant = 0; variant < 3; ++variant) {
        OpCase c{static_cast<ncclDataType_t>(t), {}, variant};
        c.op.base = static_cast<ncclRedOp_t>(base);
        if (variant == 1) {
          c.op.hasScalar = true;
          std::vector<unsigned char> s = randomBytes(kernels::typeSize(c.dt), rng);
          std::memcpy(c.op.scalar, s.data(), s.size());
        }
        if (variant == 2) c.op.divisor = 3;
        v.push_back(c);
      }
  return v;
}

bool isNaN(ncclDataType_t dt, const unsigned char* e) {
  uint64_t v = 0;
  std::memcpy(&v, e, kernels::typeSize(dt));
  switch (dt) {
    case ncclFloat16:
      return (v & 0x7FFF) > 0x7C00;
    case ncclBfloat16:
      return (v & 0x7FFF) > 0x7F80;
    case ncclFloat32:
      return (v & 0x7FFFFFFF) > 0x7F800000;
    case ncclFloat64:
      return (v & 0x7FFFFFFFFFFFFFFF) > 0x7FF0000000000000;
    case ncclFloat8e4m3:
      return (v & 0x7F) == 0x7F;
    case ncclFloat8e5m2:
      return (v & 0x7F) > 0x7C;
    default:
      return false;
  }
}

// Equal bit for bit, except that a NaN may be any NaN (reduce.h: its payload and sign
// are not specified; a compiler may swap the operands of a commutative op).
::testing::AssertionResult sameResults(ncclDataType_t dt, const std::vector<unsigned char>& got,
                                       const std::vector<unsigned char>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  const size_t es = kernels::typeSize(dt);
  for (size_t i = 0; i < got.size(); i += es) {
    if (std::memcmp(&got[i], &want[i], es) == 0 || (isNaN(dt, &got[i]) && isNaN(dt, &want[i]))) continue;
    uint64_t g = 0, w = 0;
    std::memcpy(&g, &got[i], es);
    std::memcpy(&w, &want[i], es);
    return ::testing::AssertionFailure() << "element " << i / es << ": got 0x" << std::hex << g << ", want 0x" << w;
  }
  return ::testing::AssertionSuccess();
}

ReduceKernelArgs argsFor(void* dst, const void* a, const void* b, size_t count, const OpCase& c, bool scale, bool fin) {
  ReduceKernelArgs k{};
  k.dst = dst;
  k.a = a;
  k.b = b;
  k.count = count;
  k.dt = c.dt;
  k.base = c.op.base;
  k.divisor = c.op.divisor;
  k.flags = (scale && c.op.hasScalar ? device::kernels::kScaleB : 0u) | (fin ? device::kernels::kFinalize : 0u);
  std::memcpy(&k.scalarBits, c.op.scalar, sizeof k.scalarBits);
  return k;
}

TEST(DeviceKernels, HostBuildEqualsTheCpuKernelsForEveryTypeOpAndFlag) {
  std::mt19937 rng(11);
  size_t cases = 0;
  for (const OpCase& c : allOps(rng))
    for (size_t count : {size_t(0), size_t(1), size_t(5), size_t(4099)})
      for (int flags = 0; flags < 4; ++flags) {
        const bool scale = flags & 1, fin = flags & 2;
        const size_t bytes = count * kernels::typeSize(c.dt);
        SCOPED_TRACE(format("%s base %d variant %d count %zu scale %d final %d", kernels::typeName(c.dt),
                            int(c.op.base), c.variant, count, int(scale), int(fin)));
        std::vector<unsigned char> a = randomBytes(bytes, rng), b = randomBytes(bytes, rng);
        std::vector<unsigned char> got(bytes, 0xAB), want(bytes, 0xAB);
        ReduceKernelArgs k = argsFor(got.data(), a.data(), b.data(), count, c, scale, fin);
        device::kernels::reduceRange(k, 0, 1);
        kernels::reduce(want.data(), a.data(), b.data(), count, c.dt, c.op, scale, fin);
        ASSERT_TRUE(sameResults(c.dt, got, want)) << "reduce";
        // In place (dst == b), and the strided form a grid runs, in two halves.
        got = b;
        want = b;
        k = argsFor(got.data(), a.data(), got.data(), count, c, scale, fin);
        device::kernels::reduceRange(k, 1, 2);
        device::kernels::reduceRange(k, 0, 2);
        kernels::reduce(want.data(), a.data(), want.data(), count, c.dt, c.op, scale, fin);
        ASSERT_TRUE(sameResults(c.dt, got, want)) << "reduce in place, strided";
        got.assign(bytes, 0xCD);
        want.assign(bytes, 0xCD);
        k = argsFor(got.data(), a.data(), nullptr, count, c, scale, fin);
        device::kernels::reduceRange(k, 0, 1);
        kernels::copy(want.data(), a.data(), count, c.dt, c.op, scale, fin);
        ASSERT_TRUE(sameResults(c.dt, got, want)) << "copy";
        ++cases;
      }
  EXPECT_EQ(cases, size_t(ncclNumTypes) * 4 * 3 * 4 * 4);
}

// ------------------------------------------------------------------ with a driver

class DeviceEngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const sntest::TestCuda& cuda = sntest::testCuda();
    if (!cuda.on) GTEST_SKIP() << cuda.why;
    ASSERT_TRUE(cuda.bindThread());
    ASSERT_TRUE(device::CudaDriver::get().on()) << device::CudaDriver::get().why();
  }
  void TearDown() override {
    for (sntest::CUdeviceptr p : allocs_) sntest::testCuda().memFree(p);
  }
  // Device memory holding `init`.
  void* deviceCopy(const std::vector<unsigned char>& init) {
    sntest::CUdeviceptr p = 0;
    EXPECT_EQ(sntest::testCuda().memAlloc(&p, std::max<size_t>(init.size(), 1)), 0);
    allocs_.push_back(p);
    if (!init.empty()) {
      EXPECT_EQ(sntest::testCuda().memcpyHtoD(p, init.data(), init.size()), 0);
    }
    return reinterpret_cast<void*>(p);
  }
  std::vector<unsigned char> read(const void* p, size_t bytes) {
    std::vector<unsigned char> v(bytes);
    if (bytes != 0) {
      EXPECT_EQ(sntest::testCuda().memcpyDtoH(v.data(), sntest::CUdeviceptr(p), bytes), 0);
    }
    return v;
  }
  std::vector<sntest::CUdeviceptr> allocs_;
};

TEST_F(DeviceEngineTest, OwnsDeviceMemoryOnly) {
  std::vector<unsigned char> bytes(64, 1);
  void* d = deviceCopy(bytes);
  EXPECT_TRUE(engine::kDeviceEngine.owns(d));
  EXPECT_TRUE(engine::kDeviceEngine.owns(static_cast<char*>(d) + 63));
  EXPECT_FALSE(engine::kDeviceEngine.owns(bytes.data()));
  EXPECT_FALSE(engine::kDeviceEngine.owns(nullptr));
  EXPECT_EQ(engine::engineFor(d), &engine::kDeviceEngine);
  EXPECT_EQ(engine::engineFor(bytes.data()), &engine::kCpuEngine);
  const engine::OpBuffer mixed[] = {{"sendbuff", d}, {"recvbuff", bytes.data()}};
  Result<const engine::DataEngine*> r = engine::engineForBuffers(mixed);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("device memory (engine cuda)"), std::string::npos) << r.status().message();
}

// The executor's mixes: operands in device memory (the user's buffers) and host memory
// (connection slots, scratch), every type, op and flag, against the CPU kernels.
TEST_F(DeviceEngineTest, EqualsTheCpuKernelsOnDeviceAndHostOperands) {
  std::mt19937 rng(5);
  // dst, a, b: 1 device, 0 host
  const int mixes[][3] = {{1, 1, 1}, {1, 1, 0}, {0, 0, 1}, {0, 1, 0}};
  for (const OpCase& c : allOps(rng))
    for (size_t count : {size_t(0), size_t(3), size_t(1000)})
      for (int flags = 0; flags < 4; ++flags)
        for (const auto& mix : mixes) {
          const bool scale = flags & 1, fin = flags & 2;
          const size_t bytes = count * kernels::typeSize(c.dt);
          SCOPED_TRACE(format("%s base %d variant %d count %zu scale %d final %d mix %d%d%d", kernels::typeName(c.dt),
                              int(c.op.base), c.variant, count, int(scale), int(fin), mix[0], mix[1], mix[2]));
          std::vector<unsigned char> a = randomBytes(bytes, rng), b = randomBytes(bytes, rng);
          std::vector<unsigned char> init = randomBytes(bytes, rng), want = init, hostDst = init;
          void* da = mix[1] ? deviceCopy(a) : a.data();
          void* db = mix[2] ? deviceCopy(b) : b.data();
          void* dd = mix[0] ? deviceCopy(init) : hostDst.data();
          ASSERT_TRUE(engine::kDeviceEngine.reduce(dd, da, db, count, c.dt, c.op, scale, fin).ok());
          kernels::reduce(want.data(), a.data(), b.data(), count, c.dt, c.op, scale, fin);
          ASSERT_TRUE(sameResults(c.dt, mix[0] ? read(dd, bytes) : hostDst, want)) << "reduce";
          want = init;
          void* dc = mix[0] ? deviceCopy(init) : (hostDst = init, hostDst.data());
          ASSERT_TRUE(engine::kDeviceEngine.copy(dc, da, count, c.dt, c.op, scale, fin).ok());
          kernels::copy(want.data(), a.data(), count, c.dt, c.op, scale, fin);
          ASSERT_TRUE(sameResults(c.dt, mix[0] ? read(dc, bytes) : hostDst, want)) << "copy";
          for (sntest::CUdeviceptr p : allocs_) sntest::testCuda().memFree(p);
          allocs_.clear();
        }
}

TEST_F(DeviceEngineTest, ReduceStreamAndCopyBytesReachEveryOutput) {
  std::mt19937 rng(3);
  const size_t count = 777;
  std::vector<unsigned char> a = randomBytes(count * 4, rng), b = randomBytes(count * 4, rng), want(count * 4);
  kernels::RedOpSpec op;
  op.base = ncclMax;
  kernels::reduce(want.data(), a.data(), b.data(), count, ncclFloat32, op, false, false);
  void* da = deviceCopy(a);
  void* db = deviceCopy(b);
  std::vector<unsigned char> host(count * 4, 0);
  void* out[3] = {deviceCopy(host), host.data(), da};  // device, host, and in place over a
  ASSERT_TRUE(engine::kDeviceEngine.reduceStream(out, 3, 1, da, db, count, ncclFloat32, op, false, false).ok());
  ASSERT_TRUE(engine::kDeviceEngine.streamFence().ok());
  EXPECT_EQ(read(out[0], want.size()), want);
  EXPECT_EQ(host, want);
  EXPECT_EQ(read(da, want.size()), want);
  std::vector<unsigned char> back(want.size(), 0);
  ASSERT_TRUE(engine::kDeviceEngine.copyBytes(back.data(), out[0], back.size()).ok());
  EXPECT_EQ(back, want);
}

TEST_F(DeviceEngineTest, AFailedLaunchIsAnErrorNamingTheCall) {
  if (!sntest::testCuda().standin) GTEST_SKIP() << "needs the stand-in's launch failures";
  std::vector<unsigned char> bytes(64, 1);
  void* d = deviceCopy(bytes);
  kernels::RedOpSpec op;
  sntest::testCuda().standinFailLaunches(1);
  Status st = engine::kDeviceEngine.reduce(d, d, d, 16, ncclFloat32, op, false, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("cuLaunchKernel"), std::string::npos) << st.message();
  EXPECT_TRUE(engine::kDeviceEngine.reduce(d, d, d, 16, ncclFloat32, op, false, false).ok());
}

// A call that fails after queuing work (host operands staged, then the launch fails)
// returns only once its stream drained: the caller may free the operands at once.
TEST_F(DeviceEngineTest, AFailedLaunchReturnsOnlyOnceItsCopiesAreDone) {
  const sntest::TestCuda& cu = sntest::testCuda();
  if (!cu.standin || cu.standinSlowStreams == nullptr) GTEST_SKIP() << "needs the stand-in's slow streams";
  std::vector<float> a(1024, 1.0f), b(1024, 2.0f);
  void* d = deviceCopy(std::vector<unsigned char>(a.size() * 4, 0));
  kernels::RedOpSpec op;
  cu.standinSlowStreams(20000);  // each queued copy takes 20 ms
  cu.standinFailLaunches(1);
  Status st = engine::kDeviceEngine.reduce(d, a.data(), b.data(), a.size(), ncclFloat32, op, false, false);
  const size_t pending = cu.standinPendingOps();
  cu.standinSlowStreams(0);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(pending, 0u) << "the failed call left copies of its host operands queued";
}

// The stand-in's device memory is not host memory: a host path that touched a user's
// device buffer would crash in CI as it would on a GPU.
TEST_F(DeviceEngineTest, StandInDeviceMemoryIsNotHostMemory) {
  if (!sntest::testCuda().standin) GTEST_SKIP() << "a property of the stand-in";
  std::vector<unsigned char> bytes(64, 1);
  volatile unsigned char* d = static_cast<unsigned char*>(deviceCopy(bytes));
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)d[0], "");
}

TEST(CudaDriverOff, AProcessWithoutADriverRunsOnHostMemoryAndSaysWhy) {
  const device::CudaDriver& drv = device::CudaDriver::get();
  ASSERT_FALSE(drv.on()) << "run with SNCCL_CUDA_DRIVER naming no library (ctest does)";
  EXPECT_NE(drv.why().find("cannot be loaded"), std::string::npos) << drv.why();
  std::vector<unsigned char> bytes(8);
  EXPECT_FALSE(engine::kDeviceEngine.owns(bytes.data()));
  EXPECT_EQ(engine::engineFor(bytes.data()), &engine::kCpuEngine);
}

}  // namespace
}  // namespace snccl
