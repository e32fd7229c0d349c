// Derived parts of a System: the NVS node, typed links with NCCL's bandwidths, the path
// class and bandwidth between every pair of endpoints, and the GPU -> NIC pairing.
//
// Path classes follow NCCL's rules restated on the tree: NVLink first (direct or through
// the NVSwitch: NVL; through one peer GPU: NVB), else the PCIe route: both devices on one
// switch PIX, several switches PXB, through a host bridge PHB, through the CPU between two
// host bridges NODE (NCCL: PHB), through the CPU interconnect SYS. Bandwidth is the
// narrowest link of the route.
#include <algorithm>
#include <climits>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "topology/bandwidth.h"
#include "topology/system.h"

namespace snccl::topo {

using Links = std::vector<std::vector<Link>>;

// Link bandwidth by (a, b, type) in constant time: a CPU has a link to every device below
// it, so scanning its list for each pair of endpoints would cost nodes x endpoints^2.
class LinkIndex {
 public:
  explicit LinkIndex(const Links& links) {
    for (size_t a = 0; a < links.size(); ++a)
      for (const Link& l : links[a]) {
        double& v = bw_[key(static_cast<int>(a), l.to, l.type)];
        if (v == 0) v = l.bw;  // the first link of a type wins, as the linear scan did
        if (l.type == LinkType::kLoc) loc_[static_cast<int>(a)].push_back(l.to);
      }
  }
  double bw(int a, int b, LinkType type) const {
    auto it = bw_.find(key(a, b, type));
    return it == bw_.end() ? 0 : it->second;
  }
  // The <pcilink> peers of a node.
  const std::vector<int>& loc(int a) const {
    static const std::vector<int> kNone;
    auto it = loc_.find(a);
    return it == loc_.end() ? kNone : it->second;
  }

 private:
  static uint64_t key(int a, int b, LinkType t) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 35) | (static_cast<uint64_t>(static_cast<uint32_t>(b)) << 3) |
           static_cast<uint64_t>(t);
  }
  std::unordered_map<uint64_t, double> bw_;
  std::unordered_map<int, std::vector<int>> loc_;
};

