// Hierarchical AllReduce for ranks grouped in nodes (ChannelPlan::hosts): an intra-node
// ring reduce-scatter, an inter-node ring AllReduce per local index ("rail"), then an
// intra-node ring all-gather. Only 1/L of the data (L ranks per node) crosses the network
// per rank, and every node's L rails run in parallel.
//
// Layout (layout.h): nodes are numbered by their lowest rank; the local index of a rank is
// its order among the ranks of its node. With m = the smallest node's rank count, local
// indices 0..m-1 are the rails; the data is split into m parts (NodeBlocks).
//   1. local ring (by local index) reduce-scatter: rail p ends with part (p+1) mod m
//      summed over its node, in its output (RecvReduceCopy; final when one node);
//   2. the N ranks of rail p (one per node, in node order) run a ring AllReduce of part
//      (p+1) mod m, reading the node sums from the output (the input when L = 1), split
//      into N sub-blocks; the step completing a sub-block is the final one;
//   3. local ring all-gather: every part travels around the node.
//
// Uneven nodes (different rank counts): a node of L > m ranks still runs its rings over
// all L local indices, but only the m rail positions own a part; the blocks of positions
// m..L-1 are empty (NodeBlocks), so those ranks add their input to the parts that pass
// through them in phase 1, take no part in phase 2, and pass the finished parts on in
// phase 3. A part travels L-1 links of the local ring per phase, so a link carries at
// most count elements per phase (an even node: (L-1)/L count), and m rails cross the
// network from every node. Alternatives not taken: reducing each node to one leader
// (one rail, the network used m times less) or folding the extra ranks' whole inputs
// into the rails (a rail receives up to ceil((L-m)/m) whole vectors, serially).
// All ranks see the same hosts, so they all make the same choice of layout and parts.
//
// Cross-rank invariants: the local rings and rails agree on both ends (layout.h); the
// ranks of one rail handle the same part and split it alike. Every phase is one lane of
// steps in ring order (phases.h) and the phases follow each other in the lane: a
// connection inside a node carries the phase 1 messages then the phase 3 ones on both
// ends, a connection between nodes only phase 2 ones. In place: a rank reads each input
// chunk once in phase 1 (the node-sum chunk it keeps is written by the step that reads
// it), or in phase 2 when L = 1, before any later write of that chunk.
#include "collectives/hier/layout.h"
#include "collectives/hier/phases.h"

namespace snccl {

using namespace sched;

Status hierAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  NodeLayout l;
  SNCCL_TRY(makeNodeLayout(a, plan, &l));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  std::vector<Step>& steps = *lane;
  const size_t L = l.local.size(), N = static_cast<size_t>(l.nodes);
  const NodeBlocks blocks(a.count, L, static_cast<size_t>(l.rails));
  if (L > 1) hierReduceScatter(l.local, l.localPos, blocks, a.chunkElems, /*final=*/N == 1, &steps);
  if (N > 1 && !l.rail.empty()) {
    const size_t part = blocks.railPart(static_cast<size_t>(l.localPos));
    hierRailAllReduce(l.rail, l.railPos, blocks.parts().offset(part), blocks.parts().size(part),
                      L > 1 ? kOutputBuf : kInputBuf, a.chunkElems, &steps);
  }
  if (L > 1) hierAllGather(l.local, l.localPos, blocks, a.chunkElems, &steps);
  return OkStatus();
}

}  // namespace snccl
