// Several emulated nodes in network namespaces (2 ranks per node, shm inside a node,
// TCP over veth and a bridge between nodes): every collective is correct, and pulling a
// node's cable makes every rank fail with an error instead of hanging, an error that
// says what the network did: the node whose link went down says so, its peers name it.
//
// Needs root and iproute2; otherwise each test is skipped with a message saying so.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdio>

#include "flight_doctor.h"
#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/netns.h"
#include "support/temp_dir.h"

namespace {

using nettest::Cluster;
using nettest::NetnsNodes;
using nettest::Outcome;
using nettest::RankReport;
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

// Every rank loops on AllReduce until one fails; the parent takes node `cutNode`'s link
// down once every rank has completed a few collectives over it. Each rank reports the
// failed call's code, ncclGetLastError() and ncclCommGetAsyncError().
Outcome loopUntilLinkCut(NetnsNodes& nodes, const Cluster& c, int cutNode, double* tCut) {
  return nettest::runCluster(
      c,
      [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
        std::vector<int32_t> buf(50000, 1);
        double end = nettest::nowSec() + 60;
        for (int it = 0; nettest::nowSec() < end; ++it) {
          ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclMax, comm, nullptr);
          if (res != ncclSuccess) {
            nettest::report(sh, rank, res, ncclGetLastError(nullptr));
            ncclResult_t async = ncclSuccess;
            if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) async = ncclInternalError;
            sh->r[rank].asyncCode = async;
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
        double deadline = nettest::nowSec() + 60;
        for (bool ready = false; !ready && nettest::nowSec() < deadline; usleep(5000)) {
          ready = true;
          for (int r = 0; r < c.nranks; ++r) ready = ready && __atomic_load_n(&sh->r[r].iters, __ATOMIC_ACQUIRE) >= 3;
        }
        *tCut = nettest::nowSec();
        EXPECT_TRUE(nodes.setLink(cutNode, false)) << "ip link set down failed";
      },
      [&] { nodes.cleanup(); });
}

bool has(const RankReport& r, const char* text) { return std::string(r.msg).find(text) != std::string::npos; }

// Node 1's link goes down while all ranks loop on AllReduce. With SNCCL_TIMEOUT=4 every
// rank must return an error within the timeout plus a margin, on both sides of the cut.
TEST(NetNs, LinkCutGivesErrorsNotHangs) {
  SKIP_UNLESS_NETNS(nodes);
  constexpr int kTimeout = 4;
  Cluster c = nodesCluster(nodes, 2);
  c.env[1] = {"SNCCL_TIMEOUT", std::to_string(kTimeout)};
  c.timeoutSec = 120;
  double tCut = 0;
  Outcome o = loopUntilLinkCut(nodes, c, 1, &tCut);
  std::fprintf(stderr, "errors after the cut:\n%s", o.describe().c_str());
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  for (int r = 0; r < c.nranks; ++r) {
    EXPECT_NE(o.reports[r].code, 0) << "rank " << r << " did not fail\n" << o.describe();
    EXPECT_NE(o.reports[r].code, -1) << "rank " << r << " never finished\n" << o.describe();
    EXPECT_NE(o.reports[r].asyncCode, ncclSuccess) << "rank " << r << "'s async error\n" << o.describe();
    double after = o.reports[r].tEnd - tCut;
    EXPECT_LT(after, 3.0 * kTimeout + 10) << "rank " << r << " took " << after << " s to fail\n" << o.describe();
  }
  // Node 1's own link failed: its ranks never blame node 0's (they cannot hear from them,
  // so whatever they report comes from themselves or their node mate).
  for (int r = 2; r < 4; ++r)
    EXPECT_FALSE(has(o.reports[r], "stopped") && (has(o.reports[r], "rank 0 (pid") || has(o.reports[r], "rank 1 (pid")))
        << "rank " << r << " blames node 0\n" << o.describe();
}

// One rank per node, so each is blocked on a net connection when the link goes: both
// returned errors carry the network's cause. The rank whose link went down says so and
// names its interface, without blaming its peer; the peer names that rank and says it
// stopped acknowledging (or became unreachable). SNCCL_TIMEOUT=10: the sockets give up
// after 5 s, well before the executor's own deadline would turn it into a timeout. From
// the ranks' flight recorders alone, sn_doctor names the link between them, not a rank.
TEST(NetNs, LinkCutErrorsNameTheNetworkCauseOnBothSides) {
  SKIP_UNLESS_NETNS(nodes);
  constexpr int kTimeout = 10;
  Cluster c = nodesCluster(nodes, 1);
  c.env[1] = {"SNCCL_TIMEOUT", std::to_string(kTimeout)};
  sntest::TempDir flightDir("snccl-flight");
  c.env.push_back({"SNCCL_FLIGHT_DIR", flightDir.path});
  c.timeoutSec = 120;
  double tCut = 0;
  Outcome o = loopUntilLinkCut(nodes, c, 1, &tCut);
  std::fprintf(stderr, "errors after the cut:\n%s", o.describe().c_str());
  ASSERT_TRUE(o.allExitedZero()) << o.describe();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o.reports[r].code, ncclRemoteError) << o.describe();
    EXPECT_EQ(o.reports[r].asyncCode, ncclRemoteError) << o.describe();
    EXPECT_LT(o.reports[r].tEnd - tCut, 1.0 * kTimeout) << "rank " << r << " was not failed by the network\n"
                                                        << o.describe();
    EXPECT_TRUE(has(o.reports[r], "NET/Socket")) << "rank " << r << ": no network cause\n" << o.describe();
  }
  const RankReport& cut = o.reports[1];
  EXPECT_TRUE(has(cut, "this node's network link is down") && has(cut, NetnsNodes::kIfname)) << o.describe();
  EXPECT_TRUE(has(cut, "failed on this rank's side")) << o.describe();
  EXPECT_FALSE(has(cut, "stopped")) << "the rank whose link went down blames its peer\n" << o.describe();
  const RankReport& peer = o.reports[0];
  EXPECT_TRUE(has(peer, "rank 1 (pid") && has(peer, "stopped")) << o.describe();
  EXPECT_TRUE(has(peer, "stopped acknowledging") || has(peer, "unreachable")) << o.describe();
  EXPECT_FALSE(has(peer, "this node's network link is down")) << o.describe();

  std::vector<snccl::doctor::Dump> dumps;
  for (const std::string& f : snccl::doctor::dumpFiles(flightDir.path)) {
    snccl::doctor::Dump d;
    std::string err;
    EXPECT_TRUE(snccl::doctor::readDump(f, &d, &err)) << f << ": " << err;
    dumps.push_back(std::move(d));
  }
  ASSERT_EQ(dumps.size(), 2u) << "both ranks are alive and dump";
  snccl::doctor::Diagnosis dx = snccl::doctor::diagnose(dumps);
  std::fprintf(stderr, "sn_doctor: %s\n", dx.summary.c_str());
  EXPECT_EQ(dx.verdict, snccl::doctor::Verdict::kLinkFailed) << dx.summary;
  EXPECT_EQ(dx.rank, 1) << "the rank whose link went down: " << dx.summary;
  EXPECT_EQ(dx.peer, 0) << dx.summary;
}

}  // namespace
