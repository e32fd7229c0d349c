// Grouped ncclSend/ncclRecv: ring shifts in both orders, all-pairs exchanges with a
// different size and datatype per pair, self send/recv, several messages to one peer,
// large messages (several times the connection buffer) posted all sends first, count 0;
// as threads and as processes, blocking and on host streams. Then the single-thread
// multi-communicator pattern (nccl-tests -g): one thread drives every communicator of a
// clique inside one group, for collectives and for send/recv.
//
// Every message carries bits that name its (source, destination, ordinal), so a message
// delivered to the wrong buffer or in the wrong order is caught; guards around every
// buffer and unchanged send buffers are checked too.
#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "snccl/snccl.h"
#include "support/buffers.h"
#include "support/harness.h"
#include "support/values.h"

namespace {

using namespace sntest;

constexpr size_t kLargeCount = (size_t(1) << 20) + 3;

// One send or receive as a rank issues it. `ordinal` numbers the messages between one
// (source, destination) pair; NCCL matches them in issue order.
struct MsgSpec {
  bool isSend;
  int peer;
  ncclDataType_t dt;
  size_t count;
  int ordinal = 0;
};

std::string describe(const MsgSpec& m, int rank) {
  return std::string(m.isSend ? "send to " : "recv from ") + std::to_string(m.peer) + " (" + typeName(m.dt) +
         " x " + std::to_string(m.count) + ", message #" + std::to_string(m.ordinal) + ") on rank " +
         std::to_string(rank);
}

// The messages of one rank in one group, with their buffers.
class P2PRank {
 public:
  P2PRank(int rank, std::vector<MsgSpec> specs, uint64_t seed) : rank_(rank), specs_(std::move(specs)), seed_(seed) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const MsgSpec& m = specs_[i];
      size_t es = typeInfo(m.dt).size;
      bufs_.push_back(std::make_unique<GuardedBuffer>(m.count * es, (i % 3) * es));
      if (m.isSend)
        for (size_t k = 0; k < m.count; ++k) storeBits(bufs_.back()->data(), k, es, expected(m, k));
    }
  }

  // Records the sends and receives (the caller brackets them with a group).
  bool issue(ncclComm_t comm, cudaStream_t stream) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const MsgSpec& m = specs_[i];
      ncclResult_t res = m.isSend ? ncclSend(bufs_[i]->data(), m.count, m.dt, m.peer, comm, stream)
                                  : ncclRecv(bufs_[i]->data(), m.count, m.dt, m.peer, comm, stream);
      if (!ncclOk(res, describe(m, rank_), rank_)) return false;
    }
    return true;
  }

  bool verify() const {
    bool ok = true;
    for (size_t i = 0; i < specs_.size(); ++i) {
      const MsgSpec& m = specs_[i];
      size_t es = typeInfo(m.dt).size;
      std::string damage = bufs_[i]->guardDamage();
      if (!damage.empty()) {
        ADD_FAILURE() << describe(m, rank_) << ": " << damage;
        ok = false;
      }
      size_t bad = 0, first = 0;
      for (size_t k = 0; k < m.count; ++k)
        if (loadBits(bufs_[i]->data(), k, es) != expected(m, k) && bad++ == 0) first = k;
      if (bad > 0) {
        ADD_FAILURE() << describe(m, rank_) << ": element " << first << " is "
                      << showElem(m.dt, loadBits(bufs_[i]->data(), first, es)) << ", expected "
                      << showElem(m.dt, expected(m, first)) << (m.isSend ? " (send buffer modified)" : "") << "; "
                      << bad << " wrong element(s)";
        ok = false;
      }
    }
    return ok;
  }

 private:
  uint64_t expected(const MsgSpec& m, size_t k) const {
    int src = m.isSend ? rank_ : m.peer, dst = m.isSend ? m.peer : rank_;
    uint64_t s = mix64(seed_ + uint64_t(src) * 4099 + uint64_t(dst) * 65537 + uint64_t(m.ordinal) * 7919);
    return rawBits(s, src, k, typeInfo(m.dt).size);
  }

  int rank_;
  std::vector<MsgSpec> specs_;
  uint64_t seed_;
  std::vector<std::unique_ptr<GuardedBuffer>> bufs_;
};

