// The small-message AllReduce generators (rd: recursive doubling, direct: n-rank direct
// exchange) and the hierarchical AllReduce on uneven nodes, through the symbolic checker
// beyond the sampled matrix of test_schedules.cc: every rank count 1..300 and powers of two
// +-1 up to 8192 for rd, 1..8 (and beyond) for direct, many uneven node shapes up to 8192
// ranks for hier, with the smallest connection (1-2 slots) and the default (8). The
// checker's sums do not depend on the reduction order, so an order-aware evaluation
// (BitwiseAgreement) also proves that every rank computes every element the same way.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/checker.h"
#include "collectives/sched_util.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using testing::collArgs;

double secondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Shape {
  size_t count, chunk;
  int slots;
  bool inPlace;
};

Status checkShape(const AlgorithmDef& algo, int n, const Shape& s, const ChannelPlan& plan = {}) {
  CheckOptions opts;
  opts.slots = s.slots;
  return checkAlgorithm(algo, collArgs(CollKind::kAllReduce, 0, n, s.count, s.chunk, 0, s.inPlace), plan, opts);
}

std::string describe(int n, const Shape& s) {
  return "n=" + std::to_string(n) + " count=" + std::to_string(s.count) + " chunk=" + std::to_string(s.chunk) +
         " slots=" + std::to_string(s.slots) + (s.inPlace ? " in-place" : "");
}

// Every step of every rank's schedule: (rank, step) pairs for structural assertions.
template <typename Fn>
void forEachStep(const AlgorithmDef& algo, int n, size_t count, size_t chunk, const ChannelPlan& plan, Fn fn) {
  Schedule s;
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(algo.generate(collArgs(CollKind::kAllReduce, r, n, count, chunk), plan, &s).ok());
    for (const Lane& lane : s.lanes)
      for (const Step& st : lane.steps) fn(r, st);
  }
}

// ---- Bitwise agreement across ranks. The symbolic checker sums hashes, so it cannot see
// the order in which a rank combines the inputs; floating-point sums depend on it. Here
// each element is the expression the executor evaluates: every prim that reduces
// combines exactly two operands (received (+) local, or for LocalReduce dst (+) src), and
// every NCCL op is commutative
// for two operands, so an expression is written with its two operands sorted. Equal
// expressions on every rank mean equal bits on every rank, for any op and datatype.

std::string combine(const std::string& a, const std::string& b) {
  return a < b ? "(" + a + "+" + b + ")" : "(" + b + "+" + a + ")";
}

