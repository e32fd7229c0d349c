// API surface: version, error strings, argument checking (a bad argument returns
// ncclInvalidArgument with a message and leaves the communicator usable), configs,
// queries, memory, registration, PreMulSum operators, unsupported calls and groups.
// Communicators, splits and host streams are in test_api_comms.cc.
#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>

#include "mp/mp_util.h"

namespace {

using mp::CommSet;
using mp::lastError;
using mp::Mentions;

TEST(Api, VersionIs22809) {
  int v = 0;
  ASSERT_EQ(ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, 22809);
  EXPECT_EQ(v, NCCL_VERSION_CODE);
  EXPECT_EQ(ncclGetVersion(nullptr), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclGetVersion"));
}

TEST(Api, ErrorStringsAreNcclsExactly) {
  const char* expected[] = {
      "no error",
      "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
      "unhandled system error (run with NCCL_DEBUG=INFO for details)",
      "internal error - please report this issue to the NCCL developers",
      "invalid argument (run with NCCL_DEBUG=WARN for details)",
      "invalid usage (run with NCCL_DEBUG=WARN for details)",
      "remote process exited or there was a network error",
      "NCCL operation in progress",
  };
  for (int i = 0; i < 8; ++i) EXPECT_STREQ(ncclGetErrorString(ncclResult_t(i)), expected[i]) << "code " << i;
  for (int bad : {8, 9, 100, -1}) EXPECT_STREQ(ncclGetErrorString(ncclResult_t(bad)), "unknown result code") << bad;
  EXPECT_STREQ(pncclGetErrorString(ncclInvalidUsage), expected[5]);
}

// Checks one call that must fail with ncclInvalidArgument (or `code`) and a message that
// names the call and each of `words`.
#define EXPECT_REJECTED(call, code, name, ...)                                        \
  do {                                                                                \
    ncclResult_t r_ = (call);                                                         \
    EXPECT_EQ(r_, code) << #call;                                                     \
    std::string m_ = lastError();                                                     \
    EXPECT_TRUE(Mentions(m_, name)) << #call;                                         \
    for (const char* w_ : std::initializer_list<const char*>{__VA_ARGS__}) EXPECT_TRUE(Mentions(m_, w_)) << #call; \
  } while (0)

TEST(Api, InvalidArgumentsLeaveTheCommUsable) {
  const int n = 3;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  ncclComm_t c = comms[0];
  std::vector<float> a(64, 1.0f), b(64, 0.0f);
  // Every check runs on this thread only, so ncclGetLastError is ours.
  EXPECT_REJECTED(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclSum, nullptr, nullptr), ncclInvalidArgument,
                  "ncclAllReduce", "comm");
  ncclComm_t bogus = reinterpret_cast<ncclComm_t>(b.data());
  EXPECT_REJECTED(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclSum, bogus, nullptr), ncclInvalidArgument,
                  "ncclAllReduce", "comm");
  EXPECT_REJECTED(ncclAllReduce(a.data(), b.data(), 64, ncclDataType_t(12), ncclSum, c, nullptr),
                  ncclInvalidArgument, "ncclAllReduce", "type", "12");
  EXPECT_REJECTED(ncclAllGather(a.data(), b.data(), 4, ncclDataType_t(-1), c, nullptr), ncclInvalidArgument,
                  "ncclAllGather", "type");
  EXPECT_REJECTED(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclRedOp_t(ncclNumOps), c, nullptr),
                  ncclInvalidArgument, "ncclAllReduce", "op");
  EXPECT_REJECTED(ncclReduceScatter(a.data(), b.data(), 4, ncclFloat, ncclRedOp_t(-3), c, nullptr),
                  ncclInvalidArgument, "ncclReduceScatter", "op");
  EXPECT_REJECTED(ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclRedOp_t(1000), c, nullptr),
                  ncclInvalidArgument, "ncclAllReduce", "1000");
  EXPECT_REJECTED(ncclReduce(a.data(), b.data(), 4, ncclFloat, ncclSum, n, c, nullptr), ncclInvalidArgument,
                  "ncclReduce", "root");
  EXPECT_REJECTED(ncclBroadcast(a.data(), b.data(), 4, ncclFloat, -1, c, nullptr), ncclInvalidArgument,
                  "ncclBroadcast", "root");
  EXPECT_REJECTED(ncclBcast(a.data(), 4, ncclFloat, 7, c, nullptr), ncclInvalidArgument, "ncclBcast", "root");
  EXPECT_REJECTED(ncclGather(a.data(), b.data(), 4, ncclFloat, n, c, nullptr), ncclInvalidArgument, "ncclGather",
                  "root");
  EXPECT_REJECTED(ncclScatter(a.data(), b.data(), 4, ncclFloat, -2, c, nullptr), ncclInvalidArgument, "ncclScatter",
                  "root");
  EXPECT_REJECTED(ncclSend(a.data(), 4, ncclFloat, n, c, nullptr), ncclInvalidArgument, "ncclSend", "peer");
  EXPECT_REJECTED(ncclRecv(b.data(), 4, ncclFloat, -1, c, nullptr), ncclInvalidArgument, "ncclRecv", "peer");
  EXPECT_REJECTED(ncclAllReduce(nullptr, b.data(), 64, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument,
                  "ncclAllReduce", "sendbuff");
  EXPECT_REJECTED(ncclAllReduce(a.data(), nullptr, 64, ncclFloat, ncclSum, c, nullptr), ncclInvalidArgument,
                  "ncclAllReduce", "recvbuff");
  EXPECT_REJECTED(ncclAllGather(a.data(), nullptr, 4, ncclFloat, c, nullptr), ncclInvalidArgument, "ncclAllGather",
                  "recvbuff");
  EXPECT_REJECTED(ncclSend(nullptr, 4, ncclFloat, 1, c, nullptr), ncclInvalidArgument, "ncclSend", "buff");
  EXPECT_REJECTED(ncclCommCount(c, nullptr), ncclInvalidArgument, "ncclCommCount");
  EXPECT_REJECTED(ncclCommUserRank(nullptr, reinterpret_cast<int*>(b.data())), ncclInvalidArgument,
                  "ncclCommUserRank", "comm");
  EXPECT_REJECTED(ncclCommGetAsyncError(c, nullptr), ncclInvalidArgument, "ncclCommGetAsyncError");
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ncclCommGetAsyncError(nullptr, &async), ncclInvalidArgument);

  // A stream that is not an snccl host stream: an error naming the stream, no crash.
  ncclResult_t r = ncclAllReduce(a.data(), b.data(), 64, ncclFloat, ncclSum, c, (cudaStream_t)0x1234);
  EXPECT_NE(r, ncclSuccess);
  EXPECT_TRUE(r == ncclInvalidArgument || r == ncclInvalidUsage) << ncclGetErrorString(r);
  EXPECT_TRUE(Mentions(lastError(), "stream")) << lastError();
  EXPECT_TRUE(Mentions(lastError(), "0x1234")) << lastError();
  EXPECT_EQ(sncclStreamSynchronize((sncclStream_t)0x1234), ncclInvalidArgument);
  EXPECT_EQ(sncclStreamQuery((sncclStream_t)0x1234), ncclInvalidArgument);
  EXPECT_EQ(sncclStreamDestroy((sncclStream_t)0x1234), ncclInvalidArgument);

  // None of that touched the communicators.
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(ncclCommGetAsyncError(comms[i], &async), ncclSuccess);
    EXPECT_EQ(async, ncclSuccess) << "rank " << i;
  }
  mp::parallel(n, [&](int rank) { mp::allreduceCheck(comms[rank], rank + 1, n * (n + 1) / 2); });
}

