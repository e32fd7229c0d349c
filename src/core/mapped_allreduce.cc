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
// when they come from ncclMemAlloc, whose blocks are memory files another process can
// map (core/mem_blocks.h, core/peer_buffers.h), or when they were registered with
// ncclCommRegister, which moves their whole pages onto such a file
// (core/user_pages.h). Whether that holds is only known per call,
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
//
// Edges. A registered user buffer rarely starts or ends on a page boundary, and only its
// whole pages are in the file: up to a page at either end is not. Every rank learns every
// rank's edges from the descriptions and takes the largest, in whole elements
// (headElems, tailElems: the same on every rank). A rank whose input or output is not all
// in a file has a small staging block (ncclMemAlloc memory, EdgeStage): before it
// describes its buffers it copies its input's first and last page there; the folds read
// the edges of its input from there and write the edges of its output there; after
// every "done" it copies its output's edges into place. The middle is read and written
// directly as above.
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collectives/kernels/reduce.h"
#include "common/log.h"
#include "core/executor.h"
#include "core/mem_blocks.h"
#include "core/signature.h"
#include "core/user_pages.h"

namespace snccl {

namespace {

enum MappedPhase { kDescribe, kReadDescs, kVerdict, kReadVerdicts, kFold, kReadDone };

// One rank's buffers as one peer must find them: addresses for a peer in the same
// process, memory-file references for the others. Fits an inline message.
// The count is the rank's own, exactly: the signature carries only a hash of it, and a
// peer's buffers are mapped and written for this rank's count, so the ranks must have
// passed the same one.
struct Desc {
  MappedRef in, out;
  uint64_t stageIno, stageOff;  // the rank's EdgeStage (ino 0: none)
  int32_t stageFd;
  uint64_t count;
};
static_assert(sizeof(Desc) <= kInlineBytes, "a description travels inline");

constexpr int32_t kAddress = -1;
constexpr int32_t kUnreadable = -2;

size_t pageBytes() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}
// A staging block: the input's first and last edge, then the output's.
enum StagePart { kInHead = 0, kInTail = 1, kOutHead = 2, kOutTail = 3, kStageParts = 4 };

// Where this rank's buffer at `p` can be mapped from by another process: all of it (an
// ncclMemAlloc block), its middle (a registered buffer whose edges fit the staging
// block), or nothing.
MappedRef describeOwn(const char* p, size_t bytes) {
  const memblocks::FileRef blk = memblocks::find(p, bytes);
  if (blk.ino != 0) return MappedRef{blk.ino, blk.offset, blk.fd, 0, 0};
  const userpages::Span sp = userpages::find(p, bytes);
  if (sp.ref.ino != 0 && sp.lo <= pageBytes() && sp.tail <= pageBytes() && sp.lo + sp.tail < bytes)
    return MappedRef{sp.ref.ino, sp.ref.offset, sp.ref.fd, uint32_t(sp.lo), uint32_t(sp.tail)};
  return MappedRef{0, 0, kUnreadable, 0, 0};
}

char* at(const char* base, ptrdiff_t off) {
  return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(base) + uintptr_t(off));
}

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
    countSent(peer, bytes);
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
    countReceived(peer, bytes);
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
  // every rank's output (DataEngine::reduceStream). Within each line every operand is read
  // before any output is written, so in place (an output is its rank's input) the writes
  // overwrite only what was just read. Outputs that are not their rank's input get
  // streaming stores; in-place ones plain stores, because their lines were just loaded
  // into the cache (streaming over them made in-place calls 2-4x slower).
  if (foldOuts_.size() < size_t(n)) foldOuts_.resize(size_t(n));
  foldIns_.resize(size_t(n));
  foldOutBases_.resize(size_t(n));
  foldOutOrder_.resize(size_t(n));
  int nstream = 0;
  auto orderOutputs = [&] {  // streamed outputs first, each group from this rank on
    size_t k = 0;
    for (int pass = 0; pass < 2; ++pass) {
      for (int d = 0; d < n; ++d) {
        const size_t q = size_t((me + d) % n);
        if ((foldOutBases_[q] != foldIns_[q]) == (pass == 0)) foldOutOrder_[k++] = int(q);
      }
      if (pass == 0) nstream = int(k);
    }
  };
  auto outsAt = [&](size_t off) {
    for (int d = 0; d < n; ++d)
      foldOuts_[size_t(d)] = at(foldOutBases_[size_t(foldOutOrder_[size_t(d)])], ptrdiff_t(off));
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
  // Three segments: the head edge, the middle, the tail edge. In an edge, a rank whose
  // buffer is not all in a file is read and written through its staging block, whose
  // parts are addressed like the buffer (a part holds the first or the last page).
  const MappedState& m = mapped_;
  const size_t page = pageBytes(), bytes = op.count * es;
  const size_t cuts[4] = {0, m.headElems, op.count - m.tailElems, op.count};
  for (int seg = 0; seg < 3; ++seg) {
    const size_t from = std::max(blk.begin, cuts[seg]), to = std::min(blk.end, cuts[seg + 1]);
    if (from >= to) continue;
    for (size_t q = 0; q < size_t(n); ++q) {
      const char* in = m.in[q];
      char* out = m.out[q];
      if (seg == 0 && !m.inFull[q]) in = m.stage[q] + kInHead * page;
      if (seg == 0 && !m.outFull[q]) out = m.stage[q] + kOutHead * page;
      if (seg == 2 && !m.inFull[q]) in = at(m.stage[q] + kInTail * page + page, -ptrdiff_t(bytes));
      if (seg == 2 && !m.outFull[q]) out = at(m.stage[q] + kOutTail * page + page, -ptrdiff_t(bytes));
      foldIns_[q] = in;
      foldOutBases_[q] = out;
    }
    orderOutputs();
    for (size_t e0 = from; e0 < to; e0 += piece) {
      const size_t len = std::min(piece, to - e0);
      const ptrdiff_t off = ptrdiff_t(e0 * es);
      const char* acc = at(foldIns_[0], off);
      if (scalar) {
        SNCCL_TRY(op.engine->copy(tmp, acc, len, op.dt, op.op, true, false));
        acc = tmp;
      }
      for (int j = 1; j < n - 1; ++j) {
        SNCCL_TRY(op.engine->reduce(tmp, acc, at(foldIns_[size_t(j)], off), len, op.dt, op.op, true, false));
        acc = tmp;
      }
      SNCCL_TRY(op.engine->reduceStream(outsAt(size_t(off)), n, nstream, acc, at(foldIns_[size_t(n - 1)], off), len,
                                        op.dt, op.op, true, true));
    }
  }
  // The streaming stores are weakly ordered: make them globally visible before the "done"
  // that lets peers read their outputs (and lets this rank return).
  SNCCL_TRY(op.engine->streamFence());
  // The traffic counters: this rank wrote its block into every peer's output.
  if (comm_->stats.ready()) {
    const uint64_t bytes = uint64_t(blk.end - blk.begin) * es;
    for (int p = 0; p < n; ++p)
      if (p != me) stats::bump(comm_->stats.peer(p).directBytes, bytes);
  }
  return OkStatus();
}

