// Data engines (core/engine): the registry's choice of an operation's engine, the CPU
// engine against the kernels it wraps, and the executor's use of the op's engine for
// every copy and reduction.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/channels.h"
#include "collectives/kernels/reduce.h"
#include "core/comm.h"
#include "core/engine/cpu_engine.h"
#include "core/engine/registry.h"
#include "core/executor.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using engine::DataEngine;
using engine::OpBuffer;

// Owns nothing: every buffer is foreign to a table of only this engine.
class NoMemoryEngine final : public DataEngine {
 public:
  NoMemoryEngine() : DataEngine("none", engine::MemoryKind::kHost) {}
  bool owns(const void*) const override { return false; }
  Status copyBytes(void*, const void*, size_t) const override { return OkStatus(); }
  Status copy(void*, const void*, size_t, ncclDataType_t, const kernels::RedOpSpec&, bool, bool) const override {
    return OkStatus();
  }
  Status reduce(void*, const void*, const void*, size_t, ncclDataType_t, const kernels::RedOpSpec&, bool,
                bool) const override {
    return OkStatus();
  }
  Status reduceStream(void* const*, int, int, const void*, const void*, size_t, ncclDataType_t,
                      const kernels::RedOpSpec&, bool, bool) const override {
    return OkStatus();
  }
  Status streamFence() const override { return OkStatus(); }
};

// Owns the bytes of one region (as a device engine owns its device's memory) and runs
// the CPU engine on them; every call is recorded.
class RegionEngine final : public DataEngine {
 public:
  RegionEngine(const char* name, const void* base, size_t bytes)
      : DataEngine(name, engine::MemoryKind::kHost), base_(static_cast<const char*>(base)), bytes_(bytes) {}

  bool owns(const void* p) const override {
    auto c = static_cast<const char*>(p);
    return c >= base_ && c < base_ + bytes_;
  }
  Status copyBytes(void* dst, const void* src, size_t bytes) const override {
    byteCopies.push_back({dst, src, bytes});
    return engine::kCpuEngine.copyBytes(dst, src, bytes);
  }
  Status copy(void* dst, const void* src, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op, bool scale,
              bool finalize) const override {
    ++copies;
    return engine::kCpuEngine.copy(dst, src, count, dt, op, scale, finalize);
  }
  Status reduce(void* dst, const void* a, const void* b, size_t count, ncclDataType_t dt, const kernels::RedOpSpec& op,
                bool scaleB, bool finalize) const override {
    ++reduces;
    return engine::kCpuEngine.reduce(dst, a, b, count, dt, op, scaleB, finalize);
  }
  Status reduceStream(void* const* out, int nout, int nstream, const void* a, const void* b, size_t count,
                      ncclDataType_t dt, const kernels::RedOpSpec& op, bool scaleB, bool finalize) const override {
    ++reduces;
    return engine::kCpuEngine.reduceStream(out, nout, nstream, a, b, count, dt, op, scaleB, finalize);
  }
  Status streamFence() const override { return engine::kCpuEngine.streamFence(); }

  struct ByteCopy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  // The executor calls an engine from the thread that drives the op: one thread here.
  mutable std::vector<ByteCopy> byteCopies;
  mutable int copies = 0;
  mutable int reduces = 0;

 private:
  const char* base_;
  size_t bytes_;
};

// --- registry ---

TEST(EngineRegistry, HostPointersBelongToTheCpuEngine) {
  ASSERT_FALSE(engine::engines().empty());
  EXPECT_EQ(engine::engines().back(), &engine::hostEngine()) << "the CPU engine owns every pointer: it comes last";
  EXPECT_EQ(&engine::hostEngine(), &engine::kCpuEngine);
  EXPECT_STREQ(engine::hostEngine().name(), "cpu");
  EXPECT_EQ(engine::hostEngine().kind(), engine::MemoryKind::kHost);
  EXPECT_STREQ(engine::memoryKindName(engine::MemoryKind::kHost), "host");
  int onStack = 0;
  auto onHeap = std::make_unique<double[]>(16);
  static char inData[8];
  for (const void* p : {static_cast<const void*>(&onStack), static_cast<const void*>(onHeap.get() + 3),
                        static_cast<const void*>(inData + 1)})
    EXPECT_EQ(engine::engineFor(p), &engine::hostEngine()) << p;
  Result<const DataEngine*> r = engine::engineForBuffers(
      std::vector<OpBuffer>{{"sendbuff", onHeap.get()}, {"recvbuff", &onStack}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), &engine::hostEngine());
}

