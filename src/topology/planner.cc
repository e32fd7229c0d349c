// Channel planner. Intra-node ring search: exact for up to 16 ranks per node (the
// narrowest-hop threshold by binary search, then Held-Karp for the fewest slow hops
// among rings above it); locality order plus 2-opt beyond that.
#include "topology/planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "topology/bandwidth.h"

namespace snccl::topo {
namespace {

constexpr int kExactMax = 16;
constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max() / 4;

// Position of every node in a depth-first walk of the tree (CPUs in order): neighbours in
// this order share switches, so it is the natural PCIe ring and the tie-breaker.
std::vector<int> dfsPositions(const System& sys) {
  std::vector<int> pos(static_cast<size_t>(sys.size()), sys.size());
  int next = 0;
  std::vector<int> stack;
  for (auto it = sys.cpus().rbegin(); it != sys.cpus().rend(); ++it) stack.push_back(*it);
  while (!stack.empty()) {
    int id = stack.back();
    stack.pop_back();
    pos[static_cast<size_t>(id)] = next++;
    const auto& ch = sys.node(id).children;
    for (auto it = ch.rbegin(); it != ch.rend(); ++it) stack.push_back(*it);
  }
  return pos;
}

class RingSearch {
 public:
  RingSearch(const System& sys, std::span<const int> eps) : n_(static_cast<int>(eps.size())) {
    std::vector<int> pos = dfsPositions(sys);
    order_.resize(eps.size());
    for (int i = 0; i < n_; ++i) order_[static_cast<size_t>(i)] = i;
    // Locality order: endpoints by tree position, ties (same endpoint) by input order.
    std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) {
      return pos[static_cast<size_t>(eps[static_cast<size_t>(a)])] < pos[static_cast<size_t>(eps[static_cast<size_t>(b)])];
    });
    std::vector<int> rankInOrder(eps.size());
    for (int i = 0; i < n_; ++i) rankInOrder[static_cast<size_t>(order_[static_cast<size_t>(i)])] = i;
    bw_.assign(eps.size() * eps.size(), 0);
    cost_.assign(eps.size() * eps.size(), 0);
    for (int i = 0; i < n_; ++i) {
      for (int j = 0; j < n_; ++j) {
        const Path& p = sys.path(eps[static_cast<size_t>(i)], eps[static_cast<size_t>(j)]);
        size_t k = idx(i, j);
        bw_[k] = p.type == PathType::kDis ? 0 : p.bw;
        // Slow classes dominate (8x per class), then distance in locality order.
        int dist = std::abs(rankInOrder[static_cast<size_t>(i)] - rankInOrder[static_cast<size_t>(j)]);
        cost_[k] = (uint64_t(1) << (3 * static_cast<int>(p.type))) * 64 + static_cast<uint64_t>(std::min(dist, 63));
      }
    }
  }

  std::vector<int> solve() {
    if (n_ <= 3 || uniform()) return order_;
    std::vector<int> best = order_;
    if (n_ <= kExactMax) {
      std::vector<int> exact = exactRing();
      if (!exact.empty() && better(exact, best)) best = exact;
    } else {
      twoOpt(&best);
    }
    return best;
  }

 private:
  // Every pair equally close (one NVSwitch, one PCIe switch): locality order is optimal.
  bool uniform() const {
    for (int i = 0; i < n_; ++i)
      for (int j = 0; j < n_; ++j)
        if (i != j && (bw_[idx(i, j)] != bw_[idx(0, 1)] || cost_[idx(i, j)] >> 6 != cost_[idx(0, 1)] >> 6)) return false;
    return true;
  }

  size_t idx(int i, int j) const { return static_cast<size_t>(i) * static_cast<size_t>(n_) + static_cast<size_t>(j); }

