// The selector: per call, the algorithm, chunk size, protocol and channel count, from the
// cost model (cost_model.h) and the SNCCL_ALGO / SNCCL_PROTO overrides (algo_spec.h).
//
// Cross-rank invariant: a decision depends only on the Tuner (node structure from
// ChannelPlan::hosts and the peers' process tokens, slot bytes, parameters: the same on
// every rank), the collective and its byte count (NCCL requires the same count on every
// rank), never on local measurements, so every rank picks the same schedule. Parameters
// are process-wide; like NCCL, snccl expects the same SNCCL_ALGO on every rank. The
// channel range is the exception that ranks may set differently (per-rank environment or
// ncclConfig_t): the communicator agrees on one at init (agreeChannels) before any call.
//
// Cost: select() allocates nothing and reads no environment; it evaluates the formulas
// of the few algorithms of one collective at up to 4 chunk sizes, times up to 5 channel
// counts where the model can gain from channels (channelCandidates), else just one.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/tuning/algo_spec.h"
#include "collectives/tuning/cost_model.h"

namespace snccl::tuning {

struct Decision {
  const AlgorithmDef* algo = nullptr;
  size_t chunkBytes = 0;     // <= slot bytes
  double predictedUs = -1;   // negative: the model has no formula for algo
  bool forced = false;       // SNCCL_ALGO narrowed the choice
  const char* proto = "Simple";  // the only host protocol (slots and credits)
  int channels = 1;          // parts the data is split into, each on its own connections (channels.h)
};

// SNCCL_ALGO and SNCCL_PROTO, parsed once per process (the parameter registry reads each
// variable once); syntax errors, ignored NCCL names and LL/LL128-only choices are warned
// about once, here.
struct Overrides {
  AlgoSpec algo;
  ProtoSpec proto;
  // SNCCL_MIN_NCHANNELS / SNCCL_MAX_NCHANNELS: the model picks a channel count in
  // [minChannels, maxChannels] (1 <= min <= max <= kMaxChannels).
  int minChannels = 1;
  int maxChannels = kMaxChannels;
};
const Overrides& processOverrides();
// The same from given texts, warnings returned instead of logged (tests, sn_sim).
Overrides parseOverrides(const std::string& algo, const std::string& proto, std::vector<std::string>* warnings);
// Sets the channel range from SNCCL_MIN/MAX_NCHANNELS values, clamped (with a warning)
// to 1 <= min <= max <= kMaxChannels.
void setChannelRange(int64_t minChannels, int64_t maxChannels, Overrides* o, std::vector<std::string>* warnings);

struct ChannelRange {
  int min = 1;
  int max = kMaxChannels;
};
// The channel range this rank asks for: SNCCL_MIN/MAX_NCHANNELS where set (as in NCCL, the
// environment wins, also over the other bound of the config), else the communicator's
// ncclConfig_t minCTAs/maxCTAs (0: not given; NCCL allows up to 64), else 1..kMaxChannels;
// always 1 <= min <= max <= kMaxChannels. `envMinSet`/`envMaxSet` say which variables are
// set (params::isSet); `env` holds their clamped values (processOverrides()).
ChannelRange localChannelRange(const Overrides& env, bool envMinSet, bool envMaxSet, int cfgMin, int cfgMax);
// The range every rank of a communicator uses, from each rank's localChannelRange (they
// travel in the peers' table, so every rank computes the same): the largest minimum and
// the smallest maximum, or the largest minimum alone where they cross. Ranks must agree,
// because both ends of a connection must split a call into the same channels.
ChannelRange agreeChannels(std::span<const ChannelRange> perRank);

// Everything the selector needs about one communicator; immutable after init.
struct Tuner {
  CommShape shape;
  ModelParams params;
  size_t slotBytes = 0;
  Overrides over;
  bool logCalls = false;  // per-call TUNING lines (one rank per communicator logs them)
};

Tuner makeTuner(const CommShape& shape, size_t slotBytes, const ModelParams& params, const Overrides& over);
// At communicator init: the shape from the peers' tables, host constants, process
// overrides with the agreed channel range (agreeChannels); logs the decision tables
// (INFO, TUNING) when `logTables`. singleCopyBytes: SNCCL_SINGLE_COPY_BYTES where the
// ranks map each other's buffers (CommSingleCopy::mappable), else 0 (CommShape::singleCopyBytes).
Tuner commTuner(int nranks, std::span<const uint64_t> hosts, std::span<const uint64_t> procs,
                std::span<const int> cpus, size_t slotBytes, bool logTables, ChannelRange channels = {},
                size_t singleCopyBytes = 0);

// The single-copy AllReduce ("single", AlgorithmDef::readsPeers) is a candidate only where
// singleCopyApplies (cost_model.h): a mappable communicator, at or above the threshold.
// There it competes by its prediction like the others; when the threshold is below its
// default (kSingleCopyDefaultBytes) it is taken whenever SNCCL_ALGO allows it, so a
// lowered SNCCL_SINGLE_COPY_BYTES means what it always did. SNCCL_ALGO=single forces it
// where it applies; elsewhere the forced set is empty and the model decides (as for any
// forced algorithm that cannot run); SNCCL_ALGO=^single forbids it.
Decision select(const Tuner& t, CollKind coll, size_t bytes);
// The same without algorithms that read peers' buffers: what the executor runs when some
// rank cannot map a peer's buffers for a call the selector gave the single copy.
Decision selectWithoutPeerReads(const Tuner& t, CollKind coll, size_t bytes);

// Chunk sizes the selector considers: the slot, then halves down to 4 KiB (at most 4).
int chunkCandidates(size_t slotBytes, size_t out[4]);
// Channel counts the selector considers for `coll`: min, the powers of two between, max
// (just 1 for collectives that are not split, channels.h). At most 6.
int channelCandidates(const Overrides& o, CollKind coll, int out[6]);
// The same for a tuner: only the minimum where its model gives channels nothing but their
// cost (no link limits one channel's rate and the shape's limiting link overlaps none).
int channelCandidates(const Tuner& t, CollKind coll, int out[6]);

// One algorithm's best prediction over the candidate chunk sizes and channel counts, ties
// to the larger chunk and the fewer channels (what select() compares across algorithms,
// and what the tables print). us < 0: the model has no formula for it or it does not
// apply to the shape; chunkBytes is then the slot and channels the minimum.
struct AlgoBest {
  double us = -1;
  size_t chunkBytes = 0;
  int channels = 1;
};
AlgoBest bestFor(const Tuner& t, std::string_view name, CollKind coll, size_t bytes);

// The last decision per collective and power-of-two size class of one communicator, so
// TUNING logs a call's decision only when it differs from the last one of its class: a
// training loop logs each shape once, and the small calls a benchmark interleaves with its
// sweep do not make every call look like a change.
struct DecisionLog {
  static constexpr int kClasses = 64;  // floor(log2(bytes)) + 1; class 0 = 0 bytes
  std::atomic<uint32_t> last[kCollKinds][kClasses];
  DecisionLog() {
    for (auto& row : last)
      for (auto& l : row) l.store(0, std::memory_order_relaxed);
  }
};
Decision selectAndLog(const Tuner& t, CollKind coll, size_t bytes, DecisionLog* log);

// The decision table: per size (8 B .. 1 GiB) the prediction of every fitting algorithm
// and the pick. Lines without a trailing newline; the first is the header.
std::vector<std::string> decisionTable(const Tuner& t, CollKind coll);
// Collectives with more than one registered algorithm.
std::vector<CollKind> tunedCollectives();
// A line describing the tuner's shape and link parameters.
std::string describeTuner(const Tuner& t);
// The sizes of the tables.
std::span<const size_t> tableSizes();
// "8", "64K", "1G"
std::string sizeLabel(size_t bytes);

}  // namespace snccl::tuning
