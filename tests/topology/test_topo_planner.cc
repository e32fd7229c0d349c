// The planner: rings follow NVLink first and PCIe locality next, nodes stay contiguous,
// trees are valid double binary trees, channel counts follow the narrowest link, and the
// plan is a deterministic function of its inputs (every rank must compute the same one).
#include <gtest/gtest.h>

#include <chrono>
#include <set>

#include "topo_test_util.h"
#include "topology/affinity.h"
#include "topology/nccl_xml.h"
#include "topology/planner.h"

namespace snccl::topo {
namespace {

using testing::expectVisitsEachGpuOnce;
using testing::gpuAt;
using testing::mustLoad;
using testing::topoPath;

System fromXml(const std::string& text) {
  Result<System> r = readNcclXml(text, "inline.xml");
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : System();
}

std::string gpuXml(const char* bus, int dev, const std::string& links = "") {
  return format("<pci busid=\"%s\" class=\"0x030200\" link_speed=\"16 GT/s\" link_width=\"16\"><gpu dev=\"%d\" sm=\"80\">%s</gpu></pci>",
                bus, dev, links.c_str());
}

std::string nvlink(const char* target, int count) {
  return format("<nvlink target=\"%s\" count=\"%d\" tclass=\"0x030200\"/>", target, count);
}

std::vector<RankLocation> onePerGpu(const System& s, uint64_t host = 1) {
  std::vector<RankLocation> r;
  for (int g : s.gpus()) r.push_back({host, s.node(g).pci.busId, -1});
  return r;
}

void expectValidTree(const RankTree& t, size_t n) {
  ASSERT_EQ(t.parent.size(), n);
  int roots = 0;
  for (size_t r = 0; r < n; ++r) {
    if (t.parent[r] < 0) {
      ++roots;
      EXPECT_EQ(static_cast<int>(r), t.root);
      continue;
    }
    // Climbing reaches the root within n steps: no cycles.
    int cur = static_cast<int>(r), steps = 0;
    while (cur >= 0 && steps <= static_cast<int>(n)) cur = t.parent[static_cast<size_t>(cur)], ++steps;
    EXPECT_LE(steps, static_cast<int>(n)) << "cycle through rank " << r;
    const auto& up = t.children[static_cast<size_t>(t.parent[r])];
    EXPECT_NE(std::find(up.begin(), up.end(), static_cast<int>(r)), up.end());
  }
  EXPECT_EQ(roots, 1);
}

TEST(BinaryTree, ValidAndComplementary) {
  for (int n = 1; n <= 70; ++n) {
    for (bool mirrored : {false, true}) {
      std::vector<int> p = binaryTreeParents(n, mirrored);
      RankTree t;
      t.parent = p;
      t.children.assign(static_cast<size_t>(n), {});
      for (int i = 0; i < n; ++i) {
        if (p[static_cast<size_t>(i)] < 0) t.root = i;
        else t.children[static_cast<size_t>(p[static_cast<size_t>(i)])].push_back(i);
      }
      SCOPED_TRACE(format("n=%d mirrored=%d", n, mirrored));
      expectValidTree(t, static_cast<size_t>(n));
      for (const auto& c : t.children) EXPECT_LE(c.size(), 2u);
    }
    // The two halves of a double binary tree: no item is interior in both when n is even.
    if (n % 2 == 0) {
      std::vector<int> a = binaryTreeParents(n, false), b = binaryTreeParents(n, true);
      std::vector<int> ia(static_cast<size_t>(n), 0), ib(static_cast<size_t>(n), 0);
      for (int i = 0; i < n; ++i) {
        if (a[static_cast<size_t>(i)] >= 0) ia[static_cast<size_t>(a[static_cast<size_t>(i)])] = 1;
        if (b[static_cast<size_t>(i)] >= 0) ib[static_cast<size_t>(b[static_cast<size_t>(i)])] = 1;
      }
      for (int i = 0; i < n; ++i) EXPECT_FALSE(ia[static_cast<size_t>(i)] && ib[static_cast<size_t>(i)]) << "n=" << n << " item " << i;
    }
  }
}

TEST(Ring, FollowsNvlinkEvenAgainstPcieOrder) {
  // Four GPUs on one PCIe switch; NVLink bridges form the cycle 0-2-1-3-0, so the PCIe
  // order 0,1,2,3 would use two PCIe hops.
  std::string x = "<system version=\"1\"><cpu numaid=\"0\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"143\">"
                  "<pci busid=\"0000:10:00.0\" class=\"0x060400\" link_speed=\"16 GT/s\" link_width=\"16\">";
  x += gpuXml("0000:11:00.0", 0, nvlink("0000:13:00.0", 2) + nvlink("0000:14:00.0", 2));
  x += gpuXml("0000:12:00.0", 1, nvlink("0000:13:00.0", 2) + nvlink("0000:14:00.0", 2));
  x += gpuXml("0000:13:00.0", 2, nvlink("0000:11:00.0", 2) + nvlink("0000:12:00.0", 2));
  x += gpuXml("0000:14:00.0", 3, nvlink("0000:12:00.0", 2) + nvlink("0000:11:00.0", 2));
  x += "</pci></cpu></system>";
  System s = fromXml(x);
  ASSERT_EQ(s.gpus().size(), 4u);
  EXPECT_EQ(s.path(gpuAt(s, 0), gpuAt(s, 1)).type, PathType::kNvb);  // through GPU 2 or 3
  std::vector<int> ring = orderRing(s, s.gpus());
  expectVisitsEachGpuOnce(s, ring);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s.path(ring[i], ring[(i + 1) % 4]).type, PathType::kNvl) << i;
  Result<Plan> p = planChannels(s, onePerGpu(s));
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->intraType, PathType::kNvl);
  EXPECT_EQ(p->nChannels, 2);  // two links on the narrowest hop
  EXPECT_TRUE(p->rings[0] == (std::vector<int>{0, 2, 1, 3}) || p->rings[0] == (std::vector<int>{0, 3, 1, 2}));
}

