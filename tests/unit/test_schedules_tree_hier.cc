// Tree and hierarchical schedule generators beyond the sampled matrix of
// test_schedules.cc (which runs every registered algorithm up to 1024 ranks): the double
// binary tree's shape, tree and hier at odd and large rank counts (up to 8192) with the
// smallest connection (2 slots), node layouts for hier (uneven nodes: test_schedules_small.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/checker.h"
#include "collectives/tree/btree.h"
#include "sched_test_args.h"

namespace snccl {
namespace {

using testing::collArgs;

// ---- Tree algorithms: shapes and large or odd rank counts beyond the sampled matrix.

TEST(Trees, DoubleBinaryTreeShapes) {
  std::vector<int> sizes;
  for (int n = 1; n <= 300; ++n) sizes.push_back(n);
  for (int n : {1000, 1023, 1025, 4095, 4096, 8191, 8192}) sizes.push_back(n);
  for (int n : sizes) {
    for (int tree = 0; tree < 2; ++tree) {
      std::vector<sched::TreeNode> nodes;
      for (int r = 0; r < n; ++r) nodes.push_back(sched::dtreeNode(n, r, tree));
      int roots = 0, leaves = 0;
      for (int r = 0; r < n; ++r) {
        const sched::TreeNode& t = nodes[static_cast<size_t>(r)];
        ASSERT_LE(t.depth, sched::treeMaxDepth(n)) << "n=" << n << " tree " << tree << " rank " << r;
        leaves += t.nchildren == 0;
        if (t.parent < 0) {
          ++roots;
          ASSERT_EQ(t.depth, 0);
          continue;
        }
        const sched::TreeNode& p = nodes[static_cast<size_t>(t.parent)];
        ASSERT_EQ(t.depth, p.depth + 1) << "n=" << n << " tree " << tree << " rank " << r;
        ASSERT_TRUE(p.children[0] == r || (p.nchildren == 2 && p.children[1] == r))
            << "n=" << n << " tree " << tree << ": rank " << r << " is not a child of its parent " << t.parent;
      }
      ASSERT_EQ(roots, 1) << "n=" << n;
      // Every child lists this rank as its parent (with one root, the links form a tree).
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < nodes[static_cast<size_t>(r)].nchildren; ++c)
          ASSERT_EQ(nodes[static_cast<size_t>(nodes[static_cast<size_t>(r)].children[c])].parent, r);
      if (n >= 4) {
        EXPECT_GE(leaves, n / 2 - 1) << "n=" << n;  // balanced: about half are leaves
      }
    }
    // The complementary trees: with n >= 4, a rank is an inner node of at most one tree
    // when n is even (NCCL's property), and of both only rarely when n is odd.
    if (n >= 4 && n % 2 == 0) {
      for (int r = 0; r < n; ++r)
        EXPECT_TRUE(sched::dtreeNode(n, r, 0).nchildren == 0 || sched::dtreeNode(n, r, 1).nchildren == 0 ||
                    sched::dtreeNode(n, r, 0).parent < 0 || sched::dtreeNode(n, r, 1).parent < 0)
            << "n=" << n << " rank " << r;
    }
  }
}

TEST(Trees, AllReduceAtManyRankCounts) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "tree");
  ASSERT_NE(algo, nullptr);
  EXPECT_STREQ(algo->family, "tree");
  const auto t0 = std::chrono::steady_clock::now();
  size_t cases = 0;
  for (int n : {1, 2, 3, 5, 6, 7, 8, 9, 16, 33, 64, 100, 1000, 4096, 8192}) {
    std::vector<size_t> counts = {0, 1, 2, 7, 13, 1001};
    if (n >= 1000) counts = {1, 3, 10};
    for (size_t count : counts) {
      for (size_t chunk : {size_t{1}, size_t{4}, size_t{64}}) {
        if (n >= 1000 && chunk == 64) continue;
        for (int slots : {2, 8}) {
          for (bool inPlace : {false, true}) {
            if (n >= 4096 && (inPlace || slots == 8)) continue;  // the largest ones once each
            CollArgs a = collArgs(CollKind::kAllReduce, 0, n, count, chunk, 0, inPlace);
            CheckOptions opts;
            opts.slots = slots;
            Status st = checkAlgorithm(*algo, a, {}, opts);
            ASSERT_TRUE(st.ok()) << "tree AllReduce n=" << n << " count=" << count << " chunk=" << chunk
                                 << " slots=" << slots << (inPlace ? " in-place" : "") << ": " << st.message();
            ++cases;
          }
        }
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("tree AllReduce: %zu cases up to 8192 ranks, %.2f s\n", cases, s);
}

TEST(Trees, BroadcastAndReduceAtManyRankCounts) {
  for (CollKind k : {CollKind::kBroadcast, CollKind::kReduce}) {
    const AlgorithmDef* algo = findAlgorithm(k, "tree");
    ASSERT_NE(algo, nullptr) << collName(k);
    size_t cases = 0;
    for (int n : {1, 2, 3, 5, 6, 7, 8, 16, 33, 64, 1000, 8192}) {
      for (int root : {0, n / 2, n - 1}) {
        for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}}) {
          for (size_t chunk : {size_t{1}, size_t{64}}) {
            for (bool inPlace : {false, true}) {
              if (n >= 1000 && (count > 7 || chunk == 1 || inPlace)) continue;
              CollArgs a = collArgs(k, 0, n, count, chunk, root, inPlace);
              CheckOptions opts;
              opts.slots = 2;
              Status st = checkAlgorithm(*algo, a, {}, opts);
              ASSERT_TRUE(st.ok()) << "tree " << collName(k) << " n=" << n << " root=" << root << " count=" << count
                                   << " chunk=" << chunk << (inPlace ? " in-place" : "") << ": " << st.message();
              ++cases;
            }
          }
        }
      }
    }
    std::printf("tree %s: %zu cases up to 8192 ranks\n", collName(k), cases);
  }
}

