// Hierarchical AllReduce for ranks grouped in nodes (ChannelPlan::hosts): an intra-node
// ring reduce-scatter, an inter-node ring AllReduce per local index ("rail"), then an
// intra-node ring all-gather. Only 1/L of the data (L ranks per node) crosses the network
// per rank, and every node's L rails run in parallel.
//
// Layout: nodes are numbered by their lowest rank; the local index of a rank is its order
// among the ranks of its node. The data is split into L blocks (BlockSplit(count, L)).
//   1. local ring (by local index) reduce-scatter: local index p ends with block (p+1)
//      mod L summed over its node, in its output (RecvReduceCopy; final when one node);
//   2. the N ranks of local index p (one per node, in node order) run a ring AllReduce
//      of block (p+1) mod L, reading the node sums from the output (the input when L = 1),
//      split into N sub-blocks; the step completing a sub-block is the final one;
//   3. local ring all-gather: block (p+1) mod L travels around the node.
// Cross-rank invariants: all ranks derive the same layout from the same hosts, so the
// local rings and rails agree on both ends; the ranks of one rail handle the same block
// and split it alike. Every phase is one lane of steps in ring order (as ring/allreduce.cc)
// and the phases follow each other in the lane: a connection inside a node carries the
// phase 1 messages then the phase 3 ones on both ends, a connection between nodes only
// phase 2 ones. In place: a rank reads each input chunk once in phase 1 (the node-sum
// chunk it keeps is written by the step that reads it), before any later write.
// Nodes of different sizes have no common rail layout: the generator then produces the
// ring AllReduce (the same fallback on every rank, since all see the same hosts).
#include <unordered_map>

#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status ringAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);

namespace {

struct Layout {
  std::vector<int> local;  // the ranks of my node, by local index
  std::vector<int> rail;   // the rank of my local index on each node, by node
  int localPos = 0, railPos = 0;
  bool even = true;        // all nodes have the same number of ranks
};

Layout makeLayout(const CollArgs& a, const ChannelPlan& plan) {
  Layout l;
  const int n = a.nranks;
  if (plan.hosts.empty()) {  // unknown: one node
    for (int r = 0; r < n; ++r) l.local.push_back(r);
    l.rail.push_back(a.rank);
    l.localPos = a.rank;
    return l;
  }
  std::unordered_map<uint64_t, int> nodeOf;  // host -> node index, by lowest rank
  std::vector<int> nodeSize, localIdx(static_cast<size_t>(n)), nodeIdx(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    auto [it, fresh] = nodeOf.try_emplace(plan.hosts[static_cast<size_t>(r)], static_cast<int>(nodeSize.size()));
    if (fresh) nodeSize.push_back(0);
    nodeIdx[static_cast<size_t>(r)] = it->second;
    localIdx[static_cast<size_t>(r)] = nodeSize[static_cast<size_t>(it->second)]++;
  }
  for (int s : nodeSize) l.even = l.even && s == nodeSize[0];
  if (!l.even) return l;
  const int myNode = nodeIdx[static_cast<size_t>(a.rank)];
  l.localPos = localIdx[static_cast<size_t>(a.rank)];
  l.railPos = myNode;
  l.rail.assign(nodeSize.size(), -1);
  for (int r = 0; r < n; ++r) {
    if (nodeIdx[static_cast<size_t>(r)] == myNode) l.local.push_back(r);
    if (localIdx[static_cast<size_t>(r)] == l.localPos) l.rail[static_cast<size_t>(nodeIdx[static_cast<size_t>(r)])] = r;
  }
  return l;
}

size_t mod(long v, size_t m) { return static_cast<size_t>(((v % static_cast<long>(m)) + static_cast<long>(m)) % static_cast<long>(m)); }

// Phase 1: ring reduce-scatter of [0, count) over `ring` (size >= 2); position p ends
// with block (p+1) mod L in its output.
void reduceScatter(const std::vector<int>& ring, int pos, const BlockSplit& split, size_t chunk, bool final,
                   std::vector<Step>* steps) {
  const size_t L = ring.size();
  const int next = ring[mod(pos + 1, L)], prev = ring[mod(pos - 1, L)];
  const size_t iters = ceilDiv(split.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < L; ++s) {
      const size_t b = mod(pos - static_cast<long>(s), L);
      if (lo >= split.size(b)) continue;  // empty chunk: skipped by every rank of this chain
      const size_t c = std::min(chunk, split.size(b) - lo), off = split.offset(b) + lo;
      const Prim p = s == 0 ? Prim::kSend : s < L - 1 ? Prim::kRecvReduceSend : Prim::kRecvReduceCopy;
      steps->push_back(mkStep(p, prev, next, inRef(off), outRef(off), c, final && s == L - 1));
    }
  }
}

