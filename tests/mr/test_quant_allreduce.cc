// sncclAllReduceQuantized on threads and processes: the error bound against the exact sum, the same
// bits on every rank, error feedback keeping the error summed over many calls bounded (and the same
// run without it, which grows), in and out of place, sum and avg, odd rank counts, zero and
// unaligned counts, host streams, bad arguments that leave the communicator usable, and a dead
// peer.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "snccl/snccl.h"
#include "support/harness.h"

namespace {

using namespace sntest;

// Rank r's input element i at call t: in [-1, 1), different per rank, element and call.
float inputValue(int r, size_t i, int t) {
  uint64_t x = (uint64_t(r) << 48) ^ (uint64_t(t) << 32) ^ i;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return float(double(x >> 40) / double(1ull << 23) - 1.0);
}

uint64_t fnv(const void* p, size_t bytes) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ static_cast<const uint8_t*>(p)[i]) * 1099511628211ull;
  return h;
}

// Every rank passed the same 64-bit value (an AllGather of it, compared locally).
bool sameOnAllRanks(ncclComm_t comm, int rank, int n, uint64_t mine, const std::string& what) {
  std::vector<uint64_t> all(n);
  if (!ncclOk(ncclAllGather(&mine, all.data(), 1, ncclUint64, comm, nullptr), "ncclAllGather", rank)) return false;
  for (int r = 0; r < n; ++r)
    if (all[r] != mine) {
      ADD_FAILURE() << what << ": rank " << rank << " and rank " << r << " got different bits";
      return false;
    }
  return true;
}

// Bound on |result - exact| for one call: every element goes through n quantizations (n-1 hops and
// the owner), each off by at most half a step of its block, and no block of a partial sum of n
// inputs in [-1, 1] holds a magnitude above n (a little more, with the errors of earlier hops).
double oneCallBound(int n, int bits) {
  const double qmax = bits == 8 ? 127 : 7;
  return n * (n * 1.1) / (2 * qmax);
}

struct Params {
  int bits;
  size_t block;
  size_t count;
  bool inPlace;
  bool average;
};

bool checkOneCall(ncclComm_t comm, int rank, int n, const Params& p, cudaStream_t stream = nullptr) {
  std::vector<float> send(p.count + 1), recv(p.count + 1, -7.0f);
  for (size_t i = 0; i < p.count; ++i) send[i] = inputValue(rank, i, 0);
  // +1 element: unaligned buffers (offset by one float) for odd counts.
  float* s = send.data() + (p.count % 2);
  float* d = p.inPlace ? s : recv.data() + (p.count % 2);
  if (p.count % 2) std::memmove(s, send.data(), p.count * sizeof(float));
  const std::string what = "rank " + std::to_string(rank) + " of " + std::to_string(n) + ", int" +
                           std::to_string(p.bits) + " block " + std::to_string(p.block) + " count " +
                           std::to_string(p.count) + (p.inPlace ? " in place" : " out of place") +
                           (p.average ? " avg" : " sum");
  if (!ncclOk(sncclAllReduceQuantized(s, d, p.count, ncclFloat32, p.average ? ncclAvg : ncclSum, p.bits, p.block,
                                      nullptr, comm, stream),
              what, rank))
    return false;
  if (stream != nullptr &&
      !ncclOk(sncclStreamSynchronize(reinterpret_cast<sncclStream_t>(stream)), "sncclStreamSynchronize", rank))
    return false;
  const double bound = oneCallBound(n, p.bits) / (p.average ? n : 1);
  for (size_t i = 0; i < p.count; ++i) {
    double exact = 0;
    for (int r = 0; r < n; ++r) exact += inputValue(r, i, 0);
    if (p.average) exact /= n;
    if (!(std::fabs(d[i] - exact) <= bound)) {
      ADD_FAILURE() << what << ": element " << i << " is " << d[i] << ", exact " << exact << ", bound " << bound;
      return false;
    }
  }
  if (!p.inPlace && p.count > 0 && p.count % 2 == 0 && recv[p.count] != -7.0f) {
    ADD_FAILURE() << what << ": wrote past the end of recvbuff";
    return false;
  }
  return sameOnAllRanks(comm, rank, n, fnv(d, p.count * sizeof(float)), what);
}

