// The ring phases of the hierarchical AllReduce: see phases.h.
#include "collectives/hier/phases.h"

namespace snccl::sched {

namespace {

size_t mod(long v, size_t m) {
  const long lm = static_cast<long>(m);
  return static_cast<size_t>((v % lm + lm) % lm);
}

// The loop all three phases share: per chunk index, `nsteps` steps around a ring of L
// blocks, step s on block (pos + shift - s) mod L; emit(s, count, offset)
// makes the step. A chunk past the end of its block is skipped by every rank of the chain
// alike (each computes the same block sizes), so the messages still pair up.
template <class Blocks, class Emit>
void ringPhase(size_t L, int pos, long shift, size_t nsteps, const Blocks& blocks, size_t chunk, Emit emit) {
  const size_t iters = ceilDiv(blocks.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < nsteps; ++s) {
      const size_t b = mod(pos + shift - static_cast<long>(s), L);
      if (lo >= blocks.size(b)) continue;
      emit(s, std::min(chunk, blocks.size(b) - lo), blocks.offset(b) + lo);
    }
  }
}

}  // namespace

void hierReduceScatter(const std::vector<int>& ring, int pos, const NodeBlocks& blocks, size_t chunk, bool final,
                       std::vector<Step>* steps) {
  const size_t L = ring.size();
  const int next = ring[mod(pos + 1, L)], prev = ring[mod(pos - 1, L)];
  ringPhase(L, pos, 0, L, blocks, chunk, [&](size_t s, size_t c, size_t off) {
    const Prim p = s == 0 ? Prim::kSend : s < L - 1 ? Prim::kRecvReduceSend : Prim::kRecvReduceCopy;
    steps->push_back(mkStep(p, prev, next, inRef(off), outRef(off), c, final && s == L - 1));
  });
}

void hierRailAllReduce(const std::vector<int>& ring, int pos, size_t base, size_t size, uint16_t srcBuf,
                       size_t chunk, std::vector<Step>* steps) {
  const size_t N = ring.size();
  const int next = ring[mod(pos + 1, N)], prev = ring[mod(pos - 1, N)];
  ringPhase(N, pos, 0, 2 * N - 1, BlockSplit(size, N), chunk, [&](size_t s, size_t c, size_t off) {
    const Prim p = s == 0           ? Prim::kSend
                   : s < N - 1      ? Prim::kRecvReduceSend
                   : s == N - 1     ? Prim::kRecvReduceCopySend
                   : s < 2 * N - 2  ? Prim::kRecvCopySend
                                    : Prim::kRecv;
    steps->push_back(mkStep(p, prev, next, BufRef{srcBuf, base + off}, outRef(base + off), c, s == N - 1));
  });
}

void hierAllGather(const std::vector<int>& ring, int pos, const NodeBlocks& blocks, size_t chunk,
                   std::vector<Step>* steps) {
  const size_t L = ring.size();
  const int next = ring[mod(pos + 1, L)], prev = ring[mod(pos - 1, L)];
  ringPhase(L, pos, 1, L, blocks, chunk, [&](size_t s, size_t c, size_t off) {
    const Prim p = s == 0 ? Prim::kSend : s < L - 1 ? Prim::kRecvCopySend : Prim::kRecv;
    steps->push_back(mkStep(p, prev, next, outRef(off), outRef(off), c, false));
  });
}

}  // namespace snccl::sched
