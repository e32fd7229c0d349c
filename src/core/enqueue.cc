// Group recording, argument checks, ExecOp building and launch.
#include "core/enqueue.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>

#include "collectives/algorithm.h"
#include "collectives/channels.h"
#include "collectives/kernels/reduce.h"
#include "common/log.h"
#include "common/params.h"
#include "core/comm.h"
#include "core/device_streams.h"
#include "core/engine/registry.h"
#include "core/executor.h"
#include "core/signature.h"
#include "core/stream.h"
#include "device/cuda_driver.h"

namespace snccl {

namespace {

// NCCL's group state is per thread by definition (ncclGroupStart/End nest per thread).
struct GroupState {
  int depth = 0;
  std::vector<PendingOp> ops;
};
thread_local GroupState tGroup;

bool isRooted(CollKind c) {
  return c == CollKind::kBroadcast || c == CollKind::kReduce || c == CollKind::kGather || c == CollKind::kScatter;
}
bool isReduction(CollKind c) {
  return c == CollKind::kAllReduce || c == CollKind::kReduce || c == CollKind::kReduceScatter;
}

// Also sets *engine to the engine of the buffers the call touches on this rank.
Status checkOp(const PendingOp& op, const engine::DataEngine** engine) {
  SNCCL_TRY(checkComm(op.comm));
  ncclComm* comm = op.comm;
  if (op.dt < 0 || op.dt >= ncclNumTypes) return InvalidArgument("invalid data type %d", int(op.dt));
  if (isReduction(op.coll)) {
    if (op.op < 0) return InvalidArgument("invalid reduction operation %d", int(op.op));
    if (op.op >= ncclNumOps) {
      const std::optional<PreMulOp> p = comm->redOps.find(size_t(op.op) - ncclNumOps);
      if (!p)
        return InvalidArgument("invalid reduction operation %d (not created on this communicator)",
                               int(op.op));
      if (p->dt != op.dt)
        return InvalidArgument("PreMulSum operation %d was created for %s, used with %s", int(op.op),
                               kernels::typeName(p->dt), kernels::typeName(op.dt));
    }
  }
  if (isRooted(op.coll) && (op.root < 0 || op.root >= comm->nranks))
    return InvalidArgument("invalid root %d (nranks %d)", op.root, comm->nranks);
  if (op.coll == CollKind::kSendRecv && (op.peer < 0 || op.peer >= comm->nranks))
    return InvalidArgument("invalid peer %d (nranks %d)", op.peer, comm->nranks);
  size_t es = kernels::typeSize(op.dt);
  if (op.count > (SIZE_MAX / 2) / es / size_t(comm->nranks))
    return InvalidArgument("count %zu is too large", op.count);
  *engine = nullptr;
  if (op.count > 0) {
    bool needSend = op.coll != CollKind::kSendRecv || op.isSend;
    bool needRecv = op.coll != CollKind::kSendRecv || !op.isSend;
    bool rootOnlyRecv = op.coll == CollKind::kReduce || op.coll == CollKind::kGather;
    bool rootOnlySend = op.coll == CollKind::kScatter || op.coll == CollKind::kBroadcast;
    const bool sends = needSend && !(rootOnlySend && comm->rank != op.root);
    const bool recvs = needRecv && !(rootOnlyRecv && comm->rank != op.root);
    if (sends && op.sendbuff == nullptr) return InvalidArgument("sendbuff is NULL");
    if (recvs && op.recvbuff == nullptr) return InvalidArgument("recvbuff is NULL");
    const engine::OpBuffer bufs[] = {{"sendbuff", sends ? op.sendbuff : nullptr},
                                     {"recvbuff", recvs ? op.recvbuff : nullptr}};
    SNCCL_ASSIGN_OR_RETURN(*engine, engine::opEngine(bufs));
  }
  if (op.stream != nullptr && lookupStream(op.stream) == nullptr && !device::CudaDriver::get().on())
    return InvalidUsage(
        "stream %p is not an snccl host stream (sncclStreamCreate), and it cannot be a CUDA "
        "stream: GPU support is off (%s)",
        (void*)op.stream, device::CudaDriver::get().why().c_str());
  return OkStatus();
}

bool inPlace(const PendingOp& op, int rank, size_t es) {
  auto s = static_cast<const char*>(op.sendbuff);
  auto r = static_cast<const char*>(op.recvbuff);
  size_t blk = op.count * es;
  switch (op.coll) {
    case CollKind::kReduceScatter:
      return s != nullptr && s + rank * blk == r;
    case CollKind::kAllGather:
      return r != nullptr && r + rank * blk == s;
    case CollKind::kGather:
      return rank == op.root && r != nullptr && r + op.root * blk == s;
    case CollKind::kScatter:
      return rank == op.root && s != nullptr && s + op.root * blk == r;
    default:
      return s == r;
  }
}

kernels::RedOpSpec resolveOp(ncclComm* comm, ncclRedOp_t op) {
  kernels::RedOpSpec spec;
  if (op < ncclNumOps) {
    spec.base = op == ncclAvg ? ncclSum : op;
    spec.divisor = op == ncclAvg ? uint32_t(comm->nranks) : 0;
    return spec;
  }
  const PreMulOp p = comm->redOps.at(size_t(op) - ncclNumOps);
  spec.base = ncclSum;
  spec.hasScalar = true;
  size_t es = kernels::typeSize(p.dt);
  // ncclScalarDevice: a host scalar is read when the operation is launched; one in
  // device memory when it starts (ExecOp::deviceScalar).
  if (p.residence == ncclScalarHostImmediate) {
    std::memcpy(spec.scalar, p.value, es);
  } else if (!device::CudaDriver::get().isDevice(p.ptr)) {
    std::memcpy(spec.scalar, p.ptr, es);
  }
  return spec;
}

// The schedule of `pick` from the communicator's cache (or generated into it); the caller
// holds comm->caches.scheduleMutex.
Result<std::shared_ptr<const PreparedSchedule>> cachedSchedule(ncclComm* comm, const tuning::Decision& pick,
                                                                const CollArgs& args, size_t elemSize) {
  // The selector's chunk size, never above the caller's (one slot), becomes the
  // schedule's chunkElems.
  const AlgorithmDef* alg = pick.algo;
  if (alg == nullptr) return InternalError("no algorithm implements %s", collName(args.coll));
  CollArgs a = args;
  a.chunkElems = std::max<size_t>(1, std::min(args.chunkElems, pick.chunkBytes / elemSize));
  a.channels = pick.channels;
  for (const ScheduleCacheEntry& e : comm->caches.schedules)
    if (e.alg == alg && e.args.coll == a.coll && e.args.count == a.count && e.args.root == a.root &&
        e.args.chunkElems == a.chunkElems && e.args.inPlace == a.inPlace && e.args.channels == a.channels &&
        e.args.incastSenders == a.incastSenders)
      return e.prep;
  auto prep = std::make_shared<PreparedSchedule>();
  SNCCL_TRY(generateSchedule(*alg, a, comm->peers.plan, &prep->sched));
  prep->analyse();
  constexpr size_t kCacheSize = 16;
  ScheduleCacheEntry entry{a, alg, prep};
  if (comm->caches.schedules.size() < kCacheSize) {
    comm->caches.schedules.push_back(std::move(entry));
  } else {
    comm->caches.schedules[comm->caches.next] = std::move(entry);
    comm->caches.next = (comm->caches.next + 1) % kCacheSize;
  }
  return std::shared_ptr<const PreparedSchedule>(std::move(prep));
}

// The selector's pick (the same on every rank: tuning/selector.h) into e->prep; when it is
// the single copy, its schedule into e->mappedPrep and the pick without it into e->prep,
// the lanes every rank runs instead when some rank cannot map a peer's buffers.
Status chooseSchedules(ncclComm* comm, const CollArgs& args, size_t elemSize, ExecOp* e) {
  const size_t bytes = args.count * elemSize;
  tuning::Decision pick = tuning::selectAndLog(comm->tuner, args.coll, bytes, &comm->tuneLog);
  e->mapped = pick.algo != nullptr && pick.algo->readsPeers;
  const tuning::Decision single = pick;
  if (e->mapped) pick = tuning::selectWithoutPeerReads(comm->tuner, args.coll, bytes);
  std::lock_guard<std::mutex> lock(comm->caches.scheduleMutex);
  if (e->mapped) {
    SNCCL_ASSIGN_OR_RETURN(e->mappedPrep, cachedSchedule(comm, single, args, elemSize));
  } else {
    e->mappedPrep.reset();
  }
  SNCCL_ASSIGN_OR_RETURN(e->prep, cachedSchedule(comm, pick, args, elemSize));
  e->algo = e->mapped ? single.algo->name : pick.algo->name;
  return OkStatus();
}

bool overlaps(const char* a, size_t na, const char* b, size_t nb) { return na && nb && a < b + nb && b < a + na; }

Status bindBuffers(ncclComm* comm, ExecOp* e, void* input, void* output) {
  const std::vector<BufDesc>& bufs = e->sched->bufs;
  e->bufs.resize(bufs.size());
  size_t inBytes = 0, outBytes = 0;
  for (const BufDesc& b : bufs) {
    if (b.role == BufRole::kInput) inBytes = std::max(inBytes, b.elems * e->elemSize);
    if (b.role == BufRole::kOutput) outBytes = std::max(outBytes, b.elems * e->elemSize);
  }
  e->inputStable = !overlaps(static_cast<const char*>(input), inBytes, static_cast<const char*>(output), outBytes);
  for (size_t i = 0; i < bufs.size(); ++i) {
    if (bufs[i].role == BufRole::kInput) e->bufs[i] = static_cast<char*>(input);
    if (bufs[i].role == BufRole::kOutput) e->bufs[i] = static_cast<char*>(output);
    if (bufs[i].role == BufRole::kScratch) {
      if (!e->scratch.ensure(comm->caches.scratchPool, bufs[i].elems * e->elemSize))
        return SystemError("%s: cannot map %zu bytes of scratch memory", e->describe().c_str(),
                           bufs[i].elems * e->elemSize);
      e->bufs[i] = e->scratch.data();
    }
  }
  return OkStatus();
}

// Fills *e (reusing its storage) for one collective call.
Status buildCollective(const PendingOp& p, ExecOp* e) {
  ncclComm* comm = p.comm;
  e->dt = p.dt;
  e->elemSize = kernels::typeSize(p.dt);
  e->coll = p.coll;
  e->count = p.count;
  e->root = isRooted(p.coll) ? p.root : -1;
  e->userOp = isReduction(p.coll) ? p.op : ncclSum;
  e->agree = isRooted(p.coll) && comm->nranks > 1;
  e->seq = comm->ordering.collSeq++;
  e->sig = makeSignature(e->seq, p.coll, p.dt, isReduction(p.coll) ? std::min<int>(p.op, ncclNumOps) : 0,
                         std::max(e->root, 0), p.count);
  e->op = isReduction(p.coll) ? resolveOp(comm, p.op) : kernels::RedOpSpec{};
  e->deviceScalar = nullptr;
  if (isReduction(p.coll) && p.op >= ncclNumOps) {
    const PreMulOp pm = comm->redOps.at(size_t(p.op) - ncclNumOps);
    if (pm.residence != ncclScalarHostImmediate && device::CudaDriver::get().isDevice(pm.ptr)) e->deviceScalar = pm.ptr;
  }
  e->preCopies.clear();
  e->engine = p.engine != nullptr ? p.engine : &engine::hostEngine();
  CollArgs args;
  args.coll = p.coll;
  args.rank = comm->rank;
  args.nranks = comm->nranks;
  args.count = p.count;
  args.root = isRooted(p.coll) ? p.root : 0;
  args.chunkElems = comm->conns.slotBytes / e->elemSize;
  args.inPlace = inPlace(p, comm->rank, e->elemSize);
  // Incast control: the same on every rank (the settings must match; the size is the call's).
  if ((p.coll == CollKind::kAlltoAll || p.coll == CollKind::kGather) &&
      p.count * e->elemSize >= comm->conns.incastMinBytes)
    args.incastSenders = comm->conns.incastSenders;
  const CollArgs& q = e->request;
  bool same = e->prep != nullptr && e->requestElemSize == e->elemSize && q.coll == args.coll &&
              q.count == args.count && q.root == args.root && q.chunkElems == args.chunkElems &&
              q.inPlace == args.inPlace && q.rank == args.rank && q.nranks == args.nranks &&
              q.incastSenders == args.incastSenders;
  if (!same) {
    e->requestElemSize = 0;  // until the new schedule is in place
    SNCCL_TRY(chooseSchedules(comm, args, e->elemSize, e));
    e->request = args;
    e->requestElemSize = e->elemSize;
  }
  e->sched = &e->prep->sched;
  SNCCL_TRY(bindBuffers(p.comm, e, const_cast<void*>(p.sendbuff), p.recvbuff));
  return OkStatus();
}

// A send whose buffer overlaps a receive buffer of the same group (nccl-tests' in-place
// sendrecv uses one buffer for both) is sent from a copy taken when the operation
// starts: lanes progress independently, so a receive could otherwise overwrite data
// before it was sent.
Status stageOverlappingSends(ncclComm* comm, const std::vector<const PendingOp*>& ops, const std::vector<P2POp>& p2p,
                             ExecOp* e) {
  size_t total = 0;
  std::vector<size_t> staged;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!p2p[i].isSend) continue;
    for (size_t j = 0; j < ops.size(); ++j)
      if (!p2p[j].isSend && overlaps(e->bufs[i], p2p[i].count, e->bufs[j], p2p[j].count)) {
        staged.push_back(i);
        total += p2p[i].count;
        break;
      }
  }
  if (staged.empty()) return OkStatus();
  if (!e->scratch.ensure(comm->caches.scratchPool, total))
    return SystemError("rank %d: cannot map %zu bytes to stage in-place sends", comm->rank, total);
  size_t off = 0;
  for (size_t i : staged) {
    e->preCopies.push_back({e->bufs[i], off, p2p[i].count});
    e->bufs[i] = e->scratch.data() + off;
    off += p2p[i].count;
  }
  return OkStatus();
}

