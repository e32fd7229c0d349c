// Schedule generators and the symbolic checker.
//
// Every registered algorithm is run through the checker over a sampled matrix of rank
// counts (1 .. 1024; up to 127 in sanitizer builds), counts (0, 1, 7, n-1, n+3, 1023),
// in-place and out-of-place, roots and chunk sizes; negative tests prove the checker
// catches broken schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <functional>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/checker.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

bool rooted(CollKind k) {
  return k == CollKind::kBroadcast || k == CollKind::kReduce || k == CollKind::kGather ||
         k == CollKind::kScatter;
}

// A fixed pseudo-random permutation, so ring algorithms also run on a non-identity ring.
std::vector<int> shuffled(int n, uint64_t seed) {
  std::vector<int> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  for (int i = n - 1; i > 0; --i) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(v[static_cast<size_t>(i)], v[static_cast<size_t>((seed >> 33) % static_cast<uint64_t>(i + 1))]);
  }
  return v;
}

// Rough number of messages and elements the checker handles for one case; bounds run time.
uint64_t workOf(CollKind k, int n, size_t count, size_t chunk) {
  const uint64_t un = static_cast<uint64_t>(n), perBlock = count / chunk + 1;
  switch (k) {
    case CollKind::kAllReduce: return un * (2 * perBlock + 2 * un) + un * count;
    case CollKind::kBroadcast:
    case CollKind::kReduce: return un * (perBlock + count);
    case CollKind::kAllGather:
    case CollKind::kReduceScatter: return un * un * (perBlock + count);
    case CollKind::kAlltoAll: return 2 * un * un * (perBlock + count);
    default: return 2 * un * (perBlock + count) + un * un;  // Gather, Scatter
  }
}

struct Case {
  int n;
  size_t count;
  int root;
  size_t chunk;
  bool inPlace;
  bool shuffledRing;
};

std::string caseName(const AlgorithmDef& algo, const Case& c) {
  return std::string(algo.name) + " " + collName(algo.coll) + " n=" + std::to_string(c.n) +
         " count=" + std::to_string(c.count) + " root=" + std::to_string(c.root) +
         " chunk=" + std::to_string(c.chunk) + (c.inPlace ? " in-place" : "") +
         (c.shuffledRing ? " shuffled-ring" : "");
}

// The sampled matrix for one algorithm: everything for small rank counts, fewer and
// cheaper cases as nranks grows (the work bound), always including count 0 and 1.
#ifdef SNCCL_TEST_SANITIZED
// A sanitizer's run needs the code paths, not every size: a quarter of the work, up to
// 127 ranks.
constexpr int kRanks[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 64, 127};
constexpr uint64_t kBudgetDivisor = 4;
#else
constexpr int kRanks[] = {1, 2, 3, 4, 5, 7, 8, 16, 17, 31, 64, 127, 1024};
constexpr uint64_t kBudgetDivisor = 1;
#endif

std::vector<Case> matrix(const AlgorithmDef& algo) {
  constexpr size_t kChunks[] = {1, 3, 64};
  std::vector<Case> cases;
  uint64_t pick = 0;
  for (int n : kRanks) {
    if (algo.maxRanks != 0 && n > algo.maxRanks) continue;
    std::vector<size_t> counts = {0, 1, 7, static_cast<size_t>(n - 1), static_cast<size_t>(n + 3), 1023};
    std::sort(counts.begin(), counts.end());
    counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
    std::vector<int> roots = {0};
    if (rooted(algo.coll)) roots = {0, n - 1, n / 2};
    std::sort(roots.begin(), roots.end());
    roots.erase(std::unique(roots.begin(), roots.end()), roots.end());
    const uint64_t budget = (n >= 64 ? 3'000'000 : 1'500'000) / kBudgetDivisor;
    for (size_t count : counts) {
      for (size_t chunk : kChunks) {
        // count 1 with chunk 1 always runs (also at 1024 ranks); the rest within the budget.
        const bool always = count == 1 && chunk == 1;
        if (!always && workOf(algo.coll, n, count, chunk) > budget) continue;
        for (int root : roots) {
          for (bool inPlace : {false, true}) {
            ++pick;
            // Large rank counts: a deterministic third of the combinations (small counts all).
            if (n >= 64 && count > 1 && pick % 3 != 0) continue;
            if (always && n == 1024 && root != 0 && root != n - 1) continue;
            cases.push_back(Case{n, count, root, chunk, inPlace, n >= 3 && pick % 2 == 0});
          }
        }
      }
    }
  }
  return cases;
}

