// The cost model, the selector and the NCCL_ALGO / NCCL_PROTO parser (collectives/tuning).
// No timing: only the model's predictions and the selector's decisions are checked.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/tuning/algo_spec.h"
#include "collectives/tuning/cost_model.h"
#include "collectives/tuning/selector.h"
#include "common/params.h"

namespace snccl::tuning {
namespace {

constexpr int kAR = static_cast<int>(CollKind::kAllReduce);
constexpr int kBC = static_cast<int>(CollKind::kBroadcast);
constexpr int kAG = static_cast<int>(CollKind::kAllGather);

const std::string_view kNames[] = {"ring", "tree", "hier"};

TEST(AlgoSyntax, EveryForm) {
  Selection s;
  ASSERT_TRUE(parseSelection("", kNames, &s).ok());
  EXPECT_FALSE(s.restricted[kAR]);
  EXPECT_EQ(s.masks[kAR], 7u);

  ASSERT_TRUE(parseSelection("ring,tree", kNames, &s).ok());
  EXPECT_EQ(s.masks[kAR], 3u);
  EXPECT_EQ(s.masks[kBC], 3u);
  EXPECT_TRUE(s.restricted[kBC]);

  ASSERT_TRUE(parseSelection("^tree", kNames, &s).ok());
  EXPECT_EQ(s.masks[kAR], 5u);

  ASSERT_TRUE(parseSelection("allreduce:tree;broadcast:ring", kNames, &s).ok());
  EXPECT_EQ(s.masks[kAR], 2u);
  EXPECT_EQ(s.masks[kBC], 1u);
  EXPECT_FALSE(s.restricted[kAG]);
  EXPECT_EQ(s.masks[kAG], 7u);

  // A global part plus per-collective parts (which win whatever their position); case and
  // blanks do not matter; a trailing ';' is fine.
  ASSERT_TRUE(parseSelection(" AllReduce : ^Ring ; RING ;", kNames, &s).ok());
  EXPECT_EQ(s.masks[kAR], 6u);
  EXPECT_EQ(s.masks[kBC], 1u);
  EXPECT_EQ(s.mentioned, 1u);
}

TEST(AlgoSyntax, BadSyntaxNamesThePartAndEnablesAll) {
  for (const char* bad : {"ring,,tree", "bogus", "allreduce:", "nosuchcoll:ring", "ring;tree",
                          "allreduce:ring;allreduce:tree", "^", "ring,"}) {
    Selection s;
    Status st = parseSelection(bad, kNames, &s);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.code(), ncclInvalidArgument) << bad;
    EXPECT_FALSE(st.message().empty());
    EXPECT_FALSE(s.restricted[kAR]) << bad;
    EXPECT_EQ(s.masks[kAR], 7u) << bad;
  }
  Selection s;
  EXPECT_NE(parseSelection("bogus", kNames, &s).message().find("bogus"), std::string::npos);
  EXPECT_NE(parseSelection("gather:ring;nosuchcoll:ring", kNames, &s).message().find("nosuchcoll"), std::string::npos);
}

TEST(AlgoSyntax, NcclOnlyAlgorithmsAreIgnored) {
  AlgoSpec a;
  ASSERT_TRUE(parseAlgoSpec("NVLS,ring,PAT", &a).ok());
  EXPECT_EQ(a.ignored, "NVLS, PAT");
  ASSERT_TRUE(parseAlgoSpec("^CollnetDirect", &a).ok());
  EXPECT_EQ(a.ignored, "CollnetDirect");
  EXPECT_TRUE(a.restricted[kAR]);
  // ^CollnetDirect leaves every snccl algorithm enabled.
  for (size_t i = 0; i < algorithms().size(); ++i)
    if (algorithms()[i].coll == CollKind::kAllReduce) {
      EXPECT_TRUE(a.allowed[kAR] >> i & 1);
    }
  EXPECT_FALSE(parseAlgoSpec("ring,nosuchalgo", &a).ok());
}

TEST(ProtoSyntax, OnlySimpleExists) {
  ProtoSpec p;
  ASSERT_TRUE(parseProtoSpec("", &p).ok());
  EXPECT_FALSE(p.any);
  ASSERT_TRUE(parseProtoSpec("LL,LL128", &p).ok());
  EXPECT_TRUE(p.any);
  EXPECT_TRUE(p.simpleOff[kAR]);
  ASSERT_TRUE(parseProtoSpec("^LL128;allreduce:LL128", &p).ok());  // NCCL's own example
  EXPECT_TRUE(p.simpleOff[kAR]);
  EXPECT_FALSE(p.simpleOff[kBC]);
  ASSERT_TRUE(parseProtoSpec("simple", &p).ok());
  EXPECT_FALSE(p.any);
  EXPECT_FALSE(parseProtoSpec("LL256", &p).ok());

  std::vector<std::string> warnings;
  parseOverrides("", "LL", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("GPU protocols"), std::string::npos);
  warnings.clear();
  parseOverrides("ring;;tree,", "", &warnings);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("not valid"), std::string::npos);
}