// A bad argument inside a group is returned at once; the group's other operations still run.
TEST(Api, InvalidArgumentInsideAGroup) {
  const int n = 3;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  mp::parallel(n, [&](int rank) {
    std::vector<int32_t> in(100, rank + 1), out(100, 0);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(in.data(), out.data(), 100, ncclInt32, ncclRedOp_t(77), comms[rank], nullptr),
              ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(in.data(), out.data(), 100, ncclInt32, ncclSum, comms[rank], nullptr), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclSuccess) << lastError();
    for (int v : out) ASSERT_EQ(v, n * (n + 1) / 2);
  });
  mp::parallel(n, [&](int rank) { mp::allreduceCheck(comms[rank], rank, n * (n - 1) / 2); });
}

TEST(Api, Queries) {
  const int devs[3] = {5, 3, 9};
  CommSet comms(3, devs);
  ASSERT_TRUE(comms.ok());
  for (int i = 0; i < 3; ++i) {
    int count = -1, rank = -1, dev = -1;
    EXPECT_EQ(ncclCommCount(comms[i], &count), ncclSuccess);
    EXPECT_EQ(ncclCommUserRank(comms[i], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
    EXPECT_EQ(count, 3);
    EXPECT_EQ(rank, i);
    EXPECT_EQ(dev, devs[i]);
  }
  CommSet plain(2);
  ASSERT_TRUE(plain.ok());
  int dev = -7;
  EXPECT_EQ(ncclCommCuDevice(plain[1], &dev), ncclSuccess);
  EXPECT_EQ(dev, 1) << "ncclCommInitAll with a NULL devlist means devices 0..n-1";
}

// ---- configs ----

ncclResult_t initOneRank(ncclConfig_t* cfg, ncclComm_t* out) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return ncclInternalError;
  return ncclCommInitRankConfig(out, 1, id, 0, cfg);
}

TEST(Api, ConfigWithoutInitializerIsRejected) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.magic = 0;
  ncclComm_t comm = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(initOneRank(&cfg, &comm), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER"));
  EXPECT_EQ(comm, nullptr);
  // The same config passed to ncclCommSplit: rejected, parent intact.
  CommSet comms(1);
  ASSERT_TRUE(comms.ok());
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);
  EXPECT_EQ(ncclCommSplit(comms[0], 0, 0, &child, &cfg), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "NCCL_CONFIG_INITIALIZER"));
  EXPECT_EQ(child, nullptr);
  EXPECT_TRUE(mp::allreduceCheck(comms[0], 4, 4));
}

