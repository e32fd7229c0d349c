// Every collective, checked against values computed independently: AllReduce (sum, max),
// Reduce, Broadcast, AllGather, ReduceScatter, AlltoAll and grouped Send/Recv, with
// zero, tiny, odd and multi-slot counts, in-place and out-of-place, and buffers that
// start off alignment. Exact integer arithmetic everywhere, so any reduction order passes.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "snccl/nccl.h"

namespace nettest {

class Checker {
 public:
  Checker(ncclComm_t comm, int rank, int n) : comm_(comm), rank_(rank), n_(n) {}
  const std::string& error() const { return err_; }

  bool all(const std::vector<size_t>& counts) {
    for (size_t count : counts) {
      for (bool inPlace : {false, true}) {
        if (!allReduceSum(count, inPlace) || !allGather(count, inPlace) || !reduceScatter(count, inPlace) ||
            !broadcast(count, inPlace, n_ - 1))
          return false;
      }
      if (!allReduceMaxUnaligned(count) || !broadcast(count, false, 0) || !reduce(count, 1 % n_) ||
          !alltoall(count) || !sendRecvRing(count) || !allGatherBytesUnaligned(count))
        return false;
    }
    return true;
  }

  bool allReduceSum(size_t count, bool inPlace) {
    std::vector<int32_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = (rank_ + 1) * int32_t(i % 13 + 1);
    int32_t* dst = inPlace ? in.data() : out.data();
    if (!ok(ncclAllReduce(in.data(), dst, count, ncclInt32, ncclSum, comm_, nullptr), "allreduce", count)) return false;
    const int32_t tri = n_ * (n_ + 1) / 2;
    for (size_t i = 0; i < count; ++i)
      if (dst[i] != tri * int32_t(i % 13 + 1)) return bad("allreduce(sum)", count, i, dst[i], tri * int32_t(i % 13 + 1));
    return true;
  }

  // Output one element past an aligned start: the library must not assume alignment.
  bool allReduceMaxUnaligned(size_t count) {
    std::vector<float> in(count + 1), out(count + 1, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i + 1] = float(rank_ * 1000 + int(i % 17));
    if (!ok(ncclAllReduce(in.data() + 1, out.data() + 1, count, ncclFloat32, ncclMax, comm_, nullptr),
            "allreduce(max)", count))
      return false;
    for (size_t i = 0; i < count; ++i) {
      float want = float((n_ - 1) * 1000 + int(i % 17));
      if (out[i + 1] != want) return bad("allreduce(max)", count, i, int64_t(out[i + 1]), int64_t(want));
    }
    return true;
  }

  bool reduce(size_t count, int root) {
    std::vector<int64_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = int64_t(rank_ + 1) * int64_t(i + 1);
    if (!ok(ncclReduce(in.data(), out.data(), count, ncclInt64, ncclSum, root, comm_, nullptr), "reduce", count))
      return false;
    if (rank_ != root) return true;
    for (size_t i = 0; i < count; ++i) {
      int64_t want = int64_t(n_) * (n_ + 1) / 2 * int64_t(i + 1);
      if (out[i] != want) return bad("reduce", count, i, out[i], want);
    }
    return true;
  }

  bool broadcast(size_t count, bool inPlace, int root) {
    std::vector<int32_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = rank_ == root ? int32_t(i * 3 + size_t(root) * 7) : -5;
    int32_t* dst = inPlace ? in.data() : out.data();
    if (!ok(ncclBroadcast(in.data(), dst, count, ncclInt32, root, comm_, nullptr), "broadcast", count)) return false;
    for (size_t i = 0; i < count; ++i)
      if (dst[i] != int32_t(i * 3 + size_t(root) * 7)) return bad("broadcast", count, i, dst[i], int64_t(i * 3 + size_t(root) * 7));
    return true;
  }

  bool allGather(size_t count, bool inPlace) {
    std::vector<int32_t> in(count), out(count * size_t(n_), -1);
    for (size_t i = 0; i < count; ++i) in[i] = rank_ * 100000 + int32_t(i % 99991);
    const int32_t* src = in.data();
    if (inPlace) {
      std::copy(in.begin(), in.end(), out.begin() + long(size_t(rank_) * count));
      src = out.data() + size_t(rank_) * count;
    }
    if (!ok(ncclAllGather(src, out.data(), count, ncclInt32, comm_, nullptr), "allgather", count)) return false;
    for (int r = 0; r < n_; ++r)
      for (size_t i = 0; i < count; ++i) {
        int32_t want = r * 100000 + int32_t(i % 99991);
        if (out[size_t(r) * count + i] != want) return bad("allgather", count, size_t(r) * count + i, out[size_t(r) * count + i], want);
      }
    return true;
  }

  // int8 payload starting at an odd address: bytes must travel verbatim.
  bool allGatherBytesUnaligned(size_t count) {
    std::vector<int8_t> in(count + 1), out(count * size_t(n_) + 1, 0);
    for (size_t i = 0; i < count; ++i) in[i + 1] = int8_t((i * 7 + size_t(rank_) * 31) & 0xff);
    if (!ok(ncclAllGather(in.data() + 1, out.data() + 1, count, ncclInt8, comm_, nullptr), "allgather(int8)", count))
      return false;
    for (int r = 0; r < n_; ++r)
      for (size_t i = 0; i < count; ++i) {
        int8_t want = int8_t((i * 7 + size_t(r) * 31) & 0xff);
        if (out[1 + size_t(r) * count + i] != want) return bad("allgather(int8)", count, size_t(r) * count + i, out[1 + size_t(r) * count + i], want);
      }
    return true;
  }

