// sn_topo: what snccl sees of a machine and what it would do with it. Prints the device
// tree, a path matrix in the style of `nvidia-smi topo -m`, the GPU-NIC pairing and the
// rings/trees planned for N ranks per node on K nodes; optionally writes an SVG picture
// with the first ring drawn on it and the topology as NCCL XML.
//
// Input: this machine (live discovery, or SNCCL_TOPO_FILE like the library does) or any
// topology file given with -i (NCCL XML, hwloc XML, nvidia-smi topo -m text).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/params.h"
#include "topology/discovery.h"
#include "topology/nccl_xml.h"
#include "topology/planner.h"
#include "topology/render.h"
#include "topology/xml.h"

namespace {

using namespace snccl;
using namespace snccl::topo;

struct Args {
  std::string input, svg, dump;
  int ranks = 0;  // per node; 0 = one per GPU (or per NUMA node without GPUs)
  int nodes = 1;
  bool tree = false, paths = false, pairing = false, plan = false;
};

int usage(const char* argv0, int rc) {
  std::fprintf(rc == 0 ? stdout : stderr,
               "usage: %s [-i FILE] [-n RANKS] [--nodes K] [--svg OUT.svg] [--dump OUT.xml]\n"
               "          [--tree] [--paths] [--pairing] [--plan] [--help]\n"
               "  -i FILE      NCCL topology XML, hwloc XML or `nvidia-smi topo -m` output\n"
               "               (default: this machine, or SNCCL_TOPO_FILE as the library reads it)\n"
               "  -n RANKS     ranks per node for the plan (default: one per GPU, or per NUMA node)\n"
               "  --nodes K    plan for K identical nodes (default 1)\n"
               "  --svg FILE   picture of the machine with ring 0 drawn on it\n"
               "  --dump FILE  write the topology as NCCL topology XML\n"
               "Sections (default: all): --tree --paths --pairing --plan\n",
               argv0);
  return rc;
}

bool parse(int argc, char** argv, Args* a, int* rc) {
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) return false;
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (s == "-h" || s == "--help") {
      *rc = usage(argv[0], 0);
      return false;
    } else if ((s == "-i" || s == "--input") && value(&a->input)) {
    } else if (s == "--svg" && value(&a->svg)) {
    } else if (s == "--dump" && value(&a->dump)) {
    } else if ((s == "-n" || s == "--ranks") && value(&v) && std::atoi(v.c_str()) > 0) {
      a->ranks = std::atoi(v.c_str());
    } else if (s == "--nodes" && value(&v) && std::atoi(v.c_str()) > 0) {
      a->nodes = std::atoi(v.c_str());
    } else if (s == "--tree") {
      a->tree = true;
    } else if (s == "--paths") {
      a->paths = true;
    } else if (s == "--pairing") {
      a->pairing = true;
    } else if (s == "--plan") {
      a->plan = true;
    } else {
      std::fprintf(stderr, "sn_topo: bad argument '%s'\n", argv[i]);
      *rc = usage(argv[0], 2);
      return false;
    }
  }
  if (!a->tree && !a->paths && !a->pairing && !a->plan) a->tree = a->paths = a->pairing = a->plan = true;
  return true;
}

// Ranks spread round robin over the GPUs (or NUMA nodes) of each node.
std::vector<RankLocation> rankLocations(const System& sys, const Args& a) {
  std::vector<RankLocation> out;
  bool gpus = !sys.gpus().empty();
  int perNode = a.ranks > 0 ? a.ranks : static_cast<int>(gpus ? sys.gpus().size() : std::max<size_t>(1, sys.cpus().size()));
  for (int k = 0; k < a.nodes; ++k) {
    for (int r = 0; r < perNode; ++r) {
      RankLocation l;
      l.hostHash = static_cast<uint64_t>(k) + 1;
      if (gpus) {
        l.busId = sys.node(sys.gpus()[static_cast<size_t>(r) % sys.gpus().size()]).pci.busId;
      } else if (!sys.cpus().empty()) {
        l.numa = sys.node(sys.cpus()[static_cast<size_t>(r) % sys.cpus().size()]).cpu.numaId;
      }
      out.push_back(std::move(l));
    }
  }
  return out;
}

// Ring 0 restricted to node 0, as endpoint node ids for the picture.
std::vector<int> firstNodeRing(const System& sys, const Plan& plan, const std::vector<RankLocation>& ranks) {
  std::vector<int> eps;
  for (int r : plan.rings[0]) {
    const RankLocation& l = ranks[static_cast<size_t>(r)];
    if (l.hostHash != ranks[0].hostHash) continue;
    int id = l.busId.empty() ? -1 : sys.findByBusId(l.busId);
    if (id < 0) {
      for (int c : sys.cpus())
        if (sys.node(c).cpu.numaId == l.numa) id = c;
    }
    if (id >= 0 && (eps.empty() || eps.back() != id)) eps.push_back(id);
  }
  if (eps.size() > 1 && eps.front() == eps.back()) eps.pop_back();
  return eps;
}

int run(const Args& a) {
  Result<System> sys = a.input.empty() ? systemForThisProcess() : loadTopologyFile(a.input);
  if (!sys.ok()) {
    std::fprintf(stderr, "sn_topo: %s\n", sys.status().message().c_str());
    return 1;
  }
  if (a.input.empty()) {
    DiscoveryReport rep;
    (void)discoverLocal({}, &rep);
    const std::string& file = params::getString(params::Id::TopoFile);
    std::printf("# Source: %s%s (%s; %s)\n", file.empty() ? "this machine" : params::source(params::Id::TopoFile),
                file.empty() ? "" : ("=" + file + " completed by this machine").c_str(), rep.hwloc.c_str(), rep.nvml.c_str());
  } else {
    std::printf("# Source: %s\n", a.input.c_str());
  }
  if (a.tree) std::printf("%s", describeTree(*sys).c_str());
  if (a.paths) std::printf("%s", describePaths(*sys).c_str());
  if (a.pairing) std::printf("%s", describePairing(*sys).c_str());
  std::vector<RankLocation> ranks = rankLocations(*sys, a);
  Result<Plan> plan = planChannels(*sys, ranks);
  if (!plan.ok()) {
    std::fprintf(stderr, "sn_topo: planning failed: %s\n", plan.status().message().c_str());
    return 1;
  }
  if (a.plan) std::printf("%s", describePlan(*sys, *plan, ranks).c_str());
  if (!a.svg.empty()) {
    Status st = writeTextFile(a.svg, renderSvg(*sys, firstNodeRing(*sys, *plan, ranks)));
    if (!st.ok()) {
      std::fprintf(stderr, "sn_topo: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("# SVG written to %s\n", a.svg.c_str());
  }
  if (!a.dump.empty()) {
    Status st = writeNcclXmlFile(*sys, a.dump);
    if (!st.ok()) {
      std::fprintf(stderr, "sn_topo: %s\n", st.message().c_str());
      return 1;
    }
    std::printf("# NCCL topology XML written to %s\n", a.dump.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  int rc = 0;
  if (!parse(argc, argv, &a, &rc)) return rc;
  return run(a);
}
