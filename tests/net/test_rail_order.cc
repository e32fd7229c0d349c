// The socket net's rail order by NUMA locality (transport/net/socket/rail_order.h): the
// pure order, and the sysfs readers on a fake sysfs tree of two NUMA nodes.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/temp_dir.h"
#include "transport/net/socket/rail_order.h"

namespace snccl::net::socknet {
namespace {

TEST(RailOrder, LocalNicsFirstThenUnknownThenRemoteEachInTheirOrder) {
  const std::vector<int> nics = {0, -1, 1, 1, -1, 0};
  const std::vector<int> local = {1};
  EXPECT_EQ(localityOrder(nics, local), (std::vector<size_t>{2, 3, 1, 4, 0, 5}));
  const std::vector<int> both = {0, 1};
  EXPECT_EQ(localityOrder(nics, both), (std::vector<size_t>{0, 2, 3, 5, 1, 4}));
  // Nothing known about the process: the order stays as matched.
  EXPECT_EQ(localityOrder(nics, {}), (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(railLocality(1, local), RailLocality::kLocal);
  EXPECT_EQ(railLocality(0, local), RailLocality::kRemote);
  EXPECT_EQ(railLocality(-1, local), RailLocality::kUnknown);
  EXPECT_STREQ(railLocalityName(RailLocality::kRemote), "remote");
}

// A sysfs tree: CPUs 0-1 on node 0, 2-3 on node 1; ethA on node 0, ethB on node 1, vethC
// virtual (no device), ethD's device without a node (-1).
struct FakeSysfs {
  sntest::TempDir dir{"snccl-sysfs"};
  FakeSysfs() {
    namespace fs = std::filesystem;
    for (int cpu = 0; cpu < 4; ++cpu)
      fs::create_directories(dir.path + "/devices/system/cpu/cpu" + std::to_string(cpu) + "/node" +
                             std::to_string(cpu / 2));
    const std::vector<std::pair<std::string, std::string>> nics = {{"ethA", "0"}, {"ethB", "1"}, {"ethD", "-1"}};
    for (const auto& [name, node] : nics) {
      fs::create_directories(dir.path + "/class/net/" + name + "/device");
      std::ofstream(dir.path + "/class/net/" + name + "/device/numa_node") << node << "\n";
    }
    fs::create_directories(dir.path + "/class/net/vethC");
  }
};

cpu_set_t cpus(std::initializer_list<int> list) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c : list) CPU_SET(c, &s);
  return s;
}

TEST(RailOrder, ReadsNicAndProcessNodesFromSysfs) {
  FakeSysfs sys;
  ASSERT_FALSE(sys.dir.path.empty());
  EXPECT_EQ(nicNumaNode(sys.dir.path, "ethA"), 0);
  EXPECT_EQ(nicNumaNode(sys.dir.path, "ethB"), 1);
  EXPECT_EQ(nicNumaNode(sys.dir.path, "vethC"), -1);
  EXPECT_EQ(nicNumaNode(sys.dir.path, "ethD"), -1);
  EXPECT_EQ(nicNumaNode(sys.dir.path, "missing"), -1);
  EXPECT_EQ(numaNodesOf(sys.dir.path, cpus({3})), (std::vector<int>{1}));
  EXPECT_EQ(numaNodesOf(sys.dir.path, cpus({1, 2})), (std::vector<int>{0, 1}));
  EXPECT_EQ(numaNodesOf(sys.dir.path, cpus({0, 1})), (std::vector<int>{0}));
  EXPECT_TRUE(numaNodesOf(sys.dir.path, cpus({7})).empty()) << "a CPU sysfs does not list";

  // A process on node 1 with ethA, ethB, vethC matched in that order: ethB, vethC, ethA.
  const std::vector<std::string> names = {"ethA", "ethB", "vethC"};
  std::vector<int> nodes;
  for (const std::string& n : names) nodes.push_back(nicNumaNode(sys.dir.path, n));
  const std::vector<int> local = numaNodesOf(sys.dir.path, cpus({2, 3}));
  std::vector<std::string> ordered;
  for (size_t k : localityOrder(nodes, local)) ordered.push_back(names[k]);
  EXPECT_EQ(ordered, (std::vector<std::string>{"ethB", "vethC", "ethA"}));
}

}  // namespace
}  // namespace snccl::net::socknet
