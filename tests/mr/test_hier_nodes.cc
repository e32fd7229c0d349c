// Hierarchical AllReduce (SNCCL_ALGO=hier) on emulated nodes: ranks are processes grouped
// into nodes by SNCCL_HOSTID (net/net_cluster.h: node = rank / ranksPerNode), shm inside a
// node and TCP over loopback between nodes. Even layouts run the three phases with
// several ranks per node and several nodes; uneven layouts (the last node smaller) run
// as many rails as the smallest node has ranks. Values are exact integers
// (net/net_checks.h).
//
// Which algorithm really ran is read from the ranks' logs: connections are made lazily,
// for the peers a schedule uses, and each is logged by its receiver at INFO/INIT
// ("Channel 00 : <from>[dev] -> <to>[dev] via <transport>"). The set of connections must
// be exactly the local rings plus the rails of the layout; the ring fallback (one ring
// over all ranks) would give a different set.
#include <dirent.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "support/temp_dir.h"

namespace {

using nettest::Cluster;
using nettest::Outcome;
using nettest::Shared;

using Edges = std::set<std::pair<int, int>>;  // (from, to) of every connection

// The connections of the hierarchical AllReduce on nodes of `perNode` consecutive ranks
// (the last node smaller when perNode does not divide nranks): each node's local ring,
// and one ring per rail (local index < the smallest node's size) through all nodes.
Edges hierEdges(int nranks, int perNode) {
  std::vector<std::vector<int>> nodes;
  for (int r = 0; r < nranks; ++r) {
    if (r % perNode == 0) nodes.emplace_back();
    nodes.back().push_back(r);
  }
  size_t rails = nodes.back().size();
  for (const auto& node : nodes) rails = std::min(rails, node.size());
  Edges e;
  auto ring = [&e](const std::vector<int>& members) {
    for (size_t i = 0; members.size() > 1 && i < members.size(); ++i)
      e.insert({members[i], members[(i + 1) % members.size()]});
  };
  for (const auto& node : nodes) ring(node);
  for (size_t p = 0; p < rails; ++p) {
    std::vector<int> rail;
    for (const auto& node : nodes) rail.push_back(node[p]);
    ring(rail);
  }
  return e;
}

// The edge of a "Channel NN : <from>[dev] -> <to>[dev] via <transport>" line, if it is one.
// (sscanf rather than std::regex: GCC 12 warns inside <regex> under ASan, and warnings fail
// the build.)
bool parseEdge(const std::string& line, std::pair<int, int>* edge) {
  const size_t at = line.find("Channel ");
  if (at == std::string::npos) return false;
  int channel = 0, from = 0, to = 0, fromDev = 0, toDev = 0, used = 0;
  if (std::sscanf(line.c_str() + at, "Channel %d : %d[%d] -> %d[%d] via %n", &channel, &from, &fromDev, &to, &toDev,
                  &used) != 5 ||
      used == 0)
    return false;
  *edge = {from, to};
  return true;
}

// Connections logged in the files of `dir`; removes the files and the directory.
Edges loggedEdges(const std::string& dir) {
  Edges e;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      if (ent->d_name[0] == '.') continue;
      const std::string path = dir + "/" + ent->d_name;
      std::ifstream in(path);
      std::string line;
      std::pair<int, int> edge;
      while (std::getline(in, line))
        if (parseEdge(line, &edge)) e.insert(edge);
      unlink(path.c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
  return e;
}

std::string show(const Edges& e) {
  std::string t;
  for (auto [a, b] : e) t += " " + std::to_string(a) + "->" + std::to_string(b);
  return t;
}

void runHier(int nranks, int perNode) {
  sntest::TempDir tmp("snccl-hier-nodes");
  ASSERT_FALSE(tmp.path.empty()) << "mkdtemp: " << strerror(errno);
  const std::string& dir = tmp.path;
  Cluster c;
  c.nranks = nranks;
  c.ranksPerNode = perNode;
  c.env = {{"SNCCL_ALGO", "hier"},    {"SNCCL_SOCKET_IFNAME", "=lo"}, {"SNCCL_TIMEOUT", "60"},
           {"NCCL_DEBUG", "INFO"},    {"NCCL_DEBUG_SUBSYS", "INIT"},  {"NCCL_DEBUG_FILE", dir + "/rank.%p.log"}};
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
  const Edges want = hierEdges(nranks, perNode), got = loggedEdges(dir);
  EXPECT_EQ(got, want) << "connections made:" << show(got) << "\nthe hierarchical layout's:" << show(want);
}

TEST(HierNodes, ThreeNodesOfTwo) { runHier(6, 2); }
TEST(HierNodes, TwoNodesOfThree) { runHier(6, 3); }
// Uneven: one rail (the last node has one rank), and two rails (3 + 2, rank 2 beyond them).
TEST(HierNodes, UnevenTwoTwoOne) { runHier(5, 2); }
TEST(HierNodes, UnevenThreeThreeOne) { runHier(7, 3); }
TEST(HierNodes, UnevenThreeTwo) { runHier(5, 3); }

}  // namespace
