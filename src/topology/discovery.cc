// Live discovery, topology files by content, merging, and the per-process entry point.
#include "topology/discovery.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "common/log.h"
#include "common/no_throw.h"
#include "common/params.h"
#include "topology/hwloc_import.h"
#include "topology/nccl_xml.h"
#include "topology/nvml.h"
#include "topology/smi.h"
#include "topology/xml.h"

namespace snccl::topo {
namespace {

// "0-3,8" -> {0,1,2,3,8}; empty on anything unexpected.
std::vector<int> parseList(const std::string& s) {
  Result<std::vector<int>> r = parseCpuRanges(s);
  return r.ok() ? std::move(r).value() : std::vector<int>{};
}

std::string readSmall(const std::string& path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

// Without hwloc: NUMA nodes from sysfs, else one CPU node with every online CPU.
void sysfsCpus(SystemBuilder* b) {
  std::vector<int> nodes;
  if (DIR* d = opendir("/sys/devices/system/node")) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, "node", 4) == 0 && std::isdigit(static_cast<unsigned char>(e->d_name[4])))
        nodes.push_back(std::atoi(e->d_name + 4));
    }
    closedir(d);
  }
  std::sort(nodes.begin(), nodes.end());
  for (int n : nodes) {
    CpuAttrs c;
    c.numaId = n;
    c.affinity = formatAffinity(parseList(readSmall(format("/sys/devices/system/node/node%d/cpulist", n))));
    b->addCpu(std::move(c));
  }
  if (nodes.empty()) {
    CpuAttrs c;
    c.numaId = 0;
    c.affinity = formatAffinity(parseList(readSmall("/sys/devices/system/cpu/online")));
    b->addCpu(std::move(c));
  }
}

bool looksLikeXml(const std::string& text) {
  size_t i = text.find_first_not_of(" \t\r\n\xEF\xBB\xBF");
  return i != std::string::npos && text[i] == '<';
}

// The name of the first element (after prolog, comments and DOCTYPE), "" when none.
std::string firstElement(const std::string& text) {
  size_t i = 0;
  while ((i = text.find('<', i)) != std::string::npos) {
    if (text.compare(i, 4, "<!--") == 0) {
      i = text.find("-->", i);
      if (i == std::string::npos) return "";
      continue;
    }
    if (i + 1 < text.size() && std::isalpha(static_cast<unsigned char>(text[i + 1]))) {
      size_t e = i + 1;
      while (e < text.size() && (std::isalnum(static_cast<unsigned char>(text[e])) || text[e] == '_')) ++e;
      return text.substr(i + 1, e - i - 1);
    }
    ++i;
  }
  return "";
}

void fillUnknown(PciAttrs* p, const PciAttrs& from) {
  if (p->classCode < 0) p->classCode = from.classCode;
  if (p->vendor < 0) p->vendor = from.vendor;
  if (p->device < 0) p->device = from.device;
  if (p->subsystemVendor < 0) p->subsystemVendor = from.subsystemVendor;
  if (p->subsystemDevice < 0) p->subsystemDevice = from.subsystemDevice;
  if (p->linkGts <= 0) p->linkGts = from.linkGts;
  if (p->linkWidth <= 0) p->linkWidth = from.linkWidth;
}

bool isPartial(const System& s) {
  for (const Node& n : s.nodes()) {
    if (n.type == NodeType::kGpu && !n.gpu.present) return true;
    if (n.type == NodeType::kNic && !n.nic.present) return true;
    if (n.type == NodeType::kPci && n.pci.classCode < 0 && n.children.empty()) return true;
  }
  return s.gpus().empty();
}

void logSystem(const System& sys, const std::string& origin) {
  SN_INFO(log::kGraph, "Topology from %s: %zu CPU nodes, %zu GPUs, %zu NICs%s", origin.c_str(), sys.cpus().size(),
          sys.gpus().size(), sys.nics().size(), sys.nvs() >= 0 ? ", NVSwitch" : "");
  for (size_t i = 0; i < sys.gpus().size(); ++i) {
    int g = sys.gpus()[i], nic = sys.gpuNics()[i];
    SN_INFO(log::kGraph, "%s %s NUMA %d -> %s %s", sys.label(g).c_str(), sys.node(g).pci.busId.c_str(), sys.numaOf(g),
            nic < 0 ? "no NIC" : sys.label(nic).c_str(), nic < 0 ? "" : pathTypeName(sys.path(g, nic).type));
  }
  for (const std::string& note : sys.notes()) SN_INFO(log::kGraph, "Topology: %s", note.c_str());
}

}  // namespace