  double bottleneck(const std::vector<int>& r) const {
    double b = std::numeric_limits<double>::max();
    for (size_t i = 0; i < r.size(); ++i) b = std::min(b, bw_[idx(r[i], r[(i + 1) % r.size()])]);
    return b;
  }
  uint64_t cost(const std::vector<int>& r) const {
    uint64_t c = 0;
    for (size_t i = 0; i < r.size(); ++i) c += cost_[idx(r[i], r[(i + 1) % r.size()])];
    return c;
  }
  bool better(const std::vector<int>& a, const std::vector<int>& b) const {
    double ba = bottleneck(a), bb = bottleneck(b);
    if (ba != bb) return ba > bb;
    return cost(a) < cost(b);
  }

  // Held-Karp over rings that use only hops of at least `minBw`; empty when none exists.
  std::vector<int> cheapestRing(double minBw) const {
    size_t full = size_t(1) << n_;
    std::vector<uint64_t> dp(full * static_cast<size_t>(n_), kInf);
    std::vector<int8_t> from(full * static_cast<size_t>(n_), -1);
    int start = order_[0];
    dp[(size_t(1) << start) * static_cast<size_t>(n_) + static_cast<size_t>(start)] = 0;
    for (size_t mask = 1; mask < full; ++mask) {
      if (!(mask & (size_t(1) << start))) continue;
      for (int last = 0; last < n_; ++last) {
        uint64_t cur = dp[mask * static_cast<size_t>(n_) + static_cast<size_t>(last)];
        if (cur >= kInf) continue;
        for (int nx = 0; nx < n_; ++nx) {
          if ((mask & (size_t(1) << nx)) || bw_[idx(last, nx)] < minBw) continue;
          size_t m2 = mask | (size_t(1) << nx);
          uint64_t v = cur + cost_[idx(last, nx)];
          size_t k = m2 * static_cast<size_t>(n_) + static_cast<size_t>(nx);
          if (v < dp[k]) {
            dp[k] = v;
            from[k] = static_cast<int8_t>(last);
          }
        }
      }
    }
    uint64_t best = kInf;
    int bestLast = -1;
    for (int last = 0; last < n_; ++last) {
      uint64_t v = dp[(full - 1) * static_cast<size_t>(n_) + static_cast<size_t>(last)];
      if (v >= kInf || last == start || bw_[idx(last, start)] < minBw) continue;
      v += cost_[idx(last, start)];
      if (v < best) {
        best = v;
        bestLast = last;
      }
    }
    if (bestLast < 0) return {};
    std::vector<int> ring;
    size_t mask = full - 1;
    for (int cur = bestLast; cur >= 0;) {
      ring.push_back(cur);
      int prev = from[mask * static_cast<size_t>(n_) + static_cast<size_t>(cur)];
      mask &= ~(size_t(1) << cur);
      cur = prev;
    }
    std::reverse(ring.begin(), ring.end());
    return ring;
  }

  std::vector<int> exactRing() const {
    std::vector<double> levels;
    for (int i = 0; i < n_; ++i)
      for (int j = 0; j < n_; ++j)
        if (i != j) levels.push_back(bw_[idx(i, j)]);
    std::sort(levels.begin(), levels.end(), std::greater<>());
    levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
    // The highest threshold that still admits a ring (feasibility is monotone).
    size_t lo = 0, hi = levels.size();  // answer in [lo, hi)
    std::vector<int> found;
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      std::vector<int> r = cheapestRing(levels[mid]);
      if (r.empty()) {
        lo = mid + 1;
      } else {
        found = std::move(r);
        hi = mid;
      }
    }
    return found;  // cheapest among the rings at the highest feasible threshold
  }

  void twoOpt(std::vector<int>* r) const {
    for (int pass = 0; pass < 50; ++pass) {
      bool improved = false;
      for (size_t i = 1; i + 1 < r->size(); ++i) {
        for (size_t j = i + 1; j < r->size(); ++j) {
          std::vector<int> cand = *r;
          std::reverse(cand.begin() + static_cast<long>(i), cand.begin() + static_cast<long>(j) + 1);
          if (better(cand, *r)) {
            *r = std::move(cand);
            improved = true;
          }
        }
      }
      if (!improved) return;
    }
  }

  int n_;
  std::vector<int> order_;
  std::vector<double> bw_;
  std::vector<uint64_t> cost_;
};

