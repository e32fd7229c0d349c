// The symbolic checker's entry points: what NCCL says every collective (and a group of
// send/recv calls) must produce, its buffer sizes and in-place aliasing, written
// independently of the generators. checker_sim.cc executes the schedules.
#include "collectives/checker.h"

#include <unordered_map>
#include <utility>

#include "collectives/channels.h"
#include "collectives/checker_sim.h"

namespace snccl {

namespace {

using check::Alias;
using check::Sym;

bool isReduction(CollKind k) {
  return k == CollKind::kAllReduce || k == CollKind::kReduce || k == CollKind::kReduceScatter;
}
bool isRooted(CollKind k) {
  return k == CollKind::kBroadcast || k == CollKind::kReduce || k == CollKind::kGather ||
         k == CollKind::kScatter;
}

// The buffer sizes (elements) NCCL requires of rank r; unused buffers are 0.
void ncclSizes(const CollArgs& a, int r, size_t* in, size_t* out) {
  const size_t c = a.count, nc = a.count * static_cast<size_t>(a.nranks);
  const bool root = r == a.root;
  switch (a.coll) {
    case CollKind::kAllReduce: *in = c, *out = c; return;
    case CollKind::kBroadcast: *in = root ? c : 0, *out = c; return;
    case CollKind::kReduce: *in = c, *out = root ? c : 0; return;
    case CollKind::kAllGather: *in = c, *out = nc; return;
    case CollKind::kReduceScatter: *in = nc, *out = c; return;
    case CollKind::kAlltoAll: *in = nc, *out = nc; return;
    case CollKind::kGather: *in = c, *out = root ? nc : 0; return;
    case CollKind::kScatter: *in = root ? nc : 0, *out = c; return;
    default: *in = *out = 0; return;
  }
}

// NCCL's in-place rule: ReduceScatter recv == send + rank*count; AllGather send == recv +
// rank*count; Gather (root) send == recv + root*count; Scatter (root) recv == send +
// root*count; the others send == recv.
Alias inPlaceAlias(const CollArgs& a, int r, size_t inElems, size_t outElems) {
  if (!a.inPlace) return Alias{};
  const size_t c = a.count;
  const bool root = r == a.root;
  switch (a.coll) {
    case CollKind::kAllGather: return Alias{true, kInputBuf, kOutputBuf, static_cast<size_t>(r) * c};
    case CollKind::kReduceScatter: return Alias{true, kOutputBuf, kInputBuf, static_cast<size_t>(r) * c};
    case CollKind::kGather:
      return root ? Alias{true, kInputBuf, kOutputBuf, static_cast<size_t>(a.root) * c} : Alias{};
    case CollKind::kScatter:
      return root ? Alias{true, kOutputBuf, kInputBuf, static_cast<size_t>(a.root) * c} : Alias{};
    default:  // one address; the smaller buffer (0 elements on some non-roots) sits inside
      return inElems <= outElems ? Alias{true, kInputBuf, kOutputBuf, 0} : Alias{true, kOutputBuf, kInputBuf, 0};
  }
}

Status checkShape(const CollArgs& a, int r, const Schedule& s) {
  if (s.coll != a.coll) return InternalError("generated a %s schedule", collName(s.coll));
  if (s.reduces != isReduction(a.coll)) {
    return InternalError("schedule.reduces is %d for %s", s.reduces ? 1 : 0, collName(a.coll));
  }
  if (s.bufs.size() < 2 || s.bufs[kInputBuf].role != BufRole::kInput ||
      s.bufs[kOutputBuf].role != BufRole::kOutput) {
    return InternalError("buffers 0 and 1 must be Input and Output");
  }
  size_t in = 0, out = 0;
  ncclSizes(a, r, &in, &out);
  if (s.bufs[kInputBuf].elems != in || s.bufs[kOutputBuf].elems != out) {
    return InternalError("declares Input/Output of %zu/%zu elements; NCCL's are %zu/%zu", s.bufs[kInputBuf].elems,
                         s.bufs[kOutputBuf].elems, in, out);
  }
  for (size_t b = 2; b < s.bufs.size(); ++b) {
    if (s.bufs[b].role != BufRole::kScratch) return InternalError("buffer %zu must be Scratch", b);
  }
  return OkStatus();
}

// Expected output values. A reduction's element is the sum over all ranks of the
// contributing input element, each scaled once, finalized once.
class CollExpect {
 public:
  explicit CollExpect(const CollArgs& a) : a_(a) {
    if (!isReduction(a.coll)) return;
    const size_t len = a.coll == CollKind::kReduceScatter ? a.count * static_cast<size_t>(a.nranks) : a.count;
    sums_.assign(len, 0);
    for (int p = 0; p < a.nranks; ++p) {
      for (size_t j = 0; j < len; ++j) sums_[j] += check::origin(p, kInputBuf, j).hash;
    }
  }

