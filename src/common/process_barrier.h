// An asymmetric fence between the processes of one host (membarrier(2)).
//
// A ring publishes a message with a store and then checks whether the receiver sleeps; the
// receiver announces its sleep with a store and then re-checks the ring. Each side's
// store must be visible before its load, or both can miss each other (a lost wake-up).
// A full fence on both sides does that, but on the publishing side it stalls every
// message for the cache-line transfer of the data it just wrote (~30-90 ns of a 0.5 us
// 8-byte AllReduce here). processBarrier() moves the cost to the rare side: called by the
// thread about to sleep, it returns only after every thread of every registered process
// on this host has executed a full fence, so a publisher needs only a compiler barrier
// between its store and its load (transport/connection.h says where rings use it).
#pragma once

namespace snccl {

// Registers this process as a target of processBarrier() (idempotent; the kernel keeps
// the registration for the life of the address space, a fork() child must register
// again). False when the kernel or a seccomp filter refuses: then neither this process
// nor its peers may rely on it, and rings keep full fences on both sides.
bool registerProcessBarrier();

// Full fence on every CPU running a thread of a registered process. Costs a system call
// plus an inter-processor interrupt per such CPU (1-70 us on a virtual machine). False on failure,
// in which case nothing is guaranteed and the caller must not sleep relying on it.
bool processBarrier();

}  // namespace snccl