// ---- Patterns: what rank r of n issues, in issue order. --------------------------------

std::vector<MsgSpec> ringShift(int r, int n, ncclDataType_t dt, size_t count, bool recvFirst) {
  MsgSpec send{true, (r + 1) % n, dt, count}, recv{false, (r + n - 1) % n, dt, count};
  return recvFirst ? std::vector<MsgSpec>{recv, send} : std::vector<MsgSpec>{send, recv};
}

// Every ordered pair (self included) exchanges one message whose size and datatype depend
// on the pair. sendsFirst: all sends, then all receives; else interleaved per peer.
std::vector<MsgSpec> allPairs(int r, int n, bool sendsFirst, bool large) {
  static const size_t kCounts[] = {0, 1, 7, 1023, 4099};
  auto dtOf = [](int src, int dst) { return ncclDataType_t((src + 2 * dst + 1) % ncclNumTypes); };
  auto countOf = [&](int src, int dst) {
    if (!large) return kCounts[(src * 3 + dst * 5) % 5];
    // Several connection buffers (1 MiB) per message; smaller at 8 ranks to bound memory.
    size_t bytes = (n <= 5 ? size_t(3) << 20 : size_t(3) << 19) + 5 * size_t(src + 1);
    return bytes / typeInfo(dtOf(src, dst)).size;
  };
  std::vector<MsgSpec> sends, recvs, out;
  for (int k = 0; k < n; ++k) {
    int to = (r + k) % n, from = (r + n - k) % n;
    if (large && k == 0) continue;  // large: peers only
    sends.push_back({true, to, dtOf(r, to), countOf(r, to)});
    recvs.push_back({false, from, dtOf(from, r), countOf(from, r)});
  }
  if (sendsFirst) {
    out = sends;
    out.insert(out.end(), recvs.begin(), recvs.end());
  } else {
    for (size_t i = 0; i < sends.size(); ++i) {
      out.push_back(i % 2 ? recvs[i] : sends[i]);
      out.push_back(i % 2 ? sends[i] : recvs[i]);
    }
  }
  return out;
}

// Three messages to the next rank in one group, matched in order by three receives.
std::vector<MsgSpec> samePeerSeveral(int r, int n) {
  const ncclDataType_t dts[3] = {ncclFloat32, ncclUint8, ncclFloat16};
  const size_t counts[3] = {1023, 0, 70001};
  std::vector<MsgSpec> out;
  for (int k = 0; k < 3; ++k) out.push_back({false, (r + n - 1) % n, dts[k], counts[k], k});
  for (int k = 0; k < 3; ++k) out.push_back({true, (r + 1) % n, dts[k], counts[k], k});
  return out;
}

// ---- Running a pattern on every rank. ---------------------------------------------------

using Pattern = std::function<std::vector<MsgSpec>(int rank, int n)>;

// One group per pattern; on a host stream when `onStream`.
bool runPatterns(const std::vector<Pattern>& patterns, ncclComm_t comm, int rank, int n, bool streams) {
  sncclStream_t stream = nullptr;
  if (streams && !ncclOk(sncclStreamCreate(&stream), "sncclStreamCreate", rank)) return false;
  bool ok = true;
  for (size_t p = 0; p < patterns.size() && ok; ++p) {
    bool onStream = streams && p % 2 == 1;
    P2PRank msgs(rank, patterns[p](rank, n), 1000 + p);
    ok = ncclOk(ncclGroupStart(), "ncclGroupStart", rank) && msgs.issue(comm, onStream ? SNCCL_STREAM(stream) : nullptr);
    ok = ncclOk(ncclGroupEnd(), "ncclGroupEnd", rank) && ok;
    if (ok && onStream) ok = ncclOk(sncclStreamSynchronize(stream), "sncclStreamSynchronize", rank);
    if (ok && !msgs.verify()) {
      ADD_FAILURE() << "rank " << rank << ": pattern #" << p << " delivered wrong data";
      // Keep going: the peers expect the remaining groups.
    }
  }
  if (stream != nullptr) ncclOk(sncclStreamDestroy(stream), "sncclStreamDestroy", rank);
  return ok && !::testing::Test::HasFailure();
}