class QuantAllReduce : public ::testing::TestWithParam<std::tuple<Mode, int>> {};

TEST_P(QuantAllReduce, BoundedErrorSameBitsEverywhere) {
  const auto [mode, n] = GetParam();
  runRanks(mode, n, [](ncclComm_t comm, int rank, int nranks) {
    for (int bits : {8, 4})
      for (size_t count : {size_t(0), size_t(1), size_t(257), size_t(4099), size_t(100003)})
        for (bool inPlace : {false, true})
          for (bool average : {false, true}) {
            const size_t block = count == 4099 ? 64 : 256;
            if (!checkOneCall(comm, rank, nranks, {bits, block, count, inPlace, average})) return false;
          }
    return true;
  });
}

INSTANTIATE_TEST_SUITE_P(Grid, QuantAllReduce,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::Values(1, 2, 3, 4, 5)),
                         modeRanksName);

// A large call crosses several ring slots per step.
TEST(QuantAllReduceLarge, ThreeProcesses) {
  runRanks(Mode::kProcesses, 3, [](ncclComm_t comm, int rank, int n) {
    return checkOneCall(comm, rank, n, {8, 256, (size_t(1) << 22) + 5, false, false}) &&
           checkOneCall(comm, rank, n, {4, 1024, (size_t(1) << 21) + 3, true, true});
  });
}

TEST(QuantAllReduceStream, HostStream) {
  runRanks(Mode::kThreads, 3, [](ncclComm_t comm, int rank, int n) {
    sncclStream_t st = nullptr;
    if (!ncclOk(sncclStreamCreate(&st), "sncclStreamCreate", rank)) return false;
    bool ok = checkOneCall(comm, rank, n, {8, 256, 70001, false, false}, SNCCL_STREAM(st));
    return ncclOk(sncclStreamDestroy(st), "sncclStreamDestroy", rank) && ok;
  });
}

// The same inputs every call (a constant gradient): without error feedback each call makes the same
// error, so the error summed over calls grows linearly; with it the sum telescopes and stays within
// the last call's residuals (quant_allreduce.h).
double accumulatedError(ncclComm_t comm, int rank, int n, bool feedback, int calls, bool* ok, size_t count = 3001) {
  std::vector<float> send(count), recv(count), residual(count, 0.0f);
  std::vector<double> acc(count, 0.0), exact(count, 0.0);
  for (size_t i = 0; i < count; ++i) {
    send[i] = inputValue(rank, i, 1);
    for (int r = 0; r < n; ++r) exact[i] += inputValue(r, i, 1);
  }
  for (int t = 0; t < calls; ++t) {
    if (!ncclOk(sncclAllReduceQuantized(send.data(), recv.data(), count, ncclFloat32, ncclSum, 4, 128,
                                        feedback ? residual.data() : nullptr, comm, nullptr),
                "sncclAllReduceQuantized", rank)) {
      *ok = false;
      return 0;
    }
    for (size_t i = 0; i < count; ++i) acc[i] += double(recv[i]) - exact[i];
  }
  double worst = 0;
  for (double e : acc) worst = std::max(worst, std::fabs(e));
  return worst;
}

TEST(QuantAllReduceFeedback, AccumulatedErrorStaysBoundedOnlyWithResidual) {
  runRanks(Mode::kProcesses, 3, [](ncclComm_t comm, int rank, int n) {
    const int calls = 300;
    bool ok = true;
    const double with = accumulatedError(comm, rank, n, true, calls, &ok);
    const double without = accumulatedError(comm, rank, n, false, calls, &ok);
    // Telescoped: at most each rank's residual (half a step of a block of a partial sum).
    const double bound = oneCallBound(n, 4);
    EXPECT_LE(with, bound) << "rank " << rank << ": with error feedback, " << calls << " calls";
    EXPECT_GT(without, 10 * bound) << "rank " << rank << ": without error feedback the summed error should grow";
    return ok && with <= bound && without > 10 * bound;
  });
}

