// The algorithm registry: one table of every schedule generator, with its name, family
// and a one-line description. A new algorithm is one file plus one line in registry.cc.
#pragma once

#include <span>

#include "collectives/schedule.h"
#include "common/status.h"

namespace snccl {

// Fills `out` (cleared first; reusing its capacity) with this rank's schedule.
using GenerateFn = Status (*)(const CollArgs& args, const ChannelPlan& plan, Schedule* out);

struct AlgorithmDef {
  const char* name;    // e.g. "ring"
  const char* family;  // "ring", "tree", "hierarchical", "direct", "rd", "mapped", "p2p"
  CollKind coll;
  const char* help;    // one line for sn_info
  GenerateFn generate;
  int maxRanks = 0;    // largest communicator it supports (0: any size)
  // Its schedule reads and writes peers' buffers directly (Prim::kPeerFold): only for
  // communicators whose ranks can map each other's buffers (tuning::CommShape::
  // singleCopyBytes), and the executor needs an ordinary schedule to fall back to.
  bool readsPeers = false;
};

std::span<const AlgorithmDef> algorithms();
// The first algorithm listed for a collective: the selector's fallback, and what tests use.
const AlgorithmDef* defaultAlgorithm(CollKind coll);
// The algorithm for one call is chosen by the selector (tuning/selector.h).
const AlgorithmDef* findAlgorithm(CollKind coll, const char* name);

// Schedule for a group of send/recv operations of one rank, in the order they were
// called. Sends to / receives from the same peer keep their order; operations with
// different peers run on independent lanes. Send-to-self is matched with the
// receive-from-self of the same order and becomes a local copy. Messages are split into
// chunks of at most chunkElems elements. Buffer i of the schedule is the buffer of ops[i].
Status buildP2PSchedule(int rank, int nranks, std::span<const P2POp> ops, size_t chunkElems,
                        Schedule* out);

}  // namespace snccl
