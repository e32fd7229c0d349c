// Tree Broadcast and Reduce: one binary tree rooted at the call's root, pipelined in
// chunks of at most chunkElems elements.
//
// The tree is NCCL's btree (btree.h) over virtual ranks v = (rank - root) mod n, so the
// root is v = 0 and every rank derives the same tree. Broadcast: each chunk flows down,
// the root Sends it to its children, inner ranks RecvCopySend to the first child and
// Send to the second, leaves Recv. Reduce: each chunk flows up, leaves Send their input,
// inner ranks add theirs (with two children the first child's sum goes through a
// chunk-sized scratch buffer), and the root's last receive is the final step.
// Cross-rank invariant: on every connection both ends handle the chunks in order 0, 1,
// ..., one message each, so the j-th message is chunk j on both ends. Messages flow in
// one direction per edge, so a lane only waits on its parent (Broadcast) or its children
// (Reduce) and never deadlocks; all levels work on successive chunks at once.
// Compared with the ring chain: log2(n) hops instead of n-1 for each chunk, but an inner
// rank sends (Broadcast) or receives (Reduce) every chunk twice.
#include "collectives/sched_util.h"
#include "collectives/tree/btree.h"

namespace snccl {

using namespace sched;

namespace {

// This rank's node of the btree rooted at args.root, with real ranks.
TreeNode rootedNode(const CollArgs& a) {
  const int n = a.nranks;
  TreeNode t = btreeNode(n, ((a.rank - a.root) % n + n) % n);
  auto real = [&](int v) { return v < 0 ? -1 : (v + a.root) % n; };
  t.parent = real(t.parent);
  for (int i = 0; i < t.nchildren; ++i) t.children[i] = real(t.children[i]);
  return t;
}

}  // namespace

Status treeBroadcast(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kBroadcast));
  std::vector<Step>* lane = beginBroadcast(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const bool isRoot = a.rank == a.root;
  const bool rootCopies = isRoot && !a.inPlace;
  const TreeNode t = rootedNode(a);
  const int c0 = t.children[0], c1 = t.children[1];
  const size_t iters = a.nranks > 1 ? ceilDiv(a.count, a.chunkElems) : 0;
  steps.reserve(2 * iters + 1);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    const size_t c = std::min(a.chunkElems, a.count - lo);
    if (isRoot) {
      for (int i = 0; i < t.nchildren; ++i) steps.push_back(mkSend(t.children[i], inRef(lo), c));
    } else if (t.nchildren == 0) {
      steps.push_back(mkRecv(t.parent, outRef(lo), c));
    } else {
      steps.push_back(mkStep(Prim::kRecvCopySend, t.parent, c0, {}, outRef(lo), c, false));
      if (t.nchildren == 2) steps.push_back(mkSend(c1, outRef(lo), c));
    }
  }
  if (rootCopies) steps.push_back(mkCopy(inRef(0), outRef(0), a.count, /*final=*/false));
  return OkStatus();
}

Status treeReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kReduce));
  std::vector<Step>* lane = beginReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const bool isRoot = a.rank == a.root;
  const TreeNode t = rootedNode(a);
  const int c0 = t.children[0], c1 = t.children[1];
  // A non-root rank with two children keeps its first partial sum of a chunk here; the
  // lane finishes a chunk before the next one reuses the space.
  const BufRef tmp{kScratchBuf, 0};
  if (!isRoot && t.nchildren == 2) out->bufs.push_back({BufRole::kScratch, std::min(a.chunkElems, a.count)});
  const size_t iters = ceilDiv(a.count, a.chunkElems);
  steps.reserve(2 * iters);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * a.chunkElems;
    const size_t c = std::min(a.chunkElems, a.count - lo);
    if (isRoot) {
      if (t.nchildren == 0) {  // one rank: a final Copy even in place (Avg, PreMulSum)
        steps.push_back(mkCopy(inRef(lo), outRef(lo), c, /*final=*/true));
      } else if (t.nchildren == 1) {
        steps.push_back(mkStep(Prim::kRecvReduceCopy, c0, -1, inRef(lo), outRef(lo), c, true));
      } else {
        steps.push_back(mkStep(Prim::kRecvReduceCopy, c0, -1, inRef(lo), outRef(lo), c, false));
        steps.push_back(mkStep(Prim::kRecvReduceCopy, c1, -1, outRef(lo), outRef(lo), c, true));
      }
    } else if (t.nchildren == 0) {
      steps.push_back(mkSend(t.parent, inRef(lo), c));
    } else if (t.nchildren == 1) {
      steps.push_back(mkStep(Prim::kRecvReduceSend, c0, t.parent, inRef(lo), {}, c, false));
    } else {
      steps.push_back(mkStep(Prim::kRecvReduceCopy, c0, -1, inRef(lo), tmp, c, false));
      steps.push_back(mkStep(Prim::kRecvReduceSend, c1, t.parent, tmp, {}, c, false));
    }
  }
  return OkStatus();
}

}  // namespace snccl