// Runs all ranks' schedules (unbounded FIFOs; deadlock freedom is the checker's job) and
// returns each rank's Output expressions; an empty result when the schedules get stuck.
std::vector<std::vector<std::string>> evaluate(int n, size_t count, bool inPlace, const RankGenerator& gen) {
  std::vector<Schedule> sched(static_cast<size_t>(n));
  std::vector<std::vector<std::vector<std::string>>> mem(static_cast<size_t>(n));  // [rank][buf][elem]
  for (int r = 0; r < n; ++r) {
    Schedule& s = sched[static_cast<size_t>(r)];
    EXPECT_TRUE(gen(r, &s).ok());
    auto& m = mem[static_cast<size_t>(r)];
    m.resize(s.bufs.size());
    for (size_t b = 0; b < s.bufs.size(); ++b) m[b].assign(s.bufs[b].elems, "?");
    for (size_t i = 0; i < count; ++i) m[kInputBuf][i] = "x" + std::to_string(r);
  }
  auto buf = [&](int r, uint16_t b) -> std::vector<std::string>& {  // in place: Output is the Input storage
    return mem[static_cast<size_t>(r)][inPlace && b == kOutputBuf ? kInputBuf : b];
  };
  std::map<std::pair<int, int>, std::deque<std::vector<std::string>>> fifo;
  std::vector<std::vector<size_t>> next(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) next[static_cast<size_t>(r)].assign(sched[static_cast<size_t>(r)].lanes.size(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (int r = 0; r < n; ++r) {
      const Schedule& s = sched[static_cast<size_t>(r)];
      for (size_t l = 0; l < s.lanes.size(); ++l) {
        for (size_t& i = next[static_cast<size_t>(r)][l]; i < s.lanes[l].steps.size(); ++i) {
          const Step& st = s.lanes[l].steps[i];
          std::vector<std::string> v(st.count);
          if (primReceives(st.prim)) {
            auto& q = fifo[{st.recvPeer, r}];
            if (q.empty()) break;
            v = std::move(q.front());
            q.pop_front();
          }
          if (primReadsDst(st.prim))  // LocalReduce: the accumulator is dst
            for (size_t k = 0; k < st.count; ++k) v[k] = buf(r, st.dst.buf)[st.dst.offset + k];
          const bool reduce = primReadsSrc(st.prim) && (primReceives(st.prim) || primReadsDst(st.prim));
          for (size_t k = 0; k < st.count; ++k) {
            const std::string& src = buf(r, st.src.buf)[st.src.offset + k];
            if (primReadsSrc(st.prim) && !reduce) v[k] = src;
            if (reduce) v[k] = combine(v[k], src);
            if (st.final) v[k] += "!";
          }
          if (st.prim != Prim::kSend && st.prim != Prim::kRecvReduceSend)
            for (size_t k = 0; k < st.count; ++k) buf(r, st.dst.buf)[st.dst.offset + k] = v[k];
          if (st.sendPeer >= 0) fifo[{r, st.sendPeer}].push_back(std::move(v));
          moved = true;
        }
      }
    }
  }
  std::vector<std::vector<std::string>> outs;
  for (int r = 0; r < n; ++r) {
    for (size_t l = 0; l < sched[static_cast<size_t>(r)].lanes.size(); ++l)
      if (next[static_cast<size_t>(r)][l] < sched[static_cast<size_t>(r)].lanes[l].steps.size()) return {};
    outs.push_back(buf(r, kOutputBuf));
  }
  return outs;
}

// Empty when every rank computed every element the same way, else the first difference.
std::string rankDisagreement(const std::vector<std::vector<std::string>>& outs) {
  if (outs.empty()) return "the schedules did not complete";
  for (size_t r = 1; r < outs.size(); ++r)
    for (size_t i = 0; i < outs[r].size(); ++i)
      if (outs[r][i] != outs[0][i])
        return "element " + std::to_string(i) + ": rank 0 computes " + outs[0][i] + ", rank " + std::to_string(r) +
               " " + outs[r][i];
  return "";
}

std::string disagreement(const AlgorithmDef& algo, int n, size_t count, size_t chunk, bool inPlace,
                         const ChannelPlan& plan = {}) {
  return rankDisagreement(evaluate(n, count, inPlace, [&](int r, Schedule* out) {
    return algo.generate(collArgs(CollKind::kAllReduce, r, n, count, chunk, 0, inPlace), plan, out);
  }));
}

TEST(BitwiseAgreement, CatchesRankDependentOrder) {
  // The naive n-rank direct exchange: every rank receives the others' inputs and adds them
  // to its own in peer order, so rank r computes ((x_r + x_r+1) + x_r+2): three different
  // orders on three ranks. The symbolic checker accepts it (same sum); this must not.
  const int n = 3;
  const size_t count = 4;
  auto naive = [&](int r, Schedule* out) {
    out->clear();
    out->coll = CollKind::kAllReduce;
    out->reduces = true;
    out->bufs = {{BufRole::kInput, count}, {BufRole::kOutput, count}};
    out->lanes.resize(1);
    auto& steps = out->lanes[0].steps;
    for (int d = 1; d < n; ++d) steps.push_back(sched::mkSend((r + d) % n, sched::inRef(0), count));
    for (int d = 1; d < n; ++d) {
      const BufRef partial = d == 1 ? sched::inRef(0) : sched::outRef(0);
      steps.push_back(
          sched::mkStep(Prim::kRecvReduceCopy, (r - d + n) % n, -1, partial, sched::outRef(0), count, d == n - 1));
    }
    return OkStatus();
  };
  EXPECT_TRUE(checkCollective(collArgs(CollKind::kAllReduce, 0, n, count, count), naive).ok());
  EXPECT_NE(rankDisagreement(evaluate(n, count, false, naive)), "");
}

TEST(BitwiseAgreement, EveryAllReduceAgreesAcrossRanks) {
  for (const char* name : {"rd", "direct", "flat", "ring", "tree", "hier"}) {
    const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, name);
    ASSERT_NE(algo, nullptr) << name;
    for (int n = 1; n <= (algo->maxRanks ? algo->maxRanks : 40); ++n)
      for (bool inPlace : {false, true}) {
        const std::string d = disagreement(*algo, n, 11, 4, inPlace);
        EXPECT_EQ(d, "") << name << " n=" << n << (inPlace ? " in-place" : "");
      }
  }
}

