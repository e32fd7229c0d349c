// Rank bodies that run collectives on the memory torch and MPI programs pass, buffers from
// malloc rather than ncclMemAlloc; shared by tests/mp (shared memory and threads) and
// tests/net (a plugin that needs registered memory). Each returns whether every call
// succeeded and every output element was right, naming the first failure on stderr.
//
// reallocBody: every collective, and send/recv, on fresh malloc'd buffers each call, freed
// right after it. glibc hands a freed chunk of the same size to the next malloc, so later
// calls get the same addresses with other contents and, in odd rounds, a new
// ncclCommRegister; the first 280 KB buffers are mappings of their own, unmapped on free,
// after which glibc raises its mmap threshold and serves that size from the heap. Anything
// keyed by address alone (a registration cache, a peer's mapping) would hand a later call
// stale memory.
//
// forkBody: after ncclCommRegister of malloc'd buffers the rank forks a child that never
// calls snccl and exits later; the parent runs AllReduces while the child lives (its pages
// are copy-on-write shared with the child) and after it has exited.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>

#include "mp/mp_util.h"

namespace userbuf {

enum class Coll { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kGather, kScatter,
                  kSendRecv, kAllReduceInPlace };
inline constexpr Coll kColls[] = {Coll::kAllReduce, Coll::kBroadcast, Coll::kReduce, Coll::kAllGather,
                                  Coll::kReduceScatter, Coll::kAlltoAll, Coll::kGather, Coll::kScatter,
                                  Coll::kSendRecv, Coll::kAllReduceInPlace};
inline const char* collName(Coll c) {
  static const char* kNames[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                                 "alltoall", "gather", "scatter", "sendrecv", "allreduce in place"};
  return kNames[int(c)];
}

inline bool fail(int rank, const std::string& what) {
  std::fprintf(stderr, "rank %d: %s\n", rank, what.c_str());
  return false;
}

// Element i of rank r's send buffer in call k: small, so that sums are exact.
inline int32_t val(int r, size_t i, int k) { return int32_t((size_t(r) * 131 + i * 7 + size_t(k) * 3) % 1000); }

// One call of `coll` with `count` elements per block on buffers malloc'd for it alone,
// optionally registered, every output element checked, then deregistered and freed.
inline bool oneCall(ncclComm_t comm, int rank, int n, Coll coll, size_t count, int k, bool reg) {
  const int root = k % n;
  // The values differ from call to call, also between collectives of one round, so that
  // data from an earlier call's buffer at the same address (a stale registration) shows.
  const int salt = k * int(std::size(kColls)) + int(coll);
  const size_t nc = size_t(n) * count;
  size_t sendElems = count, recvElems = count;
  if (coll == Coll::kReduceScatter || coll == Coll::kAlltoAll || coll == Coll::kScatter) sendElems = nc;
  if (coll == Coll::kAllGather || coll == Coll::kAlltoAll || coll == Coll::kGather) recvElems = nc;
  const bool inPlace = coll == Coll::kAllReduceInPlace;
  auto* send = static_cast<int32_t*>(std::malloc(sendElems * 4));
  auto* recv = inPlace ? send : static_cast<int32_t*>(std::malloc(recvElems * 4));
  if (send == nullptr || recv == nullptr) return fail(rank, "malloc failed");
  for (size_t i = 0; i < sendElems; ++i) send[i] = val(rank, i, salt);
  if (!inPlace) std::fill(recv, recv + recvElems, -1);
  void* handles[2] = {nullptr, nullptr};
  const std::string what = std::string(collName(coll)) + ", count " + std::to_string(count) + ", round " +
                           std::to_string(k) + (reg ? ", registered" : "");
  bool ok = true;
  if (reg) {
    ok = ncclCommRegister(comm, send, sendElems * 4, &handles[0]) == ncclSuccess &&
         (inPlace || ncclCommRegister(comm, recv, recvElems * 4, &handles[1]) == ncclSuccess);
    if (!ok) fail(rank, what + ": ncclCommRegister: " + mp::lastError());
  }
  ncclResult_t res = ncclSuccess;
  if (ok) {
    switch (coll) {
      case Coll::kAllReduce:
      case Coll::kAllReduceInPlace:
        res = ncclAllReduce(send, recv, count, ncclInt32, ncclSum, comm, nullptr);
        break;
      case Coll::kBroadcast: res = ncclBroadcast(send, recv, count, ncclInt32, root, comm, nullptr); break;
      case Coll::kReduce: res = ncclReduce(send, recv, count, ncclInt32, ncclSum, root, comm, nullptr); break;
      case Coll::kAllGather: res = ncclAllGather(send, recv, count, ncclInt32, comm, nullptr); break;
      case Coll::kReduceScatter: res = ncclReduceScatter(send, recv, count, ncclInt32, ncclSum, comm, nullptr); break;
      case Coll::kAlltoAll: res = ncclAlltoAll(send, recv, count, ncclInt32, comm, nullptr); break;
      case Coll::kGather: res = ncclGather(send, recv, count, ncclInt32, root, comm, nullptr); break;
      case Coll::kScatter: res = ncclScatter(send, recv, count, ncclInt32, root, comm, nullptr); break;
      case Coll::kSendRecv:
        res = ncclGroupStart();
        if (res == ncclSuccess) res = ncclSend(send, count, ncclInt32, (rank + 1) % n, comm, nullptr);
        if (res == ncclSuccess) res = ncclRecv(recv, count, ncclInt32, (rank + n - 1) % n, comm, nullptr);
        if (ncclResult_t end = ncclGroupEnd(); res == ncclSuccess) res = end;
        break;
    }
    if (res != ncclSuccess) ok = fail(rank, what + ": " + ncclGetErrorString(res) + ": " + mp::lastError());
  }
  // The expected value of recv[i] on this rank; false where this rank has no output.
  auto expected = [&](size_t i, int32_t* want) {
    auto sum = [&](size_t j) {
      int32_t s = 0;
      for (int r = 0; r < n; ++r) s += val(r, j, salt);
      return s;
    };
    switch (coll) {
      case Coll::kAllReduce:
      case Coll::kAllReduceInPlace: *want = sum(i); return true;
      case Coll::kBroadcast:
        *want = val(root, i, salt);
        return true;
      case Coll::kReduce: *want = sum(i); return rank == root;
      case Coll::kAllGather:
        *want = val(int(i / count), i % count, salt);
        return true;
      case Coll::kReduceScatter: *want = sum(size_t(rank) * count + i); return true;
      case Coll::kAlltoAll:
        *want = val(int(i / count), size_t(rank) * count + i % count, salt);
        return true;
      case Coll::kGather:
        *want = val(int(i / count), i % count, salt);
        return rank == root;
      case Coll::kScatter:
        *want = val(root, size_t(rank) * count + i, salt);
        return true;
      case Coll::kSendRecv:
        *want = val((rank + n - 1) % n, i, salt);
        return true;
    }
    return false;
  };
  for (size_t i = 0; ok && i < recvElems; ++i) {
    int32_t want = 0;
    if (expected(i, &want) && recv[i] != want)
      ok = fail(rank, what + ": element " + std::to_string(i) + " is " + std::to_string(recv[i]) + ", expected " +
                          std::to_string(want));
  }
  for (void* h : handles)
    if (h != nullptr && ncclCommDeregister(comm, h) != ncclSuccess)
      ok = fail(rank, what + ": ncclCommDeregister: " + mp::lastError());
  // The caller owns the memory again; scribbling on it catches a peer still using it.
  std::fill(send, send + sendElems, 0x7f7f7f7f);
  if (!inPlace) std::fill(recv, recv + recvElems, 0x7f7f7f7f);
  if (!inPlace) std::free(recv);
  std::free(send);
  return ok;
}

inline bool reallocBody(ncclComm_t comm, int rank, int n) {
  // 1031 elements (4 KB) come from the heap; 70001 (280 KB) from a mapping at first.
  for (int k = 0; k < 4; ++k)
    for (Coll coll : kColls)
      if (!oneCall(comm, rank, n, coll, k % 2 == 0 ? 1031 : 70001, k, k % 2 == 1)) return false;
  return true;
}

inline bool forkBody(ncclComm_t comm, int rank, int n) {
  constexpr size_t kCount = 70001;
  auto* in = static_cast<int32_t*>(std::malloc(kCount * 4));
  auto* out = static_cast<int32_t*>(std::malloc(kCount * 4));
  auto* release = mp::sharedBlock<std::atomic<int>>();
  if (in == nullptr || out == nullptr || release == nullptr) return fail(rank, "allocation failed");
  void* h[2] = {nullptr, nullptr};
  if (ncclCommRegister(comm, in, kCount * 4, &h[0]) != ncclSuccess ||
      ncclCommRegister(comm, out, kCount * 4, &h[1]) != ncclSuccess)
    return fail(rank, "ncclCommRegister: " + mp::lastError());
  auto round = [&](int k, const char* when) {
    for (size_t i = 0; i < kCount; ++i) in[i] = val(rank, i, k);
    std::fill(out, out + kCount, -1);
    int32_t* dst = k % 2 == 1 ? in : out;  // odd rounds in place
    if (ncclAllReduce(in, dst, kCount, ncclInt32, ncclSum, comm, nullptr) != ncclSuccess)
      return fail(rank, std::string("allreduce ") + when + ": " + mp::lastError());
    for (size_t i = 0; i < kCount; ++i) {
      int32_t want = 0;
      for (int r = 0; r < n; ++r) want += val(r, i, k);
      if (dst[i] != want)
        return fail(rank, std::string("allreduce ") + when + ", round " + std::to_string(k) + ": element " +
                              std::to_string(i) + " is " + std::to_string(dst[i]) + ", expected " +
                              std::to_string(want));
    }
    return true;
  };
  bool ok = round(0, "before the fork");
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t child = ok ? fork() : -1;
  if (child == 0) {
    // Only what is safe in the child of a threaded process: no allocation, no snccl call.
    for (int waited = 0; release->load() == 0 && waited < 60000; ++waited) usleep(1000);
    _exit(0);
  }
  if (ok && child < 0) ok = fail(rank, "fork failed");
  for (int k = 1; ok && k <= 6; ++k) ok = round(k, "while the child lives");
  release->store(1);
  if (child > 0) {
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      ok = fail(rank, "the child did not exit cleanly");
  }
  for (int k = 7; ok && k <= 12; ++k) ok = round(k, "after the child exited");
  for (void* x : h)
    if (ncclCommDeregister(comm, x) != ncclSuccess) ok = fail(rank, "ncclCommDeregister: " + mp::lastError());
  std::free(in);
  std::free(out);
  mp::freeShared(release);
  return ok;
}

}  // namespace userbuf