Tuner tuner(int nranks, int nnodes, LinkClass intra = LinkClass::kShm, const std::string& algo = "") {
  std::vector<std::string> w;
  return makeTuner(evenShape(nranks, nnodes, intra), 128 << 10, hostDefaults(), parseOverrides(algo, "", &w));
}

TEST(CostModel, ShapeFromHosts) {
  const uint64_t hosts[] = {7, 7, 9, 9, 9};
  const uint64_t procs[] = {1, 1, 2, 3, 4};
  CommShape s = shapeFromHosts(5, hosts, procs);
  EXPECT_EQ(s.nnodes, 2);
  EXPECT_EQ(s.minPerNode, 2);
  EXPECT_EQ(s.maxPerNode, 3);
  EXPECT_FALSE(s.uniform());
  EXPECT_EQ(s.intra, LinkClass::kShm);  // node 9 has three processes
  const uint64_t same[] = {1, 1, 1, 1, 1};
  EXPECT_EQ(shapeFromHosts(5, hosts, same).intra, LinkClass::kLocal);
  EXPECT_EQ(shapeFromHosts(5, {}, {}).nnodes, 1);
  CommShape e = evenShape(10, 4, LinkClass::kShm);
  EXPECT_EQ(e.minPerNode, 2);
  EXPECT_EQ(e.maxPerNode, 3);
}

// More ranks on a node than it has CPUs: every hop waits for a sender to be scheduled, so
// small AllReduces favour the fewest dependent exchanges (flat: one) over rd's log2(n)
// and direct's two; with a CPU per rank only the latencies shrink.
TEST(CostModel, OversubscribedNodesFavourFewerHops) {
  const uint64_t hosts[] = {5, 5, 5, 5, 5, 5, 5, 5, 6, 6};
  const int twoCpus[] = {2, 2, 2, 2, 2, 2, 2, 2, 64, 64};
  EXPECT_DOUBLE_EQ(shapeFromHosts(10, hosts, {}, twoCpus).oversub, 4.0);  // the busiest node
  const int manyCpus[] = {64, 64, 64, 64, 64, 64, 64, 64, 64, 64};
  EXPECT_DOUBLE_EQ(shapeFromHosts(10, hosts, {}, manyCpus).oversub, 1.0);
  EXPECT_DOUBLE_EQ(shapeFromHosts(10, hosts, {}, {}).oversub, 1.0);

  const ModelParams p = hostDefaults();
  CommShape sh = evenShape(8, 1, LinkClass::kShm);
  std::vector<std::string> w;
  const Tuner ample = makeTuner(sh, 128 << 10, p, parseOverrides("", "", &w));
  sh.oversub = 4.0;
  const Tuner crowded = makeTuner(sh, 128 << 10, p, parseOverrides("", "", &w));
  // One exchange wins small messages whether or not the node is crowded; crowded, the
  // flat AllReduce's one exchange costs two latencies, still below rd's three.
  EXPECT_STREQ(select(ample, CollKind::kAllReduce, 64).algo->name, "flat");
  EXPECT_STREQ(select(crowded, CollKind::kAllReduce, 64).algo->name, "flat");
  EXPECT_NEAR(predictUs("flat", CollKind::kAllReduce, sh, 64, 128 << 10, p) /
                  predictUs("rd", CollKind::kAllReduce, sh, 64, 128 << 10, p),
              2.0 / 3.0, 0.02);
  // flat sends n-1 copies: by 64 KiB a two-exchange or log2(n)-round algorithm is cheaper.
  EXPECT_STRNE(select(crowded, CollKind::kAllReduce, 64 << 10).algo->name, "flat");
  EXPECT_STREQ(select(crowded, CollKind::kAllReduce, size_t(64) << 20).algo->name, "ring");
  // flat applies inside one node only (n-1 copies each way over the network).
  EXPECT_LT(predictUs("flat", CollKind::kAllReduce, evenShape(8, 2, LinkClass::kShm), 64, 128 << 10, p), 0);
  // Oversubscription only ever makes a prediction slower.
  for (const char* a : {"ring", "tree", "direct", "rd", "flat"})
    EXPECT_GT(predictUs(a, CollKind::kAllReduce, sh, 4096, 128 << 10, p),
              predictUs(a, CollKind::kAllReduce, evenShape(8, 1, LinkClass::kShm), 4096, 128 << 10, p))
        << a;
}

