// Ring ReduceScatter: each rank's output block is summed along the ring, pipelined.
//
// Block r is in[r*count ..) on every rank and ends at rank r. In iteration j (chunk j of
// every block) the rank at ring position p handles, at step s, the block of rank
// ring[p - 1 - s]:
//   s = 0        Send            its input chunk of that block
//   s = 1..n-2   RecvReduceSend  add its own input chunk and pass on
//   s = n-1      RecvReduceCopy  its own block is complete: final, stored to out
// Cross-rank invariant: position p's s-th message of an iteration is position p+1's
// (s+1)-th step, the same block and chunk. In place (out == in + rank*count) the final
// step reads and writes the same range, and no other step touches the own block.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status ringReduceScatter(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kReduceScatter));
  RingOrder ring;
  SNCCL_TRY(RingOrder::make(a, plan, &ring));
  resetSchedule(out, CollKind::kReduceScatter, /*reduces=*/true);
  const int n = a.nranks;
  out->bufs.push_back({BufRole::kInput, a.count * static_cast<size_t>(n)});
  out->bufs.push_back({BufRole::kOutput, a.count});
  size_t used = 0;
  if (a.count == 0) {
    finishLanes(out, 0);
    return OkStatus();
  }
  std::vector<Step>& steps = out->lanes[addLane(out, &used)].steps;
  finishLanes(out, used);
  if (n == 1) {
    // A final Copy even in place: Avg and PreMulSum must still be applied.
    steps.push_back(mkCopy(inRef(0), outRef(0), a.count, /*final=*/true));
    return OkStatus();
  }
  const int pos = ring.myPos();
  const int next = ring.rankAt(pos + 1), prev = ring.rankAt(pos - 1);
  const size_t iters = ceilDiv(a.count, a.chunkElems);
  steps.reserve(iters * static_cast<size_t>(n));
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    const size_t c = std::min(a.chunkElems, a.count - lo);
    for (int s = 0; s < n; ++s) {
      const size_t owner = static_cast<size_t>(ring.rankAt(pos - 1 - s));
      const BufRef src = inRef(owner * a.count + lo);
      if (s == 0) {
        steps.push_back(mkSend(next, src, c));
      } else if (s < n - 1) {
        steps.push_back(mkStep(Prim::kRecvReduceSend, prev, next, src, {}, c, false));
      } else {
        steps.push_back(mkStep(Prim::kRecvReduceCopy, prev, -1, src, outRef(lo), c, /*final=*/true));
      }
    }
  }
  return OkStatus();
}

}  // namespace snccl
