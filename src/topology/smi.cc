// nvidia-smi topo -m: parser and System synthesizer.
#include "topology/smi.h"

#include "topology/limits.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>

#include "topology/bandwidth.h"
#include "topology/limits.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

std::vector<std::string> splitWs(std::string_view line) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.emplace_back(line.substr(start, i - start));
  }
  return out;
}

bool validCell(std::string& c) {
  if (c == "SOC") c = "SYS";  // name used by old drivers
  static constexpr const char* kCodes[] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS", "NVB", "C2C"};
  for (const char* k : kCodes)
    if (c == k) return true;
  // NV<n>: n links, at most kMaxLinkCount (what an NCCL XML <nvlink count> may say, so
  // the synthesized System writes out and reads back).
  if (c.size() > 2 && c.size() <= 4 && c.compare(0, 2, "NV") == 0 &&
      std::all_of(c.begin() + 2, c.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return std::atoi(c.c_str() + 2) <= kMaxLinkCount;
  }
  return false;
}

// "0-35,72-107" -> cpu list; empty for N/A or anything malformed.
std::vector<int> cpuRangesOrNone(const std::string& s) {
  Result<std::vector<int>> r = parseCpuRanges(s);
  return r.ok() ? std::move(r).value() : std::vector<int>{};
}

struct Lines {
  std::vector<std::string_view> v;
  explicit Lines(std::string_view text) {
    size_t start = 0;
    while (start <= text.size()) {
      size_t nl = text.find('\n', start);
      if (nl == std::string_view::npos) nl = text.size();
      std::string_view l = text.substr(start, nl - start);
      if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
      v.push_back(l);
      start = nl + 1;
    }
  }
};

Status parseRow(const std::vector<std::string>& tok, size_t row, int line, const std::string& source, SmiMatrix* m) {
  size_t n = m->devices.size();
  if (tok.size() < n + 1) {
    return InvalidArgument("%s:%d: row %s has %zu cells, the header names %zu devices", source.c_str(), line,
                           tok[0].c_str(), tok.size() - 1, n);
  }
  for (size_t c = 0; c < n; ++c) {
    std::string cell = tok[c + 1];
    if (!validCell(cell)) {
      return InvalidArgument("%s:%d: row %s column %s: unknown cell '%s'", source.c_str(), line, tok[0].c_str(),
                             m->devices[c].c_str(), cell.c_str());
    }
    if ((cell == "X") != (c == row)) {
      return InvalidArgument("%s:%d: row %s column %s: 'X' must be exactly on the diagonal", source.c_str(), line,
                             tok[0].c_str(), m->devices[c].c_str());
    }
    m->cells[row][c] = cell;
  }
  if (tok.size() > n + 1 && tok[n + 1] != "N/A") m->cpuAffinity[row] = tok[n + 1];
  if (tok.size() > n + 2 && tok[n + 2] != "N/A") m->numa[row] = std::atoi(tok[n + 2].c_str());
  return OkStatus();
}

}  // namespace