TEST(CostModel, MonotonicInBytes) {
  const ModelParams p = hostDefaults();
  for (int n : {2, 3, 8, 64, 1024})
    for (int nodes : {1, 2, 4})
      for (const AlgorithmDef& a : algorithms()) {
        if (!hasFormula(a.name, a.coll) || nodes > n) continue;
        const CommShape sh = evenShape(n, nodes, LinkClass::kShm);
        double prev = 0;
        for (size_t bytes = 8; bytes <= (size_t(1) << 30); bytes *= 4) {
          const double us = predictUs(a.name, a.coll, sh, bytes, 128 << 10, p);
          if (us < 0) break;  // does not apply to this shape
          EXPECT_GE(us, prev) << a.name << " " << collName(a.coll) << " n=" << n << " bytes=" << bytes;
          prev = us;
        }
      }
}

TEST(CostModel, RingWinsLargeLatencyBoundAlgorithmsWinSmall) {
  for (int n : {4, 8, 16}) {
    const Tuner t = tuner(n, 1);
    EXPECT_STREQ(select(t, CollKind::kAllReduce, size_t(1) << 30).algo->name, "ring") << n;
  }
  // Many ranks, small messages: a latency-bound algorithm (log2 n hops), never the ring.
  for (int n : {64, 1024, 8192}) {
    const Tuner t = tuner(n, n / 8);
    const char* pick = select(t, CollKind::kAllReduce, 8).algo->name;
    EXPECT_STRNE(pick, "ring") << n;
    EXPECT_STRNE(pick, "hier") << n;
    EXPECT_STRNE(select(t, CollKind::kBroadcast, 8).algo->name, "ring") << n;
  }
  // 2 ranks, tiny message: one hop (direct) beats the ring's two.
  EXPECT_STREQ(select(tuner(2, 1), CollKind::kAllReduce, 64).algo->name, "direct");
  // Nodes over TCP with many ranks each, large message: hier keeps most bytes in the node.
  EXPECT_STREQ(select(tuner(32, 4), CollKind::kAllReduce, 64 << 20).algo->name, "hier");
}