class P2P : public ::testing::TestWithParam<std::tuple<Mode, int>> {
 protected:
  void run(const std::vector<Pattern>& patterns, bool streams = true) {
    auto [mode, n] = GetParam();
    runRanks(
        mode, n,
        [&](ncclComm_t comm, int rank, int nranks) { return runPatterns(patterns, comm, rank, nranks, streams); },
        120);
  }
};

TEST_P(P2P, RingShiftBothOrders) {
  std::vector<Pattern> ps;
  const size_t counts[] = {0, 1, 7, 1023, kLargeCount};
  for (size_t count : counts)
    for (ncclDataType_t dt : {ncclFloat32, ncclInt8, ncclFloat16, ncclUint64}) {
      if (count == kLargeCount && dt != ncclFloat32 && dt != ncclFloat16) continue;
      for (bool recvFirst : {false, true})
        ps.push_back([=](int r, int n) { return ringShift(r, n, dt, count, recvFirst); });
    }
  run(ps);
}

TEST_P(P2P, AllPairsMixedSizesAndTypes) {
  run({[](int r, int n) { return allPairs(r, n, false, false); },
       [](int r, int n) { return allPairs(r, n, true, false); },
       [](int r, int n) { return allPairs(r, n, false, false); }});
}

TEST_P(P2P, SelfSendRecv) {
  std::vector<Pattern> ps;
  for (size_t count : {size_t(0), size_t(1), size_t(1023), kLargeCount})
    for (bool recvFirst : {false, true})
      ps.push_back([=](int r, int) {
        MsgSpec s{true, r, ncclInt32, count}, v{false, r, ncclInt32, count};
        return recvFirst ? std::vector<MsgSpec>{v, s} : std::vector<MsgSpec>{s, v};
      });
  run(ps);
}

TEST_P(P2P, SeveralMessagesToOnePeer) { run({samePeerSeveral, samePeerSeveral}); }

// Several MiB per message, every send posted before any receive: a sender that waited for
// its receiver before the group's receives were posted would deadlock here.
TEST_P(P2P, LargeSendsFirstNoDeadlock) {
  run({[](int r, int n) { return allPairs(r, n, true, true); },
       [](int r, int n) {
         // Ring in both directions, sends first, receives in the opposite order.
         size_t count = (size_t(3) << 20) + 3;
         std::vector<MsgSpec> v{{true, (r + 1) % n, ncclUint8, count, 0},
                                {true, (r + n - 1) % n, ncclUint8, count, 1},
                                {false, (r + 1) % n, ncclUint8, count, (r + 1) % n == (r + n - 1) % n ? 0 : 1},
                                {false, (r + n - 1) % n, ncclUint8, count, (r + 1) % n == (r + n - 1) % n ? 1 : 0}};
         return v;
       }},
      /*streams=*/false);
}

TEST_P(P2P, CountZeroOnly) {
  run({[](int r, int n) {
    std::vector<MsgSpec> v;
    for (int p = 0; p < n; ++p) {
      v.push_back({true, p, ncclFloat64, 0});
      v.push_back({false, p, ncclFloat64, 0});
    }
    return v;
  }});
}

