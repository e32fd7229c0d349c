// Pinning the threads that run an oversubscribed node's ranks (SNCCL_PIN_RANKS, off by
// default).
//
// When a node runs more ranks than CPUs, the scheduler keeps moving them, and two ranks
// that must talk to each other next often share a CPU: one can only go on after the other
// has run and then been switched out. On 2 CPUs, 4 processes, 8 B AllReduce by
// recursive doubling: unpinned calls took ~14 or ~28 us, switching within one run; with
// every exchange partner on the other CPU, 17-18 us in every run. With the flat AllReduce
// (one exchange with every rank, the small-message pick there now) pinning mostly makes
// runs alike (np=8, 512 B-2 KiB: 43-50 us pinned, 42-96 unpinned over 3 rounds).
//
// Off by default because a pin outlives the call: the thread that runs a rank's blocking
// operations is the user's, and every thread or process it starts later (OpenMP pools,
// data-loader workers, snccl's own proxy thread) inherits the one CPU.
//
// The placement puts the partners of recursive doubling (local ranks r and r ^ 2^i) on
// different CPUs when the CPU count n is a power of two, n = 2^k: local rank r goes to
// CPU code(r) = XOR of h(i) over the set bits i of r, where h(i) = 2^i for i < k and
// 1 + (i - k) mod (n - 1) above: never 0, so flipping any one bit changes the CPU, and the
// first k form a basis, so ranks 0..2^m-1 (m >= k) fill the CPUs evenly. For n = 2 code(r)
// is the parity of r's set bits. Other CPU counts take ranks round robin (r mod n): every
// CPU gets ranks, partners may share one.
#pragma once

#include <span>
#include <vector>

namespace snccl::topo {

// The CPU (an element of `allowed`) for local rank `localRank` of `localRanks`, or -1
// when pinning would not help: no more ranks than CPUs, or fewer than 2 CPUs.
// `allowed` is the CPUs every local rank may use (the caller checks they are unbound).
int pinnedCpuFor(int localRank, int localRanks, std::span<const int> allowed);

// The CPUs the calling thread may run on (empty when the kernel does not say).
std::vector<int> currentThreadCpus();

}  // namespace snccl::topo