TEST(Selector, PickIsTheModelsBestAndFits) {
  for (int n : {1, 2, 3, 5, 8, 9, 64, 1000}) {
    for (int nodes : {1, 2, 3}) {
      if (nodes > n) continue;
      const Tuner t = tuner(n, nodes);
      for (CollKind c : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllGather,
                         CollKind::kReduceScatter, CollKind::kAlltoAll, CollKind::kGather, CollKind::kScatter}) {
        for (size_t bytes : tableSizes()) {
          const Decision d = select(t, c, bytes);
          ASSERT_NE(d.algo, nullptr);
          EXPECT_EQ(d.algo->coll, c);
          EXPECT_TRUE(d.algo->maxRanks == 0 || n <= d.algo->maxRanks) << d.algo->name << " n=" << n;
          EXPECT_LE(d.chunkBytes, t.slotBytes);
          EXPECT_GT(d.chunkBytes, 0u);
          if (nodes == 1) {
            EXPECT_EQ(d.channels, 1);  // one node: channels only cost
          } else {
            EXPECT_TRUE(d.channels == 1 || d.channels == 2) << d.channels;  // at most the net's overlap
          }
          EXPECT_STREQ(d.proto, "Simple");
          for (const AlgorithmDef& a : algorithms()) {
            if (a.coll != c || (a.maxRanks != 0 && n > a.maxRanks)) continue;
            size_t chunks[4];
            for (int k = 0, nk = chunkCandidates(t.slotBytes, chunks); k < nk; ++k) {
              const double us = predictUs(a.name, c, t.shape, bytes, chunks[k], t.params);
              if (us >= 0) {
                EXPECT_LE(d.predictedUs, us) << a.name << " n=" << n << " bytes=" << bytes;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Selector, Deterministic) {
  for (int n : {3, 8, 96}) {
    const Tuner a = tuner(n, n > 8 ? 12 : 1), b = tuner(n, n > 8 ? 12 : 1);
    for (size_t bytes = 1; bytes <= (size_t(1) << 30); bytes = bytes * 3 + 1) {
      const Decision x = select(a, CollKind::kAllReduce, bytes), y = select(b, CollKind::kAllReduce, bytes);
      EXPECT_EQ(x.algo, y.algo);
      EXPECT_EQ(x.chunkBytes, y.chunkBytes);
      EXPECT_EQ(x.predictedUs, y.predictedUs);
    }
  }
}

TEST(Selector, ObeysForcedAlgorithms) {
  for (int n : {2, 3, 8, 64, 1024}) {
    for (size_t bytes : {size_t{0}, size_t{8}, size_t{1} << 16, size_t{1} << 30}) {
      Decision d = select(tuner(n, 1, LinkClass::kShm, "tree"), CollKind::kAllReduce, bytes);
      EXPECT_STREQ(d.algo->name, "tree");
      EXPECT_TRUE(d.forced);
      EXPECT_STREQ(select(tuner(n, 1, LinkClass::kShm, "ring"), CollKind::kBroadcast, bytes).algo->name, "ring");
      EXPECT_STRNE(select(tuner(n, 1, LinkClass::kShm, "^ring"), CollKind::kAllReduce, bytes).algo->name, "ring");
      const Tuner per = tuner(n, 1, LinkClass::kShm, "allreduce:tree;broadcast:ring");
      EXPECT_STREQ(select(per, CollKind::kAllReduce, bytes).algo->name, "tree");
      EXPECT_STREQ(select(per, CollKind::kBroadcast, bytes).algo->name, "ring");
      EXPECT_FALSE(select(per, CollKind::kReduce, bytes).forced);
    }
  }
  EXPECT_STREQ(select(tuner(16, 2, LinkClass::kShm, "hier"), CollKind::kAllReduce, 1 << 20).algo->name, "hier");
  // No tree AllGather: the forced set is empty for it and the model decides.
  Decision ag = select(tuner(16, 1, LinkClass::kShm, "tree"), CollKind::kAllGather, 1 << 20);
  EXPECT_STREQ(ag.algo->name, "ring");
  EXPECT_FALSE(ag.forced);
  // A forced algorithm that does not fit the communicator (direct has a rank limit, when
  // registered with one) falls back to the model.
  for (const AlgorithmDef& a : algorithms()) {
    if (a.maxRanks == 0) continue;
    Decision d = select(tuner(a.maxRanks + 1, 1, LinkClass::kShm, a.name), a.coll, 8);
    EXPECT_STRNE(d.algo->name, a.name);
  }
  // Invalid syntax: ignored as a whole.
  EXPECT_FALSE(select(tuner(8, 1, LinkClass::kShm, "tree,,ring"), CollKind::kAllReduce, 8).forced);
}

TEST(Selector, ChunkNeverAboveSlotAndSmallerForPipelines) {
  std::vector<std::string> w;
  const Tuner t = makeTuner(evenShape(64, 1, LinkClass::kShm), 1 << 20, hostDefaults(), parseOverrides("ring", "", &w));
  // A 64-rank chain broadcast of a few slots: smaller chunks fill the pipeline sooner.
  const Decision d = select(t, CollKind::kBroadcast, 4 << 20);
  EXPECT_LT(d.chunkBytes, size_t(1) << 20);
  size_t chunks[4];
  EXPECT_EQ(chunkCandidates(4096, chunks), 1);
  EXPECT_EQ(chunkCandidates(1 << 20, chunks), 4);
  EXPECT_EQ(chunks[3], size_t(128) << 10);
}

TEST(Selector, TablesHaveARowPerSize) {
  const Tuner t = tuner(16, 2);
  for (CollKind c : tunedCollectives()) {
    const std::vector<std::string> lines = decisionTable(t, c);
    EXPECT_EQ(lines.size(), tableSizes().size() + 1);
    EXPECT_NE(lines[0].find(collName(c)), std::string::npos);
  }
  EXPECT_NE(describeTuner(t).find("16 ranks, 2 nodes"), std::string::npos);
  EXPECT_EQ(sizeLabel(1 << 30), "1G");
  EXPECT_EQ(sizeLabel(64 << 10), "64K");
  EXPECT_EQ(sizeLabel(8), "8");
}

TEST(Channels, HostChannelsOnlyCostInsideANode) {
  // One executor thread per rank copies every byte over shm: more channels add channelUs
  // each, nothing else, so one node keeps 1.
  const ModelParams p = hostDefaults();
  const CommShape sh = evenShape(4, 1, LinkClass::kShm);
  for (size_t bytes : {size_t(8), size_t(1) << 20, size_t(1) << 30}) {
    const double one = predictUs("ring", CollKind::kAllReduce, sh, bytes, 128 << 10, p);
    EXPECT_DOUBLE_EQ(predictUs("ring", CollKind::kAllReduce, sh, bytes, 128 << 10, p, 4), one + 3 * p.channelUs);
    EXPECT_EQ(select(tuner(4, 1), CollKind::kAllReduce, bytes).channels, 1);
  }
  EXPECT_LT(predictUs("ring", CollKind::kAllReduce, sh, 8, 128 << 10, p, 0), 0);
  // An algorithm that does not apply stays negative whatever the channels (direct across nodes).
  for (int ch : {1, 2, 16}) EXPECT_LT(predictUs("direct", CollKind::kAllReduce, evenShape(8, 2, LinkClass::kShm), 1 << 20, 128 << 10, p, ch), 0);
  // Across nodes, TCP overlaps two channels: large messages take 2, small ones 1, never more.
  const Tuner net = tuner(2, 2);
  EXPECT_EQ(select(net, CollKind::kAllReduce, 8).channels, 1);
  EXPECT_EQ(select(net, CollKind::kAllReduce, size_t(64) << 20).channels, 2);
  EXPECT_EQ(select(net, CollKind::kAllReduce, size_t(1) << 30).channels, 2);
}

TEST(Channels, DeviceModelUsesChannelsForLargeMessagesOnly) {
  // A GPU-like fabric: one channel moves 1/16 of a link, channels run in parallel.
  ModelParams p = hostDefaults();
  p.channelUs = 0.1;
  for (LinkParams& l : p.link) l = {3.0, 320.0, 20.0, kMaxChannels};
  Tuner t = makeTuner(evenShape(8, 1, LinkClass::kShm), 128 << 10, p, Overrides{});
  const Decision small = select(t, CollKind::kAllReduce, 8);
  EXPECT_EQ(small.channels, 1);
  const Decision big = select(t, CollKind::kAllReduce, size_t(1) << 30);
  EXPECT_EQ(big.channels, 16);
  EXPECT_LT(big.predictedUs,
            predictUs(big.algo->name, CollKind::kAllReduce, t.shape, size_t(1) << 30, big.chunkBytes, p, 1) / 4);
  // Collectives that are not split keep one channel whatever the model says.
  EXPECT_EQ(select(t, CollKind::kAlltoAll, size_t(1) << 30).channels, 1);
}

TEST(Channels, RangeOverridesAndClamps) {
  std::vector<std::string> warnings;
  Overrides o;
  setChannelRange(4, 4, &o, &warnings);
  EXPECT_TRUE(warnings.empty());
  const Tuner t = makeTuner(evenShape(3, 1, LinkClass::kShm), 128 << 10, hostDefaults(), o);
  for (CollKind c : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllGather,
                     CollKind::kReduceScatter})
    for (size_t bytes : {size_t(8), size_t(1) << 26}) EXPECT_EQ(select(t, c, bytes).channels, 4) << collName(c);
  for (CollKind c : {CollKind::kAlltoAll, CollKind::kGather, CollKind::kScatter})
    EXPECT_EQ(select(t, c, size_t(1) << 26).channels, 1) << collName(c);
  EXPECT_NE(decisionTable(t, CollKind::kAllReduce)[1].find("4 channels"), std::string::npos);

  setChannelRange(0, 100, &o, &warnings);
  EXPECT_EQ(o.minChannels, 1);
  EXPECT_EQ(o.maxChannels, kMaxChannels);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("SNCCL_MIN_NCHANNELS=0"), std::string::npos) << warnings[0];
  setChannelRange(8, 4, &o, &warnings);
  EXPECT_EQ(o.minChannels, 8);
  EXPECT_EQ(o.maxChannels, 8);
  EXPECT_EQ(warnings.size(), 2u);

  int cand[6];
  o.minChannels = 1;
  o.maxChannels = 16;
  ASSERT_EQ(channelCandidates(o, CollKind::kAllReduce, cand), 5);
  EXPECT_EQ(cand[0], 1);
  EXPECT_EQ(cand[4], 16);
  o.minChannels = 3;
  o.maxChannels = 5;
  ASSERT_EQ(channelCandidates(o, CollKind::kAllReduce, cand), 3);
  EXPECT_EQ(cand[1], 4);
  EXPECT_EQ(cand[2], 5);
  EXPECT_EQ(channelCandidates(o, CollKind::kAlltoAll, cand), 1);
  EXPECT_EQ(cand[0], 1);
}

TEST(Channels, ConfigRangeAndEnvironmentGiveOneRangePerRank) {
  Overrides env;  // what processOverrides() holds: SNCCL_MIN/MAX_NCHANNELS clamped
  env.minChannels = 2;
  env.maxChannels = 3;
  auto range = [&](bool envMin, bool envMax, int cfgMin, int cfgMax) {
    const ChannelRange r = localChannelRange(env, envMin, envMax, cfgMin, cfgMax);
    return std::make_pair(r.min, r.max);
  };
  EXPECT_EQ(range(false, false, 0, 0), std::make_pair(1, kMaxChannels));  // defaults
  EXPECT_EQ(range(false, false, 4, 8), std::make_pair(4, 8));             // ncclConfig_t minCTAs/maxCTAs
  EXPECT_EQ(range(false, false, 64, 64), std::make_pair(kMaxChannels, kMaxChannels));  // NCCL allows 64
  EXPECT_EQ(range(true, true, 4, 8), std::make_pair(2, 3));               // the environment wins
  EXPECT_EQ(range(false, true, 4, 0), std::make_pair(3, 3));              // ... also over the config's min
  EXPECT_EQ(range(true, false, 0, 1), std::make_pair(2, 2));              // ... and over its max
  EXPECT_EQ(range(true, false, 0, 8), std::make_pair(2, 8));

  // Every rank computes the same agreed range from the peers' table.
  const ChannelRange same[] = {{2, 8}, {2, 8}};
  EXPECT_EQ(agreeChannels(same).min, 2);
  EXPECT_EQ(agreeChannels(same).max, 8);
  const ChannelRange overlap[] = {{1, 8}, {2, 16}, {1, 4}};
  EXPECT_EQ(agreeChannels(overlap).min, 2);
  EXPECT_EQ(agreeChannels(overlap).max, 4);
  const ChannelRange crossed[] = {{4, 4}, {1, 2}};  // the largest minimum wins
  EXPECT_EQ(agreeChannels(crossed).min, 4);
  EXPECT_EQ(agreeChannels(crossed).max, 4);

  const uint64_t hosts[] = {1, 1}, procs[] = {1, 2};
  const int cpus[] = {2, 2};
  const Tuner t = commTuner(2, hosts, procs, cpus, 128 << 10, false, ChannelRange{3, 5});
  EXPECT_EQ(t.over.minChannels, 3);
  EXPECT_EQ(t.over.maxChannels, 5);
  EXPECT_EQ(select(t, CollKind::kAllReduce, 1 << 20).channels, 3);
}

}  // namespace
}  // namespace snccl::tuning

namespace snccl::tuning {
namespace {

// A one-node tuner whose ranks map each other's buffers from `threshold` bytes on.
Tuner mappedTuner(int nranks, size_t threshold, LinkClass intra = LinkClass::kLocal, const std::string& algo = "",
                  double oversub = 1.0, size_t slot = 128 << 10) {
  std::vector<std::string> w;
  CommShape sh = evenShape(nranks, 1, intra);
  sh.singleCopyBytes = threshold;
  sh.oversub = oversub;
  return makeTuner(sh, slot, hostDefaults(), parseOverrides(algo, "", &w));
}

TEST(SingleCopy, DefaultThresholdIsTheParametersDefault) {
  EXPECT_EQ(std::to_string(kSingleCopyDefaultBytes), params::def(params::Id::SingleCopyBytes).defaultValue);
}

// 2N bytes touched per rank against the ring's ~4.5N at the measured 2 ranks, and three
// rounds of small messages.
TEST(SingleCopy, Formula) {
  const ModelParams p = hostDefaults();
  for (LinkClass c : {LinkClass::kLocal, LinkClass::kShm}) {
    CommShape sh = evenShape(2, 1, c);
    sh.singleCopyBytes = 1;
    const LinkParams& l = p.of(c);
    const size_t b = size_t(1) << 20;
    EXPECT_NEAR(predictUs("single", CollKind::kAllReduce, sh, b, 128 << 10, p),
                3 * l.latUs + 2.0 * double(b) / (4.5 * l.bwGBps * 1e3), 1e-9);
    // Large: well under the ring, which moves ~B/bw at 2 ranks.
    EXPECT_LT(predictUs("single", CollKind::kAllReduce, sh, 64 << 20, 128 << 10, p),
              0.5 * predictUs("ring", CollKind::kAllReduce, sh, 64 << 20, 128 << 10, p));
    // Small: the three rounds cost more than one exchange.
    EXPECT_GT(predictUs("single", CollKind::kAllReduce, sh, 8, 128 << 10, p),
              predictUs("flat", CollKind::kAllReduce, sh, 8, 128 << 10, p));
    // Never split into channels.
    EXPECT_LT(predictUs("single", CollKind::kAllReduce, sh, b, 128 << 10, p, 2), 0);
  }
}

TEST(SingleCopy, OnlyWhereTheRanksMapEachOthersBuffersAndAtTheThreshold) {
  const ModelParams p = hostDefaults();
  CommShape sh = evenShape(4, 1, LinkClass::kShm);
  EXPECT_FALSE(singleCopyApplies(sh, size_t(1) << 30));  // not mappable
  EXPECT_LT(predictUs("single", CollKind::kAllReduce, sh, 1 << 20, 128 << 10, p), 0);
  sh.singleCopyBytes = 1000;
  EXPECT_TRUE(singleCopyApplies(sh, 1000));
  EXPECT_FALSE(singleCopyApplies(sh, 999));
  EXPECT_FALSE(singleCopyApplies(sh, 0));
  CommShape two = evenShape(4, 2, LinkClass::kShm);
  two.singleCopyBytes = 1000;
  EXPECT_FALSE(singleCopyApplies(two, 1 << 20));  // across nodes
  CommShape one = evenShape(1, 1, LinkClass::kShm);
  one.singleCopyBytes = 1000;
  EXPECT_FALSE(singleCopyApplies(one, 1 << 20));  // nobody to read
  // Not mappable: never picked, even when forced (the forced set is empty: the model decides).
  for (size_t bytes : tableSizes()) {
    const Decision d = select(tuner(4, 1, LinkClass::kShm, "single"), CollKind::kAllReduce, bytes);
    EXPECT_STRNE(d.algo->name, "single");
    EXPECT_FALSE(d.forced);
    EXPECT_STRNE(select(tuner(4, 1), CollKind::kAllReduce, bytes).algo->name, "single");
  }
  // Below the threshold: not offered, forced or not.
  for (const char* algo : {"", "single"}) {
    const Tuner t = mappedTuner(4, 1 << 20, LinkClass::kShm, algo);
    EXPECT_STRNE(select(t, CollKind::kAllReduce, (1 << 20) - 1).algo->name, "single") << algo;
    EXPECT_STREQ(select(t, CollKind::kAllReduce, 1 << 20).algo->name, "single") << algo;
  }
}

// With the default threshold the model picks the single copy at and above it on every
// one-node shape (threads or processes, a CPU per rank or ranks sharing 2 CPUs), so the
// calls that took it before it was an algorithm still do; below it never.
TEST(SingleCopy, DefaultThresholdPicksItByPrediction) {
  for (int n : {2, 3, 4, 5, 8, 16, 32}) {
    for (LinkClass c : {LinkClass::kLocal, LinkClass::kShm}) {
      for (double oversub : {1.0, std::max(1.0, n / 2.0)}) {
        for (size_t slot : {size_t(128) << 10, size_t(1) << 20}) {
          const Tuner t = mappedTuner(n, kSingleCopyDefaultBytes, c, "", oversub, slot);
          for (size_t bytes : tableSizes()) {
            for (size_t b : {bytes, bytes + 4}) {
              const Decision d = select(t, CollKind::kAllReduce, b);
              EXPECT_EQ(std::string(d.algo->name) == "single", b >= kSingleCopyDefaultBytes)
                  << "n=" << n << " " << linkClassName(c) << " oversub " << oversub << " slot " << slot
                  << " bytes " << b << ": " << d.algo->name;
              EXPECT_FALSE(d.forced);
            }
          }
        }
      }
    }
  }
}

TEST(SingleCopy, NcclAlgoForcesAndForbidsIt) {
  const size_t big = size_t(4) << 20;
  for (int n : {2, 3, 8}) {
    Decision d = select(mappedTuner(n, kSingleCopyDefaultBytes, LinkClass::kLocal, "single"), CollKind::kAllReduce, big);
    EXPECT_STREQ(d.algo->name, "single");
    EXPECT_TRUE(d.forced);
    EXPECT_EQ(d.channels, 1);
    EXPECT_STREQ(select(mappedTuner(n, kSingleCopyDefaultBytes, LinkClass::kLocal, "SINGLE"), CollKind::kAllReduce, big)
                     .algo->name,
                 "single");
    EXPECT_STREQ(select(mappedTuner(n, kSingleCopyDefaultBytes, LinkClass::kLocal, "allreduce:single"),
                        CollKind::kAllReduce, big)
                     .algo->name,
                 "single");
    // Forbidden: the choice the others leave, the same as without peer reads.
    for (const char* spec : {"^single", "ring,tree", "allreduce:^single"}) {
      const Tuner t = mappedTuner(n, kSingleCopyDefaultBytes, LinkClass::kLocal, spec);
      for (size_t bytes : tableSizes()) {
        const Decision f = select(t, CollKind::kAllReduce, bytes);
        EXPECT_STRNE(f.algo->name, "single") << spec;
        EXPECT_EQ(f.algo, selectWithoutPeerReads(t, CollKind::kAllReduce, bytes).algo) << spec;
      }
    }
    // Forcing another algorithm forbids it too.
    EXPECT_STREQ(select(mappedTuner(n, kSingleCopyDefaultBytes, LinkClass::kLocal, "ring"), CollKind::kAllReduce, big)
                     .algo->name,
                 "ring");
    // The fallback: the model's choice among the others, whatever SNCCL_ALGO forced.
    const Tuner forced = mappedTuner(n, kSingleCopyDefaultBytes, LinkClass::kLocal, "single");
    const Decision fb = selectWithoutPeerReads(forced, CollKind::kAllReduce, big);
    EXPECT_STRNE(fb.algo->name, "single");
    EXPECT_FALSE(fb.forced);
    EXPECT_EQ(fb.algo, select(mappedTuner(n, 0), CollKind::kAllReduce, big).algo);
  }
}

// SNCCL_SINGLE_COPY_BYTES below its default is the user's crossover: the single copy runs
// from there on (as before it was an algorithm) unless SNCCL_ALGO leaves it out.
TEST(SingleCopy, LoweredThresholdIsHonoured) {
  for (int n : {2, 4, 8}) {
    const Tuner t = mappedTuner(n, 4);
    EXPECT_STRNE(select(t, CollKind::kAllReduce, 2).algo->name, "single");
    for (size_t bytes : {size_t{4}, size_t{8}, size_t{68}, size_t{4096}, size_t(1) << 20})
      EXPECT_STREQ(select(t, CollKind::kAllReduce, bytes).algo->name, "single") << bytes;
    EXPECT_STRNE(select(mappedTuner(n, 4, LinkClass::kLocal, "^single"), CollKind::kAllReduce, 8).algo->name, "single");
    EXPECT_STREQ(select(mappedTuner(n, 4, LinkClass::kLocal, "flat"), CollKind::kAllReduce, 8).algo->name, "flat");
  }
}

// The TUNING table (and sn_info --model) has a column for it where it applies.
TEST(SingleCopy, TablesShowIt) {
  const std::vector<std::string> lines = decisionTable(mappedTuner(4, kSingleCopyDefaultBytes), CollKind::kAllReduce);
  ASSERT_EQ(lines.size(), tableSizes().size() + 1);
  EXPECT_NE(lines[0].find("single"), std::string::npos) << lines[0];
  bool picked = false;
  for (const std::string& l : lines) picked |= l.find("  single; ") != std::string::npos;
  EXPECT_TRUE(picked);
  EXPECT_NE(describeTuner(mappedTuner(4, kSingleCopyDefaultBytes)).find("single copy from 128K"), std::string::npos);
  for (const std::string& l : decisionTable(tuner(4, 1), CollKind::kAllReduce))
    EXPECT_EQ(l.find("single"), std::string::npos) << l;
  EXPECT_EQ(describeTuner(tuner(4, 1)).find("single copy"), std::string::npos);
}

}  // namespace
}  // namespace snccl::tuning