Result<System> discoverLocal(const DiscoveryOptions& opt, DiscoveryReport* report) {
  DiscoveryReport rep;
  SystemBuilder b;
  bool haveHwloc = false;
  if (opt.useHwloc && hwlocAvailable()) {
    Result<SystemBuilder> r = hwlocBuilderLive();
    if (r.ok()) {
      b = std::move(r).value();
      haveHwloc = true;
      rep.hwloc = hwlocDescription();
    } else {
      rep.hwloc = "hwloc failed: " + r.status().message();
    }
  } else {
    rep.hwloc = opt.useHwloc ? hwlocDescription() : std::string("hwloc not used");
  }
  if (!haveHwloc) {
    sysfsCpus(&b);
    rep.hwloc += "; CPUs from sysfs, no PCIe devices";
  }
  if (opt.useNvml) {
    NvmlProbe probe = probeNvml(opt.nvmlLibrary);
    rep.nvml = probe.message;
    if (probe.available) mergeNvml(probe, &b);
  } else {
    rep.nvml = "NVML not used";
  }
  SN_INFO(log::kGraph, "Topology discovery: %s; %s", rep.hwloc.c_str(), rep.nvml.c_str());
  if (report != nullptr) *report = rep;
  return std::move(b).build();
}

FileFormat sniffFormat(const std::string& text) {
  if (looksLikeXml(text)) {
    std::string root = firstElement(text);
    if (root == "system") return FileFormat::kNcclXml;
    if (root == "topology") return FileFormat::kHwlocXml;
    return FileFormat::kUnknown;
  }
  size_t i = text.find_first_not_of(" \t\r\n");
  if (i != std::string::npos && text.compare(i, 4, "GPU0") == 0) return FileFormat::kNvidiaSmi;
  return FileFormat::kUnknown;
}

const char* formatName(FileFormat f) {
  switch (f) {
    case FileFormat::kNcclXml: return "NCCL topology XML";
    case FileFormat::kHwlocXml: return "hwloc XML";
    case FileFormat::kNvidiaSmi: return "nvidia-smi topo -m";
    case FileFormat::kUnknown: return "unknown";
  }
  return "unknown";
}

namespace {

Result<System> loadFile(const std::string& path) {
  SNCCL_ASSIGN_OR_RETURN(std::string text, readTextFile(path));
  switch (sniffFormat(text)) {
    case FileFormat::kNcclXml: return readNcclXml(text, path);
    case FileFormat::kHwlocXml: return systemFromHwlocXml(path);
    case FileFormat::kNvidiaSmi: {
      SNCCL_ASSIGN_OR_RETURN(SmiMatrix m, parseSmiMatrix(text, path));
      return systemFromSmi(m);
    }
    case FileFormat::kUnknown: break;
  }
  // Broken XML: let the reader say where; anything else is not a topology file.
  if (looksLikeXml(text)) return readNcclXml(text, path);
  return InvalidArgument("%s:1: not a topology file (expected NCCL topology XML <system>, hwloc XML <topology> "
                         "or `nvidia-smi topo -m` output)",
                         path.c_str());
}

}  // namespace

Result<System> loadTopologyFile(const std::string& path) {
  return noThrow(path.c_str(), [&] { return loadFile(path); });
}