struct BadConfig {
  const char* field;
  std::function<void(ncclConfig_t&)> set;
};

class ConfigValues : public ::testing::TestWithParam<int> {};

const std::vector<BadConfig>& badConfigs() {
  static const std::vector<BadConfig> v = {
      {"blocking", [](ncclConfig_t& c) { c.blocking = 2; }},
      {"blocking", [](ncclConfig_t& c) { c.blocking = -1; }},
      {"cgaClusterSize", [](ncclConfig_t& c) { c.cgaClusterSize = -1; }},
      {"CTAs", [](ncclConfig_t& c) { c.minCTAs = 0; }},
      {"CTAs", [](ncclConfig_t& c) { c.maxCTAs = -4; }},
      {"CTAs", [](ncclConfig_t& c) { c.minCTAs = 16, c.maxCTAs = 8; }},
      {"splitShare", [](ncclConfig_t& c) { c.splitShare = 2; }},
      {"CTAPolicy", [](ncclConfig_t& c) { c.CTAPolicy = 99; }},
      {"collnetEnable", [](ncclConfig_t& c) { c.collnetEnable = 2; }},
      {"shrinkShare", [](ncclConfig_t& c) { c.shrinkShare = 5; }},
      {"nvlsCTAs", [](ncclConfig_t& c) { c.nvlsCTAs = 0; }},
      {"nChannelsPerNetPeer", [](ncclConfig_t& c) { c.nChannelsPerNetPeer = 0; }},
      {"nvlinkCentricSched", [](ncclConfig_t& c) { c.nvlinkCentricSched = 3; }},
  };
  return v;
}