TEST(EngineRegistry, AnOpTouchingNoMemoryHasNoEngine) {
  Result<const DataEngine*> r = engine::engineForBuffers(std::vector<OpBuffer>{{"sendbuff", nullptr},
                                                                               {"recvbuff", nullptr}});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), nullptr);
  r = engine::engineForBuffers(std::vector<OpBuffer>{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), nullptr);
}

TEST(EngineRegistry, TheFirstEngineThatOwnsAPointerHasIt) {
  std::vector<char> region(64), other(64);
  RegionEngine dev("dev", region.data(), region.size());
  const DataEngine* devFirst[] = {&dev, &engine::kCpuEngine};
  const DataEngine* cpuFirst[] = {&engine::kCpuEngine, &dev};
  EXPECT_EQ(engine::engineFor(region.data() + 10, devFirst), &dev);
  EXPECT_EQ(engine::engineFor(other.data(), devFirst), &engine::kCpuEngine);
  EXPECT_EQ(engine::engineFor(region.data() + 10, cpuFirst), &engine::kCpuEngine);
  const DataEngine* devOnly[] = {&dev};
  EXPECT_EQ(engine::engineFor(other.data(), devOnly), nullptr);
  // Null buffers (not touched on this rank) take no part in the choice.
  Result<const DataEngine*> r =
      engine::engineForBuffers(std::vector<OpBuffer>{{"sendbuff", nullptr}, {"recvbuff", region.data()}}, devFirst);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), &dev);
}

TEST(EngineRegistry, ABufferNoEngineOwnsIsAnInvalidArgumentNamingIt) {
  NoMemoryEngine none;
  const DataEngine* table[] = {&none};
  std::vector<float> buf(4);
  Result<const DataEngine*> r = engine::engineForBuffers(
      std::vector<OpBuffer>{{"sendbuff", nullptr}, {"recvbuff", buf.data()}}, table);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ncclInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("recvbuff " + format("%p", static_cast<void*>(buf.data()))), std::string::npos) << m;
  EXPECT_EQ(m.find("sendbuff"), std::string::npos) << m;
  EXPECT_NE(m.find("no data engine"), std::string::npos) << m;
  EXPECT_NE(m.find("none"), std::string::npos) << "lists the engines: " << m;
}

TEST(EngineRegistry, BuffersOfTwoEnginesAreAnInvalidArgumentNamingBoth) {
  std::vector<char> region(64), host(64);
  RegionEngine dev("dev", region.data(), region.size());
  const DataEngine* table[] = {&dev, &engine::kCpuEngine};
  Result<const DataEngine*> r = engine::engineForBuffers(
      std::vector<OpBuffer>{{"sendbuff", region.data()}, {"recvbuff", host.data()}}, table);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ncclInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("sendbuff " + format("%p", static_cast<void*>(region.data()))), std::string::npos) << m;
  EXPECT_NE(m.find("recvbuff " + format("%p", static_cast<void*>(host.data()))), std::string::npos) << m;
  EXPECT_NE(m.find("engine dev"), std::string::npos) << m;
  EXPECT_NE(m.find("engine cpu"), std::string::npos) << m;
  // A group's sends and receives: the peer is named too.
  r = engine::engineForBuffers(std::vector<OpBuffer>{{"ncclSend buffer", region.data(), 1},
                                                     {"ncclRecv buffer", region.data() + 8, 2},
                                                     {"ncclRecv buffer", host.data(), 3}},
                               table);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ncclRecv buffer (peer 3)"), std::string::npos) << r.status().message();
  // Both in the region: its engine.
  r = engine::engineForBuffers(std::vector<OpBuffer>{{"sendbuff", region.data()}, {"recvbuff", region.data() + 32}},
                               table);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r.value(), &dev);
}

// --- the CPU engine gives the kernels' results ---

std::vector<unsigned char> randomBytes(size_t n, std::mt19937& rng) {
  std::vector<unsigned char> v(n);
  for (unsigned char& c : v) c = static_cast<unsigned char>(rng());
  return v;
}