// 16 GPUs, 4 per PCIe switch, 2 switches per socket, listed in a scrambled NVML order:
// the exact search must keep switch-mates together and cross the sockets only twice.
TEST(Ring, SixteenGpusPcieLocality) {
  std::string x = "<system version=\"1\">";
  const int devOf[16] = {0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15};
  int k = 0;
  for (int cpu = 0; cpu < 2; ++cpu) {
    x += format("<cpu numaid=\"%d\" arch=\"x86_64\" vendor=\"GenuineIntel\" familyid=\"6\" modelid=\"106\">", cpu);
    for (int sw = 0; sw < 2; ++sw) {
      x += format("<pci busid=\"0000:%02x:00.0\" class=\"0x060400\" link_speed=\"16 GT/s\" link_width=\"16\">", 0x10 + cpu * 0x40 + sw * 0x20);
      for (int g = 0; g < 4; ++g, ++k) {
        std::string bus = format("0000:%02x:00.0", 0x11 + cpu * 0x40 + sw * 0x20 + g);
        x += gpuXml(bus.c_str(), devOf[k]);
      }
      x += "</pci>";
    }
    x += "</cpu>";
  }
  x += "</system>";
  System s = fromXml(x);
  ASSERT_EQ(s.gpus().size(), 16u);
  auto t0 = std::chrono::steady_clock::now();
  Result<Plan> p = planChannels(s, onePerGpu(s));
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(p.ok());
  EXPECT_LT(secs, 20.0);
  std::map<PathType, int> hops;
  const std::vector<int>& ring = p->rings[0];
  for (size_t i = 0; i < 16; ++i) {
    int a = s.gpus()[static_cast<size_t>(ring[i])], b = s.gpus()[static_cast<size_t>(ring[(i + 1) % 16])];
    ++hops[s.path(a, b).type];
  }
  EXPECT_EQ(hops[PathType::kSys], 2);
  EXPECT_EQ(hops[PathType::kPhb], 2);
  EXPECT_EQ(hops[PathType::kPix], 12);
  EXPECT_EQ(p->nChannels, 2);
}

TEST(Plan, TwoNodesStayContiguousWithTreesAndNics) {
  std::string f = topoPath("nccl/hgx-a100-80g_8gpu_6nvswitch_4xcx6dx-200g-bond_2socket-icelake.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  // Ranks interleaved across two hosts: rank r on host r % 2, GPU r / 2.
  std::vector<RankLocation> ranks;
  for (int r = 0; r < 16; ++r) ranks.push_back({static_cast<uint64_t>(100 + r % 2), s.node(gpuAt(s, static_cast<size_t>(r / 2))).pci.busId, -1});
  Result<Plan> p = planChannels(s, ranks);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->nodes.size(), 2u);
  for (int r : p->nodes[0]) EXPECT_EQ(r % 2, 0);
  EXPECT_EQ(p->nChannels, 12);  // 12 NVLinks per A100
  EXPECT_EQ(p->intraType, PathType::kNvl);
  for (const std::vector<int>& ring : p->rings) {
    ASSERT_EQ(ring.size(), 16u);
    std::set<int> all(ring.begin(), ring.end());
    EXPECT_EQ(all.size(), 16u);
    for (size_t i = 0; i < 8; ++i) EXPECT_EQ(ring[i] % 2, 0);  // node 0 first, contiguous
  }
  EXPECT_NE(p->rings[0][0], p->rings[6][0]);  // channels enter the node at different GPUs
  EXPECT_EQ(p->trees.size(), 12u);
  for (const RankTree& t : p->trees) expectValidTree(t, 16);
  ASSERT_EQ(p->rankNic.size(), 16u);
  for (int r = 0; r < 16; ++r) EXPECT_EQ(p->rankNic[static_cast<size_t>(r)], s.gpuNics()[static_cast<size_t>(r / 2)]);
  Result<std::vector<int>> ring = planRing(s, ranks);
  ASSERT_TRUE(ring.ok());
  EXPECT_EQ(ring.value(), p->rings[0]);
}