Status runCase(const AlgorithmDef& algo, const Case& c, CheckStats* stats = nullptr) {
  CollArgs a;
  a.coll = algo.coll;
  a.nranks = c.n;
  a.count = c.count;
  a.root = c.root;
  a.chunkElems = c.chunk;
  a.inPlace = c.inPlace;
  ChannelPlan plan;
  if (c.shuffledRing) plan.ring = shuffled(c.n, static_cast<uint64_t>(c.n) * 7 + c.count);
  CheckOptions opts;
  opts.stats = stats;
  return checkAlgorithm(algo, a, plan, opts);
}

class EveryAlgorithm : public ::testing::TestWithParam<size_t> {};

TEST_P(EveryAlgorithm, SymbolicallyCorrect) {
  const AlgorithmDef& algo = algorithms()[GetParam()];
  const auto t0 = std::chrono::steady_clock::now();
  size_t n = 0;
  uint64_t messages = 0;
  std::map<int, size_t> nonEmpty;  // nranks -> cases with count > 0
  for (const Case& c : matrix(algo)) {
    CheckStats stats;
    Status st = runCase(algo, c, &stats);
    ASSERT_TRUE(st.ok()) << caseName(algo, c) << ": " << st.message();
    messages += stats.messages;
    ++n;
    if (c.count > 0) ++nonEmpty[c.n];
  }
  // The sampling must leave every rank count with real (non-empty) cases.
  size_t rankCounts = 0;
  for (int r : kRanks) rankCounts += algo.maxRanks == 0 || r <= algo.maxRanks;
  EXPECT_EQ(nonEmpty.size(), rankCounts);
  for (const auto& [ranks, cases] : nonEmpty) EXPECT_GE(cases, 2u) << "nranks " << ranks;
  if (algo.maxRanks == 0 && nonEmpty.count(1024) != 0)
    std::printf("  1024 ranks: %zu non-empty cases\n", nonEmpty[1024]);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s %s: %zu cases, %llu messages, %.2f s\n", algo.name, collName(algo.coll), n,
              static_cast<unsigned long long>(messages), s);
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryAlgorithm, ::testing::Range<size_t>(0, algorithms().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           const AlgorithmDef& a = algorithms()[info.param];
                           return std::string(a.name) + "_" + collName(a.coll);
                         });

TEST(Schedules, ThousandRanksRingAllReduce) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "ring");
  ASSERT_NE(algo, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  CheckStats stats;
  for (bool inPlace : {false, true}) {
    Status st = runCase(*algo, Case{1024, 1024 + 3, 0, 1, inPlace, true}, &stats);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Iteration 0 moves all 1024 blocks, iteration 1 the 3 two-element blocks; each block
  // makes 2(n-1) hops.
  EXPECT_EQ(stats.messages, 2046ull * 1027);
  std::printf("1024-rank ring AllReduce x2: %.2f s, %llu messages each\n", s,
              static_cast<unsigned long long>(stats.messages));
}

TEST(Registry, EveryCollectiveHasADefault) {
  for (CollKind k : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllGather,
                     CollKind::kReduceScatter, CollKind::kAlltoAll, CollKind::kGather, CollKind::kScatter}) {
    const AlgorithmDef* d = defaultAlgorithm(k);
    ASSERT_NE(d, nullptr) << collName(k);
    EXPECT_EQ(d->coll, k);
    EXPECT_EQ(findAlgorithm(k, d->name), d);
  }
  EXPECT_EQ(defaultAlgorithm(CollKind::kSendRecv), nullptr);
  EXPECT_EQ(findAlgorithm(CollKind::kAllReduce, "nope"), nullptr);
  EXPECT_EQ(findAlgorithm(CollKind::kAllReduce, nullptr), nullptr);
  EXPECT_STREQ(findAlgorithm(CollKind::kAlltoAll, "p2p")->family, "p2p");
  for (const AlgorithmDef& a : algorithms()) {
    EXPECT_GT(std::string(a.help).size(), 10u) << a.name;
    EXPECT_NE(a.generate, nullptr);
  }
  EXPECT_STREQ(collName(CollKind::kReduceScatter), "ReduceScatter");
  EXPECT_STREQ(primName(Prim::kRecvReduceCopySend), "RecvReduceCopySend");
}

