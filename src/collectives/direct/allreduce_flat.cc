// Flat AllReduce (the "flat" algorithm): every rank sends its whole input to every other
// rank, then folds the n inputs in rank order, x0 (+) x1 (+) ... (+) x(n-1). One message
// latency for any n, at the price of n-1 copies of the data leaving every rank: for tiny
// messages, and above all for a node with more ranks than CPUs. There each rank must be
// scheduled once per dependent message it waits for; recursive doubling waits log2(n)
// times and the direct reduce-scatter + all-gather twice, this once.
//
// Same bits on every rank: every rank forms acc(k) = acc(k-1) (+) x(k) for k = 1..n-1 in
// this order, and each step combines exactly two operands, which every NCCL op does
// commutatively in IEEE arithmetic (direct/allreduce_pair.cc). A received x(k) is folded
// straight from the connection (RecvReduceCopy); the rank's own x(r) meets the
// accumulator locally (LocalReduce), the one place where both operands are the rank's own.
//
// Cross-rank invariants: per chunk of at most chunkElems elements, every rank sends that
// chunk of its input to every other rank (nearest first) before it receives anything of
// the chunk, and receives it from ranks 0, 1, ..., n-1 in order; each connection a -> b
// carries one message per chunk, chunk by chunk, with the same count at both ends.
// In place: the input is read by the sends and, for rank 0, by the first copy before
// the accumulator overwrites it; any other rank stages its own chunk in scratch first.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status flatAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  const int n = a.nranks, r = a.rank;
  const bool stage = a.inPlace && r != 0;
  if (stage) out->bufs.push_back({BufRole::kScratch, std::min(a.chunkElems, a.count)});
  lane->reserve(ceilDiv(a.count, a.chunkElems) * static_cast<size_t>(2 * n + 1));
  for (size_t lo = 0; lo < a.count; lo += a.chunkElems) {
    const size_t c = std::min(a.chunkElems, a.count - lo);
    for (int d = 1; d < n; ++d) lane->push_back(mkSend((r + d) % n, inRef(lo), c));
    if (stage) lane->push_back(mkCopy(inRef(lo), BufRef{kScratchBuf, 0}, c, /*final=*/false));
    const BufRef own = stage ? BufRef{kScratchBuf, 0} : inRef(lo);
    lane->push_back(r == 0 ? mkCopy(own, outRef(lo), c, /*final=*/false) : mkRecv(0, outRef(lo), c));
    for (int k = 1; k < n; ++k) {
      const bool last = k == n - 1;
      lane->push_back(k == r ? mkStep(Prim::kLocalReduce, -1, -1, own, outRef(lo), c, last)
                             : mkStep(Prim::kRecvReduceCopy, k, -1, outRef(lo), outRef(lo), c, last));
    }
  }
  return OkStatus();
}

}  // namespace snccl
