// Channels (collectives/channels.h): every splittable algorithm, split into 2..16 parts,
// through the symbolic checker (odd rank counts, uneven nodes for hier, zero, tiny and
// unaligned counts, in- and out-of-place, every root kind); the part boundaries; that
// each part keeps to its own channel's connections; and that the checker tells channels
// apart (two lanes may share a peer on different channels, not on one).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/channels.h"
#include "collectives/checker.h"
#include "collectives/sched_util.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using testing::collArgs;

bool rooted(CollKind k) { return k == CollKind::kBroadcast || k == CollKind::kReduce; }

TEST(Channels, WhichCollectivesSplit) {
  for (CollKind k : {CollKind::kAllReduce, CollKind::kBroadcast, CollKind::kReduce, CollKind::kAllGather,
                     CollKind::kReduceScatter})
    EXPECT_TRUE(channelSplittable(k)) << collName(k);
  for (CollKind k : {CollKind::kAlltoAll, CollKind::kGather, CollKind::kScatter, CollKind::kSendRecv})
    EXPECT_FALSE(channelSplittable(k)) << collName(k);
  CollArgs a = collArgs(CollKind::kAllReduce, 0, 4, 1000, 64);
  a.channels = 4;
  EXPECT_EQ(effectiveChannels(a), 4);
  a.channels = 100;
  EXPECT_EQ(effectiveChannels(a), kMaxChannels);
  a.count = 3;  // at most one channel per element
  EXPECT_EQ(effectiveChannels(a), 3);
  a.count = 0;
  EXPECT_EQ(effectiveChannels(a), 1);
  a = collArgs(CollKind::kAlltoAll, 0, 4, 1000, 64);
  a.channels = 4;
  EXPECT_EQ(effectiveChannels(a), 1);
}

TEST(Channels, PartsTileTheBlockInWholeVectors) {
  for (size_t count : {size_t(2), size_t(5), size_t(16), size_t(47), size_t(1000), size_t(1 << 20) + 3}) {
    for (int parts = 1; parts <= kMaxChannels; ++parts) {
      if (size_t(parts) > count) continue;
      EXPECT_EQ(channelPartBegin(count, parts, 0), 0u);
      EXPECT_EQ(channelPartBegin(count, parts, parts), count);
      for (int c = 0; c < parts; ++c) {
        const size_t lo = channelPartBegin(count, parts, c), hi = channelPartBegin(count, parts, c + 1);
        EXPECT_LT(lo, hi) << "count " << count << " parts " << parts << " part " << c << " is empty";
        if (count >= size_t(16 * parts) && c + 1 < parts) {
          EXPECT_EQ((hi - lo) % 16, 0u);
        }
      }
    }
  }
}

// Every step of part c runs on channel c, touches only part c's elements of the user
// buffers, and the lanes of different channels never share a step's connection.
TEST(Channels, EachPartKeepsToItsChannel) {
  const AlgorithmDef* ring = findAlgorithm(CollKind::kAllReduce, "ring");
  ASSERT_NE(ring, nullptr);
  CollArgs a = collArgs(CollKind::kAllReduce, 1, 4, 1000, 64);
  a.channels = 3;
  Schedule s;
  ASSERT_TRUE(generateSchedule(*ring, a, {}, &s).ok());
  ASSERT_EQ(s.bufs.size(), 2u);
  EXPECT_EQ(s.bufs[kInputBuf].elems, 1000u);
  EXPECT_EQ(s.bufs[kOutputBuf].elems, 1000u);
  std::set<int> seen;
  for (const Lane& lane : s.lanes) {
    ASSERT_FALSE(lane.steps.empty());
    const int ch = lane.steps[0].channel;
    seen.insert(ch);
    const size_t lo = channelPartBegin(1000, 3, ch), hi = channelPartBegin(1000, 3, ch + 1);
    for (const Step& st : lane.steps) {
      EXPECT_EQ(st.channel, ch) << "a lane mixes channels";
      if (sched::primReadsSrc(st.prim)) {
        EXPECT_GE(st.src.offset, lo);
        EXPECT_LE(st.src.offset + st.count, hi);
      }
      if (sched::primWritesDst(st.prim)) {
        EXPECT_GE(st.dst.offset, lo);
        EXPECT_LE(st.dst.offset + st.count, hi);
      }
    }
  }
  EXPECT_EQ(seen, (std::set<int>{0, 1, 2}));
  // One channel: the generator's own schedule, untouched.
  Schedule one, direct;
  a.channels = 1;
  ASSERT_TRUE(generateSchedule(*ring, a, {}, &one).ok());
  ASSERT_TRUE(ring->generate(a, {}, &direct).ok());
  ASSERT_EQ(one.lanes.size(), direct.lanes.size());
  for (size_t l = 0; l < one.lanes.size(); ++l) EXPECT_EQ(one.lanes[l].steps.size(), direct.lanes[l].steps.size());
}