  Sym value(int r, size_t i) const {
    const size_t c = a_.count;
    const uint32_t n = static_cast<uint32_t>(a_.nranks);
    switch (a_.coll) {
      case CollKind::kAllReduce:
      case CollKind::kReduce: return Sym{sums_[i], n, n | check::kFinalized};
      case CollKind::kReduceScatter: return Sym{sums_[static_cast<size_t>(r) * c + i], n, n | check::kFinalized};
      case CollKind::kBroadcast: return check::origin(a_.root, kInputBuf, i);
      case CollKind::kAllGather:
      case CollKind::kGather: return check::origin(static_cast<int>(i / c), kInputBuf, i % c);
      case CollKind::kAlltoAll:
        return check::origin(static_cast<int>(i / c), kInputBuf, static_cast<size_t>(r) * c + i % c);
      case CollKind::kScatter: return check::origin(a_.root, kInputBuf, static_cast<size_t>(r) * c + i);
      default: return Sym{};
    }
  }

 private:
  CollArgs a_;
  std::vector<uint64_t> sums_;
};

std::string describeArgs(const CollArgs& a) {
  std::string t = format("%s nranks=%d count=%zu chunkElems=%zu", collName(a.coll), a.nranks, a.count, a.chunkElems);
  if (isRooted(a.coll)) t += format(" root=%d", a.root);
  return a.inPlace ? t + " in-place" : t;
}

Status checkCollectiveImpl(const CollArgs& args, const RankGenerator& gen, const CheckOptions& opts) {
  if (args.coll >= CollKind::kSendRecv || args.nranks < 1 || args.chunkElems == 0 || opts.slots < 1 ||
      (isRooted(args.coll) && (args.root < 0 || args.root >= args.nranks))) {
    return InvalidArgument("invalid arguments for the checker");
  }
  check::Sim sim(args.nranks, args.chunkElems, opts);
  Schedule s;
  for (int r = 0; r < args.nranks; ++r) {
    Status st = gen(r, &s);
    if (st.ok()) st = checkShape(args, r, s);
    if (st.ok()) st = sim.addRank(r, s, inPlaceAlias(args, r, s.bufs[kInputBuf].elems, s.bufs[kOutputBuf].elems));
    if (!st.ok()) return st.addContext(format("rank %d", r));
  }
  SNCCL_TRY(sim.run());
  const CollExpect expect(args);
  return sim.verify([&expect](int r, uint16_t, size_t i) { return expect.value(r, i); });
}

// For each rank and receive buffer: the (rank, buffer) whose send it must hold. The k-th
// send of a to b meets the k-th receive of b from a (NCCL's per-peer ordering).
using P2PSources = std::vector<std::vector<std::pair<int, uint32_t>>>;

Status matchP2P(std::span<const std::vector<P2POp>> ops, P2PSources* src) {
  const int n = static_cast<int>(ops.size());
  // sendsTo[a][b]: indices of a's sends to b, in call order.
  std::vector<std::unordered_map<int, std::vector<uint32_t>>> sendsTo(ops.size());
  for (int a = 0; a < n; ++a) {
    for (uint32_t i = 0; i < ops[a].size(); ++i) {
      const P2POp& op = ops[a][i];
      if (op.peer < 0 || op.peer >= n) return InvalidArgument("rank %d: peer %d out of range", a, op.peer);
      if (op.isSend) sendsTo[a][op.peer].push_back(i);
    }
  }
  src->assign(ops.size(), {});
  std::vector<std::unordered_map<int, size_t>> recvd(ops.size());  // recvd[b][a]: receives of b from a
  for (int b = 0; b < n; ++b) {
    (*src)[b].assign(ops[b].size(), {-1, 0});
    for (uint32_t i = 0; i < ops[b].size(); ++i) {
      const P2POp& op = ops[b][i];
      if (op.isSend) continue;
      const size_t k = recvd[b][op.peer]++;
      const std::vector<uint32_t>& sends = sendsTo[op.peer][b];
      if (k >= sends.size()) {
        return InvalidUsage("rank %d's receive #%zu from rank %d has no matching send", b, k + 1, op.peer);
      }
      const P2POp& sendOp = ops[op.peer][sends[k]];
      if (sendOp.count != op.count) {
        return InvalidUsage("rank %d's send #%zu to rank %d has %zu elements, the matching receive %zu", op.peer,
                            k + 1, b, sendOp.count, op.count);
      }
      (*src)[b][i] = {op.peer, sends[k]};
    }
  }
  for (int a = 0; a < n; ++a) {
    for (const auto& [b, sends] : sendsTo[a]) {
      const size_t got = recvd[b].count(a) ? recvd[b].at(a) : 0;
      if (got != sends.size()) {
        return InvalidUsage("rank %d sends %zu messages to rank %d, which receives %zu", a, sends.size(), b, got);
      }
    }
  }
  return OkStatus();
}

Status checkP2PShape(std::span<const P2POp> ops, const Schedule& s) {
  if (s.coll != CollKind::kSendRecv || s.reduces) return InternalError("not a send/recv schedule");
  if (s.bufs.size() != ops.size()) {
    return InternalError("%zu buffers for %zu operations", s.bufs.size(), ops.size());
  }
  for (size_t i = 0; i < ops.size(); ++i) {
    const BufRole want = ops[i].isSend ? BufRole::kInput : BufRole::kOutput;
    if (s.bufs[i].role != want || s.bufs[i].elems != ops[i].count) {
      return InternalError("buffer %zu does not describe operation %zu", i, i);
    }
  }
  return OkStatus();
}

}  // namespace

Status checkCollective(const CollArgs& args, const RankGenerator& gen, const CheckOptions& opts) {
  Status st = checkCollectiveImpl(args, gen, opts);
  if (!st.ok()) st.addContext(describeArgs(args));
  return st;
}

Status checkAlgorithm(const AlgorithmDef& algo, const CollArgs& args, const ChannelPlan& plan,
                      const CheckOptions& opts) {
  if (algo.coll != args.coll) {
    return InvalidArgument("algorithm %s is for %s, not %s", algo.name, collName(algo.coll), collName(args.coll));
  }
  Status st = checkCollective(
      args,
      [&](int r, Schedule* out) {
        CollArgs a = args;
        a.rank = r;
        return generateSchedule(algo, a, plan, out);
      },
      opts);
  if (!st.ok()) st.addContext(format("algorithm %s", algo.name));
  return st;
}

Status checkP2PWith(std::span<const std::vector<P2POp>> opsPerRank, size_t chunkElems, const RankGenerator& gen,
                    const CheckOptions& opts) {
  const int n = static_cast<int>(opsPerRank.size());
  if (n < 1 || chunkElems == 0 || opts.slots < 1) return InvalidArgument("invalid arguments for the checker");
  P2PSources src;
  SNCCL_TRY(matchP2P(opsPerRank, &src));
  check::Sim sim(n, chunkElems, opts);
  Schedule s;
  for (int r = 0; r < n; ++r) {
    Status st = gen(r, &s);
    if (st.ok()) st = checkP2PShape(opsPerRank[static_cast<size_t>(r)], s);
    if (st.ok()) st = sim.addRank(r, s, Alias{});
    if (!st.ok()) return st.addContext(format("send/recv rank %d", r));
  }
  SNCCL_TRY(sim.run());
  return sim.verify([&src](int r, uint16_t b, size_t i) {
    const auto& [peer, buf] = src[static_cast<size_t>(r)][b];
    return check::origin(peer, buf, i);
  });
}

Status checkP2P(std::span<const std::vector<P2POp>> opsPerRank, size_t chunkElems, const CheckOptions& opts) {
  const int n = static_cast<int>(opsPerRank.size());
  return checkP2PWith(
      opsPerRank, chunkElems,
      [&](int r, Schedule* out) {
        return buildP2PSchedule(r, n, opsPerRank[static_cast<size_t>(r)], chunkElems, out);
      },
      opts);
}

}  // namespace snccl
