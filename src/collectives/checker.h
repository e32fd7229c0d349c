// Symbolic checker: runs the schedules of every rank of a collective (or of a group of
// send/recv calls) without moving data, and proves the result is what NCCL defines.
//
// Every element is a symbolic value: the number of input contributions it carries, the
// sum of a 64-bit hash of each contribution's origin (rank, buffer, index), how many
// times PreMulSum scaling reached it, and whether the op's post-processing (Avg's
// divide) was applied. Steps copy and add these values exactly as the executor moves and
// reduces data. Connections are FIFOs of `slots` messages per ordered pair of ranks; a
// send blocks when full, a receive when empty; lanes progress independently.
//
// Reported as errors (Status with a precise message naming rank, lane, step, element):
//  * deadlock (which lanes wait on what), messages sent but never received;
//  * a receive whose count differs from the matching message, chunk > chunkElems,
//    zero-count steps, peers out of range, two lanes of a rank on one connection;
//  * buffer bounds, declared buffer sizes other than NCCL's, writes to an input buffer,
//    partially overlapping src/dst in one step, two lanes touching the same element
//    without ordering (one of them writing);
//  * an output element that differs from the expected value (in-place aliasing modelled:
//    Input and Output share storage with NCCL's offset), an input contribution entering
//    a sum twice, a value finalized twice, reduced after finalization, finalized while
//    partial, or a reduction output that is never finalized.
//  * PeerFold steps (schedule.h): a rank that never reaches the barrier every rank's fold
//    waits in (deadlock), a fold in a schedule of several lanes, two folds of one barrier
//    where one writes an element the other reads or writes (in-place aliasing modelled),
//    a range outside some rank's buffer.
// Cost: O(total steps + total elements); 1024 ranks with small counts run in about a second.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/schedule.h"
#include "common/status.h"

namespace snccl {

struct CheckStats {
  uint64_t steps = 0;     // steps executed over all ranks
  uint64_t messages = 0;  // messages delivered
  uint64_t elements = 0;  // elements carried by those messages
};

struct CheckOptions {
  int slots = 8;          // messages one connection holds (SNCCL_STEPS)
  int maxReported = 8;    // stuck lanes / wrong elements named in one message
  CheckStats* stats = nullptr;  // filled when set
};

// Produces rank `rank`'s schedule into `out` (for tests that alter a real generator).
using RankGenerator = std::function<Status(int rank, Schedule* out)>;

// Checks `algo` on the collective `args` describes (args.rank is ignored: every rank
// 0..nranks-1 is generated from the same args and plan).
Status checkAlgorithm(const AlgorithmDef& algo, const CollArgs& args, const ChannelPlan& plan = {},
                      const CheckOptions& opts = {});
Status checkCollective(const CollArgs& args, const RankGenerator& gen, const CheckOptions& opts = {});

// Grouped send/recv: opsPerRank[r] lists rank r's calls in call order (its size is the
// number of ranks). The k-th send from a to b must meet the k-th receive of b from a
// with the same count; then buildP2PSchedule's schedules (or `gen`'s) are run and every
// receive buffer must hold exactly the matching send buffer.
Status checkP2P(std::span<const std::vector<P2POp>> opsPerRank, size_t chunkElems,
                const CheckOptions& opts = {});
Status checkP2PWith(std::span<const std::vector<P2POp>> opsPerRank, size_t chunkElems,
                    const RankGenerator& gen, const CheckOptions& opts = {});

}  // namespace snccl
