// Names of the schedule IR enums and the helpers every generator shares (sched_util.h).
#include "collectives/schedule.h"

#include "collectives/sched_util.h"

namespace snccl {

const char* collName(CollKind kind) {
  switch (kind) {
    case CollKind::kAllReduce: return "AllReduce";
    case CollKind::kBroadcast: return "Broadcast";
    case CollKind::kReduce: return "Reduce";
    case CollKind::kAllGather: return "AllGather";
    case CollKind::kReduceScatter: return "ReduceScatter";
    case CollKind::kAlltoAll: return "AlltoAll";
    case CollKind::kGather: return "Gather";
    case CollKind::kScatter: return "Scatter";
    case CollKind::kSendRecv: return "SendRecv";
    case CollKind::kCount: break;
  }
  return "Unknown";
}

const char* primName(Prim p) {
  switch (p) {
    case Prim::kSend: return "Send";
    case Prim::kRecv: return "Recv";
    case Prim::kRecvReduceSend: return "RecvReduceSend";
    case Prim::kRecvReduceCopy: return "RecvReduceCopy";
    case Prim::kRecvReduceCopySend: return "RecvReduceCopySend";
    case Prim::kRecvCopySend: return "RecvCopySend";
    case Prim::kCopy: return "Copy";
    case Prim::kLocalReduce: return "LocalReduce";
    case Prim::kPeerFold: return "PeerFold";
  }
  return "Unknown";
}

namespace sched {

namespace {
bool isRooted(CollKind k) {
  return k == CollKind::kBroadcast || k == CollKind::kReduce || k == CollKind::kGather ||
         k == CollKind::kScatter;
}
}  // namespace

Status checkCollArgs(const CollArgs& a, const ChannelPlan& plan, CollKind expected) {
  if (a.coll != expected) {
    return InvalidArgument("%s generator called for %s", collName(expected), collName(a.coll));
  }
  if (a.nranks < 1 || a.rank < 0 || a.rank >= a.nranks) {
    return InvalidArgument("%s: rank %d out of range for %d ranks", collName(expected), a.rank, a.nranks);
  }
  if (isRooted(expected) && (a.root < 0 || a.root >= a.nranks)) {
    return InvalidArgument("%s: root %d out of range for %d ranks", collName(expected), a.root, a.nranks);
  }
  if (a.chunkElems == 0) return InvalidArgument("%s: chunkElems must be > 0", collName(expected));
  if (!plan.ring.empty() && plan.ring.size() != static_cast<size_t>(a.nranks)) {
    return InvalidArgument("%s: channel plan ring has %zu ranks, communicator has %d", collName(expected),
                           plan.ring.size(), a.nranks);
  }
  return OkStatus();
}

Status RingOrder::make(const CollArgs& args, const ChannelPlan& plan, RingOrder* out) {
  out->n_ = args.nranks;
  out->order_ = plan.ring.empty() ? nullptr : plan.ring.data();
  if (!out->order_) {
    out->pos_ = args.rank;
    out->rootPos_ = (args.root >= 0 && args.root < args.nranks) ? args.root : 0;
    return OkStatus();
  }
  // Linear scans: O(nranks) per call, negligible next to the O(nranks) steps generated.
  out->pos_ = out->rootPos_ = -1;
  for (int p = 0; p < args.nranks; ++p) {
    if (plan.ring[p] == args.rank) out->pos_ = p;
    if (plan.ring[p] == args.root) out->rootPos_ = p;
  }
  if (out->pos_ < 0) return InvalidArgument("channel plan ring does not contain rank %d", args.rank);
  // Non-rooted collectives may carry any root; only a root in range must be on the ring.
  bool rootInRange = args.root >= 0 && args.root < args.nranks;
  if (out->rootPos_ < 0 && rootInRange) {
    return InvalidArgument("channel plan ring does not contain root %d", args.root);
  }
  if (out->rootPos_ < 0) out->rootPos_ = 0;
  return OkStatus();
}

void resetSchedule(Schedule* out, CollKind coll, bool reduces) {
  out->coll = coll;
  out->reduces = reduces;
  out->bufs.clear();
  // Lane objects stay so their step vectors keep capacity for the next schedule.
  for (Lane& l : out->lanes) l.steps.clear();
}

size_t addLane(Schedule* out, size_t* used) {
  if (*used == out->lanes.size()) out->lanes.emplace_back();
  return (*used)++;
}

void finishLanes(Schedule* out, size_t used) { out->lanes.resize(used); }

namespace {
// The single lane of a one-lane collective schedule, or nullptr (and no lane) when
// `empty`: the shared tail of the begin* prologues below.
std::vector<Step>* singleLane(Schedule* out, bool empty) {
  size_t used = 0;
  if (empty) {
    finishLanes(out, 0);
    return nullptr;
  }
  std::vector<Step>& steps = out->lanes[addLane(out, &used)].steps;
  finishLanes(out, used);
  return &steps;
}
}  // namespace

std::vector<Step>* beginAllReduce(const CollArgs& a, Schedule* out) {
  resetSchedule(out, CollKind::kAllReduce, /*reduces=*/true);
  out->bufs.push_back({BufRole::kInput, a.count});
  out->bufs.push_back({BufRole::kOutput, a.count});
  std::vector<Step>* steps = singleLane(out, a.count == 0);
  if (steps != nullptr && a.nranks == 1) {
    steps->push_back(mkCopy(inRef(0), outRef(0), a.count, /*final=*/true));
    return nullptr;
  }
  return steps;
}

std::vector<Step>* beginBroadcast(const CollArgs& a, Schedule* out) {
  resetSchedule(out, CollKind::kBroadcast, /*reduces=*/false);
  const bool isRoot = a.rank == a.root;
  out->bufs.push_back({BufRole::kInput, isRoot ? a.count : 0});
  out->bufs.push_back({BufRole::kOutput, a.count});
  const bool rootCopies = isRoot && !a.inPlace;
  return singleLane(out, a.count == 0 || (a.nranks == 1 && !rootCopies));
}

std::vector<Step>* beginReduce(const CollArgs& a, Schedule* out) {
  resetSchedule(out, CollKind::kReduce, /*reduces=*/true);
  out->bufs.push_back({BufRole::kInput, a.count});
  out->bufs.push_back({BufRole::kOutput, a.rank == a.root ? a.count : 0});
  return singleLane(out, a.count == 0);
}

}  // namespace sched
}  // namespace snccl
