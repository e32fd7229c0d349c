// Symbolic execution of schedules: static validation, storage layout with in-place
// aliasing, FIFO connections with bounded slots and a lane scheduler that detects
// deadlock. See checker.h for what is reported.
#include "collectives/checker_sim.h"

#include <algorithm>

#include "collectives/sched_util.h"

namespace snccl::check {

namespace {

constexpr uint32_t kNoFifo = UINT32_MAX;
constexpr uint8_t kFlagFinal = 1, kFlagScale = 2;
constexpr int kRankBits = 20, kBufBits = 16, kIdxBits = 28;
constexpr uint64_t kSalt = 0x5bd1e9955bd1e995ull;
constexpr uint64_t kMul1 = 0xbf58476d1ce4e5b9ull, kMul2 = 0x94d049bb133111ebull;

constexpr uint64_t inverse(uint64_t c) {  // of an odd number modulo 2^64 (Newton)
  uint64_t x = c;
  for (int i = 0; i < 6; ++i) x *= 2 - c * x;
  return x;
}
uint64_t unshift(uint64_t z, int s) {  // inverse of z ^ (z >> s)
  uint64_t x = z;
  for (int i = 0; i < 64 / s + 1; ++i) x = z ^ (x >> s);
  return x;
}
// splitmix64's finalizer: a bijection, so sums of mixes are well spread and one mix decodes.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * kMul1;
  z = (z ^ (z >> 27)) * kMul2;
  return z ^ (z >> 31);
}
uint64_t unmix(uint64_t z) {
  z = unshift(z, 31) * inverse(kMul2);
  z = unshift(z, 27) * inverse(kMul1);
  return unshift(z, 30);
}

const char* roleName(BufRole r) {
  switch (r) {
    case BufRole::kInput: return "Input";
    case BufRole::kOutput: return "Output";
    case BufRole::kScratch: return "Scratch";
  }
  return "?";
}

std::string stepText(const Step& st) {
  std::string t = format("%s of %zu", primName(st.prim), st.count);
  if (sched::primReceives(st.prim)) t += format(" from rank %d", st.recvPeer);
  if (sched::primSends(st.prim)) t += format(" to rank %d", st.sendPeer);
  if (st.channel != 0) t += format(" on channel %u", unsigned(st.channel));
  return st.final ? t + " (final)" : t;
}

}  // namespace

Sym origin(int rank, uint32_t buf, size_t idx) {
  const uint64_t packed = (static_cast<uint64_t>(rank) << (kBufBits + kIdxBits)) |
                          (static_cast<uint64_t>(buf) << kIdxBits) | static_cast<uint64_t>(idx);
  return Sym{mix(packed ^ kSalt), 1, 0};
}

bool decodeOrigin(const Sym& v, int* rank, uint32_t* buf, size_t* idx) {
  if (v.n != 1) return false;
  const uint64_t z = unmix(v.hash) ^ kSalt;
  *rank = static_cast<int>(z >> (kBufBits + kIdxBits));
  *buf = static_cast<uint32_t>((z >> kIdxBits) & ((1u << kBufBits) - 1));
  *idx = static_cast<size_t>(z & ((uint64_t{1} << kIdxBits) - 1));
  return true;
}

Sim::Sim(int nranks, size_t chunkElems, const CheckOptions& opts)
    : n_(nranks), chunk_(chunkElems), opts_(opts), ranks_(static_cast<size_t>(nranks)) {
  if (n_ <= 2048) dense_.assign(static_cast<size_t>(n_) * static_cast<size_t>(n_), kNoFifo);
}

