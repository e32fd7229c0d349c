// Slot geometry of a communicator's connections: how many slots (credits) each ring has
// and how large they are. One function so that communicator init and `sn_info --model`
// cannot disagree.
#pragma once

#include <cstdint>
#include <string>

#include "common/params.h"
#include "common/status.h"
#include "transport/net/net.h"

namespace snccl {

struct SlotGeometry {
  uint32_t nsteps = 0;
  uint32_t slotBytes = 0;
  params::Id stepsFrom = params::Id::Steps;     // the parameters the values came from
  params::Id buffFrom = params::Id::BuffSize;
  int64_t buffBytes = 0;      // the bytes split into the slots: the user's, the net's or the table's
  bool stepsFromNet = false;  // the net's default (net::SlotDefaults), the parameter unset
  bool buffFromNet = false;
};

// A communicator whose ranks span nodes takes SNCCL_NET_STEPS x SNCCL_NET_BUFFSIZE on every
// connection (its messages cross a net, where each one costs a round of system calls and
// wake-ups over TCP, or a credit's round trip through the NIC, so fewer and larger slots
// win than on one node); an unset one takes the net's own default (`netDefaults`, from
// net::Net::slotDefaults) where it has one, else the table's. A user who set SNCCL_STEPS
// or SNCCL_BUFFSIZE (NCCL_BUFFSIZE) and not the net name gets that value, as NCCL users
// expect. One node: SNCCL_STEPS x SNCCL_BUFFSIZE. Every rank derives the same geometry
// from the same facts (the same parameters and net); connection setup checks that both
// ends agree.
Result<SlotGeometry> slotGeometry(bool spansNodes, const net::SlotDefaults& netDefaults = {});

// The SlotDefaults of the net this process uses (net::defaultNet); none when no net can be
// had, whose connections will fail and say why.
net::SlotDefaults processNetSlotDefaults();

// "SNCCL_NET_STEPS=8, SNCCL_NET_BUFFSIZE=4194304, the net's defaults": where the geometry
// came from, for logs.
std::string describe(const SlotGeometry& g);

}  // namespace snccl