TEST_P(ConfigValues, InvalidValueIsRejectedWithItsName) {
  const BadConfig& bad = badConfigs()[size_t(GetParam())];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  bad.set(cfg);
  ncclComm_t comm = nullptr;
  ncclResult_t r = initOneRank(&cfg, &comm);
  EXPECT_EQ(r, ncclInvalidArgument) << bad.field;
  if (r == ncclInvalidArgument) {
    EXPECT_TRUE(Mentions(lastError(), "Invalid config")) << bad.field;
    EXPECT_TRUE(Mentions(lastError(), bad.field));
  }
  if (comm != nullptr) ncclCommDestroy(comm);
}
INSTANTIATE_TEST_SUITE_P(All, ConfigValues, ::testing::Range(0, 13));

// UNDEF values mean "default"; valid explicit values are accepted.
TEST(Api, ValidConfigsAreAccepted) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  cfg.minCTAs = 2;
  cfg.maxCTAs = 8;
  cfg.cgaClusterSize = 0;
  cfg.splitShare = 1;
  cfg.commName = "api-test";
  cfg.CTAPolicy = NCCL_CTA_POLICY_EFFICIENCY;
  ncclComm_t comm = nullptr;
  ASSERT_EQ(initOneRank(&cfg, &comm), ncclSuccess) << lastError();
  EXPECT_TRUE(mp::allreduceCheck(comm, 3, 3));
  EXPECT_EQ(ncclCommDestroy(comm), ncclSuccess);
}

// A caller compiled against an older nccl.h passes a shorter struct with an older version:
// only `size` bytes may be read (what follows here is garbage, including a wild pointer
// where commName would be).
TEST(Api, OlderConfigStructIsAccepted) {
  struct Config214 {  // NCCL 2.14: size, magic, version, blocking
    size_t size;
    unsigned magic;
    unsigned version;
    int blocking;
  };
  struct Config217 {  // NCCL 2.17: + cgaClusterSize, minCTAs, maxCTAs, netName
    size_t size;
    unsigned magic;
    unsigned version;
    int blocking, cga, minCTAs, maxCTAs;
    const char* netName;
  };
  alignas(16) unsigned char buf[sizeof(ncclConfig_t) + 64];
  for (int variant = 0; variant < 3; ++variant) {
    std::memset(buf, 0xAB, sizeof buf);
    if (variant < 2) {
      Config214 old{sizeof(Config214), 0xcafebeef, NCCL_VERSION(2, 14, 0), variant};
      std::memcpy(buf, &old, sizeof old);
    } else {
      Config217 old{sizeof(Config217), 0xcafebeef, NCCL_VERSION(2, 17, 1), 1, NCCL_CONFIG_UNDEF_INT, 1, 4, nullptr};
      std::memcpy(buf, &old, sizeof old);
    }
    const int n = 2;
    ncclUniqueId id;
    ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
    std::vector<ncclComm_t> comms(n, nullptr);
    mp::parallel(n, [&](int rank) {
      ncclResult_t r = ncclCommInitRankConfig(&comms[rank], n, id, rank, reinterpret_cast<ncclConfig_t*>(buf));
      EXPECT_TRUE(r == ncclSuccess || (variant == 0 && r == ncclInProgress))
          << "variant " << variant << ": " << ncclGetErrorString(r) << ": " << lastError();
      if (comms[rank] == nullptr) return;
      EXPECT_EQ(mp::settle(r, comms[rank]), ncclSuccess) << lastError();
      mp::allreduceCheck(comms[rank], rank + 1, 3);
    });
    for (ncclComm_t c : comms)
      if (c) {
        EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
      }
  }
}