using testing::collArgs;

TEST(Generators, RejectBadArguments) {
  const AlgorithmDef* ar = defaultAlgorithm(CollKind::kAllReduce);
  const AlgorithmDef* bc = defaultAlgorithm(CollKind::kBroadcast);
  Schedule s;
  EXPECT_EQ(ar->generate(collArgs(CollKind::kAllReduce, 0, 4, 8, 0), {}, &s).code(), ncclInvalidArgument);
  EXPECT_EQ(ar->generate(collArgs(CollKind::kAllReduce, 4, 4, 8, 2), {}, &s).code(), ncclInvalidArgument);
  EXPECT_EQ(ar->generate(collArgs(CollKind::kBroadcast, 0, 4, 8, 2), {}, &s).code(), ncclInvalidArgument);
  EXPECT_EQ(bc->generate(collArgs(CollKind::kBroadcast, 0, 4, 8, 2, 4), {}, &s).code(), ncclInvalidArgument);
  ChannelPlan shortRing{{0, 1, 2}, {}};
  EXPECT_EQ(ar->generate(collArgs(CollKind::kAllReduce, 0, 4, 8, 2), shortRing, &s).code(), ncclInvalidArgument);
  ChannelPlan noRank3{{0, 1, 2, 2}, {}};
  EXPECT_EQ(ar->generate(collArgs(CollKind::kAllReduce, 3, 4, 8, 2), noRank3, &s).code(), ncclInvalidArgument);
}

TEST(Generators, ReuseScheduleCapacity) {
  const AlgorithmDef* ar = defaultAlgorithm(CollKind::kAllReduce);
  Schedule s;
  ASSERT_TRUE(ar->generate(collArgs(CollKind::kAllReduce, 1, 8, 4096, 64), {}, &s).ok());
  ASSERT_EQ(s.lanes.size(), 1u);
  const Step* data = s.lanes[0].steps.data();
  const size_t steps = s.lanes[0].steps.size();
  EXPECT_EQ(steps, 8u * 15u);  // 8 iterations of 2n-1 steps
  ASSERT_TRUE(ar->generate(collArgs(CollKind::kAllReduce, 2, 8, 4000, 64), {}, &s).ok());
  EXPECT_EQ(s.lanes[0].steps.data(), data) << "step storage must be reused";
  // Expected NCCL-style step order of one iteration.
  const Prim want[] = {Prim::kSend, Prim::kRecvReduceSend, Prim::kRecvReduceSend, Prim::kRecvReduceSend,
                       Prim::kRecvReduceSend, Prim::kRecvReduceSend, Prim::kRecvReduceSend,
                       Prim::kRecvReduceCopySend, Prim::kRecvCopySend, Prim::kRecvCopySend,
                       Prim::kRecvCopySend, Prim::kRecvCopySend, Prim::kRecvCopySend, Prim::kRecvCopySend,
                       Prim::kRecv};
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(s.lanes[0].steps[i].prim, want[i]) << i;
  EXPECT_TRUE(s.lanes[0].steps[7].final);
}

TEST(Generators, SingleRankReductionsStillFinalize) {
  Schedule s;
  for (CollKind k : {CollKind::kAllReduce, CollKind::kReduce, CollKind::kReduceScatter}) {
    ASSERT_TRUE(defaultAlgorithm(k)->generate(collArgs(k, 0, 1, 5, 2, 0, true), {}, &s).ok());
    ASSERT_EQ(s.lanes.size(), 1u);
    ASSERT_EQ(s.lanes[0].steps.size(), 1u);
    EXPECT_EQ(s.lanes[0].steps[0].prim, Prim::kCopy);
    EXPECT_TRUE(s.lanes[0].steps[0].final);
  }
}

// ---- Negative tests: a real generator, altered on one rank.

using Mutator = std::function<void(int rank, Schedule*)>;

Status checkMutated(const CollArgs& tmpl, const Mutator& mutate, const ChannelPlan& plan = {}) {
  const AlgorithmDef* algo = defaultAlgorithm(tmpl.coll);
  return checkCollective(tmpl, [&](int r, Schedule* out) {
    CollArgs a = tmpl;
    a.rank = r;
    SNCCL_TRY(algo->generate(a, plan, out));
    mutate(r, out);
    return OkStatus();
  });
}