  bool reduceScatter(size_t count, bool inPlace) {
    std::vector<int32_t> in(count * size_t(n_)), out(count, -1);
    for (size_t j = 0; j < in.size(); ++j) in[j] = (rank_ + 1) * int32_t(j % 11 + 1);
    int32_t* dst = inPlace ? in.data() + size_t(rank_) * count : out.data();
    if (!ok(ncclReduceScatter(in.data(), dst, count, ncclInt32, ncclSum, comm_, nullptr), "reducescatter", count))
      return false;
    const int32_t tri = n_ * (n_ + 1) / 2;
    for (size_t i = 0; i < count; ++i) {
      int32_t want = tri * int32_t((size_t(rank_) * count + i) % 11 + 1);
      if (dst[i] != want) return bad("reducescatter", count, i, dst[i], want);
    }
    return true;
  }

  bool alltoall(size_t count) {
    std::vector<int32_t> in(count * size_t(n_)), out(count * size_t(n_), -1);
    for (int p = 0; p < n_; ++p)
      for (size_t i = 0; i < count; ++i) in[size_t(p) * count + i] = rank_ * 1000000 + p * 1000 + int32_t(i % 1000);
    if (!ok(ncclAlltoAll(in.data(), out.data(), count, ncclInt32, comm_, nullptr), "alltoall", count)) return false;
    for (int p = 0; p < n_; ++p)
      for (size_t i = 0; i < count; ++i) {
        int32_t want = p * 1000000 + rank_ * 1000 + int32_t(i % 1000);
        if (out[size_t(p) * count + i] != want) return bad("alltoall", count, size_t(p) * count + i, out[size_t(p) * count + i], want);
      }
    return true;
  }

  // AlltoAll of `count` elements of `esz` bytes (type dt) per peer, in or out of place;
  // each byte names its sender, receiver and position.
  bool alltoallBytes(size_t count, ncclDataType_t dt, size_t esz, bool inPlace) {
    const size_t block = count * esz;
    std::vector<uint8_t> in(block * size_t(n_)), out(block * size_t(n_), 0xee);
    for (int p = 0; p < n_; ++p)
      for (size_t i = 0; i < block; ++i) in[size_t(p) * block + i] = pattern(rank_, p, i);
    uint8_t* dst = inPlace ? in.data() : out.data();
    if (!ok(ncclAlltoAll(in.data(), dst, count, dt, comm_, nullptr), inPlace ? "alltoall in place" : "alltoall", count))
      return false;
    for (int p = 0; p < n_; ++p)
      for (size_t i = 0; i < block; ++i)
        if (dst[size_t(p) * block + i] != pattern(p, rank_, i))
          return bad("alltoall", count, size_t(p) * block + i, dst[size_t(p) * block + i], pattern(p, rank_, i));
    return true;
  }

  // Gather of `count` elements of `esz` bytes to `root`, in place (the root's input at its
  // own block of the output) or not.
  bool gatherBytes(size_t count, ncclDataType_t dt, size_t esz, int root, bool inPlace) {
    const size_t block = count * esz;
    std::vector<uint8_t> in(block), out(block * size_t(n_), 0xee);
    uint8_t* src = inPlace && rank_ == root ? out.data() + size_t(root) * block : in.data();
    for (size_t i = 0; i < block; ++i) src[i] = pattern(rank_, root, i);
    if (!ok(ncclGather(src, out.data(), count, dt, root, comm_, nullptr), inPlace ? "gather in place" : "gather", count))
      return false;
    if (rank_ != root) return true;
    for (int p = 0; p < n_; ++p)
      for (size_t i = 0; i < block; ++i)
        if (out[size_t(p) * block + i] != pattern(p, root, i))
          return bad("gather", count, size_t(p) * block + i, out[size_t(p) * block + i], pattern(p, root, i));
    return true;
  }

  // Every rank sends to rank+1 and receives from rank-1 in one group.
  bool sendRecvRing(size_t count) {
    int next = (rank_ + 1) % n_, prev = (rank_ + n_ - 1) % n_;
    std::vector<int32_t> in(count), out(count, -1);
    for (size_t i = 0; i < count; ++i) in[i] = rank_ * 7919 + int32_t(i);
    ncclResult_t res = ncclGroupStart();
    if (res == ncclSuccess) res = ncclSend(in.data(), count, ncclInt32, next, comm_, nullptr);
    if (res == ncclSuccess) res = ncclRecv(out.data(), count, ncclInt32, prev, comm_, nullptr);
    ncclResult_t end = ncclGroupEnd();
    if (!ok(res != ncclSuccess ? res : end, "send/recv", count)) return false;
    for (size_t i = 0; i < count; ++i)
      if (out[i] != prev * 7919 + int32_t(i)) return bad("send/recv", count, i, out[i], prev * 7919 + int32_t(i));
    return true;
  }

 private:
  static uint8_t pattern(int from, int to, size_t i) { return uint8_t(from * 37 + to * 11 + i * 7 + i / 251); }
  bool ok(ncclResult_t res, const char* what, size_t count) {
    if (res == ncclSuccess) return true;
    err_ = std::string(what) + " of " + std::to_string(count) + " elements: " + ncclGetErrorString(res) + ": " +
           ncclGetLastError(nullptr);
    return false;
  }
  bool bad(const char* what, size_t count, size_t i, int64_t got, int64_t want) {
    err_ = std::string(what) + " of " + std::to_string(count) + " elements: element " + std::to_string(i) + " is " +
           std::to_string(got) + ", expected " + std::to_string(want);
    return false;
  }

  ncclComm_t comm_;
  int rank_;
  int n_;
  std::string err_;
};

}  // namespace nettest