Status Sim::layout(int r, const Schedule& s, const Alias& alias) {
  RankMem& m = ranks_[static_cast<size_t>(r)];
  m.bufs = s.bufs;
  m.reduces = s.reduces;
  m.collective = s.coll != CollKind::kSendRecv;
  m.base.assign(s.bufs.size(), 0);
  if (s.bufs.size() > (size_t{1} << kBufBits)) return InternalError("rank %d: too many buffers", r);
  if (alias.on && (alias.inner >= s.bufs.size() || alias.outer >= s.bufs.size() ||
                   alias.offset + s.bufs[alias.inner].elems > s.bufs[alias.outer].elems)) {
    return InternalError("rank %d: in-place buffers do not fit the declared sizes", r);
  }
  size_t total = 0;
  for (size_t b = 0; b < s.bufs.size(); ++b) {
    if (s.bufs[b].elems >= (size_t{1} << kIdxBits)) {
      return InternalError("rank %d: buffer %zu of %zu elements is too large for the checker", r, b,
                           s.bufs[b].elems);
    }
    if (alias.on && b == alias.inner) continue;
    m.base[b] = total;
    total += s.bufs[b].elems;
  }
  if (total >= UINT32_MAX) return InternalError("rank %d: buffers too large for the checker", r);
  if (alias.on) m.base[alias.inner] = m.base[alias.outer] + alias.offset;
  m.vals.resize(total);
  for (size_t b = 0; b < s.bufs.size(); ++b) {
    if (alias.on && b == alias.inner) continue;
    for (size_t i = 0; i < s.bufs[b].elems; ++i) m.vals[m.base[b] + i] = origin(r, static_cast<uint32_t>(b), i);
  }
  // Shared storage holds what the user put in the input buffer.
  for (size_t b = 0; b < s.bufs.size(); ++b) {
    if (s.bufs[b].role != BufRole::kInput) continue;
    for (size_t i = 0; i < s.bufs[b].elems; ++i) m.vals[m.base[b] + i] = origin(r, static_cast<uint32_t>(b), i);
  }
  return OkStatus();
}

Status Sim::addRank(int r, const Schedule& s, const Alias& alias) {
  SNCCL_TRY(layout(r, s, alias));
  RankMem& m = ranks_[static_cast<size_t>(r)];
  m.firstLane = static_cast<uint32_t>(lanes_.size());
  m.nLanes = static_cast<uint32_t>(s.lanes.size());
  if (m.nLanes > 1) m.tags.assign(m.vals.size(), -1);
  size_t total = 0;
  for (const Lane& lane : s.lanes) total += lane.steps.size();
  m.steps.reserve(total);  // exact: no regrowth of the largest structure
  for (size_t l = 0; l < s.lanes.size(); ++l) {
    const uint32_t laneId = static_cast<uint32_t>(lanes_.size());
    LaneRun run{static_cast<uint32_t>(r), static_cast<uint32_t>(l), m.steps.size(), m.steps.size(), 0};
    const std::vector<Step>& steps = s.lanes[l].steps;
    for (size_t i = 0; i < steps.size(); ++i) SNCCL_TRY(addStep(r, laneId, s, l, i));
    run.end = m.steps.size();
    lanes_.push_back(run);
  }
  return OkStatus();
}

Status Sim::checkRef(int r, const Schedule& s, const Step& st, const BufRef& ref, bool isDst,
                     uint32_t* pos) const {
  const RankMem& m = ranks_[static_cast<size_t>(r)];
  const char* what = isDst ? "dst" : "src";
  if (ref.buf >= s.bufs.size()) return InternalError("%s buffer %u does not exist", what, ref.buf);
  const BufDesc& d = s.bufs[ref.buf];
  if (isDst && d.role == BufRole::kInput) {
    return InternalError("writes to the Input buffer %u (input buffers are read-only; in place, write the Output)",
                         ref.buf);
  }
  if (ref.offset > d.elems || st.count > d.elems - ref.offset) {
    return InternalError("%s %s[%zu..%zu) is out of bounds (%zu elements)", what, roleName(d.role), ref.offset,
                         ref.offset + st.count, d.elems);
  }
  *pos = static_cast<uint32_t>(m.base[ref.buf] + ref.offset);
  return OkStatus();
}