Result<SmiMatrix> parseSmiMatrix(std::string_view text, const std::string& source) {
  // Names from the table end up in NCCL XML and log lines, which cannot carry a NUL.
  if (size_t nul = text.find('\0'); nul != std::string_view::npos) {
    size_t line = 1 + static_cast<size_t>(std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(nul), '\n'));
    return InvalidArgument("%s:%zu: NUL byte in the file (binary data?)", source.c_str(), line);
  }
  Lines lines(text);
  SmiMatrix m;
  size_t i = 0;
  for (; i < lines.v.size(); ++i) {
    std::vector<std::string> tok = splitWs(lines.v[i]);
    if (tok.empty() || tok[0][0] == '#') continue;
    if (tok[0] != "GPU0") return InvalidArgument("%s:%zu: expected the header line of `nvidia-smi topo -m` (GPU0 GPU1 ...)", source.c_str(), i + 1);
    for (const std::string& t : tok) {
      if (t == "CPU" || t == "NUMA" || t == "GPU" || t == "Affinity") break;
      if (std::find(m.devices.begin(), m.devices.end(), t) != m.devices.end()) {
        return InvalidArgument("%s:%zu: device %s named twice in the header", source.c_str(), i + 1, t.c_str());
      }
      m.devices.push_back(t);
      if (m.devices.size() > kMaxGpus + kMaxNics) {
        return InvalidArgument("%s:%zu: more than %zu devices in the header", source.c_str(), i + 1, kMaxGpus + kMaxNics);
      }
    }
    break;
  }
  if (m.devices.empty()) return InvalidArgument("%s:%zu: no `nvidia-smi topo -m` header found", source.c_str(), i);
  size_t headerLine = i + 1;
  size_t n = m.devices.size();
  m.cells.assign(n, std::vector<std::string>(n));
  m.cpuAffinity.assign(n, "");
  m.numa.assign(n, -1);
  m.nicNames.assign(n, "");
  std::vector<bool> seen(n, false);
  bool legend = false;
  for (++i; i < lines.v.size(); ++i) {
    std::vector<std::string> tok = splitWs(lines.v[i]);
    int line = static_cast<int>(i + 1);
    if (tok.empty() || tok[0][0] == '#') continue;
    if (tok[0] == "Legend:" || tok[0] == "NIC") {
      legend = true;
      continue;
    }
    auto it = std::find(m.devices.begin(), m.devices.end(), legend ? tok[0].substr(0, tok[0].size() - 1) : tok[0]);
    if (legend) {  // "  NIC0: mlx5_0" (other legend lines are explanations)
      if (tok.size() == 2 && tok[0].back() == ':' && it != m.devices.end()) m.nicNames[static_cast<size_t>(it - m.devices.begin())] = tok[1];
      continue;
    }
    if (it == m.devices.end()) {
      return InvalidArgument("%s:%d: '%s' is not a device of the header", source.c_str(), line, tok[0].c_str());
    }
    size_t row = static_cast<size_t>(it - m.devices.begin());
    if (seen[row]) return InvalidArgument("%s:%d: second row for %s", source.c_str(), line, tok[0].c_str());
    seen[row] = true;
    SNCCL_TRY(parseRow(tok, row, line, source, &m));
  }
  if (std::none_of(seen.begin(), seen.end(), [](bool b) { return b; })) {
    return InvalidArgument("%s:%zu: the header is not followed by any device row", source.c_str(), headerLine);
  }
  // Truncated tables: a missing row is the transpose of its column.
  for (size_t r = 0; r < n; ++r) {
    if (seen[r]) continue;
    for (size_t c = 0; c < n; ++c) m.cells[r][c] = r == c ? "X" : m.cells[c][r];
  }
  return m;
}

namespace {

PathType cellClass(const std::string& c) {
  if (c == "PIX") return PathType::kPix;
  if (c == "PXB") return PathType::kPxb;
  if (c == "PHB") return PathType::kPhb;
  if (c == "NODE") return PathType::kNode;
  if (c == "SYS") return PathType::kSys;
  return PathType::kDis;  // NV#, NVB, C2C or unknown: says nothing about PCIe
}

struct UnionFind {
  std::vector<size_t> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), size_t{0}); }
  size_t find(size_t x) { return p[x] == x ? x : p[x] = find(p[x]); }
  void join(size_t a, size_t b) { p[find(a)] = find(b); }
};

// Groups of `members` connected by cells no farther than `limit`, in order of first member.
std::vector<std::vector<size_t>> groups(const SmiMatrix& m, const std::vector<size_t>& members, PathType limit) {
  UnionFind uf(m.devices.size());
  for (size_t a : members)
    for (size_t b : members)
      if (a != b && cellClass(m.cells[a][b]) <= limit) uf.join(a, b);
  std::vector<std::vector<size_t>> out;
  std::map<size_t, size_t> index;
  for (size_t a : members) {
    auto [it, fresh] = index.emplace(uf.find(a), out.size());
    if (fresh) out.emplace_back();
    out[it->second].push_back(a);
  }
  return out;
}

class Synth {
 public:
  explicit Synth(const SmiMatrix& m) : m_(m), ids_(m.devices.size(), -1) {}

  Result<System> run() {
    std::vector<size_t> all(m_.devices.size());
    std::iota(all.begin(), all.end(), size_t{0});
    // One CPU node per set of devices the table joins below SYS (usually one per socket).
    for (const auto& cpuGroup : groups(m_, all, PathType::kNode)) {
      CpuAttrs c;
      for (size_t d : cpuGroup) {
        if (c.numaId < 0 && m_.numa[d] >= 0) c.numaId = m_.numa[d];
        if (c.affinity.empty() && !m_.cpuAffinity[d].empty()) c.affinity = formatAffinity(cpuRangesOrNone(m_.cpuAffinity[d]));
      }
      int cpu = b_.addCpu(std::move(c));
      for (const auto& hb : groups(m_, cpuGroup, PathType::kPhb)) hostBridge(cpu, hb);
    }
    nvlinks();
    return std::move(b_).build();
  }

