// Ring Reduce: a pipelined chain that follows the ring and ends at the root.
//
// Chain position k = (ring position - root position - 1) mod n, so k = 0 is the rank
// after the root and k = n-1 is the root. Every chunk travels k=0 -> ... -> root: the
// first rank Sends its input, middle ranks RecvReduceSend (adding their input), the root
// RecvReduceCopy's into its output and marks it final (the only final step per element).
// Cross-rank invariant: position k's j-th message to k+1 is chunk j, received as its j-th.
// In place (root input == output) the root reads and writes the same range in one step.
// Only the root has an output buffer (NCCL ignores recvbuff elsewhere).
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status ringReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kReduce));
  RingOrder ring;
  SNCCL_TRY(RingOrder::make(a, plan, &ring));
  std::vector<Step>* lane = beginReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const int n = a.nranks;
  if (n == 1) {
    // A final Copy even in place: Avg and PreMulSum must still be applied.
    steps.push_back(mkCopy(inRef(0), outRef(0), a.count, /*final=*/true));
    return OkStatus();
  }
  const int k = ((ring.myPos() - ring.rootPos() - 1) % n + n) % n;
  const int next = ring.rankAt(ring.myPos() + 1), prev = ring.rankAt(ring.myPos() - 1);
  const size_t iters = ceilDiv(a.count, a.chunkElems);
  steps.reserve(iters);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    const size_t c = std::min(a.chunkElems, a.count - lo);
    if (k == 0) {
      steps.push_back(mkSend(next, inRef(lo), c));
    } else if (k < n - 1) {
      steps.push_back(mkStep(Prim::kRecvReduceSend, prev, next, inRef(lo), {}, c, false));
    } else {
      steps.push_back(mkStep(Prim::kRecvReduceCopy, prev, -1, inRef(lo), outRef(lo), c, /*final=*/true));
    }
  }
  return OkStatus();
}

}  // namespace snccl