void expectError(const Status& st, const std::string& needle) {
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find(needle), std::string::npos) << "message: " << st.message();
}

TEST(Checker, DroppedSendDeadlocks) {
  // Without its first Send every rank starts by waiting for its predecessor: a cycle.
  Status st = checkMutated(collArgs(CollKind::kAllReduce, 0, 4, 8, 2), [](int, Schedule* s) {
    s->lanes[0].steps.erase(s->lanes[0].steps.begin());
  });
  expectError(st, "deadlock: 4 of 4 lanes cannot progress");
  expectError(st, "rank 1 lane 0 step 0/6 (RecvReduceSend of 2 from rank 0 to rank 2): waits for message #1 "
                  "from rank 0, which has sent 0");
  // Dropped on one rank only, the messages shift and the data goes wrong instead.
  EXPECT_FALSE(checkMutated(collArgs(CollKind::kAllReduce, 0, 4, 8, 2), [](int r, Schedule* s) {
                 if (r == 0) s->lanes[0].steps.erase(s->lanes[0].steps.begin());
               }).ok());
}

TEST(Checker, DroppedReceiveLeavesMessages) {
  Status st = checkMutated(collArgs(CollKind::kAllReduce, 0, 4, 8, 2), [](int r, Schedule* s) {
    if (r == 2) s->lanes[0].steps.pop_back();
  });
  expectError(st, "messages nobody receives");
}

TEST(Checker, SlotsBoundTheConnection) {
  // A lane that sends everything before receiving deadlocks once the data exceeds the
  // slots of both directions; the checker must model that capacity.
  auto gen = [](int r, Schedule* out) {
    out->clear();
    out->coll = CollKind::kAlltoAll;
    const size_t count = 20;
    out->bufs = {{BufRole::kInput, 2 * count}, {BufRole::kOutput, 2 * count}};
    out->lanes.resize(2);
    const int peer = 1 - r;
    for (size_t i = 0; i < count; ++i) {
      out->lanes[0].steps.push_back(Step{Prim::kSend, false, peer, -1, {0, peer * count + i}, {}, 1});
    }
    for (size_t i = 0; i < count; ++i) {
      out->lanes[0].steps.push_back(Step{Prim::kRecv, false, -1, peer, {}, {1, peer * count + i}, 1});
    }
    out->lanes[1].steps.push_back(Step{Prim::kCopy, false, -1, -1, {0, r * count}, {1, r * count}, count});
    return OkStatus();
  };
  CollArgs a = collArgs(CollKind::kAlltoAll, 0, 2, 20, 1);
  expectError(checkCollective(a, gen), "waits for a free slot to rank");
  CheckOptions big;
  big.slots = 32;
  EXPECT_TRUE(checkCollective(a, gen, big).ok());
}

TEST(Checker, DoubledContributionIsCaught) {
  // Reduce to root 0 over 1 -> 2 -> 0, where rank 1 also sends its input to the root.
  auto gen = [](int r, Schedule* out) {
    out->clear();
    out->coll = CollKind::kReduce;
    out->reduces = true;
    out->bufs = {{BufRole::kInput, 1}, {BufRole::kOutput, r == 0 ? 1u : 0u}};
    out->lanes.resize(1);
    auto& st = out->lanes[0].steps;
    if (r == 1) {
      st.push_back(Step{Prim::kSend, false, 2, -1, {0, 0}, {}, 1});
      st.push_back(Step{Prim::kSend, false, 0, -1, {0, 0}, {}, 1});
    } else if (r == 2) {
      st.push_back(Step{Prim::kRecvReduceSend, false, 0, 1, {0, 0}, {}, 1});
    } else {
      st.push_back(Step{Prim::kRecvReduceCopy, false, -1, 2, {0, 0}, {1, 0}, 1});
      st.push_back(Step{Prim::kRecvReduceCopy, true, -1, 1, {1, 0}, {1, 0}, 1});
    }
    return OkStatus();
  };
  expectError(checkCollective(collArgs(CollKind::kReduce, 0, 3, 1, 1), gen), "entered it twice");
}

TEST(Checker, MissingFinalIsCaught) {
  Status st = checkMutated(collArgs(CollKind::kAllReduce, 0, 4, 8, 2), [](int r, Schedule* s) {
    if (r == 2) {
      for (Step& x : s->lanes[0].steps) x.final = false;
    }
  });
  expectError(st, "output elements are wrong");
  expectError(st, "finalized), got a sum of 4 contributions (hash");
}

