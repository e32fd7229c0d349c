// Every hwloc XML export in tests/topology/data/hwloc (sources in data/sources.md), read through the hwloc library:
// device counts, PCIe path classes, NVLink from the NVLinkBandwidth matrix, NIC pairing,
// NUMA affinity, rings, and the NCCL XML round trip.
#include <gtest/gtest.h>

#include <map>

#include "topo_test_util.h"
#include "topology/hwloc_import.h"
#include "topology/planner.h"
#include "topology/xml.h"

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

#define SNCCL_REQUIRE_HWLOC() \
  if (!hwlocAvailable()) GTEST_SKIP() << "built without hwloc: hwloc XML cannot be read"

std::map<PathType, int> pciClassCounts(const System& s) {
  std::map<PathType, int> n;
  for (size_t i = 0; i < s.gpus().size(); ++i)
    for (size_t j = i + 1; j < s.gpus().size(); ++j) ++n[s.pciPath(gpuAt(s, i), gpuAt(s, j)).type];
  return n;
}

PathType ncclView(PathType t) { return t == PathType::kNode ? PathType::kPhb : t; }

TEST(HwlocFiles, EveryFileLoadsAndSurvivesNcclXml) {
  SNCCL_REQUIRE_HWLOC();
  std::vector<std::string> files = topoFiles("hwloc");
  if (files.empty()) GTEST_SKIP() << "shared topology data missing under " << SNCCL_TOPO_DIR;
  EXPECT_EQ(files.size(), 7u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    System a = mustLoad(f);
    ASSERT_FALSE(a.cpus().empty());
    // hwloc -> NCCL XML loses host bridges (NODE becomes PHB, as in NCCL); after that the
    // System is stable under write/read.
    System b = roundTrip(a, f);
    System c = roundTrip(b, f);
    EXPECT_TRUE(b == c);
    ASSERT_EQ(b.gpus().size(), a.gpus().size());
    ASSERT_EQ(b.nics().size(), a.nics().size());
    ASSERT_EQ(b.cpus().size(), a.cpus().size());
    for (size_t i = 0; i < a.gpus().size(); ++i) {
      EXPECT_EQ(b.node(gpuAt(b, i)).pci.busId, a.node(gpuAt(a, i)).pci.busId);
      EXPECT_EQ(b.node(gpuAt(b, i)).gpu.nvlinks, a.node(gpuAt(a, i)).gpu.nvlinks);
      for (size_t j = 0; j < a.gpus().size(); ++j) {
        EXPECT_EQ(b.path(gpuAt(b, i), gpuAt(b, j)).type, ncclView(a.path(gpuAt(a, i), gpuAt(a, j)).type));
        EXPECT_DOUBLE_EQ(b.path(gpuAt(b, i), gpuAt(b, j)).bw, a.path(gpuAt(a, i), gpuAt(a, j)).bw);
      }
    }
  }
}

TEST(HwlocFiles, Dgx2SixteenV100OnTwelveNvSwitches) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/nvidia-dgx2h_16xV100-sxm3_12nvswitch_2socket-skylake.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  ASSERT_EQ(s.gpus().size(), 16u);
  EXPECT_EQ(s.cpus().size(), 2u);
  EXPECT_EQ(s.nics().size(), 0u);
  ASSERT_GE(s.nvs(), 0);
  EXPECT_EQ(s.node(s.nvs()).nvSwitches.size(), 12u);
  for (size_t i = 0; i < 16; ++i) {
    int g = gpuAt(s, i);
    EXPECT_EQ(s.node(g).gpu.dev, static_cast<int>(i));  // nvml<i>
    EXPECT_EQ(s.node(g).gpu.sm, 70);                     // from "Tesla V100-SXM3-32GB-H"
    // hwloc: 6 x 25000 MB/s to 6 switches -> 6 NVLink2 links, NCCL's 20 GB/s each.
    int links = 0;
    for (const NvLinkSpec& l : s.node(g).gpu.nvlinks) links += l.count;
    EXPECT_EQ(links, 6);
    EXPECT_NEAR(linkBw(s, g, s.nvs(), LinkType::kNvl), 120.0, 1e-9);
    EXPECT_EQ(s.numaOf(g), i < 8 ? 0 : 1);
  }
  for (int a : s.gpus())
    for (int b : s.gpus())
      if (a != b) {
        EXPECT_EQ(s.path(a, b).type, PathType::kNvl);
      }
  // PCIe: PIX pairs on a leaf PLX, PXB within a board half, NODE to the socket's other
  // host bridge, SYS across sockets.
  int g0 = byBus(s, "0000:34:00.0");
  EXPECT_EQ(s.pciPath(g0, byBus(s, "0000:36:00.0")).type, PathType::kPix);
  EXPECT_EQ(s.pciPath(g0, byBus(s, "0000:39:00.0")).type, PathType::kPxb);
  EXPECT_EQ(s.pciPath(g0, byBus(s, "0000:57:00.0")).type, PathType::kNode);
  EXPECT_EQ(s.pciPath(g0, byBus(s, "0000:b7:00.0")).type, PathType::kSys);
  std::map<PathType, int> n = pciClassCounts(s);
  EXPECT_EQ(n[PathType::kPix], 8);
  EXPECT_EQ(n[PathType::kPxb], 16);
  EXPECT_EQ(n[PathType::kNode], 32);
  EXPECT_EQ(n[PathType::kSys], 64);
  EXPECT_NEAR(s.pciPath(g0, byBus(s, "0000:36:00.0")).bw, 12.0, 1e-9);  // Gen3 x16 (15.75 GB/s raw)
  EXPECT_NEAR(s.path(s.cpus()[0], s.cpus()[1]).bw, 10.0, 1e-9);          // Skylake UPI
  std::vector<int> ring = orderRing(s, s.gpus());
  expectVisitsEachGpuOnce(s, ring);
  for (size_t i = 0; i < ring.size(); ++i) EXPECT_EQ(s.path(ring[i], ring[(i + 1) % 16]).type, PathType::kNvl);
}