// All sends and receives of one communicator in a group become one schedule, counted
// in bytes so that different datatypes can mix.
Result<ExecOp> buildP2P(ncclComm* comm, const std::vector<const PendingOp*>& ops) {
  ExecOp e;
  e.dt = ncclUint8;
  e.elemSize = 1;
  e.coll = CollKind::kSendRecv;
  e.seq = comm->ordering.collSeq;
  std::vector<P2POp> p2p;
  p2p.reserve(ops.size());
  e.algo = "p2p";
  for (const PendingOp* p : ops) {
    p2p.push_back({p->isSend, p->peer, p->count * kernels::typeSize(p->dt)});
    int32_t& first = p->isSend ? e.sendPeer : e.recvPeer;
    if (first < 0) first = p->peer;
    uint16_t& n = p->isSend ? e.nsend : e.nrecv;
    if (n < UINT16_MAX) ++n;
    e.p2pBytes += p2p.back().count;
  }
  auto prep = std::make_shared<PreparedSchedule>();
  SNCCL_TRY(buildP2PSchedule(comm->rank, comm->nranks, p2p, comm->conns.slotBytes, &prep->sched));
  prep->analyse();
  e.prep = prep;
  e.sched = &prep->sched;
  if (e.sched->bufs.size() != ops.size())
    return InternalError("p2p schedule has %zu buffers for %zu operations", e.sched->bufs.size(), ops.size());
  e.bufs.resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i)
    e.bufs[i] = ops[i]->isSend ? static_cast<char*>(const_cast<void*>(ops[i]->sendbuff))
                               : static_cast<char*>(ops[i]->recvbuff);
  // One engine for the group's buffers (checkP2PEngines).
  e.engine = &engine::hostEngine();
  for (const PendingOp* p : ops)
    if (p->engine != nullptr) {
      e.engine = p->engine;
      break;
    }
  SNCCL_TRY(stageOverlappingSends(comm, ops, p2p, &e));
  // Sends read user buffers that no receive of the group writes (or staged copies).
  e.inputStable = true;
  return e;
}