TEST(Checker, DoubleFinalAndEarlyFinalAreCaught) {
  expectError(checkMutated(collArgs(CollKind::kAllReduce, 0, 4, 8, 2),
                           [](int r, Schedule* s) {
                             if (r == 1) {
                               for (Step& x : s->lanes[0].steps) x.final |= x.prim == Prim::kRecvCopySend;
                             }
                           }),
              "finalizes a value twice");
  expectError(checkMutated(collArgs(CollKind::kReduceScatter, 0, 4, 3, 2),
                           [](int r, Schedule* s) {
                             if (r == 1) s->lanes[0].steps[1].final = true;  // a RecvReduceSend
                           }),
              "partial sum of 2 of 4");
  expectError(checkMutated(collArgs(CollKind::kAllReduce, 0, 4, 8, 2),
                           [](int r, Schedule* s) {
                             if (r != 1) return;
                             for (Step& x : s->lanes[0].steps) {
                               if (x.prim != Prim::kRecvCopySend) continue;
                               x.prim = Prim::kRecvReduceCopySend;  // adds its input once more
                               x.src = x.dst;
                               x.src.buf = kInputBuf;
                               break;
                             }
                           }),
              "reduces a value that was already finalized");
  expectError(checkMutated(collArgs(CollKind::kBroadcast, 0, 3, 4, 2),
                           [](int r, Schedule* s) {
                             if (r == 0) s->lanes[0].steps[0].final = true;
                           }),
              "does not reduce");
}

TEST(Checker, WrongOffsetIsCaught) {
  Status st = checkMutated(collArgs(CollKind::kAllGather, 0, 3, 10, 4), [](int r, Schedule* s) {
    if (r == 1) s->lanes[0].steps[2].dst.offset += 1;  // a Recv lands one element late
  });
  expectError(st, "rank 1 Output[");
  st = checkMutated(collArgs(CollKind::kAllGather, 0, 3, 10, 4), [](int r, Schedule* s) {
    if (r == 1) s->lanes[0].steps[2].dst.offset = 28;
  });
  expectError(st, "out of bounds");
}

TEST(Checker, MismatchedCountsAreCaught) {
  Status st = checkMutated(collArgs(CollKind::kBroadcast, 0, 3, 10, 4), [](int r, Schedule* s) {
    if (r == 0) s->lanes[0].steps[0].count = 3;
  });
  expectError(st, "receives 4 elements but message #1 from rank 0 carries 3");
}

TEST(Checker, MalformedStepsAreCaught) {
  const CollArgs bc = collArgs(CollKind::kBroadcast, 0, 3, 10, 4);
  expectError(checkMutated(bc, [](int r, Schedule* s) { if (r == 2) s->lanes[0].steps[0].count = 0; }),
              "zero-count");
  CollArgs bigChunks = bc;
  bigChunks.chunkElems = 8;
  expectError(checkCollective(bc,
                              [&](int r, Schedule* out) {
                                CollArgs a = bigChunks;
                                a.rank = r;
                                return defaultAlgorithm(CollKind::kBroadcast)->generate(a, {}, out);
                              }),
              "exceeds chunkElems 4");
  expectError(checkMutated(bc,
                           [](int r, Schedule* s) {
                             if (r != 0) return;
                             s->lanes.emplace_back();
                             s->lanes[1].steps.push_back(s->lanes[0].steps[1]);  // a Send
                             s->lanes[0].steps.erase(s->lanes[0].steps.begin() + 1);
                           }),
              "both send to rank 1");
  expectError(checkMutated(bc, [](int r, Schedule* s) { if (r == 2) s->lanes[0].steps[0].dst.buf = kInputBuf; }),
              "writes to the Input buffer");
  expectError(checkMutated(bc, [](int r, Schedule* s) { if (r == 1) s->lanes[0].steps[0].sendPeer = 1; }),
              "is not another rank");
  expectError(checkMutated(bc, [](int r, Schedule* s) { if (r == 1) s->bufs[kOutputBuf].elems = 11; }),
              "NCCL's are 0/10");
  expectError(checkMutated(bc, [](int r, Schedule* s) { if (r == 0) s->lanes[0].steps.back().dst.offset = 1; }),
              "out of bounds");
}