TEST(HwlocFiles, Power8NvlinkPairsAndCpuLinks) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/ibm-power8-s822lc_4xP100-nvlink_2socket.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  ASSERT_EQ(s.gpus().size(), 4u);
  EXPECT_EQ(s.cpus().size(), 2u);
  EXPECT_EQ(s.nvs(), -1);
  EXPECT_EQ(s.node(s.cpus()[0]).cpu.arch, "ppc64");
  int g0 = gpuAt(s, 0), g1 = gpuAt(s, 1), g2 = gpuAt(s, 2), g3 = gpuAt(s, 3);
  // 40000 MB/s = 2 x NVLink1; NCCL counts 18 GB/s per sm60 link.
  EXPECT_EQ(s.path(g0, g1).type, PathType::kNvl);
  EXPECT_NEAR(s.path(g0, g1).bw, 36.0, 1e-9);
  EXPECT_EQ(s.path(g2, g3).type, PathType::kNvl);
  EXPECT_EQ(s.path(g0, s.cpus()[0]).type, PathType::kNvl);  // GPU <-> POWER8 NVLink
  EXPECT_NEAR(s.path(g0, s.cpus()[0]).bw, 36.0, 1e-9);
  EXPECT_EQ(s.path(g0, g2).type, PathType::kSys);
  EXPECT_NEAR(s.path(g0, g2).bw, 32.0, 1e-9);  // via NVLink to the CPU, then the POWER bus
  EXPECT_EQ(s.pciPath(g0, g1).type, PathType::kNode);  // one GPU per host bridge
  std::vector<int> ring = orderRing(s, s.gpus());
  expectVisitsEachGpuOnce(s, ring);
  int nvl = 0;
  for (size_t i = 0; i < 4; ++i) nvl += s.path(ring[i], ring[(i + 1) % 4]).type == PathType::kNvl;
  EXPECT_EQ(nvl, 2);  // both NVLink pairs are ring hops
}

TEST(HwlocFiles, WestmereThreeTeslasAndIbNic) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/xeon-westmere-2socket_3xTesla-pcie-split_mlx4-ib.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  ASSERT_EQ(s.gpus().size(), 3u);
  ASSERT_EQ(s.nics().size(), 3u);
  for (int g : s.gpus()) EXPECT_FALSE(s.node(g).gpu.present);  // no GPU OS devices in the file
  int gpu0 = byBus(s, "0000:06:00.0"), ib = byBus(s, "0000:05:00.0");
  EXPECT_EQ(s.nicName(ib), "mlx4_0");
  EXPECT_EQ(s.numaOf(gpu0), 0);
  EXPECT_EQ(s.numaOf(byBus(s, "0000:14:00.0")), 1);
  EXPECT_EQ(s.numaOf(byBus(s, "0000:11:00.0")), 1);
  EXPECT_EQ(s.path(gpu0, ib).type, PathType::kPhb);
  EXPECT_EQ(s.nearestNic(gpu0), ib);  // Gen2 x4 IB beats the x1 Ethernet ports
  EXPECT_EQ(s.path(byBus(s, "0000:14:00.0"), byBus(s, "0000:11:00.0")).type, PathType::kPhb);
}

TEST(HwlocFiles, SandyBridgeWholeIoCudaAndOpenFabrics) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/xeon-sandybridge-2socket_k40-cuda_mlx5-ib_opencl.wholeio.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  EXPECT_EQ(s.gpus().size(), 3u);  // NVIDIA only: the AMD OpenCL GPU is not a CUDA device
  EXPECT_LT(s.findByBusId("0000:84:00.1"), 0);
  ASSERT_EQ(s.nics().size(), 3u);
  int cuda0 = byBus(s, "0000:84:00.0"), mlx5 = byBus(s, "0000:04:00.0");
  EXPECT_TRUE(s.node(cuda0).gpu.present);
  EXPECT_EQ(s.node(cuda0).gpu.dev, 0);
  EXPECT_EQ(s.node(cuda0).gpu.sm, 35);  // "Tesla K40m"
  EXPECT_EQ(gpuAt(s, 0), cuda0);         // known CUDA index first
  ASSERT_EQ(s.node(mlx5).nic.nets.size(), 1u);
  const NetPort& p = s.node(mlx5).nic.nets[0];
  EXPECT_EQ(p.name, "mlx5_0");
  EXPECT_TRUE(p.hasGuid);
  EXPECT_EQ(p.guid, 0x248a0703001e39feull);
  EXPECT_EQ(s.path(cuda0, mlx5).type, PathType::kPhb);
  EXPECT_EQ(s.numaOf(mlx5), 1);
}

