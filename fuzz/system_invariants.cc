// The invariants of system_invariants.h.
#include "system_invariants.h"

#include <set>
#include <string>

#include "fuzz_check.h"
#include "topology/limits.h"
#include "topology/nccl_xml.h"

namespace snccl::fuzz {

using topo::NodeType;

namespace {

void checkCaps(const topo::System& sys) {
  FUZZ_CHECK(sys.gpus().size() <= topo::kMaxGpus, "%zu GPUs", sys.gpus().size());
  FUZZ_CHECK(sys.nics().size() <= topo::kMaxNics, "%zu NICs", sys.nics().size());
  FUZZ_CHECK(sys.cpus().size() <= topo::kMaxCpus, "%zu CPUs", sys.cpus().size());
  // + 1: the NVS node that deriveGraph adds after the limits were checked.
  FUZZ_CHECK(static_cast<size_t>(sys.size()) <= topo::kMaxNodes + 1, "%d nodes", sys.size());
  // + 1: the "... and N more" line.
  FUZZ_CHECK(sys.notes().size() <= topo::kMaxNotes + 1, "%zu notes", sys.notes().size());
}

void checkTree(const topo::System& sys) {
  std::set<std::string> busIds;
  std::vector<size_t> depth(static_cast<size_t>(sys.size()), 0);
  for (int i = 0; i < sys.size(); ++i) {
    const topo::Node& n = sys.node(i);
    bool root = n.type == NodeType::kCpu || n.type == NodeType::kNvs;
    FUZZ_CHECK(root == (n.parent == -1), "node %d (%s) has parent %d", i, sys.label(i).c_str(), n.parent);
    if (!root) {
      FUZZ_CHECK(n.parent >= 0 && n.parent < i, "node %d: parent %d", i, n.parent);
      const topo::Node& p = sys.node(n.parent);
      FUZZ_CHECK(p.type == NodeType::kCpu || p.type == NodeType::kPci || p.type == NodeType::kGpu ||
                     p.type == NodeType::kNic,
                 "node %d under %s", i, sys.label(n.parent).c_str());
      size_t d = depth[static_cast<size_t>(n.parent)] + 1;
      depth[static_cast<size_t>(i)] = d;
      FUZZ_CHECK(d <= topo::kMaxTreeDepth, "node %d at depth %zu", i, d);
      FUZZ_CHECK(sys.cpuOf(i) >= 0 && sys.node(sys.cpuOf(i)).type == NodeType::kCpu, "node %d: cpuOf %d", i,
                 sys.cpuOf(i));
    }
    for (int c : n.children)
      FUZZ_CHECK(c > i && c < sys.size() && sys.node(c).parent == i, "node %d lists child %d", i, c);
    FUZZ_CHECK(n.gpu.nvlinks.size() + n.gpu.c2c.size() <= topo::kMaxNvlinksPerGpu, "node %d: %zu NVLink entries", i,
               n.gpu.nvlinks.size() + n.gpu.c2c.size());
    if (!n.pci.busId.empty()) {
      FUZZ_CHECK(busIds.insert(n.pci.busId).second, "bus id %s twice", n.pci.busId.c_str());
      // Host bridges carry a partial id ("dddd:bb") that is not looked up.
      if (topo::normalizeBusId(n.pci.busId) == n.pci.busId) {
        FUZZ_CHECK(sys.findByBusId(n.pci.busId) == i, "findByBusId(%s) = %d, not %d", n.pci.busId.c_str(),
                   sys.findByBusId(n.pci.busId), i);
      }
    }
  }
  for (int i = 0; i < sys.size(); ++i) {
    int p = sys.node(i).parent;
    if (p < 0) continue;
    size_t listed = 0;
    for (int c : sys.node(p).children) listed += c == i;
    FUZZ_CHECK(listed == 1, "node %d listed %zu times among its parent's children", i, listed);
  }
}

void checkEndpoints(const topo::System& sys) {
  auto kindIs = [&](std::span<const int> ids, NodeType t) {
    for (int id : ids) FUZZ_CHECK(id >= 0 && id < sys.size() && sys.node(id).type == t, "endpoint %d", id);
  };
  kindIs(sys.cpus(), NodeType::kCpu);
  kindIs(sys.gpus(), NodeType::kGpu);
  kindIs(sys.nics(), NodeType::kNic);
  FUZZ_CHECK(sys.nvs() == -1 || sys.node(sys.nvs()).type == NodeType::kNvs, "nvs %d", sys.nvs());
  FUZZ_CHECK(sys.gpuNics().size() == sys.gpus().size(), "%zu gpuNics for %zu GPUs", sys.gpuNics().size(),
             sys.gpus().size());
  for (int nic : sys.gpuNics()) FUZZ_CHECK(nic == -1 || sys.node(nic).type == NodeType::kNic, "gpuNic %d", nic);

  std::vector<int> eps;
  for (auto list : {sys.cpus(), sys.gpus(), sys.nics()}) eps.insert(eps.end(), list.begin(), list.end());
  if (sys.nvs() >= 0) eps.push_back(sys.nvs());
  // Pairs are quadratic: bound the work per input (real machines have a few dozen).
  if (eps.size() > 64) eps.resize(64);
  for (int a : eps) {
    FUZZ_CHECK(sys.path(a, a).type == topo::PathType::kLoc, "path(%d, %d) is %s", a, a,
               topo::pathTypeName(sys.path(a, a).type));
    for (int b : eps) {
      const topo::Path& ab = sys.path(a, b);
      const topo::Path& ba = sys.path(b, a);
      FUZZ_CHECK(ab.type == ba.type, "path %s -> %s is %s, back %s", sys.label(a).c_str(), sys.label(b).c_str(),
                 topo::pathTypeName(ab.type), topo::pathTypeName(ba.type));
      FUZZ_CHECK(ab.bw >= 0 && ab.hops >= 0, "path %d -> %d: bw %f hops %d", a, b, ab.bw, ab.hops);
    }
  }
}

}  // namespace

void checkSystem(const topo::System& sys) {
  checkCaps(sys);
  checkTree(sys);
  checkEndpoints(sys);
}

void checkNcclRoundTrip(const topo::System& sys, bool exact) {
  std::string xml = topo::writeNcclXml(sys);
  Result<topo::System> back = topo::readNcclXml(xml, "round trip");
  FUZZ_CHECK(back.ok(), "written NCCL XML does not read back: %s\n%s", back.status().message().c_str(), xml.c_str());
  if (exact) FUZZ_CHECK(back.value() == sys, "written NCCL XML reads back different:\n%s", xml.c_str());
}

}  // namespace snccl::fuzz