uint64_t takeTicket(ncclComm* comm) { return comm->ordering.take(); }

// Collectives of one communicator run now on the calling thread (NULL stream, no
// send/recv): the communicator's reusable runner, so nothing is allocated once the
// schedules are cached. This is the path of every small blocking call (nccl-tests and
// sn_*_perf wrap each call in its own group), where a few allocations would cost as much
// as the message itself.
Status runSolo(std::span<const PendingOp> ops) {
  ncclComm* comm = ops[0].comm;
  if (!comm->caches.soloRunner) comm->caches.soloRunner = std::make_unique<CommRunner>(comm);
  CommRunner* r = comm->caches.soloRunner.get();
  if (r->ops().size() < ops.size()) r->ops().resize(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) SNCCL_TRY(buildCollective(ops[i], &r->ops()[i]));
  r->reset(ops.size(), takeTicket(comm));
  return runRunners(std::span<CommRunner*>(&r, 1));
}

// Whether the op's buffers are device memory: without a stream it then runs on the
// legacy default CUDA stream (device_streams.h), as NCCL's would.
bool onDevice(const PendingOp& p) { return p.engine != nullptr && p.engine->kind() == engine::MemoryKind::kDevice; }

// Whether a group can take runSolo: one communicator, the NULL stream, collectives only,
// host memory.
bool soloEligible(std::span<const PendingOp> ops) {
  for (const PendingOp& p : ops)
    if (p.comm != ops[0].comm || p.stream != nullptr || p.coll == CollKind::kSendRecv || onDevice(p)) return false;
  return !ops.empty();
}

