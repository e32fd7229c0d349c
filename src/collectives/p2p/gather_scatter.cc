// Gather and Scatter over point-to-point, one generator for both (they are mirror images):
//  * Gather: every rank sends its input to the root, which receives rank p's block into
//    out[p*count ..) on a lane of its own per peer. Only the root has an output buffer
//    (NCCL ignores recvbuff elsewhere).
//  * Scatter: the root sends in[p*count ..) to every rank p on a lane of its own per peer;
//    every other rank receives its block into its output. Only the root has an input
//    buffer (NCCL ignores sendbuff elsewhere).
//
// Cross-rank invariant: the root and each peer chunk the block the same way
// (appendChunked with the same count). In place (Gather: the root's input == out +
// root*count; Scatter: its output == in + root*count) the root's own block is already in
// place; otherwise the root copies it.
//
// Gather under incast control (p2p/incast.h): the root receives on K = incastSenders
// lanes, each granting the peers root+1, root+2, ... in turn (lane j takes every K-th) and
// receiving each one's whole block before granting the next; a peer waits for its grant
// before sending. Scatter has one sender and needs none.
#include "collectives/p2p/incast.h"
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

namespace {

Status rootedExchange(const CollArgs& a, const ChannelPlan& plan, Schedule* out, CollKind coll) {
  SNCCL_TRY(checkCollArgs(a, plan, coll));
  const bool gather = coll == CollKind::kGather;
  resetSchedule(out, coll, /*reduces=*/false);
  const int n = a.nranks, root = a.root;
  const bool isRoot = a.rank == root;
  const size_t all = a.count * static_cast<size_t>(n);
  // The root's buffer holds every block; the other side of every rank holds one.
  out->bufs.push_back({BufRole::kInput, gather ? a.count : (isRoot ? all : 0)});
  out->bufs.push_back({BufRole::kOutput, gather ? (isRoot ? all : 0) : a.count});
  size_t used = 0;
  if (a.count == 0) {
    finishLanes(out, 0);
    return OkStatus();
  }
  const size_t chunks = ceilDiv(a.count, a.chunkElems);
  const bool granted = gather && incastLimited(a, n - 1);
  if (!isRoot) {  // Gather: send my input to the root; Scatter: receive my block from it
    if (granted) out->bufs.push_back({BufRole::kScratch, 1});
    std::vector<Step>* steps = &out->lanes[addLane(out, &used)].steps;
    steps->reserve(chunks + 1);
    if (granted) steps->push_back(mkAwaitGrant(root, scratchRef(0)));
    appendChunked(steps, gather, root, gather ? inRef(0) : outRef(0), a.count, a.chunkElems);
    finishLanes(out, used);
    return OkStatus();
  }
  const size_t lanes = granted ? static_cast<size_t>(a.incastSenders) : static_cast<size_t>(n - 1);
  out->lanes.reserve(lanes + 1);
  for (size_t j = 0; j < lanes; ++j) addLane(out, &used);
  for (int i = 1; i < n; ++i) {
    const int peer = (root + i) % n;
    const size_t block = static_cast<size_t>(peer) * a.count;
    std::vector<Step>* steps = &out->lanes[static_cast<size_t>(i - 1) % lanes].steps;
    steps->reserve(steps->size() + chunks + 1);
    if (granted) steps->push_back(mkGrant(peer, inRef(0)));
    appendChunked(steps, !gather, peer, gather ? outRef(block) : inRef(block), a.count, a.chunkElems);
  }
  if (!a.inPlace) {
    const size_t mine = static_cast<size_t>(root) * a.count;
    out->lanes[addLane(out, &used)].steps.push_back(
        mkCopy(gather ? inRef(0) : inRef(mine), gather ? outRef(mine) : outRef(0), a.count, false));
  }
  finishLanes(out, used);
  return OkStatus();
}

}  // namespace

Status p2pGather(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  return rootedExchange(a, plan, out, CollKind::kGather);
}

Status p2pScatter(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  return rootedExchange(a, plan, out, CollKind::kScatter);
}

}  // namespace snccl
