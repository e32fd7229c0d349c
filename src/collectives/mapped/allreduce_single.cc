// Single-copy AllReduce (the "single" algorithm): every rank reads its peers' buffers
// directly instead of passing the data through the connection rings. Rank r folds block r
// of every rank's input in rank order, x0 (+) x1 (+) ... (+) x(n-1), and writes the result
// into block r of every rank's output: one PeerFold step (schedule.h). A rank touches 2N
// bytes for N of data (N read, N written), against about 4.5N through the rings.
//
// It needs every rank's buffers mapped by every other (ranks that are threads of one
// process, or buffers from ncclMemAlloc across processes of one PID namespace), which is
// only known per call: the executor runs the step inside a protocol of small messages
// (core/mapped_allreduce.cc) and falls back to the selector's next choice when some rank
// cannot map a peer's buffers. The selector offers it only on such communicators and at
// or above SNCCL_SINGLE_COPY_BYTES (tuning/selector.h).
//
// Blocks: equal shares of whole 16-element groups (whole vectors for the kernels), the
// remainder in the last; ranks past the end get an empty block and still take part (the
// others read and write their buffers). Only rank r touches block r of any buffer, and it
// reads every operand of an element before writing it anywhere, so in place is the same
// schedule.
#include "collectives/sched_util.h"

namespace snccl {

using namespace sched;

Status singleAllReduce(const CollArgs& a, const ChannelPlan& plan, Schedule* out) {
  SNCCL_TRY(checkCollArgs(a, plan, CollKind::kAllReduce));
  std::vector<Step>* lane = beginAllReduce(a, out);
  if (lane == nullptr) return OkStatus();
  const size_t n = static_cast<size_t>(a.nranks);
  const size_t per = (ceilDiv(a.count, n) + 15) / 16 * 16;
  const size_t begin = std::min(a.count, per * static_cast<size_t>(a.rank));
  const size_t end = std::min(a.count, begin + per);
  lane->push_back(mkStep(Prim::kPeerFold, -1, -1, inRef(begin), outRef(begin), end - begin, /*final=*/true));
  return OkStatus();
}

}  // namespace snccl
