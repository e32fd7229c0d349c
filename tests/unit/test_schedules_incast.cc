// Incast control of AlltoAll and Gather (collectives/p2p/incast.h): the granted schedules
// move every element where it belongs, without deadlock, for every rank count, limit,
// count, chunk, root and placement, even with one slot per connection; and they keep what
// the grants promise: a rank receives data on at most `incastSenders` lanes, and every data
// send waits first for its receiver's grant.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "collectives/algorithm.h"
#include "collectives/checker.h"
#include "collectives/p2p/incast.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using testing::collArgs;

std::string caseName(CollKind k, int n, int limit, size_t count, size_t chunk, int root, bool inPlace, int slots) {
  return std::string(collName(k)) + " n=" + std::to_string(n) + " limit=" + std::to_string(limit) +
         " count=" + std::to_string(count) + " chunk=" + std::to_string(chunk) + " root=" + std::to_string(root) +
         (inPlace ? " in-place" : "") + " slots=" + std::to_string(slots);
}

TEST(IncastSchedules, GrantedSchedulesAreCorrect) {
  int cases = 0;
  for (CollKind k : {CollKind::kAlltoAll, CollKind::kGather}) {
    const AlgorithmDef* algo = defaultAlgorithm(k);
    ASSERT_NE(algo, nullptr);
    for (int n : {1, 2, 3, 4, 5, 7, 8, 16}) {
      for (int limit : {1, 2, 3, n - 2}) {
        if (limit < 1) continue;
        for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(100)}) {
          for (size_t chunk : {size_t(1), size_t(3), size_t(64)}) {
            for (int root : {0, n / 2, n - 1}) {
              if (k == CollKind::kAlltoAll && root != 0) continue;
              for (bool inPlace : {false, true}) {
                for (int slots : {1, 8}) {
                  CollArgs a = collArgs(k, 0, n, count, chunk, root, inPlace);
                  a.incastSenders = limit;
                  CheckOptions opts;
                  opts.slots = slots;
                  const Status st = checkAlgorithm(*algo, a, {}, opts);
                  ASSERT_TRUE(st.ok()) << caseName(k, n, limit, count, chunk, root, inPlace, slots) << ": "
                                       << st.message();
                  ++cases;
                }
              }
            }
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 1000);
}

// What one rank's schedule promises: data arrives on at most `limit` lanes, and each data
// send (channel 0) is preceded in its lane by the grant (channel 1) of the same peer.
void expectGrantsBound(const Schedule& s, int limit, const std::string& what) {
  size_t receivingLanes = 0;
  for (const Lane& lane : s.lanes) {
    std::set<int> granted;
    bool receives = false;
    for (const Step& st : lane.steps) {
      if (st.channel == sched::kGrantChannel) {
        EXPECT_EQ(st.count, 1u) << what;
        if (st.prim == Prim::kRecv) granted.insert(st.recvPeer);
        continue;
      }
      if (primReceives(st.prim)) receives = true;
      if (primSends(st.prim)) {
        EXPECT_TRUE(granted.count(st.sendPeer)) << what << ": a send to rank " << st.sendPeer << " without its grant";
      }
    }
    receivingLanes += receives;
  }
  EXPECT_LE(receivingLanes, size_t(limit)) << what;
}

TEST(IncastSchedules, ARankReceivesFromAtMostTheLimit) {
  for (CollKind k : {CollKind::kAlltoAll, CollKind::kGather}) {
    const AlgorithmDef* algo = defaultAlgorithm(k);
    for (int n : {3, 5, 8}) {
      for (int limit : {1, 2}) {
        if (limit >= n - 1) continue;  // no fewer lanes than senders: nothing to limit
        for (bool inPlace : {false, true}) {
          for (int r = 0; r < n; ++r) {
            CollArgs a = collArgs(k, r, n, 10, 3, /*root=*/1, inPlace);
            a.incastSenders = limit;
            Schedule s;
            ASSERT_TRUE(algo->generate(a, {}, &s).ok());
            expectGrantsBound(s, limit, caseName(k, n, limit, 10, 3, 1, inPlace, 0) + " rank " + std::to_string(r));
          }
        }
      }
    }
  }
}

TEST(IncastSchedules, NoLimitOrALimitAboveThePeersLeavesTheSchedulesAlone) {
  for (int limit : {0, 4, 9}) {
    CollArgs a = collArgs(CollKind::kAlltoAll, 2, 5, 10, 3);
    a.incastSenders = limit;
    Schedule s;
    ASSERT_TRUE(defaultAlgorithm(CollKind::kAlltoAll)->generate(a, {}, &s).ok());
    EXPECT_EQ(s.lanes.size(), 9u) << "limit " << limit << ": a send and a receive lane per peer, and the copy";
    for (const Lane& lane : s.lanes)
      for (const Step& st : lane.steps) EXPECT_EQ(st.channel, 0) << "limit " << limit;
  }
  // Under the limit the receives share lanes: 2 receive lanes, 4 send lanes, the copy.
  CollArgs a = collArgs(CollKind::kAlltoAll, 2, 5, 10, 3);
  a.incastSenders = 2;
  Schedule s;
  ASSERT_TRUE(defaultAlgorithm(CollKind::kAlltoAll)->generate(a, {}, &s).ok());
  EXPECT_EQ(s.lanes.size(), 7u);
}

}  // namespace
}  // namespace snccl
