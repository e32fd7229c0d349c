// The single-copy AllReduce's schedule ("single": one PeerFold step per rank) and what the
// symbolic checker proves and rejects about PeerFold steps.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "collectives/algorithm.h"
#include "collectives/channels.h"
#include "collectives/checker.h"
#include "collectives/sched_util.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using namespace sched;
using testing::collArgs;

const AlgorithmDef& single() {
  const AlgorithmDef* a = findAlgorithm(CollKind::kAllReduce, "single");
  EXPECT_NE(a, nullptr);
  return *a;
}

bool mentions(const Status& st, const std::string& what) { return st.message().find(what) != std::string::npos; }

TEST(SingleCopySchedule, RegisteredAsAnAlgorithmThatReadsPeers) {
  const AlgorithmDef& a = single();
  EXPECT_STREQ(a.family, "mapped");
  EXPECT_TRUE(a.readsPeers);
  for (const AlgorithmDef& b : algorithms())
    if (&b != &a) {
      EXPECT_FALSE(b.readsPeers) << b.name;
    }
  EXPECT_STREQ(primName(Prim::kPeerFold), "PeerFold");
  EXPECT_FALSE(primReceives(Prim::kPeerFold));
  EXPECT_FALSE(primSends(Prim::kPeerFold));
  EXPECT_TRUE(primReadsSrc(Prim::kPeerFold));
  EXPECT_TRUE(primWritesDst(Prim::kPeerFold));
}

// One PeerFold per rank over blocks of whole 16-element groups; the blocks tile the count.
TEST(SingleCopySchedule, OneFoldPerRankTilingTheCount) {
  for (int n : {2, 3, 5, 8}) {
    for (size_t count : {size_t{1}, size_t{17}, size_t{100}, size_t{1000003}}) {
      size_t next = 0;
      for (int r = 0; r < n; ++r) {
        Schedule s;
        ASSERT_TRUE(single().generate(collArgs(CollKind::kAllReduce, r, n, count, 64), {}, &s).ok());
        ASSERT_EQ(s.lanes.size(), 1u);
        ASSERT_EQ(s.lanes[0].steps.size(), 1u);
        const Step& st = s.lanes[0].steps[0];
        EXPECT_EQ(st.prim, Prim::kPeerFold);
        EXPECT_TRUE(st.final);
        EXPECT_EQ(st.src.buf, kInputBuf);
        EXPECT_EQ(st.dst.buf, kOutputBuf);
        EXPECT_EQ(st.src.offset, st.dst.offset);
        EXPECT_EQ(st.src.offset, next) << "n=" << n << " count=" << count << " rank " << r;
        if (st.src.offset + st.count < count) {
          EXPECT_EQ(st.count % 16, 0u);
        }
        next = st.src.offset + st.count;
      }
      EXPECT_EQ(next, count);
    }
  }
  // No elements: no lane at all (nothing to fold, and the selector never offers it).
  Schedule s;
  ASSERT_TRUE(single().generate(collArgs(CollKind::kAllReduce, 0, 4, 0, 64), {}, &s).ok());
  EXPECT_TRUE(s.lanes.empty());
}

// In and out of place, odd rank counts, counts not divisible by the ranks (and smaller
// than them: ranks with empty blocks), zero count, every result the fold of all inputs.
TEST(SingleCopySchedule, CheckerProvesEveryOutputIsTheFoldOfAllInputs) {
  for (int n : {1, 2, 3, 4, 5, 7, 16, 33}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{2}, size_t{15}, size_t{16}, size_t{17},
                         size_t(n) * 16 + 5, size_t{1023}}) {
      for (bool inPlace : {false, true}) {
        CollArgs a = collArgs(CollKind::kAllReduce, 0, n, count, 7, 0, inPlace);
        Status st = checkAlgorithm(single(), a);
        EXPECT_TRUE(st.ok()) << st.message();
      }
    }
  }
}

// A generator like single's with `alter` applied to rank r's step.
RankGenerator altered(const CollArgs& a, std::function<void(int r, Schedule* s)> alter) {
  return [a, alter](int r, Schedule* out) {
    CollArgs x = a;
    x.rank = r;
    Status st = generateSchedule(single(), x, {}, out);
    if (st.ok()) alter(r, out);
    return st;
  };
}

