// SystemBuilder and System accessors; link and path derivation is in paths.cc.
#include "topology/system.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <set>
#include <utility>

#include "topology/limits.h"

namespace snccl::topo {

const char* nodeTypeName(NodeType t) {
  switch (t) {
    case NodeType::kCpu: return "CPU";
    case NodeType::kPci: return "PCI";
    case NodeType::kGpu: return "GPU";
    case NodeType::kNic: return "NIC";
    case NodeType::kNvs: return "NVS";
  }
  return "?";
}

const char* linkTypeName(LinkType t) {
  switch (t) {
    case LinkType::kPci: return "PCI";
    case LinkType::kNvl: return "NVL";
    case LinkType::kC2c: return "C2C";
    case LinkType::kSys: return "SYS";
    case LinkType::kLoc: return "LOC";
  }
  return "?";
}

const char* pathTypeName(PathType t) {
  static constexpr const char* kNames[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                           "PHB", "NODE", "SYS", "NET", "DIS"};
  return kNames[static_cast<size_t>(t)];
}

int toNcclPathType(PathType t) {
  switch (t) {
    case PathType::kLoc: return 0;
    case PathType::kNvl: return 1;
    case PathType::kNvb: return 2;
    case PathType::kC2c: return 3;
    case PathType::kPix: return 4;
    case PathType::kPxb: return 5;
    case PathType::kPhb:
    case PathType::kNode: return 8;
    case PathType::kSys: return 9;
    case PathType::kNet: return 10;
    case PathType::kDis: return 11;
  }
  return 11;
}

namespace {

bool parseHex(std::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
            : (c >= 'a' && c <= 'f')                   ? c - 'a' + 10
            : (c >= 'A' && c <= 'F')                   ? c - 'A' + 10
                                                       : -1;
    if (d < 0) return false;
    v = v * 16 + static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

}  // namespace

std::string normalizeBusId(std::string_view text) {
  // [domain:]bus:dev.fn with hex fields; the domain may have up to 8 digits (NVML).
  size_t dot = text.rfind('.');
  size_t c2 = text.rfind(':');
  if (dot == std::string_view::npos || c2 == std::string_view::npos || c2 > dot) return "";
  size_t c1 = c2 == 0 ? std::string_view::npos : text.rfind(':', c2 - 1);
  std::string_view dom = c1 == std::string_view::npos ? "0" : text.substr(0, c1);
  std::string_view bus = text.substr(c1 == std::string_view::npos ? 0 : c1 + 1, c2 - (c1 == std::string_view::npos ? 0 : c1 + 1));
  std::string_view dev = text.substr(c2 + 1, dot - c2 - 1);
  std::string_view fn = text.substr(dot + 1);
  uint64_t d = 0, b = 0, v = 0, f = 0;
  if (dom.size() > 8 || bus.size() > 2 || dev.size() > 2 || fn.size() != 1) return "";
  if (!parseHex(dom, &d) || !parseHex(bus, &b) || !parseHex(dev, &v) || !parseHex(fn, &f)) return "";
  if (v > 0x1f || f > 7) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%04llx:%02llx:%02llx.%llx", static_cast<unsigned long long>(d),
                static_cast<unsigned long long>(b), static_cast<unsigned long long>(v),
                static_cast<unsigned long long>(f));
  return buf;
}

bool isNvsSentinel(std::string_view target) { return target.substr(0, 7) == "fffffff"; }

Result<std::vector<int>> parseAffinity(std::string_view mask) {
  std::vector<std::string_view> words;
  size_t start = 0;
  while (start <= mask.size() && !mask.empty()) {
    size_t comma = mask.find(',', start);
    if (comma == std::string_view::npos) comma = mask.size();
    words.push_back(mask.substr(start, comma - start));
    start = comma + 1;
  }
  if (words.size() > static_cast<size_t>(kMaxCpuId + 1) / 32) {
    return InvalidArgument("affinity mask of %zu words names CPUs above %d", words.size(), kMaxCpuId);
  }
  std::vector<int> cpus;
  for (size_t w = 0; w < words.size(); ++w) {
    std::string_view word = words[w];
    if (word.substr(0, 2) == "0x" || word.substr(0, 2) == "0X") word.remove_prefix(2);
    uint64_t bits = 0;
    if (word.empty() && words.size() > 1) continue;  // hwloc's ",," elides zero words
    if (word.size() > 8 || !parseHex(word, &bits)) {
      return InvalidArgument("affinity mask '%.*s': word '%.*s' is not 1-8 hex digits",
                             static_cast<int>(mask.size()), mask.data(), static_cast<int>(words[w].size()),
                             words[w].data());
    }
    int base = static_cast<int>((words.size() - 1 - w) * 32);
    for (int b = 0; b < 32; ++b)
      if (bits & (uint64_t(1) << b)) cpus.push_back(base + b);
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

Result<std::vector<int>> parseCpuRanges(std::string_view list) {
  std::vector<std::pair<int, int>> ranges;
  size_t i = 0;
  auto number = [&](int* out) {
    size_t start = i;
    long v = 0;
    while (i < list.size() && list[i] >= '0' && list[i] <= '9' && v <= kMaxCpuId) v = v * 10 + (list[i++] - '0');
    *out = static_cast<int>(v);
    return i > start && v <= kMaxCpuId;
  };
  int top = -1;
  while (i < list.size()) {
    int lo = 0, hi = 0;
    if (!number(&lo)) {
      return InvalidArgument("cpu list '%.40s': expected ids of 0-%d", std::string(list).c_str(), kMaxCpuId);
    }
    hi = lo;
    if (i < list.size() && list[i] == '-') {
      ++i;
      if (!number(&hi) || hi < lo) return InvalidArgument("cpu list '%.40s': bad range", std::string(list).c_str());
    }
    if (i < list.size() && list[i] != ',') {
      return InvalidArgument("cpu list '%.40s': unexpected character", std::string(list).c_str());
    }
    ++i;
    ranges.emplace_back(lo, hi);
    top = std::max(top, hi);
  }
  // next[c]: the first id >= c not yet taken, so every id is visited once however often
  // the ranges repeat or overlap.
  std::vector<int> next(static_cast<size_t>(top + 2));
  for (size_t c = 0; c < next.size(); ++c) next[c] = static_cast<int>(c);
  auto find = [&](int c) {
    int root = c;
    while (next[static_cast<size_t>(root)] != root) root = next[static_cast<size_t>(root)];
    while (next[static_cast<size_t>(c)] != root) c = std::exchange(next[static_cast<size_t>(c)], root);
    return root;
  };
  std::vector<int> out;
  for (auto [lo, hi] : ranges) {
    for (int c = find(lo); c <= hi; c = find(c + 1)) {
      out.push_back(c);
      next[static_cast<size_t>(c)] = c + 1;
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string formatAffinity(std::span<const int> cpus) {
  if (cpus.empty()) return "";
  int maxCpu = *std::max_element(cpus.begin(), cpus.end());
  std::vector<uint32_t> words(static_cast<size_t>(maxCpu / 32 + 1), 0);
  for (int c : cpus)
    if (c >= 0) words[static_cast<size_t>(c / 32)] |= uint32_t(1) << (c % 32);
  std::string out;
  for (size_t i = words.size(); i-- > 0;) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08x", words[i]);
    if (!out.empty()) out += ',';
    out += buf;
  }
  return out;
}

// ---- System accessors ----

const Path& System::path(int a, int b) const {
  static const Path kNone{};
  if (static_cast<size_t>(a) >= endpoint_.size() || static_cast<size_t>(b) >= endpoint_.size()) return kNone;
  int ea = endpoint_[static_cast<size_t>(a)], eb = endpoint_[static_cast<size_t>(b)];
  if (ea < 0 || eb < 0) return kNone;
  return paths_[static_cast<size_t>(ea) * nEndpoints_ + static_cast<size_t>(eb)];
}

int System::findByBusId(std::string_view busId) const {
  std::string norm = normalizeBusId(busId);
  if (norm.empty()) return -1;
  auto it = busIndex_.find(norm);
  return it == busIndex_.end() ? -1 : it->second;
}

int System::cpuOf(int id) const {
  int cur = id;
  while (cur >= 0 && node(cur).type != NodeType::kCpu) cur = node(cur).parent;
  return cur;
}

int System::numaOf(int id) const {
  int cpu = cpuOf(id);
  return cpu < 0 ? -1 : node(cpu).cpu.numaId;
}

std::vector<int> System::cpuList(int cpuNode) const {
  if (cpuNode < 0 || node(cpuNode).type != NodeType::kCpu) return {};
  Result<std::vector<int>> r = parseAffinity(node(cpuNode).cpu.affinity);
  return r.ok() ? std::move(r).value() : std::vector<int>{};
}

std::string System::label(int id) const {
  const Node& n = node(id);
  int k = ordinal_[static_cast<size_t>(id)];
  switch (n.type) {
    case NodeType::kCpu: return "CPU" + std::to_string(k);
    case NodeType::kGpu: return "GPU" + std::to_string(k);
    case NodeType::kNic: return "NIC" + std::to_string(k);
    case NodeType::kNvs: return "NVS";
    case NodeType::kPci:
      if (n.pciKind == PciKind::kHostBridge) return "HB " + n.pci.busId;
      return (n.pciKind == PciKind::kSwitch ? "SW " : "PCI ") + n.pci.busId;
  }
  return "?";
}

std::string System::nicName(int id) const {
  const Node& n = node(id);
  std::string out;
  for (const NetPort& p : n.nic.nets) {
    if (p.name.empty()) continue;
    if (!out.empty()) out += '/';
    out += p.name;
  }
  return out.empty() ? n.pci.busId : out;
}

// ---- SystemBuilder ----

int SystemBuilder::addNode(Node n, int parent) {
  n.parent = parent;
  n.children.clear();
  int id = static_cast<int>(nodes_.size());
  if (parent >= 0 && parent < id) nodes_[static_cast<size_t>(parent)].children.push_back(id);
  nodes_.push_back(std::move(n));
  return id;
}

int SystemBuilder::addCpu(CpuAttrs cpu) {
  Node n;
  n.type = NodeType::kCpu;
  n.cpu = std::move(cpu);
  return addNode(std::move(n), -1);
}

int SystemBuilder::addPci(int parent, PciKind kind, PciAttrs pci) {
  Node n;
  n.type = NodeType::kPci;
  n.pciKind = kind;
  n.pci = std::move(pci);
  return addNode(std::move(n), parent);
}

int SystemBuilder::addGpu(int parent, PciAttrs pci, GpuAttrs gpu) {
  Node n;
  n.type = NodeType::kGpu;
  n.pci = std::move(pci);
  n.gpu = std::move(gpu);
  return addNode(std::move(n), parent);
}

int SystemBuilder::addNic(int parent, PciAttrs pci, NicAttrs nic) {
  Node n;
  n.type = NodeType::kNic;
  n.pci = std::move(pci);
  n.nic = std::move(nic);
  return addNode(std::move(n), parent);
}

void SystemBuilder::addNvSwitch(std::string busId) { nvSwitches_.push_back(std::move(busId)); }

int SystemBuilder::findByBusId(std::string_view busId) const {
  std::string norm = normalizeBusId(busId);
  if (norm.empty()) return -1;
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].pci.busId == norm) return static_cast<int>(i);
  return -1;
}

namespace {

// The counts of topology/limits.h: beyond them a file is refused, not loaded at any cost.
Status checkLimits(const std::vector<Node>& nodes, const std::vector<std::string>& nvSwitches) {
  size_t count[5] = {};
  size_t deepest = 0;
  std::vector<uint16_t> depth(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    ++count[static_cast<size_t>(n.type)];
    if (n.parent >= 0 && n.parent < static_cast<int>(i)) {
      depth[i] = static_cast<uint16_t>(std::min<int>(depth[static_cast<size_t>(n.parent)] + 1, 60000));
      deepest = std::max<size_t>(deepest, depth[i]);
    }
    if (n.gpu.nvlinks.size() + n.gpu.c2c.size() > kMaxNvlinksPerGpu) {
      return InvalidArgument("topology: GPU %s lists %zu NVLink/C2C entries, more than the %zu allowed",
                             n.pci.busId.c_str(), n.gpu.nvlinks.size() + n.gpu.c2c.size(), kMaxNvlinksPerGpu);
    }
    if (n.pciLinks.size() > kMaxNvlinksPerGpu) {
      return InvalidArgument("topology: %s lists %zu <pcilink>s, more than the %zu allowed", n.pci.busId.c_str(),
                             n.pciLinks.size(), kMaxNvlinksPerGpu);
    }
  }
  struct Limit {
    size_t have, max;
    const char* what;
  };
  const Limit limits[] = {{nodes.size(), kMaxNodes, "nodes (CPUs, PCIe switches and devices)"},
                          {count[static_cast<size_t>(NodeType::kCpu)], kMaxCpus, "CPU (NUMA) nodes"},
                          {count[static_cast<size_t>(NodeType::kGpu)], kMaxGpus, "GPUs"},
                          {count[static_cast<size_t>(NodeType::kNic)], kMaxNics, "NICs"},
                          {nvSwitches.size(), kMaxNodes, "NVSwitches"},
                          {deepest, kMaxTreeDepth, "levels of PCIe nesting"}};
  for (const Limit& l : limits) {
    if (l.have > l.max) {
      return InvalidArgument("topology: %zu %s, more than the %zu snccl accepts (docs/topology.md)", l.have, l.what,
                             l.max);
    }
  }
  return OkStatus();
}

}  // namespace

Result<System> SystemBuilder::build() && {
  SNCCL_TRY(checkLimits(nodes_, nvSwitches_));
  std::set<std::string> busIds;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (n.parent >= static_cast<int>(i)) return InternalError("topology node %zu: parent %d not built yet", i, n.parent);
    if (n.type == NodeType::kCpu && n.parent != -1) return InvalidArgument("topology: a CPU node has a parent");
    if (n.type != NodeType::kCpu && n.parent < 0) {
      return InvalidArgument("topology: %s %s is not under a CPU", nodeTypeName(n.type), n.pci.busId.c_str());
    }
    if (!n.pci.busId.empty() && !busIds.insert(n.pci.busId).second) {
      return InvalidArgument("topology: bus id %s appears twice", n.pci.busId.c_str());
    }
  }
  System sys;
  sys.nodes_ = std::move(nodes_);
  if (notes_.size() > kMaxNotes) {
    size_t more = notes_.size() - kMaxNotes;
    notes_.resize(kMaxNotes);
    notes_.push_back(format("... and %zu more notes like these", more));
  }
  sys.notes_ = std::move(notes_);
  SNCCL_TRY(deriveGraph(&sys, nvSwitches_));
  return sys;
}

}  // namespace snccl::topo
