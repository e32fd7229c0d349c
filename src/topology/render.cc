// Text views of a System and a Plan.
#include "topology/render.h"

#include <algorithm>
#include <cstdio>

#include "topology/bandwidth.h"
#include "topology/smi.h"

namespace snccl::topo {
namespace {

std::string pciText(const PciAttrs& p) {
  std::string s = p.busId;
  if (p.vendor >= 0 && p.device >= 0) s += format(" [%04x:%04x]", p.vendor, p.device);
  if (p.linkGts > 0 || p.linkWidth > 0) {
    s += format(" %s x%d", p.linkGts > 0 ? format("%g GT/s", p.linkGts).c_str() : "? GT/s", p.linkWidth > 0 ? p.linkWidth : 16);
  }
  return s;
}

double uplinkBw(const System& sys, int id) {
  for (const Link& l : sys.links(id))
    if (l.to == sys.node(id).parent && l.type == LinkType::kPci) return l.bw;
  return 0;
}

std::string nvlinkText(const System& sys, int g) {
  std::string s;
  for (const Link& l : sys.links(g)) {
    if (l.type != LinkType::kNvl && l.type != LinkType::kC2c) continue;
    s += format("%s%s %s %.1f GB/s", s.empty() ? "" : ", ", linkTypeName(l.type), sys.label(l.to).c_str(), l.bw);
  }
  return s;
}

void treeLines(const System& sys, int id, int depth, std::string* out) {
  const Node& n = sys.node(id);
  std::string line(static_cast<size_t>(depth) * 2, ' ');
  line += sys.label(id);
  switch (n.type) {
    case NodeType::kGpu:
      line += " " + pciText(n.pci);
      if (n.gpu.sm > 0) line += format(" sm%d", n.gpu.sm);
      if (n.gpu.dev >= 0) line += format(" dev %d", n.gpu.dev);
      if (!n.gpu.present) line += " (PCI only)";
      if (std::string nv = nvlinkText(sys, id); !nv.empty()) line += "  " + nv;
      break;
    case NodeType::kNic: {
      line += " " + (n.pci.busId.empty() ? std::string("(no PCI)") : pciText(n.pci)) + " " + sys.nicName(id);
      int64_t speed = n.nic.nets.empty() ? -1 : n.nic.nets[0].speedMbps;
      if (speed > 0) line += format(" %lld Gb/s", static_cast<long long>(speed / 1000));
      break;
    }
    case NodeType::kPci:
      if (n.pciKind != PciKind::kHostBridge) line = std::string(static_cast<size_t>(depth) * 2, ' ') +
                                                    (n.pciKind == PciKind::kSwitch ? "SW " : "PCI ") + pciText(n.pci);
      break;
    default: break;
  }
  bool hostBridge = n.type == NodeType::kPci && n.pciKind == PciKind::kHostBridge;
  if (n.type != NodeType::kCpu && n.type != NodeType::kNvs && n.parent >= 0 && !hostBridge) line += format("  (%.1f GB/s up)", uplinkBw(sys, id));
  *out += line + "\n";
  for (int ch : n.children) treeLines(sys, ch, depth + 1, out);
}

// Devices shown in the matrices: GPUs then NICs, or the CPUs on a host without them.
std::vector<int> matrixDevices(const System& sys) {
  std::vector<int> d(sys.gpus().begin(), sys.gpus().end());
  d.insert(d.end(), sys.nics().begin(), sys.nics().end());
  if (d.empty()) d.assign(sys.cpus().begin(), sys.cpus().end());
  return d;
}

}  // namespace

std::string cpuRanges(std::span<const int> cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j == i ? std::to_string(cpus[i]) : format("%d-%d", cpus[i], cpus[j]);
    i = j + 1;
  }
  return out;
}

std::string describeTree(const System& sys) {
  std::string out = format("# Machine: %zu CPU (NUMA) nodes, %zu GPUs, %zu NICs%s\n", sys.cpus().size(), sys.gpus().size(),
                           sys.nics().size(), sys.nvs() >= 0 ? ", NVSwitch" : "");
  for (int c : sys.cpus()) {
    const CpuAttrs& a = sys.node(c).cpu;
    std::vector<int> cpus = sys.cpuList(c);
    out += format("%s numa %d %s %s", sys.label(c).c_str(), a.numaId, a.arch.empty() ? "?" : a.arch.c_str(),
                  a.vendor.empty() ? "?" : a.vendor.c_str());
    if (a.familyId >= 0) out += format(" family %d model %d", a.familyId, a.modelId);
    out += format(" cpus %s", cpus.empty() ? "?" : cpuRanges(cpus).c_str());
    if (sys.cpus().size() > 1) out += format("  (%.1f GB/s to other CPUs)", bw::interCpu(a));
    out += "\n";
    for (int ch : sys.node(c).children) treeLines(sys, ch, 1, &out);
  }
  if (sys.nvs() >= 0) {
    const Node& n = sys.node(sys.nvs());
    out += format("NVS: %zu NVSwitch%s merged into one node", n.nvSwitches.size(), n.nvSwitches.size() == 1 ? "" : "es");
    for (const std::string& s : n.nvSwitches) out += " " + s;
    out += "\n";
  }
  for (const std::string& note : sys.notes()) out += "note: " + note + "\n";
  return out;
}

