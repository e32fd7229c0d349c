// Device memory and CUDA streams beyond the collective grid (test_collectives runs every
// collective on device memory): stream order without blocking the caller, several
// streams on one communicator, send/recv, a failed kernel, buffers of two memory kinds.
// Run on the driver SNCCL_CUDA_DRIVER names (the CPU stand-in in CI, which makes every
// stream operation asynchronous, so a call that ignored stream order reads stale inputs).
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "snccl/snccl.h"
#include "support/cuda_test.h"
#include "support/harness.h"

namespace {

using namespace sntest;

class DeviceStreams : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testCuda().on) GTEST_SKIP() << testCuda().why;
  }
};

// Device memory freed when the rank is done with it.
struct DevBuf {
  CUdeviceptr p = 0;
  explicit DevBuf(size_t bytes) { testCuda().memAlloc(&p, std::max<size_t>(bytes, 1)); }
  ~DevBuf() { testCuda().memFree(p); }
  void* ptr() const { return reinterpret_cast<void*>(p); }
};

// A host function that holds its stream until released.
struct Latch {
  std::atomic<bool> open{false};
  static void wait(void* self) {
    auto* l = static_cast<Latch*>(self);
    while (!l->open.load()) usleep(100);
  }
};

// The stream is held by a latch when the collective is called: the call returns while
// its inputs are not even uploaded (they follow the latch on the stream), the results
// come back behind it, and only the release lets any of it run. Two streams alternate.
bool orderAndNoBlocking(ncclComm_t comm, int rank, int n) {
  const TestCuda& cu = testCuda();
  if (!cu.bindThread()) return false;
  constexpr int kOps = 6;
  constexpr size_t kCount = 4097;
  CUstream s[2] = {nullptr, nullptr};
  if (cu.streamCreate(&s[0], 0) != 0 || cu.streamCreate(&s[1], 0) != 0) return false;
  Latch latch;
  cu.launchHostFunc(s[0], Latch::wait, &latch);
  std::vector<std::vector<int32_t>> in(kOps, std::vector<int32_t>(kCount)), out(kOps, std::vector<int32_t>(kCount));
  std::vector<std::unique_ptr<DevBuf>> bufs;
  bool ok = true;
  for (int k = 0; k < kOps && ok; ++k) {
    for (size_t i = 0; i < kCount; ++i) in[k][i] = int32_t(k * 1000000 + rank * 1000 + int(i % 991));
    bufs.push_back(std::make_unique<DevBuf>(kCount * 4));
    CUstream st = s[k % 2];
    if (k == 1) cu.launchHostFunc(st, Latch::wait, &latch);
    cu.memcpyHtoDAsync(bufs[k]->p, in[k].data(), kCount * 4, st);
    ok = ncclOk(ncclAllReduce(bufs[k]->ptr(), bufs[k]->ptr(), kCount, ncclInt32, ncclSum, comm,
                              reinterpret_cast<cudaStream_t>(st)),
                "ncclAllReduce #" + std::to_string(k), rank);
    cu.memcpyDtoHAsync(out[k].data(), bufs[k]->p, kCount * 4, st);
  }
  // Had a call waited for its stream, this line would never run (the watchdog reports it).
  for (int k = 0; k < kOps; ++k)
    if (out[k][0] != 0) {
      ADD_FAILURE() << "rank " << rank << ": result #" << k << " arrived before its stream was released";
      ok = false;
    }
  latch.open = true;
  ok = cu.streamSynchronize(s[0]) == 0 && cu.streamSynchronize(s[1]) == 0 && ok;
  for (int k = 0; k < kOps && ok; ++k)
    for (size_t i = 0; i < kCount; ++i) {
      int32_t want = int32_t(n * k * 1000000 + n * (n - 1) / 2 * 1000 + n * int(i % 991));
      if (out[k][i] != want) {
        ADD_FAILURE() << "rank " << rank << ": allreduce #" << k << " element " << i << " = " << out[k][i]
                      << ", expected " << want;
        ok = false;
        break;
      }
    }
  cu.streamDestroy(s[0]);
  cu.streamDestroy(s[1]);
  return ok;
}