uint32_t Sim::fifoFor(int from, int to, int channel) {
  const uint64_t key = static_cast<uint64_t>(from) * static_cast<uint64_t>(n_) + static_cast<uint64_t>(to) +
                       static_cast<uint64_t>(channel) * static_cast<uint64_t>(n_) * static_cast<uint64_t>(n_);
  uint32_t* slot = nullptr;
  if (channel == 0 && !dense_.empty()) {
    slot = &dense_[key];
  } else {
    slot = &fifoIndex_.try_emplace(key, kNoFifo).first->second;
  }
  if (*slot == kNoFifo) {
    *slot = static_cast<uint32_t>(fifos_.size());
    fifos_.emplace_back();
    fifos_.back().from = from;
    fifos_.back().to = to;
  }
  return *slot;
}

// Resolves one step, or says precisely why it is malformed.
Status Sim::addStep(int r, uint32_t laneId, const Schedule& s, size_t lane, size_t idx) {
  const Step& st = s.lanes[lane].steps[idx];
  Status bad = OkStatus();
  CStep c{0, 0, static_cast<uint32_t>(st.count), kNoFifo, kNoFifo, 0, 0, static_cast<uint8_t>(st.prim),
          static_cast<uint8_t>(st.final ? kFlagFinal : 0)};
  const bool conn = sched::primReceives(st.prim) || sched::primSends(st.prim);
  if (static_cast<uint8_t>(st.prim) > static_cast<uint8_t>(Prim::kPeerFold)) {
    bad = InternalError("unknown prim %u", static_cast<unsigned>(st.prim));
  } else if (st.prim == Prim::kPeerFold && s.lanes.size() != 1) {
    bad = InternalError("PeerFold in a schedule of %zu lanes (its barriers order only its own lane)", s.lanes.size());
  } else if (st.prim == Prim::kPeerFold && s.coll == CollKind::kSendRecv) {
    bad = InternalError("PeerFold in a send/recv schedule");
  } else if (st.count == 0 && st.prim != Prim::kPeerFold) {
    bad = InternalError("zero-count step (generators must skip empty chunks on every rank alike)");
  } else if (conn && st.count > chunk_) {
    bad = InternalError("message of %zu elements exceeds chunkElems %zu", st.count, chunk_);
  } else if (st.final && !s.reduces) {
    bad = InternalError("final step in a schedule that does not reduce");
  }
  for (int dir = 0; dir < 2 && bad.ok(); ++dir) {
    const bool send = dir == 1;
    if (send ? !sched::primSends(st.prim) : !sched::primReceives(st.prim)) continue;
    const int peer = send ? st.sendPeer : st.recvPeer;
    if (peer < 0 || peer >= n_ || peer == r) {
      bad = InternalError("%s peer %d is not another rank of %d", send ? "send" : "receive", peer, n_);
      break;
    }
    if (st.channel >= kMaxChannels) {
      bad = InternalError("channel %u is not below %d", unsigned(st.channel), kMaxChannels);
      break;
    }
    const uint32_t f = send ? fifoFor(r, peer, st.channel) : fifoFor(peer, r, st.channel);
    int32_t& owner = send ? fifos_[f].sendLane : fifos_[f].recvLane;
    if (owner >= 0 && owner != static_cast<int32_t>(laneId)) {
      bad = InternalError(
          "lanes %u and %zu both %s rank %d on channel %u (one connection per peer, channel and direction per lane)",
          lanes_[static_cast<size_t>(owner)].lane, lane, send ? "send to" : "receive from", peer,
          unsigned(st.channel));
      break;
    }
    owner = static_cast<int32_t>(laneId);
    (send ? c.sendFifo : c.recvFifo) = f;
  }
  if (bad.ok() && sched::primReadsSrc(st.prim)) {
    bad = checkRef(r, s, st, st.src, false, &c.srcPos);
    c.srcBuf = st.src.buf;
    if (bad.ok() && s.reduces && s.bufs[st.src.buf].role == BufRole::kInput) c.flags |= kFlagScale;
  }
  if (bad.ok() && sched::primWritesDst(st.prim)) {
    bad = checkRef(r, s, st, st.dst, true, &c.dstPos);
    c.dstBuf = st.dst.buf;
  }
  if (bad.ok() && sched::primReadsSrc(st.prim) && sched::primWritesDst(st.prim) && c.srcPos != c.dstPos &&
      c.srcPos < c.dstPos + c.count && c.dstPos < c.srcPos + c.count) {
    bad = InternalError("src and dst overlap partially (only identical ranges may alias)");
  }
  if (!bad.ok()) {
    return bad.addContext(format("rank %d lane %zu step %zu (%s)", r, lane, idx, stepText(st).c_str()));
  }
  ranks_[static_cast<size_t>(r)].steps.push_back(c);
  return OkStatus();
}

