// Direct AllReduce for two ranks: each sends its whole input to the other and combines
// the received data with its own input. One message latency instead of the ring's two,
// which is what small messages pay for.
//
// Both ranks compute recv (+) own: for the two operands x0 and x1 rank 0 forms x1 + x0 and
// rank 1 forms x0 + x1. Every NCCL op (sum, prod, max, min, and the PreMulSum/Avg forms)
// is commutative in IEEE arithmetic for two operands, so both ranks end with the same
// bits. With three or more ranks the orders would differ (non-associativity), so the
// generator refuses them; direct/allreduce.cc runs a direct reduce-scatter + all-gather
// there instead and calls this for 1 or 2 ranks.
//
// Cross-rank invariant: message k of either rank is chunk k of its input; the lane sends
// chunk k before it overwrites it (in place) with the combined result.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status directAllReducePair(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  if (a.nranks > 2) return InvalidUsage("the direct AllReduce handles 1 or 2 ranks, not %d", a.nranks);
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const int peer = 1 - a.rank;
  steps.reserve(2 * ceilDiv(a.count, a.chunkElems));
  for (size_t lo = 0; lo < a.count; lo += a.chunkElems) {
    const size_t c = std::min(a.chunkElems, a.count - lo);
    steps.push_back(mkSend(peer, inRef(lo), c));
    steps.push_back(mkStep(Prim::kRecvReduceCopy, peer, -1, inRef(lo), outRef(lo), c, /*final=*/true));
  }
  return OkStatus();
}

}  // namespace snccl