// ---- rd: recursive doubling.

TEST(Rd, EveryRankCountTo300AndPowersOfTwoTo8192) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "rd");
  ASSERT_NE(algo, nullptr);
  EXPECT_STREQ(algo->family, "rd");
  EXPECT_EQ(algo->maxRanks, 0);
  const auto t0 = std::chrono::steady_clock::now();
  size_t cases = 0;
  std::vector<int> sizes;
  for (int n = 1; n <= 300; ++n) sizes.push_back(n);
  for (int n : {1000, 1023, 1025, 4095, 4096, 8191, 8192}) sizes.push_back(n);
  for (int n : sizes) {
    // Small n: zero, one, unaligned, several chunks, both slot extremes and both modes.
    // Larger n: fewer counts, alternating the mode.
    std::vector<Shape> shapes;
    if (n <= 64) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{64 * 3 + 5}})
        for (bool inPlace : {false, true})
          shapes.push_back({count, count > 13 ? size_t{64} : size_t{4}, inPlace ? 1 : count == 13 ? 8 : 2, inPlace});
    } else if (n <= 300) {
      shapes = {{0, 4, 2, n % 2 == 0}, {1, 4, 2, n % 2 == 1}, {13, 4, 2, n % 2 == 0}};
    } else if (n <= 2048) {
      shapes = {{1, 4, 2, n % 2 == 0}, {11, 4, 2, n % 2 == 1}};
    } else {  // one case each: the checker's cost grows with n (hashed connections)
      shapes = {{11, 4, 2, n % 2 == 1}};
    }
    for (const Shape& s : shapes) {
      Status st = checkShape(*algo, n, s);
      ASSERT_TRUE(st.ok()) << "rd " << describe(n, s) << ": " << st.message();
      ++cases;
    }
  }
  std::printf("rd AllReduce: %zu cases, n = 1..300 and up to 8192, %.2f s\n", cases, secondsSince(t0));
}

TEST(Rd, RoundsAndFolding) {
  // n = 12: p = 8, 4 folded ranks (even ring positions 0, 2, 4, 6). Members exchange
  // log2(8) = 3 times per chunk; folded ranks only talk to their partner (position + 1).
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "rd");
  ASSERT_NE(algo, nullptr);
  const int n = 12;
  const size_t count = 10, chunk = 4;  // 3 chunks
  std::vector<size_t> sends(n), finals(n);
  std::vector<std::set<int>> peers(n);
  forEachStep(*algo, n, count, chunk, {}, [&](int r, const Step& st) {
    if (st.sendPeer >= 0) ++sends[static_cast<size_t>(r)], peers[static_cast<size_t>(r)].insert(st.sendPeer);
    if (st.final) finals[static_cast<size_t>(r)] += st.count;
  });
  for (int r = 0; r < n; ++r) {
    const bool folded = r < 8 && r % 2 == 0;
    const bool hasFolded = r < 8 && r % 2 == 1;
    EXPECT_EQ(sends[static_cast<size_t>(r)], folded ? 3u : 3u * 3u + (hasFolded ? 3u : 0u)) << "rank " << r;
    EXPECT_EQ(peers[static_cast<size_t>(r)].size(), folded ? 1u : 3u + (hasFolded ? 1u : 0u)) << "rank " << r;
    // A folded rank receives the finished result; a member finalizes every element itself.
    EXPECT_EQ(finals[static_cast<size_t>(r)], folded ? 0u : count) << "rank " << r;
  }
  EXPECT_EQ(peers[0], std::set<int>{1});
  EXPECT_EQ(peers[1], (std::set<int>{0, 3, 5, 8}));  // folded partner, then ids 0^1, 0^2, 0^4
}