Status Sim::run() {
  uint32_t maxLanes = 0;
  for (const RankMem& m : ranks_) maxLanes = std::max(maxLanes, m.nLanes);
  // Round-robin start (lane 0 of every rank, then lane 1, ...) keeps few messages queued.
  for (uint32_t l = 0; l < maxLanes; ++l) {
    for (const RankMem& m : ranks_) {
      if (l < m.nLanes) wake(static_cast<int32_t>(m.firstLane + l));
    }
  }
  while (!ready_.empty()) {
    const uint32_t id = ready_.front();
    ready_.pop_front();
    lanes_[id].queued = false;
    SNCCL_TRY(advance(id));
  }
  if (opts_.stats) *opts_.stats = stats_;
  if (finished_ != lanes_.size()) return deadlockError();
  return leftoverError();
}

void Sim::wake(int32_t laneId) {
  LaneRun& l = lanes_[static_cast<size_t>(laneId)];
  if (l.queued || l.done) return;
  l.queued = true;
  ready_.push_back(static_cast<uint32_t>(laneId));
}

// Runs a lane until it finishes or blocks; a blocked lane registers on the connection
// it waits for and is woken by the peer's matching push or pop.
Status Sim::advance(uint32_t laneId) {
  LaneRun& l = lanes_[laneId];
  const std::vector<CStep>& steps = ranks_[l.rank].steps;
  while (l.next < l.end) {
    const CStep& s = steps[l.next];
    if (static_cast<Prim>(s.prim) == Prim::kPeerFold) {
      bool passed = false;
      SNCCL_TRY(arriveAtFold(laneId, &passed));
      if (!passed) return OkStatus();
      continue;  // the barrier ran this lane's step
    }
    if (s.recvFifo != kNoFifo && fifos_[s.recvFifo].queued == 0) {
      fifos_[s.recvFifo].receiverWaiting = true;
      return OkStatus();
    }
    if (s.sendFifo != kNoFifo && fifos_[s.sendFifo].queued >= static_cast<uint32_t>(opts_.slots)) {
      fifos_[s.sendFifo].senderWaiting = true;
      return OkStatus();
    }
    SNCCL_TRY(execute(laneId, s));
    ++l.next;
    ++stats_.steps;
  }
  l.done = true;
  ++finished_;
  return OkStatus();
}

// PeerFold: the executor runs every rank's fold between two barriers (every rank is in
// the call before any reads a peer; none returns before every fold is written), so the
// folds of one barrier run side by side: here they run when the last rank arrives, each
// reading every operand before any writes, after checking that no element one rank's fold
// writes is read or written by another rank's fold of the same barrier.
Status Sim::arriveAtFold(uint32_t laneId, bool* passed) {
  LaneRun& l = lanes_[laneId];
  *passed = false;
  if (l.atFold) return OkStatus();
  if (foldRankLane_.empty()) foldRankLane_.assign(static_cast<size_t>(n_), -1);
  if (foldRankLane_[l.rank] >= 0) return stepError(laneId, "a second PeerFold of this rank in one barrier");
  l.atFold = true;
  foldRankLane_[l.rank] = static_cast<int32_t>(laneId);
  foldLanes_.push_back(laneId);
  if (foldLanes_.size() < static_cast<size_t>(n_)) return OkStatus();
  SNCCL_TRY(runFolds());
  *passed = true;
  return OkStatus();
}