TEST(Checker, InPlaceHazardsAreCaught) {
  // The out-of-place alltoall receives into blocks that other lanes still have to send.
  const AlgorithmDef* a2a = defaultAlgorithm(CollKind::kAlltoAll);
  Status st = checkCollective(collArgs(CollKind::kAlltoAll, 0, 4, 6, 2, 0, true), [&](int r, Schedule* out) {
    return a2a->generate(collArgs(CollKind::kAlltoAll, r, 4, 6, 2, 0, false), {}, out);
  });
  expectError(st, "lanes are not ordered");
  // One lane per rank: send block r+i, then receive block r-i. Correct out of place; in
  // place the block received from r-1 (i = 1) overwrites the one sent to r-1 (i = n-1).
  auto oneLane = [](int r, Schedule* out) {
    const int n = 4;
    const size_t count = 2;
    out->clear();
    out->coll = CollKind::kAlltoAll;
    out->bufs = {{BufRole::kInput, n * count}, {BufRole::kOutput, n * count}};
    out->lanes.resize(1);
    for (int i = 1; i < n; ++i) {
      const int to = (r + i) % n, from = (r - i + n) % n;
      out->lanes[0].steps.push_back(Step{Prim::kSend, false, to, -1, {0, to * count}, {}, count});
      out->lanes[0].steps.push_back(Step{Prim::kRecv, false, -1, from, {}, {1, from * count}, count});
    }
    return OkStatus();
  };
  EXPECT_FALSE(checkCollective(collArgs(CollKind::kAlltoAll, 0, 4, 2, 2, 0, false), oneLane).ok());  // no self copy
  st = checkCollective(collArgs(CollKind::kAlltoAll, 0, 4, 2, 2, 0, true), oneLane);
  expectError(st, "output elements are wrong");
  expectError(st, "got Input[");
}

// ---- Point-to-point

std::vector<P2POp> ops(std::initializer_list<P2POp> l) { return std::vector<P2POp>(l); }

TEST(P2P, RingShiftBothOrders) {
  for (int n : {2, 3, 5, 16}) {
    std::vector<std::vector<P2POp>> g(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      P2POp send{true, (r + 1) % n, 10}, recv{false, (r + n - 1) % n, 10};
      g[static_cast<size_t>(r)] = r % 2 ? ops({send, recv}) : ops({recv, send});
    }
    for (size_t chunk : {1, 3, 64}) {
      Status st = checkP2P(g, chunk);
      EXPECT_TRUE(st.ok()) << n << " " << chunk << ": " << st.message();
    }
  }
}

TEST(P2P, AllPairsWithSelfInShuffledOrders) {
  for (int n : {1, 4, 7, 20}) {  // 20: more than 16 operations per rank (lane table)
    std::vector<std::vector<P2POp>> g(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      std::vector<P2POp>& v = g[static_cast<size_t>(r)];
      for (int p : shuffled(n, static_cast<uint64_t>(r) + 11)) {
        v.push_back(P2POp{true, p, static_cast<size_t>((r * 3 + p) % 5)});   // count f(r, p)
        v.push_back(P2POp{false, p, static_cast<size_t>((p * 3 + r) % 5)});  // count f(p, r)
      }
      std::vector<int> perm = shuffled(static_cast<int>(v.size()), static_cast<uint64_t>(r) + 99);
      std::vector<P2POp> mixed;
      // Shuffle while keeping per-peer, per-direction order (one message per pair here).
      for (int i : perm) mixed.push_back(v[static_cast<size_t>(i)]);
      v = mixed;
    }
    Status st = checkP2P(g, 2);
    EXPECT_TRUE(st.ok()) << n << ": " << st.message();
  }
}

TEST(P2P, SelfCopiesPairInOrder) {
  std::vector<std::vector<P2POp>> g = {ops({{true, 0, 5}, {false, 0, 5}, {false, 0, 3}, {true, 0, 3}, {true, 0, 0},
                                            {false, 0, 0}})};
  EXPECT_TRUE(checkP2P(g, 2).ok());
  Schedule s;
  ASSERT_TRUE(buildP2PSchedule(0, 1, g[0], 2, &s).ok());
  ASSERT_EQ(s.lanes.size(), 1u);
  ASSERT_EQ(s.lanes[0].steps.size(), 2u);  // zero-length pair: nothing
  EXPECT_EQ(s.lanes[0].steps[1].src.buf, 3);
  EXPECT_EQ(s.lanes[0].steps[1].dst.buf, 2);
}