// AllGather's output and ReduceScatter's input are one block per rank: part c of block b
// lands at b * count + begin(c).
TEST(Channels, BlockedBuffersMapPerBlock) {
  const AlgorithmDef* ag = defaultAlgorithm(CollKind::kAllGather);
  CollArgs a = collArgs(CollKind::kAllGather, 0, 3, 100, 1000);
  a.channels = 2;
  Schedule s;
  ASSERT_TRUE(generateSchedule(*ag, a, {}, &s).ok());
  EXPECT_EQ(s.bufs[kInputBuf].elems, 100u);
  EXPECT_EQ(s.bufs[kOutputBuf].elems, 300u);
  const size_t mid = channelPartBegin(100, 2, 1);
  for (const Lane& lane : s.lanes)
    for (const Step& st : lane.steps)
      if (sched::primWritesDst(st.prim) && st.dst.buf == kOutputBuf) {
        const size_t within = st.dst.offset % 100;
        if (st.channel == 0) {
          EXPECT_LE(within + st.count, mid);
        } else {
          EXPECT_GE(within, mid);
        }
      }
}

struct SplitCase {
  int n;
  size_t count;
  size_t chunk;
  int channels;
};

// The symbolic checker on split schedules: results exact, no deadlock, no cross-channel
// message, no lane conflict. Hier also on uneven nodes.
TEST(Channels, EveryAlgorithmSplitsCorrectly) {
  std::vector<SplitCase> cases;
  for (int n : {1, 2, 3, 5, 8})
    for (size_t count : {size_t(0), size_t(1), size_t(2), size_t(3), size_t(17), size_t(100), size_t(1023)})
      for (size_t chunk : {size_t(1), size_t(5), size_t(64)})
        for (int ch : {2, 3, 4, 16}) {
          if (chunk == 1 && count > 100) continue;  // bounded work
          cases.push_back({n, count, chunk, ch});
        }
  int checked = 0;
  for (const AlgorithmDef& algo : algorithms()) {
    if (!channelSplittable(algo.coll)) continue;
    for (const SplitCase& c : cases) {
      if (algo.maxRanks != 0 && c.n > algo.maxRanks) continue;
      std::vector<ChannelPlan> plans(1);
      if (std::string(algo.family) == "hierarchical" && c.n >= 3) {
        ChannelPlan uneven;  // nodes of 2, 1, 2, ... ranks
        for (int r = 0; r < c.n; ++r) uneven.hosts.push_back(uint64_t(r * 2 / 3) + 1);
        plans.push_back(uneven);
      }
      std::vector<int> roots = {0};
      if (rooted(algo.coll)) roots = {0, c.n - 1};
      for (const ChannelPlan& plan : plans)
        for (int root : roots)
          for (bool inPlace : {false, true}) {
            CollArgs a = collArgs(algo.coll, 0, c.n, c.count, c.chunk, root, inPlace);
            a.channels = c.channels;
            Status st = checkAlgorithm(algo, a, plan);
            ASSERT_TRUE(st.ok()) << algo.name << " " << collName(algo.coll) << " n=" << c.n << " count=" << c.count
                                 << " chunk=" << c.chunk << " channels=" << c.channels << " root=" << root
                                 << (inPlace ? " in-place" : "") << (plan.hosts.empty() ? "" : " uneven nodes")
                                 << ": " << st.message();
            ++checked;
          }
    }
  }
  EXPECT_GT(checked, 1000);
}

// The checker keeps one FIFO per (peer, channel, direction): two lanes talking to one
// peer are fine on different channels and an error on the same one; a message sent on
// channel 1 is not received from channel 0.
TEST(Channels, CheckerTellsChannelsApart) {
  auto gen = [](int chA, int chB, int recvCh) {
    return [=](int r, Schedule* out) {
      out->clear();
      out->coll = CollKind::kAlltoAll;
      out->bufs = {{BufRole::kInput, 4}, {BufRole::kOutput, 4}};
      out->lanes.resize(3);
      const int peer = 1 - r;
      Step s0{Prim::kSend, false, peer, -1, {0, size_t(peer) * 2}, {}, 1, uint8_t(chA)};
      Step s1{Prim::kSend, false, peer, -1, {0, size_t(peer) * 2 + 1}, {}, 1, uint8_t(chB)};
      out->lanes[0].steps.push_back(s0);
      out->lanes[1].steps.push_back(s1);
      out->lanes[2].steps.push_back(Step{Prim::kRecv, false, -1, peer, {}, {1, size_t(peer) * 2}, 1, uint8_t(chA)});
      out->lanes[2].steps.push_back(
          Step{Prim::kRecv, false, -1, peer, {}, {1, size_t(peer) * 2 + 1}, 1, uint8_t(recvCh)});
      out->lanes[2].steps.push_back(Step{Prim::kCopy, false, -1, -1, {0, size_t(r) * 2}, {1, size_t(r) * 2}, 2});
      return OkStatus();
    };
  };
  CollArgs a = collArgs(CollKind::kAlltoAll, 0, 2, 2, 4);
  EXPECT_TRUE(checkCollective(a, gen(0, 1, 1)).ok());
  Status same = checkCollective(a, gen(0, 0, 0));
  EXPECT_FALSE(same.ok());
  EXPECT_NE(same.message().find("on channel 0"), std::string::npos) << same.message();
  Status crossed = checkCollective(a, gen(0, 1, 0));
  EXPECT_FALSE(crossed.ok()) << "a message on channel 1 was taken from channel 0";
}

}  // namespace
}  // namespace snccl
