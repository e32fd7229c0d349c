// Double binary tree AllReduce (NCCL's "tree" algorithm, flattened over all ranks).
//
// The data is split in two halves (BlockSplit(count, 2)); half t is reduced up tree t of
// the double binary tree (btree.h) to its root and broadcast back down the same tree, in
// chunks of at most chunkElems elements. Inner nodes of one tree are leaves of the other
// (for even n exactly: tree 0's inner nodes are the even ranks, tree 1's the odd ones),
// which spreads the two-children work evenly over the ranks.
// Per chunk, a rank with parent p and children c0 (, c1) does:
//   up    (non-root)  Send / RecvReduceSend, or with two children RecvReduceCopy(c0) into
//                     the output then RecvReduceSend(c1) of that partial sum to p
//   root              RecvReduceCopy(c0), then RecvReduceCopySend(c_last) marked final,
//                     then Send to the other child: the finished chunk turns downwards
//   down  (non-root)  Recv / RecvCopySend(p -> c0) then Send to c1
//
// Both trees share one lane per rank, because the two trees can use the same connection
// (with n = 2 or 4, an edge of tree 0 is the reverse edge of tree 1) and a connection
// belongs to one lane. The order within the lane comes from an ideal synchronous
// timeline: with D = treeMaxDepth(n), a rank at depth d of tree t does its up step for
// chunk j at tick 2j + t + (D - d) and its down step at tick 2j + t + (D + d). Every
// message is received exactly one tick after it is sent, and one tree puts at most one
// message on a connection every other tick (ticks of one parity), so:
//  * cross-rank invariant: both ends see the messages of a connection in tick order (tree
//    0 before tree 1 within a tick), which is the same order, with the same counts;
//  * no deadlock with SNCCL_STEPS >= 2: a step of tick k only receives messages of tick
//    k-1, and a sender finds at most one message still queued (of tick k-1, or of tree 0
//    in the same tick k), so its send never waits (the checker runs every shape with 2
//    slots);
//  * pipelining: a new chunk enters each tree every other tick; a leaf at depth d sends
//    d chunks ahead of its first receive, so all levels of both trees work at once.
// In place: a rank reads its input chunk in its up step, before its down step (later in
// the same lane) overwrites the aliased output; the partial sum of a rank with two
// children lives in its own output chunk until the down step replaces it.
#include "collectives/sched_util.h"
#include "collectives/tree/btree.h"

namespace snccl {

using namespace sched;

namespace {

// Steps of one chunk [off, off+c) of one tree: up (or the root's turn) when `up`, else down.
void treeChunk(const TreeNode& t, bool up, size_t off, size_t c, std::vector<Step>* steps) {
  const int c0 = t.children[0];
  const int cl = t.nchildren > 0 ? t.children[t.nchildren - 1] : -1;  // the last child
  if (t.parent < 0) {  // root: reduce from the children, finalize, turn the chunk down
    if (t.nchildren == 2) {
      steps->push_back(mkStep(Prim::kRecvReduceCopy, c0, -1, inRef(off), outRef(off), c, false));
      steps->push_back(mkStep(Prim::kRecvReduceCopySend, cl, cl, outRef(off), outRef(off), c, true));
      steps->push_back(mkSend(c0, outRef(off), c));
    } else {
      steps->push_back(mkStep(Prim::kRecvReduceCopySend, c0, c0, inRef(off), outRef(off), c, true));
    }
    return;
  }
  if (up) {
    if (t.nchildren == 0) {
      steps->push_back(mkSend(t.parent, inRef(off), c));
    } else if (t.nchildren == 1) {
      steps->push_back(mkStep(Prim::kRecvReduceSend, c0, t.parent, inRef(off), {}, c, false));
    } else {
      steps->push_back(mkStep(Prim::kRecvReduceCopy, c0, -1, inRef(off), outRef(off), c, false));
      steps->push_back(mkStep(Prim::kRecvReduceSend, cl, t.parent, outRef(off), {}, c, false));
    }
    return;
  }
  if (t.nchildren == 0) {
    steps->push_back(mkRecv(t.parent, outRef(off), c));
    return;
  }
  steps->push_back(mkStep(Prim::kRecvCopySend, t.parent, c0, {}, outRef(off), c, false));
  if (t.nchildren == 2) steps->push_back(mkSend(cl, outRef(off), c));
}

}  // namespace

Status treeAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const int n = a.nranks;
  const TreeNode trees[2] = {dtreeNode(n, a.rank, 0), dtreeNode(n, a.rank, 1)};
  const BlockSplit halves(a.count, 2);
  const size_t chunks[2] = {ceilDiv(halves.size(0), a.chunkElems), ceilDiv(halves.size(1), a.chunkElems)};
  const size_t depth = static_cast<size_t>(treeMaxDepth(n));
  steps.reserve(3 * (chunks[0] + chunks[1]));
  const size_t ticks = 2 * std::max(chunks[0], chunks[1]) + 2 * depth + 1;  // past the last down step
  for (size_t tick = 0; tick < ticks; ++tick) {
    for (int ti = 0; ti < 2; ++ti) {
      const TreeNode& t = trees[ti];
      const size_t d = static_cast<size_t>(t.depth);
      for (bool up : {true, false}) {
        if (!up && t.parent < 0) continue;  // the root's single turn is its up step
        const size_t origin = static_cast<size_t>(ti) + (up ? depth - d : depth + d);
        if (tick < origin || (tick - origin) % 2 != 0 || (tick - origin) / 2 >= chunks[ti]) continue;
        const size_t lo = (tick - origin) / 2 * a.chunkElems;
        const size_t c = std::min(a.chunkElems, halves.size(static_cast<size_t>(ti)) - lo);
        treeChunk(t, up, halves.offset(static_cast<size_t>(ti)) + lo, c, &steps);
      }
    }
  }
  return OkStatus();
}

}  // namespace snccl
