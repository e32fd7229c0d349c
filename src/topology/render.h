// Human-readable views of a System for sn_topo, logs and bug reports: the device tree, a
// path matrix in the style of `nvidia-smi topo -m`, the GPU-NIC pairing, a plan, and an
// SVG picture of the machine with a ring drawn on it.
#pragma once

#include <span>
#include <string>

#include "topology/planner.h"
#include "topology/system.h"

namespace snccl::topo {

std::string describeTree(const System& sys);
// GPUs and NICs (CPUs when there are neither) with class cells, CPU and NUMA affinity;
// then the bandwidth (GB/s) between the same devices.
std::string describePaths(const System& sys);
std::string describePairing(const System& sys);
std::string describePlan(const System& sys, const Plan& plan, std::span<const RankLocation> ranks);
// "0-3,8,10-11"
std::string cpuRanges(std::span<const int> cpus);

// The ring is a list of endpoint node ids (GPUs or CPUs) in ring order; empty: none drawn.
std::string renderSvg(const System& sys, std::span<const int> ring);

}  // namespace snccl::topo