// Collectives and point-to-point in one group, then nested groups: only the outermost
// ncclGroupEnd launches, so a large send in an inner group must wait for the receive
// recorded after it (an inner launch would block on credits forever).
bool mixedAndNested(ncclComm_t comm, int rank, int n) {
  const size_t c = 300007;  // > one connection buffer of int32
  std::vector<int32_t> ar(c), bc(c);
  for (size_t i = 0; i < c; ++i) {
    ar[i] = int32_t(rank + int(i % 1000));
    bc[i] = rank == 0 ? int32_t(7 * i) : -1;
  }
  P2PRank ring(rank, ringShift(rank, n, ncclFloat64, kLargeCount / 2, false), 4242);
  bool ok = ncclOk(ncclGroupStart(), "ncclGroupStart", rank);
  ok = ok && ncclOk(ncclAllReduce(ar.data(), ar.data(), c, ncclInt32, ncclSum, comm, nullptr), "ncclAllReduce", rank);
  ok = ok && ring.issue(comm, nullptr);
  ok = ok && ncclOk(ncclBroadcast(bc.data(), bc.data(), c, ncclInt32, 0, comm, nullptr), "ncclBroadcast", rank);
  ok = ncclOk(ncclGroupEnd(), "ncclGroupEnd", rank) && ok;
  if (!ok) return false;
  ok = ring.verify();
  for (size_t i = 0; i < c; ++i)
    if (ar[i] != int32_t(n * (n - 1) / 2 + n * int(i % 1000)) || bc[i] != int32_t(7 * i)) {
      ADD_FAILURE() << "rank " << rank << ": grouped AllReduce/Broadcast element " << i << " = " << ar[i] << "/"
                    << bc[i];
      ok = false;
      break;
    }
  // Nested: send in the inner group, receive in the outer one.
  std::vector<MsgSpec> specs = ringShift(rank, n, ncclUint8, (size_t(3) << 20) + 1, false);
  P2PRank nested(rank, specs, 777);
  bool live = ncclOk(ncclGroupStart(), "outer ncclGroupStart", rank) &&
              ncclOk(ncclGroupStart(), "inner ncclGroupStart", rank);
  if (!live) return false;
  P2PRank sendOnly(rank, {specs[0]}, 777), recvOnly(rank, {specs[1]}, 777);
  live = sendOnly.issue(comm, nullptr);
  live = ncclOk(ncclGroupEnd(), "inner ncclGroupEnd", rank) && live;
  live = live && recvOnly.issue(comm, nullptr);
  live = ncclOk(ncclGroupEnd(), "outer ncclGroupEnd", rank) && live;
  return live && recvOnly.verify() && sendOnly.verify() && ok;
}

TEST_P(P2P, MixedWithCollectivesAndNestedGroups) {
  auto [mode, n] = GetParam();
  runRanks(mode, n, mixedAndNested, 120);
}

INSTANTIATE_TEST_SUITE_P(All, P2P,
                         ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                                            ::testing::ValuesIn(gridRankCounts({2, 3, 5, 8}))),
                         modeRanksName);

// ---- Single thread, many communicators (nccl-tests -g). ---------------------------------

class OneThread : public ::testing::TestWithParam<int> {};

// One group issues the same pattern on every communicator of the clique; with streams,
// each communicator gets its own host stream (one per "GPU").
bool oneThreadP2P(const std::vector<ncclComm_t>& comms, const Pattern& pattern, bool streams, uint64_t seed) {
  const int n = int(comms.size());
  std::vector<std::unique_ptr<P2PRank>> ranks;
  std::vector<sncclStream_t> ss(n, nullptr);
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    ranks.push_back(std::make_unique<P2PRank>(r, pattern(r, n), seed));
    if (streams) ok = ok && ncclOk(sncclStreamCreate(&ss[r]), "sncclStreamCreate", r);
  }
  ok = ok && ncclOk(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < n && ok; ++r) ok = ranks[r]->issue(comms[r], SNCCL_STREAM(ss[r]));
  ok = ncclOk(ncclGroupEnd(), "ncclGroupEnd") && ok;
  for (int r = 0; r < n; ++r)
    if (ss[r] != nullptr) {
      ok = ok && ncclOk(sncclStreamSynchronize(ss[r]), "sncclStreamSynchronize", r);
      ncclOk(sncclStreamDestroy(ss[r]), "sncclStreamDestroy", r);
    }
  for (int r = 0; r < n && ok; ++r) ok = ranks[r]->verify() && ok;
  return ok;
}

