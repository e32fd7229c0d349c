// Ring AllGather: every rank's block travels once around the ring, pipelined in chunks.
//
// In iteration j (chunk j of every block, the same split on every rank) the rank at ring
// position p handles, at step s, the block of rank ring[p - s]:
//   s = 0        Send          its own input chunk to the next rank
//   s = 1..n-2   RecvCopySend  store into out[owner*count + ...] and pass on
//   s = n-1      Recv          the block of ring[p + 1] ends its trip here
// Cross-rank invariant: position p's s-th message of an iteration is position p+1's
// (s+1)-th step, the same owner's chunk. The own block is copied into the output after
// the loop; in place (input == out + rank*count) it already is there, so no copy.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status ringAllGather(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllGather));
  RingOrder ring;
  SNCCL_TRY(RingOrder::make(a, plan, &ring));
  resetSchedule(out, CollKind::kAllGather, /*reduces=*/false);
  const int n = a.nranks;
  out->bufs.push_back({BufRole::kInput, a.count});
  out->bufs.push_back({BufRole::kOutput, a.count * static_cast<size_t>(n)});
  size_t used = 0;
  if (a.count == 0 || (n == 1 && a.inPlace)) {
    finishLanes(out, 0);
    return OkStatus();
  }
  std::vector<Step>& steps = out->lanes[addLane(out, &used)].steps;
  finishLanes(out, used);
  const int pos = ring.myPos();
  const int next = ring.rankAt(pos + 1), prev = ring.rankAt(pos - 1);
  const size_t iters = n > 1 ? ceilDiv(a.count, a.chunkElems) : 0;
  steps.reserve(iters * static_cast<size_t>(n) + 1);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    const size_t c = std::min(a.chunkElems, a.count - lo);
    steps.push_back(mkSend(next, inRef(lo), c));
    for (int s = 1; s < n; ++s) {
      const size_t owner = static_cast<size_t>(ring.rankAt(pos - s));
      const BufRef dst = outRef(owner * a.count + lo);
      steps.push_back(s < n - 1 ? mkStep(Prim::kRecvCopySend, prev, next, {}, dst, c, false)
                                : mkRecv(prev, dst, c));
    }
  }
  if (!a.inPlace) {
    steps.push_back(mkCopy(inRef(0), outRef(static_cast<size_t>(a.rank) * a.count), a.count, false));
  }
  return OkStatus();
}

}  // namespace snccl
