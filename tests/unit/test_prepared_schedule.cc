// PreparedSchedule::zeroCopy (core/prepared_schedule.cc): which steps alone write their
// destination range (a net ring may then send from it and receive into it in place), and
// which receives it lists as receive targets, counted in the order their connection
// delivers them. A wrong "alone" would let a message land on, or leave from, memory
// another step still writes: silently wrong results, so each rule has a case here.
#include <gtest/gtest.h>

#include "collectives/algorithm.h"
#include "collectives/channels.h"
#include "core/comm.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using testing::collArgs;

Step step(Prim p, int sendPeer, int recvPeer, uint16_t dstBuf, size_t dstOff, size_t count) {
  Step s;
  s.prim = p;
  s.sendPeer = sendPeer;
  s.recvPeer = recvPeer;
  s.src = {kInputBuf, 0};
  s.dst = {dstBuf, dstOff};
  s.count = count;
  return s;
}

// Two ranks, ring AllReduce: per chunk Send, RecvReduceCopySend, Recv. The output chunks
// are each written once; the receives from the peer alternate RecvReduceCopySend / Recv,
// so the Recvs are the connection's receives 1, 3, 5, ...
TEST(PreparedSchedule, RingAllReduceWritesEachOutputChunkOnceAndTargetsItsRecvs) {
  const AlgorithmDef* ring = findAlgorithm(CollKind::kAllReduce, "ring");
  ASSERT_NE(ring, nullptr);
  PreparedSchedule p;
  ASSERT_TRUE(generateSchedule(*ring, collArgs(CollKind::kAllReduce, 0, 2, 1000, 100), {}, &p.sched).ok());
  p.analyse();
  ASSERT_EQ(p.sched.lanes.size(), 1u);
  const std::vector<Step>& steps = p.sched.lanes[0].steps;
  ASSERT_EQ(steps.size(), 15u);  // 5 chunks per block
  ASSERT_EQ(p.zeroCopy().soleWriter.size(), 1u);
  ASSERT_EQ(p.zeroCopy().soleWriter[0].size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i)
    EXPECT_EQ(p.zeroCopy().soleWriter[0][i], primWritesDst(steps[i].prim) ? 1 : 0) << "step " << i;
  ASSERT_EQ(p.recvs, (std::vector<ConnKey>{{1, 0}}));
  ASSERT_EQ(p.zeroCopy().recvTargets.size(), 1u);
  ASSERT_EQ(p.zeroCopy().recvTargets[0].size(), 5u);
  for (size_t k = 0; k < 5; ++k) {
    const ZeroCopyInfo::TargetStep& t = p.zeroCopy().recvTargets[0][k];
    EXPECT_EQ(t.index, 2 * k + 1);
    EXPECT_EQ(steps[t.step].prim, Prim::kRecv);
  }
}

// Three ranks and three channels: every channel's connection counts its own receives, and
// every Recv (the last step of each chunk) is a target of the connection it arrives on.
TEST(PreparedSchedule, EachConnectionCountsItsOwnReceives) {
  const AlgorithmDef* ring = findAlgorithm(CollKind::kAllReduce, "ring");
  ASSERT_NE(ring, nullptr);
  CollArgs a = collArgs(CollKind::kAllReduce, 1, 3, 3001, 64);
  a.channels = 3;
  PreparedSchedule p;
  ASSERT_TRUE(generateSchedule(*ring, a, {}, &p.sched).ok());
  p.analyse();
  ASSERT_EQ(p.recvs.size(), 3u);
  size_t recvSteps = 0;
  for (size_t l = 0; l < p.sched.lanes.size(); ++l)
    for (size_t i = 0; i < p.sched.lanes[l].steps.size(); ++i) {
      const Step& st = p.sched.lanes[l].steps[i];
      if (primWritesDst(st.prim)) {
        EXPECT_EQ(p.zeroCopy().soleWriter[l][i], 1) << "lane " << l << " step " << i;
      }
      if (st.prim == Prim::kRecv) ++recvSteps;
    }
  size_t targets = 0;
  for (size_t c = 0; c < p.recvs.size(); ++c) {
    uint32_t index = 0;  // the connection's receives, in lane order
    size_t next = 0;
    for (size_t l = 0; l < p.sched.lanes.size(); ++l)
      for (size_t i = 0; i < p.sched.lanes[l].steps.size(); ++i) {
        const Step& st = p.sched.lanes[l].steps[i];
        if (!primReceives(st.prim) || ConnKey{st.recvPeer, st.channel} != p.recvs[c]) continue;
        if (st.prim == Prim::kRecv) {
          ASSERT_LT(next, p.zeroCopy().recvTargets[c].size());
          EXPECT_EQ(p.zeroCopy().recvTargets[c][next].index, index);
          EXPECT_EQ(p.zeroCopy().recvTargets[c][next].lane, l);
          EXPECT_EQ(p.zeroCopy().recvTargets[c][next].step, i);
          ++next;
        }
        ++index;
      }
    EXPECT_EQ(next, p.zeroCopy().recvTargets[c].size());
    targets += next;
  }
  EXPECT_EQ(targets, recvSteps);
  EXPECT_GT(targets, 0u);
}

