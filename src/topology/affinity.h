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

// Where a helper thread of a rank on NUMA node `numa` should run: that node's CPUs when
// `enabled` and `sys` has more than one NUMA node; otherwise empty (on one node, pinning
// gains nothing and would only stop the scheduler from balancing an oversubscribed host).
std::vector<int> helperCpus(const System& sys, int numa, bool enabled);

// Pins the calling thread (a helper of a rank on `numa`; -1 unknown) per helperCpus() of
// this process's System and SNCCL_NUMA_BIND. Returns how many CPUs it is pinned to (0:
// left alone). A failure is logged, never fatal: placement is an optimisation.
int placeHelperThread(int numa, const char* what);

}  // namespace snccl::topo
