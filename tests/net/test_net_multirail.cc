// Emulated nodes with two rails each (two interfaces on two separate bridges and subnets,
// netns.h): with SNCCL_SOCKET_IFNAME matching both, every connection spreads over both.
// Every collective is correct with adaptive routing (odd rank count) and with static
// routing; and a rail whose cable is pulled while ranks loop on AllReduce (no error on
// any socket: TCP just stops hearing back) costs no error and no hang: adaptive routing
// finds the cut path late, sends its chunks again on the other rail long before the path
// timeout, and uses the rail again when its cable is plugged back in.
//
// Needs root and iproute2; otherwise each test is skipped with a message saying so.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/netns.h"
#include "traffic_stats.h"

namespace {

using nettest::Cluster;
using nettest::NetnsNodes;
using nettest::Outcome;
using nettest::Shared;

constexpr int kRails = 2;

#define SKIP_UNLESS_NETNS(nodes, count)                                                     \
  NetnsNodes nodes;                                                                         \
  {                                                                                         \
    std::string why = NetnsNodes::unsupportedReason();                                      \
    if (why.empty() && !nodes.create(count, &why, kRails)) why = "namespace setup: " + why; \
    if (!why.empty()) {                                                                     \
      std::fprintf(stderr, "\n*** NET NAMESPACE TEST SKIPPED: %s ***\n\n", why.c_str());    \
      GTEST_SKIP() << "network namespaces unavailable: " << why;                            \
    }                                                                                       \
  }

Cluster railsCluster(const NetnsNodes& ns, const char* routing) {
  Cluster c;
  c.ranksPerNode = 1;
  c.nranks = int(ns.names().size());
  c.netns = ns.names();
  c.env = {{"SNCCL_SOCKET_IFNAME", "snet"},
           {"SNCCL_TIMEOUT", "60"},
           {"SNCCL_ROUTING", routing},
           {"SNCCL_SOCKET_PATH_TIMEOUT", "300"}};
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

TEST(NetMultirail, ThreeNodesAdaptiveEveryCollective) {
  SKIP_UNLESS_NETNS(nodes, 3);
  Cluster c = railsCluster(nodes, "adaptive");
  c.timeoutSec = 300;
  Outcome o = nettest::runCluster(c, checkAll({0, 1, 7, 1031, 200003}), {}, [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(NetMultirail, TwoNodesStaticEveryCollective) {
  SKIP_UNLESS_NETNS(nodes, 2);
  Outcome o =
      nettest::runCluster(railsCluster(nodes, "static"), checkAll({0, 1, 1031, 200003}), {}, [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// The traffic counters show a connection spread over both rails as two rails, and what
// the rails carried adds up to the bytes the rings moved between the two ranks: exactly,
// but for a sender under adaptive routing, whose rails count every acknowledged copy of a
// chunk (a chunk sent again after its path looked stalled may arrive twice; the receiver
// counts the first copy only). A long path timeout makes that unlikely here.
void countsEachRail(const char* routing) {
  SKIP_UNLESS_NETNS(nodes, 2);
  char dirTemplate[] = "/tmp/snccl-rails-XXXXXX";
  ASSERT_NE(mkdtemp(dirTemplate), nullptr);
  const std::string dir = dirTemplate;
  Cluster c = railsCluster(nodes, routing);
  c.env.push_back({"SNCCL_STATS_DIR", dir});
  for (auto& [k, v] : c.env)
    if (k == "SNCCL_SOCKET_PATH_TIMEOUT") v = "10000";
  const bool adaptive = std::string(routing) == "adaptive";
  Outcome o = nettest::runCluster(
      c,
      [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
        // Messages large enough to be split over every stream, and small ones that ride
        // inside the control frames (static routing).
        for (size_t count : {size_t(4) << 20, size_t(1000), size_t(3) << 20}) {
          std::vector<float> buf(count, float(rank + 1));
          if (ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess ||
              buf[count - 1] != float(n * (n + 1) / 2)) {
            nettest::report(sh, rank, 1, "AllReduce failed or wrong");
            return false;
          }
        }
        nettest::report(sh, rank, 0, "");
        return true;
      },
      {}, [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  std::vector<std::string> files = snccl::traffic::counterFiles(dir);
  ASSERT_EQ(files.size(), 2u) << dir;
  for (const std::string& f : files) {
    snccl::traffic::RankCounters rc;
    std::string err;
    ASSERT_TRUE(snccl::traffic::readCounters(f, &rc, &err)) << f << ": " << err;
    const snccl::traffic::PeerCounters& peer = rc.peers[size_t(1 - rc.rank)];
    EXPECT_GT(peer.sendBytes, uint64_t(7) << 20) << f;
    std::set<std::string> names;
    uint64_t sent = 0, received = 0;
    for (const snccl::traffic::RailCount& r : peer.rails) {
      names.insert(r.name);
      EXPECT_EQ(r.name.rfind("snet", 0), 0u) << f << ": rail " << r.name;
      EXPECT_GT(r.sendBytes, 0u) << f << ": rail " << r.name << " sent nothing";
      EXPECT_GT(r.recvBytes, 0u) << f << ": rail " << r.name << " received nothing";
      sent += r.sendBytes;
      received += r.recvBytes;
    }
    EXPECT_EQ(names.size(), size_t(kRails)) << f << ": " << snccl::traffic::renderTable({rc}, nullptr, 0);
    if (adaptive) {
      EXPECT_GE(sent, peer.sendBytes) << f << ": " << snccl::traffic::renderTable({rc}, nullptr, 0);
    } else {
      EXPECT_EQ(sent, peer.sendBytes) << f << ": " << snccl::traffic::renderTable({rc}, nullptr, 0);
    }
    EXPECT_EQ(received, peer.recvBytes) << f << ": " << snccl::traffic::renderTable({rc}, nullptr, 0);
    if (::testing::Test::HasFailure()) std::fprintf(stderr, "%s", snccl::traffic::renderTable({rc}, nullptr, 0).c_str());
  }
  std::filesystem::remove_all(dir);
}

TEST(NetMultirail, AdaptiveTrafficIsCountedPerRail) { countsEachRail("adaptive"); }
TEST(NetMultirail, StaticTrafficIsCountedPerRail) { countsEachRail("static"); }

// Ranks loop on 4 MiB AllReduces, checking each result, until the parent says stop. Every
// call must succeed. The ranks agree on when to stop through a 1-element AllReduce of the
// parent's word each iteration: a rank that stopped on its own reading would leave the
// others in a collective without it. And none aborts before every rank returned from that
// last call: an abort may overtake the rank's last message to a peer that has not received
// it yet.
nettest::Body allReduceLoop() {
  return [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
    // The bootstrap's sockets use rail 0 too: end with an abort, which needs none.
    *abort = true;
    const size_t count = 1 << 20;
    std::vector<int32_t> buf(count);
    double end = nettest::nowSec() + 90;
    for (int it = 0;; ++it) {
      int32_t stop = __atomic_load_n(&sh->go, __ATOMIC_ACQUIRE);
      if (ncclAllReduce(&stop, &stop, 1, ncclInt32, ncclMax, comm, nullptr) != ncclSuccess) {
        nettest::report(sh, rank, 4, ncclGetLastError(nullptr));
        return false;
      }
      if (stop != 0) break;
      if (nettest::nowSec() > end) {
        nettest::report(sh, rank, 2, "the parent never said stop (iterations stalled after the cut?)");
        return false;
      }
      for (size_t i = 0; i < count; ++i) buf[i] = int32_t((i + size_t(it)) % 1000) * (rank + 1);
      ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), count, ncclInt32, ncclSum, comm, nullptr);
      if (res != ncclSuccess) {
        nettest::report(sh, rank, res, ncclGetLastError(nullptr));
        return false;
      }
      const int32_t tri = n * (n + 1) / 2;
      for (size_t i = 0; i < count; ++i)
        if (buf[i] != int32_t((i + size_t(it)) % 1000) * tri) {
          nettest::report(sh, rank, 3, "wrong AllReduce result at iteration " + std::to_string(it));
          return false;
        }
      __atomic_store_n(&sh->r[rank].iters, it + 1, __ATOMIC_RELEASE);
    }
    __atomic_add_fetch(&sh->finished, 1, __ATOMIC_ACQ_REL);
    for (double until = nettest::nowSec() + 60;
         __atomic_load_n(&sh->finished, __ATOMIC_ACQUIRE) < n && nettest::nowSec() < until;)
      usleep(1000);
    nettest::report(sh, rank, 0, "");
    return true;
  };
}

// The fewest iterations any rank of `n` completed.
int minIters(Shared* sh, int n) {
  int m = 1 << 30;
  for (int r = 0; r < n; ++r) m = std::min(m, __atomic_load_n(&sh->r[r].iters, __ATOMIC_ACQUIRE));
  return m;
}

// Waits (at most 60 s) until every rank completed `iters`.
void waitIters(Shared* sh, int n, int iters) {
  for (double deadline = nettest::nowSec() + 60; minIters(sh, n) < iters && nettest::nowSec() < deadline;) usleep(5000);
}

// The rails' cluster with `env` on top (the ranks set c.env in order: later entries win).
Cluster railsClusterWith(const NetnsNodes& ns, const std::vector<std::pair<std::string, std::string>>& env) {
  Cluster c = railsCluster(ns, "adaptive");
  c.timeoutSec = 150;
  c.env.insert(c.env.end(), env.begin(), env.end());
  return c;
}

// The parent pulls node 1's cable on `rail` once every rank completed a few AllReduces,
// and says stop once every rank completed kAfterCut more.
void survivesRailCut(int rail, const std::vector<std::pair<std::string, std::string>>& env = {}) {
  SKIP_UNLESS_NETNS(nodes, 2);
  constexpr int kAfterCut = 15;
  Cluster c = railsClusterWith(nodes, env);
  int itersAtCut = 0;
  Outcome o = nettest::runCluster(
      c, allReduceLoop(),
      [&](Shared* sh, const std::vector<pid_t>&) {
        waitIters(sh, c.nranks, 3);
        itersAtCut = minIters(sh, c.nranks);
        EXPECT_TRUE(nodes.setLink(1, false, rail)) << "ip link set down failed";
        waitIters(sh, c.nranks, itersAtCut + kAfterCut);
        __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
      },
      [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  for (int r = 0; r < c.nranks; ++r) {
    EXPECT_EQ(o.reports[size_t(r)].code, 0) << "rank " << r << "\n" << o.describe();
    EXPECT_GE(o.reports[size_t(r)].iters, itersAtCut + kAfterCut) << "rank " << r << " stalled after the cut";
  }
}

TEST(NetMultirail, CutOfTheSecondRailIsSurvived) { survivesRailCut(1); }

TEST(NetMultirail, CutOfTheFirstRailIsSurvived) { survivesRailCut(0); }

// The cut path is late long before it could be given up: with a path timeout of ten
// minutes, and TCP's own timeout (half of SNCCL_TIMEOUT) past the 60 s the parent waits,
// AllReduces go on only because the cut path's chunks go again on the other rail.
TEST(NetMultirail, CutRailIsBypassedBeforeThePathTimeout) {
  survivesRailCut(1, {{"SNCCL_SOCKET_PATH_TIMEOUT", "600000"}, {"SNCCL_TIMEOUT", "200"}});
}

// Bytes node 1 sent on `rail` so far (its interface's counter, read with ip -s).
uint64_t sentOnRail(const NetnsNodes& ns, int rail) {
  const std::string cmd = "ip -n " + ns.names()[1] + " -s -o link show dev " + NetnsNodes::railIfname(rail);
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return 0;
  char line[4096] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  pclose(f);
  // One line: ... "TX: bytes packets ..." then "\" and the numbers, bytes first.
  const char* tx = read ? std::strstr(line, "TX:") : nullptr;
  const char* nums = tx != nullptr ? std::strchr(tx, '\\') : nullptr;
  return nums != nullptr ? std::strtoull(nums + 1, nullptr, 10) : 0;
}

// A rail whose cable comes back is used again: its path was late, not dropped (the path
// timeout is ten minutes), so once TCP delivers on it again its acknowledgements come back
// and it takes chunks. More than the path could have had in flight at the cut (its window
// is at most 16 MiB) must cross it afterwards.
TEST(NetMultirail, RailThatComesBackIsUsedAgain) {
  SKIP_UNLESS_NETNS(nodes, 2);
  Cluster c = railsClusterWith(nodes, {{"SNCCL_SOCKET_PATH_TIMEOUT", "600000"}, {"SNCCL_TIMEOUT", "200"}});
  constexpr uint64_t kAfter = 64u << 20;
  uint64_t sentAtReturn = 0, sentAtEnd = 0;
  Outcome o = nettest::runCluster(
      c, allReduceLoop(),
      [&](Shared* sh, const std::vector<pid_t>&) {
        waitIters(sh, c.nranks, 3);
        EXPECT_TRUE(nodes.setLink(1, false, 1)) << "ip link set down failed";
        waitIters(sh, c.nranks, minIters(sh, c.nranks) + 5);
        sentAtReturn = sentOnRail(nodes, 1);
        EXPECT_TRUE(nodes.setLink(1, true, 1)) << "ip link set up failed";
        for (double deadline = nettest::nowSec() + 30;
             sentOnRail(nodes, 1) - sentAtReturn < kAfter && nettest::nowSec() < deadline;)
          usleep(20000);
        sentAtEnd = sentOnRail(nodes, 1);
        __atomic_store_n(&sh->go, 1, __ATOMIC_RELEASE);
      },
      [&] { nodes.cleanup(); });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  EXPECT_GT(sentAtReturn, 0u) << "could not read the rail's counter";
  EXPECT_GE(sentAtEnd - sentAtReturn, kAfter) << "the rail carried little once it came back";
}

}  // namespace