TEST(Rd, FollowsTheRingOrder) {
  // On a shuffled ring the first round pairs ring neighbours: partners are defined by ring
  // positions, and the schedules still check out.
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "rd");
  ASSERT_NE(algo, nullptr);
  ChannelPlan plan;
  plan.ring = {5, 2, 7, 0, 1, 6, 3, 4};
  Schedule s;
  ASSERT_TRUE(algo->generate(collArgs(CollKind::kAllReduce, 7, 8, 5, 8), plan, &s).ok());
  ASSERT_EQ(s.lanes.size(), 1u);
  ASSERT_GE(s.lanes[0].steps.size(), 2u);
  EXPECT_EQ(s.lanes[0].steps[0].sendPeer, 0);  // position 2 pairs with position 3 first
  for (int n : {3, 6, 7, 8}) {
    plan.ring.clear();
    for (int i = 0; i < n; ++i) plan.ring.push_back((i * 5 + 3) % n);  // a permutation: gcd(5, n) = 1
    for (bool inPlace : {false, true}) {
      Status st = checkShape(*algo, n, {23, 4, 1, inPlace}, plan);
      EXPECT_TRUE(st.ok()) << "n=" << n << ": " << st.message();
    }
  }
}

// Every rank count 1..maxN of `name` through the checker: counts 0-1001, chunks of 1, 4
// and 64 elements, 1, 2 and 8 slots, in and out of place (above 8 ranks, 2 slots and
// chunks of 4 and 64 only). The direct and flat generators talk to every rank, so their
// cost grows with n^2; this grid stays within seconds.
void checkEveryPairGrid(const char* name, int maxN) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, name);
  ASSERT_NE(algo, nullptr) << name;
  const auto t0 = std::chrono::steady_clock::now();
  size_t cases = 0;
  for (int n = 1; n <= maxN; ++n) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{13}, size_t{1001}}) {
      for (size_t chunk : {size_t{1}, size_t{4}, size_t{64}}) {
        for (int slots : {1, 2, 8}) {
          for (bool inPlace : {false, true}) {
            if (n > 8 && (slots != 2 || chunk == 1)) continue;
            const Shape s{count, chunk, slots, inPlace};
            Status st = checkShape(*algo, n, s);
            ASSERT_TRUE(st.ok()) << name << " " << describe(n, s) << ": " << st.message();
            ++cases;
          }
        }
      }
    }
  }
  std::printf("%s AllReduce: %zu cases, n = 1..%d, %.2f s\n", name, cases, maxN, secondsSince(t0));
}

// ---- direct: every rank exchanges with every other rank.

TEST(Direct, OneToEightRanks) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "direct");
  ASSERT_NE(algo, nullptr);
  EXPECT_EQ(algo->maxRanks, 8);
  checkEveryPairGrid("direct", 12);  // beyond maxRanks too: the generator is correct at any n
}

TEST(Direct, TwoRanksStayOneExchange) {
  // The 2-rank path (the small-message default there) is one Send and one final
  // RecvReduceCopy per chunk: one message latency.
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "direct");
  ASSERT_NE(algo, nullptr);
  Schedule s;
  ASSERT_TRUE(algo->generate(collArgs(CollKind::kAllReduce, 1, 2, 10, 4), {}, &s).ok());
  ASSERT_EQ(s.lanes.size(), 1u);
  ASSERT_EQ(s.lanes[0].steps.size(), 6u);
  for (size_t i = 0; i < 6; i += 2) {
    EXPECT_EQ(s.lanes[0].steps[i].prim, Prim::kSend);
    EXPECT_EQ(s.lanes[0].steps[i + 1].prim, Prim::kRecvReduceCopy);
    EXPECT_TRUE(s.lanes[0].steps[i + 1].final);
  }
}