namespace {

constexpr int64_t kClassNvs = 0x068000;
constexpr int64_t kClassCpu = 0x068001;

void addLink(Links& links, int a, int b, LinkType type, double bw) {
  links[static_cast<size_t>(a)].push_back({b, type, bw});
  links[static_cast<size_t>(b)].push_back({a, type, bw});
}

int rootOf(const std::vector<Node>& nodes, int id) {
  while (nodes[static_cast<size_t>(id)].parent >= 0) id = nodes[static_cast<size_t>(id)].parent;
  return id;
}

// The bandwidth of a node's link to its tree parent.
double treeLinkBw(const Node& n) {
  if (n.type == NodeType::kPci && n.pciKind == PciKind::kHostBridge) return bw::kLoc;
  if (n.pci.busId.empty()) return bw::kLoc;  // <nic> directly under <cpu>
  return bw::pci(n.pci.linkGts, n.pci.linkWidth);
}

// Where an <nvlink> leads: the NVS node, the GPU's CPU, a GPU, or -1 with a note.
int resolveNvlink(const System& sys, const std::vector<Node>& nodes, int gpu, const NvLinkSpec& s,
                  const std::set<std::string>& switches, int nvs, std::vector<std::string>* notes) {
  const std::string& self = nodes[static_cast<size_t>(gpu)].pci.busId;
  std::string target = normalizeBusId(s.target);
  if (isNvsSentinel(s.target) || s.tclass == kClassNvs || switches.count(target)) return nvs;
  if (s.tclass == kClassCpu) return rootOf(nodes, gpu);
  if (target == self) {
    notes->push_back(format("GPU %s: %d NVLinks report the GPU itself as their peer (a VM's remapped bus ids?); "
                            "ignored, as NCCL does", self.c_str(), s.count));
    return -1;
  }
  int idx = target.empty() ? -1 : sys.findByBusId(target);
  if (idx >= 0 && nodes[static_cast<size_t>(idx)].type == NodeType::kGpu) return idx;
  if (idx < 0 && s.tclass == -1) return nvs;  // NCCL's default for an unknown peer class
  notes->push_back(format("GPU %s: NVLink target '%s' (class 0x%06llx) is not a GPU of this system; ignored",
                          self.c_str(), s.target.c_str(), static_cast<long long>(s.tclass)));
  return -1;
}

bool linksToNvs(const GpuAttrs& g, const std::set<std::string>& switches) {
  for (const NvLinkSpec& s : g.nvlinks)
    if (isNvsSentinel(s.target) || s.tclass == kClassNvs || switches.count(normalizeBusId(s.target))) return true;
  return false;
}

void addNvlinks(const System& sys, std::vector<Node>& nodes, Links& links, const std::set<std::string>& switches,
                int nvs, std::vector<std::string>* notes) {
  // Each GPU lists its own links; NCCL adds them per direction. Take the larger of the two
  // directions so a peer that lists fewer (or no) links does not make the link one-way.
  std::map<std::pair<int, int>, double> directed;
  for (size_t g = 0; g < nodes.size(); ++g) {
    const Node& n = nodes[g];
    if (n.type != NodeType::kGpu) continue;
    for (const NvLinkSpec& s : n.gpu.nvlinks) {
      int remote = resolveNvlink(sys, nodes, static_cast<int>(g), s, switches, nvs, notes);
      if (remote < 0 || s.count <= 0) continue;
      directed[{static_cast<int>(g), remote}] += s.count * bw::nvlinkPerLink(n.gpu.sm);
    }
    for (const C2cSpec& c : n.gpu.c2c)
      if (c.count > 0) addLink(links, static_cast<int>(g), rootOf(nodes, static_cast<int>(g)), LinkType::kC2c, bw::c2c(c.bwMBs, c.count));
  }
  for (const auto& [key, value] : directed) {
    auto [a, b] = key;
    auto rev = directed.find({b, a});
    if (rev != directed.end() && (b < a)) continue;  // handled from the other side
    double v = rev == directed.end() ? value : std::max(value, rev->second);
    addLink(links, a, b, LinkType::kNvl, v);
  }
}

void addStaticLinks(std::vector<Node>& nodes, Links& links, std::span<const int> cpus,
                    const std::unordered_map<std::string, int>& busIndex) {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].parent >= 0) addLink(links, static_cast<int>(i), nodes[i].parent, LinkType::kPci, treeLinkBw(nodes[i]));
  for (size_t i = 0; i < cpus.size(); ++i)
    for (size_t j = i + 1; j < cpus.size(); ++j)
      addLink(links, cpus[i], cpus[j], LinkType::kSys, bw::interCpu(nodes[static_cast<size_t>(cpus[i])].cpu));
  // <pcilink>: a direct path between two switches of one board (NCCL: LINK_LOC).
  std::set<std::pair<int, int>> seen;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& t : nodes[i].pciLinks) {
      auto it = busIndex.find(normalizeBusId(t));
      if (it == busIndex.end() || it->second == static_cast<int>(i)) continue;
      auto key = std::minmax(static_cast<int>(i), it->second);
      if (seen.insert(key).second) addLink(links, key.first, key.second, LinkType::kLoc, bw::kLoc);
    }
  }
}

// ---- paths ----

struct Up {
  int node;
  double bw;  // narrowest link from the start up to this node
};

class PathCalc {
 public:
  PathCalc(const std::vector<Node>& nodes, const Links& links, const LinkIndex& index, int nvs)
      : nodes_(nodes), links_(links), index_(index), nvs_(nvs) {}

  Path treePath(int a, int b) const;

  Path compute(int a, int b) const {
    if (a == b) return {PathType::kLoc, bw::kLoc, 0};
    NodeType ta = type(a), tb = type(b);
    if (ta == NodeType::kNvs || tb == NodeType::kNvs) {
      double v = index_.bw(a, b, LinkType::kNvl);
      return v > 0 ? Path{PathType::kNvl, v, 1} : Path{};
    }
    if (ta == NodeType::kGpu && tb == NodeType::kGpu) {
      Path p = nvlinkPath(a, b);
      if (p.type != PathType::kDis) return p;
    }
    if (ta == NodeType::kGpu || tb == NodeType::kGpu) {
      int g = ta == NodeType::kGpu ? a : b, o = g == a ? b : a;
      if (type(o) == NodeType::kCpu) {
        if (double v = index_.bw(g, o, LinkType::kNvl); v > 0) return {PathType::kNvl, v, 1};
        if (double v = index_.bw(g, o, LinkType::kC2c); v > 0) return {PathType::kC2c, v, 1};
      }
    }
    return treeRoute(a, b);
  }

 private:
  NodeType type(int id) const { return nodes_[static_cast<size_t>(id)].type; }
  const Node& node(int id) const { return nodes_[static_cast<size_t>(id)]; }

  double nvl(int a, int b) const { return index_.bw(a, b, LinkType::kNvl); }

