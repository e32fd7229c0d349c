// Incast control for the many-to-one patterns (AlltoAll, Gather): a receiving rank lets at
// most CollArgs::incastSenders peers send to it at once, so the bytes arriving at its link
// at any moment come from few senders instead of all of them.
//
// The credit is a grant: a one-element message from the receiver to the sender on channel
// kGrantChannel, which data never uses in these collectives. A sender's lane to a peer
// starts by receiving that peer's grant, so its data cannot enter the connection (and the
// network) before the receiver asked for it: the ring slots' own credits only bound how
// much, not from how many. A receiver runs incastSenders receive lanes; each grants one
// peer, receives that peer's whole block, then grants the next. Grants land in a scratch
// element per peer and are never read.
//
// Cross-rank invariants: every rank derives the same limit (the setting and the call's
// size, core/enqueue.cc), so both ends of each connection agree on whether a grant
// precedes the data. Grants and data travel on different channels, so each connection
// still carries one lane's messages in one order. No deadlock: a sender waits only for
// grants, and a granted block is sent by a lane of the sender's own that waits for nothing
// else.
#pragma once

#include "collectives/sched_util.h"

namespace snccl::sched {

inline constexpr uint8_t kGrantChannel = 1;

// Whether a receiver with `senders` peers sending to it limits them (0 < limit < senders).
inline bool incastLimited(const CollArgs& a, int senders) { return a.incastSenders > 0 && a.incastSenders < senders; }

// The receiver's grant to `to`: one element read from `any` (a valid input element; its
// value is not used).
inline Step mkGrant(int to, BufRef any) {
  Step s = mkSend(to, any, 1);
  s.channel = kGrantChannel;
  return s;
}

// The sender's wait for `from`'s grant, received into `slot` (a scratch element).
inline Step mkAwaitGrant(int from, BufRef slot) {
  Step s = mkRecv(from, slot, 1);
  s.channel = kGrantChannel;
  return s;
}

inline BufRef scratchRef(size_t offset) { return BufRef{kScratchBuf, offset}; }

}  // namespace snccl::sched
