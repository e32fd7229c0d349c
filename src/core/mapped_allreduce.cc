// Single-copy AllReduce between the ranks of one node: each rank reads its peers' buffers
// directly instead of passing the data through the connection rings. This runs the
// "single" algorithm's schedule (mapped/allreduce_single.cc: one PeerFold step per rank)
// when the selector picks it (ExecOp::mapped).
//
// Through the rings, every byte is copied into a slot by its sender and out of it by its
// receiver: about 4.5N bytes touched per rank for N of data. Through mapped buffers a
// rank touches 2N, what the memory-bandwidth bound assumes: rank r folds block r of every
// rank's input, in rank order (x0 (+) x1 (+) ... as the flat algorithm), and writes the
// result into block r of every rank's output. Each block is folded once, so every rank
// ends with the same bits. (Folding into its own output and letting each peer copy the
// block from there reads that block a second time: 2.5N at 2 ranks, measured slower.)
//
// A peer's buffers are mappable when the ranks are threads of one process (any memory),
// or when they come from ncclMemAlloc, whose blocks are memory files another process can
// map (core/mem_blocks.h, core/peer_buffers.h). Whether that holds is only known per call,
// so the op runs a short protocol of small messages on channel 0 of every pair, in rounds
// that every rank runs (ExecOp::mapped is the selector's pick, the same on every rank):
//
//   1. describe: each rank sends every peer where its input and output are;
//   2. verdict:  each rank sends whether it could map all of them. Any "no" and every
//                rank runs the op's ordinary lanes instead (ExecOp::prep: the selector's
//                choice without the single copy; the same decision everywhere,
//                since every rank sees every verdict). Nobody touches a peer's buffers
//                before every verdict is in, so every rank is inside this call by then;
//   3. done:     after folding its block into every output. A rank returns (and its
//                caller may reuse or free the buffers) only when every peer said "done":
//                then nobody reads its input or writes its output any more, and every
//                block of its output is final (streaming stores are fenced before "done").
//
// Only rank r reads or writes block r of any buffer during the call, and it reads every
// operand of a piece before writing the piece anywhere, so the same protocol is correct
// in place (input = output on every rank).
#include <algorithm>
#include <cstring>

#include "collectives/kernels/reduce.h"
#include "common/log.h"
#include "core/executor.h"
#include "core/mem_blocks.h"
#include "core/signature.h"

