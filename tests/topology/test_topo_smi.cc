// `nvidia-smi topo -m` matrices in tests/topology/data/nvidia-smi (sources in data/sources.md): the synthesized System
// reproduces every cell of the table, pairs GPUs with their PIX NICs, and malformed tables
// are rejected with file:line errors.
#include <gtest/gtest.h>

#include "topo_test_util.h"
#include "topology/planner.h"
#include "topology/smi.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

using testing::expectVisitsEachGpuOnce;
using testing::gpuAt;
using testing::roundTrip;
using testing::topoFiles;
using testing::topoPath;

SmiMatrix mustParse(const std::string& path) {
  Result<std::string> text = readTextFile(path);
  EXPECT_TRUE(text.ok());
  Result<SmiMatrix> m = parseSmiMatrix(text.ok() ? text.value() : "", path);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return m.ok() ? std::move(m).value() : SmiMatrix{};
}

// Node id of the matrix device with that name ("GPU3", "NIC0") in the synthesized System.
int deviceNode(const System& s, const SmiMatrix& m, size_t d) {
  return s.findByBusId(format("fffe:%02zx:00.0", d));
}

TEST(SmiFiles, SynthesizedSystemReproducesEveryCell) {
  std::vector<std::string> files = topoFiles("nvidia-smi");
  if (files.empty()) GTEST_SKIP() << "shared topology data missing under " << SNCCL_TOPO_DIR;
  EXPECT_EQ(files.size(), 4u);
  for (const std::string& f : files) {
    SCOPED_TRACE(f);
    SmiMatrix m = mustParse(f);
    Result<System> s = systemFromSmi(m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    size_t n = m.devices.size();
    for (size_t a = 0; a < n; ++a) {
      int na = deviceNode(*s, m, a);
      ASSERT_GE(na, 0) << m.devices[a];
      for (size_t b = 0; b < n; ++b) {
        if (m.cells[a][b].empty()) continue;  // unknown in a truncated table
        EXPECT_EQ(smiCell(*s, na, deviceNode(*s, m, b)), m.cells[a][b]) << m.devices[a] << " -> " << m.devices[b];
      }
    }
    System back = roundTrip(*s, f);
    EXPECT_TRUE(back == roundTrip(back, f));
    EXPECT_EQ(back.gpus().size(), s->gpus().size());
  }
}

TEST(SmiFiles, Rtx4090PcieOnly) {
  std::string f = topoPath("nvidia-smi/8x-rtx4090-pcie-only_2socket_1nic.nvidia-smi-topo.txt");
  SNCCL_REQUIRE_TOPO(f);
  SmiMatrix m = mustParse(f);
  ASSERT_EQ(m.devices.size(), 9u);
  EXPECT_EQ(m.nicNames[8], "mlx5_bond_0");
  EXPECT_EQ(m.cpuAffinity[4], "36-71,108-143");
  EXPECT_EQ(m.numa[4], 1);
  Result<System> s = systemFromSmi(m);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gpus().size(), 8u);
  EXPECT_EQ(s->nics().size(), 1u);
  EXPECT_EQ(s->cpus().size(), 2u);
  std::vector<int> cpus = s->cpuList(s->cpus()[0]);
  EXPECT_EQ(cpus.size(), 72u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s->gpuNics()[i], s->nics()[0]);
  EXPECT_EQ(s->path(gpuAt(*s, 4), s->nics()[0]).type, PathType::kSys);
  std::vector<int> ring = orderRing(*s, s->gpus());
  expectVisitsEachGpuOnce(*s, ring);
  int sys = 0;
  for (size_t i = 0; i < ring.size(); ++i) sys += s->path(ring[i], ring[(i + 1) % ring.size()]).type == PathType::kSys;
  EXPECT_EQ(sys, 2);  // cross the sockets once each way
}

TEST(SmiFiles, H100NvlinkMeshWithoutNvSwitch) {
  std::string f = topoPath("nvidia-smi/4x-h100-nv6-allpairs_4nic_8numa.nvidia-smi-topo.txt");
  SNCCL_REQUIRE_TOPO(f);
  Result<System> s = readSmiFile(f);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->nvs(), -1);  // 3 peers x 6 links = 18: direct links, no switch needed
  for (int a : s->gpus()) {
    EXPECT_EQ(s->node(a).gpu.nvlinks.size(), 3u);
    for (int b : s->gpus())
      if (a != b) {
        EXPECT_EQ(s->path(a, b).type, PathType::kNvl);
      }
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(s->path(gpuAt(*s, i), s->gpuNics()[i]).type, PathType::kPix);
  EXPECT_EQ(s->numaOf(gpuAt(*s, 0)), 3);
}

