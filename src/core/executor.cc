// Executor: step execution, blocking detection, sleeping and failure reporting.
#include "core/executor.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include "collectives/kernels/reduce.h"
#include "common/log.h"
#include "common/process.h"
#include "common/wait.h"
#include "core/signature.h"
#include "topology/affinity.h"

namespace snccl {

namespace {
constexpr int64_t kSleepSliceUs = 1000;          // longest single sleep: bounds reaction time
// Smallest kSend chunk sent from the user's memory on a net ring (Connection::postAt):
// below it the copy into the slot is cheaper than waiting for the send at the op's end.
constexpr size_t kSendAtPointerMin = 32 * 1024;
// Smallest message received straight into the user's memory (planRecvs), for the
// same reason the other way.
constexpr size_t kRecvAtPointerMin = 32 * 1024;
constexpr int64_t kLivenessPeriodNs = 20000000;  // look for dead peers every 20 ms while sleeping

// A rank of this host (same pid namespace) that is stopped (SIGSTOP, a debugger), or -1.
// Such a rank makes every rank time out within moments of the others; each must name it
// rather than the neighbour it happened to wait on, which may be waiting on it too.
int stoppedLocalRank(const ncclComm& comm) {
  const PeerInfo& self = comm.peers.info[comm.rank];
  for (int r = 0; r < comm.nranks; ++r) {
    if (r == comm.rank) continue;
    pid_t pid = watchablePid(self, comm.peers.info[r]);
    if (pid != 0 && processStopped(pid)) return r;
  }
  return -1;
}

// " after rank N (pid P, host H) failed" when a failure that `peer` passed on (a poisoned
// ring, an abort notice) started at another rank; empty when it started at the peer, or
// when `origin` names no rank.
std::string failedBefore(const ncclComm& comm, int origin, int peer) {
  if (origin < 0 || origin >= comm.nranks || origin == peer) return std::string();
  const PeerInfo& o = comm.peers.info[origin];
  return format(" after rank %d (pid %d, host %s) failed", origin, o.pid, o.hostname);
}
}  // namespace

std::string ExecOp::describe() const {
  if (coll == CollKind::kSendRecv) return format("send/recv group #%llu", (unsigned long long)seq);
  return format("%s #%llu (count %zu, %s, %s, root %d)", collName(coll), (unsigned long long)seq, count,
                kernels::typeName(dt), userOp < ncclNumOps ? kernels::opName(userOp) : "premulsum", root);
}

CommRunner::CommRunner(ncclComm* comm, std::vector<ExecOp> ops, uint64_t ticket)
    : comm_(comm), live_(&comm->ordering), ops_(std::move(ops)), nops_(ops_.size()), ticket_(ticket) {}

void CommRunner::reset(size_t nops, uint64_t ticket) {
  if (ops_.size() < nops) ops_.resize(nops);
  nops_ = nops;
  ticket_ = ticket;
  opIndex_ = 0;
  started_ = false;
  moved_ = false;
  blockedConn_ = nullptr;
}

bool CommRunner::needsConnect() const {
  for (size_t i = 0; i < nops_; ++i) {
    if (!ops_[i].prep->connected.load(std::memory_order_acquire)) return true;
    if (ops_[i].mapped && !comm_->singleCopy.connected) return true;
    if (ops_[i].agree && !comm_->conns.agreementConnected) return true;
  }
  return false;
}

Status CommRunner::connect() {
  for (size_t i = 0; i < nops_; ++i) {
    if (ops_[i].mapped && !comm_->singleCopy.connected) {
      // The single-copy protocol talks to every peer on channel 0.
      std::vector<ConnKey> all;
      for (int p = 0; p < comm_->nranks; ++p)
        if (p != comm_->rank) all.push_back({p, 0});
      SNCCL_TRY(commConnect(comm_, all, all));
      comm_->singleCopy.connected = true;
    }
    if (ops_[i].agree && !comm_->conns.agreementConnected) {
      std::vector<ConnKey> sends, recvs;
      agreementPeers(comm_->rank, comm_->nranks, &sends, &recvs);
      SNCCL_TRY(commConnect(comm_, sends, recvs));
      comm_->conns.agreementConnected = true;
    }
    const PreparedSchedule& p = *ops_[i].prep;
    if (p.connected.load(std::memory_order_acquire)) continue;
    SNCCL_TRY(commConnect(comm_, p.sends, p.recvs));
    p.connected.store(true, std::memory_order_release);
  }
  return OkStatus();
}

bool CommRunner::sendInPlace(Connection* sc, const char* from, size_t bytes, uint64_t sig) {
  if (!sc->sendsAtPointers() || bytes < kSendAtPointerMin) return false;
  sc->postAt(from, static_cast<uint32_t>(bytes), sig);
  if (std::find(atPointer_.begin(), atPointer_.end(), sc) == atPointer_.end()) atPointer_.push_back(sc);
  return true;
}

bool CommRunner::sendFinalOutput(Connection* sc, const ExecOp& op, size_t lane, size_t index, const char* dst,
                                 size_t bytes) {
  // What no other step writes is final once written: it may leave from dst as the input
  // does. The size test first: it spares small messages the schedule's analysis.
  return op.hostMemory() && sc->sendsAtPointers() && bytes >= kSendAtPointerMin &&
         op.prep->zeroCopy().soleWriter[lane][index] && sendInPlace(sc, dst, bytes, op.sig);
}

Result<bool> CommRunner::tryStep(ExecOp& op, const Step& st, size_t lane, size_t index) {
  const size_t bytes = st.count * op.elemSize;
  Connection* rc = nullptr;
  Connection* sc = nullptr;
  const char* in = nullptr;
  char* out = nullptr;
  if (primReceives(st.prim)) {
    rc = comm_->conns.recvOf({st.recvPeer, st.channel}).get();
    uint32_t got = 0;
    uint64_t sig = 0;
    in = rc->tryRecvSlot(&got, &sig);
    if (in == nullptr) {
      if (blockedConn_ == nullptr) blockedConn_ = rc, blockedSender_ = false;
      return false;
    }
    if (got != bytes || !signatureMatches(sig, op.sig)) return mismatchError(comm_, op, st.recvPeer, got, bytes, sig);
  }
  if (primSends(st.prim)) {
    sc = comm_->conns.sendOf({st.sendPeer, st.channel}).get();
    out = sc->trySendSlot(static_cast<uint32_t>(bytes));
    if (out == nullptr) {
      if (blockedConn_ == nullptr) blockedConn_ = sc, blockedSender_ = true;
      return false;
    }
  }
  const size_t es = op.elemSize;
  char* src = op.bufs[st.src.buf] + st.src.offset * es;
  char* dst = op.bufs[st.dst.buf] + st.dst.offset * es;
  // PreMulSum scales each rank's own contribution exactly once: when it is read from
  // the user's input buffer.
  const bool scale = op.sched->reduces && op.sched->bufs[st.src.buf].role == BufRole::kInput;
  const engine::DataEngine& eng = *op.engine;
  switch (st.prim) {
    case Prim::kSend:
      // A large chunk of an input the op never writes leaves from where it is: on a net
      // ring the copy into the slot costs as much CPU as the kernel's own copy (both
      // cores are busy over TCP). The op then ends only once the send is done.
      if (op.inputStable && op.hostMemory() && !(scale && op.op.hasScalar) &&
          op.sched->bufs[st.src.buf].role == BufRole::kInput && sendInPlace(sc, src, bytes, op.sig)) {
        sc = nullptr;  // posted
        break;
      }
      SNCCL_TRY(eng.copy(out, src, st.count, op.dt, op.op, scale, false));
      break;
    case Prim::kRecv:
      if (in != dst) SNCCL_TRY(eng.copyBytes(dst, in, bytes));  // equal: it landed in place (planRecvs)
      break;
    case Prim::kRecvReduceSend:
      SNCCL_TRY(eng.reduce(out, in, src, st.count, op.dt, op.op, scale, false));
      break;
    case Prim::kRecvReduceCopy:
      SNCCL_TRY(eng.reduce(dst, in, src, st.count, op.dt, op.op, scale, st.final));
      break;
    case Prim::kRecvReduceCopySend:
      SNCCL_TRY(eng.reduce(dst, in, src, st.count, op.dt, op.op, scale, st.final));
      if (sendFinalOutput(sc, op, lane, index, dst, bytes)) {
        sc = nullptr;  // posted
      } else {
        SNCCL_TRY(eng.copyBytes(out, dst, bytes));
      }
      break;
    case Prim::kRecvCopySend:
      SNCCL_TRY(eng.copyBytes(dst, in, bytes));
      if (sendFinalOutput(sc, op, lane, index, dst, bytes)) {
        sc = nullptr;  // posted
      } else {
        SNCCL_TRY(eng.copyBytes(out, dst, bytes));
      }
      break;
    case Prim::kCopy:
      SNCCL_TRY(eng.copy(dst, src, st.count, op.dt, op.op, scale, st.final));
      break;
    case Prim::kLocalReduce:
      SNCCL_TRY(eng.reduce(dst, dst, src, st.count, op.dt, op.op, scale, st.final));
      break;
    case Prim::kPeerFold:  // only in the single copy's schedule, which progressMapped runs
      return InternalError("%s: a PeerFold step in a lane", op.describe().c_str());
  }
  if (sc != nullptr) sc->post(static_cast<uint32_t>(bytes), op.sig);
  if (rc != nullptr) rc->release();
  if (primSends(st.prim)) countSent(st.sendPeer, bytes);
  if (primReceives(st.prim)) countReceived(st.recvPeer, bytes);
  return true;
}

Result<bool> CommRunner::progress() {
  moved_ = false;
  while (opIndex_ < nops_) {
    ExecOp& op = ops_[opIndex_];
    if (!started_) {
      if (op.deviceScalar != nullptr)
        SNCCL_TRY(engine::kDeviceEngine.copyBytes(op.op.scalar, op.deviceScalar, op.elemSize));
      for (const ExecOp::PreCopy& c : op.preCopies)
        SNCCL_TRY(op.engine->copyBytes(op.scratch.data() + c.scratchOffset, c.src, c.bytes));
      laneStep_.assign(op.sched->lanes.size(), 0);
      opStartNs_ = 0;  // startTimeoutClock: at the op's first sleep, which most small ops never reach
      started_ = true;
      claimsMade_ = false;
      sendsOverPolledNet_ = false;  // claimDriven() finds out
      atPointer_.clear();
      mapped_.reset(/*fallbackOnly=*/!op.mapped);
      startAgreement(op);
      flightBegin(op);
      // Plans count the op's messages on each ring: after the agreement's, which come first.
      if (agree_.done && comm_->conns.plansRecvs.load(std::memory_order_relaxed)) planRecvs(op);
    }
    if (!claimsMade_ && !handedOff_) claimDriven(op);
    blockedConn_ = nullptr;
    if (!agree_.done) {
      Result<bool> r = progressAgreement(op);
      if (!r.ok()) return r.status();
      if (!r.value()) return false;
      agree_.done = true;
      if (comm_->conns.plansRecvs.load(std::memory_order_relaxed)) planRecvs(op);
    }
    if (!mapped_.fallback) {
      Result<bool> r = progressMapped(op);
      if (!r.ok()) return r.status();
      if (!r.value()) return false;
      if (!mapped_.fallback) {
        comm_->flight.end(flight::OpState::kDone, flight::Recorder::nowNs());
        ++opIndex_;
        started_ = false;
        continue;
      }
    }
    bool allDone = true;
    for (size_t l = 0; l < op.sched->lanes.size(); ++l) {
      const std::vector<Step>& steps = op.sched->lanes[l].steps;
      size_t& i = laneStep_[l];
      while (i < steps.size()) {
        Result<bool> r = tryStep(op, steps[i], l, i);
        if (!r.ok()) return r.status();
        if (!r.value()) break;
        ++i;
        moved_ = true;
        handedOff_ = false;
      }
      if (i < steps.size()) allDone = false;
    }
    if (!allDone) return false;
    // Sends from the user's memory must be done before the op is: the user may change
    // that memory as soon as the call returns.
    for (Connection* c : atPointer_) {
      if (!c->sendsDone()) {
        blockedConn_ = c, blockedSender_ = true;
        return false;
      }
    }
    atPointer_.clear();
    targeted_.clear();  // every message of the op arrived: nothing more lands in its memory
    comm_->flight.end(flight::OpState::kDone, flight::Recorder::nowNs());
    ++opIndex_;
    started_ = false;
  }
  return true;
}

void CommRunner::flightBegin(const ExecOp& op) {
  flight::Recorder& fr = comm_->flight;
  if (!fr.enabled()) return;
  flight::OpRecord r;
  r.seq = op.seq;
  r.startNs = flight::Recorder::nowNs();
  r.coll = uint8_t(op.coll);
  r.dt = uint8_t(op.dt);
  r.redop = uint8_t(std::min<int>(op.userOp, ncclNumOps));
  r.root = op.root;
  r.count = op.coll == CollKind::kSendRecv ? op.p2pBytes : op.count;
  r.algo = op.algo;
  r.sendPeer = op.sendPeer;
  r.recvPeer = op.recvPeer;
  r.nsend = op.nsend;
  r.nrecv = op.nrecv;
  // The single-copy AllReduce runs phases, not steps: its lanes run only as a fallback.
  const size_t total = op.mapped || op.prep == nullptr ? 0 : op.prep->totalSteps;
  r.stepsTotal = uint32_t(std::min<size_t>(total, UINT32_MAX));
  fr.begin(r);
}

void CommRunner::flightWait() {
  flight::Recorder& fr = comm_->flight;
  if (!fr.active()) return;
  flight::OpRecord& r = fr.current();
  size_t done = 0;
  for (size_t s : laneStep_) done += s;
  r.stepsDone = uint32_t(std::min<size_t>(done, UINT32_MAX));
  if (blockedConn_ != nullptr) {
    r.waitPeer = blockedConn_->peer();
    r.waitSend = blockedSender_ ? 1 : 0;
    r.waitMsg = blockedConn_->step();
  }
  fr.update();
}

void CommRunner::recordFailure() {
  if (!comm_->flight.enabled() || opIndex_ >= nops_) return;
  if (!comm_->flight.active()) {
    // It failed before it started (connecting): no lane moved.
    flightBegin(ops_[opIndex_]);
    laneStep_.assign(ops_[opIndex_].sched->lanes.size(), 0);
  }
  flightWait();
  comm_->flight.end(flight::OpState::kFailed, flight::Recorder::nowNs());
}

void CommRunner::planRecvs(const ExecOp& op) {
  targeted_.clear();
  // In place, the output is the input, which data arriving early would overwrite before
  // the op read it. The single-copy AllReduce may never run the lanes that would consume
  // the messages.
  if (!op.inputStable || op.mapped || !op.hostMemory()) return;
  const PreparedSchedule& p = *op.prep;
  if (p.maxRecvCount * op.elemSize < kRecvAtPointerMin) return;  // nothing to target: skip the analysis
  for (size_t c = 0; c < p.recvs.size(); ++c) {
    Connection* rc = comm_->conns.recvOf(p.recvs[c]).get();
    if (rc == nullptr || !rc->receivesAtPointers()) continue;
    const ZeroCopyInfo& z = p.zeroCopy();
    targetList_.clear();
    for (const ZeroCopyInfo::TargetStep& t : z.recvTargets[c]) {
      const Step& st = p.sched.lanes[t.lane].steps[t.step];
      const size_t bytes = st.count * op.elemSize;
      if (bytes >= kRecvAtPointerMin)
        targetList_.push_back({t.index, uint32_t(bytes), op.bufs[st.dst.buf] + st.dst.offset * op.elemSize});
    }
    if (targetList_.empty()) continue;
    rc->planRecvs(targetList_);
    targeted_.push_back(rc);
  }
}

void CommRunner::quiesceTransfers() {
  // The pass drops the ring's requests only if it sees the poison. commSetError poisons
  // every ring, but when another thread (an abort, a revoke) set the error first it may
  // still be on its way to this ring: poison it here too (the first word set stays).
  const int code = comm_->errors.asyncError.load();
  const uint32_t word = encodePoison(code != ncclSuccess ? code : ncclInternalError, comm_->rank);
  auto quiesce = [word](Connection* c) {
    if (c->poisoned() == 0) c->poison(word);
    c->quiesce();
  };
  for (Connection* c : atPointer_)
    if (!c->sendsDone()) quiesce(c);
  atPointer_.clear();
  for (Connection* c : targeted_) quiesce(c);
  targeted_.clear();
}

void CommRunner::claimDriven(const ExecOp& op) {
  claimsMade_ = true;
  sendsOverPolledNet_ = false;
  auto claim = [&](Connection* c) {
    if (c == nullptr || !c->drivable() || std::find(driven_.begin(), driven_.end(), c) != driven_.end()) return;
    c->claimDrive();
    driven_.push_back(c);
  };
  for (ConnKey k : op.prep->sends) {
    Connection* c = comm_->conns.sendOf(k).get();
    claim(c);
    sendsOverPolledNet_ |= c != nullptr && c->pollsInUserSpace();
  }
  for (ConnKey k : op.prep->recvs) claim(comm_->conns.recvOf(k).get());
}

bool CommRunner::driveNet() {
  bool moved = false;
  for (Connection* c : driven_) moved |= c->drive();
  return moved;
}

void CommRunner::releaseDriven(bool waiting) {
  for (Connection* c : driven_) c->releaseDrive(waiting);
  driven_.clear();
  claimsMade_ = false;
  handedOff_ = waiting;
}

Status CommRunner::checkBlocked() {
  ExecOp& op = ops_[opIndex_];
  if (comm_->errors.abortFlag.load(std::memory_order_relaxed)) {
    comm_->errors.noteCause(FailureCause::kAborted, -1);
    return RemoteError("%s: rank %d: the communicator was aborted", op.describe().c_str(), comm_->rank);
  }
  int64_t now = Backoff::nowNs();
  startTimeoutClock(now);
  if (blockedConn_ != nullptr) {
    int peer = blockedConn_->peer();
    const PeerInfo& pi = comm_->peers.info[peer];
    // Every failure below is checked against readiness after it was observed: a peer
    // posts before it dies, aborts or poisons, so a message or credit it left is there
    // by now, and the op must first consume it (the peer may simply have finished).
    uint32_t word = blockedConn_->poisoned();
    if (word != 0 && blockedConn_->ready(blockedSender_)) return OkStatus();
    if (word != 0) {
      int origin = poisonOrigin(word);
      if (origin >= 0 && origin < comm_->nranks) comm_->errors.culprit.store(origin);
      // The transport's own account (a network's: peer lost, this node's link down, ...).
      std::string detail = blockedConn_->failureDetail();
      comm_->errors.noteCause(detail.empty() ? FailureCause::kPeerFailed : FailureCause::kNetwork, peer);
      if (!detail.empty()) detail = ": " + detail;
      // Started here (e.g. this node's link went down): the peer is not to blame.
      if (origin == comm_->rank)
        return RemoteError("%s: rank %d: its %s connection to rank %d (pid %d, host %s) failed on this rank's side "
                           "(%s)%s",
                           op.describe().c_str(), comm_->rank, blockedConn_->transport(), peer, pi.pid, pi.hostname,
                           ncclGetErrorString(static_cast<ncclResult_t>(poisonCode(word))), detail.c_str());
      std::string cause = failedBefore(*comm_, origin, peer);
      return RemoteError("%s: rank %d: rank %d (pid %d, host %s) stopped%s (its error: %s)%s", op.describe().c_str(),
                         comm_->rank, peer, pi.pid, pi.hostname, cause.c_str(),
                         ncclGetErrorString(static_cast<ncclResult_t>(poisonCode(word))), detail.c_str());
    }
    if (now - lastLivenessCheckNs_ > kLivenessPeriodNs) {
      lastLivenessCheckNs_ = now;
      // A peer that aborted before it connected its end cannot poison this connection;
      // its abort notice comes through the bootstrap.
      int origin = -1;
      if (comm_->bootstrap && comm_->bootstrap->peerAborted(peer, &origin) && !blockedConn_->ready(blockedSender_)) {
        // The notice names where the failure started (the peer itself, or a rank whose
        // failure made it abort): the same root cause as a poisoned ring would carry.
        if (origin < 0 || origin >= comm_->nranks || origin == comm_->rank) origin = peer;
        comm_->errors.culprit.store(origin);
        comm_->errors.noteCause(FailureCause::kPeerAborted, peer);
        std::string cause = failedBefore(*comm_, origin, peer);
        return RemoteError("%s: rank %d: rank %d (pid %d, host %s) aborted its communicator%s while this rank "
                           "waited for %s it",
                           op.describe().c_str(), comm_->rank, peer, pi.pid, pi.hostname, cause.c_str(),
                           blockedSender_ ? "a free slot (credit) from" : "data from");
      }
    }
    if (blockedConn_->peerPid() != 0 && lastLivenessCheckNs_ == now) {
      if (processGone(blockedConn_->peerPid()) && !blockedConn_->ready(blockedSender_)) {
        comm_->errors.culprit.store(peer);
        comm_->errors.noteCause(FailureCause::kPeerExited, peer);
        return RemoteError("%s: rank %d: rank %d (pid %d, host %s) exited while this rank waited for %s it",
                           op.describe().c_str(), comm_->rank, peer, pi.pid, pi.hostname,
                           blockedSender_ ? "a free slot (credit) from" : "data from");
      }
    }
  }
  if (comm_->timeoutNs > 0 && now - opStartNs_ > comm_->timeoutNs) {
    // The culprit travels in the poison word (commSetError): the other survivors then
    // name the stopped rank too.
    std::string stopped;
    const int s = stoppedLocalRank(*comm_);
    if (s >= 0) {
      comm_->errors.culprit.store(s);
      const PeerInfo& si = comm_->peers.info[s];
      stopped = format("; rank %d (pid %d, host %s) is stopped (SIGSTOP or a debugger)", s, si.pid, si.hostname);
    }
    comm_->errors.noteCause(s >= 0 ? FailureCause::kPeerStopped : FailureCause::kTimeout,
                            s >= 0 ? s : (blockedConn_ != nullptr ? blockedConn_->peer() : -1));
    if (blockedConn_ == nullptr)
      return RemoteError("%s: rank %d: timed out after %lld s (SNCCL_TIMEOUT)%s", op.describe().c_str(), comm_->rank,
                         (long long)(comm_->timeoutNs / 1000000000), stopped.c_str());
    int peer = blockedConn_->peer();
    return RemoteError("%s: rank %d: timed out after %lld s (SNCCL_TIMEOUT) waiting for %s rank %d (pid %d, "
                       "host %s) on its %s connection at message %llu%s",
                       op.describe().c_str(), comm_->rank, (long long)(comm_->timeoutNs / 1000000000),
                       blockedSender_ ? "a free slot (credit) from" : "data from", peer, comm_->peers.info[peer].pid,
                       comm_->peers.info[peer].hostname, blockedConn_->transport(),
                       (unsigned long long)blockedConn_->step(), stopped.c_str());
  }
  return OkStatus();
}

int64_t CommRunner::pollExtensionNs() const {
  if (!sendsOverPolledNet_ || blockedConn_ == nullptr || !blockedConn_->pollsInUserSpace()) return 0;
  return comm_->netPollUs * 1000;
}

Status CommRunner::sleepOnBlocked() {
  SNCCL_TRY(checkBlocked());
  flightWait();
  // Asleep, the runner cannot drive its net rings: the proxy moves them and wakes it.
  releaseDriven(true);
  if (blockedConn_ != nullptr) {
    const int64_t t0 = Backoff::nowNs();
    blockedConn_->sleep(blockedSender_, kSleepSliceUs);
    if (comm_->stats.ready()) {
      stats::PeerStats& p = comm_->stats.peer(blockedConn_->peer());
      stats::bump(blockedSender_ ? p.sendWaitNs : p.recvWaitNs, uint64_t(Backoff::nowNs() - t0));
    }
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return checkBlocked();
}

namespace {

// Waits (bounded by each comm's deadline) until every runner holds its ticket, so
// operations on one communicator run in issue order whatever stream they came from.
Status acquireTickets(std::span<CommRunner*> runners) {
  for (CommRunner* r : runners) {
    ncclComm* c = r->comm();
    if (c->ordering.isTurn(r->ticket())) {  // our turn already (no lock)
      r->turnHeld = true;
      continue;
    }
    switch (c->ordering.waitTurn(r->ticket(), c->errors.abortFlag, c->timeoutNs)) {
      case CommOrdering::Wait::kTurn:
        r->turnHeld = true;
        break;
      case CommOrdering::Wait::kAborted:
        return RemoteError("rank %d: the communicator was aborted", c->rank);
      case CommOrdering::Wait::kTimedOut:
        return RemoteError("rank %d: timed out waiting for earlier operations on the communicator", c->rank);
    }
  }
  return OkStatus();
}

// Sets up missing connections. Several communicators driven by one thread connect in
// parallel threads: their handshakes wait on each other.
Status connectAll(std::span<CommRunner*> runners) {
  std::vector<CommRunner*> todo;
  for (CommRunner* r : runners)
    if (r->needsConnect()) todo.push_back(r);
  if (todo.empty()) return OkStatus();
  if (todo.size() == 1) return todo[0]->connect();
  std::vector<Status> results(todo.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < todo.size(); ++i)
    threads.emplace_back([&, i] {
      // The rings this thread creates are faulted in here: place it on its rank's node.
      ncclComm* c = todo[i]->comm();
      topo::placeHelperThread(c->peers.info[c->rank].numa, "connection setup");
      results[i] = todo[i]->connect();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : results) SNCCL_TRY(s);
  return OkStatus();
}

// The common case, one communicator, without the bookkeeping of several.
Status runOne(CommRunner* r) {
  Backoff backoff(r->comm()->spinUs, r->comm()->yieldUs);
  for (;;) {
    Result<bool> res = r->progress();
    if (!res.ok()) return res.status();
    if (res.value()) return OkStatus();
    if (r->moved() || r->driveNet()) {
      backoff.reset();
    } else if (backoff.idle(r->pollExtensionNs()) == Backoff::Phase::kSleep) {
      SNCCL_TRY(r->sleepOnBlocked());
    }
  }
}

Status runLoop(std::span<CommRunner*> runners) {
  if (runners.size() == 1) return runOne(runners[0]);
  std::vector<bool> done(runners.size(), false);
  int64_t spin = runners.empty() ? 0 : runners[0]->comm()->spinUs;
  int64_t yield = runners.empty() ? 0 : runners[0]->comm()->yieldUs;
  Backoff backoff(spin, yield);
  size_t remaining = runners.size();
  while (remaining > 0) {
    bool moved = false;
    for (size_t i = 0; i < runners.size(); ++i) {
      if (done[i]) continue;
      Result<bool> r = runners[i]->progress();
      if (!r.ok()) return r.status();
      moved |= runners[i]->moved();
      if (r.value()) {
        done[i] = true;
        --remaining;
      }
    }
    if (remaining == 0) break;
    if (!moved)
      for (size_t i = 0; i < runners.size(); ++i)
        if (!done[i]) moved |= runners[i]->driveNet();
    if (moved) {
      backoff.reset();
      continue;
    }
    int64_t extendNs = 0;
    for (size_t i = 0; i < runners.size(); ++i)
      if (!done[i]) extendNs = std::max(extendNs, runners[i]->pollExtensionNs());
    if (backoff.idle(extendNs) == Backoff::Phase::kSleep) {
      // The thread sleeps on one runner's ring: every runner's net rings go back to the
      // proxy meanwhile, or a peer of another runner could wait on this sleep. Every
      // unfinished runner waits from now on, also those whose checkBlocked() runs only
      // once the runners before them are done: their SNCCL_TIMEOUT counts from here.
      const int64_t now = Backoff::nowNs();
      for (size_t i = 0; i < runners.size(); ++i)
        if (!done[i]) runners[i]->startTimeoutClock(now);
      for (size_t i = 0; i < runners.size(); ++i)
        if (!done[i]) runners[i]->releaseDriven(true);
      for (size_t i = 0; i < runners.size(); ++i)
        if (!done[i]) {
          SNCCL_TRY(runners[i]->sleepOnBlocked());
          break;
        }
    }
  }
  return OkStatus();
}

void finishTickets(std::span<CommRunner*> runners) {
  for (CommRunner* r : runners) {
    r->turnHeld = false;
    r->comm()->ordering.finish();
  }
}

}  // namespace

Status runRunners(std::span<CommRunner*> runners) {
  Status st = acquireTickets(runners);
  if (st.ok()) {
    for (CommRunner* r : runners) {
      Status s = checkComm(r->comm());
      // An aborted communicator (ncclCommAbort sets the flag before it poisons and frees)
      // must not start connecting now: abort reads the connections.
      if (s.ok() && r->comm()->errors.abortFlag.load())
        s = RemoteError("rank %d: the communicator was aborted before this operation ran", r->comm()->rank);
      if (!s.ok()) {
        st = s;
        break;
      }
      // After checkComm: init (maybe on another thread) is done. Only a thread that runs
      // one rank is placed: one driving several ranks of a group would be pinned to the
      // first one's CPU, and so would every thread it starts afterwards.
      if (runners.size() == 1) commPlaceThread(r->comm());
    }
  }
  if (st.ok()) st = connectAll(runners);
  if (st.ok()) st = runLoop(runners);
  // A failure in a group is fatal to every communicator of the group (NCCL semantics).
  if (!st.ok()) {
    // The flight recorders first: commSetError writes them out.
    for (CommRunner* r : runners)
      if (r->turnHeld) r->recordFailure();
    for (CommRunner* r : runners) commSetError(r->comm(), st);
    for (CommRunner* r : runners) r->quiesceTransfers();  // after the poison commSetError set
  }
  // After the poison: the last passes over the net rings then send the ABORT frames (with
  // the failure's origin) from this thread, before the caller can report or abort
  // anything else, instead of waiting for the proxy to notice the poison.
  for (CommRunner* r : runners) r->releaseDriven(false);
  finishTickets(runners);
  return st;
}

}  // namespace snccl
