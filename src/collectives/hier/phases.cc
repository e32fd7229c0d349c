// The ring phases of the hierarchical AllReduce: see phases.h.
#include "collectives/hier/phases.h"

namespace snccl::sched {

namespace {

size_t mod(long v, size_t m) {
  const long lm = static_cast<long>(m);
  return static_cast<size_t>((v % lm + lm) % lm);
}

}  // namespace

void hierReduceScatter(const std::vector<int>& ring, int pos, const NodeBlocks& blocks, size_t chunk, bool final,
                       std::vector<Step>* steps) {
  const size_t L = ring.size();
  const int next = ring[mod(pos + 1, L)], prev = ring[mod(pos - 1, L)];
  const size_t iters = ceilDiv(blocks.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < L; ++s) {
      const size_t b = mod(pos - static_cast<long>(s), L);
      if (lo >= blocks.size(b)) continue;  // empty chunk: skipped by every rank of this chain
      const size_t c = std::min(chunk, blocks.size(b) - lo), off = blocks.offset(b) + lo;
      const Prim p = s == 0 ? Prim::kSend : s < L - 1 ? Prim::kRecvReduceSend : Prim::kRecvReduceCopy;
      steps->push_back(mkStep(p, prev, next, inRef(off), outRef(off), c, final && s == L - 1));
    }
  }
}

void hierRailAllReduce(const std::vector<int>& ring, int pos, size_t base, size_t size, uint16_t srcBuf,
                       size_t chunk, std::vector<Step>* steps) {
  const size_t N = ring.size();
  const int next = ring[mod(pos + 1, N)], prev = ring[mod(pos - 1, N)];
  const BlockSplit split(size, N);
  const size_t iters = ceilDiv(split.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < 2 * N - 1; ++s) {
      const size_t b = mod(pos - static_cast<long>(s), N);
      if (lo >= split.size(b)) continue;
      const size_t c = std::min(chunk, split.size(b) - lo), off = base + split.offset(b) + lo;
      const Prim p = s == 0           ? Prim::kSend
                     : s < N - 1      ? Prim::kRecvReduceSend
                     : s == N - 1     ? Prim::kRecvReduceCopySend
                     : s < 2 * N - 2  ? Prim::kRecvCopySend
                                      : Prim::kRecv;
      steps->push_back(mkStep(p, prev, next, BufRef{srcBuf, off}, outRef(off), c, s == N - 1));
    }
  }
}

void hierAllGather(const std::vector<int>& ring, int pos, const NodeBlocks& blocks, size_t chunk,
                   std::vector<Step>* steps) {
  const size_t L = ring.size();
  const int next = ring[mod(pos + 1, L)], prev = ring[mod(pos - 1, L)];
  const size_t iters = ceilDiv(blocks.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < L; ++s) {
      const size_t b = mod(pos + 1 - static_cast<long>(s), L);
      if (lo >= blocks.size(b)) continue;
      const size_t c = std::min(chunk, blocks.size(b) - lo), off = blocks.offset(b) + lo;
      const Prim p = s == 0 ? Prim::kSend : s < L - 1 ? Prim::kRecvCopySend : Prim::kRecv;
      steps->push_back(mkStep(p, prev, next, outRef(off), outRef(off), c, false));
    }
  }
}

}  // namespace snccl::sched