// Builds one runner per communicator for the operations of one stream.
Status buildRunners(const std::vector<const PendingOp*>& ops, std::vector<std::unique_ptr<CommRunner>>* out) {
  std::vector<ncclComm*> comms;
  for (const PendingOp* p : ops)
    if (std::find(comms.begin(), comms.end(), p->comm) == comms.end()) comms.push_back(p->comm);
  std::vector<std::vector<ExecOp>> execs(comms.size());
  for (size_t c = 0; c < comms.size(); ++c) {
    std::vector<const PendingOp*> p2p;
    for (const PendingOp* p : ops) {
      if (p->comm != comms[c]) continue;
      if (p->coll == CollKind::kSendRecv) {
        p2p.push_back(p);
        continue;
      }
      execs[c].emplace_back();
      SNCCL_TRY(buildCollective(*p, &execs[c].back()));
    }
    if (!p2p.empty()) {
      SNCCL_ASSIGN_OR_RETURN(ExecOp e, buildP2P(comms[c], p2p));
      execs[c].push_back(std::move(e));
    }
  }
  for (size_t c = 0; c < comms.size(); ++c) {
    uint64_t ticket = takeTicket(comms[c]);
    out->push_back(std::make_unique<CommRunner>(comms[c], std::move(execs[c]), ticket));
  }
  return OkStatus();
}