TEST(SmiFiles, HgxH100TruncatedTableUsesNvSwitch) {
  std::string f = topoPath("nvidia-smi/hgx-h100-8gpu-nv18_10nic_2socket.nvidia-smi-topo.partial.txt");
  SNCCL_REQUIRE_TOPO(f);
  SmiMatrix m = mustParse(f);
  ASSERT_EQ(m.devices.size(), 18u);
  EXPECT_EQ(m.cells[17][0], "SYS");  // NIC9's row came from the GPU0 column
  EXPECT_EQ(m.cells[13][3], "PIX");  // NIC5 <-> GPU3 (NIC3 is a storage NIC)
  EXPECT_EQ(m.cells[14][4], "PIX");  // NIC6 <-> GPU4
  Result<System> s = systemFromSmi(m);
  ASSERT_TRUE(s.ok());
  ASSERT_GE(s->nvs(), 0);
  EXPECT_EQ(s->nics().size(), 10u);
  for (size_t i = 0; i < 8; ++i) {
    int nic = s->gpuNics()[i];
    EXPECT_EQ(s->path(gpuAt(*s, i), nic).type, PathType::kPix);
  }
  EXPECT_EQ(smiCell(*s, gpuAt(*s, 0), gpuAt(*s, 7)), "NV18");
  std::vector<int> ring = orderRing(*s, s->gpus());
  expectVisitsEachGpuOnce(*s, ring);
  for (size_t i = 0; i < ring.size(); ++i) EXPECT_EQ(s->path(ring[i], ring[(i + 1) % 8]).type, PathType::kNvl);
}

TEST(SmiFiles, L40sNodeAndLegend) {
  std::string f = topoPath("nvidia-smi/4x-l40s-pcie-only_2socket_2nic.nvidia-smi-topo.txt");
  SNCCL_REQUIRE_TOPO(f);
  Result<System> s = readSmiFile(f);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->path(gpuAt(*s, 0), gpuAt(*s, 1)).type, PathType::kNode);
  EXPECT_EQ(s->nicName(s->nics()[0]), "mlx5_0");
  EXPECT_EQ(s->numaOf(s->nics()[1]), 1);
  EXPECT_EQ(s->path(s->nics()[0], s->nics()[1]).type, PathType::kPix);
}

TEST(SmiFiles, MalformedTablesNameFileAndLine) {
  using namespace std::string_view_literals;
  struct Case {
    std::string_view text;
    const char* expect;
  };
  const Case cases[] = {
      {"\tGPU0\tGPU1\nGPU0\t X \tFOO\nGPU1\tPIX\t X\n", "s.txt:2: row GPU0 column GPU1: unknown cell 'FOO'"},
      {"\tGPU0\tGPU1\nGPU0\t X\n", "s.txt:2: row GPU0 has 1 cells, the header names 2 devices"},
      {"hello\n", "s.txt:1: expected the header line"},
      {"\tGPU0\tGPU1\nGPU0\tPIX\tPIX\n", "s.txt:2: row GPU0 column GPU0: 'X' must be exactly on the diagonal"},
      {"\tGPU0\tGPU1\nGPU0\t X \tPIX\nGPU0\t X \tPIX\n", "s.txt:3: second row for GPU0"},
      {"\tGPU0\tGPU1\nGPU7\t X \tPIX\n", "s.txt:2: 'GPU7' is not a device of the header"},
      {"\tGPU0\tGPU0\n", "s.txt:1: device GPU0 named twice"},
      {"\n\tGPU0\tGPU1\n", "s.txt:2: the header is not followed by any device row"},
      // More links than an NCCL XML <nvlink count> may hold.
      {"\tGPU0\tGPU1\nGPU0\t X \tNV65\nGPU1\tNV65\t X\n", "s.txt:2: row GPU0 column GPU1: unknown cell 'NV65'"},
      {"\tGPU0\tGPU1\nGPU0\t X \tNV1818\n", "s.txt:2: row GPU0 column GPU1: unknown cell 'NV1818'"},
      // A legend name would carry the NUL into NCCL XML.
      {"\tGPU0\tNIC0\nGPU0\t X \tPIX\n\nLegend:\n  NIC0: ml\0x5\n"sv, "s.txt:5: NUL byte"},
  };
  for (const Case& c : cases) {
    Result<SmiMatrix> m = parseSmiMatrix(c.text, "s.txt");
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_NE(m.status().message().find(c.expect), std::string::npos) << m.status().message();
  }
}

}  // namespace
}  // namespace snccl::topo