CommRunner::EdgeStage::~EdgeStage() {
  if (base != nullptr) (void)memblocks::release(base);
}

// Once per op, before the first description goes: this rank's entries of the mapped
// state, where peer processes find its buffers, and its input's edges staged when not
// all of a buffer is in a file.
Status CommRunner::describeOwnBuffers(const engine::DataEngine& engine, char* myIn, char* myOut, size_t bytes) {
  MappedState& m = mapped_;
  const size_t n = size_t(comm_->nranks), me = size_t(comm_->rank);
  m.in.assign(n, nullptr);
  m.out.assign(n, nullptr);
  m.inFull.assign(n, 1);
  m.outFull.assign(n, 1);
  m.stage.assign(n, nullptr);
  m.in[me] = myIn;
  m.out[me] = myOut;
  if (engine.kind() != engine::MemoryKind::kHost) {
    // Peers map host memory only: this rank's buffers are unreadable to them (nothing may
    // register or stage them here), so every rank takes the rings.
    m.ownIn = m.ownOut = MappedRef{};
    if (m.why.empty()) m.why = format("rank %zu's buffers are %s memory", me, engine::memoryKindName(engine.kind()));
    m.ok = false;
    return OkStatus();
  }
  m.ownIn = describeOwn(myIn, bytes);
  m.ownOut = myOut == myIn ? m.ownIn : describeOwn(myOut, bytes);
  if (AutoRegistrations* autoRegs = comm_->singleCopy.autoRegs.get()) {
    // Buffers the program passes again and again are registered on their second use.
    autoRegs->tick();
    bool now = m.ownIn.fd == kUnreadable && autoRegs->offer(myIn, bytes);
    if (myOut != myIn && m.ownOut.fd == kUnreadable) now = autoRegs->offer(myOut, bytes) || now;
    if (now) {
      m.ownIn = describeOwn(myIn, bytes);
      m.ownOut = myOut == myIn ? m.ownIn : describeOwn(myOut, bytes);
    }
  }
  m.inFull[me] = m.ownIn.lo == 0 && m.ownIn.tail == 0;
  m.outFull[me] = m.ownOut.lo == 0 && m.ownOut.tail == 0;
  m.headBytes = std::max(m.ownIn.lo, m.ownOut.lo);
  m.tailBytes = std::max(m.ownIn.tail, m.ownOut.tail);
  if (m.inFull[me] && m.outFull[me]) return OkStatus();
  const size_t page = pageBytes();
  if (edgeStage_.base == nullptr) {
    Result<void*> r = memblocks::allocate(kStageParts * page);
    if (!r.ok()) {
      // Peers then see this rank's buffers as unreadable, and every rank takes the rings.
      m.ownIn = m.ownOut = MappedRef{};
      if (m.why.empty()) m.why = "no staging block for the edges: " + r.status().message();
      m.ok = false;
      return OkStatus();
    }
    edgeStage_.base = static_cast<char*>(r.value());
  }
  char* st = edgeStage_.base;
  m.stage[me] = st;
  const size_t e = std::min(page, bytes);
  SNCCL_TRY(engine.copyBytes(st + kInHead * page, myIn, e));
  SNCCL_TRY(engine.copyBytes(st + kInTail * page + page - e, myIn + bytes - e, e));
  return OkStatus();
}