TEST(P2P, MismatchedSelfCountsAreInvalidUsage) {
  Schedule s;
  std::vector<P2POp> bad = ops({{true, 0, 5}, {false, 0, 4}});
  EXPECT_EQ(buildP2PSchedule(0, 2, bad, 8, &s).code(), ncclInvalidUsage);
  std::vector<P2POp> twoSends = ops({{true, 0, 5}, {false, 0, 5}, {true, 0, 5}});
  EXPECT_EQ(buildP2PSchedule(0, 2, twoSends, 8, &s).code(), ncclInvalidUsage);
  std::vector<P2POp> onlyRecv = ops({{false, 1, 5}});
  EXPECT_EQ(buildP2PSchedule(1, 2, onlyRecv, 8, &s).code(), ncclInvalidUsage);
  std::vector<P2POp> big;  // more than 16 operations: the lane table path
  for (int i = 0; i < 20; ++i) big.push_back({i % 2 == 0, 1, 4});
  big.push_back({true, 0, 3});
  big.push_back({false, 0, 2});
  EXPECT_EQ(buildP2PSchedule(0, 2, big, 8, &s).code(), ncclInvalidUsage);
  big.back().count = 3;
  EXPECT_TRUE(buildP2PSchedule(0, 2, big, 8, &s).ok());
  std::vector<P2POp> badPeer = ops({{true, 2, 5}});
  EXPECT_EQ(buildP2PSchedule(0, 2, badPeer, 8, &s).code(), ncclInvalidArgument);
  EXPECT_EQ(buildP2PSchedule(0, 2, bad, 0, &s).code(), ncclInvalidArgument);
}

TEST(P2P, DifferentOrdersPerPeer) {
  std::vector<std::vector<P2POp>> g = {
      ops({{true, 1, 4}, {false, 2, 3}, {true, 1, 6}, {false, 1, 2}, {true, 2, 9}}),
      ops({{false, 0, 4}, {true, 0, 2}, {true, 2, 1}, {false, 0, 6}}),
      ops({{false, 0, 9}, {false, 1, 1}, {true, 0, 3}}),
  };
  for (int slots : {1, 2, 8}) {
    CheckOptions o;
    o.slots = slots;
    Status st = checkP2P(g, 2, o);
    EXPECT_TRUE(st.ok()) << slots << ": " << st.message();
  }
  Schedule s;
  ASSERT_TRUE(buildP2PSchedule(0, 3, g[0], 2, &s).ok());
  EXPECT_EQ(s.lanes.size(), 4u);  // send 1, recv 2, recv 1, send 2
  EXPECT_EQ(s.lanes[0].steps.size(), 5u);  // 4 + 6 elements in chunks of 2, in call order
  EXPECT_EQ(s.lanes[0].steps[2].src.buf, 2);
}

TEST(P2P, MismatchedPeersAreReported) {
  std::vector<std::vector<P2POp>> g = {ops({{true, 1, 4}}), ops({{false, 0, 5}})};
  Status st = checkP2P(g, 2);
  EXPECT_EQ(st.code(), ncclInvalidUsage);
  expectError(st, "matching receive 5");
  g = {ops({{true, 1, 4}, {true, 1, 4}}), ops({{false, 0, 4}})};
  expectError(checkP2P(g, 2), "sends 2 messages to rank 1, which receives 1");
  // A generator that chunks differently on the two ends is caught by the simulation.
  g = {ops({{true, 1, 4}}), ops({{false, 0, 4}})};
  st = checkP2PWith(g, 4, [&](int r, Schedule* out) {
    return buildP2PSchedule(r, 2, g[static_cast<size_t>(r)], r == 0 ? 3 : 4, out);
  });
  expectError(st, "receives 4 elements but message #1 from rank 0 carries 3");
}

TEST(P2P, LargeGroups) {
  const int n = 64;
  std::vector<std::vector<P2POp>> g(n);
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < n; ++i) {
      g[static_cast<size_t>(r)].push_back({true, (r + i) % n, 3});
      g[static_cast<size_t>(r)].push_back({false, (r - i + n) % n, 3});
    }
  }
  CheckStats stats;
  CheckOptions o;
  o.stats = &stats;
  Status st = checkP2P(g, 2, o);
  EXPECT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(stats.messages, static_cast<uint64_t>(n) * (n - 1) * 2);
}

}  // namespace
}  // namespace snccl