// ---- memory, registration, custom operators, unsupported calls ----

TEST(Api, MemAllocFree) {
  void* p = nullptr;
  ASSERT_EQ(ncclMemAlloc(&p, 100000), ncclSuccess);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, 100000);
  CommSet comms(2);
  ASSERT_TRUE(comms.ok());
  // Both ranks use ncclMemAlloc'd buffers.
  void* q = nullptr;
  ASSERT_EQ(ncclMemAlloc(&q, 100000), ncclSuccess);
  mp::parallel(2, [&](int rank) {
    auto* buf = static_cast<float*>(rank == 0 ? p : q);
    for (int i = 0; i < 1000; ++i) buf[i] = float(rank + 1);
    ASSERT_EQ(ncclAllReduce(buf, buf, 1000, ncclFloat, ncclSum, comms[rank], nullptr), ncclSuccess) << lastError();
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(buf[i], 3.0f);
  });
  EXPECT_EQ(ncclMemFree(p), ncclSuccess);
  EXPECT_EQ(ncclMemFree(q), ncclSuccess);
  EXPECT_EQ(ncclMemAlloc(nullptr, 16), ncclInvalidArgument);
  void* heap = std::malloc(64);
  EXPECT_EQ(ncclMemFree(heap), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclMemFree"));
  std::free(heap);
  int onStack = 0;
  EXPECT_EQ(ncclMemFree(&onStack), ncclInvalidArgument);
}

// Foreign pointers whose neighbourhood is not mapped must be rejected, not crash: run in a
// child so a crash is reported as such.
TEST(Api, MemFreeOfForeignPageAlignedPointerDoesNotCrash) {
  std::string how;
  int rc = mp::runChild(
      [] {
        long page = sysconf(_SC_PAGESIZE);
        char* two = static_cast<char*>(mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
        munmap(two, page);  // the page before `two + page` is now unmapped
        return ncclMemFree(two + page) == ncclInvalidArgument ? 0 : 1;
      },
      30, &how);
  EXPECT_EQ(rc, 0) << "ncclMemFree(page-aligned pointer not from ncclMemAlloc): " << how;
}

TEST(Api, MemFreeTwiceIsRejected) {
  std::string how;
  int rc = mp::runChild(
      [] {
        void* p = nullptr;
        if (ncclMemAlloc(&p, 4096) != ncclSuccess) return 2;
        if (ncclMemFree(p) != ncclSuccess) return 3;
        return ncclMemFree(p) == ncclInvalidArgument ? 0 : 1;
      },
      30, &how);
  EXPECT_EQ(rc, 0) << "second ncclMemFree of the same pointer: " << how;
}

// Sizes within a page of SIZE_MAX cannot be rounded up to whole pages: ncclMemAlloc must
// fail them rather than return a pointer to a mapping of the wrapped-around size (a
// write through it would crash, so the check runs in a child).
TEST(Api, MemAllocOfSizesNearSizeMaxFails) {
  std::string how;
  int rc = mp::runChild(
      [] {
        const size_t page = size_t(sysconf(_SC_PAGESIZE));
        for (size_t k : {size_t(0), size_t(1), page / 2, page - 1, page, 2 * page, size_t(1) << 20}) {
          void* p = nullptr;
          const size_t size = SIZE_MAX - k;
          if (ncclMemAlloc(&p, size) == ncclSuccess) {
            std::fprintf(stderr, "ncclMemAlloc(SIZE_MAX - %zu) succeeded: %p\n", k, p);
            return 1;
          }
        }
        void* p = nullptr;
        if (ncclMemAlloc(&p, SIZE_MAX / 2 + 1) == ncclSuccess) return 2;
        if (ncclMemAlloc(&p, 4096) != ncclSuccess) return 3;  // still usable
        return ncclMemFree(p) == ncclSuccess ? 0 : 4;
      },
      30, &how);
  EXPECT_EQ(rc, 0) << how;
}

// A registration whose end lies past the address space is refused (the registration
// cache and the net plugins compute buff + size and round it up to pages).
TEST(Api, RegisterOfWrappingRangeFails) {
  std::string how;
  int rc = mp::runChild(
      [] {
        ncclComm_t comm = nullptr;
        if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) return 2;
        std::vector<char> buf(4096);
        void* h = nullptr;
        int bad = 0;
        for (size_t k : {size_t(0), size_t(1), size_t(4095)})
          bad += ncclCommRegister(comm, buf.data(), SIZE_MAX - k, &h) != ncclInvalidArgument;
        bad += ncclCommRegister(comm, buf.data(), SIZE_MAX - reinterpret_cast<uintptr_t>(buf.data()), &h) !=
               ncclInvalidArgument;
        ncclCommDestroy(comm);
        return bad == 0 ? 0 : 1;
      },
      30, &how);
  EXPECT_EQ(rc, 0) << how;
}

