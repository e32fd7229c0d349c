// What every System a reader returns must satisfy, checked by the topology harnesses: the
// caps of topology/limits.h, a consistent tree, endpoint lists and paths that agree with
// the nodes, and a NCCL XML round trip that reads back.
#pragma once

#include "topology/system.h"

namespace snccl::fuzz {

// Aborts (FUZZ_CHECK) on the first broken invariant.
void checkSystem(const topo::System& sys);

// writeNcclXml(sys) reads back; when `exact`, into a System equal to sys (true for
// Systems read from NCCL XML: the format has no element for what it leaves out).
void checkNcclRoundTrip(const topo::System& sys, bool exact);

}  // namespace snccl::fuzz
