// AlltoAll over point-to-point: rank r sends in[p*count ..) to p and receives p's block
// into out[p*count ..), one lane per (peer, direction), so peers progress independently.
//
// Lane i (i = 1..n-1) talks to r+i (send) and r-i (receive): with every rank listing its
// lanes this way, the i-th lanes of all ranks form n disjoint shifts, which keeps the
// number of messages in flight low. Cross-rank invariant: both ends chunk a block the
// same way (appendChunked with the same count), so message k matches message k.
// In place (in == out) the block exchanged with p is read and overwritten in the same
// range, so one lane per peer alternates Send chunk k / Recv chunk k: a chunk is always
// sent before the received chunk lands on it, and the peer does the same (no deadlock:
// each side's send of chunk k precedes its receive of chunk k).
//
// With incast control (p2p/incast.h) a rank receives from at most K = incastSenders peers
// at once. Out of place, its sends keep one lane per peer, each waiting for the peer's
// grant first, and its receives run on K lanes that grant the peers r-1, r-2, ... in turn
// (lane j takes every K-th), so a sender is granted by r+1, r+2, ... in the same order and
// at every moment each rank sends to about K peers and receives from K. In place, a send
// and a receive share their range, so the exchanges go in rounds instead: in round k rank
// r pairs with k - r (mod n), a matching of the ranks (a rank paired with itself sits the
// round out) that over n rounds meets every peer once; lane j runs the rounds k = j mod K
// in order on every rank, each exchange opened by a grant each way. A rank's partner in
// round k is in the same lane at the same position, so the lanes of all ranks advance
// together and cannot deadlock.
#include "collectives/p2p/incast.h"
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

namespace {

void addInPlaceLane(const CollArgs& a, int peer, std::vector<Step>* steps) {
  const size_t base = static_cast<size_t>(peer) * a.count;
  steps->reserve(steps->size() + 2 * ceilDiv(a.count, a.chunkElems));
  for (size_t lo = 0; lo < a.count; lo += a.chunkElems) {
    const size_t c = std::min(a.chunkElems, a.count - lo);
    steps->push_back(mkSend(peer, inRef(base + lo), c));
    steps->push_back(mkRecv(peer, outRef(base + lo), c));
  }
}

// Out of place under incast control: n-1 send lanes, K receive lanes.
void addGrantedLanes(const CollArgs& a, Schedule* out, size_t* used) {
  const int n = a.nranks, r = a.rank, k = a.incastSenders;
  out->lanes.reserve(static_cast<size_t>(k + n));  // the pointers below stay valid
  const size_t firstRecv = *used;
  for (int j = 0; j < k; ++j) addLane(out, used);
  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n, from = (r - i + n) % n;
    std::vector<Step>* send = &out->lanes[addLane(out, used)].steps;
    send->push_back(mkAwaitGrant(to, scratchRef(static_cast<size_t>(to))));
    appendChunked(send, true, to, inRef(static_cast<size_t>(to) * a.count), a.count, a.chunkElems);
    std::vector<Step>* recv = &out->lanes[firstRecv + static_cast<size_t>((i - 1) % k)].steps;
    recv->push_back(mkGrant(from, inRef(static_cast<size_t>(r) * a.count)));
    appendChunked(recv, false, from, outRef(static_cast<size_t>(from) * a.count), a.count, a.chunkElems);
  }
}

// In place under incast control: K lanes of pairwise rounds.
void addGrantedRounds(const CollArgs& a, Schedule* out, size_t* used) {
  const int n = a.nranks, r = a.rank, k = a.incastSenders;
  const size_t first = *used;
  for (int j = 0; j < k; ++j) addLane(out, used);
  for (int round = 0; round < n; ++round) {
    const int peer = ((round - r) % n + n) % n;
    if (peer == r) continue;
    std::vector<Step>* lane = &out->lanes[first + static_cast<size_t>(round % k)].steps;
    lane->push_back(mkGrant(peer, inRef(static_cast<size_t>(peer) * a.count)));
    lane->push_back(mkAwaitGrant(peer, scratchRef(static_cast<size_t>(peer))));
    addInPlaceLane(a, peer, lane);
  }
}

}  // namespace

Status p2pAlltoAll(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAlltoAll));
  resetSchedule(out, CollKind::kAlltoAll, /*reduces=*/false);
  const int n = a.nranks, r = a.rank;
  const size_t total = a.count * static_cast<size_t>(n);
  out->bufs.push_back({BufRole::kInput, total});
  out->bufs.push_back({BufRole::kOutput, total});
  size_t used = 0;
  if (a.count == 0) {
    finishLanes(out, 0);
    return OkStatus();
  }
  if (incastLimited(a, n - 1)) {
    out->bufs.push_back({BufRole::kScratch, static_cast<size_t>(n)});  // a grant per peer
    if (a.inPlace) {
      addGrantedRounds(a, out, &used);
    } else {
      addGrantedLanes(a, out, &used);
      const size_t own = static_cast<size_t>(r) * a.count;
      out->lanes[addLane(out, &used)].steps.push_back(mkCopy(inRef(own), outRef(own), a.count, false));
    }
    finishLanes(out, used);
    return OkStatus();
  }
  const size_t chunks = ceilDiv(a.count, a.chunkElems);
  out->lanes.reserve(2 * static_cast<size_t>(n));
  for (int i = 1; i < n; ++i) {
    const int to = (r + i) % n, from = (r - i + n) % n;
    if (a.inPlace) {
      addInPlaceLane(a, to, &out->lanes[addLane(out, &used)].steps);
      continue;
    }
    std::vector<Step>* send = &out->lanes[addLane(out, &used)].steps;
    send->reserve(chunks);
    appendChunked(send, true, to, inRef(static_cast<size_t>(to) * a.count), a.count, a.chunkElems);
    std::vector<Step>* recv = &out->lanes[addLane(out, &used)].steps;
    recv->reserve(chunks);
    appendChunked(recv, false, from, outRef(static_cast<size_t>(from) * a.count), a.count, a.chunkElems);
  }
  if (!a.inPlace) {
    const size_t own = static_cast<size_t>(r) * a.count;
    out->lanes[addLane(out, &used)].steps.push_back(mkCopy(inRef(own), outRef(own), a.count, false));
  }
  finishLanes(out, used);
  return OkStatus();
}

}  // namespace snccl