TEST(QuantAllReduceArgs, BadArgumentsLeaveTheCommunicatorUsable) {
  runRanks(Mode::kThreads, 2, [](ncclComm_t comm, int rank, int n) {
    std::vector<float> a(1000, 1.0f), b(1000), res(1000);
    struct Bad {
      const char* what;
      ncclResult_t expect;
      ncclResult_t got;
    };
    std::vector<Bad> bad = {
        {"bits 3", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclSum, 3, 256, nullptr, comm, nullptr)},
        {"block 7", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclSum, 8, 7, nullptr, comm, nullptr)},
        {"block 8192", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclSum, 8, 8192, nullptr, comm, nullptr)},
        {"int32", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclInt32, ncclSum, 8, 256, nullptr, comm, nullptr)},
        {"max", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclMax, 8, 256, nullptr, comm, nullptr)},
        {"NULL recvbuff", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), nullptr, 1000, ncclFloat32, ncclSum, 8, 256, nullptr, comm, nullptr)},
        {"residual is recvbuff", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclSum, 8, 256, b.data(), comm, nullptr)},
        {"partial overlap", ncclInvalidArgument,
         sncclAllReduceQuantized(a.data(), a.data() + 1, 999, ncclFloat32, ncclSum, 8, 256, nullptr, comm, nullptr)},
        {"CUDA stream", ncclInvalidUsage,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclSum, 8, 256, nullptr, comm,
                                 reinterpret_cast<cudaStream_t>(&res))},
    };
    ncclGroupStart();
    bad.push_back(
        {"inside a group", ncclInvalidUsage,
         sncclAllReduceQuantized(a.data(), b.data(), 1000, ncclFloat32, ncclSum, 8, 256, nullptr, comm, nullptr)});
    ncclGroupEnd();
    bool ok = true;
    for (const Bad& x : bad)
      if (x.got != x.expect) {
        ADD_FAILURE() << "rank " << rank << ": " << x.what << " returned " << ncclGetErrorString(x.got);
        ok = false;
      }
    // Still usable, for both kinds of AllReduce.
    return ok && checkOneCall(comm, rank, n, {8, 256, 1000, false, false}) &&
           ncclOk(ncclAllReduce(a.data(), b.data(), 1000, ncclFloat32, ncclSum, comm, nullptr), "ncclAllReduce",
                  rank) &&
           b[999] == float(n);
  });
}

// Large calls run in segments that overlap one segment's exchange with the next one's
// quantization (quant_allreduce.cc); every element must still be quantized at the same
// place each call, or the residuals would not telescope.
TEST(QuantAllReduceFeedback, BoundedAcrossSegments) {
  runRanks(Mode::kProcesses, 3, [](ncclComm_t comm, int rank, int n) {
    bool ok = true;
    const double with = accumulatedError(comm, rank, n, true, 20, &ok, size_t(3) * 2 * 262144 + 77);
    EXPECT_LE(with, oneCallBound(n, 4)) << "rank " << rank;
    return ok && with <= oneCallBound(n, 4);
  });
}

// A peer that is gone makes the call fail with an error, not hang.
TEST(QuantAllReduceFaults, DeadPeerEndsInAnError) {
  runRanks(
      Mode::kProcesses, 3,
      [](ncclComm_t comm, int rank, int n) {
        std::vector<float> a(1 << 20, 1.0f);
        if (!ncclOk(sncclAllReduceQuantized(a.data(), a.data(), a.size(), ncclFloat32, ncclSum, 8, 256, nullptr, comm,
                                            nullptr),
                    "first call", rank))
          return false;
        if (rank == 2) _exit(0);  // gone without destroying its communicator
        ncclResult_t res =
            sncclAllReduceQuantized(a.data(), a.data(), a.size(), ncclFloat32, ncclSum, 8, 256, nullptr, comm, nullptr);
        EXPECT_NE(res, ncclSuccess) << "rank " << rank << ": a call with a dead peer succeeded";
        EXPECT_NE(std::string(ncclGetLastError(comm)).find("quantized AllReduce"), std::string::npos)
            << ncclGetLastError(comm);
        // The communicator is broken: abort it (destroy would run the harness's checks on it).
        ncclCommAbort(comm);
        std::fflush(stderr);
        _exit(res != ncclSuccess && !::testing::Test::HasFailure() ? 0 : 1);
        (void)n;
      },
      60);
}

}  // namespace