TEST(Api, RegisterDeregister) {
  const int n = 2;
  CommSet comms(n), others(1);
  ASSERT_TRUE(comms.ok() && others.ok());
  mp::parallel(n, [&](int rank) {
    std::vector<double> in(5000, rank + 1.0), out(5000);
    void* hin = nullptr;
    void* hout = nullptr;
    ASSERT_EQ(ncclCommRegister(comms[rank], in.data(), in.size() * 8, &hin), ncclSuccess);
    ASSERT_EQ(ncclCommRegister(comms[rank], out.data(), out.size() * 8, &hout), ncclSuccess);
    EXPECT_NE(hin, nullptr);
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), 5000, ncclDouble, ncclSum, comms[rank], nullptr), ncclSuccess);
    for (double v : out) ASSERT_EQ(v, 3.0);
    EXPECT_EQ(ncclCommDeregister(others[0], hin), ncclInvalidArgument) << "handle of another communicator";
    EXPECT_EQ(ncclCommDeregister(comms[rank], hin), ncclSuccess);
    EXPECT_EQ(ncclCommDeregister(comms[rank], hout), ncclSuccess);
    EXPECT_EQ(ncclCommDeregister(comms[rank], nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclCommRegister(comms[rank], in.data(), 8, nullptr), ncclInvalidArgument);
  });
}

TEST(Api, DeregisterTwiceIsRejected) {
  std::string how;
  int rc = mp::runChild(
      [] {
        ncclComm_t comm = nullptr;
        if (ncclCommInitAll(&comm, 1, nullptr) != ncclSuccess) return 2;
        std::vector<char> buf(4096);
        void* h = nullptr;
        if (ncclCommRegister(comm, buf.data(), buf.size(), &h) != ncclSuccess) return 3;
        if (ncclCommDeregister(comm, h) != ncclSuccess) return 4;
        ncclResult_t again = ncclCommDeregister(comm, h);
        int garbage[8] = {};
        ncclResult_t wild = ncclCommDeregister(comm, garbage);
        ncclCommDestroy(comm);
        return again == ncclInvalidArgument && wild == ncclInvalidArgument ? 0 : 1;
      },
      30, &how);
  EXPECT_EQ(rc, 0) << "ncclCommDeregister of a stale or unknown handle: " << how;
}