TEST(Trees, AllReducePipelinesAcrossLevels) {
  // A leaf must not wait for a chunk's round trip before sending the next one: a leaf at
  // depth d sends chunks 0..d before it receives chunk 0 back (a round trip of 2d hops,
  // with a new chunk entering the tree every other hop).
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "tree");
  ASSERT_NE(algo, nullptr);
  const int n = 16;
  Schedule s;
  for (int r = 0; r < n; ++r) {
    const sched::TreeNode t0 = sched::dtreeNode(n, r, 0);
    if (t0.nchildren != 0 || sched::dtreeNode(n, r, 1).nchildren != 0) continue;
    ASSERT_TRUE(false) << "rank " << r << " is a leaf of both trees";
  }
  // Rank 1 is a leaf at the deepest level (4) of tree 0.
  ASSERT_TRUE(algo->generate(collArgs(CollKind::kAllReduce, 1, n, 64 * 4, 4), {}, &s).ok());
  ASSERT_EQ(s.lanes.size(), 1u);
  size_t sendsToParentBeforeFirstRecv = 0;
  const int parent = sched::dtreeNode(n, 1, 0).parent;
  for (const Step& st : s.lanes[0].steps) {
    if (st.prim == Prim::kRecv && st.recvPeer == parent) break;
    sendsToParentBeforeFirstRecv += st.prim == Prim::kSend && st.sendPeer == parent;
  }
  EXPECT_EQ(sendsToParentBeforeFirstRecv, 4u + 1u);
}

// ---- Hierarchical AllReduce: nodes described by ChannelPlan::hosts.

// n = nodes * perNode ranks; contiguous: node of r = r / perNode, else r % nodes.
ChannelPlan nodesPlan(int nodes, int perNode, bool contiguous) {
  ChannelPlan plan;
  for (int r = 0; r < nodes * perNode; ++r)
    plan.hosts.push_back(1000 + static_cast<uint64_t>(contiguous ? r / perNode : r % nodes));
  return plan;
}

