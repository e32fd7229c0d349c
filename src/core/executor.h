// Executor: runs Schedules over a communicator's connections on the calling thread.
//
// A CommRunner drives the operations of one communicator, one after the other; inside an
// operation every lane advances independently and a step runs only when all it needs is
// there (a message to receive, a free slot to send into), so grouped sends and receives
// in any order cannot deadlock. Several runners (one thread driving several ranks, as in
// ncclCommInitAll + ncclGroupStart/End) are interleaved by runRunners(). When nothing can
// move, the thread spins, then yields, then sleeps on the connection it waits for; every
// sleep is bounded so deadlines, aborts, poisoned connections and dead peers are noticed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/kernels/reduce.h"
#include "collectives/schedule.h"
#include "common/status.h"
#include "core/call_agreement.h"
#include "core/comm.h"
#include "core/engine/cpu_engine.h"
#include "core/engine/device_engine.h"
#include "core/scratch_pool.h"

namespace snccl {

struct ExecOp {
  std::shared_ptr<const PreparedSchedule> prep;  // shared with the communicator's schedule cache
  const Schedule* sched = nullptr;               // &prep->sched
  std::vector<char*> bufs;                // pointer bound to each sched->bufs entry
  // Copies and reduces every byte the lanes' steps, the preCopies and the single-copy
  // AllReduce's folds move (core/engine/engine.h): the engine of the op's buffers, chosen
  // once when the op is built.
  const engine::DataEngine* engine = &engine::kCpuEngine;
  // Whether the op's buffers are host memory: only then may a transport read or write
  // them in place (sendInPlace, planRecvs) and peers map them (the single copy).
  bool hostMemory() const { return engine->kind() == engine::MemoryKind::kHost; }
  // PreMulSum with ncclScalarDevice on device memory: the scalar, copied into op.scalar
  // when the op starts (in stream order, as NCCL's kernels read it).
  const void* deviceScalar = nullptr;
  ScratchLease scratch;                   // backing store of a kScratch buffer or staged sends
  // Copies into scratch made when the op starts (user data is only valid from then on).
  struct PreCopy {
    const char* src;
    size_t scratchOffset;
    size_t bytes;
  };
  std::vector<PreCopy> preCopies;
  // The operation never writes its kInput buffer (out of place, or a send whose buffer no
  // receive of the group overlaps), so a net send may read it in place until the
  // operation ends (Connection::postAt).
  bool inputStable = false;
  ncclDataType_t dt = ncclFloat32;
  size_t elemSize = 4;
  kernels::RedOpSpec op;
  uint64_t sig = 0;  // operation signature carried by every message (0: p2p, unchecked)
  // An AllReduce the selector gave the single copy ("single"): it first tries the
  // single-copy protocol (core/mapped_allreduce.cc), the same on every rank, which folds
  // the range of mappedPrep's one PeerFold step. The lanes of `prep` (the selector's
  // choice without it) run only when some rank cannot map a peer's buffers.
  bool mapped = false;
  std::shared_ptr<const PreparedSchedule> mappedPrep;  // set when mapped
  // A rooted collective: the ranks check that they passed the same call before its data
  // moves (core/call_agreement.h).
  bool agree = false;
  // The collective request `prep` was chosen for (before the selector set its chunk
  // size), so that an ExecOp reused for the same call again skips selection and the
  // schedule cache's lock. requestElemSize 0: none yet.
  CollArgs request;
  size_t requestElemSize = 0;
  // For messages and the flight recorder only (never read on the hot path otherwise).
  const char* algo = "";  // the algorithm's registry name; "p2p" for send/recv groups
  int32_t sendPeer = -1, recvPeer = -1;  // send/recv groups: the first peer of each kind
  uint16_t nsend = 0, nrecv = 0;         // send/recv groups: how many of each
  uint64_t p2pBytes = 0;                 // send/recv groups: bytes sent plus received
  CollKind coll = CollKind::kAllReduce;
  uint64_t seq = 0;
  size_t count = 0;
  int root = -1;
  ncclRedOp_t userOp = ncclSum;

  std::string describe() const;  // "AllReduce #12 (count 1024, float, sum, root -1)"
};

// Where a peer process finds one of this rank's buffers (mapped_allreduce.cc's wire
// description): ino 0 with fd -1: off is an address (a peer in this process); ino 0
// with fd -2: not readable; otherwise bytes [lo, size - tail) are in the memory file
// the owner has open as fd, from offset off.
struct MappedRef {
  uint64_t ino = 0, off = 0;
  int32_t fd = -2;
  uint32_t lo = 0, tail = 0;
};

class CommRunner {
 public:
  CommRunner(ncclComm* comm, std::vector<ExecOp> ops, uint64_t ticket);
  explicit CommRunner(ncclComm* comm) : comm_(comm) {}

  // Makes the runner run `nops` ops (the first nops of ops(), kept with their capacity)
  // under `ticket`, from the start.
  void reset(size_t nops, uint64_t ticket);
  std::vector<ExecOp>& ops() { return ops_; }

