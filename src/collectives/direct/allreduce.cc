// Direct AllReduce for small communicators (the "direct" algorithm): every rank talks to
// every other rank directly, so a call costs one or two message latencies whatever n is.
//
// 2 ranks: the whole-input exchange of allreduce_pair.cc (one latency).
// n >= 3 ranks: a direct reduce-scatter then a direct all-gather (two latencies). The
// data is split into n blocks (BlockSplit); per chunk of at most chunkElems elements:
//   1. scatter  Send block b of the input to its owner, rank b, for every b != rank
//   2. reduce   the owner combines its own block with the n-1 received ones, from rank-1
//               down to rank+1: RecvReduceCopy ... RecvReduceCopySend (final, and the
//               finished chunk goes to rank+1 at once)
//   3. share    Send the finished block to every other rank
//   4. gather   Recv block q from its owner q, for every q != rank
//
// Why not "send the whole input to everyone and reduce all n locally" for n >= 3: results
// must be bitwise identical on every rank, so every rank would have to combine the n
// inputs in the same order. The executor only combines a received message with a local
// operand, so a rank can only fold its own input in next to a received one; no single
// combination order puts every rank's own input there once n >= 3 (floating-point sums
// are not associative, so different orders give different bits). With one owner per
// block, each element is combined exactly once, on one rank, and copied to the others:
// identical bits by construction, and deterministic from run to run (fixed order).
//
// Cross-rank invariants: every rank computes the same BlockSplit, so both ends of each
// message agree on its count, and an empty chunk of a block is skipped by its owner and
// by every sender alike. A connection a -> b carries, per chunk, a's phase-1 message for
// block b then a's phase-3 message of block a, in this order on both ends. One lane per
// rank: the blocks of one chunk are all written by this lane, and the n-1 senders write
// distinct connections, so nothing here needs more lanes.
// In place: a chunk of the input is sent (phase 1) or reduced (phase 2, same range as the
// output it writes) before phases 2 and 4 of that chunk overwrite the aliased output.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status directAllReducePair(const CollArgs&, const ChannelPlan&, Schedule*);

namespace {

// One chunk `lo` of the reduce-scatter + all-gather (phases 1-4 above) for rank r.
void directChunk(int r, int n, const BlockSplit& split, size_t lo, size_t chunk, std::vector<Step>* steps) {
  auto at = [&](int b) { return split.offset(static_cast<size_t>(b)) + lo; };
  auto len = [&](int b) {
    const size_t size = split.size(static_cast<size_t>(b));
    return lo < size ? std::min(chunk, size - lo) : size_t{0};
  };
  for (int d = 1; d < n; ++d) {  // 1. scatter, nearest owner first
    const int b = (r + d) % n;
    if (len(b) > 0) steps->push_back(mkSend(b, inRef(at(b)), len(b)));
  }
  const size_t mine = len(r);
  if (mine > 0) {
    BufRef partial = inRef(at(r));
    for (int d = 1; d < n; ++d) {  // 2. reduce, in the order the scatter delivers
      const int from = (r - d + n) % n;
      const bool last = d == n - 1;
      const Prim p = last ? Prim::kRecvReduceCopySend : Prim::kRecvReduceCopy;
      steps->push_back(mkStep(p, from, (r + 1) % n, partial, outRef(at(r)), mine, last));
      partial = outRef(at(r));
    }
    for (int d = 2; d < n; ++d) steps->push_back(mkSend((r + d) % n, outRef(at(r)), mine));  // 3. share
  }
  for (int d = 1; d < n; ++d) {  // 4. gather, nearest owner first (it sent to us first)
    const int q = (r - d + n) % n;
    if (len(q) > 0) steps->push_back(mkRecv(q, outRef(at(q)), len(q)));
  }
}

}  // namespace

Status directAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  // 1 or 2 ranks: the pair exchange, unchanged (the small-message default at 2 ranks).
  if (a.nranks <= 2) return directAllReducePair(a, plan, out);
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  const int n = a.nranks;
  const BlockSplit split(a.count, static_cast<size_t>(n));
  const size_t iters = ceilDiv(split.maxSize(), a.chunkElems);
  lane->reserve(iters * static_cast<size_t>(4 * n));
  for (size_t j = 0; j < iters; ++j) directChunk(a.rank, n, split, j * a.chunkElems, a.chunkElems, lane);
  return OkStatus();
}

}  // namespace snccl
