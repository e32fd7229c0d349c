// The argument agreement of rooted collectives (core/call_agreement.h): the message
// handling, and the executor's rounds.
#include "core/call_agreement.h"

#include <algorithm>
#include <cstring>

#include "collectives/kernels/reduce.h"
#include "common/log.h"
#include "core/executor.h"
#include "core/signature.h"

namespace snccl {

static_assert(sizeof(AgreeMsg) <= kInlineBytes, "an agreement message travels inline");

namespace {

std::string callText(const CallWire& w) {
  const auto coll = static_cast<CollKind>(w.coll);
  std::string s = format("%s #%u (count %llu, %s", w.coll < uint8_t(CollKind::kCount) ? collName(coll) : "?", w.seq,
                         (unsigned long long)w.count,
                         w.dt < ncclNumTypes ? kernels::typeName(static_cast<ncclDataType_t>(w.dt)) : "?");
  if (coll == CollKind::kReduce) s += format(", %s", kernels::opName(static_cast<ncclRedOp_t>(w.op)));
  return s + format(", root %d)", w.root);
}

// What differs between two calls, most telling first.
const char* difference(const CallWire& x, const CallWire& y) {
  if (x.coll != y.coll) return "ranks called different operations";
  if (x.seq != y.seq) return "ranks called different numbers of collectives before this one";
  if (x.root != y.root) return "the ranks passed different roots";
  if (x.count != y.count) return "the ranks passed different counts";
  if (x.dt != y.dt) return "the ranks passed different datatypes";
  return "the ranks passed different reduction operations";
}

}  // namespace

AgreeMsg CallAgreement::message() const {
  AgreeMsg m;
  m.magic = kAgreeMagic;
  m.rankA = rankA;
  m.rankB = rankB;
  m.mine = mine;
  m.a = a;
  m.b = b;
  return m;
}

void CallAgreement::merge(const AgreeMsg& m, int peer, int me) {
  if (differs()) return;  // the first disagreement this rank knew of is the one it reports
  if (m.rankA >= 0) {
    rankA = m.rankA, rankB = m.rankB, a = m.a, b = m.b;
  } else if (!(m.mine == mine)) {
    rankA = peer, rankB = me, a = m.mine, b = mine;
  }
}

std::string CallAgreement::describe() const {
  if (!differs()) return std::string();
  return format("rank %d called %s and rank %d called %s: %s", rankA, callText(a).c_str(), rankB,
                callText(b).c_str(), difference(a, b));
}

void agreementPeers(int rank, int nranks, std::vector<ConnKey>* sends, std::vector<ConnKey>* recvs) {
  sends->clear();
  recvs->clear();
  for (int dist = 1; dist < nranks; dist *= 2) {
    sends->push_back({(rank + dist) % nranks, 0});
    recvs->push_back({(rank - dist + nranks) % nranks, 0});
  }
}

Result<bool> CommRunner::progressAgreement(const ExecOp& op) {
  CallAgreement& a = agree_;
  const int n = comm_->nranks;
  const int me = comm_->rank;
  for (; (1 << a.round) < n; ++a.round, a.sent = false) {
    const int dist = 1 << a.round;
    if (!a.sent) {
      Connection* c = comm_->conns.sendOf({(me + dist) % n, 0}).get();
      char* slot = c->trySendSlot(sizeof(AgreeMsg));
      if (slot == nullptr) {
        blockedConn_ = c, blockedSender_ = true;
        return false;
      }
      const AgreeMsg m = a.message();
      std::memcpy(slot, &m, sizeof m);
      c->post(sizeof m, op.sig);
      countSent((me + dist) % n, sizeof m);
      a.sent = true;
      moved_ = true;
    }
    const int peer = (me - dist + n) % n;
    Connection* c = comm_->conns.recvOf({peer, 0}).get();
    uint32_t got = 0;
    uint64_t sig = 0;
    const char* in = c->tryRecvSlot(&got, &sig);
    if (in == nullptr) {
      blockedConn_ = c, blockedSender_ = false;
      return false;
    }
    AgreeMsg m;
    if (got == sizeof m) std::memcpy(&m, in, sizeof m);
    // Anything else is a data message: the peer runs another operation (its signature says
    // which) or its exchange would have come first.
    if (got != sizeof m || m.magic != kAgreeMagic) return mismatchError(comm_, op, peer, got, sizeof m, sig);
    a.merge(m, peer, me);
    c->release();
    countReceived(peer, sizeof m);
    moved_ = true;
  }
  if (a.differs()) return InvalidUsage("%s: rank %d: %s", op.describe().c_str(), me, a.describe().c_str());
  return true;
}

void CommRunner::startAgreement(const ExecOp& op) {
  if (!op.agree || comm_->nranks < 2) {
    agree_.done = true;
    return;
  }
  CallWire w;
  w.count = op.count;
  w.seq = uint32_t(op.seq);
  w.root = op.root;
  w.op = op.coll == CollKind::kReduce ? std::min<int>(op.userOp, ncclNumOps) : 0;
  w.coll = uint8_t(op.coll);
  w.dt = uint8_t(op.dt);
  agree_.start(w);
}

}  // namespace snccl
