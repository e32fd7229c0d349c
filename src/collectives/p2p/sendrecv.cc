// Grouped ncclSend/ncclRecv as a schedule: one lane per (peer, direction).
//
// Cross-rank invariant: the k-th message rank a sends to b is the k-th b receives from a.
// Keeping all sends to one peer on one lane, in call order, and chunking every message
// the same way on both ends (ceil(count / chunkElems) chunks) keeps that true as long as
// the two ranks called matching operations in the same per-peer order. Different peers
// never share a lane, so a group's calls may come in any order without deadlock.
// Send-to-self and receive-from-self never touch a connection: the k-th self send is
// copied into the k-th self receive.
#include <array>

#include "collectives/algorithm.h"
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

namespace {

// Maps (peer, direction) to a lane index. Small groups scan a fixed array; large ones
// (alltoall-like groups) use a table sized by nranks, built only when needed.
class LaneFinder {
 public:
  LaneFinder(int nranks, size_t nops) {
    if (nops > kSmall) table_.assign(2 * static_cast<size_t>(nranks), -1);
  }
  int32_t* slot(int peer, bool send) {
    const int32_t key = peer * 2 + (send ? 1 : 0);
    if (!table_.empty()) return &table_[static_cast<size_t>(key)];
    for (size_t i = 0; i < n_; ++i) {
      if (keys_[i] == key) return &lanes_[i];
    }
    keys_[n_] = key;
    lanes_[n_] = -1;
    return &lanes_[n_++];
  }

 private:
  static constexpr size_t kSmall = 16;
  std::array<int32_t, kSmall> keys_{}, lanes_{};
  size_t n_ = 0;
  std::vector<int32_t> table_;
};

// Pairs the k-th self send with the k-th self receive and appends their copies to a lane.
Status addSelfCopies(int rank, std::span<const P2POp> ops, Schedule* out, size_t* used) {
  size_t s = 0, r = 0, lane = SIZE_MAX;
  for (;;) {
    while (s < ops.size() && !(ops[s].isSend && ops[s].peer == rank)) ++s;
    while (r < ops.size() && !(!ops[r].isSend && ops[r].peer == rank)) ++r;
    if (s == ops.size() && r == ops.size()) return OkStatus();
    if (s == ops.size() || r == ops.size()) {
      return InvalidUsage("rank %d: a %s to itself has no matching %s", rank,
                          s < ops.size() ? "send" : "receive", s < ops.size() ? "receive" : "send");
    }
    if (ops[s].count != ops[r].count) {
      return InvalidUsage("rank %d: send to itself of %zu elements is matched by a receive of %zu", rank,
                          ops[s].count, ops[r].count);
    }
    if (ops[s].count > 0) {
      if (lane == SIZE_MAX) lane = addLane(out, used);
      out->lanes[lane].steps.push_back(mkCopy(BufRef{static_cast<uint16_t>(s), 0},
                                              BufRef{static_cast<uint16_t>(r), 0}, ops[s].count, false));
    }
    ++s;
    ++r;
  }
}

}  // namespace

Status buildP2PSchedule(int rank, int nranks, std::span<const P2POp> ops, size_t chunkElems, Schedule* out) {
  if (nranks < 1 || rank < 0 || rank >= nranks) {
    return InvalidArgument("p2p: rank %d out of range for %d ranks", rank, nranks);
  }
  if (chunkElems == 0) return InvalidArgument("p2p: chunkElems must be > 0");
  if (ops.size() > size_t{UINT16_MAX} + 1) {
    return InvalidUsage("p2p: %zu operations in one group, at most %u are supported", ops.size(),
                        unsigned{UINT16_MAX} + 1);
  }
  resetSchedule(out, CollKind::kSendRecv, /*reduces=*/false);
  out->bufs.reserve(ops.size());
  for (const P2POp& op : ops) {
    if (op.peer < 0 || op.peer >= nranks) {
      return InvalidArgument("p2p: rank %d: peer %d out of range for %d ranks", rank, op.peer, nranks);
    }
    out->bufs.push_back({op.isSend ? BufRole::kInput : BufRole::kOutput, op.count});
  }
  size_t used = 0;
  LaneFinder finder(nranks, ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    const P2POp& op = ops[i];
    if (op.peer == rank || op.count == 0) continue;  // zero-length: nothing on either end
    int32_t* lane = finder.slot(op.peer, op.isSend);
    if (*lane < 0) *lane = static_cast<int32_t>(addLane(out, &used));
    appendChunked(&out->lanes[static_cast<size_t>(*lane)].steps, op.isSend, op.peer,
                  BufRef{static_cast<uint16_t>(i), 0}, op.count, chunkElems);
  }
  Status st = addSelfCopies(rank, ops, out, &used);
  finishLanes(out, used);
  return st;
}

}  // namespace snccl