TEST(Direct, EachBlockReducedOnceByItsOwner) {
  // n >= 3: a rank finalizes exactly its own block (so every element is combined on one
  // rank only: identical bits everywhere) and talks to every other rank directly, with
  // two messages per peer and direction per chunk.
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "direct");
  ASSERT_NE(algo, nullptr);
  for (int n : {3, 5, 8}) {
    const size_t count = 8 * static_cast<size_t>(n) + 3;  // blocks of 8 or 9: one chunk each
    std::vector<std::vector<size_t>> toPeer(static_cast<size_t>(n), std::vector<size_t>(static_cast<size_t>(n)));
    std::vector<std::pair<size_t, size_t>> finalRange(static_cast<size_t>(n), {SIZE_MAX, 0});
    forEachStep(*algo, n, count, 16, {}, [&](int r, const Step& st) {
      if (st.sendPeer >= 0) ++toPeer[static_cast<size_t>(r)][static_cast<size_t>(st.sendPeer)];
      if (st.final) {
        auto& fr = finalRange[static_cast<size_t>(r)];
        fr.first = std::min(fr.first, st.dst.offset);
        fr.second = std::max(fr.second, st.dst.offset + st.count);
      }
    });
    size_t covered = 0;
    for (int r = 0; r < n; ++r) {
      const size_t lo = 8 * static_cast<size_t>(r) + std::min<size_t>(static_cast<size_t>(r), 3);
      EXPECT_EQ(finalRange[static_cast<size_t>(r)].first, lo) << "n=" << n << " rank " << r;
      covered += finalRange[static_cast<size_t>(r)].second - finalRange[static_cast<size_t>(r)].first;
      for (int q = 0; q < n; ++q)
        EXPECT_EQ(toPeer[static_cast<size_t>(r)][static_cast<size_t>(q)], q == r ? 0u : 2u) << r << "->" << q;
    }
    EXPECT_EQ(covered, count);
  }
}

// ---- flat: every rank sends its input to every other and folds the n inputs in rank order.

TEST(Flat, OneToSixteenRanks) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "flat");
  ASSERT_NE(algo, nullptr);
  EXPECT_EQ(algo->maxRanks, 16);
  checkEveryPairGrid("flat", 16);
}

TEST(Flat, OneExchangeFoldedInRankOrder) {
  // Per chunk: one message to every other rank, then the inputs of ranks 0..n-1 in order,
  // the own one folded locally; the last fold is the final step. No other traffic.
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "flat");
  ASSERT_NE(algo, nullptr);
  const int n = 5;
  const size_t count = 10, chunk = 4;  // 3 chunks
  for (bool inPlace : {false, true}) {
    for (int r = 0; r < n; ++r) {
      Schedule s;
      ASSERT_TRUE(algo->generate(collArgs(CollKind::kAllReduce, r, n, count, chunk, 0, inPlace), {}, &s).ok());
      ASSERT_EQ(s.lanes.size(), 1u);
      std::vector<int> folded;  // the rank whose input each step of a chunk brings in
      size_t sends = 0, finals = 0, chunks = 0;
      for (const Step& st : s.lanes[0].steps) {
        sends += st.prim == Prim::kSend;
        finals += st.final ? st.count : 0;
        if (st.prim == Prim::kSend || (st.prim == Prim::kCopy && st.dst.buf == kScratchBuf)) continue;
        folded.push_back(primReceives(st.prim) ? st.recvPeer : r);
        EXPECT_EQ(st.final, folded.size() == size_t(n)) << "rank " << r;
        if (folded.size() == size_t(n)) {
          EXPECT_EQ(folded, (std::vector<int>{0, 1, 2, 3, 4})) << "rank " << r;
          folded.clear();
          ++chunks;
        }
      }
      EXPECT_EQ(chunks, 3u);
      EXPECT_EQ(sends, 3u * (n - 1)) << "rank " << r;
      EXPECT_EQ(finals, count) << "rank " << r;
      // In place, ranks other than 0 stage their own chunk before the accumulator (their
      // Output, i.e. their Input) is overwritten.
      EXPECT_EQ(s.bufs.size(), inPlace && r != 0 ? 3u : 2u) << "rank " << r;
    }
  }
}