  ncclComm* comm() const { return comm_; }
  // Makes all the progress possible without waiting. Returns true when every op is done.
  Result<bool> progress();
  // Called when progress() moved nothing for a while: sleeps on what the current op waits
  // for (bounded) and checks deadline, abort and peer liveness.
  Status sleepOnBlocked();
  // How much longer than the rank's spin and yield budgets the current wait polls before
  // it sleeps: SNCCL_NET_POLL_US when the op sends over a net ring polled in user space
  // (an IB net's completion queue) and the wait is on such a ring, else 0. Such a runner
  // posts its own sends as it drives them, so it is the thread that keeps its device busy:
  // asleep, it needs a wake-up to post the next ones, and on a loaded machine that can
  // come milliseconds late, behind another thread's long system call (over Soft-RoCE a
  // post runs the whole message's transfer in the poster's call), while its peer started
  // the next operation alone (docs/performance.md). A runner that only receives gains
  // nothing from polling and sleeps.
  int64_t pollExtensionNs() const;
  // SNCCL_TIMEOUT counts from the first time the current op goes to sleep, not from its
  // start: a clock read per op showed in 8 B profiles (tens of ns of a 0.2-0.5 us op on
  // a virtual machine), and an op that keeps moving is not waiting. Idempotent within an op.
  void startTimeoutClock(int64_t now) {
    if (opStartNs_ == 0) opStartNs_ = now;
  }
  // Creates the connections the ops need that do not exist yet (both ends call this
  // during the same ops).
  Status connect();
  bool needsConnect() const;
  // Whether the last progress() call executed at least one step.
  bool moved() const { return moved_; }
  // Moves data on the net rings of the ops started so far, which the runner claims from
  // the proxy while it runs (net/proxy.h says why); true when anything moved.
  bool driveNet();
  // Hands those rings back to the proxy: before sleeping (`waiting`), and when the
  // runner stops.
  void releaseDriven(bool waiting);
  // After a failure (the rings are poisoned): returns once no net ring reads or writes
  // user memory that the current op named for sending (Connection::postAt) or receiving
  // (Connection::planRecvs), so that the call may return and the user free it.
  void quiesceTransfers();
  uint64_t ticket() const { return ticket_; }
  // Whether this runner holds its communicator's turn (acquireTickets): only then may it
  // write the communicator's flight recorder.
  bool turnHeld = false;
  // Records the current op as failed in the flight recorder (with what it waited on), or
  // the first op when it failed before starting (connecting); the caller holds the turn.
  void recordFailure();

 private:
  // `st` is step `index` of lane `lane`.
  Result<bool> tryStep(ExecOp& op, const Step& st, size_t lane, size_t index);
  // Posts `bytes` at `from` on a pointer-send ring (Connection::postAt) instead of copying
  // them into the slot trySendSlot gave, when the ring takes pointers and the message is
  // large enough; the caller guarantees the bytes stay unchanged until the op ends, which
  // waits for the ring's sendsDone(). False: nothing posted, copy into the slot.
  bool sendInPlace(Connection* sc, const char* from, size_t bytes, uint64_t sig);
  // sendInPlace for the output chunk step `index` of `lane` just wrote at dst, when that
  // step is its range's sole writer (ZeroCopyInfo); false: copy it into the slot.
  bool sendFinalOutput(Connection* sc, const ExecOp& op, size_t lane, size_t index, const char* dst, size_t bytes);
  // The single-copy AllReduce (mapped_allreduce.cc): true once the op is complete, or
  // once the ranks agreed to fall back to its lanes (mapped_.fallback).
  Result<bool> progressMapped(ExecOp& op);
  template <typename Fill>
  bool mappedSendAll(const ExecOp& op, uint32_t bytes, Fill fill);
  bool mappedSendWord(const ExecOp& op, uint64_t word);  // a verdict or a "done" round
  template <typename Take>
  Result<bool> mappedRecvAll(const ExecOp& op, uint32_t bytes, Take take);
  Status foldOwnBlock(const ExecOp& op);
  Status describeOwnBuffers(const engine::DataEngine& engine, char* myIn, char* myOut, size_t bytes);
  // The argument agreement of a rooted collective (call_agreement.cc): startAgreement when
  // the op starts, then progressAgreement until it returns true (every rank passed the
  // same call) or fails the op (some did not).
  void startAgreement(const ExecOp& op);
  Result<bool> progressAgreement(const ExecOp& op);
  Status checkBlocked();
  // The traffic counters (core/comm_stats.h): a message of `bytes` sent to or received
  // from `peer` over a ring, data or protocol.
  void countSent(int peer, uint64_t bytes) {
    if (!comm_->stats.ready()) return;
    stats::PeerStats& p = comm_->stats.peer(peer);
    stats::bump(p.sendBytes, bytes);
    stats::bump(p.sendMsgs, 1);
  }
  void countReceived(int peer, uint64_t bytes) {
    if (!comm_->stats.ready()) return;
    stats::PeerStats& p = comm_->stats.peer(peer);
    stats::bump(p.recvBytes, bytes);
    stats::bump(p.recvMsgs, 1);
  }
  // The flight recorder: an op starts, and what the current one waits for (at a sleep).
  void flightBegin(const ExecOp& op);
  void flightWait();
  // When an op starts: names the op's memory as the landing place of the messages that
  // ZeroCopyInfo::recvTargets lists, on net rings that take it (Connection::planRecvs).
  void planRecvs(const ExecOp& op);
  void claimDriven(const ExecOp& op);

