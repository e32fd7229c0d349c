// Scatter over point-to-point: the root sends in[p*count ..) to every rank p on a lane of
// its own per peer; every other rank receives its block into its output.
//
// Cross-rank invariant: root and receiver chunk the block the same way (appendChunked
// with the same count). Only the root has an input buffer (NCCL ignores sendbuff
// elsewhere). In place (root's output == in + root*count) the root's block is in place.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status p2pScatter(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kScatter));
  resetSchedule(out, CollKind::kScatter, /*reduces=*/false);
  const int n = a.nranks, root = a.root;
  const bool isRoot = a.rank == root;
  out->bufs.push_back({BufRole::kInput, isRoot ? a.count * static_cast<size_t>(n) : 0});
  out->bufs.push_back({BufRole::kOutput, a.count});
  size_t used = 0;
  if (a.count == 0) {
    finishLanes(out, 0);
    return OkStatus();
  }
  const size_t chunks = ceilDiv(a.count, a.chunkElems);
  if (!isRoot) {
    std::vector<Step>* steps = &out->lanes[addLane(out, &used)].steps;
    steps->reserve(chunks);
    appendChunked(steps, false, root, outRef(0), a.count, a.chunkElems);
    finishLanes(out, used);
    return OkStatus();
  }
  out->lanes.reserve(static_cast<size_t>(n));
  for (int i = 1; i < n; ++i) {
    const int to = (root + i) % n;
    std::vector<Step>* steps = &out->lanes[addLane(out, &used)].steps;
    steps->reserve(chunks);
    appendChunked(steps, true, to, inRef(static_cast<size_t>(to) * a.count), a.count, a.chunkElems);
  }
  if (!a.inPlace) {
    out->lanes[addLane(out, &used)].steps.push_back(
        mkCopy(inRef(static_cast<size_t>(root) * a.count), outRef(0), a.count, false));
  }
  finishLanes(out, used);
  return OkStatus();
}

}  // namespace snccl
