// Every NCCL topology XML file in tests/topology/data/nccl (sources in data/sources.md): device counts, path classes,
// NVLink bandwidths, GPU-NIC pairing, rings, and the read-write-read round trip.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "topo_test_util.h"
#include "topology/planner.h"

namespace snccl::topo {
namespace {

using testing::byBus;
using testing::expectVisitsEachGpuOnce;
using testing::gpuAt;
using testing::linkBw;
using testing::mustLoad;
using testing::roundTrip;
using testing::topoFiles;
using testing::topoPath;

struct Counts {
  size_t cpus, gpus, nics, nvSwitches;
};

void expectCounts(const System& s, Counts c) {
  EXPECT_EQ(s.cpus().size(), c.cpus);
  EXPECT_EQ(s.gpus().size(), c.gpus);
  EXPECT_EQ(s.nics().size(), c.nics);
  if (c.nvSwitches == 0) {
    EXPECT_EQ(s.nvs(), -1);
  } else {
    ASSERT_GE(s.nvs(), 0);
    EXPECT_EQ(s.node(s.nvs()).nvSwitches.size(), c.nvSwitches);
  }
}

// Ring over all GPUs of the file, by the planner.
std::vector<int> gpuRing(const System& s) { return orderRing(s, s.gpus()); }

int hopsOfType(const System& s, const std::vector<int>& ring, PathType t) {
  int n = 0;
  for (size_t i = 0; i < ring.size(); ++i) n += s.path(ring[i], ring[(i + 1) % ring.size()]).type == t;
  return n;
}

// GPU i's NIC is the one under the same switch, and no NIC serves more than `perNic` GPUs.
void expectSiblingNics(const System& s, size_t perNic) {
  std::map<int, size_t> load;
  for (size_t i = 0; i < s.gpus().size(); ++i) {
    int g = s.gpus()[i], nic = s.gpuNics()[i];
    ASSERT_GE(nic, 0) << s.label(g);
    EXPECT_EQ(s.path(g, nic).type, PathType::kPix) << s.label(g) << " -> " << s.label(nic);
    EXPECT_EQ(s.node(g).parent, s.node(nic).parent);
    ++load[nic];
  }
  for (auto [nic, n] : load) EXPECT_LE(n, perNic) << s.label(nic);
}

TEST(NcclFiles, EveryFileLoadsAndRoundTrips) {
  std::vector<std::string> files = topoFiles("nccl");
  if (files.empty()) GTEST_SKIP() << "shared topology data missing under " << SNCCL_TOPO_DIR;
  EXPECT_EQ(files.size(), 7u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    System s = mustLoad(f);
    ASSERT_FALSE(s.cpus().empty());
    System back = roundTrip(s, f);
    EXPECT_TRUE(s == back) << writeNcclXml(s);
    EXPECT_EQ(writeNcclXml(back), writeNcclXml(s));
  }
}

TEST(NcclFiles, IbmCloudHgxH100) {
  std::string f = topoPath("nccl/ibmcloud-gx3d-hgx-h100-vm_8gpu_4nvswitch_8xcx7-200g_2socket-sapphirerapids.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {2, 8, 8, 4});
  for (size_t i = 0; i < 8; ++i) {
    int g = gpuAt(s, i);
    EXPECT_EQ(s.node(g).gpu.dev, static_cast<int>(i));
    EXPECT_EQ(s.node(g).gpu.sm, 90);
    // 5 + 5 + 4 + 4 NVLink4 links to the switches, NCCL's 20.6 GB/s each.
    EXPECT_NEAR(linkBw(s, g, s.nvs(), LinkType::kNvl), 370.8, 1e-9);
    EXPECT_EQ(s.numaOf(g), i < 4 ? 0 : 1);
  }
  const Path& p = s.path(gpuAt(s, 0), gpuAt(s, 7));
  EXPECT_EQ(p.type, PathType::kNvl);
  EXPECT_NEAR(p.bw, 370.8, 1e-9);
  EXPECT_EQ(s.pciPath(gpuAt(s, 0), gpuAt(s, 7)).type, PathType::kSys);
  EXPECT_EQ(s.pciPath(gpuAt(s, 0), gpuAt(s, 1)).type, PathType::kPhb);
  // One CX-7 per GPU on its virtual switch (1:1 PIX); the GPU/NIC links are Gen5 x16 (48).
  expectSiblingNics(s, 1);
  EXPECT_EQ(s.nicName(s.gpuNics()[0]), "mlx5_7");
  EXPECT_NEAR(s.path(gpuAt(s, 0), s.gpuNics()[0]).bw, 48.0, 1e-9);
  // The switch uplinks really are reported as 2.5 GT/s x1, and NCCL's rule follows them.
  EXPECT_NEAR(s.path(gpuAt(s, 0), s.cpus()[0]).bw, 1 * 15 / 80.0, 1e-9);
  EXPECT_NEAR(s.path(s.cpus()[0], s.cpus()[1]).bw, 22.0, 1e-9);  // Sapphire Rapids UPI
  std::vector<int> ring = gpuRing(s);
  expectVisitsEachGpuOnce(s, ring);
  EXPECT_EQ(hopsOfType(s, ring, PathType::kNvl), 8);
}

TEST(NcclFiles, HgxA100) {
  std::string f = topoPath("nccl/hgx-a100-80g_8gpu_6nvswitch_4xcx6dx-200g-bond_2socket-icelake.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {2, 8, 5, 6});
  for (int g : s.gpus()) EXPECT_NEAR(linkBw(s, g, s.nvs(), LinkType::kNvl), 240.0, 1e-9);  // 12 x 20
  int g0 = gpuAt(s, 0), g1 = gpuAt(s, 1), g2 = gpuAt(s, 2), g4 = gpuAt(s, 4);
  // Three levels of PEX switches: GPU pairs and their NIC are PXB, the other board half PHB.
  EXPECT_EQ(s.pciPath(g0, g1).type, PathType::kPxb);
  EXPECT_EQ(s.pciPath(g0, g2).type, PathType::kPhb);
  EXPECT_EQ(s.pciPath(g0, g4).type, PathType::kSys);
  int bond0 = byBus(s, "0000:06:00.0"), bond1 = byBus(s, "0000:1a:00.0");
  EXPECT_EQ(s.path(g1, bond1).type, PathType::kPxb);
  EXPECT_EQ(s.path(g0, bond1).type, PathType::kPxb);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.path(gpuAt(s, static_cast<size_t>(i)), bond0).type, PathType::kPhb);
  // Two GPUs per bond NIC; bond_0 (on the CPU root) serves none.
  for (size_t i = 0; i < 8; ++i) {
    int nic = s.gpuNics()[i];
    EXPECT_EQ(s.path(gpuAt(s, i), nic).type, PathType::kPxb);
    EXPECT_EQ(s.nicName(nic), "mlx5_bond_" + std::to_string(1 + i / 2));
  }
  EXPECT_EQ(s.node(bond0).nic.nets[0].speedMbps, 200000);
  std::vector<int> ring = gpuRing(s);
  expectVisitsEachGpuOnce(s, ring);
  EXPECT_EQ(hopsOfType(s, ring, PathType::kNvl), 8);
}

TEST(NcclFiles, AzureNdv4PartialTwoGpusTwoNicsPerSwitch) {
  std::string f = topoPath("nccl/azure-ndv4_8xA100-sxm4_8xHDR-ib_4numa-epyc-rome.partial.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {4, 8, 8, 0});
  for (int g : s.gpus()) EXPECT_FALSE(s.node(g).gpu.present);  // bare <pci> GPUs
  for (int n : s.nics()) EXPECT_FALSE(s.node(n).nic.present);
  expectSiblingNics(s, 1);
  EXPECT_EQ(s.path(gpuAt(s, 0), gpuAt(s, 1)).type, PathType::kPix);
  EXPECT_NEAR(s.path(gpuAt(s, 0), gpuAt(s, 1)).bw, 24.0, 1e-9);  // Gen4 x16
  const Path& cross = s.path(gpuAt(s, 0), gpuAt(s, 2));
  EXPECT_EQ(cross.type, PathType::kSys);
  EXPECT_NEAR(cross.bw, 16.0, 1e-9);  // AMD xGMI, NCCL's AMD_BW
  std::vector<int> ring = gpuRing(s);
  expectVisitsEachGpuOnce(s, ring);
  EXPECT_EQ(hopsOfType(s, ring, PathType::kSys), 4);  // each NUMA node entered once
  EXPECT_EQ(hopsOfType(s, ring, PathType::kPix), 4);
}

TEST(NcclFiles, AzureNdv5PartialOneGpuOneNicPerSwitch) {
  std::string f = topoPath("nccl/azure-ndv5_8xH100-sxm5_8xNDR-ib_2numa-sapphirerapids.partial.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {2, 8, 8, 0});
  expectSiblingNics(s, 1);
  for (size_t i = 0; i < 8; ++i) EXPECT_NEAR(s.path(gpuAt(s, i), s.gpuNics()[i]).bw, 48.0, 1e-9);  // Gen5 x16
  EXPECT_EQ(s.path(gpuAt(s, 0), gpuAt(s, 1)).type, PathType::kPhb);
  EXPECT_EQ(s.path(gpuAt(s, 0), gpuAt(s, 4)).type, PathType::kSys);
  EXPECT_NEAR(s.path(gpuAt(s, 0), gpuAt(s, 4)).bw, 22.0, 1e-9);
  std::vector<int> ring = gpuRing(s);
  expectVisitsEachGpuOnce(s, ring);
  EXPECT_EQ(hopsOfType(s, ring, PathType::kSys), 2);
}

TEST(NcclFiles, AzureNcv4SelfTargetedNvlinksAndNicUnderCpu) {
  std::string f = topoPath("nccl/azure-ncv4_4xA100-pcie_nvlink-bridge-pairs_4numa-epyc-milan.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {4, 4, 1, 0});
  // Each GPU's <nvlink> names the GPU itself (the VM remaps bus ids): unusable, noted.
  size_t selfNotes = 0;
  for (const std::string& n : s.notes()) selfNotes += n.find("report the GPU itself") != std::string::npos;
  EXPECT_EQ(selfNotes, 4u);
  for (int a : s.gpus()) {
    EXPECT_EQ(s.node(a).gpu.nvlinks.size(), 1u);  // kept for the round trip
    for (int b : s.gpus())
      if (a != b) {
        EXPECT_EQ(s.path(a, b).type, PathType::kSys);
      }
  }
  int nic = s.nics()[0];
  EXPECT_TRUE(s.node(nic).pci.busId.empty());
  EXPECT_EQ(s.node(nic).parent, s.cpus()[0]);
  EXPECT_EQ(s.nicName(nic), "eth0");
  EXPECT_EQ(s.path(gpuAt(s, 0), nic).type, PathType::kPhb);
  EXPECT_EQ(s.path(gpuAt(s, 1), nic).type, PathType::kSys);
  // link_speed="" and link_width="0": NCCL's defaults, Gen3 x16.
  EXPECT_NEAR(s.path(gpuAt(s, 0), s.cpus()[0]).bw, 12.0, 1e-9);
  EXPECT_EQ(s.numaOf(gpuAt(s, 3)), 3);
}

TEST(NcclFiles, AwsP4dPartialTwoGpusPerEfa) {
  std::string f = topoPath("nccl/aws-p4d.24xlarge_8xA100-sxm4_4xEFA_2socket-cascadelake.partial.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {2, 8, 4, 0});
  expectSiblingNics(s, 2);
  EXPECT_EQ(s.gpuNics()[0], s.gpuNics()[1]);
  EXPECT_NE(s.gpuNics()[1], s.gpuNics()[2]);
  EXPECT_NEAR(s.path(gpuAt(s, 0), gpuAt(s, 4)).bw, 10.0, 1e-9);  // Cascade Lake (model 85): SKL_QPI_BW
  EXPECT_EQ(s.node(gpuAt(s, 0)).pci.busId, "0000:10:1c.0");
}

TEST(NcclFiles, AwsG5MinimalIsCompletedByDetectedDevices) {
  std::string f = topoPath("nccl/aws-g5.48xlarge_8xA10G-pcie-only_2numa.minimal.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  expectCounts(s, {2, 0, 0, 0});
  size_t pci = 0;
  for (const Node& n : s.nodes()) pci += n.type == NodeType::kPci;
  EXPECT_EQ(pci, 9u);
  // What discovery would report on the VM: the file's bus ids as GPUs and the NIC, plus
  // one GPU the file does not know.
  std::string live = "<system version=\"1\">\n <cpu numaid=\"0\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"23\" modelid=\"49\">\n";
  const char* buses[] = {"16", "17", "18", "19", "1a", "1b", "1c", "1d"};
  for (int i = 0; i < 8; ++i) {
    if (i == 4) live += " </cpu>\n <cpu numaid=\"1\" arch=\"x86_64\" vendor=\"AuthenticAMD\" familyid=\"23\" modelid=\"49\">\n";
    live += format("  <pci busid=\"0000:00:%s.0\" class=\"0x030000\" vendor=\"0x10de\" device=\"0x2237\" link_speed=\"8.0 GT/s PCIe\" "
                   "link_width=\"16\"><gpu dev=\"%d\" sm=\"86\" rank=\"%d\" gdr=\"1\"/></pci>\n",
                   buses[i], i, i);
  }
  live += "  <pci busid=\"0000:00:15.0\" class=\"0x020000\"><nic><net name=\"rdmap0s21\" dev=\"0\" speed=\"100000\"/></nic></pci>\n";
  live += "  <pci busid=\"0000:00:1e.0\" class=\"0x030000\"><gpu dev=\"8\" sm=\"86\"/></pci>\n </cpu>\n</system>\n";
  Result<System> detected = readNcclXml(live, "live");
  ASSERT_TRUE(detected.ok()) << detected.status().message();
  Result<System> merged = mergeDetected(s, detected.value());
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  const System& m = merged.value();
  expectCounts(m, {2, 9, 1, 0});
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(m.node(gpuAt(m, i)).gpu.sm, 86);
    EXPECT_EQ(m.numaOf(gpuAt(m, i)), i < 4 ? 0 : 1);
  }
  EXPECT_EQ(m.nicName(m.nics()[0]), "rdmap0s21");
  EXPECT_EQ(m.numaOf(m.nics()[0]), 1);
  bool noted = false;
  for (const std::string& n : m.notes()) noted = noted || n.find("0000:00:1e.0 is not in the topology file") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_TRUE(m == roundTrip(m, "merged"));
}

TEST(NcclFiles, PartialFileKeepsItsStructureWhenMerged) {
  std::string f = topoPath("nccl/azure-ndv5_8xH100-sxm5_8xNDR-ib_2numa-sapphirerapids.partial.nccl.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  Result<System> live = readNcclXml(
      "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0001:00:00.0\" class=\"0x030200\" link_speed=\"32.0 GT/s PCIe\" link_width=\"16\">"
      "<gpu dev=\"0\" sm=\"90\"><nvlink target=\"fffffff:ffff:ff\" count=\"18\" tclass=\"0x068000\"/></gpu></pci></cpu></system>",
      "live");
  ASSERT_TRUE(live.ok()) << live.status().message();
  Result<System> m = mergeDetected(s, live.value());
  ASSERT_TRUE(m.ok()) << m.status().message();
  int g = m->findByBusId("0001:00:00.0");
  ASSERT_GE(g, 0);
  EXPECT_TRUE(m->node(g).gpu.present);
  EXPECT_EQ(m->node(g).gpu.sm, 90);
  EXPECT_EQ(m->node(m->node(g).parent).pci.busId, "ffff:ff:01.0");  // the file's switch
  EXPECT_GE(m->nvs(), 0);
}

}  // namespace
}  // namespace snccl::topo