TEST(CpuEngine, CopyAndReduceEqualTheKernelsForEveryTypeOpAndShape) {
  const DataEngine& eng = engine::kCpuEngine;
  std::mt19937 rng(7);
  const size_t counts[] = {0, 1, 3, 17, 1000, 4099};
  size_t cases = 0;
  for (int t = 0; t < ncclNumTypes; ++t) {
    const auto dt = static_cast<ncclDataType_t>(t);
    const size_t es = kernels::typeSize(dt);
    for (int base = ncclSum; base <= ncclMin; ++base)
      for (int variant = 0; variant < 3; ++variant) {  // plain, PreMulSum, Avg
        kernels::RedOpSpec op;
        op.base = static_cast<ncclRedOp_t>(base);
        if (variant == 1) {
          op.hasScalar = true;
          std::vector<unsigned char> s = randomBytes(es, rng);
          std::memcpy(op.scalar, s.data(), es);
        }
        if (variant == 2) op.divisor = 3;
        for (size_t count : counts)
          for (size_t misalign : {size_t(0), size_t(1)})  // elements: 0, or off every vector boundary
            for (int flags = 0; flags < 4; ++flags) {
              const bool scale = flags & 1, fin = flags & 2;
              const size_t off = misalign * es, bytes = count * es;
              std::vector<unsigned char> a = randomBytes(bytes + off, rng), b = randomBytes(bytes + off, rng);
              const std::vector<unsigned char> init = randomBytes(bytes + off, rng);
              SCOPED_TRACE(format("%s base %d variant %d count %zu misalign %zu scale %d final %d",
                                  kernels::typeName(dt), base, variant, count, misalign, int(scale), int(fin)));
              std::vector<unsigned char> got = init, want = init;
              ASSERT_TRUE(eng.reduce(got.data() + off, a.data() + off, b.data() + off, count, dt, op, scale, fin).ok());
              kernels::reduce(want.data() + off, a.data() + off, b.data() + off, count, dt, op, scale, fin);
              ASSERT_EQ(got, want) << "reduce";
              if (count == 0) {
                ASSERT_EQ(got, init) << "reduce of 0 elements wrote";
              }
              // In place (dst == a), as kLocalReduce and the receives reduce.
              got = a, want = a;
              ASSERT_TRUE(
                  eng.reduce(got.data() + off, got.data() + off, b.data() + off, count, dt, op, scale, fin).ok());
              kernels::reduce(want.data() + off, want.data() + off, b.data() + off, count, dt, op, scale, fin);
              ASSERT_EQ(got, want) << "reduce in place";
              got = init, want = init;
              ASSERT_TRUE(eng.copy(got.data() + off, a.data() + off, count, dt, op, scale, fin).ok());
              kernels::copy(want.data() + off, a.data() + off, count, dt, op, scale, fin);
              ASSERT_EQ(got, want) << "copy";
              if (count == 0) {
                ASSERT_EQ(got, init) << "copy of 0 elements wrote";
              }
              std::vector<unsigned char> got2 = init, want2 = init;
              got = init, want = init;
              void* gotOut[2] = {got.data() + off, got2.data() + off};
              void* wantOut[2] = {want.data() + off, want2.data() + off};
              ASSERT_TRUE(
                  eng.reduceStream(gotOut, 2, 1, a.data() + off, b.data() + off, count, dt, op, scale, fin).ok());
              ASSERT_TRUE(eng.streamFence().ok());
              kernels::reduceStream(wantOut, 2, 1, a.data() + off, b.data() + off, count, dt, op, scale, fin);
              kernels::streamFence();
              ASSERT_EQ(got, want) << "reduceStream out[0]";
              ASSERT_EQ(got2, want2) << "reduceStream out[1]";
              got = init;
              ASSERT_TRUE(eng.copyBytes(got.data() + off, a.data() + off, bytes).ok());
              ASSERT_TRUE(std::equal(got.begin() + off, got.end(), a.begin() + off)) << "copyBytes";
              ASSERT_TRUE(std::equal(got.begin(), got.begin() + off, init.begin())) << "copyBytes wrote before dst";
              ++cases;
            }
      }
  }
  EXPECT_EQ(cases, size_t(ncclNumTypes) * 4 * 3 * std::size(counts) * 2 * 4);
}

