// Ring AllReduce: reduce-scatter then all-gather around the ring, pipelined in chunks.
//
// The data is split into nranks blocks (BlockSplit); iteration j of the pipeline moves
// chunk j (at most chunkElems elements) of every block. In one iteration the rank at ring
// position p handles block (p - s) mod n at step s:
//   s = 0          Send               own input chunk to the next rank
//   s = 1..n-2     RecvReduceSend     partial sums travel on
//   s = n-1        RecvReduceCopySend block (p+1) mod n is complete here: final, stored, sent on
//   s = n..2n-3    RecvCopySend       finished chunks travel on
//   s = 2n-2       Recv               last finished chunk
// Cross-rank invariant: what position p sends at step s, position p+1 receives at step
// s+1 (same block, same chunk, so the same count). A chunk that is empty in a block is
// skipped by every rank alike, so the message sequences on each connection still match.
// In-place safety: a rank reads its input chunk of a block (steps 0..n-1) before it writes
// that output chunk (steps n-1..2n-2; step n-1 reads and writes the same range).
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

namespace {

Prim allReducePrim(int s, int n) {
  if (s == 0) return Prim::kSend;
  if (s < n - 1) return Prim::kRecvReduceSend;
  if (s == n - 1) return Prim::kRecvReduceCopySend;
  if (s < 2 * n - 2) return Prim::kRecvCopySend;
  return Prim::kRecv;
}

}  // namespace

Status ringAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  RingOrder ring;
  SNCCL_TRY(RingOrder::make(a, plan, &ring));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const int n = a.nranks;
  const int pos = ring.myPos();
  const int next = ring.rankAt(pos + 1), prev = ring.rankAt(pos - 1);
  const BlockSplit split(a.count, static_cast<size_t>(n));
  const size_t iters = ceilDiv(split.maxSize(), a.chunkElems);
  steps.reserve(iters * static_cast<size_t>(2 * n - 1));
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    for (int s = 0; s < 2 * n - 1; ++s) {
      const size_t b = static_cast<size_t>(((pos - s) % n + n) % n);
      const size_t size = split.size(b);
      if (lo >= size) continue;  // empty chunk: skipped on every rank of this chain
      const size_t c = std::min(a.chunkElems, size - lo);
      const size_t off = split.offset(b) + lo;
      const Prim p = allReducePrim(s, n);  // mkStep drops the peer/ref p does not use
      steps.push_back(mkStep(p, prev, next, inRef(off), outRef(off), c, /*final=*/s == n - 1));
    }
  }
  return OkStatus();
}

}  // namespace snccl