Status Sim::runFolds() {
  // Who writes what: (rank, position) -> the rank whose fold writes it.
  std::unordered_map<uint64_t, uint32_t> writer;
  auto key = [](uint32_t rank, size_t pos) { return (static_cast<uint64_t>(rank) << 32) | pos; };
  struct Ref {
    size_t src, dst;  // element offsets in the step's buffers
  };
  std::vector<Ref> refs(foldLanes_.size());
  for (size_t k = 0; k < foldLanes_.size(); ++k) {
    const uint32_t id = foldLanes_[k];
    const LaneRun& l = lanes_[id];
    const RankMem& m = ranks_[l.rank];
    const CStep& s = m.steps[l.next];
    refs[k] = {s.srcPos - m.base[s.srcBuf], s.dstPos - m.base[s.dstBuf]};
    for (uint32_t q = 0; q < static_cast<uint32_t>(n_); ++q) {
      const RankMem& p = ranks_[q];
      for (const auto& [buf, off] : {std::pair{s.srcBuf, refs[k].src}, std::pair{s.dstBuf, refs[k].dst}}) {
        if (buf >= p.bufs.size() || off + s.count > p.bufs[buf].elems)
          return stepError(id, format("rank %u has no %s [%zu..%zu)", q,
                                      buf < p.bufs.size() ? bufLabel(static_cast<int>(q), buf, off).c_str() : "buffer",
                                      off, off + s.count));
        if (buf == s.dstBuf && p.bufs[buf].role == BufRole::kInput)
          return stepError(id, format("writes rank %u's Input buffer", q));
      }
      for (uint32_t i = 0; i < s.count; ++i) {
        auto [it, fresh] = writer.try_emplace(key(q, p.base[s.dstBuf] + refs[k].dst + i), l.rank);
        if (!fresh && it->second != l.rank)
          return stepError(id, format("writes %s of rank %u, which rank %u's PeerFold of the same barrier writes too",
                                      bufLabel(static_cast<int>(q), s.dstBuf, refs[k].dst + i).c_str(), q,
                                      it->second));
      }
    }
  }
  // Every operand read before anything is written.
  std::vector<std::vector<Sym>> folded(foldLanes_.size());
  for (size_t k = 0; k < foldLanes_.size(); ++k) {
    const uint32_t id = foldLanes_[k];
    const LaneRun& l = lanes_[id];
    const RankMem& m = ranks_[l.rank];
    const CStep& s = m.steps[l.next];
    folded[k].assign(s.count, Sym{});
    for (uint32_t q = 0; q < static_cast<uint32_t>(n_); ++q) {
      const RankMem& p = ranks_[q];
      const bool scale = p.reduces && p.bufs[s.srcBuf].role == BufRole::kInput;
      for (uint32_t i = 0; i < s.count; ++i) {
        const size_t pos = p.base[s.srcBuf] + refs[k].src + i;
        auto it = writer.find(key(q, pos));
        if (it != writer.end() && it->second != l.rank)
          return stepError(id, format("reads %s of rank %u, which rank %u's PeerFold of the same barrier writes",
                                      bufLabel(static_cast<int>(q), s.srcBuf, refs[k].src + i).c_str(), q,
                                      it->second));
        Sym v = p.vals[pos];
        if (scale) v.bits += v.n;
        if (q == 0) {
          folded[k][i] = v;
          continue;
        }
        Status st = combineInto(&folded[k][i], v);
        if (!st.ok())
          return stepError(id, format("%s of rank %u: %s", bufLabel(static_cast<int>(q), s.srcBuf, refs[k].src + i).c_str(),
                                      q, st.message().c_str()));
      }
    }
    if (s.flags & kFlagFinal) {
      for (uint32_t i = 0; i < s.count; ++i) {
        Status st = finalize(&folded[k][i]);
        if (!st.ok()) return stepError(id, format("element %u: %s", i, st.message().c_str()));
      }
    }
  }
  for (size_t k = 0; k < foldLanes_.size(); ++k) {
    const uint32_t id = foldLanes_[k];
    LaneRun& l = lanes_[id];
    const CStep& s = ranks_[l.rank].steps[l.next];
    for (uint32_t q = 0; q < static_cast<uint32_t>(n_); ++q) {
      RankMem& p = ranks_[q];
      std::copy(folded[k].begin(), folded[k].end(),
                p.vals.begin() + static_cast<ptrdiff_t>(p.base[s.dstBuf] + refs[k].dst));
    }
  }
  // The barrier is passed: every lane moves past its step; the others run again.
  const std::vector<uint32_t> members = std::move(foldLanes_);
  foldLanes_.clear();
  for (uint32_t id : members) {
    LaneRun& l = lanes_[id];
    l.atFold = false;
    foldRankLane_[l.rank] = -1;
    ++l.next;
    ++stats_.steps;
  }
  // The last to arrive is the caller, which goes on by itself.
  for (size_t k = 0; k + 1 < members.size(); ++k) wake(static_cast<int32_t>(members[k]));
  return OkStatus();
}