// A known result, so that an engine and kernels that both did nothing cannot pass.
TEST(CpuEngine, ReducesAndScales) {
  const float a[3] = {1, 2, 3}, b[3] = {10, 20, 30};
  float out[3] = {};
  kernels::RedOpSpec op;
  ASSERT_TRUE(engine::kCpuEngine.reduce(out, a, b, 3, ncclFloat32, op, false, false).ok());
  EXPECT_EQ(out[0], 11);
  EXPECT_EQ(out[2], 33);
  op.hasScalar = true;
  const float two = 2;
  std::memcpy(op.scalar, &two, sizeof two);
  ASSERT_TRUE(engine::kCpuEngine.copy(out, b, 3, ncclFloat32, op, true, false).ok());
  EXPECT_EQ(out[1], 40);
  op = {};
  op.divisor = 2;
  ASSERT_TRUE(engine::kCpuEngine.reduce(out, a, b, 3, ncclFloat32, op, false, true).ok());
  EXPECT_EQ(out[0], 5.5f);
}

// --- the executor moves data only through the op's engine ---

// Ranks of one process, driven by this thread (runRunners), each op run on a
// RegionEngine that owns the rank's buffers.
class EngineExecutor : public ::testing::Test {
 protected:
  static constexpr int kRanks = 3;
  void SetUp() override {
    int devs[kRanks] = {0, 1, 2};
    ASSERT_EQ(ncclCommInitAll(comms_, kRanks, devs), ncclSuccess);
  }
  void TearDown() override {
    for (ncclComm_t c : comms_)
      if (c != nullptr) ncclCommDestroy(c);
  }

  // Runs each rank's ops to completion, on the first `nranks` ranks.
  void run(std::vector<ExecOp>* ops, int nranks) {
    std::vector<std::unique_ptr<CommRunner>> runners;
    std::vector<CommRunner*> ptrs;
    for (int r = 0; r < nranks; ++r) {
      runners.push_back(std::make_unique<CommRunner>(comms_[r], std::move(ops[r]),
                                                     comms_[r]->ordering.take()));
      ptrs.push_back(runners.back().get());
    }
    Status st = runRunners(ptrs);
    ASSERT_TRUE(st.ok()) << st.message();
  }

  ncclComm_t comms_[kRanks] = {};
};

// The calls tryStep makes for a schedule's steps, none sent or received in place (no net
// ring here), so the engine must have seen exactly these.
struct ExpectedCalls {
  int copies = 0, reduces = 0, byteCopies = 0;
};
ExpectedCalls expectedCalls(const Schedule& s, std::vector<int>* primsSeen) {
  ExpectedCalls c;
  for (const Lane& lane : s.lanes)
    for (const Step& st : lane.steps) {
      (*primsSeen)[size_t(st.prim)] = 1;
      switch (st.prim) {
        case Prim::kSend:
        case Prim::kCopy:
          ++c.copies;
          break;
        case Prim::kRecv:
          ++c.byteCopies;
          break;
        case Prim::kRecvReduceSend:
        case Prim::kRecvReduceCopy:
        case Prim::kLocalReduce:
          ++c.reduces;
          break;
        case Prim::kRecvReduceCopySend:
          ++c.reduces, ++c.byteCopies;
          break;
        case Prim::kRecvCopySend:
          c.byteCopies += 2;
          break;
        case Prim::kPeerFold:  // the single copy's step (core/mapped_allreduce.cc), not tryStep's
          ADD_FAILURE() << "a PeerFold step in an algorithm the engine runs step by step";
          break;
      }
    }
  return c;
}