Result<bool> CommRunner::progressMapped(ExecOp& op) {
  MappedState& m = mapped_;
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
          SNCCL_TRY(describeOwnBuffers(*op.engine, myIn, myOut, bytes));
        }
        memblocks::FileRef stage{};
        if (m.stage[size_t(me)] != nullptr) stage = memblocks::find(edgeStage_.base, kStageParts * pageBytes());
        auto fill = [&](int peer, char* slot) {
          Desc d{};
          d.count = op.count;
          if (sameProcess(comm_, peer)) {
            // Addresses; the edges as other processes see them, so that every rank
            // treats this rank's edges alike (one writer, one place).
            d.in = MappedRef{0, uint64_t(reinterpret_cast<uintptr_t>(myIn)), kAddress, m.ownIn.lo, m.ownIn.tail};
            d.out = MappedRef{0, uint64_t(reinterpret_cast<uintptr_t>(myOut)), kAddress, m.ownOut.lo, m.ownOut.tail};
            d.stageIno = uint64_t(reinterpret_cast<uintptr_t>(m.stage[size_t(me)]));
            d.stageFd = kAddress;
          } else {
            d.in = m.ownIn;
            d.out = m.ownOut;
            d.stageIno = stage.ino;
            d.stageOff = stage.offset;
            d.stageFd = stage.ino != 0 ? stage.fd : kUnreadable;
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
          const pid_t pid = comm_->peers.info[peer].pid;
          auto unreadable = [&](std::string why) -> char* {
            if (m.why.empty()) m.why = std::move(why);
            return nullptr;
          };
          auto resolve = [&](const MappedRef& b) -> char* {
            if (b.fd == kUnreadable)
              return unreadable(format("rank %d's buffers are neither from ncclMemAlloc nor registered", peer));
            if (b.lo > pageBytes() || b.tail > pageBytes() || size_t(b.lo) + b.tail >= bytes)
              return unreadable(format("rank %d described edges of %u and %u bytes", peer, b.lo, b.tail));
            if (b.fd == kAddress) return reinterpret_cast<char*>(uintptr_t(b.off));
            Result<char*> r = comm_->singleCopy.peerBuffers.resolve(peer, pid, memblocks::FileRef{b.fd, b.ino, b.off},
                                                                    bytes - b.lo - b.tail);
            if (!r.ok()) return unreadable(r.status().message());
            return at(r.value(), -ptrdiff_t(b.lo));  // element 0, though only the middle is read through it
          };
          const size_t q = size_t(peer);
          m.in[q] = resolve(d.in);
          m.out[q] = resolve(d.out);
          m.inFull[q] = d.in.lo == 0 && d.in.tail == 0;
          m.outFull[q] = d.out.lo == 0 && d.out.tail == 0;
          m.headBytes = std::max({m.headBytes, size_t(d.in.lo), size_t(d.out.lo)});
          m.tailBytes = std::max({m.tailBytes, size_t(d.in.tail), size_t(d.out.tail)});
          if (!m.inFull[q] || !m.outFull[q]) {
            if (d.stageFd == kAddress) {
              m.stage[q] = reinterpret_cast<char*>(uintptr_t(d.stageIno));
            } else if (d.stageIno == 0 || d.stageFd < 0) {
              m.stage[q] = unreadable(format("rank %d has edges but no staging block", peer));
            } else {
              Result<char*> r = comm_->singleCopy.peerBuffers.resolve(
                  peer, pid, memblocks::FileRef{d.stageFd, d.stageIno, d.stageOff}, kStageParts * pageBytes());
              m.stage[q] = r.ok() ? r.value() : unreadable(r.status().message());
            }
          }
          if (m.in[q] == nullptr || m.out[q] == nullptr || ((!m.inFull[q] || !m.outFull[q]) && m.stage[q] == nullptr))
            m.ok = false;
          return OkStatus();
        };
        Result<bool> r = mappedRecvAll(op, sizeof(Desc), take);
        if (!r.ok() || !r.value()) return r;
        // Every rank saw every description: the same edges everywhere.
        m.headElems = (m.headBytes + es - 1) / es;
        m.tailElems = (m.tailBytes + es - 1) / es;
        if (m.ok && m.headElems + m.tailElems > op.count) {
          m.ok = false;
          m.why = format("%zu elements are too few for edges of %zu and %zu bytes", op.count, m.headBytes, m.tailBytes);
        }
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
        if (!m.outFull[size_t(me)]) {
          // Every fold is done: this rank's output edges are final in its staging block.
          const size_t head = m.headElems * es, tail = m.tailElems * es, page = pageBytes();
          const char* st = m.stage[size_t(me)];
          SNCCL_TRY(op.engine->copyBytes(myOut, st + kOutHead * page, head));
          SNCCL_TRY(op.engine->copyBytes(myOut + bytes - tail, st + kOutTail * page + page - tail, tail));
        }
        return true;
      }
    }
  }
}

}  // namespace snccl