TEST(SingleCopySchedule, CheckerRejectsBrokenFolds) {
  const CollArgs out = collArgs(CollKind::kAllReduce, 0, 3, 40, 8);
  const CollArgs in = collArgs(CollKind::kAllReduce, 0, 3, 40, 8, 0, true);
  // Every rank folds everything: the folds of one barrier write the same elements.
  Status st = checkCollective(out, altered(out, [](int, Schedule* s) {
                                Step& f = s->lanes[0].steps[0];
                                f.src.offset = f.dst.offset = 0;
                                f.count = 40;
                              }));
  EXPECT_TRUE(mentions(st, "PeerFold of the same barrier writes too")) << st.message();
  // A rank that does not take part: the others wait in the barrier forever.
  st = checkCollective(out, altered(out, [](int r, Schedule* s) {
                         if (r == 1) s->lanes[0].steps[0] = mkCopy(inRef(16), outRef(16), 16, false);
                       }));
  EXPECT_TRUE(mentions(st, "deadlock") && mentions(st, "PeerFold barrier")) << st.message();
  // Rank 0 folds nothing: its block keeps whatever the outputs held.
  st = checkCollective(out, altered(out, [](int r, Schedule* s) {
                         if (r == 0) s->lanes[0].steps[0].count = 0;
                       }));
  EXPECT_TRUE(mentions(st, "output elements are wrong")) << st.message();
  // Not final: Avg's divide (the post-processing) would never be applied.
  st = checkCollective(out, altered(out, [](int, Schedule* s) { s->lanes[0].steps[0].final = false; }));
  EXPECT_TRUE(mentions(st, "output elements are wrong")) << st.message();
  // In place, rank r writing the block of rank r+1 overwrites an input that rank r+1 reads
  // in the same barrier.
  st = checkCollective(in, altered(in, [](int r, Schedule* s) {
                         Step& f = s->lanes[0].steps[0];
                         f.count = 8;
                         f.dst.offset = size_t((r + 1) % 3) * 16;
                       }));
  EXPECT_TRUE(mentions(st, "reads Input[") && mentions(st, "PeerFold of the same barrier writes")) << st.message();
  // The same out of place is no race (inputs are not written), but the outputs are wrong.
  st = checkCollective(out, altered(out, [](int r, Schedule* s) {
                         Step& f = s->lanes[0].steps[0];
                         f.count = 8;
                         f.dst.offset = size_t((r + 1) % 3) * 16;
                       }));
  EXPECT_TRUE(mentions(st, "output elements are wrong")) << st.message();
  // Outside the buffers.
  st = checkCollective(out, altered(out, [](int r, Schedule* s) {
                         if (r == 2) s->lanes[0].steps[0].count = 9;
                       }));
  EXPECT_TRUE(mentions(st, "out of bounds")) << st.message();
  // A second lane: the barrier orders only the fold's own lane.
  st = checkCollective(out, altered(out, [](int r, Schedule* s) {
                         if (r == 0) s->lanes.push_back(Lane{{mkCopy(inRef(39), outRef(39), 1, false)}});
                       }));
  EXPECT_TRUE(mentions(st, "PeerFold in a schedule of 2 lanes")) << st.message();
  // Two folds of one rank in one barrier.
  st = checkCollective(out, altered(out, [](int r, Schedule* s) {
                         if (r == 0) s->lanes[0].steps.push_back(s->lanes[0].steps[0]);
                       }));
  EXPECT_FALSE(st.ok());
}

// The single copy is never split into channels: one PeerFold whatever args.channels says.
TEST(SingleCopySchedule, NeverSplitIntoChannels) {
  CollArgs a = collArgs(CollKind::kAllReduce, 1, 4, 4096, 64);
  a.channels = 4;
  Schedule s;
  ASSERT_TRUE(generateSchedule(single(), a, {}, &s).ok());
  ASSERT_EQ(s.lanes.size(), 1u);
  EXPECT_EQ(s.lanes[0].steps.size(), 1u);
  EXPECT_TRUE(checkAlgorithm(single(), a).ok());
}

}  // namespace
}  // namespace snccl