// Every AllReduce algorithm on 3 ranks, which between them run every prim: each step
// must copy and reduce through the op's engine, once per operand it moves.
TEST_F(EngineExecutor, EveryPrimCopiesAndReducesThroughTheEngine) {
  constexpr size_t kCount = 1000, kChunk = 128;  // well below the at-pointer sizes
  std::vector<int> primsSeen(size_t(Prim::kLocalReduce) + 1, 0);
  for (const char* name : {"ring", "tree", "direct", "rd", "flat", "hier"}) {
    SCOPED_TRACE(name);
    const AlgorithmDef* alg = findAlgorithm(CollKind::kAllReduce, name);
    ASSERT_NE(alg, nullptr);
    const int n = kRanks;
    std::vector<float> mem[kRanks];
    std::unique_ptr<RegionEngine> engines[kRanks];
    std::vector<ExecOp> ops[kRanks];
    ExpectedCalls want[kRanks];
    for (int r = 0; r < n; ++r) {
      // One allocation holds input and output, so that one region engine owns both.
      mem[r].assign(2 * kCount, 0.0f);
      for (size_t i = 0; i < kCount; ++i) mem[r][i] = float(i % 97) + float(r) * 1000;
      engines[r] = std::make_unique<RegionEngine>("recording", mem[r].data(), mem[r].size() * sizeof(float));
      auto prep = std::make_shared<PreparedSchedule>();
      Status gen = generateSchedule(*alg, testing::collArgs(CollKind::kAllReduce, r, n, kCount, kChunk),
                                    comms_[r]->peers.plan, &prep->sched);
      ASSERT_TRUE(gen.ok()) << gen.message();
      prep->analyse();
      want[r] = expectedCalls(prep->sched, &primsSeen);
      ExecOp e;
      e.prep = prep;
      e.sched = &prep->sched;
      e.dt = ncclFloat32;
      e.elemSize = sizeof(float);
      e.coll = CollKind::kAllReduce;
      e.count = kCount;
      e.sig = 0x5eed;
      e.engine = engines[r].get();
      e.inputStable = true;
      for (const BufDesc& b : prep->sched.bufs) {
        if (b.role == BufRole::kScratch) {
          ASSERT_TRUE(e.scratch.ensure(comms_[r]->caches.scratchPool, b.elems * sizeof(float)));
          e.bufs.push_back(e.scratch.data());
        } else {
          e.bufs.push_back(reinterpret_cast<char*>(mem[r].data() + (b.role == BufRole::kInput ? 0 : kCount)));
        }
      }
      ops[r].push_back(std::move(e));
    }
    run(ops, n);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < kCount; ++i)
        ASSERT_EQ(mem[r][kCount + i], 3 * float(i % 97) + 3000) << "rank " << r << " element " << i;
      EXPECT_EQ(engines[r]->copies, want[r].copies) << "rank " << r;
      EXPECT_EQ(engines[r]->reduces, want[r].reduces) << "rank " << r;
      EXPECT_EQ(int(engines[r]->byteCopies.size()), want[r].byteCopies) << "rank " << r;
    }
  }
  for (size_t p = 0; p < primsSeen.size(); ++p)
    EXPECT_TRUE(primsSeen[p]) << primName(Prim(p)) << " never ran: the test misses its call site";
}

TEST_F(EngineExecutor, StagedSendsAreCopiedIntoScratchByTheEngine) {
  // Each rank sends kBytes to the other and receives kBytes from it into the same buffer
  // (in place): the send is staged into scratch when the op starts (preCopies).
  constexpr size_t kBytes = 3000;
  std::vector<char> mem[kRanks];
  std::unique_ptr<RegionEngine> engines[kRanks];
  std::vector<ExecOp> ops[kRanks];
  char* staged[2] = {};
  for (int r = 0; r < 2; ++r) {
    mem[r].assign(kBytes, char('a' + r));
    engines[r] = std::make_unique<RegionEngine>("counting", mem[r].data(), mem[r].size());
    const P2POp p2p[] = {{true, 1 - r, kBytes}, {false, 1 - r, kBytes}};
    auto prep = std::make_shared<PreparedSchedule>();
    ASSERT_TRUE(buildP2PSchedule(r, 2, p2p, comms_[r]->conns.slotBytes, &prep->sched).ok());
    prep->analyse();
    ASSERT_EQ(prep->sched.bufs.size(), 2u);
    ExecOp e;
    e.prep = prep;
    e.sched = &prep->sched;
    e.dt = ncclUint8;
    e.elemSize = 1;
    e.coll = CollKind::kSendRecv;
    e.engine = engines[r].get();
    e.inputStable = true;
    ASSERT_TRUE(e.scratch.ensure(comms_[r]->caches.scratchPool, kBytes));
    staged[r] = e.scratch.data();
    e.preCopies.push_back({mem[r].data(), 0, kBytes});
    e.bufs = {e.scratch.data(), mem[r].data()};  // the send reads the staged copy
    ops[r].push_back(std::move(e));
  }
  run(ops, 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(mem[r], std::vector<char>(kBytes, char('a' + 1 - r))) << "rank " << r;
    ASSERT_FALSE(engines[r]->byteCopies.empty()) << "rank " << r;
    const RegionEngine::ByteCopy& first = engines[r]->byteCopies.front();
    EXPECT_EQ(first.dst, staged[r]) << "rank " << r << ": the staging copy comes first, into scratch";
    EXPECT_EQ(first.src, mem[r].data());
    EXPECT_EQ(first.bytes, kBytes);
  }
}

}  // namespace
}  // namespace snccl
