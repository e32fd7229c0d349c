// Channels: one call's data split into parts that run the same algorithm side by side,
// each part on its own connections (NCCL's channels). On a GPU a channel is one thread
// block and its connections, and several are needed to fill a fast link. On the host one
// executor thread per rank serves all its channels: inside a node they only take turns,
// over TCP the kernel moves one channel's bytes while the rank serves another
// (tuning/cost_model.h, overlapChannels, says when the model picks more than one).
//
// Cross-rank invariants: every rank splits with the same arguments into the same parts,
// and part c of every rank uses channel c's connections only, so the per-(peer, channel)
// FIFO matching of schedule.h holds part by part. Part c covers elements [begin(c),
// begin(c+1)) of every block (the one block of AllReduce/Broadcast/Reduce; each rank's
// block of AllGather's output and ReduceScatter's input).
#pragma once

#include <cstddef>

#include "collectives/algorithm.h"
#include "collectives/schedule.h"
#include "common/status.h"

namespace snccl {

// AllReduce, Broadcast, Reduce, AllGather and ReduceScatter can be split; the others
// (AlltoAll, Gather, Scatter, send/recv) always run on one channel.
bool channelSplittable(CollKind coll);

// The channels a call with these arguments actually uses: args.channels clamped to
// [1, kMaxChannels], 1 when the collective cannot be split, and at most one channel per
// element.
int effectiveChannels(const CollArgs& args);

// First element of part c (0 <= c <= parts) of a block of `count` elements. Parts are
// multiples of 16 elements (whole vectors for the kernels) except the last, when count
// allows it.
size_t channelPartBegin(size_t count, int parts, int c);

// This rank's schedule for `args`: `algo`'s own when effectiveChannels(args) == 1 or
// algo.readsPeers (one PeerFold per rank, no connection to split),
// otherwise the parts' schedules (generated with channels = 1 and the part's count) merged
// into one: their steps on channel c, their offsets moved to the part's place in the
// call's buffers, their scratch buffers laid end to end, their lanes side by side.
Status generateSchedule(const AlgorithmDef& algo, const CollArgs& args, const ChannelPlan& plan, Schedule* out);

}  // namespace snccl