// The endpoint of a rank in `sys`: its GPU, else its NUMA node's CPU; -1 when unknown.
int endpointOf(const System& sys, const RankLocation& r) {
  if (!r.busId.empty()) {
    int id = sys.findByBusId(r.busId);
    return id >= 0 && sys.node(id).type == NodeType::kGpu ? id : -1;
  }
  for (int c : sys.cpus())
    if (sys.node(c).cpu.numaId == r.numa && r.numa >= 0) return c;
  return sys.cpus().empty() ? -1 : sys.cpus()[0];
}

int channelCount(const System& sys, const Plan& p, const PlanOptions& opt, bool gpus, bool multiNode) {
  int n = opt.minChannels;
  if (p.intraType == PathType::kNvl && !sys.gpus().empty()) {
    // One channel per NVLink of the narrowest hop, as NCCL's search ends up with.
    double per = bw::nvlinkPerLink(sys.node(sys.gpus()[0]).gpu.sm);
    n = std::max(n, static_cast<int>(std::lround(p.intraBw / per)));
  } else if (gpus) {
    n = std::max(n, 2);  // PCIe: NCCL's minimum for GPU rings
  }
  if (multiNode) n = std::max(n, static_cast<int>(sys.nics().size()));
  return std::clamp(n, 1, std::max(1, opt.maxChannels));
}

void buildTrees(Plan* p, int nranks) {
  int nNodes = static_cast<int>(p->nodes.size());
  int nTrees = p->nChannels + p->nChannels % 2;  // pairs: the two halves of a double tree
  for (int c = 0; c < nTrees; ++c) {
    const std::vector<int>& ring = p->rings[static_cast<size_t>(c % p->nChannels)];
    std::vector<int> nodeParent = binaryTreeParents(nNodes, c % 2 == 1);
    RankTree t;
    t.parent.assign(static_cast<size_t>(nranks), -1);
    t.children.assign(static_cast<size_t>(nranks), {});
    // Each node's ranks appear contiguously in the ring, head first.
    std::vector<int> head(static_cast<size_t>(nNodes), -1);
    size_t at = 0;
    for (int k = 0; k < nNodes; ++k) {
      size_t len = p->nodes[static_cast<size_t>(k)].size();
      head[static_cast<size_t>(k)] = ring[at];
      for (size_t i = 1; i < len; ++i) t.parent[static_cast<size_t>(ring[at + i])] = ring[at + i - 1];
      at += len;
    }
    for (int k = 0; k < nNodes; ++k) {
      int up = nodeParent[static_cast<size_t>(k)];
      if (up < 0) {
        t.root = head[static_cast<size_t>(k)];
      } else {
        t.parent[static_cast<size_t>(head[static_cast<size_t>(k)])] = head[static_cast<size_t>(up)];
      }
    }
    for (int r = 0; r < nranks; ++r)
      if (t.parent[static_cast<size_t>(r)] >= 0) t.children[static_cast<size_t>(t.parent[static_cast<size_t>(r)])].push_back(r);
    p->trees.push_back(std::move(t));
  }
}

}  // namespace

std::vector<int> orderRing(const System& sys, std::span<const int> endpoints) {
  std::vector<int> idx = RingSearch(sys, endpoints).solve();
  std::vector<int> out;
  for (int i : idx) out.push_back(endpoints[static_cast<size_t>(i)]);
  return out;
}