namespace snccl {

namespace {

enum MappedPhase { kDescribe, kReadDescs, kVerdict, kReadVerdicts, kFold, kReadDone };

// One rank's buffers as one peer must find them: addresses for a peer in the same
// process, memory-file references for the others. Fits an inline message.
// The count is the rank's own, exactly: the signature carries only a hash of it, and a
// peer's buffers are mapped and written for this rank's count, so the ranks must have
// passed the same one.
struct Desc {
  uint64_t inIno, inOff, outIno, outOff;  // ino 0 with fd -1: the offset is an address
  int32_t inFd, outFd;                    // ino 0 with fd -2: not readable by that peer
  uint64_t count;
};
static_assert(sizeof(Desc) <= kInlineBytes, "a description travels inline");

constexpr int32_t kAddress = -1;
constexpr int32_t kUnreadable = -2;

struct Block {
  size_t begin, end;  // elements
};

bool sameProcess(const ncclComm* comm, int peer) {
  return comm->peers.info[peer].processToken == comm->peers.info[comm->rank].processToken;
}

}  // namespace

template <typename Fill>
bool CommRunner::mappedSendAll(const ExecOp& op, uint32_t bytes, Fill fill) {
  const int n = comm_->nranks;
  for (; mapped_.next < n; ++mapped_.next) {
    int peer = (comm_->rank + mapped_.next) % n;
    Connection* c = comm_->conns.sendOf({peer, 0}).get();
    char* out = c->trySendSlot(bytes);
    if (out == nullptr) {
      blockedConn_ = c, blockedSender_ = true;
      return false;
    }
    fill(peer, out);
    c->post(bytes, op.sig);
    moved_ = true;
  }
  mapped_.next = 1;
  return true;
}

bool CommRunner::mappedSendWord(const ExecOp& op, uint64_t word) {
  return mappedSendAll(op, sizeof word, [&](int, char* slot) { std::memcpy(slot, &word, sizeof word); });
}

template <typename Take>
Result<bool> CommRunner::mappedRecvAll(const ExecOp& op, uint32_t bytes, Take take) {
  const int n = comm_->nranks;
  for (; mapped_.next < n; ++mapped_.next) {
    int peer = (comm_->rank - mapped_.next + n) % n;
    Connection* c = comm_->conns.recvOf({peer, 0}).get();
    uint32_t got = 0;
    uint64_t sig = 0;
    const char* in = c->tryRecvSlot(&got, &sig);
    if (in == nullptr) {
      blockedConn_ = c, blockedSender_ = false;
      return false;
    }
    if (got != bytes || !signatureMatches(sig, op.sig)) return mismatchError(comm_, op, peer, got, bytes, sig);
    SNCCL_TRY(take(peer, in));
    c->release();
    moved_ = true;
  }
  mapped_.next = 1;
  return true;
}

Status CommRunner::foldOwnBlock(const ExecOp& op) {
  const int n = comm_->nranks;
  const int me = comm_->rank;
  const size_t es = op.elemSize;
  // This rank's block: the range of its schedule's one PeerFold step (the "single"
  // algorithm, mapped/allreduce_single.cc), the same offsets in the input and the output.
  const Schedule* fold = op.mappedPrep ? &op.mappedPrep->sched : nullptr;
  if (fold == nullptr || fold->lanes.size() != 1 || fold->lanes[0].steps.size() != 1 ||
      fold->lanes[0].steps[0].prim != Prim::kPeerFold)
    return InternalError("single-copy AllReduce #%llu without one PeerFold step", (unsigned long long)op.seq);
  const Step& st = fold->lanes[0].steps[0];
  const Block blk{st.src.offset, st.src.offset + st.count};
  if (st.dst.offset != st.src.offset || blk.end > op.count)
    return InternalError("single-copy AllReduce #%llu: PeerFold of [%zu, %zu) -> %zu of %zu elements",
                         (unsigned long long)op.seq, blk.begin, blk.end, st.dst.offset, op.count);
  // The last combine of the fold, x0 (+) ... (+) x(n-1), writes its result straight into
  // every rank's output with streaming stores (DataEngine::reduceStream), this rank's own
  // first. Within each line every operand is read before any output is written, so in
  // place (each output is its rank's input) the writes overwrite only what was just read.
  if (foldOuts_.size() < size_t(n)) foldOuts_.resize(size_t(n));
  auto outsAt = [&](size_t off) {
    for (int d = 0; d < n; ++d) foldOuts_[size_t(d)] = mapped_.out[size_t((me + d) % n)] + off;
    return foldOuts_.data();
  };
  // Every input is a rank's own contribution: PreMulSum scales each once (scale = true);
  // the kernels scale their second operand only, so the first is scaled by a copy.
  const bool scalar = op.op.hasScalar;
  // The partial fold goes through a buffer small enough to stay in the L1 cache between
  // its passes, so that each pass's loads of the inputs stay close to the streaming stores
  // of the last (a reduce-then-stream-copy fold of 32 MiB to two outputs takes
  // 4.0-4.4 ms on one core with 64 KiB pieces, 3.1-3.8 with 1-4 KiB ones). At 2
  // ranks without a scalar there is no partial fold: the whole block is one pass.
  // Outputs that are not 16-byte aligned get plain stores (reduceStream).
  const bool partialFold = n > 2 || scalar;
  const size_t piece = partialFold ? std::max<size_t>(1, size_t(4096) / es) : std::max<size_t>(1, blk.end - blk.begin);
  if (partialFold && foldTmp_.size() < piece * es) foldTmp_.assign(piece * es, 0);
  char* tmp = foldTmp_.data();
  for (size_t at = blk.begin; at < blk.end; at += piece) {
    const size_t len = std::min(piece, blk.end - at);
    const size_t off = at * es;
    const char* acc = mapped_.in[0] + off;
    if (scalar) {
      op.engine->copy(tmp, acc, len, op.dt, op.op, true, false);
      acc = tmp;
    }
    for (int j = 1; j < n - 1; ++j) {
      op.engine->reduce(tmp, acc, mapped_.in[size_t(j)] + off, len, op.dt, op.op, true, false);
      acc = tmp;
    }
    op.engine->reduceStream(outsAt(off), n, acc, mapped_.in[size_t(n - 1)] + off, len, op.dt, op.op, true, true);
  }
  // The streaming stores are weakly ordered: make them globally visible before the "done"
  // that lets peers read their outputs (and lets this rank return).
  op.engine->streamFence();
  return OkStatus();
}

Result<bool> CommRunner::progressMapped(ExecOp& op) {
  MappedState& m = mapped_;
  const int n = comm_->nranks;
  const int me = comm_->rank;
  const size_t es = op.elemSize;
  const size_t bytes = op.count * es;
  char* myIn = nullptr;
  char* myOut = nullptr;
  for (size_t i = 0; i < op.sched->bufs.size(); ++i) {
    if (op.sched->bufs[i].role == BufRole::kInput) myIn = op.bufs[i];
    if (op.sched->bufs[i].role == BufRole::kOutput) myOut = op.bufs[i];
  }
  if (myIn == nullptr) myIn = myOut;  // an in-place schedule may name the buffer once
  if (myOut == nullptr) myOut = myIn;
  if (myIn == nullptr)
    return InternalError("single-copy AllReduce #%llu without a user buffer", (unsigned long long)op.seq);
  for (;;) {
    switch (m.phase) {
      case kDescribe: {
        if (m.in.empty()) {
          m.in.assign(size_t(n), nullptr);
          m.out.assign(size_t(n), nullptr);
          m.in[size_t(me)] = myIn;
          m.out[size_t(me)] = myOut;
        }
        const memblocks::FileRef in = memblocks::find(myIn, bytes);
        const memblocks::FileRef out = memblocks::find(myOut, bytes);
        auto fill = [&](int peer, char* slot) {
          Desc d{};
          if (sameProcess(comm_, peer)) {
            d = Desc{0, uint64_t(reinterpret_cast<uintptr_t>(myIn)), 0, uint64_t(reinterpret_cast<uintptr_t>(myOut)),
                     kAddress, kAddress, op.count};
          } else {
            d = Desc{in.ino, in.offset, out.ino, out.offset, in.ino != 0 ? in.fd : kUnreadable,
                     out.ino != 0 ? out.fd : kUnreadable, op.count};
          }
          std::memcpy(slot, &d, sizeof d);
        };
        if (!mappedSendAll(op, sizeof(Desc), fill)) return false;
        m.phase = kReadDescs;
        break;
      }
      case kReadDescs: {
        auto take = [&](int peer, const char* slot) -> Status {
          Desc d;
          std::memcpy(&d, slot, sizeof d);
          // Before any of the peer's memory is resolved: every rank receives every rank's
          // description, so every rank fails here, and nobody maps or writes a buffer.
          if (d.count != op.count)
            return InvalidUsage("%s: rank %d passed count %llu, rank %d count %zu: the ranks passed different counts",
                                op.describe().c_str(), peer, (unsigned long long)d.count, me, op.count);
          auto resolve = [&](uint64_t ino, uint64_t off, int32_t fd) -> char* {
            if (fd == kAddress) return reinterpret_cast<char*>(uintptr_t(off));
            if (fd == kUnreadable) {
              if (m.why.empty()) m.why = format("rank %d's buffers are not from ncclMemAlloc", peer);
              return nullptr;
            }
            Result<char*> r = comm_->singleCopy.peerBuffers.resolve(peer, comm_->peers.info[peer].pid,
                                                                    memblocks::FileRef{fd, ino, off}, bytes);
            if (r.ok()) return r.value();
            if (m.why.empty()) m.why = r.status().message();
            return nullptr;
          };
          m.in[size_t(peer)] = resolve(d.inIno, d.inOff, d.inFd);
          m.out[size_t(peer)] = resolve(d.outIno, d.outOff, d.outFd);
          if (m.in[size_t(peer)] == nullptr || m.out[size_t(peer)] == nullptr) m.ok = false;
          return OkStatus();
        };
        Result<bool> r = mappedRecvAll(op, sizeof(Desc), take);
        if (!r.ok() || !r.value()) return r;
        m.phase = kVerdict;
        break;
      }
      case kVerdict: {
        if (!mappedSendWord(op, m.ok ? 1 : 0)) return false;
        m.phase = kReadVerdicts;
        break;
      }
      case kReadVerdicts: {
        auto take = [&](int, const char* slot) -> Status {
          uint64_t word = 0;
          std::memcpy(&word, slot, sizeof word);
          if (word == 0) m.ok = false;
          return OkStatus();
        };
        Result<bool> r = mappedRecvAll(op, sizeof(uint64_t), take);
        if (!r.ok() || !r.value()) return r;
        const int verdict = m.ok ? 1 : 0;
        if (comm_->singleCopy.verdict != verdict) {  // logged when it changes, not per call
          comm_->singleCopy.verdict = verdict;
          if (m.ok)
            SN_INFO(log::kColl, "AllReduce #%llu: single copy: every rank reads its peers' buffers directly (%zu bytes)",
                    (unsigned long long)op.seq, bytes);
          else
            SN_INFO(log::kColl, "AllReduce #%llu: through the rings: %s", (unsigned long long)op.seq,
                    m.why.empty() ? "a peer cannot map this rank's buffers" : m.why.c_str());
        }
        if (!m.ok) {
          m.fallback = true;  // every rank saw the same verdicts
          return true;
        }
        m.phase = kFold;
        break;
      }
      case kFold: {
        if (!m.folded) SNCCL_TRY(foldOwnBlock(op));  // once: before the first "done" goes
        m.folded = true;
        if (!mappedSendWord(op, 1)) return false;
        m.phase = kReadDone;
        break;
      }
      case kReadDone: {
        Result<bool> r = mappedRecvAll(op, sizeof(uint64_t), [](int, const char*) { return OkStatus(); });
        if (!r.ok() || !r.value()) return r;
        return true;
      }
    }
  }
}

}  // namespace snccl
