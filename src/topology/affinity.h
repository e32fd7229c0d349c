// NUMA placement for host ranks: the NUMA node a thread runs on (part of its
// RankLocation), and pinning a thread to one NUMA node's CPUs so that the buffers it
// first touches are allocated there. Binding is the caller's decision: it helps when ranks
// outnumber neither cores nor NUMA nodes, and hurts an oversubscribed machine.
#pragma once

#include <span>
#include <vector>

#include "common/status.h"
#include "topology/system.h"

namespace snccl::topo {

// The NUMA node of the CPU the calling thread runs on now; -1 when the kernel cannot say.
int currentNumaNode();

// The CPUs of NUMA node `numa` per the System (empty when the node or its mask is unknown).
std::vector<int> cpusOfNuma(const System& sys, int numa);

// Pins the calling thread to `cpus`; an empty list leaves the affinity alone.
Status bindCurrentThread(std::span<const int> cpus);

}  // namespace snccl::topo