TEST_F(DeviceStreams, CallsReturnAtOnceAndFollowStreamOrder) { runRanks(Mode::kThreads, 3, orderAndNoBlocking, 120); }

// A ring shift and a send to self in one group, odd counts, on a stream.
bool sendRecvRing(ncclComm_t comm, int rank, int n) {
  const TestCuda& cu = testCuda();
  if (!cu.bindThread()) return false;
  CUstream s = nullptr;
  if (cu.streamCreate(&s, 0) != 0) return false;
  bool ok = true;
  for (size_t count : {size_t(1), size_t(333), size_t(300007)}) {
    std::vector<uint16_t> mine(count), got(count), self(count);
    for (size_t i = 0; i < count; ++i) mine[i] = uint16_t(rank * 7919 + i);
    DevBuf send(count * 2), recv(count * 2), selfRecv(count * 2);
    cu.memcpyHtoDAsync(send.p, mine.data(), count * 2, s);
    auto cs = reinterpret_cast<cudaStream_t>(s);
    ok = ncclOk(ncclGroupStart(), "ncclGroupStart", rank) &&
         ncclOk(ncclSend(send.ptr(), count, ncclFloat16, (rank + 1) % n, comm, cs), "ncclSend", rank) &&
         ncclOk(ncclRecv(recv.ptr(), count, ncclFloat16, (rank + n - 1) % n, comm, cs), "ncclRecv", rank) &&
         ncclOk(ncclSend(send.ptr(), count, ncclFloat16, rank, comm, cs), "ncclSend to self", rank) &&
         ncclOk(ncclRecv(selfRecv.ptr(), count, ncclFloat16, rank, comm, cs), "ncclRecv from self", rank) &&
         ncclOk(ncclGroupEnd(), "ncclGroupEnd", rank) && ok;
    cu.memcpyDtoHAsync(got.data(), recv.p, count * 2, s);
    cu.memcpyDtoHAsync(self.data(), selfRecv.p, count * 2, s);
    ok = cu.streamSynchronize(s) == 0 && ok;
    const int from = (rank + n - 1) % n;
    for (size_t i = 0; i < count && ok; ++i)
      if (got[i] != uint16_t(from * 7919 + i) || self[i] != mine[i]) {
        ADD_FAILURE() << "rank " << rank << " count " << count << ": element " << i << " wrong";
        ok = false;
      }
  }
  cu.streamDestroy(s);
  return ok;
}

TEST_F(DeviceStreams, SendRecvRingAndSelf) { runRanks(Mode::kThreads, 3, sendRecvRing, 120); }

