// Recursive-doubling AllReduce: log2(p) rounds in which partners exchange their whole
// partial vectors and both combine them. Every rank pays log2(p) message latencies
// instead of the ring's 2(n-1), for log2(p) times the bytes: the small-message algorithm.
//
// Ranks are taken in ring order (ChannelPlan::ring), so the first rounds pair ring
// neighbours, which the planner keeps on the fastest links. With p = 2^floor(log2 n) and
// e = n - p, the first 2e ring positions pair up: the even one of each pair ("folded")
// sends its input to the odd one (fold in) and receives the result at the end (fold out);
// the odd one takes id i = pos / 2, positions from 2e on take id pos - e. In round k the
// rank of id i exchanges with the rank of id i ^ 2^k.
//
// Per chunk of at most chunkElems elements, a rank of the doubling group does:
//   fold in   RecvReduceCopy(folded) input -> output        (ranks with a folded partner)
//   round k   Send(partner, partial); RecvReduceCopy(partner) partial -> output
//             the last round's step is final; with a folded partner it is a
//             RecvReduceCopySend that also hands the finished chunk back (fold out)
// and a folded rank: Send chunk c, then Recv finished chunk c-1 (one chunk ahead, so its
// partner's next chunk is already queued while it finishes this one; a one-chunk lag
// cannot deadlock with any slot count >= 1).
//
// Cross-rank invariants:
//  * bitwise-identical results: every combination has exactly two operands, and both
//    partners of a round combine the same two values (executor: received (+) local). Every
//    reduction op is commutative for two operands, so both get the same bits; by induction
//    the 2^k ranks of a round-k group hold identical partials, and the last round leaves
//    the same result on every rank (a folded rank receives a copy).
//  * per connection, one message per chunk in chunk order on both ends (round k uses the
//    partner of round k only, fold in/out a separate pair), with the same counts.
//  * in place: a chunk of the input is read (sent / reduced) by the step that first writes
//    the aliased output chunk or earlier; later rounds read and write the output only.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

namespace {

// The doubling group of n ranks: p members, e = n - p folded ranks (see above).
struct Doubling {
  int p = 1, extra = 0, rounds = 0;
  explicit Doubling(int n) {
    while (p * 2 <= n) p *= 2, ++rounds;
    extra = n - p;
  }
  // Group id of ring position `pos`, -1 for a folded rank.
  int idOf(int pos) const {
    if (pos < 2 * extra) return pos % 2 == 1 ? pos / 2 : -1;
    return pos - extra;
  }
  int posOf(int id) const { return id < extra ? 2 * id + 1 : id + extra; }
};

// A folded rank: its input goes to the ring position after it, the result comes back.
void foldedRank(const CollArgs& a, int partner, std::vector<Step>* steps) {
  const size_t chunks = ceilDiv(a.count, a.chunkElems);
  steps->reserve(2 * chunks);
  auto chunkAt = [&](size_t c) { return std::min(a.chunkElems, a.count - c * a.chunkElems); };
  for (size_t c = 0; c < chunks; ++c) {
    steps->push_back(mkSend(partner, inRef(c * a.chunkElems), chunkAt(c)));
    if (c > 0) steps->push_back(mkRecv(partner, outRef((c - 1) * a.chunkElems), chunkAt(c - 1)));
  }
  steps->push_back(mkRecv(partner, outRef((chunks - 1) * a.chunkElems), chunkAt(chunks - 1)));
}

}  // namespace

Status rdAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  RingOrder ring;
  SNCCL_TRY(RingOrder::make(a, plan, &ring));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();  // nothing to move, or one rank (a final Copy)
  std::vector<Step>& steps = *lane;
  const Doubling g(a.nranks);
  const int pos = ring.myPos();
  const int id = g.idOf(pos);
  if (id < 0) {
    foldedRank(a, ring.rankAt(pos + 1), &steps);
    return OkStatus();
  }
  const int folded = pos < 2 * g.extra ? ring.rankAt(pos - 1) : -1;
  int partners[31];
  for (int k = 0; k < g.rounds; ++k) partners[k] = ring.rankAt(g.posOf(id ^ (1 << k)));
  const size_t chunks = ceilDiv(a.count, a.chunkElems);
  steps.reserve(chunks * static_cast<size_t>(2 * g.rounds + 1));
  for (size_t c = 0; c < chunks; ++c) {
    const size_t lo = c * a.chunkElems, n = std::min(a.chunkElems, a.count - lo);
    BufRef partial = inRef(lo);  // this rank's value of the chunk until a step writes it
    if (folded >= 0) {
      steps.push_back(mkStep(Prim::kRecvReduceCopy, folded, -1, partial, outRef(lo), n, false));
      partial = outRef(lo);
    }
    for (int k = 0; k < g.rounds; ++k) {
      const bool last = k == g.rounds - 1;
      steps.push_back(mkSend(partners[k], partial, n));
      const Prim p = last && folded >= 0 ? Prim::kRecvReduceCopySend : Prim::kRecvReduceCopy;
      steps.push_back(mkStep(p, partners[k], folded, partial, outRef(lo), n, last));
      partial = outRef(lo);
    }
  }
  return OkStatus();
}

}  // namespace snccl