// The checker follows LocalReduce: an own input folded twice, or never, is caught.
TEST(Flat, CheckerCatchesAWrongLocalFold) {
  const int n = 3;
  const size_t count = 4;
  // mistake -1: the correct schedule, which must pass; 0: rank 1 folds its own input
  // twice; 1: no rank folds its own input.
  const char* expected[] = {"", "entered it twice", "partial sum"};
  for (int mistake : {-1, 0, 1}) {
    auto gen = [&](int r, Schedule* out) -> Status {
      out->clear();
      out->coll = CollKind::kAllReduce;
      out->reduces = true;
      out->bufs = {{BufRole::kInput, count}, {BufRole::kOutput, count}};
      out->lanes.resize(1);
      auto& steps = out->lanes[0].steps;
      for (int d = 1; d < n; ++d) steps.push_back(sched::mkSend((r + d) % n, sched::inRef(0), count));
      steps.push_back(r == 0 ? sched::mkCopy(sched::inRef(0), sched::outRef(0), count, false)
                             : sched::mkRecv(0, sched::outRef(0), count));
      for (int k = 1; k < n; ++k) {
        const bool last = k == n - 1;
        if (k != r) {
          steps.push_back(
              sched::mkStep(Prim::kRecvReduceCopy, k, -1, sched::outRef(0), sched::outRef(0), count, last));
          continue;
        }
        if (mistake == 1) continue;  // rank k never folds its own input
        steps.push_back(sched::mkStep(Prim::kLocalReduce, -1, -1, sched::inRef(0), sched::outRef(0), count, last));
        if (mistake == 0 && r == 1)  // rank 1 folds its own input a second time
          steps.push_back(sched::mkStep(Prim::kLocalReduce, -1, -1, sched::inRef(0), sched::outRef(0), count, false));
      }
      if (mistake == 1 && r == n - 1) steps.back().final = true;
      return OkStatus();
    };
    const Status st = checkCollective(collArgs(CollKind::kAllReduce, 0, n, count, count), gen);
    if (mistake < 0) {
      EXPECT_TRUE(st.ok()) << st.message();
      continue;
    }
    EXPECT_FALSE(st.ok()) << "mistake " << mistake;
    EXPECT_NE(st.message().find(expected[mistake + 1]), std::string::npos) << st.message();
  }
}

// ---- hier on uneven nodes: as many rails as the smallest node has ranks.

// Hosts for nodes of the given sizes. Contiguous: node 0 holds ranks 0..s0-1, and so on;
// interleaved: ranks are dealt round-robin to the nodes that still have room.
ChannelPlan unevenPlan(const std::vector<int>& sizes, bool contiguous) {
  ChannelPlan plan;
  std::vector<int> left = sizes;
  size_t node = 0;
  int total = 0;
  for (int sz : sizes) total += sz;
  for (int r = 0; r < total; ++r) {
    if (contiguous) {
      while (left[node] == 0) ++node;
    } else {
      while (left[node % sizes.size()] == 0) ++node;
      node %= sizes.size();
    }
    plan.hosts.push_back(7000 + node);
    --left[node];
    if (!contiguous) ++node;
  }
  return plan;
}

std::string shapeName(const std::vector<int>& sizes) {
  std::string t;
  for (size_t i = 0; i < sizes.size() && i < 8; ++i) t += (i ? "+" : "") + std::to_string(sizes[i]);
  return sizes.size() > 8 ? t + "+... (" + std::to_string(sizes.size()) + " nodes)" : t;
}

std::vector<int> repeat(std::vector<int> v, int times, int size) {
  v.insert(v.end(), static_cast<size_t>(times), size);
  return v;
}