TEST(Api, PreMulSum) {
  const int n = 3;
  CommSet comms(n), other(1);
  ASSERT_TRUE(comms.ok() && other.ok());
  mp::parallel(n, [&](int rank) {
    ncclComm_t c = comms[rank];
    float half = 0.5f;
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &half, ncclFloat, ncclScalarHostImmediate, c), ncclSuccess);
    half = 100.0f;  // immediate: the value was read at creation
    std::vector<float> in(777, float(2 * (rank + 1))), out(777);
    ASSERT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, op, c, nullptr), ncclSuccess) << lastError();
    for (float v : out) ASSERT_EQ(v, float(n * (n + 1) / 2));
    // Scalar by pointer: read when the operation runs.
    double factor = 1.0;
    ncclRedOp_t dop;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&dop, &factor, ncclDouble, ncclScalarDevice, c), ncclSuccess);
    factor = 3.0;
    std::vector<double> din(50, rank + 1.0), dout(50);
    ASSERT_EQ(ncclAllReduce(din.data(), dout.data(), 50, ncclDouble, dop, c, nullptr), ncclSuccess) << lastError();
    for (double v : dout) ASSERT_EQ(v, 3.0 * n * (n + 1) / 2);
    // Wrong datatype, another communicator's op, destroyed op: rejected, comm still fine.
    EXPECT_EQ(ncclAllReduce(din.data(), dout.data(), 50, ncclDouble, op, c, nullptr), ncclInvalidArgument);
    if (rank == 0) {
      EXPECT_EQ(ncclAllReduce(in.data(), out.data(), 5, ncclFloat, op, other[0], nullptr), ncclInvalidArgument);
    }
    EXPECT_EQ(ncclRedOpDestroy(op, c), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat, op, c, nullptr), ncclInvalidArgument);
    EXPECT_EQ(ncclRedOpDestroy(op, c), ncclInvalidArgument);
    EXPECT_EQ(ncclRedOpDestroy(ncclSum, c), ncclInvalidArgument);
    EXPECT_EQ(ncclRedOpDestroy(dop, c), ncclSuccess);
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, &half, ncclDataType_t(40), ncclScalarHostImmediate, c), ncclInvalidArgument);
    EXPECT_EQ(ncclRedOpCreatePreMulSum(&op, nullptr, ncclFloat, ncclScalarHostImmediate, c), ncclInvalidArgument);
    mp::allreduceCheck(c, rank + 1, n * (n + 1) / 2);
  });
  // The message of a destroyed op names the call.
  float one = 1.0f;
  ncclRedOp_t op;
  ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &one, ncclFloat, ncclScalarHostImmediate, other[0]), ncclSuccess);
  ASSERT_EQ(ncclRedOpDestroy(op, other[0]), ncclSuccess);
  float x = 1.0f, y = 0.0f;
  EXPECT_REJECTED(ncclAllReduce(&x, &y, 1, ncclFloat, op, other[0], nullptr), ncclInvalidArgument, "ncclAllReduce",
                  "operation");
}

TEST(Api, UnsupportedCallsNameThemselves) {
  CommSet comms(1);
  ASSERT_TRUE(comms.ok());
  std::vector<char> buf(1 << 16);
  ncclWindow_t win = nullptr;
  EXPECT_NE(ncclCommWindowRegister(comms[0], buf.data(), buf.size(), &win, NCCL_WIN_COLL_SYMMETRIC), ncclSuccess);
  EXPECT_TRUE(Mentions(lastError(), "ncclCommWindowRegister"));
  EXPECT_NE(ncclCommWindowDeregister(comms[0], win), ncclSuccess);
  EXPECT_TRUE(Mentions(lastError(), "ncclCommWindowDeregister"));
}