 private:
  void hostBridge(int cpu, const std::vector<size_t>& members) {
    PciAttrs a;
    a.busId = format("fffc:%02x", hbs_++);
    int hb = b_.addPci(cpu, PciKind::kHostBridge, std::move(a));
    for (const auto& pxb : groups(m_, members, PathType::kPxb)) {
      auto pix = groups(m_, pxb, PathType::kPix);
      int parent = pix.size() > 1 ? newSwitch(hb) : hb;
      for (const auto& g : pix) {
        int leaf = g.size() > 1 ? newSwitch(parent) : parent;
        for (size_t d : g) device(leaf, d);
      }
    }
  }

  int newSwitch(int parent) {
    PciAttrs a;
    a.busId = format("fffd:%02x:00.0", switches_++ & 0xff);
    a.classCode = 0x060400;
    return b_.addPci(parent, PciKind::kSwitch, std::move(a));
  }

  void device(int parent, size_t d) {
    const std::string& name = m_.devices[d];
    PciAttrs a;
    a.busId = format("fffe:%02zx:00.0", d & 0xff);
    if (name.compare(0, 3, "GPU") == 0) {
      a.classCode = 0x030200;
      a.vendor = 0x10de;
      GpuAttrs g;
      g.present = true;
      g.dev = std::atoi(name.c_str() + 3);
      ids_[d] = b_.addGpu(parent, std::move(a), std::move(g));
    } else {
      a.classCode = 0x020000;
      NicAttrs n;
      n.present = true;
      NetPort p;
      p.name = m_.nicNames[d].empty() ? name : m_.nicNames[d];
      p.dev = static_cast<int>(d);
      n.nets.push_back(std::move(p));
      ids_[d] = b_.addNic(parent, std::move(a), std::move(n));
    }
  }

  void nvlinks() {
    size_t n = m_.devices.size();
    for (size_t a = 0; a < n; ++a) {
      if (ids_[a] < 0 || b_.node(ids_[a]).type != NodeType::kGpu) continue;
      std::vector<std::pair<size_t, int>> nv;
      int total = 0, most = 0;
      for (size_t b = 0; b < n; ++b) {
        const std::string& c = m_.cells[a][b];
        if (c.size() > 2 && c.compare(0, 2, "NV") == 0 && c != "NVB") {
          int k = std::atoi(c.c_str() + 2);
          nv.emplace_back(b, k);
          total += k;
          most = std::max(most, k);
        }
      }
      GpuAttrs& g = b_.node(ids_[a]).gpu;
      if (total > 18) {  // more links than a GPU has: they go through NVSwitches
        g.nvlinks.push_back({"fffffff:ffff:ff", most, 0x068000});
        continue;
      }
      for (auto [b, k] : nv) g.nvlinks.push_back({b_.node(ids_[b]).pci.busId, k, 0x030200});
    }
  }

  const SmiMatrix& m_;
  SystemBuilder b_;
  std::vector<int> ids_;
  int hbs_ = 0, switches_ = 0;
};

}  // namespace

Result<System> systemFromSmi(const SmiMatrix& m) {
  if (m.devices.size() > 255) return InvalidArgument("nvidia-smi matrix with %zu devices is too large", m.devices.size());
  return Synth(m).run();
}

Result<System> readSmiFile(const std::string& path) {
  SNCCL_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  SNCCL_ASSIGN_OR_RETURN(SmiMatrix m, parseSmiMatrix(text, path));
  return systemFromSmi(m);
}

std::string smiCell(const System& sys, int a, int b) {
  if (a == b) return "X";
  const Path& p = sys.path(a, b);
  if (p.type == PathType::kNvl && sys.node(a).type == NodeType::kGpu && sys.node(b).type == NodeType::kGpu) {
    double per = bw::nvlinkPerLink(sys.node(a).gpu.sm);
    return "NV" + std::to_string(static_cast<int>(std::lround(p.bw / per)));
  }
  return pathTypeName(p.type);
}

}  // namespace snccl::topo