std::string describePaths(const System& sys) {
  std::vector<int> d = matrixDevices(sys);
  std::string out = "# Paths (nvidia-smi topo -m style; NODE = two host bridges of one NUMA node)\n       ";
  for (int c : d) out += format("%-7s", sys.label(c).c_str());
  out += "CPU Affinity    NUMA\n";
  for (int r : d) {
    out += format("%-7s", sys.label(r).c_str());
    for (int c : d) out += format("%-7s", smiCell(sys, r, c).c_str());
    int cpu = sys.cpuOf(r);
    std::vector<int> cpus = sys.cpuList(cpu);
    out += format("%-15s %d\n", cpus.empty() ? "N/A" : cpuRanges(cpus).c_str(), sys.numaOf(r));
  }
  bool nvlink = false;
  for (int g : sys.gpus())
    for (const Link& l : sys.links(g)) nvlink = nvlink || l.type == LinkType::kNvl;
  if (nvlink) {
    out += "# PCIe paths (ignoring NVLink)\n       ";
    for (int c : d) out += format("%-7s", sys.label(c).c_str());
    out += "\n";
    for (int r : d) {
      out += format("%-7s", sys.label(r).c_str());
      for (int c : d) out += format("%-7s", r == c ? "X" : pathTypeName(sys.pciPath(r, c).type));
      out += "\n";
    }
  }
  out += "# Bandwidth (GB/s, narrowest link of the path)\n       ";
  for (int c : d) out += format("%-7s", sys.label(c).c_str());
  out += "\n";
  for (int r : d) {
    out += format("%-7s", sys.label(r).c_str());
    for (int c : d) out += r == c ? format("%-7s", "-") : format("%-7.1f", sys.path(r, c).bw);
    out += "\n";
  }
  return out;
}

std::string describePairing(const System& sys) {
  std::string out = "# GPU -> NIC pairing (nearest NIC, GPUs spread over equivalent NICs)\n";
  if (sys.gpus().empty()) {
    for (int c : sys.cpus()) {
      int nic = sys.nearestNic(c);
      out += format("%s -> %s\n", sys.label(c).c_str(),
                    nic < 0 ? "none" : format("%s %s (%s)", sys.label(nic).c_str(), sys.nicName(nic).c_str(), pathTypeName(sys.path(c, nic).type)).c_str());
    }
    return out;
  }
  for (size_t i = 0; i < sys.gpus().size(); ++i) {
    int g = sys.gpus()[i], nic = sys.gpuNics()[i];
    if (nic < 0) {
      out += format("%s -> none\n", sys.label(g).c_str());
      continue;
    }
    const Path& p = sys.path(g, nic);
    out += format("%s -> %s %s (%s, %.1f GB/s)\n", sys.label(g).c_str(), sys.label(nic).c_str(), sys.nicName(nic).c_str(),
                  pathTypeName(p.type), p.bw);
  }
  return out;
}

std::string describePlan(const System& sys, const Plan& plan, std::span<const RankLocation> ranks) {
  auto rankName = [&](int r) {
    const RankLocation& l = ranks[static_cast<size_t>(r)];
    int id = l.busId.empty() ? -1 : sys.findByBusId(l.busId);
    return id >= 0 ? format("%d(%s)", r, sys.label(id).c_str()) : std::to_string(r);
  };
  std::string out = format("# Plan for %zu ranks on %zu node(s): %d channel(s), intra-node ring %s %.1f GB/s\n",
                           ranks.size(), plan.nodes.size(), plan.nChannels, pathTypeName(plan.intraType), plan.intraBw);
  for (size_t c = 0; c < plan.rings.size(); ++c) {
    out += format("ring %zu:", c);
    for (int r : plan.rings[c]) out += " " + rankName(r);
    out += "\n";
  }
  for (size_t t = 0; t < plan.trees.size() && t < 2; ++t) {
    const RankTree& tree = plan.trees[t];
    out += format("tree %zu: root %d;", t, tree.root);
    for (size_t r = 0; r < tree.parent.size(); ++r)
      if (tree.parent[r] >= 0) out += format(" %zu->%d", r, tree.parent[r]);
    out += "\n";
  }
  for (size_t k = 0; k < plan.nodes.size(); ++k) {
    out += format("node %zu:", k);
    for (int r : plan.nodes[k]) out += format(" %d", r);
    out += "\n";
  }
  return out;
}

}  // namespace snccl::topo
