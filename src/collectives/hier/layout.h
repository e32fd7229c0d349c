// Node layout of the hierarchical AllReduce (hier/allreduce.cc): which ranks share a node
// (ChannelPlan::hosts), each rank's local index, the "rails" (one rank per node with the
// same local index) and how the data is split into blocks for the node phases.
//
// Cross-rank invariant: every rank derives the same layout from the same hosts table
// (nodes numbered by their lowest rank, local indices by rank order inside a node), so
// both ends of every local-ring and rail connection agree on who talks to whom.
#pragma once

#include <cstddef>
#include <vector>

#include "collectives/sched_util.h"

namespace snccl::sched {

struct NodeLayout {
  std::vector<int> local;  // the ranks of my node, by local index (the local ring)
  std::vector<int> rail;   // my rail: the rank of my local index on each node, by node;
                           // empty when my local index is beyond the rails
  int localPos = 0;        // my local index
  int railPos = 0;         // my node's index (my position on the rail)
  int nodes = 1;
  int rails = 1;           // the smallest node's rank count: local indices 0..rails-1
  bool even = true;        // all nodes have the same number of ranks
};

// Fails when plan.hosts is neither empty (one node) nor one entry per rank.
Status makeNodeLayout(const CollArgs& a, const ChannelPlan& plan, NodeLayout* out);

// The blocks of the node phases. A node of L ranks runs a ring over its local indices
// with L blocks, one per position: block v is completed at (reduce-scatter) and starts
// from (all-gather) position v-1 mod L. Only rail positions (local index < rails) own
// data: the count is split into `rails` parts (BlockSplit) and the rail at local index
// p owns part (p+1) mod rails; blocks of the other positions are empty, so those ranks
// only pass the rails' chunks on. With even nodes (rails == L) this is the plain ring
// split, block v = part v.
class NodeBlocks {
 public:
  NodeBlocks(size_t count, size_t localRanks, size_t rails) : split_(count, rails), L_(localRanks), m_(rails) {}
  size_t railPart(size_t localPos) const { return (localPos + 1) % m_; }
  size_t size(size_t v) const { return owned(v) ? split_.size(part(v)) : 0; }
  size_t offset(size_t v) const { return owned(v) ? split_.offset(part(v)) : 0; }
  size_t maxSize() const { return split_.maxSize(); }
  const BlockSplit& parts() const { return split_; }

 private:
  size_t owner(size_t v) const { return (v + L_ - 1) % L_; }
  bool owned(size_t v) const { return owner(v) < m_; }
  size_t part(size_t v) const { return railPart(owner(v)); }

  BlockSplit split_;
  size_t L_, m_;
};

}  // namespace snccl::sched