  Path nvlinkPath(int a, int b) const {
    // Direct links or the NVSwitch, whichever is wider (a GPU may have both).
    Path best;
    if (double v = nvl(a, b); v > 0) best = {PathType::kNvl, v, 1};
    if (nvs_ >= 0) {
      double v = std::min(nvl(a, nvs_), nvl(nvs_, b));
      if (v > best.bw) best = {PathType::kNvl, v, 2};
    }
    if (best.type == PathType::kNvl) return best;
    double viaGpu = 0;
    for (const Link& l : links_[static_cast<size_t>(a)]) {
      if (l.type != LinkType::kNvl || type(l.to) != NodeType::kGpu) continue;
      double second = nvl(l.to, b);
      if (second > 0) viaGpu = std::max(viaGpu, std::min(l.bw, second));
    }
    if (viaGpu > 0) return {PathType::kNvb, viaGpu, 2};
    return {};
  }

  std::vector<Up> chain(int id) const {
    std::vector<Up> out{{id, bw::kLoc}};
    double cur = bw::kLoc;
    while (node(id).parent >= 0) {
      cur = std::min(cur, treeLinkBw(node(id)));
      id = node(id).parent;
      out.push_back({id, cur});
    }
    return out;
  }

  // Bandwidth from a device to its own CPU: the PCIe route or a direct NVLink/C2C.
  double toCpuBw(const std::vector<Up>& c) const {
    double v = c.back().bw;
    int cpu = c.back().node, dev = c.front().node;
    if (type(dev) == NodeType::kGpu) {
      v = std::max(v, index_.bw(dev, cpu, LinkType::kNvl));
      v = std::max(v, index_.bw(dev, cpu, LinkType::kC2c));
    }
    return v;
  }

  int hostBridgeIn(const std::vector<Up>& c, size_t below) const {
    for (size_t i = 0; i < below && i < c.size(); ++i)
      if (type(c[i].node) == NodeType::kPci && node(c[i].node).pciKind == PciKind::kHostBridge) return c[i].node;
    return -1;
  }

  const std::vector<Up>& chainOf(int id) const {
    auto it = chains_.find(id);
    if (it == chains_.end()) it = chains_.emplace(id, chain(id)).first;
    return it->second;
  }

  Path treeRoute(int a, int b) const {
    const std::vector<Up>& ca = chainOf(a);
    const std::vector<Up>& cb = chainOf(b);
    int ra = ca.back().node, rb = cb.back().node;
    int hops = static_cast<int>(ca.size() + cb.size()) - 2;
    if (ra != rb) {
      double v = std::min({toCpuBw(ca), index_.bw(ra, rb, LinkType::kSys), toCpuBw(cb)});
      return {PathType::kSys, v, hops + 1};
    }
    // Both chains end at the same root: the lowest common node is where they part,
    // counted from the root (linear in the depth).
    size_t common = 0;
    while (common < ca.size() && common < cb.size() &&
           ca[ca.size() - 1 - common].node == cb[cb.size() - 1 - common].node)
      ++common;
    size_t ia = ca.size() - common, ib = cb.size() - common;
    Path p{classify(ca, cb, ia, ib), std::min(ca[ia].bw, cb[ib].bw), static_cast<int>(ia + ib)};
    if (p.type >= PathType::kPhb) p = viaPciLink(ca, cb, p);
    return p;
  }

  PathType classify(const std::vector<Up>& ca, const std::vector<Up>& cb, size_t ia, size_t ib) const {
    const Node& l = node(ca[ia].node);
    if (l.type == NodeType::kCpu) {
      if (ia == 0 || ib == 0) return PathType::kPhb;  // a device and its own CPU
      int ha = hostBridgeIn(ca, ia), hb = hostBridgeIn(cb, ib);
      return (ha >= 0 && hb >= 0 && ha != hb) ? PathType::kNode : PathType::kPhb;
    }
    if (l.type == NodeType::kPci && l.pciKind == PciKind::kHostBridge) return PathType::kPhb;
    // A switch (or a device with children): one switch between them is PIX.
    return (ia <= 1 && ib <= 1) ? PathType::kPix : PathType::kPxb;
  }

  // A <pcilink> between switches above a and b keeps the route below the CPU: PXB.
  Path viaPciLink(const std::vector<Up>& ca, const std::vector<Up>& cb, Path p) const {
    for (size_t i = 1; i < ca.size(); ++i) {
      for (int to : index_.loc(ca[i].node)) {
        for (size_t j = 1; j < cb.size(); ++j) {
          if (cb[j].node != to) continue;
          return {PathType::kPxb, std::min(ca[i].bw, cb[j].bw), static_cast<int>(i + j + 1)};
        }
      }
    }
    return p;
  }

  const std::vector<Node>& nodes_;
  const Links& links_;
  const LinkIndex& index_;
  int nvs_;
  mutable std::unordered_map<int, std::vector<Up>> chains_;  // per endpoint, built on first use
};

Path PathCalc::treePath(int a, int b) const {
  if (a == b) return {PathType::kLoc, bw::kLoc, 0};
  if (type(a) == NodeType::kNvs || type(b) == NodeType::kNvs) return {};
  return treeRoute(a, b);
}