Status Sim::popMessage(uint32_t laneId, const CStep& s) {
  Fifo& f = fifos_[s.recvFifo];
  const uint64_t count = f.data[f.head].hash;
  if (count != s.count) {
    return stepError(laneId, format("receives %u elements but message #%llu from rank %d carries %llu", s.count,
                                    static_cast<unsigned long long>(f.received + 1), f.from,
                                    static_cast<unsigned long long>(count)));
  }
  std::copy_n(f.data.begin() + static_cast<ptrdiff_t>(f.head + 1), s.count, tmp_.begin());
  f.head += 1 + s.count;
  --f.queued;
  ++f.received;
  ++stats_.messages;
  stats_.elements += s.count;
  if (f.queued == 0) {
    f.head = 0;
    // Dense patterns (alltoall) have nranks^2 connections: give idle ones' memory back.
    if (fifos_.size() > 4 * static_cast<size_t>(n_)) {
      std::vector<Sym>().swap(f.data);
    } else {
      f.data.clear();
    }
  } else if (f.head > 4096 && 2 * f.head > f.data.size()) {
    f.data.erase(f.data.begin(), f.data.begin() + static_cast<ptrdiff_t>(f.head));
    f.head = 0;
  }
  if (f.senderWaiting) {
    f.senderWaiting = false;
    wake(f.sendLane);
  }
  return OkStatus();
}

Status Sim::execute(uint32_t laneId, const CStep& s) {
  const Prim p = static_cast<Prim>(s.prim);
  RankMem& m = ranks_[lanes_[laneId].rank];
  tmp_.resize(s.count);
  const bool recv = s.recvFifo != kNoFifo;
  if (recv) SNCCL_TRY(popMessage(laneId, s));
  if (sched::primReadsDst(p)) {  // the accumulator: dst's current values, then src joins them
    for (uint32_t i = 0; i < s.count; ++i) {
      SNCCL_TRY(access(laneId, s.dstPos + i, s.dstBuf, false));
      tmp_[i] = m.vals[s.dstPos + i];
    }
  }
  if (sched::primReadsSrc(p)) SNCCL_TRY(readSrc(laneId, s, recv || sched::primReadsDst(p)));
  if (s.flags & kFlagFinal) {
    for (uint32_t i = 0; i < s.count; ++i) {
      Status st = finalize(&tmp_[i]);
      if (!st.ok()) return stepError(laneId, format("element %u: %s", i, st.message().c_str()));
    }
  }
  if (sched::primWritesDst(p)) {
    for (uint32_t i = 0; i < s.count; ++i) {
      SNCCL_TRY(access(laneId, s.dstPos + i, s.dstBuf, true));
      m.vals[s.dstPos + i] = tmp_[i];
    }
  }
  if (s.sendFifo != kNoFifo) {
    Fifo& f = fifos_[s.sendFifo];
    f.data.push_back(Sym{s.count, UINT32_MAX, 0});  // header
    f.data.insert(f.data.end(), tmp_.begin(), tmp_.end());
    ++f.queued;
    ++f.sent;
    if (f.receiverWaiting) {
      f.receiverWaiting = false;
      wake(f.recvLane);
    }
  }
  return OkStatus();
}