// Writes that overlap, in the same lane or another, or that read what they write, are
// not alone, nor are writes inside a longer one that an earlier, shorter one ends before;
// ranges that only touch are alone; other buffers do not interfere; a Recv into scratch
// is alone but not a target (only the output is); empty steps write nothing.
TEST(PreparedSchedule, OverlappingWritesAreNotAlone) {
  PreparedSchedule p;
  p.sched.bufs = {{BufRole::kInput, 100}, {BufRole::kOutput, 100}, {BufRole::kScratch, 100}};
  p.sched.lanes.resize(2);
  std::vector<Step>& a = p.sched.lanes[0].steps;
  std::vector<Step>& b = p.sched.lanes[1].steps;
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 0, 10));          // a0: overlaps b0
  b.push_back(step(Prim::kCopy, -1, -1, kOutputBuf, 5, 10));         // b0
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 20, 10));         // a1: touches a2 only
  a.push_back(step(Prim::kRecvCopySend, 2, 1, kOutputBuf, 30, 10));  // a2
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 50, 10));         // a3: b1 reduces into it
  b.push_back(step(Prim::kLocalReduce, -1, -1, kOutputBuf, 55, 1));  // b1
  a.push_back(step(Prim::kRecv, -1, 1, kScratchBuf, 0, 10));         // a4: scratch, same offsets as a0
  a.push_back(step(Prim::kSend, 2, -1, kOutputBuf, 0, 100));         // a5: writes nothing
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 70, 0));          // a6: empty
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 80, 20));         // a7: alone, a target
  b.push_back(step(Prim::kCopy, -1, -1, kOutputBuf, 100, 100));      // b2: spans a8 and a9
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 110, 10));        // a8: inside b2
  a.push_back(step(Prim::kRecv, -1, 1, kOutputBuf, 150, 10));        // a9: inside b2, after a8
  p.analyse();
  EXPECT_EQ(p.zeroCopy().soleWriter[0], (std::vector<uint8_t>{0, 1, 1, 0, 1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(p.zeroCopy().soleWriter[1], (std::vector<uint8_t>{0, 0, 0}));
  ASSERT_EQ(p.recvs, (std::vector<ConnKey>{{1, 0}}));
  ASSERT_EQ(p.sends, (std::vector<ConnKey>{{2, 0}}));
  ASSERT_EQ(p.zeroCopy().recvTargets.size(), 1u);
  std::vector<uint32_t> indices, steps;
  for (const ZeroCopyInfo::TargetStep& t : p.zeroCopy().recvTargets[0]) {
    EXPECT_EQ(t.lane, 0u);
    indices.push_back(t.index);
    steps.push_back(t.step);
  }
  // Receives on the connection: a0 a1 a2 a3 a4 a6 a7 a8 a9 = indices 0..8.
  EXPECT_EQ(steps, (std::vector<uint32_t>{1, 7}));
  EXPECT_EQ(indices, (std::vector<uint32_t>{1, 6}));
}

}  // namespace
}  // namespace snccl