TEST(Plan, HostRanksGroupedByNumaNode) {
  System s = fromXml(
      "<system version=\"1\">"
      "<cpu numaid=\"0\" affinity=\"000000ff\" arch=\"x86_64\" vendor=\"AuthenticAMD\"/>"
      "<cpu numaid=\"1\" affinity=\"0000ff00\" arch=\"x86_64\" vendor=\"AuthenticAMD\"><nic><net name=\"eth0\" speed=\"25000\"/></nic></cpu>"
      "<cpu numaid=\"2\" affinity=\"00ff0000\" arch=\"x86_64\" vendor=\"AuthenticAMD\"/>"
      "<cpu numaid=\"3\" affinity=\"ff000000\" arch=\"x86_64\" vendor=\"AuthenticAMD\"/></system>");
  std::vector<RankLocation> ranks;
  for (int r = 0; r < 8; ++r) ranks.push_back({7, "", r % 4});
  Result<Plan> p = planChannels(s, ranks);
  ASSERT_TRUE(p.ok());
  const std::vector<int>& ring = p->rings[0];
  int crossings = 0;
  for (size_t i = 0; i < 8; ++i) crossings += (ring[i] % 4) != (ring[(i + 1) % 8] % 4);
  EXPECT_EQ(crossings, 4);  // each NUMA node's two ranks are neighbours
  EXPECT_EQ(p->nChannels, 1);
  for (int nic : p->rankNic) EXPECT_EQ(nic, s.nics()[0]);
  EXPECT_EQ(s.cpuList(s.cpus()[1]).front(), 8);
}

TEST(Plan, HelperThreadsPinnedToTheirRanksNumaNodeOnlyWhereThereAreSeveral) {
  System two = fromXml(
      "<system version=\"1\">"
      "<cpu numaid=\"0\" affinity=\"0000000f\" arch=\"x86_64\" vendor=\"GenuineIntel\"/>"
      "<cpu numaid=\"1\" affinity=\"000000f0\" arch=\"x86_64\" vendor=\"GenuineIntel\"/></system>");
  EXPECT_EQ(helperCpus(two, 1, true), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(helperCpus(two, 0, true), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_TRUE(helperCpus(two, 1, false).empty());   // SNCCL_NUMA_BIND=0
  EXPECT_TRUE(helperCpus(two, -1, true).empty());   // node unknown
  EXPECT_TRUE(helperCpus(two, 5, true).empty());    // node not in the System
  System one = fromXml(
      "<system version=\"1\">"
      "<cpu numaid=\"0\" affinity=\"000000ff\" arch=\"x86_64\" vendor=\"GenuineIntel\"/></system>");
  EXPECT_TRUE(helperCpus(one, 0, true).empty());    // one node: nothing to gain
}

TEST(Plan, UnknownDevicesKeepRankOrderAndErrorsAreValues) {
  std::string f = topoPath("nccl/azure-ndv5_8xH100-sxm5_8xNDR-ib_2numa-sapphirerapids.partial.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  std::vector<RankLocation> ranks = {{1, "0000:99:00.0", -1}, {1, "0001:00:00.0", -1}, {1, "0009:00:00.0", -1}};
  Result<Plan> p = planChannels(s, ranks);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->rings[0], (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(p->rankNic[0], -1);
  EXPECT_FALSE(planChannels(s, std::vector<RankLocation>{}).ok());
  Result<Plan> one = planChannels(s, std::vector<RankLocation>{{1, "0001:00:00.0", -1}});
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->rings[0], (std::vector<int>{0}));
}

TEST(Plan, DeterministicAcrossCalls) {
  std::string f = topoPath("nccl/aws-p4d.24xlarge_8xA100-sxm4_4xEFA_2socket-cascadelake.partial.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  std::vector<RankLocation> ranks = onePerGpu(s);
  std::swap(ranks[1], ranks[6]);
  Result<Plan> a = planChannels(s, ranks), b = planChannels(s, ranks);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->rings, b->rings);
  EXPECT_EQ(a->nChannels, 2);
  std::vector<int> eps;
  for (int r : a->rings[0]) eps.push_back(s.findByBusId(ranks[static_cast<size_t>(r)].busId));
  int sys = 0;
  for (size_t i = 0; i < eps.size(); ++i) sys += s.path(eps[i], eps[(i + 1) % eps.size()]).type == PathType::kSys;
  EXPECT_EQ(sys, 2);
}

}  // namespace
}  // namespace snccl::topo
