// sn_sim's engine: times the real schedules of every rank of a described cluster with a
// discrete-event simulation, without moving data.
//
// Each rank runs its schedule's lanes (steps in order); a rank executes one step at a
// time (the host executor is one thread per rank). A step that touches a connection
// occupies its rank for bytes / bw of that link class; a message arrives `lat` after its
// step ends. Connections are FIFOs with `slots` credits per direction (SNCCL_STEPS): a send
// waits for the slot the receiver freed when it consumed the message `slots` earlier.
// Events are processed in time order (a heap of ready lanes), so the result is the
// makespan of the schedule under the model's link parameters, critical path, pipelining,
// credit stalls and all. Cost: O(steps x log(lanes)).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/tuning/cost_model.h"
#include "common/status.h"

namespace snccl::sim {

struct Cluster {
  int nranks = 1;
  int perNode = 1;  // ranks per node, contiguous (rank r is on node r / perNode)
  tuning::LinkClass intra = tuning::LinkClass::kShm;
  tuning::ModelParams params;
  int slots = 8;
  int nodeOf(int r) const { return r / perNode; }
  int nnodes() const { return (nranks + perNode - 1) / perNode; }
};

struct SimResult {
  double us = 0;        // makespan
  uint64_t steps = 0;   // steps executed over all ranks
  uint64_t messages = 0;
};

// ChannelPlan::hosts of the cluster (node index per rank).
ChannelPlan clusterPlan(const Cluster& c);

// Steps rank 0's schedule has for `args` (an estimate of the per-rank work, to decide
// whether a full simulation fits a step budget).
Result<uint64_t> rankSteps(const AlgorithmDef& algo, const CollArgs& args, const ChannelPlan& plan);

// Generates every rank's schedule with algo.generate and simulates them.
Result<SimResult> simulate(const AlgorithmDef& algo, const CollArgs& args, const Cluster& c, const ChannelPlan& plan);

}  // namespace snccl::sim
