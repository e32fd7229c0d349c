// Slot geometry of a communicator's connections: how many slots (credits) each ring has
// and how large they are. One function so that communicator init and `sn_info --model`
// cannot disagree.
#pragma once

#include <cstdint>

#include "common/params.h"
#include "common/status.h"

namespace snccl {

struct SlotGeometry {
  uint32_t nsteps = 0;
  uint32_t slotBytes = 0;
  params::Id stepsFrom = params::Id::Steps;     // the parameters the values came from
  params::Id buffFrom = params::Id::BuffSize;
};

// A communicator whose ranks span nodes takes SNCCL_NET_STEPS x SNCCL_NET_BUFFSIZE on every
// connection (its messages cross TCP, where each one costs a round of system calls and
// wake-ups, so fewer and larger slots win); except that a user who set SNCCL_STEPS or
// SNCCL_BUFFSIZE (NCCL_BUFFSIZE) and not the net name gets that value, as NCCL users
// expect. One node: SNCCL_STEPS x SNCCL_BUFFSIZE. Every rank derives the same geometry
// from the same facts; connection setup checks that both ends agree.
Result<SlotGeometry> slotGeometry(bool spansNodes);

}  // namespace snccl
