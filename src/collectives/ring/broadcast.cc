// Ring Broadcast: a pipelined chain that starts at the root and follows the ring.
//
// Chain position k = (ring position - root position) mod n. Every chunk (at most
// chunkElems elements, the same split on every rank) travels root -> k=1 -> ... -> k=n-1:
// the root Sends, middle ranks RecvCopySend, the last rank Recvs. Cross-rank invariant:
// position k sends chunk j as its j-th message to k+1, which receives it as its j-th.
// The root copies its input to its output after the sends (skipped in place, where the
// input already is the output). Non-root ranks have no input buffer (NCCL ignores it).
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status ringBroadcast(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kBroadcast));
  RingOrder ring;
  SNCCL_TRY(RingOrder::make(a, plan, &ring));
  std::vector<Step>* lane = beginBroadcast(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const bool rootCopies = a.rank == a.root && !a.inPlace;
  const int n = a.nranks;
  const int k = ((ring.myPos() - ring.rootPos()) % n + n) % n;
  const int next = ring.rankAt(ring.myPos() + 1), prev = ring.rankAt(ring.myPos() - 1);
  const size_t iters = n > 1 ? ceilDiv(a.count, a.chunkElems) : 0;
  steps.reserve(iters + 1);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    const size_t c = std::min(a.chunkElems, a.count - lo);
    if (k == 0) {
      steps.push_back(mkSend(next, inRef(lo), c));
    } else if (k < n - 1) {
      steps.push_back(mkStep(Prim::kRecvCopySend, prev, next, {}, outRef(lo), c, false));
    } else {
      steps.push_back(mkRecv(prev, outRef(lo), c));
    }
  }
  if (rootCopies) steps.push_back(mkCopy(inRef(0), outRef(0), a.count, /*final=*/false));
  return OkStatus();
}

}  // namespace snccl
