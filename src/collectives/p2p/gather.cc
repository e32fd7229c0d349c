// Gather over point-to-point: every rank sends its input to the root, which receives
// rank p's block into out[p*count ..) on a lane of its own per peer.
//
// Cross-rank invariant: sender and root chunk the block the same way (appendChunked with
// the same count). Only the root has an output buffer (NCCL ignores recvbuff elsewhere).
// In place (root's input == out + root*count) the root's own block is already in place.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status p2pGather(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kGather));
  resetSchedule(out, CollKind::kGather, /*reduces=*/false);
  const int n = a.nranks, root = a.root;
  const bool isRoot = a.rank == root;
  out->bufs.push_back({BufRole::kInput, a.count});
  out->bufs.push_back({BufRole::kOutput, isRoot ? a.count * static_cast<size_t>(n) : 0});
  size_t used = 0;
  if (a.count == 0) {
    finishLanes(out, 0);
    return OkStatus();
  }
  const size_t chunks = ceilDiv(a.count, a.chunkElems);
  if (!isRoot) {
    std::vector<Step>* steps = &out->lanes[addLane(out, &used)].steps;
    steps->reserve(chunks);
    appendChunked(steps, true, root, inRef(0), a.count, a.chunkElems);
    finishLanes(out, used);
    return OkStatus();
  }
  out->lanes.reserve(static_cast<size_t>(n));
  for (int i = 1; i < n; ++i) {
    const int from = (root + i) % n;
    std::vector<Step>* steps = &out->lanes[addLane(out, &used)].steps;
    steps->reserve(chunks);
    appendChunked(steps, false, from, outRef(static_cast<size_t>(from) * a.count), a.count, a.chunkElems);
  }
  if (!a.inPlace) {
    out->lanes[addLane(out, &used)].steps.push_back(
        mkCopy(inRef(0), outRef(static_cast<size_t>(root) * a.count), a.count, false));
  }
  finishLanes(out, used);
  return OkStatus();
}

}  // namespace snccl