TEST_P(OneThread, SendRecvGrouped) {
  runOneThread(GetParam(), [](const std::vector<ncclComm_t>& comms) {
    bool ok = true;
    uint64_t seed = 1;
    for (bool streams : {false, true}) {
      bool recvFirst = streams;
      ok = oneThreadP2P(comms, [=](int r, int n) { return ringShift(r, n, ncclFloat32, kLargeCount, recvFirst); },
                        streams, seed++) && ok;
      ok = oneThreadP2P(comms, [=](int r, int n) { return allPairs(r, n, !streams, false); }, streams, seed++) && ok;
    }
    // Large messages, all sends first, every communicator on its own stream.
    ok = oneThreadP2P(comms, [](int r, int n) { return allPairs(r, n, true, true); }, true, seed++) && ok;
    return ok;
  });
}

// ncclGroupStart; ncclAllReduce on every communicator; ncclGroupEnd, from one thread.
TEST_P(OneThread, AllReduceGrouped) {
  runOneThread(GetParam(), [](const std::vector<ncclComm_t>& comms) {
    const int n = int(comms.size());
    bool ok = true;
    struct Combo {
      ncclDataType_t dt;
      int op;
      size_t count;
      bool streams, inPlace;
    };
    const Combo combos[] = {{ncclFloat32, kOpSum, 1023, false, false},  {ncclInt32, kOpMax, 7, true, true},
                            {ncclBfloat16, kOpAvg, 1, false, true},     {ncclFloat64, kOpProd, 0, true, false},
                            {ncclFloat16, kOpSum, kLargeCount, true, true}, {ncclUint8, kOpMin, kLargeCount, false, false}};
    uint64_t seed = 77;
    for (const Combo& c : combos) {
      ReductionModel model;
      model.build(c.dt, c.op, n, ++seed);
      static const ncclRedOp_t kOps[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
      const size_t es = typeInfo(c.dt).size;
      std::vector<std::unique_ptr<GuardedBuffer>> in(n), out(n);
      std::vector<sncclStream_t> ss(n, nullptr);
      for (int r = 0; r < n; ++r) {
        in[r] = std::make_unique<GuardedBuffer>(c.count * es);
        out[r] = c.inPlace ? nullptr : std::make_unique<GuardedBuffer>(c.count * es);
        for (size_t k = 0; k < c.count; ++k) storeBits(in[r]->data(), k, es, model.input(r, k));
        if (c.streams) ok = ok && ncclOk(sncclStreamCreate(&ss[r]), "sncclStreamCreate", r);
      }
      ok = ok && ncclOk(ncclGroupStart(), "ncclGroupStart");
      for (int r = 0; r < n && ok; ++r) {
        void* dst = c.inPlace ? in[r]->data() : out[r]->data();
        ok = ncclOk(ncclAllReduce(in[r]->data(), dst, c.count, c.dt, kOps[c.op], comms[r], SNCCL_STREAM(ss[r])),
                    "ncclAllReduce", r);
      }
      ok = ncclOk(ncclGroupEnd(), "ncclGroupEnd") && ok;
      for (int r = 0; r < n; ++r)
        if (ss[r] != nullptr) {
          ok = ok && ncclOk(sncclStreamSynchronize(ss[r]), "sncclStreamSynchronize", r);
          ncclOk(sncclStreamDestroy(ss[r]), "sncclStreamDestroy", r);
        }
      if (!ok) return false;
      for (int r = 0; r < n; ++r) {
        const GuardedBuffer& res = c.inPlace ? *in[r] : *out[r];
        size_t bad = 0, first = 0;
        for (size_t k = 0; k < c.count; ++k)
          if (!model.accepts(k, loadBits(res.data(), k, es)) && bad++ == 0) first = k;
        std::string damage = res.guardDamage();
        if (bad > 0 || !damage.empty()) {
          ADD_FAILURE() << "comm " << r << ": AllReduce " << typeName(c.dt) << " " << opKindName(c.op) << " count "
                        << c.count << (c.inPlace ? " in-place" : "") << (c.streams ? " on streams" : "") << ": "
                        << bad << " wrong element(s), first " << first << " "
                        << (bad ? showElem(c.dt, loadBits(res.data(), first, es)) : "") << " expected "
                        << (bad ? showElem(c.dt, model.expBits[first % kPeriod]) : "") << " " << damage;
          ok = false;
        }
      }
    }
    return ok;
  });
}

// One thread, one group: AllReduce, AllGather, Broadcast and Reduce on every
// communicator, each larger than a connection buffer.
TEST_P(OneThread, SeveralCollectivesPerCommGrouped) {
  runOneThread(GetParam(), [](const std::vector<ncclComm_t>& comms) {
    const int n = int(comms.size());
    const size_t c = 262147;
    std::vector<std::vector<int32_t>> ar(n), agIn(n), ag(n), bc(n), rd(n), rdOut(n);
    for (int r = 0; r < n; ++r) {
      ar[r].resize(c);
      agIn[r].resize(c);
      ag[r].assign(size_t(n) * c, -1);
      bc[r].assign(c, -1);
      rd[r].resize(c);
      rdOut[r].assign(c, -1);
      for (size_t i = 0; i < c; ++i) {
        ar[r][i] = int32_t(r * 3 + int(i % 777));
        agIn[r][i] = int32_t(r * 1000000 + int(i));
        if (r == n - 1) bc[r][i] = int32_t(i ^ 0x5555);
        rd[r][i] = int32_t((r + int(i)) % 11);
      }
    }
    bool ok = ncclOk(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n && ok; ++r)
      ok = ncclOk(ncclAllReduce(ar[r].data(), ar[r].data(), c, ncclInt32, ncclSum, comms[r], nullptr),
                  "ncclAllReduce", r) &&
           ncclOk(ncclAllGather(agIn[r].data(), ag[r].data(), c, ncclInt32, comms[r], nullptr), "ncclAllGather", r) &&
           ncclOk(ncclBroadcast(bc[r].data(), bc[r].data(), c, ncclInt32, n - 1, comms[r], nullptr), "ncclBroadcast",
                  r) &&
           ncclOk(ncclReduce(rd[r].data(), rdOut[r].data(), c, ncclInt32, ncclMax, n / 2, comms[r], nullptr),
                  "ncclReduce", r);
    ok = ncclOk(ncclGroupEnd(), "ncclGroupEnd") && ok;
    if (!ok) return false;
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < c; ++i) {
        int32_t mx = -1;
        for (int q = 0; q < n; ++q) mx = std::max(mx, int32_t((q + int(i)) % 11));
        bool good = ar[r][i] == int32_t(3 * n * (n - 1) / 2 + n * int(i % 777)) && bc[r][i] == int32_t(i ^ 0x5555) &&
                    (r != n / 2 || rdOut[r][i] == mx) && (r == n / 2 || rdOut[r][i] == -1);
        for (int q = 0; q < n && good; ++q) good = ag[r][size_t(q) * c + i] == int32_t(q * 1000000 + int(i));
        if (!good) {
          ADD_FAILURE() << "comm " << r << " element " << i << ": allreduce " << ar[r][i] << " broadcast " << bc[r][i]
                        << " reduce " << rdOut[r][i];
          return false;
        }
      }
    return true;
  });
}

INSTANTIATE_TEST_SUITE_P(All, OneThread, ::testing::ValuesIn(gridRankCounts({2, 3, 5, 8})),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "_comms";
                         });

}  // namespace
