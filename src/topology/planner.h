// The channel planner: rings and trees over the ranks of a communicator that follow the
// fastest links, a channel count, and the per-node grouping the hierarchical algorithms
// use. Pure, deterministic functions of (System, rank locations).
//
// Cross-rank invariant: every rank must use the same plan. Ranks given the same System
// and the same allgathered locations compute the same plan, which holds within a node and
// across identical nodes. Where nodes may differ, compute the plan on one rank and
// broadcast it rather than on every rank.
//
// Within a node the ring maximises its narrowest hop (NVLink/NVSwitch before PCIe, PCIe
// switch before host bridge before the CPU interconnect) and, among equally narrow rings,
// crosses as few slow hops as possible; nodes are then chained in order of their lowest
// rank. `sys` describes one node; as in NCCL all nodes are assumed to look alike, and a
// rank whose GPU bus id is not in `sys` is placed by rank order.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/status.h"
#include "topology/system.h"

namespace snccl::topo {

// Where a rank runs: which node (ranks with equal hostHash share one), and on that node
// its GPU (bus id) or, for a host rank, its NUMA node (-1 unknown).
struct RankLocation {
  uint64_t hostHash = 0;
  std::string busId;
  int numa = -1;
};

// A tree over ranks: parent[r] (-1 at the root) and up to a few children per rank.
struct RankTree {
  int root = -1;
  std::vector<int> parent;
  std::vector<std::vector<int>> children;
};

struct Plan {
  int nChannels = 1;
  // rings[c][i] = rank at position i of channel c. Channels share the intra-node order but
  // rotate where each node is entered, so inter-node traffic leaves from different GPUs
  // (and so different NICs).
  std::vector<std::vector<int>> rings;
  // Double binary trees: trees[2k] and trees[2k+1] are the two halves of one (the second
  // mirrored or shifted so each node is a leaf in at least one); there are nChannels
  // rounded up to even. Tree c follows ring c % nChannels: within a node the ranks form a
  // chain in ring order below the node's first rank, and the first ranks form the tree.
  std::vector<RankTree> trees;
  // Ranks per node in ring order; nodes ordered by their lowest rank.
  std::vector<std::vector<int>> nodes;
  // The narrowest intra-node hop of the ring (kLoc/bandwidth 0 when nodes hold one rank).
  PathType intraType = PathType::kLoc;
  double intraBw = 0;
  // Per rank: the NIC (node id in sys) its inter-node traffic should use, -1 if none.
  std::vector<int> rankNic;
};

struct PlanOptions {
  int minChannels = 1;
  int maxChannels = 32;
};

// The ring the communicator uses: ring[i] = rank at position i (ChannelPlan::ring).
// At creation every rank allgathers its RankLocation (hostHash as bootstrap computes it;
// busId from cudaDeviceGetPCIBusId for a device rank; numa = currentNumaNode() from
// topology/affinity.h for a host rank), gets `sys` from systemForThisProcess(), and calls
// this (see the invariant above for clusters of unlike nodes).
Result<std::vector<int>> planRing(const System& sys, std::span<const RankLocation> ranks);

Result<Plan> planChannels(const System& sys, std::span<const RankLocation> ranks, const PlanOptions& opt = {});

// Order of the given endpoints (GPU or CPU node ids of `sys`) around a ring; exposed for
// sn_topo and tests.
std::vector<int> orderRing(const System& sys, std::span<const int> endpoints);

// A balanced binary tree over n items and its complement (each non-root item is a leaf
// in at least one of the two when n is even): parents[k][i], -1 for the root.
std::vector<int> binaryTreeParents(int n, bool mirrored);

}  // namespace snccl::topo
