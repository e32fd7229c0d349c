// Rails ordered by NUMA locality (rail_order.h).
#include "transport/net/socket/rail_order.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace snccl::net::socknet {

const char* railLocalityName(RailLocality l) {
  switch (l) {
    case RailLocality::kLocal:
      return "local";
    case RailLocality::kUnknown:
      return "no NUMA node";
    case RailLocality::kRemote:
      return "remote";
  }
  return "?";
}

RailLocality railLocality(int nicNode, std::span<const int> localNodes) {
  if (nicNode < 0 || localNodes.empty()) return RailLocality::kUnknown;
  return std::find(localNodes.begin(), localNodes.end(), nicNode) != localNodes.end() ? RailLocality::kLocal
                                                                                      : RailLocality::kRemote;
}

std::vector<size_t> localityOrder(std::span<const int> nicNodes, std::span<const int> localNodes) {
  std::vector<size_t> order(nicNodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return railLocality(nicNodes[a], localNodes) < railLocality(nicNodes[b], localNodes);
  });
  return order;
}

int nicNumaNode(const std::string& sysRoot, const std::string& ifname) {
  std::ifstream f(sysRoot + "/class/net/" + ifname + "/device/numa_node");
  int node = -1;
  if (!(f >> node)) return -1;
  return node;  // the kernel writes -1 for a device without a node
}

std::vector<int> numaNodesOf(const std::string& sysRoot, const cpu_set_t& affinity) {
  // Each CPU's sysfs directory holds a "nodeN" link to its NUMA node.
  std::vector<int> nodes;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &affinity)) continue;
    DIR* d = opendir((sysRoot + "/devices/system/cpu/cpu" + std::to_string(cpu)).c_str());
    if (d == nullptr) continue;
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "node", 4) != 0 || !std::isdigit(static_cast<unsigned char>(e->d_name[4]))) continue;
      const int n = std::atoi(e->d_name + 4);
      if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
    }
    closedir(d);
  }
  std::sort(nodes.begin(), nodes.end());
  return nodes;
}

}  // namespace snccl::net::socknet
