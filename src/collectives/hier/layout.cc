// Node layout of the hierarchical AllReduce: see layout.h.
#include "collectives/hier/layout.h"

#include <algorithm>
#include <unordered_map>

namespace snccl::sched {

Status makeNodeLayout(const CollArgs& a, const ChannelPlan& plan, NodeLayout* out) {
  const int n = a.nranks;
  if (!plan.hosts.empty() && plan.hosts.size() != static_cast<size_t>(n))
    return InvalidArgument("hierarchical AllReduce: %zu hosts for %d ranks", plan.hosts.size(), n);
  NodeLayout& l = *out;
  l = NodeLayout{};
  if (plan.hosts.empty()) {  // unknown: one node
    for (int r = 0; r < n; ++r) l.local.push_back(r);
    l.rail.push_back(a.rank);
    l.localPos = a.rank;
    l.rails = n;
    return OkStatus();
  }
  // O(nranks) per rank. Ranks of a node are usually consecutive: a run of one host skips
  // the hash lookup (the checker generates every rank of 8192-rank layouts).
  std::unordered_map<uint64_t, int> nodeOf;  // host -> node index, by lowest rank
  std::vector<int> nodeSize;
  std::vector<int> localIdx(static_cast<size_t>(n)), nodeIdx(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const uint64_t host = plan.hosts[static_cast<size_t>(r)];
    int node = 0;
    if (r > 0 && host == plan.hosts[static_cast<size_t>(r - 1)]) {
      node = nodeIdx[static_cast<size_t>(r - 1)];
    } else {
      auto [it, fresh] = nodeOf.try_emplace(host, static_cast<int>(nodeSize.size()));
      if (fresh) nodeSize.push_back(0);
      node = it->second;
    }
    nodeIdx[static_cast<size_t>(r)] = node;
    localIdx[static_cast<size_t>(r)] = nodeSize[static_cast<size_t>(node)]++;
  }
  l.nodes = static_cast<int>(nodeSize.size());
  l.rails = *std::min_element(nodeSize.begin(), nodeSize.end());
  l.even = l.rails == *std::max_element(nodeSize.begin(), nodeSize.end());
  const int myNode = nodeIdx[static_cast<size_t>(a.rank)];
  l.localPos = localIdx[static_cast<size_t>(a.rank)];
  l.railPos = myNode;
  const bool onRail = l.localPos < l.rails;
  if (onRail) l.rail.assign(nodeSize.size(), -1);
  for (int r = 0; r < n; ++r) {
    const size_t ur = static_cast<size_t>(r);
    if (nodeIdx[ur] == myNode) l.local.push_back(r);
    if (onRail && localIdx[ur] == l.localPos) l.rail[static_cast<size_t>(nodeIdx[ur])] = r;
  }
  return OkStatus();
}

}  // namespace snccl::sched
