// The flow-level fabric model of sn_sim (fabric_model.h).
#include "fabric_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <random>
#include <utility>
#include <vector>

namespace snccl::sim::fabric {

namespace {

constexpr double kEps = 1e-9;
constexpr double kNoCap = std::numeric_limits<double>::infinity();
constexpr int kMaxNics = 1 << 16;
constexpr int kRingRounds = 30;  // max-min with ring caps: rounds until no cap changes

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Link numbering: NIC up (NIC to leaf), NIC down, leaf to spine, spine to leaf.
struct Fabric {
  int nics, down, spines, leaves, leavesPerRail;
  const FabricSpec& spec;
  explicit Fabric(const FabricSpec& s)
      : nics(s.nodes * s.rails),
        down(s.radix / 2),
        spines(s.radix / 2),
        leaves(0),
        leavesPerRail((s.nodes + s.radix / 2 - 1) / (s.radix / 2)),
        spec(s) {
    leaves = s.topology == Topology::kRailOptimized ? leavesPerRail * s.rails : (nics + down - 1) / down;
  }
  int nic(int node, int rail) const { return node * spec.rails + rail; }
  int leafOf(int n) const {
    return spec.topology == Topology::kRailOptimized ? (n % spec.rails) * leavesPerRail + (n / spec.rails) / down
                                                     : n / down;
  }
  int links() const { return 2 * nics + 2 * leaves * spines; }
  int up(int n) const { return n; }
  int dn(int n) const { return nics + n; }
  int toSpine(int leaf, int s) const { return 2 * nics + leaf * spines + s; }
  int fromSpine(int leaf, int s) const { return 2 * nics + leaves * spines + leaf * spines + s; }
};

// A subflow crosses links, each with a weight: the share of its rate on that link (1, or
// 1/spines on each spine link of a sprayed flow).
struct Use {
  int link;
  double weight;
};
struct Subflow {
  std::vector<Use> links;
  double rate = 0, cap = kNoCap;
  bool done = false;  // its connection finished (AllToAll)
};

struct Conn {
  int src, dst;
  int first, count;  // its subflows
};

// Max-min fair rates of the subflows not done, each at most its cap. Water-filling: all
// live subflows share one rising level; a link saturates at the level where its frozen load
// plus the level times its live subflows' weights reaches 1, and then every live subflow
// through it keeps that level as its rate; a subflow also stops at its cap. The links'
// saturation levels sit in a heap (stale entries skipped), so one solve costs
// O(uses x log(links)).
void maxMin(std::vector<Subflow>& flows, int nlinks) {
  std::vector<double> frozenLoad(size_t(nlinks), 0.0), liveWeight(size_t(nlinks), 0.0);
  // The live subflows through each link (CSR over the links' uses).
  std::vector<int> start(size_t(nlinks) + 1, 0);
  std::vector<bool> live(flows.size(), false);
  size_t nlive = 0;
  for (size_t i = 0; i < flows.size(); ++i) {
    Subflow& f = flows[i];
    f.rate = 0;
    if (f.done || f.cap <= kEps) continue;
    live[i] = true;
    ++nlive;
    for (const Use& u : f.links) {
      liveWeight[size_t(u.link)] += u.weight;
      ++start[size_t(u.link) + 1];
    }
  }
  for (int l = 0; l < nlinks; ++l) start[size_t(l) + 1] += start[size_t(l)];
  std::vector<int> through(size_t(start[size_t(nlinks)]));
  {
    std::vector<int> at(start.begin(), start.end() - 1);
    for (size_t i = 0; i < flows.size(); ++i)
      if (live[i])
        for (const Use& u : flows[i].links) through[size_t(at[size_t(u.link)]++)] = int(i);
  }
  auto level = [&](int l) { return (1.0 - frozenLoad[size_t(l)]) / liveWeight[size_t(l)]; };
  using Entry = std::pair<double, int>;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  for (int l = 0; l < nlinks; ++l)
    if (liveWeight[size_t(l)] > kEps) heap.push({level(l), l});
  std::vector<int> byCap;
  for (size_t i = 0; i < flows.size(); ++i)
    if (live[i] && flows[i].cap != kNoCap) byCap.push_back(int(i));
  std::sort(byCap.begin(), byCap.end(), [&](int a, int b) { return flows[size_t(a)].cap > flows[size_t(b)].cap; });
  auto freeze = [&](int i, double rate) {
    live[size_t(i)] = false;
    --nlive;
    flows[size_t(i)].rate = rate;
    for (const Use& u : flows[size_t(i)].links) {
      frozenLoad[size_t(u.link)] += rate * u.weight;
      liveWeight[size_t(u.link)] -= u.weight;
      if (liveWeight[size_t(u.link)] > kEps) heap.push({level(u.link), u.link});
    }
  };
  while (nlive > 0) {
    while (!byCap.empty() && !live[size_t(byCap.back())]) byCap.pop_back();
    while (!heap.empty() && (liveWeight[size_t(heap.top().second)] <= kEps ||
                             std::abs(heap.top().first - level(heap.top().second)) > 1e-12))
      heap.pop();
    const double capLevel = byCap.empty() ? kNoCap : flows[size_t(byCap.back())].cap;
    const double linkLevel = heap.empty() ? kNoCap : heap.top().first;
    if (capLevel == kNoCap && linkLevel == kNoCap) break;  // cannot happen: every subflow uses a link
    if (capLevel <= linkLevel) {
      const int i = byCap.back();
      byCap.pop_back();
      freeze(i, capLevel);
      continue;
    }
    const int l = heap.top().second;
    heap.pop();
    for (int k = start[size_t(l)]; k < start[size_t(l) + 1]; ++k)
      if (live[size_t(through[size_t(k)])]) freeze(through[size_t(k)], linkLevel);
  }
}

double connRate(const Conn& c, const std::vector<Subflow>& flows) {
  double r = 0;
  for (int k = 0; k < c.count; ++k) r += flows[size_t(c.first + k)].rate;
  return r;
}

// Places every connection's subflows on paths. ECMP: a spine per subflow from a hash of
// the connection and the subflow's index. Adaptive: the flow is sprayed over every spine
// equally (packet by packet, as adaptive routing in the switches does, with the receiving
// NIC putting packets back in order), so one subflow covers all paths.
void route(const Fabric& fab, const RunSpec& spec, std::vector<Conn>& conns, std::vector<Subflow>& flows,
           int* crossLeaf) {
  flows.clear();
  *crossLeaf = 0;
  for (Conn& c : conns) {
    c.first = int(flows.size());
    const int ls = fab.leafOf(c.src), ld = fab.leafOf(c.dst);
    const bool spray = spec.routing == Routing::kAdaptive && ls != ld;
    c.count = spray ? 1 : spec.subflows;
    if (ls != ld) ++*crossLeaf;
    for (int k = 0; k < c.count; ++k) {
      Subflow f;
      f.links.push_back({fab.up(c.src), 1.0});
      f.links.push_back({fab.dn(c.dst), 1.0});
      if (spray) {
        for (int s = 0; s < fab.spines; ++s) {
          f.links.push_back({fab.toSpine(ls, s), 1.0 / fab.spines});
          f.links.push_back({fab.fromSpine(ld, s), 1.0 / fab.spines});
        }
      } else if (ls != ld) {
        const int s = int(mix(spec.seed ^ mix(uint64_t(c.src) << 32 | uint32_t(c.dst)) ^ uint64_t(k) << 56) %
                          uint64_t(fab.spines));
        f.links.push_back({fab.toSpine(ls, s), 1.0});
        f.links.push_back({fab.fromSpine(ld, s), 1.0});
      }
      flows.push_back(std::move(f));
    }
  }
}

// Rings: each ring's rate is its slowest hop's; hops faster than their ring are capped at
// the ring's rate (shared over their subflows as they are now), and the rates are solved
// again, until no cap changes. Returns the sum of the ring rates.
double solveRings(const Fabric& fab, const std::vector<std::vector<int>>& rings, const std::vector<Conn>& conns,
                  std::vector<Subflow>& flows) {
  std::vector<double> ringRate(rings.size(), 0);
  for (int round = 0; round < kRingRounds; ++round) {
    maxMin(flows, fab.links());
    bool changed = false;
    for (size_t r = 0; r < rings.size(); ++r) {
      double slowest = kNoCap;
      for (int h : rings[r]) slowest = std::min(slowest, connRate(conns[size_t(h)], flows));
      ringRate[r] = slowest;
    }
    for (size_t r = 0; r < rings.size(); ++r)
      for (int h : rings[r]) {
        const Conn& c = conns[size_t(h)];
        const double x = connRate(c, flows);
        for (int k = 0; k < c.count; ++k) {
          Subflow& f = flows[size_t(c.first + k)];
          // A hop at its ring's rate is (one of) the ring's bottleneck(s): no cap, so it
          // may grow once other rings give room; a faster hop keeps what the ring uses.
          const double cap = x > ringRate[r] + 1e-7 ? f.rate * ringRate[r] / x : kNoCap;
          if (std::abs((cap == kNoCap ? 1e9 : cap) - (f.cap == kNoCap ? 1e9 : f.cap)) > 1e-7) changed = true;
          f.cap = cap;
        }
      }
    if (!changed) break;
  }
  double sum = 0;
  for (double r : ringRate) sum += r;
  return sum;
}

// One AllToAll phase: every connection moves 1 (a NIC's rate times a unit of time); the
// phase lasts until the last one is done. Connections that would finish within kBatch of
// the next one to finish end together, at the latest of their times (the model errs on the
// slow side), which bounds the number of rate solves.
constexpr double kBatch = 0.1;

double phaseTime(const Fabric& fab, const std::vector<Conn>& conns, std::vector<Subflow>& flows) {
  std::vector<double> left(conns.size(), 1.0), rate(conns.size(), 0.0);
  size_t active = conns.size();
  double t = 0;
  while (active > 0) {
    maxMin(flows, fab.links());
    double first = kNoCap;
    for (size_t i = 0; i < conns.size(); ++i)
      if (left[i] > 0) {
        rate[i] = connRate(conns[i], flows);
        if (rate[i] > kEps) first = std::min(first, left[i] / rate[i]);
      }
    if (first == kNoCap) return kNoCap;  // nothing moves: cannot happen with capacity everywhere
    double dt = first;
    for (size_t i = 0; i < conns.size(); ++i)
      if (left[i] > 0 && rate[i] > kEps && left[i] / rate[i] <= first * (1 + kBatch))
        dt = std::max(dt, left[i] / rate[i]);
    t += dt;
    for (size_t i = 0; i < conns.size(); ++i) {
      if (left[i] <= 0) continue;
      left[i] -= rate[i] * dt;
      if (left[i] <= 1e-9) {
        left[i] = 0;
        --active;
        for (int k = 0; k < conns[i].count; ++k) flows[size_t(conns[i].first + k)].done = true;
      }
    }
  }
  return t;
}

}  // namespace

const char* topologyName(Topology t) { return t == Topology::kRailOptimized ? "rail-optimized" : "fat-tree"; }
const char* routingName(Routing r) { return r == Routing::kEcmp ? "ecmp" : "adaptive"; }
const char* patternName(Pattern p) { return p == Pattern::kRing ? "ring" : p == Pattern::kHier ? "hier" : "alltoall"; }

Result<RunResult> run(const FabricSpec& fs, const RunSpec& spec) {
  if (fs.nodes < 2 || fs.rails < 1 || fs.radix < 2 || fs.radix % 2 != 0 || fs.nodes * fs.rails > kMaxNics)
    return InvalidArgument("fabric: %d nodes x %d rails on radix %d (at least 2 nodes, an even radix, at most %d NICs)",
                           fs.nodes, fs.rails, fs.radix, kMaxNics);
  if (spec.subflows < 1 || spec.subflows > 64 || spec.phases < 1)
    return InvalidArgument("fabric: %d subflows (1-64), %d AllToAll phases (at least 1)", spec.subflows, spec.phases);
  const Fabric fab(fs);
  std::mt19937_64 rng(spec.seed);
  std::vector<int> place(size_t(fs.nodes));
  std::iota(place.begin(), place.end(), 0);
  if (spec.randomPlacement) std::shuffle(place.begin(), place.end(), rng);
  std::vector<Conn> conns;
  std::vector<Subflow> flows;
  RunResult res;
  if (spec.pattern != Pattern::kAllToAll) {
    // One ring per rail (hier) or per channel (ring); hop i of ring r: logical node i to i+1.
    std::vector<std::vector<int>> rings(size_t(fs.rails));
    for (int r = 0; r < fs.rails; ++r)
      for (int i = 0; i < fs.nodes; ++i) {
        const int from = place[size_t(i)], to = place[size_t((i + 1) % fs.nodes)];
        const int dstRail = spec.pattern == Pattern::kHier ? r : (r + 1) % fs.rails;
        rings[size_t(r)].push_back(int(conns.size()));
        conns.push_back(Conn{fab.nic(from, r), fab.nic(to, dstRail), 0, 0});
      }
    route(fab, spec, conns, flows, &res.crossLeaf);
    res.connections = int(conns.size());
    // Every NIC sends on one hop and receives on one: the ideal is one NIC rate per ring.
    res.utilisation = solveRings(fab, rings, conns, flows) / fs.rails;
    return res;
  }
  // AllToAll: shift phases, sampled evenly over 1..nodes-1.
  const int nshift = std::min(spec.phases, fs.nodes - 1);
  double total = 0;
  for (int p = 0; p < nshift; ++p) {
    const int shift = 1 + int(int64_t(p) * (fs.nodes - 1) / nshift);
    conns.clear();
    for (int i = 0; i < fs.nodes; ++i)
      for (int r = 0; r < fs.rails; ++r)
        conns.push_back(Conn{fab.nic(place[size_t(i)], r), fab.nic(place[size_t((i + shift) % fs.nodes)], r), 0, 0});
    int cross = 0;
    route(fab, spec, conns, flows, &cross);
    res.crossLeaf += cross;
    res.connections += int(conns.size());
    if (spec.completion) {
      total += phaseTime(fab, conns, flows);
    } else {
      maxMin(flows, fab.links());
      double sum = 0;
      for (const Conn& c : conns) sum += connRate(c, flows);
      total += double(conns.size()) / sum;  // the phase's time at its starting throughput
    }
  }
  res.utilisation = nshift / total;
  res.connections /= nshift;
  res.crossLeaf /= nshift;
  return res;
}

}  // namespace snccl::sim::fabric
