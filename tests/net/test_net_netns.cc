// Several emulated nodes in network namespaces (2 ranks per node, shm inside a node,
// TCP over veth and a bridge between nodes): every collective is correct, and pulling a
// node's cable makes every rank fail with an error instead of hanging.
//
// Needs root and iproute2; otherwise each test is skipped with a message saying so.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>

#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/netns.h"

namespace {

using nettest::Cluster;
using nettest::NetnsNodes;
using nettest::Outcome;
using nettest::Shared;

#define SKIP_UNLESS_NETNS(nodes)                                                                    \
  NetnsNodes nodes;                                                                                 \
  {                                                                                                 \
    std::string why = NetnsNodes::unsupportedReason();                                              \
    if (why.empty() && !nodes.create(kNodesFor(test_info_), &why)) why = "namespace setup: " + why; \
    if (!why.empty()) {                                                                             \
      std::fprintf(stderr, "\n*** NET NAMESPACE TEST SKIPPED: %s ***\n\n", why.c_str());           \
      GTEST_SKIP() << "network namespaces unavailable: " << why;                                   \
    }                                                                                               \
  }

int kNodesFor(const ::testing::TestInfo* info) {
  return std::string(info->name()).find("Four") != std::string::npos ? 4 : 2;
}

Cluster nodesCluster(const NetnsNodes& ns, int perNode) {
  Cluster c;
  c.ranksPerNode = perNode;
  c.nranks = int(ns.names().size()) * perNode;
  c.netns = ns.names();
  c.env = {{"SNCCL_SOCKET_IFNAME", std::string("=") + NetnsNodes::kIfname}, {"SNCCL_TIMEOUT", "60"}};
  return c;
}

nettest::Body checkAll(std::vector<size_t> counts) {
  return [counts](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker c(comm, rank, n);
    bool ok = c.all(counts);
    nettest::report(sh, rank, ok ? 0 : 1, c.error());
    return ok;
  };
}

TEST(NetNs, TwoNodesTwoRanksEach) {
  SKIP_UNLESS_NETNS(nodes);
  Outcome o = nettest::runCluster(nodesCluster(nodes, 2), checkAll({0, 1, 7, 1031, 200003}), {},
                                  [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(NetNs, FourNodesTwoRanksEach) {
  SKIP_UNLESS_NETNS(nodes);
  Cluster c = nodesCluster(nodes, 2);
  c.timeoutSec = 400;
  Outcome o = nettest::runCluster(c, checkAll({0, 1, 1031, 70001}), {}, [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Node 1's link goes down while all ranks loop on AllReduce. With SNCCL_TIMEOUT=4 every
// rank must return an error within the timeout plus a margin, on both sides of the cut.
TEST(NetNs, LinkCutGivesErrorsNotHangs) {
  SKIP_UNLESS_NETNS(nodes);
  constexpr int kTimeout = 4;
  Cluster c = nodesCluster(nodes, 2);
  c.env[1] = {"SNCCL_TIMEOUT", std::to_string(kTimeout)};
  c.timeoutSec = 120;
  double tCut = 0;
  Outcome o = nettest::runCluster(
      c,
      [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
        std::vector<int32_t> buf(50000, 1);
        double end = nettest::nowSec() + 60;
        for (int it = 0; nettest::nowSec() < end; ++it) {
          ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclMax, comm, nullptr);
          if (res != ncclSuccess) {
            nettest::report(sh, rank, res, ncclGetLastError(nullptr));
            *abort = true;
            return true;
          }
          __atomic_store_n(&sh->r[rank].iters, it + 1, __ATOMIC_RELEASE);
        }
        nettest::report(sh, rank, 0, "no error within 60 s of looping after the cut");
        *abort = true;
        return false;
      },
      [&](Shared* sh, const std::vector<pid_t>&) {
        // Cut once every rank has completed a few collectives over the link.
        double deadline = nettest::nowSec() + 60;
        for (bool ready = false; !ready && nettest::nowSec() < deadline; usleep(5000)) {
          ready = true;
          for (int r = 0; r < c.nranks; ++r) ready = ready && __atomic_load_n(&sh->r[r].iters, __ATOMIC_ACQUIRE) >= 3;
        }
        tCut = nettest::nowSec();
        EXPECT_TRUE(nodes.setLink(1, false)) << "ip link set down failed";
      },
      [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  for (int r = 0; r < c.nranks; ++r) {
    EXPECT_NE(o.reports[r].code, 0) << "rank " << r << " did not fail\n" << o.describe();
    EXPECT_NE(o.reports[r].code, -1) << "rank " << r << " never finished\n" << o.describe();
    double after = o.reports[r].tEnd - tCut;
    EXPECT_LT(after, 3.0 * kTimeout + 10) << "rank " << r << " took " << after << " s to fail\n" << o.describe();
  }
}

}  // namespace
