// The three phases of the hierarchical AllReduce (hier/allreduce.cc), each a ring over a
// list of ranks, appended in chunks to one lane. Steps follow ring/allreduce.cc: what
// position p sends at step s, position p+1 receives at step s+1, same block, same chunk;
// a chunk that is empty in a block is skipped by every rank of its chain alike.
#pragma once

#include <vector>

#include "collectives/hier/layout.h"

namespace snccl::sched {

// Phase 1: ring reduce-scatter of the input over `ring` (size >= 2): position p ends with
// block (p+1) mod L summed over the ring, in its output (final when `final`).
void hierReduceScatter(const std::vector<int>& ring, int pos, const NodeBlocks& blocks, size_t chunk, bool final,
                       std::vector<Step>* steps);

// Phase 2: ring AllReduce over `ring` (size >= 2) of [base, base+size), the node sums read
// from buffer `srcBuf`, results in the output; the step completing an element is final.
void hierRailAllReduce(const std::vector<int>& ring, int pos, size_t base, size_t size, uint16_t srcBuf,
                       size_t chunk, std::vector<Step>* steps);

// Phase 3: ring all-gather of the output over `ring` (size >= 2); position p starts with
// block (p+1) mod L.
void hierAllGather(const std::vector<int>& ring, int pos, const NodeBlocks& blocks, size_t chunk,
                   std::vector<Step>* steps);

}  // namespace snccl::sched