// A kernel that fails fails the call on every rank, the communicator reports it, and the
// user's stream goes on (it is never left waiting for the operation).
bool failedKernel(ncclComm_t comm, int rank, int) {
  const TestCuda& cu = testCuda();
  if (!cu.bindThread()) return false;
  CUstream s = nullptr;
  if (cu.streamCreate(&s, 0) != 0) return false;
  DevBuf buf(4096 * 4);
  bool ok =
      ncclOk(ncclAllReduce(buf.ptr(), buf.ptr(), 4096, ncclFloat32, ncclSum, comm, reinterpret_cast<cudaStream_t>(s)),
             "ncclAllReduce (enqueue)", rank);
  ok = cu.streamSynchronize(s) == 0 && ok;
  ncclResult_t async = ncclSuccess;
  ok = ncclOk(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError", rank) && ok;
  if (async == ncclSuccess) {
    ADD_FAILURE() << "rank " << rank << ": the failed kernel left the communicator without an error";
    ok = false;
  }
  const std::string last = ncclGetLastError(comm);
  if (last.find("cuLaunchKernel") == std::string::npos) {
    ADD_FAILURE() << "rank " << rank << ": the error does not name the failed call: " << last;
    ok = false;
  }
  cu.streamDestroy(s);
  return ok;
}

TEST_F(DeviceStreams, AFailedKernelFailsTheCallAndReleasesTheStream) {
  if (!testCuda().standin) GTEST_SKIP() << "needs the stand-in's launch failures";
  testCuda().standinFailLaunches(1 << 20);
  runRanks(Mode::kThreads, 2, failedKernel, 120);
  testCuda().standinFailLaunches(0);
}

// Processes of one node (shm between them), the legacy default stream (no stream
// argument), and registered device buffers: large enough that host buffers of this size
// would be shared with the peers (ncclCommRegister), which device memory must not be.
bool registeredOnLegacyStream(ncclComm_t comm, int rank, int n) {
  const TestCuda& cu = testCuda();
  if (!cu.bindThread()) return false;
  constexpr size_t kCount = (size_t(16) << 20) / 4 + 5;
  std::vector<float> in(kCount), out(kCount);
  for (size_t i = 0; i < kCount; ++i) in[i] = float(rank + 1) * float(i % 1024);
  DevBuf send(kCount * 4), recv(kCount * 4);
  void* handles[2] = {nullptr, nullptr};
  bool ok = ncclOk(ncclCommRegister(comm, send.ptr(), kCount * 4, &handles[0]), "ncclCommRegister", rank) &&
            ncclOk(ncclCommRegister(comm, recv.ptr(), kCount * 4, &handles[1]), "ncclCommRegister", rank);
  for (int round = 0; round < 2 && ok; ++round) {
    ok = cu.memcpyHtoD(send.p, in.data(), kCount * 4) == 0 &&
         ncclOk(ncclAllReduce(send.ptr(), recv.ptr(), kCount, ncclFloat32, ncclSum, comm, nullptr),
                "ncclAllReduce on the legacy stream", rank) &&
         cu.memcpyDtoH(out.data(), recv.p, kCount * 4) == 0;
    const float sum = float(n * (n + 1) / 2);
    for (size_t i = 0; i < kCount && ok; ++i)
      if (out[i] != sum * float(i % 1024)) {
        ADD_FAILURE() << "rank " << rank << " round " << round << ": element " << i << " = " << out[i];
        ok = false;
      }
  }
  for (void* h : handles)
    if (h != nullptr) ok = ncclOk(ncclCommDeregister(comm, h), "ncclCommDeregister", rank) && ok;
  return ok;
}

// A separate ctest run (test_device_streams_processes), so that the parent has not used
// the driver before it forks.
TEST_F(DeviceStreams, ProcessesRegisteredBuffersOnTheLegacyStream) {
  runRanks(Mode::kProcesses, 3, registeredOnLegacyStream, 120);
}

// Ranks may pass buffers of different kinds to one collective: even ranks device
// memory on a stream, odd ranks host memory from ncclMemAlloc (which peers could map)
// and no stream. Large enough for the single-copy AllReduce, which the device ranks make
// every rank decline.
bool mixedRanks(ncclComm_t comm, int rank, int n) {
  const TestCuda& cu = testCuda();
  if (!cu.bindThread()) return false;
  const bool device = rank % 2 == 0;
  constexpr size_t kCount = (size_t(1) << 20) + 3;
  int64_t* host = nullptr;
  if (!ncclOk(ncclMemAlloc(reinterpret_cast<void**>(&host), kCount * 8), "ncclMemAlloc", rank)) return false;
  for (size_t i = 0; i < kCount; ++i) host[i] = int64_t(rank + 1) * int64_t(i % 4093);
  DevBuf dev(kCount * 8);
  CUstream s = nullptr;
  bool ok = true;
  if (device) ok = cu.streamCreate(&s, 0) == 0 && cu.memcpyHtoDAsync(dev.p, host, kCount * 8, s) == 0;
  for (ncclRedOp_t op : {ncclSum, ncclMax}) {
    void* buf = device ? dev.ptr() : static_cast<void*>(host);
    ok = ok && ncclOk(ncclAllReduce(buf, buf, kCount, ncclInt64, op, comm, reinterpret_cast<cudaStream_t>(s)),
                      "ncclAllReduce", rank);
  }
  if (device) ok = ok && cu.memcpyDtoHAsync(host, dev.p, kCount * 8, s) == 0 && cu.streamSynchronize(s) == 0;
  // Sum, then Max over equal values: n(n+1)/2 * (i % 4093) everywhere.
  for (size_t i = 0; i < kCount && ok; ++i)
    if (host[i] != int64_t(n) * (n + 1) / 2 * int64_t(i % 4093)) {
      ADD_FAILURE() << "rank " << rank << ": element " << i << " = " << host[i];
      ok = false;
    }
  if (s != nullptr) cu.streamDestroy(s);
  ok = ncclOk(ncclMemFree(host), "ncclMemFree", rank) && ok;
  return ok;
}

TEST_F(DeviceStreams, ProcessesOfDifferentMemoryKindsInOneCollective) {
  runRanks(Mode::kProcesses, 3, mixedRanks, 120);
}

// ncclCommAbort returns while the operations it would wait for are queued behind a held
// stream, and the streams go on once released.
TEST_F(DeviceStreams, AbortWhileStreamsAreHeld) {
  const TestCuda& cu = testCuda();
  ASSERT_TRUE(cu.bindThread());
  ncclComm_t comms[2] = {nullptr, nullptr};
  ASSERT_EQ(ncclCommInitAll(comms, 2, nullptr), ncclSuccess);
  CUstream s[2] = {nullptr, nullptr};
  Latch latch;
  DevBuf a(1024 * 4), b(1024 * 4);
  for (CUstream& x : s) {
    ASSERT_EQ(cu.streamCreate(&x, 0), 0);
    cu.launchHostFunc(x, Latch::wait, &latch);
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclAllReduce(a.ptr(), a.ptr(), 1024, ncclFloat32, ncclSum, comms[0], reinterpret_cast<cudaStream_t>(s[0])),
            ncclSuccess);
  ASSERT_EQ(ncclAllReduce(b.ptr(), b.ptr(), 1024, ncclFloat32, ncclSum, comms[1], reinterpret_cast<cudaStream_t>(s[1])),
            ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  {
    Watchdog dog(60, "ncclCommAbort while the streams are held");
    EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
    EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  }
  latch.open = true;
  for (CUstream x : s) {
    EXPECT_EQ(cu.streamSynchronize(x), 0);
    cu.streamDestroy(x);
  }
}

// A call on a stream that is being captured into a CUDA graph is refused (a replay would
// run nothing), and the communicator stays usable.
bool capturedStream(ncclComm_t comm, int rank, int) {
  const TestCuda& cu = testCuda();
  if (!cu.bindThread()) return false;
  CUstream s = nullptr;
  if (cu.streamCreate(&s, 0) != 0) return false;
  DevBuf buf(256 * 4);
  const auto cs = reinterpret_cast<cudaStream_t>(s);
  cu.standinSetCapturing(s, 1);
  ncclResult_t res = ncclAllReduce(buf.ptr(), buf.ptr(), 256, ncclFloat32, ncclSum, comm, cs);
  const std::string err = ncclGetLastError(comm);
  cu.standinSetCapturing(s, 0);
  EXPECT_EQ(res, ncclInvalidUsage);
  EXPECT_NE(err.find("CUDA graph"), std::string::npos) << err;
  bool ok = ncclOk(ncclAllReduce(buf.ptr(), buf.ptr(), 256, ncclFloat32, ncclSum, comm, cs),
                   "ncclAllReduce after the capture", rank) &&
            cu.streamSynchronize(s) == 0;
  cu.streamDestroy(s);
  return ok && res == ncclInvalidUsage;
}

TEST_F(DeviceStreams, ACapturedStreamIsRefused) {
  if (!testCuda().standin) GTEST_SKIP() << "needs the stand-in's capture flag";
  runRanks(Mode::kThreads, 1, capturedStream, 60);
}

// One call's buffers are one memory kind; the error names both.
bool mixedKinds(ncclComm_t comm, int rank, int) {
  if (!testCuda().bindThread()) return false;
  DevBuf dev(64 * 4);
  std::vector<float> host(64);
  ncclResult_t res = ncclAllReduce(host.data(), dev.ptr(), 64, ncclFloat32, ncclSum, comm, nullptr);
  const std::string err = ncclGetLastError(comm);
  EXPECT_EQ(res, ncclInvalidArgument);
  EXPECT_NE(err.find("host memory"), std::string::npos) << err;
  EXPECT_NE(err.find("device memory"), std::string::npos) << err;
  return res == ncclInvalidArgument;
}

TEST_F(DeviceStreams, HostAndDeviceBuffersInOneCallAreRejected) { runRanks(Mode::kThreads, 1, mixedKinds, 60); }

}  // namespace
