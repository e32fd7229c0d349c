// Hierarchical AllReduce (SNCCL_ALGO=hier) on emulated nodes: ranks are processes grouped
// into nodes by SNCCL_HOSTID (net/net_cluster.h: node = rank / ranksPerNode), shm inside a
// node and TCP over loopback between nodes. Even layouts run the three phases with
// several ranks per node and several nodes; uneven layouts (the last node smaller) must
// fall back to the ring and still be exact. Values are exact integers (net/net_checks.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/net_checks.h"
#include "net/net_cluster.h"

namespace {

using nettest::Cluster;
using nettest::Outcome;
using nettest::Shared;

void runHier(int nranks, int perNode) {
  Cluster c;
  c.nranks = nranks;
  c.ranksPerNode = perNode;
  c.env = {{"SNCCL_ALGO", "hier"}, {"SNCCL_SOCKET_IFNAME", "=lo"}, {"SNCCL_TIMEOUT", "60"}};
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker check(comm, rank, n);
    bool ok = true;
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}, size_t{100003}}) {
      ok = ok && check.allReduceSum(count, false) && check.allReduceSum(count, true) &&
           check.allReduceMaxUnaligned(count);
    }
    nettest::report(sh, rank, ok ? 0 : 1, check.error());
    return ok;
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(HierNodes, ThreeNodesOfTwo) { runHier(6, 2); }
TEST(HierNodes, TwoNodesOfThree) { runHier(6, 3); }
TEST(HierNodes, UnevenTwoTwoOneFallsBackToRing) { runHier(5, 2); }
TEST(HierNodes, UnevenThreeThreeOneFallsBackToRing) { runHier(7, 3); }

}  // namespace