TEST(Hier, EvenNodesAtManyShapes) {
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "hier");
  ASSERT_NE(algo, nullptr);
  EXPECT_STREQ(algo->family, "hierarchical");
  const auto t0 = std::chrono::steady_clock::now();
  size_t cases = 0;
  int most = 0;
  const std::pair<int, int> shapes[] = {{1, 1}, {1, 2}, {1, 5}, {2, 1}, {3, 1}, {2, 2}, {2, 3}, {3, 2}, {4, 4},
                                        {5, 3}, {3, 5}, {7, 2}, {8, 8}, {2, 500}, {125, 8}, {16, 64}, {64, 16},
                                        {128, 64}};
  for (auto [nodes, perNode] : shapes) {
#ifdef SNCCL_TEST_SANITIZED
    // Under a sanitizer one shape of a thousand ranks or more: they run the same code.
    if (nodes * perNode >= 1000 && !(nodes == 16 && perNode == 64)) continue;
#endif
    const int n = nodes * perNode;
    most = std::max(most, n);
    std::vector<size_t> counts = {0, 1, 7, 13, static_cast<size_t>(perNode) * 3 + 1, 1001};
    if (n >= 1000) counts = {1, static_cast<size_t>(perNode) * 3 + 1, n >= 4096 ? 7 : static_cast<size_t>(n) + 5};
    for (size_t count : counts) {
      for (size_t chunk : {size_t{1}, size_t{4}, size_t{64}}) {
        if (n >= 1000 && chunk != 4) continue;
        for (int slots : {2, 8}) {
          for (bool inPlace : {false, true}) {
            const bool contiguous = (count + chunk) % 2 == 0;
            if (n >= 1000 && (inPlace == contiguous || (n > 1024 && slots == 8))) continue;
            CollArgs a = collArgs(CollKind::kAllReduce, 0, n, count, chunk, 0, inPlace);
            CheckOptions opts;
            opts.slots = slots;
            Status st = checkAlgorithm(*algo, a, nodesPlan(nodes, perNode, contiguous), opts);
            ASSERT_TRUE(st.ok()) << "hier AllReduce " << nodes << " nodes x " << perNode << " count=" << count
                                 << " chunk=" << chunk << " slots=" << slots << (inPlace ? " in-place" : "")
                                 << (contiguous ? "" : " interleaved") << ": " << st.message();
            ++cases;
          }
        }
      }
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("hier AllReduce: %zu cases up to %d ranks, %.2f s\n", cases, most, s);
}

TEST(Hier, OnlyRailsCrossNodes) {
  // 4 nodes x 4 ranks: a rank talks to its two local ring neighbours and its two rail
  // neighbours only, and sends 2 (N-1)/N of its block (count / L) to other nodes.
  const AlgorithmDef* algo = findAlgorithm(CollKind::kAllReduce, "hier");
  ASSERT_NE(algo, nullptr);
  const ChannelPlan plan = nodesPlan(4, 4, /*contiguous=*/false);
  const size_t count = 4 * 4 * 100;
  Schedule s;
  for (int r = 0; r < 16; ++r) {
    ASSERT_TRUE(algo->generate(collArgs(CollKind::kAllReduce, r, 16, count, 64), plan, &s).ok());
    size_t remote = 0;
    for (const Lane& lane : s.lanes) {
      for (const Step& st : lane.steps) {
        if (st.sendPeer < 0) continue;
        const bool sameNode = plan.hosts[static_cast<size_t>(st.sendPeer)] == plan.hosts[static_cast<size_t>(r)];
        // Interleaved nodes (node r % 4): the local index, hence the rail, is r / 4.
        EXPECT_TRUE(sameNode || st.sendPeer / 4 == r / 4) << "rank " << r << " sends to " << st.sendPeer;
        if (!sameNode) remote += st.count;
      }
    }
    EXPECT_EQ(remote, 2 * 3 * (count / 4) / 4) << "rank " << r;
  }
}

TEST(Hier, UnevenNodesRunTheHierarchy) {
  // Uneven nodes no longer fall back to the ring: they run as many rails as the smallest
  // node has ranks (hier/allreduce.cc; many more shapes in test_schedules_small.cc).
  const AlgorithmDef* hier = findAlgorithm(CollKind::kAllReduce, "hier");
  ASSERT_NE(hier, nullptr);
  const std::vector<std::vector<uint64_t>> layouts = {{1, 1, 2}, {1, 2, 2, 2, 3}, {5, 5, 5, 6, 6, 7, 7}};
  for (const auto& hosts : layouts) {
    ChannelPlan plan;
    plan.hosts = hosts;
    const int n = static_cast<int>(hosts.size());
    for (size_t count : {size_t{1}, size_t{23}}) {
      Status st = checkAlgorithm(*hier, collArgs(CollKind::kAllReduce, 0, n, count, 4), plan);
      EXPECT_TRUE(st.ok()) << st.message();
    }
  }
  // A host list that does not describe every rank is an error, not a guess.
  ChannelPlan bad;
  bad.hosts = {1, 1, 2};
  Schedule s;
  EXPECT_EQ(hier->generate(collArgs(CollKind::kAllReduce, 0, 4, 8, 2), bad, &s).code(), ncclInvalidArgument);
}

// The selector's tests (forced algorithms, fits, the cost model) are in test_tuning.cc.

}  // namespace
}  // namespace snccl