Status runOwned(std::vector<std::unique_ptr<CommRunner>>& runners) {
  std::vector<CommRunner*> ptrs;
  for (auto& r : runners) ptrs.push_back(r.get());
  return runRunners(ptrs);
}

// The sends and receives of a group on one communicator and stream run as one op
// (buildP2P) on one engine: their buffers must all be of its kind. Checked for the whole
// group before any of it runs.
Status checkP2PEngines(const std::vector<PendingOp>& ops) {
  if (ops.size() < 2) return OkStatus();  // checkOp checked the one op's buffers
  // The common case, and the only one with the CPU engine alone: every op that touches
  // memory has the same engine. Checked without allocating; only a group that mixes
  // engines looks for the pair that mixes them.
  const engine::DataEngine* seen = nullptr;
  bool mixed = false;
  for (const PendingOp& p : ops) {
    if (p.coll != CollKind::kSendRecv || p.engine == nullptr) continue;
    if (seen == nullptr) seen = p.engine;
    mixed |= p.engine != seen;
  }
  if (!mixed) return OkStatus();
  std::vector<std::pair<ncclComm*, cudaStream_t>> keys;
  for (const PendingOp& p : ops) {
    const std::pair key(p.comm, p.stream);
    if (p.coll == CollKind::kSendRecv && std::find(keys.begin(), keys.end(), key) == keys.end()) keys.push_back(key);
  }
  std::vector<engine::OpBuffer> bufs;
  for (const auto& [comm, stream] : keys) {
    bufs.clear();
    for (const PendingOp& p : ops)
      if (p.coll == CollKind::kSendRecv && p.comm == comm && p.stream == stream && p.engine != nullptr)
        bufs.push_back({p.isSend ? "ncclSend buffer" : "ncclRecv buffer", p.isSend ? p.sendbuff : p.recvbuff,
                        p.peer});
    SNCCL_TRY(engine::engineForBuffers(bufs).status());
  }
  return OkStatus();
}