Status Sim::readSrc(uint32_t laneId, const CStep& s, bool combine) {
  const RankMem& m = ranks_[lanes_[laneId].rank];
  for (uint32_t i = 0; i < s.count; ++i) {
    SNCCL_TRY(access(laneId, s.srcPos + i, s.srcBuf, false));
    Sym v = m.vals[s.srcPos + i];
    if (s.flags & kFlagScale) v.bits += v.n;  // the executor pre-scales Input operands
    if (!combine) {
      tmp_[i] = v;
      continue;
    }
    Status st = combineInto(&tmp_[i], v);
    if (!st.ok()) {
      return stepError(laneId, format("%s: %s", elemName(static_cast<int>(lanes_[laneId].rank), s.srcBuf,
                                                         s.srcPos + i).c_str(), st.message().c_str()));
    }
  }
  return OkStatus();
}

// Lanes of a rank run in any order relative to each other, so an element written by one
// lane must not be read or written by another (several lanes may read the same element).
Status Sim::access(uint32_t laneId, uint32_t pos, uint16_t buf, bool write) {
  RankMem& m = ranks_[lanes_[laneId].rank];
  if (m.tags.empty()) return OkStatus();
  const int32_t me = static_cast<int32_t>(lanes_[laneId].lane);
  int32_t& t = m.tags[pos];
  if (t == -1 || (t >= 0 && (t >> 1) == me)) {
    const bool written = write || (t >= 0 && (t & 1) != 0);
    t = (me << 1) | (written ? 1 : 0);
    return OkStatus();
  }
  if (!write && (t == -2 || (t & 1) == 0)) {
    t = -2;  // read by several lanes
    return OkStatus();
  }
  std::string other = t == -2 ? std::string("other lanes read") :
                      format("lane %d %s", t >> 1, (t & 1) ? "wrote" : "read");
  return stepError(laneId, format("%s %s, which %s: lanes are not ordered with each other",
                                  write ? "writes" : "reads",
                                  elemName(static_cast<int>(lanes_[laneId].rank), buf, pos).c_str(),
                                  other.c_str()));
}

Status Sim::combineInto(Sym* acc, const Sym& v) const {
  if (finalizedOf(*acc) || finalizedOf(v)) {
    return InternalError("reduces a value that was already finalized (post-processing before the sum is complete)");
  }
  acc->hash += v.hash;
  acc->n += v.n;
  acc->bits += v.bits;
  if (acc->n > static_cast<uint32_t>(n_)) {
    return InternalError("the sum has %u contributions but there are %d ranks: an input entered it twice", acc->n,
                         n_);
  }
  return OkStatus();
}

Status Sim::finalize(Sym* v) const {
  if (finalizedOf(*v)) return InternalError("finalizes a value twice (post-processing applied twice)");
  if (v->n != static_cast<uint32_t>(n_)) {
    return InternalError("marks final a partial sum of %u of %d contributions", v->n, n_);
  }
  v->bits |= kFinalized;
  return OkStatus();
}

std::string Sim::elemName(int r, uint16_t buf, uint32_t pos) const {
  return bufLabel(r, buf, pos - ranks_[static_cast<size_t>(r)].base[buf]);
}

// Collective buffers 0/1 are named by role ("Output[5]"); others by index and role.
std::string Sim::bufLabel(int r, uint32_t buf, size_t i) const {
  const RankMem& m = ranks_[static_cast<size_t>(r)];
  if (m.collective && buf <= kOutputBuf) return format("%s[%zu]", roleName(m.bufs[buf].role), i);
  return format("buffer %u (%s)[%zu]", buf, roleName(m.bufs[buf].role), i);
}

std::string Sim::stepName(uint32_t laneId, size_t stepIdx) const {
  const LaneRun& l = lanes_[laneId];
  const CStep& s = ranks_[l.rank].steps[stepIdx];
  std::string t = format("rank %u lane %u step %zu/%zu (%s of %u", l.rank, l.lane, stepIdx - l.first,
                         l.end - l.first, primName(static_cast<Prim>(s.prim)), s.count);
  if (s.recvFifo != kNoFifo) t += format(" from rank %d", fifos_[s.recvFifo].from);
  if (s.sendFifo != kNoFifo) t += format(" to rank %d", fifos_[s.sendFifo].to);
  return t + ((s.flags & kFlagFinal) ? ", final)" : ")");
}

Status Sim::stepError(uint32_t laneId, const std::string& what) const {
  return InternalError("%s: %s", stepName(laneId, lanes_[laneId].next).c_str(), what.c_str());
}

