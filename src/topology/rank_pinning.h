// Pinning the threads that run an oversubscribed node's ranks (SNCCL_PIN_RANKS).
//
// When a node runs more ranks than the CPUs they may use, the scheduler keeps moving them,
// and two ranks that must talk to each other next often share a CPU: one can only go on
// after the other has run and then been switched out. Measured on 2 CPUs, 4 processes,
// 8 B AllReduce (recursive doubling): unpinned calls take ~14 or ~28 us, switching within
// one run; with every exchange partner on the other CPU they take 17-18 us in every run.
//
// The placement puts the partners of recursive doubling (local ranks r and r ^ 2^i, the
// small-message algorithm) on different CPUs: with P = 2^k CPUs (their number rounded
// down to a power of two), local rank r goes to CPU code(r) = XOR of h(i) over the set
// bits i of r, where h(i) = 2^i for i < k and 1 + (i - k) mod (P - 1) above: never 0, so
// flipping any one bit changes the CPU, and the first k form a basis, so ranks 0..2^m-1
// (m >= k) fill the CPUs evenly. For P = 2 code(r) is the parity of r's set bits.
#pragma once

#include <span>
#include <vector>

namespace snccl::topo {

// The CPU (an element of `allowed`) for local rank `localRank` of `localRanks`, or -1
// when pinning would not help: no more ranks than CPUs, or fewer than 2 CPUs.
int pinnedCpuFor(int localRank, int localRanks, std::span<const int> allowed);

// The CPUs the calling thread may run on (empty when the kernel does not say).
std::vector<int> currentThreadCpus();

}  // namespace snccl::topo