// GroupSimulateEnd returns the cost model's estimate, launches nothing and closes the group.
TEST(Api, GroupSimulateEndEstimatesWithoutLaunching) {
  CommSet comms(2);
  ASSERT_TRUE(comms.ok());
  auto simulate = [&](size_t count, std::vector<float>* out, ncclSimInfo_t* sim) {
    std::vector<float> in(count, 2.0f);
    EXPECT_EQ(ncclGroupStart(), ncclSuccess);
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(ncclAllReduce(in.data(), out->data(), count, ncclFloat, ncclSum, comms[r], nullptr), ncclSuccess);
    ncclSimInfo_t init = NCCL_SIM_INFO_INITIALIZER;
    *sim = init;
    return ncclGroupSimulateEnd(sim);
  };
  std::vector<float> small(16, -1.0f), large(1 << 20, -1.0f);
  ncclSimInfo_t simSmall, simLarge;
  ASSERT_EQ(simulate(small.size(), &small, &simSmall), ncclSuccess) << lastError();
  ASSERT_EQ(simulate(large.size(), &large, &simLarge), ncclSuccess) << lastError();
  EXPECT_GT(simSmall.estimatedTime, 0.0f);
  EXPECT_GT(simLarge.estimatedTime, simSmall.estimatedTime) << "4 MiB cannot be predicted faster than 64 B";
  EXPECT_EQ(small[0], -1.0f) << "ncclGroupSimulateEnd must not launch the group";
  EXPECT_EQ(large[0], -1.0f) << "ncclGroupSimulateEnd must not launch the group";
  EXPECT_NE(ncclGroupEnd(), ncclSuccess) << "the group should be closed after ncclGroupSimulateEnd";

  // An uninitialised ncclSimInfo_t is rejected, and the group is dropped all the same.
  ncclSimInfo_t bad{};
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(small.data(), small.data(), 16, ncclFloat, ncclSum, comms[0], nullptr), ncclSuccess);
  EXPECT_EQ(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_TRUE(Mentions(lastError(), "ncclGroupSimulateEnd"));
  EXPECT_EQ(small[0], -1.0f);
  EXPECT_NE(ncclGroupEnd(), ncclSuccess);
}

// ---- groups ----

TEST(Api, GroupEndWithoutStartIsAnError) {
  ncclResult_t r = ncclGroupEnd();
  EXPECT_EQ(r, ncclInvalidUsage);
  EXPECT_TRUE(Mentions(lastError(), "ncclGroupEnd"));
  // And the thread's group state is not corrupted by it.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  EXPECT_EQ(ncclGroupEnd(), ncclSuccess);
}

TEST(Api, NestedGroupsLaunchAtTheOutermostEnd) {
  const int n = 5;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  mp::parallel(n, [&](int rank) {
    ncclComm_t c = comms[rank];
    const int next = (rank + 1) % n, prev = (rank + n - 1) % n;
    std::vector<int32_t> sendv(300, rank * 10), recvv(300, -1), sum(300, -1);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    // Receive before send, on every rank: only a group makes this safe.
    ASSERT_EQ(ncclRecv(recvv.data(), 300, ncclInt32, prev, c, nullptr), ncclSuccess);
    ASSERT_EQ(ncclSend(sendv.data(), 300, ncclInt32, next, c, nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(recvv[0], -1) << "inner ncclGroupEnd must not launch";
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(ncclAllReduce(sendv.data(), sum.data(), 300, ncclInt32, ncclSum, c, nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
    EXPECT_EQ(sum[0], -1) << "inner ncclGroupEnd must not launch";
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << lastError();
    for (int v : recvv) ASSERT_EQ(v, prev * 10);
    for (int v : sum) ASSERT_EQ(v, 10 * n * (n - 1) / 2);
  });
}

// One thread drives several communicators in one group (ranks of a clique per thread).
TEST(Api, GroupOverSeveralCommunicatorsOfOneThread) {
  const int n = 4;
  CommSet comms(n);
  ASSERT_TRUE(comms.ok());
  std::vector<std::vector<float>> bufs(n, std::vector<float>(2000));
  for (int r = 0; r < n; ++r) std::fill(bufs[r].begin(), bufs[r].end(), float(r));
  sntest::Watchdog dog(60, "one thread, four communicators");
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; ++r)
    ASSERT_EQ(ncclAllReduce(bufs[r].data(), bufs[r].data(), 2000, ncclFloat, ncclMax, comms[r], nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess) << lastError();
  for (int r = 0; r < n; ++r)
    for (float v : bufs[r]) ASSERT_EQ(v, float(n - 1));
}

}  // namespace