// Phase 2: ring AllReduce over `ring` (size >= 2) of [base, base+size), node sums read
// from buffer `srcBuf`.
void railAllReduce(const std::vector<int>& ring, int pos, size_t base, size_t size, uint16_t srcBuf, size_t chunk,
                   std::vector<Step>* steps) {
  const size_t N = ring.size();
  const int next = ring[mod(pos + 1, N)], prev = ring[mod(pos - 1, N)];
  const BlockSplit split(size, N);
  const size_t iters = ceilDiv(split.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < 2 * N - 1; ++s) {
      const size_t b = mod(pos - static_cast<long>(s), N);
      if (lo >= split.size(b)) continue;
      const size_t c = std::min(chunk, split.size(b) - lo), off = base + split.offset(b) + lo;
      const Prim p = s == 0           ? Prim::kSend
                     : s < N - 1      ? Prim::kRecvReduceSend
                     : s == N - 1     ? Prim::kRecvReduceCopySend
                     : s < 2 * N - 2  ? Prim::kRecvCopySend
                                      : Prim::kRecv;
      steps->push_back(mkStep(p, prev, next, BufRef{srcBuf, off}, outRef(off), c, s == N - 1));
    }
  }
}

// Phase 3: ring all-gather over `ring` (size >= 2); position p starts with block (p+1) mod L.
void allGather(const std::vector<int>& ring, int pos, const BlockSplit& split, size_t chunk, std::vector<Step>* steps) {
  const size_t L = ring.size();
  const int next = ring[mod(pos + 1, L)], prev = ring[mod(pos - 1, L)];
  const size_t iters = ceilDiv(split.maxSize(), chunk);
  for (size_t j = 0; j < iters; ++j) {
    const size_t lo = j * chunk;
    for (size_t s = 0; s < L; ++s) {
      const size_t b = mod(pos + 1 - static_cast<long>(s), L);
      if (lo >= split.size(b)) continue;
      const size_t c = std::min(chunk, split.size(b) - lo), off = split.offset(b) + lo;
      const Prim p = s == 0 ? Prim::kSend : s < L - 1 ? Prim::kRecvCopySend : Prim::kRecv;
      steps->push_back(mkStep(p, prev, next, outRef(off), outRef(off), c, false));
    }
  }
}

}  // namespace

Status hierAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  if (!plan.hosts.empty() && plan.hosts.size() != static_cast<size_t>(a.nranks))
    return InvalidArgument("hierarchical AllReduce: %zu hosts for %d ranks", plan.hosts.size(), a.nranks);
  const Layout l = makeLayout(a, plan);
  if (!l.even) return ringAllReduce(a, plan, out);
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const size_t L = l.local.size(), N = l.rail.size();
  const BlockSplit split(a.count, L);
  const size_t mine = mod(l.localPos + 1, L);  // the block this rank's rail reduces
  if (L > 1) reduceScatter(l.local, l.localPos, split, a.chunkElems, /*final=*/N == 1, &steps);
  if (N > 1)
    railAllReduce(l.rail, l.railPos, split.offset(mine), split.size(mine), L > 1 ? kOutputBuf : kInputBuf,
                  a.chunkElems, &steps);
  if (L > 1) allGather(l.local, l.localPos, split, a.chunkElems, &steps);
  return OkStatus();
}

}  // namespace snccl
