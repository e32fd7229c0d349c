// The selector (selector.h): overrides parsed once, the per-call pick, the change log.
#include "collectives/tuning/selector.h"

#include <algorithm>

#include "collectives/channels.h"
#include "common/log.h"
#include "common/params.h"

namespace snccl::tuning {

namespace {

// Whether `a` can run this call: the rank limit, and for an algorithm that reads peers'
// buffers a communicator whose ranks map them and a size at or above the threshold.
bool fits(const AlgorithmDef& a, const CommShape& shape, size_t bytes, bool peerReads) {
  if (a.readsPeers && (!peerReads || !singleCopyApplies(shape, bytes))) return false;
  return a.maxRanks == 0 || shape.nranks <= a.maxRanks;
}

// Candidates for `coll`: the algorithms SNCCL_ALGO allows that fit; when none fits (a
// forced name that does not implement this collective or size, or cannot run on this
// communicator), every fitting one. `peerReads` false: none that reads peers' buffers.
uint64_t candidates(const Tuner& t, CollKind coll, size_t bytes, bool peerReads, bool* forced) {
  std::span<const AlgorithmDef> algos = algorithms();
  const int k = static_cast<int>(coll);
  uint64_t fitting = 0;
  for (size_t i = 0; i < algos.size() && i < 64; ++i)
    if (algos[i].coll == coll && fits(algos[i], t.shape, bytes, peerReads)) fitting |= uint64_t(1) << i;
  const uint64_t allowed = fitting & t.over.algo.allowed[k];
  *forced = t.over.algo.restricted[k] && allowed != 0;
  return allowed != 0 ? allowed : fitting;
}

}  // namespace

Overrides parseOverrides(const std::string& algo, const std::string& proto, std::vector<std::string>* warnings) {
  Overrides o;
  Status st = parseAlgoSpec(algo, &o.algo);
  if (!st.ok())
    warnings->push_back(format("SNCCL_ALGO/NCCL_ALGO=\"%s\" is not valid (%s); the cost model decides", algo.c_str(),
                               st.message().c_str()));
  else if (!o.algo.ignored.empty())
    warnings->push_back(format("SNCCL_ALGO/NCCL_ALGO: %s not available on host memory; ignored", o.algo.ignored.c_str()));
  st = parseProtoSpec(proto, &o.proto);
  if (!st.ok())
    warnings->push_back(format("SNCCL_PROTO/NCCL_PROTO=\"%s\" is not valid (%s); using Simple", proto.c_str(),
                               st.message().c_str()));
  else if (o.proto.any)
    warnings->push_back(format("SNCCL_PROTO/NCCL_PROTO=\"%s\": LL and LL128 are GPU protocols, not implemented on "
                               "host memory; using Simple",
                               proto.c_str()));
  return o;
}

void setChannelRange(int64_t minChannels, int64_t maxChannels, Overrides* o, std::vector<std::string>* warnings) {
  const int64_t lo = std::clamp<int64_t>(minChannels, 1, kMaxChannels);
  const int64_t hi = std::clamp<int64_t>(maxChannels, lo, kMaxChannels);
  if (lo != minChannels || hi != maxChannels)
    warnings->push_back(format("SNCCL_MIN_NCHANNELS=%lld / SNCCL_MAX_NCHANNELS=%lld: using %lld..%lld (1 <= min <= "
                               "max <= %d)",
                               (long long)minChannels, (long long)maxChannels, (long long)lo, (long long)hi,
                               kMaxChannels));
  o->minChannels = int(lo);
  o->maxChannels = int(hi);
}

const Overrides& processOverrides() {
  // Immutable once built, like the parameter registry it is derived from.
  static const Overrides over = [] {
    std::vector<std::string> warnings;
    Overrides o = parseOverrides(params::getString(params::Id::Algo), params::getString(params::Id::Proto), &warnings);
    setChannelRange(params::getInt(params::Id::MinNchannels), params::getInt(params::Id::MaxNchannels), &o,
                    &warnings);
    for (const std::string& w : warnings) SN_WARN("%s", w.c_str());
    return o;
  }();
  return over;
}

Tuner makeTuner(const CommShape& shape, size_t slotBytes, const ModelParams& params, const Overrides& over) {
  Tuner t;
  t.shape = shape;
  t.params = params;
  t.slotBytes = slotBytes;
  t.over = over;
  return t;
}

ChannelRange localChannelRange(const Overrides& env, bool envMinSet, bool envMaxSet, int cfgMin, int cfgMax) {
  // Config values beyond what the host runtime runs are clamped quietly.
  int lo = envMinSet ? env.minChannels : (cfgMin > 0 ? std::min(cfgMin, kMaxChannels) : 1);
  int hi = envMaxSet ? env.maxChannels : (cfgMax > 0 ? std::min(cfgMax, kMaxChannels) : kMaxChannels);
  if (lo > hi) {  // the environment's bound wins over the config's other one
    if (envMaxSet && !envMinSet) lo = hi;
    else hi = lo;
  }
  lo = std::clamp(lo, 1, kMaxChannels);
  return {lo, std::clamp(hi, lo, kMaxChannels)};
}

ChannelRange agreeChannels(std::span<const ChannelRange> perRank) {
  ChannelRange r{1, kMaxChannels};
  for (const ChannelRange& c : perRank) {
    r.min = std::max(r.min, c.min);
    r.max = std::min(r.max, c.max);
  }
  r.min = std::clamp(r.min, 1, kMaxChannels);
  r.max = std::max(r.min, std::min(r.max, kMaxChannels));
  return r;
}

Tuner commTuner(int nranks, std::span<const uint64_t> hosts, std::span<const uint64_t> procs,
                std::span<const int> cpus, size_t slotBytes, bool logTables, ChannelRange channels,
                size_t singleCopyBytes) {
  Overrides over = processOverrides();
  over.minChannels = channels.min;
  over.maxChannels = channels.max;
  CommShape shape = shapeFromHosts(nranks, hosts, procs, cpus);
  shape.singleCopyBytes = shape.nnodes == 1 ? singleCopyBytes : 0;
  Tuner t = makeTuner(shape, slotBytes, hostDefaults(), over);
  t.logCalls = logTables;
  if (logTables && log::enabled(log::kInfo, log::kTuning)) {
    SN_INFO(log::kTuning, "%s", describeTuner(t).c_str());
    for (CollKind c : tunedCollectives())
      for (const std::string& line : decisionTable(t, c)) SN_INFO(log::kTuning, "%s", line.c_str());
  }
  return t;
}

int chunkCandidates(size_t slotBytes, size_t out[4]) {
  int n = 0;
  out[n++] = slotBytes;
  for (size_t c = slotBytes / 2; n < 4 && c >= 4096; c /= 2) out[n++] = c;
  return n;
}

int channelCandidates(const Overrides& o, CollKind coll, int out[6]) {
  int n = 0;
  if (!channelSplittable(coll)) {
    out[n++] = 1;
    return n;
  }
  out[n++] = o.minChannels;
  for (int c = 2; c < o.maxChannels && n < 5; c *= 2)
    if (c > o.minChannels) out[n++] = c;
  if (o.maxChannels > o.minChannels) out[n++] = o.maxChannels;
  return n;
}

int channelCandidates(const Tuner& t, CollKind coll, int out[6]) {
  bool limited = false;
  for (const LinkParams& l : t.params.link) limited |= l.chanBwGBps > 0;
  if (!limited && t.params.of(t.shape.worst()).overlapChannels <= 1) {
    out[0] = channelSplittable(coll) ? t.over.minChannels : 1;
    return 1;
  }
  return channelCandidates(t.over, coll, out);
}

AlgoBest bestFor(const Tuner& t, std::string_view name, CollKind coll, size_t bytes) {
  size_t chunks[4];
  int channels[6];
  const int nchunks = chunkCandidates(t.slotBytes, chunks);
  int nchannels = channelCandidates(t, coll, channels);
  // The algorithm that reads peers' buffers is one PeerFold per rank: never split.
  static const AlgorithmDef* const peerReads = [] {
    for (const AlgorithmDef& a : algorithms())
      if (a.readsPeers) return &a;
    return static_cast<const AlgorithmDef*>(nullptr);
  }();
  if (peerReads != nullptr && coll == peerReads->coll && name == peerReads->name) channels[0] = 1, nchannels = 1;
  AlgoBest b{-1, t.slotBytes, channels[0]};
  // Strict <: ties go to the larger chunk and the fewer channels.
  for (int c = 0; c < nchunks; ++c) {
    for (int k = 0; k < nchannels; ++k) {
      const double us = predictUs(name, coll, t.shape, bytes, chunks[c], t.params, channels[k]);
      if (us < 0) return b;  // no formula, or it does not apply: the same for every candidate
      if (b.us < 0 || us < b.us) b = {us, chunks[c], channels[k]};
    }
  }
  return b;
}

namespace {

Decision selectFrom(const Tuner& t, CollKind coll, size_t bytes, bool peerReads) {
  Decision d;
  d.chunkBytes = t.slotBytes;
  d.channels = channelSplittable(coll) ? t.over.minChannels : 1;
  const uint64_t cand = candidates(t, coll, bytes, peerReads, &d.forced);
  std::span<const AlgorithmDef> algos = algorithms();
  // A single-copy threshold below its default is the user's crossover, which the model
  // does not know: at or above it the single copy runs whenever SNCCL_ALGO allows it, as
  // the threshold promises (candidates() only offers it there).
  if (t.shape.singleCopyBytes < kSingleCopyDefaultBytes) {
    for (size_t i = 0; i < algos.size() && i < 64; ++i) {
      if (!(cand >> i & 1) || !algos[i].readsPeers) continue;
      const AlgoBest b = bestFor(t, algos[i].name, coll, bytes);
      d.algo = &algos[i];
      d.predictedUs = b.us;
      d.chunkBytes = b.chunkBytes;
      d.channels = b.channels;
      return d;
    }
  }
  // Strict < in table order: ties go to the earlier algorithm (then, inside bestFor, the
  // larger chunk and the fewer channels), the same on every rank.
  for (size_t i = 0; i < algos.size() && i < 64; ++i) {
    if (!(cand >> i & 1)) continue;
    if (d.algo == nullptr) d.algo = &algos[i];  // no formula at all: the first candidate
    const AlgoBest b = bestFor(t, algos[i].name, coll, bytes);
    if (b.us >= 0 && (d.predictedUs < 0 || b.us < d.predictedUs)) {
      d.algo = &algos[i];
      d.predictedUs = b.us;
      d.chunkBytes = b.chunkBytes;
      d.channels = b.channels;
    }
  }
  return d;
}

}  // namespace

Decision select(const Tuner& t, CollKind coll, size_t bytes) { return selectFrom(t, coll, bytes, true); }

Decision selectWithoutPeerReads(const Tuner& t, CollKind coll, size_t bytes) {
  return selectFrom(t, coll, bytes, false);
}

Decision selectAndLog(const Tuner& t, CollKind coll, size_t bytes, DecisionLog* dlog) {
  Decision d = select(t, coll, bytes);
  if (d.algo == nullptr || !t.logCalls || !log::enabled(log::kInfo, log::kTuning)) return d;
  int cls = 0;
  for (size_t b = bytes; b != 0 && cls < DecisionLog::kClasses - 1; b >>= 1) ++cls;
  int shift = 0;
  while (shift < 40 && (size_t(1) << shift) < d.chunkBytes) ++shift;
  const uint32_t key = uint32_t(d.algo - algorithms().data() + 1) | uint32_t(shift) << 16 | uint32_t(d.channels) << 24;
  std::atomic<uint32_t>& last = dlog->last[static_cast<int>(coll)][cls];
  if (last.exchange(key, std::memory_order_relaxed) == key) return d;
  SN_INFO(log::kTuning, "%s %zu bytes -> %s, chunk %zu B, protocol %s, %d channel%s, predicted %.1f us%s",
          collName(coll), bytes, d.algo->name, d.chunkBytes, d.proto, d.channels, d.channels == 1 ? "" : "s",
          d.predictedUs, d.forced ? " (SNCCL_ALGO)" : "");
  return d;
}

}  // namespace snccl::tuning