bool isEndpoint(NodeType t) { return t != NodeType::kPci; }

// Orders NIC candidates: class, bandwidth, hops, current load, source order.
bool betterNic(const Path& p, int load, const Path& q, int qload) {
  if (p.type != q.type) return p.type < q.type;
  if (p.bw != q.bw) return p.bw > q.bw;
  if (p.hops != q.hops) return p.hops < q.hops;
  return load < qload;
}

}  // namespace

Status deriveGraph(System* sys, const std::vector<std::string>& nvSwitches) {
  std::vector<Node>& nodes = sys->nodes_;
  std::set<std::string> switches;
  for (const std::string& s : nvSwitches)
    if (!normalizeBusId(s).empty()) switches.insert(normalizeBusId(s));
  bool anyNvs = !nvSwitches.empty();
  for (const Node& n : nodes) {
    if (n.type != NodeType::kGpu) continue;
    anyNvs = anyNvs || linksToNvs(n.gpu, switches);
    for (const NvLinkSpec& s : n.gpu.nvlinks) {
      std::string t = normalizeBusId(s.target);
      if (s.tclass == kClassNvs && !t.empty()) switches.insert(t);
    }
  }
  if (anyNvs) {
    Node nvs;
    nvs.type = NodeType::kNvs;
    nvs.nvSwitches.assign(switches.begin(), switches.end());
    sys->nvs_ = static_cast<int>(nodes.size());
    nodes.push_back(std::move(nvs));
  }
  std::vector<int> endpoints;
  sys->endpoint_.assign(nodes.size(), -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    NodeType t = nodes[i].type;
    if (t == NodeType::kCpu) sys->cpus_.push_back(static_cast<int>(i));
    if (t == NodeType::kGpu) sys->gpus_.push_back(static_cast<int>(i));
    if (t == NodeType::kNic) sys->nics_.push_back(static_cast<int>(i));
    if (!nodes[i].pci.busId.empty()) sys->busIndex_.emplace(nodes[i].pci.busId, static_cast<int>(i));
    if (isEndpoint(t)) {
      sys->endpoint_[i] = static_cast<int>(endpoints.size());
      endpoints.push_back(static_cast<int>(i));
    }
  }
  std::stable_sort(sys->gpus_.begin(), sys->gpus_.end(), [&](int x, int y) {
    int dx = nodes[static_cast<size_t>(x)].gpu.dev, dy = nodes[static_cast<size_t>(y)].gpu.dev;
    return (dx < 0 ? INT_MAX : dx) < (dy < 0 ? INT_MAX : dy);
  });
  sys->ordinal_.assign(nodes.size(), -1);
  for (const std::vector<int>* ids : {&sys->cpus_, &sys->gpus_, &sys->nics_})
    for (size_t k = 0; k < ids->size(); ++k) sys->ordinal_[static_cast<size_t>((*ids)[k])] = static_cast<int>(k);

  Links& links = sys->links_;
  links.assign(nodes.size(), {});
  addStaticLinks(nodes, links, sys->cpus_, sys->busIndex_);
  addNvlinks(*sys, nodes, links, switches, sys->nvs_, &sys->notes_);

  // Paths between endpoints only: PCI switches never end a path, so a file of many
  // switches costs memory linear in them.
  size_t n = endpoints.size();
  sys->nEndpoints_ = n;
  sys->paths_.assign(n * n, Path{});
  auto index = std::make_shared<const LinkIndex>(links);
  sys->linkIndex_ = index;
  PathCalc calc(nodes, links, *index, sys->nvs_);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = 0; b < n; ++b) sys->paths_[a * n + b] = calc.compute(endpoints[a], endpoints[b]);

  std::vector<int> load(nodes.size(), 0);
  for (int g : sys->gpus_) {
    int best = -1;
    for (int nic : sys->nics_) {
      if (best < 0 || betterNic(sys->path(g, nic), load[static_cast<size_t>(nic)], sys->path(g, best),
                                load[static_cast<size_t>(best)]))
        best = nic;
    }
    if (best >= 0) ++load[static_cast<size_t>(best)];
    sys->gpuNics_.push_back(best);
  }
  return OkStatus();
}

Path System::pciPath(int a, int b) const {
  if (linkIndex_ == nullptr) return {};
  return PathCalc(nodes_, links_, *linkIndex_, nvs_).treePath(a, b);
}

int System::nearestNic(int id) const {
  int best = -1;
  for (int nic : nics_)
    if (best < 0 || betterNic(path(id, nic), 0, path(id, best), 0)) best = nic;
  return best;
}

}  // namespace snccl::topo