TEST(HierUneven, ManyNodeShapes) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "hier");
  ASSERT_NE(algo, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  size_t total = 0;
  std::vector<int> oneToSixteen;
  for (int i = 1; i <= 16; ++i) oneToSixteen.push_back(i);
  const std::vector<std::vector<int>> shapes = {
      {1, 2}, {2, 1}, {1, 2, 3}, {3, 2, 1}, {7, 1}, {1, 7}, {2, 2, 1}, {3, 3, 1}, {2, 3}, {4, 3}, {8, 1, 8},
      {1, 2, 3, 4, 5}, {5, 4, 3, 2, 1}, {3, 5, 2, 5, 3}, {4, 6, 4, 5}, oneToSixteen, repeat({3}, 40, 4),
      repeat({}, 120, 8) /* + one below */, repeat({1, 3}, 2047, 4) /* 8192 */, repeat(repeat({}, 1000, 8), 48, 4)};
  for (std::vector<int> sizes : shapes) {
    if (sizes.size() == 120) sizes.push_back(5);  // 965 ranks: many even nodes and one short
    int n = 0;
    for (int sz : sizes) n += sz;
    std::vector<std::pair<Shape, bool>> cases;  // (shape, contiguous)
    if (n <= 100) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{13}, size_t{100}, size_t{1001}})
        for (size_t chunk : {size_t{1}, size_t{4}, size_t{64}})
          for (int slots : {2, 8})
            for (bool inPlace : {false, true})
              cases.push_back({{count, chunk, slots, inPlace}, (count + chunk + static_cast<size_t>(slots)) % 4 < 2});
    } else {
      // Large layouts cost O(n) per rank to generate and check: the smallest connection,
      // and at 8192 ranks a single case per shape, alternating the placement.
      cases = {{{1, 4, 2, false}, true}, {{11, 4, 2, true}, false}};
      if (n < 1000) cases.push_back({{11, 4, 8, false}, false});
      if (n > 2048) cases = {{{11, 4, 2, sizes[0] != 1}, sizes[0] == 1}};
    }
    for (const auto& [s, contiguous] : cases) {
      Status st = checkShape(*algo, n, s, unevenPlan(sizes, contiguous));
      ASSERT_TRUE(st.ok()) << "hier nodes " << shapeName(sizes) << (contiguous ? "" : " interleaved") << " "
                           << describe(n, s) << ": " << st.message();
      ++total;
    }
  }
  std::printf("hier AllReduce, uneven nodes: %zu cases up to 8192 ranks, %.2f s\n", total, secondsSince(t0));
}

TEST(HierUneven, RailsOfTheSmallestNode) {
  // Nodes of 4, 2 and 3 ranks (interleaved placement): 2 rails. Only local indices 0 and 1
  // talk across nodes, each to the ranks of its own local index; every rank of a node
  // talks to its local ring neighbours only; every rank agrees on every element bitwise.
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "hier");
  ASSERT_NE(algo, nullptr);
  const std::vector<int> sizes = {4, 2, 3};
  const ChannelPlan plan = unevenPlan(sizes, /*contiguous=*/false);
  const int n = 9;
  std::vector<int> localIdx(n);
  std::map<uint64_t, int> seen;
  for (int r = 0; r < n; ++r) localIdx[static_cast<size_t>(r)] = seen[plan.hosts[static_cast<size_t>(r)]]++;
  const size_t count = 2 * 3 * 10 + 1;
  std::vector<size_t> remoteByIdx(4);
  forEachStep(*algo, n, count, 4, plan, [&](int r, const Step& st) {
    if (st.sendPeer < 0) return;
    const size_t ur = static_cast<size_t>(r), up = static_cast<size_t>(st.sendPeer);
    if (plan.hosts[up] == plan.hosts[ur]) return;
    EXPECT_LT(localIdx[ur], 2) << "rank " << r << " (beyond the rails) sends to another node";
    EXPECT_EQ(localIdx[up], localIdx[ur]) << "rank " << r << " leaves its rail";
    remoteByIdx[static_cast<size_t>(localIdx[ur])] += st.count;
  });
  // Rail p reduces part (p+1) mod 2 (31 and 30 elements): a ring AllReduce over N = 3 nodes
  // sends 2 (N-1) times the part in all, and nothing else crosses nodes.
  EXPECT_EQ(remoteByIdx[0], 4u * 30u);
  EXPECT_EQ(remoteByIdx[1], 4u * 31u);
  EXPECT_EQ(remoteByIdx[2] + remoteByIdx[3], 0u);
  for (bool inPlace : {false, true}) EXPECT_EQ(disagreement(*algo, n, count, 4, inPlace, plan), "");
}

TEST(HierUneven, BitwiseAgreementOnUnevenShapes) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "hier");
  ASSERT_NE(algo, nullptr);
  for (const std::vector<int>& sizes : std::vector<std::vector<int>>{{1, 2, 3}, {7, 1}, {3, 3, 1}, {1, 2, 3, 4, 5}})
    for (bool contiguous : {true, false}) {
      int n = 0;
      for (int sz : sizes) n += sz;
      EXPECT_EQ(disagreement(*algo, n, 17, 4, !contiguous, unevenPlan(sizes, contiguous)), "")
          << shapeName(sizes) << (contiguous ? "" : " interleaved");
    }
}

}  // namespace
}  // namespace snccl