std::vector<int> binaryTreeParents(int n, bool mirrored) {
  std::vector<int> parent(static_cast<size_t>(std::max(n, 0)), -1);
  if (n <= 1) return parent;
  // In-order numbering 1..n: x's parent is x-b or x+b (b = lowest set bit of x), the one
  // whose lowest bit is 2b; positions above n are skipped by climbing further.
  auto up = [](int x) {
    int b = x & -x;
    return (x & (2 * b)) ? x - b : x + b;
  };
  int root = 1;
  while (root * 2 <= n) root *= 2;
  // Second tree: mirrored (even n) or shifted by one (odd n), so leaves of one tree are
  // interior in the other and both trees' bandwidth is used.
  auto place = [&](int i) { return !mirrored ? i + 1 : (n % 2 == 0 ? n - i : (i + 1) % n + 1); };
  std::vector<int> itemAt(static_cast<size_t>(n) + 1);
  for (int i = 0; i < n; ++i) itemAt[static_cast<size_t>(place(i))] = i;
  for (int x = 1; x <= n; ++x) {
    if (x == root) continue;
    int p = up(x);
    while (p > n) p = up(p);
    parent[static_cast<size_t>(itemAt[static_cast<size_t>(x)])] = itemAt[static_cast<size_t>(p)];
  }
  return parent;
}

Result<Plan> planChannels(const System& sys, std::span<const RankLocation> ranks, const PlanOptions& opt) {
  if (ranks.empty()) return InvalidArgument("planChannels: no ranks");
  Plan p;
  std::map<uint64_t, size_t> nodeOf;
  for (size_t r = 0; r < ranks.size(); ++r) {
    auto [it, fresh] = nodeOf.emplace(ranks[r].hostHash, p.nodes.size());
    if (fresh) p.nodes.emplace_back();
    p.nodes[it->second].push_back(static_cast<int>(r));
  }
  bool gpus = false;
  double minBw = std::numeric_limits<double>::max();
  PathType worst = PathType::kLoc;
  for (std::vector<int>& members : p.nodes) {
    std::vector<int> eps;
    for (int r : members) eps.push_back(endpointOf(sys, ranks[static_cast<size_t>(r)]));
    gpus = gpus || std::any_of(eps.begin(), eps.end(), [&](int e) { return e >= 0 && sys.node(e).type == NodeType::kGpu; });
    if (std::find(eps.begin(), eps.end(), -1) != eps.end() || members.size() < 2) continue;  // rank order
    std::vector<int> order = RingSearch(sys, eps).solve();
    std::vector<int> sorted;
    for (int i : order) sorted.push_back(members[static_cast<size_t>(i)]);
    for (size_t i = 0; i < order.size(); ++i) {
      const Path& hop = sys.path(eps[static_cast<size_t>(order[i])], eps[static_cast<size_t>(order[(i + 1) % order.size()])]);
      minBw = std::min(minBw, hop.bw);
      worst = std::max(worst, hop.type);
    }
    members = std::move(sorted);
  }
  p.intraType = worst;
  p.intraBw = minBw == std::numeric_limits<double>::max() ? 0 : minBw;
  p.nChannels = channelCount(sys, p, opt, gpus, p.nodes.size() > 1);
  for (int c = 0; c < p.nChannels; ++c) {
    std::vector<int> ring;
    for (const std::vector<int>& members : p.nodes) {
      size_t shift = (static_cast<size_t>(c) * members.size() / static_cast<size_t>(p.nChannels)) % members.size();
      for (size_t i = 0; i < members.size(); ++i) ring.push_back(members[(i + shift) % members.size()]);
    }
    p.rings.push_back(std::move(ring));
  }
  buildTrees(&p, static_cast<int>(ranks.size()));
  for (const RankLocation& r : ranks) {
    int ep = endpointOf(sys, r);
    int nic = -1;
    if (ep >= 0 && sys.node(ep).type == NodeType::kGpu) {
      auto g = std::find(sys.gpus().begin(), sys.gpus().end(), ep);
      nic = sys.gpuNics()[static_cast<size_t>(g - sys.gpus().begin())];
    } else if (ep >= 0) {
      nic = sys.nearestNic(ep);
    }
    p.rankNic.push_back(nic);
  }
  return p;
}

Result<std::vector<int>> planRing(const System& sys, std::span<const RankLocation> ranks) {
  SNCCL_ASSIGN_OR_RETURN(Plan p, planChannels(sys, ranks));
  return std::move(p.rings[0]);
}

}  // namespace snccl::topo