TEST(HwlocFiles, CpuOnlyMachine) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/xeon-sandybridge-2socket_cpu-only.noio.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  EXPECT_EQ(s.gpus().size(), 0u);
  EXPECT_EQ(s.nics().size(), 0u);
  ASSERT_EQ(s.cpus().size(), 2u);
  std::vector<int> c0 = s.cpuList(s.cpus()[0]);
  ASSERT_EQ(c0.size(), 16u);
  EXPECT_EQ(c0.front(), 0);
  EXPECT_EQ(c0[8], 16);
  EXPECT_EQ(s.path(s.cpus()[0], s.cpus()[1]).type, PathType::kSys);
  EXPECT_EQ(s.nearestNic(s.cpus()[0]), -1);
}

TEST(HwlocFiles, DellR910NicsLocalToGroupsOfNumaNodes) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/dell-r910-4socket-westmere-ex_qlogic-ib_eth.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  EXPECT_EQ(s.gpus().size(), 0u);  // the Matrox VGA is not a GPU
  ASSERT_EQ(s.cpus().size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.node(s.cpus()[static_cast<size_t>(i)]).cpu.numaId, i);
  ASSERT_EQ(s.nics().size(), 5u);
  int qib = byBus(s, "0000:43:00.0");
  EXPECT_EQ(s.nicName(qib), "qib0");
  EXPECT_EQ(s.numaOf(qib), 1);  // local to the Group {1,3}: first node, with a note
  bool noted = false;
  for (const std::string& n : s.notes()) noted = noted || n.find("0000:43:00.0 is local to NUMA nodes 1,3") != std::string::npos;
  EXPECT_TRUE(noted);
  EXPECT_EQ(s.nearestNic(s.cpus()[1]), qib);
  EXPECT_EQ(s.path(s.cpus()[0], qib).type, PathType::kSys);
}

TEST(HwlocFiles, UsnicSriovVfsAreNotNics) {
  SNCCL_REQUIRE_HWLOC();
  std::string f = topoPath("hwloc/xeon-2socket_cisco-usnic-sriov-vfs.hwloc.xml");
  SNCCL_REQUIRE_TOPO(f);
  System s = mustLoad(f);
  int u0 = -1, u1 = -1, u2 = -1, eth0 = -1;
  for (int n : s.nics()) {
    std::string name = s.nicName(n);
    if (name == "usnic_0") u0 = n;
    if (name == "usnic_1") u1 = n;
    if (name == "usnic_2") u2 = n;
    if (name == "eth0") eth0 = n;
    EXPECT_TRUE(s.node(n).nic.present) << name;  // every NIC kept has a device to open
  }
  ASSERT_TRUE(u0 >= 0 && u1 >= 0 && u2 >= 0 && eth0 >= 0);
  EXPECT_EQ(s.path(u0, u1).type, PathType::kPix);   // one Cisco VIC switch
  EXPECT_EQ(s.path(u0, eth0).type, PathType::kPhb); // separate root ports
  EXPECT_EQ(s.path(u0, u2).type, PathType::kSys);
  bool noted = false;
  for (const std::string& n : s.notes()) noted = noted || n.find("Ethernet functions without a network device") != std::string::npos;
  EXPECT_TRUE(noted);
}

TEST(HwlocFiles, GpuModelToComputeCapability) {
  EXPECT_EQ(smFromGpuModel("NVIDIA A100-SXM4-80GB"), 80);
  EXPECT_EQ(smFromGpuModel("NVIDIA A10G"), 86);
  EXPECT_EQ(smFromGpuModel("NVIDIA H100 80GB HBM3"), 90);
  EXPECT_EQ(smFromGpuModel("NVIDIA H20"), 90);
  EXPECT_EQ(smFromGpuModel("NVIDIA L40S"), 89);
  EXPECT_EQ(smFromGpuModel("NVIDIA B200"), 100);
  EXPECT_EQ(smFromGpuModel("Tesla V100-SXM3-32GB-H"), 70);
  EXPECT_EQ(smFromGpuModel("Radeon"), 0);
}

TEST(HwlocFiles, BrokenHwlocXmlNamesTheLine) {
  SNCCL_REQUIRE_HWLOC();
  std::string p = testing::tempPath("broken.hwloc.xml");
  ASSERT_TRUE(writeTextFile(p, "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\">\n</topology>\n").ok());
  Result<System> r = loadTopologyFile(p);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(p + ":4: </topology> closes <object> opened at line 3"), std::string::npos)
      << r.status().message();
  std::remove(p.c_str());
}

}  // namespace
}  // namespace snccl::topo