Status Sim::deadlockError() const {
  std::string msg;
  size_t stuck = 0;
  for (uint32_t id = 0; id < lanes_.size(); ++id) {
    const LaneRun& l = lanes_[id];
    if (l.done) continue;
    if (stuck++ >= static_cast<size_t>(opts_.maxReported)) continue;
    const CStep& s = ranks_[l.rank].steps[l.next];
    std::string why;
    if (l.atFold) {
      why = format("waits in a PeerFold barrier that %zu of %d ranks reached", foldLanes_.size(), n_);
    } else if (s.recvFifo != kNoFifo && fifos_[s.recvFifo].queued == 0) {
      const Fifo& f = fifos_[s.recvFifo];
      why = format("waits for message #%llu from rank %d, which has sent %llu",
                   static_cast<unsigned long long>(f.received + 1), f.from, static_cast<unsigned long long>(f.sent));
    } else {
      const Fifo& f = fifos_[s.sendFifo];
      why = format("waits for a free slot to rank %d (%u messages queued)", f.to, f.queued);
    }
    msg += format("%s %s: %s", msg.empty() ? "" : ";", stepName(id, l.next).c_str(), why.c_str());
  }
  return InternalError("deadlock: %zu of %zu lanes cannot progress:%s", stuck, lanes_.size(), msg.c_str());
}

Status Sim::leftoverError() const {
  std::string msg;
  size_t bad = 0;
  for (const Fifo& f : fifos_) {
    if (f.queued == 0) continue;
    if (bad++ < static_cast<size_t>(opts_.maxReported)) {
      msg += format("%s rank %d sent %llu messages to rank %d, which received %llu", msg.empty() ? "" : ";", f.from,
                    static_cast<unsigned long long>(f.sent), f.to, static_cast<unsigned long long>(f.received));
    }
  }
  if (bad == 0) return OkStatus();
  return InternalError("%zu connections hold messages nobody receives:%s", bad, msg.c_str());
}

std::string Sim::describe(const Sym& v) const {
  std::string flags;
  if (scaledOf(v)) flags += format(", scaled %u", scaledOf(v));
  flags += finalizedOf(v) ? ", finalized" : "";
  int r = 0;
  uint32_t b = 0;
  size_t i = 0;
  if (decodeOrigin(v, &r, &b, &i) && r < n_ && b < ranks_[static_cast<size_t>(r)].bufs.size() &&
      i < ranks_[static_cast<size_t>(r)].bufs[b].elems) {
    const BufDesc& d = ranks_[static_cast<size_t>(r)].bufs[b];
    const char* what = d.role == BufRole::kInput ? "" : "the initial content of ";
    return format("%s%s of rank %d%s", what, bufLabel(r, b, i).c_str(), r, flags.c_str());
  }
  return format("a sum of %u contributions (hash %016llx%s)", v.n, static_cast<unsigned long long>(v.hash),
                flags.c_str());
}

Status Sim::verify(const ExpectFn& expect) const {
  std::string msg;
  size_t bad = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const RankMem& m = ranks_[r];
    for (size_t b = 0; b < m.bufs.size(); ++b) {
      if (m.bufs[b].role != BufRole::kOutput) continue;
      for (size_t i = 0; i < m.bufs[b].elems; ++i) {
        const Sym want = expect(static_cast<int>(r), static_cast<uint16_t>(b), i);
        const Sym got = m.vals[m.base[b] + i];
        if (got == want) continue;
        if (bad++ >= static_cast<size_t>(opts_.maxReported)) continue;
        msg += format("%s rank %zu %s: expected %s, got %s", msg.empty() ? "" : ";", r,
                      elemName(static_cast<int>(r), static_cast<uint16_t>(b),
                               static_cast<uint32_t>(m.base[b] + i)).c_str(),
                      describe(want).c_str(), describe(got).c_str());
      }
    }
  }
  if (bad == 0) return OkStatus();
  return InternalError("%zu output elements are wrong:%s", bad, msg.c_str());
}

}  // namespace snccl::check