Result<System> mergeDetected(const System& file, const System& live) {
  SystemBuilder b;
  std::vector<int> map(static_cast<size_t>(file.size()), -1);
  std::vector<bool> used(static_cast<size_t>(live.size()), false);
  for (int i = 0; i < file.size(); ++i) {
    Node n = file.node(i);
    if (n.type == NodeType::kNvs) continue;
    int l = n.pci.busId.empty() ? -1 : live.findByBusId(n.pci.busId);
    if (l >= 0 && (live.node(l).type == NodeType::kGpu || live.node(l).type == NodeType::kNic)) {
      const Node& ln = live.node(l);
      if (n.type != ln.type) n.pciKind = PciKind::kOther;
      n.type = ln.type;
      if (n.type == NodeType::kGpu && !n.gpu.present) n.gpu = ln.gpu;
      if (n.type == NodeType::kNic && !n.nic.present) n.nic = ln.nic;
      if (n.type == NodeType::kGpu) n.p2pBlockedPeers = ln.p2pBlockedPeers;
      fillUnknown(&n.pci, ln.pci);
      used[static_cast<size_t>(l)] = true;
    }
    int parent = n.parent < 0 ? -1 : map[static_cast<size_t>(n.parent)];
    map[static_cast<size_t>(i)] = b.addNode(std::move(n), parent);
  }
  int madeCpu = -1;  // for a file without any <cpu>
  for (int l = 0; l < live.size(); ++l) {
    const Node& ln = live.node(l);
    if (used[static_cast<size_t>(l)] || (ln.type != NodeType::kGpu && ln.type != NodeType::kNic)) continue;
    int cpu = file.cpus().empty() ? -1 : file.cpus()[0];
    for (int c : file.cpus())
      if (file.node(c).cpu.numaId == live.numaOf(l) && live.numaOf(l) >= 0) cpu = c;
    if (cpu < 0 && madeCpu < 0) madeCpu = b.addCpu(live.node(live.cpuOf(l)).cpu);
    int parent = cpu < 0 ? madeCpu : map[static_cast<size_t>(cpu)];
    Node copy = ln;
    b.addNode(std::move(copy), parent);
    b.addNote(format("%s %s is not in the topology file; added under NUMA node %d", nodeTypeName(ln.type),
                     ln.pci.busId.c_str(), live.numaOf(l)));
  }
  for (const System* s : {&file, &live}) {
    if (s->nvs() >= 0)
      for (const std::string& sw : s->node(s->nvs()).nvSwitches) b.addNvSwitch(sw);
    for (const std::string& note : s->notes()) b.addNote(note);
  }
  return std::move(b).build();
}

namespace {

Result<System> fileOrDiscovery() {
  const std::string& file = params::getString(params::Id::TopoFile);
  if (file.empty()) {
    SNCCL_ASSIGN_OR_RETURN(System sys, discoverLocal());
    logSystem(sys, "discovery");
    return sys;
  }
  Result<System> fromFile = loadTopologyFile(file);
  if (!fromFile.ok()) {
    // As NCCL does: a topology file that cannot be used is reported, and the machine's own
    // topology is used instead (a file is a hint; the job still runs).
    SN_WARN("%s=%s cannot be used, detecting the topology instead: %s", params::source(params::Id::TopoFile),
            file.c_str(), fromFile.status().message().c_str());
    SNCCL_ASSIGN_OR_RETURN(System sys, discoverLocal());
    logSystem(sys, "discovery");
    return sys;
  }
  // As NCCL does, the file describes this machine and discovery fills in what it lacks.
  SNCCL_ASSIGN_OR_RETURN(System live, discoverLocal());
  SNCCL_ASSIGN_OR_RETURN(System sys, mergeDetected(fromFile.value(), live));
  logSystem(sys, file + (isPartial(fromFile.value()) ? " (partial, completed by discovery)" : ""));
  return sys;
}

}  // namespace

const Result<System>& processSystem() {
  static const Result<System> sys = systemForThisProcess();
  return sys;
}

Result<System> systemForThisProcess() {
  SNCCL_ASSIGN_OR_RETURN(System sys, noThrow("topology", [] { return fileOrDiscovery(); }));
  const std::string& dump = params::getString(params::Id::TopoDumpFile);
  if (!dump.empty()) {
    Status st = writeNcclXmlFile(sys, dump);
    if (!st.ok()) {
      SN_WARN("Topology dump: %s", st.message().c_str());  // a debugging aid must not stop the job
    } else {
      SN_INFO(log::kGraph, "Topology written to %s", dump.c_str());
    }
  }
  return sys;
}

}  // namespace snccl::topo