Status launch(std::vector<PendingOp> ops) {
  SNCCL_TRY(checkP2PEngines(ops));
  // Streams in first-use order; each gets the group's operations that use it.
  std::vector<cudaStream_t> streams;
  for (const PendingOp& p : ops)
    if (std::find(streams.begin(), streams.end(), p.stream) == streams.end()) streams.push_back(p.stream);
  Status first;
  for (cudaStream_t s : streams) {
    std::vector<const PendingOp*> mine;
    for (const PendingOp& p : ops)
      if (p.stream == s) mine.push_back(&p);
    auto runners = std::make_shared<std::vector<std::unique_ptr<CommRunner>>>();
    const bool device = std::any_of(mine.begin(), mine.end(), [](const PendingOp* p) { return onDevice(*p); });
    const bool now = s == nullptr && !device;
    HostStream* hs = now ? nullptr : lookupStream(s);
    // A CUDA stream is checked before the runners take their tickets: a ticket taken must
    // be run, or every later operation of its communicator waits for it.
    Status st = now || hs != nullptr ? OkStatus() : prepareCudaStream(s);
    if (st.ok()) st = buildRunners(mine, runners.get());
    if (st.ok()) {
      if (now) {
        st = runOwned(*runners);
      } else if (hs != nullptr) {
        hs->enqueue([runners] { return runOwned(*runners); });
      } else {
        auto aborted = [runners] {
          for (const auto& r : *runners)
            if (r->comm()->errors.abortFlag.load()) return true;
          return false;
        };
        st = submitOnCudaStream(s, [runners] { return runOwned(*runners); }, aborted);
      }
    }
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

}  // namespace

Status enqueue(const PendingOp& in, const char* call) {
  PendingOp op = in;  // with its engine
  SNCCL_TRY(checkOp(op, &op.engine));
  if (tGroup.depth > 0) {
    tGroup.ops.push_back(op);
    return OkStatus();
  }
  if (op.stream == nullptr && op.coll != CollKind::kSendRecv && !onDevice(op))
    return runSolo(std::span<const PendingOp>(&op, 1));
  std::vector<PendingOp> one{op};
  return launch(std::move(one));
}

Status groupStart() {
  ++tGroup.depth;
  return OkStatus();
}

Status groupEnd() {
  if (tGroup.depth == 0) return InvalidUsage("ncclGroupEnd called without a matching ncclGroupStart");
  if (--tGroup.depth > 0) return OkStatus();
  if (tGroup.ops.empty()) return OkStatus();
  if (soloEligible(tGroup.ops)) {
    // Runs from the recorded list in place and keeps its capacity for the next group.
    // Nothing in runSolo records group operations, so the list cannot change meanwhile.
    Status st = runSolo(tGroup.ops);
    tGroup.ops.clear();
    return st;
  }
  std::vector<PendingOp> ops = std::move(tGroup.ops);
  tGroup.ops.clear();
  return launch(std::move(ops));
}

Result<double> groupSimulateEnd() {
  if (tGroup.depth == 0) return InvalidUsage("ncclGroupSimulateEnd called without a matching ncclGroupStart");
  double us = 0;
  for (const PendingOp& p : tGroup.ops) {
    const tuning::Tuner& t = p.comm->tuner;
    size_t bytes = p.count * kernels::typeSize(p.dt);
    if (p.coll == CollKind::kSendRecv) {
      const tuning::LinkParams& link = t.params.of(t.shape.worst());
      us += link.latUs + double(bytes) / (link.bwGBps * 1e3);
      continue;
    }
    tuning::Decision d = tuning::select(t, p.coll, bytes);
    if (d.predictedUs > 0) us += d.predictedUs;
  }
  // Nested groups: only the outermost end drops the operations, as groupEnd runs them.
  if (--tGroup.depth == 0) tGroup.ops.clear();
  return us;
}

size_t groupDiscard() {
  size_t n = tGroup.ops.size();
  tGroup.ops.clear();
  if (tGroup.depth > 0) --tGroup.depth;
  return n;
}

int groupDepth() { return tGroup.depth; }

Status runP2PNow(std::span<const PendingOp> ops) {
  if (ops.empty()) return OkStatus();
  std::vector<const PendingOp*> ptrs;
  for (const PendingOp& p : ops) ptrs.push_back(&p);
  std::vector<std::unique_ptr<CommRunner>> runners;
  SNCCL_TRY(buildRunners(ptrs, &runners));
  return runOwned(runners);
}

}  // namespace snccl
