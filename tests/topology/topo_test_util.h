// Helpers shared by the topology tests: locating the shared topology files (skipping
// loudly when they are absent), loading them, and checks that several tests repeat.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "topology/discovery.h"
#include "topology/nccl_xml.h"
#include "topology/system.h"

namespace snccl::topo::testing {

inline std::string topoPath(const std::string& rel) { return std::string(SNCCL_TOPO_DIR) + "/" + rel; }

// A scratch file name private to this process (several people run the tests at once).
inline std::string tempPath(const std::string& name) {
  return ::testing::TempDir() + "snccl_topo_" + std::to_string(getpid()) + "_" + name;
}

// Every file of one kind ("nccl", "hwloc", "nvidia-smi"), sorted.
inline std::vector<std::string> topoFiles(const std::string& kind) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(topoPath(kind), ec))
    if (e.is_regular_file()) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Skips the test (visibly, with the path) when the shared data is not next to the checkout.
#define SNCCL_REQUIRE_TOPO(path)                                                          \
  if (!std::filesystem::exists(path))                                                    \
  GTEST_SKIP() << "shared topology data missing: " << (path)                             \
               << " (expected in tests/topology/data, sources in data/sources.md)"

inline System mustLoad(const std::string& path) {
  Result<System> r = loadTopologyFile(path);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? std::move(r).value() : System();
}

inline int gpuAt(const System& s, size_t i) { return s.gpus()[i]; }

inline int byBus(const System& s, const char* bus) {
  int id = s.findByBusId(bus);
  EXPECT_GE(id, 0) << "no device " << bus;
  return id;
}

// Link bandwidth between two nodes (0 when not linked).
inline double linkBw(const System& s, int a, int b, LinkType type) {
  for (const Link& l : s.links(a))
    if (l.to == b && l.type == type) return l.bw;
  return 0;
}

// Ring over endpoints: each GPU of the system exactly once.
inline void expectVisitsEachGpuOnce(const System& s, const std::vector<int>& ring) {
  std::multiset<int> seen(ring.begin(), ring.end());
  ASSERT_EQ(ring.size(), s.gpus().size());
  for (int g : s.gpus()) EXPECT_EQ(seen.count(g), 1u) << s.label(g);
}

// Write as NCCL XML, read back: for NCCL sources the System is identical; for others the
// second and third generation are (host bridges and hwloc-only data do not survive).
inline System roundTrip(const System& s, const std::string& what) {
  std::string text = writeNcclXml(s);
  Result<System> back = readNcclXml(text, what + " (written)");
  EXPECT_TRUE(back.ok()) << back.status().message() << "\n" << text;
  return back.ok() ? std::move(back).value() : System();
}

}  // namespace snccl::topo::testing