  ncclComm* comm_;
  // A queued runner (the ticket constructor) counts among its communicator's live
  // runners (CommOrdering::runnerBorn) until every member below is destroyed: the ops'
  // scratch goes back to the communicator's pool then, and a worker of a stream may do
  // that after the ticket finished, when ncclCommDestroy may already be freeing it.
  struct LiveToken {
    CommOrdering* ordering = nullptr;
    LiveToken() = default;
    explicit LiveToken(CommOrdering* o) : ordering(o) { o->runnerBorn(); }
    LiveToken(const LiveToken&) = delete;
    LiveToken& operator=(const LiveToken&) = delete;
    ~LiveToken() {
      if (ordering != nullptr) ordering->runnerGone();
    }
  } live_;
  std::vector<ExecOp> ops_;
  size_t nops_ = 0;
  uint64_t ticket_ = 0;
  size_t opIndex_ = 0;
  bool started_ = false;
  bool moved_ = false;
  std::vector<size_t> laneStep_;
  int64_t opStartNs_ = 0;  // 0 until startTimeoutClock() for the current op
  // What the first blocked lane waits for: a connection and which end we are.
  Connection* blockedConn_ = nullptr;
  bool blockedSender_ = false;
  int64_t lastLivenessCheckNs_ = 0;
  std::vector<Connection*> driven_;  // claimed net rings; only this runner's thread drives them
  // Rings the current op sent user memory through (postAt): it ends only once they are done.
  std::vector<Connection*> atPointer_;
  // Rings the current op named receive targets on (planRecvs), and the list it built for
  // one ring (kept for its capacity).
  std::vector<Connection*> targeted_;
  std::vector<RecvTarget> targetList_;
  struct MappedState {
    int phase = 0;     // MappedPhase (mapped_allreduce.cc)
    int next = 1;      // the next peer distance (1 .. nranks-1) within the phase
    bool ok = true;    // this rank could map every peer's buffers; then: every rank could
    bool fallback = false;
    bool folded = false;
    std::string why;  // the first peer buffer this rank could not map
    // Each rank's input and output as seen here: where its element 0 is (for a buffer
    // only partly in a file, an address computed from the part that is: only elements of
    // the middle segment are read through it).
    std::vector<const char*> in;
    std::vector<char*> out;
    // Per rank: whether its input / output is all mapped (else its edges travel through
    // its staging block), and that block as seen here (null when it has none).
    std::vector<uint8_t> inFull, outFull;
    std::vector<char*> stage;
    size_t headBytes = 0, tailBytes = 0;  // the largest edges seen, then in elements:
    size_t headElems = 0, tailElems = 0;  // the same on every rank once agreed
    MappedRef ownIn, ownOut;              // this rank's, found once per op
    // Back to the start of an op; the vectors keep their capacity (no allocation per call).
    void reset(bool fallbackOnly) {
      phase = 0;
      next = 1;
      ok = true;
      fallback = fallbackOnly;
      folded = false;
      why.clear();
      in.clear();
      out.clear();
      inFull.clear();
      outFull.clear();
      stage.clear();
      headBytes = tailBytes = headElems = tailElems = 0;
    }
  } mapped_;
  // This runner's staging block for the edges of its buffers that are not in a file
  // (mapped_allreduce.cc), allocated when first needed.
  struct EdgeStage {
    char* base = nullptr;
    EdgeStage() = default;
    EdgeStage(const EdgeStage&) = delete;
    EdgeStage& operator=(const EdgeStage&) = delete;
    ~EdgeStage();
  } edgeStage_;
  CallAgreement agree_;
  std::vector<char> foldTmp_;  // partial folds of the single-copy AllReduce
  std::vector<void*> foldOuts_;  // the outputs its last combine writes, streamed ones first
  std::vector<const char*> foldIns_;  // each rank's input for one segment of the fold
  std::vector<char*> foldOutBases_;   // each rank's output for one segment of the fold
  std::vector<int> foldOutOrder_;     // the ranks in foldOuts_' order for one segment
  bool claimsMade_ = false;          // the current op's rings are in driven_
  // The runner went to sleep and handed its net rings to the proxy: it leaves them there
  // until one of its steps moves again. A runner woken by its sleep's time limit with
  // nothing new would otherwise claim the rings and give them back at once, waking the
  // proxy each time (every kSleepSliceUs through a long transfer).
  bool handedOff_ = false;
  // The current op sends over a net ring polled in user space (pollExtensionNs).
  bool sendsOverPolledNet_ = false;
};

// Runs the runners to completion (or first error) on this thread.
Status runRunners(std::span<CommRunner*> runners);

}  // namespace snccl
