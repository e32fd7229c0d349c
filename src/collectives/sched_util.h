// Helpers shared by the schedule generators (ring/, p2p/): argument checks, ring order,
// lane reuse and step constructors. Internal to snccl_sched; the executor never needs it.
//
// Generators run per call for small messages, so these helpers never allocate beyond the
// growth of vectors that the caller's Schedule already owns.
#pragma once

#include <algorithm>
#include <cstddef>

#include "collectives/schedule.h"
#include "common/status.h"

namespace snccl::sched {

// Checks what every collective generator relies on: rank/nranks/root in range,
// chunkElems > 0, plan.ring empty or of nranks entries, args.coll == expected.
Status checkCollArgs(const CollArgs& args, const ChannelPlan& plan, CollKind expected);

// Rank order along a ring: ChannelPlan::ring when given, else the identity.
// Positions are taken modulo nranks so callers can write pos - 1, pos + s freely.
class RingOrder {
 public:
  // Fails when plan.ring does not contain args.rank (or args.root for rooted calls).
  static Status make(const CollArgs& args, const ChannelPlan& plan, RingOrder* out);

  int nranks() const { return n_; }
  int myPos() const { return pos_; }
  int rootPos() const { return rootPos_; }
  int rankAt(long pos) const {
    long p = pos % n_;
    if (p < 0) p += n_;
    return order_ ? order_[p] : static_cast<int>(p);
  }

 private:
  const int* order_ = nullptr;
  int n_ = 1;
  int pos_ = 0;
  int rootPos_ = 0;
};

// Prepares `out` for a new schedule: clears bufs and the steps of every lane while
// keeping their capacity, sets coll/reduces. Lanes are then taken with addLane().
void resetSchedule(Schedule* out, CollKind coll, bool reduces);
// Appends an empty lane, reusing a lane object (and its step capacity) left from a
// previous schedule when there is one. Returns its index. finishLanes() drops the rest.
size_t addLane(Schedule* out, size_t* used);
void finishLanes(Schedule* out, size_t used);

// The start every single-lane AllReduce generator shares: resets `out` with the input
// and output buffers and one lane. Zero elements leave no lane; one rank gets a final
// Copy (Avg and PreMulSum must still be applied, even in place). Returns the lane's steps
// to fill, or nullptr when the schedule is already complete.
std::vector<Step>* beginAllReduce(const CollArgs& args, Schedule* out);
// The same for single-lane Broadcast generators (input only on the root; no lane when
// there is nothing to move or copy) ...
std::vector<Step>* beginBroadcast(const CollArgs& args, Schedule* out);
// ... and Reduce generators (output only on the root; no lane for zero elements).
std::vector<Step>* beginReduce(const CollArgs& args, Schedule* out);

// What each prim touches: schedule.h (shared with the executor).
using snccl::primReadsDst;
using snccl::primReadsSrc;
using snccl::primReceives;
using snccl::primSends;
using snccl::primWritesDst;

inline size_t ceilDiv(size_t a, size_t b) { return (a + b - 1) / b; }

// Step constructors; peers are ranks, offsets are in elements.
inline Step mkSend(int to, BufRef src, size_t count) {
  Step s{};
  s.prim = Prim::kSend;
  s.sendPeer = to;
  s.src = src;
  s.count = count;
  return s;
}
inline Step mkRecv(int from, BufRef dst, size_t count) {
  Step s{};
  s.prim = Prim::kRecv;
  s.recvPeer = from;
  s.dst = dst;
  s.count = count;
  return s;
}
inline Step mkCopy(BufRef src, BufRef dst, size_t count, bool final) {
  Step s{};
  s.prim = Prim::kCopy;
  s.final = final;
  s.src = src;
  s.dst = dst;
  s.count = count;
  return s;
}
// Any prim: the peers and BufRefs the prim does not use are left at -1 / zero.
inline Step mkStep(Prim p, int from, int to, BufRef src, BufRef dst, size_t count, bool final) {
  Step s{};
  s.prim = p;
  s.final = final;
  if (primReceives(p)) s.recvPeer = from;
  if (primSends(p)) s.sendPeer = to;
  if (primReadsSrc(p)) s.src = src;
  if (primWritesDst(p)) s.dst = dst;
  s.count = count;
  return s;
}

// Appends one Send (or Recv) per chunk of `count` elements at `at`. Both ends of a
// connection call this with the same count and chunk, so their messages match one to one.
inline void appendChunked(std::vector<Step>* steps, bool send, int peer, BufRef at, size_t count,
                          size_t chunk) {
  for (size_t lo = 0; lo < count; lo += chunk) {
    const size_t c = std::min(chunk, count - lo);
    const BufRef ref{at.buf, at.offset + lo};
    steps->push_back(send ? mkSend(peer, ref, c) : mkRecv(peer, ref, c));
  }
}

inline BufRef inRef(size_t offset) { return BufRef{kInputBuf, offset}; }
inline BufRef outRef(size_t offset) { return BufRef{kOutputBuf, offset}; }

// Splits `count` elements into `parts` nearly equal blocks (the first count % parts
// blocks get one element more). Every rank computes the same split, which is what keeps
// message sizes identical on both ends of each connection.
struct BlockSplit {
  size_t base = 0, rem = 0;
  BlockSplit(size_t count, size_t parts) : base(count / parts), rem(count % parts) {}
  size_t size(size_t b) const { return base + (b < rem ? 1 : 0); }
  size_t offset(size_t b) const { return b * base + std::min(b, rem); }
  size_t maxSize() const { return base + (rem ? 1 : 0); }
};

}  // namespace snccl::sched
