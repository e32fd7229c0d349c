// sn_info: what this snccl build knows about itself and this host. Lists the parameter
// registry (every environment variable snccl reads), the transports, the algorithms, the
// version, the host identity that decides which ranks share a node, GPU support (the CUDA
// driver and the device kernel this build carries), the network plugins
// (external NCCL plugins and their devices; every RDMA device, port and GID table, and the
// GID the IB net chooses and why), and the topology.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/algorithm.h"
#include "collectives/tuning/selector.h"
#include "common/params.h"
#include "core/slot_geometry.h"
#include "device/cuda_driver.h"
#include "device/reduce_kernel_image.h"
#include "snccl/nccl.h"
#include "snccl/snccl.h"
#include "topology/affinity.h"
#include "topology/discovery.h"
#include "transport/net/ext/ext_loader.h"
#include "transport/net/net.h"
#include "transport/transport.h"
#if SNCCL_HAVE_VERBS
#include "transport/net/ib/ib_net.h"
#endif

namespace {

using namespace snccl;

void printVersion() {
  int code = 0;
  ncclGetVersion(&code);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("# Version\n%s, ncclGetVersion = %d\n", sncclVersionString(), code);
  std::printf("# Host\nhostname %s, hostHash 0x%016llx\n", host, (unsigned long long)hostHash());
  const device::CudaDriver& cuda = device::CudaDriver::get();
  std::printf("# GPU (docs/gpu.md)\n%s: %s\n", cuda.on() ? "on" : "off",
              cuda.on() ? cuda.describe().c_str() : cuda.why().c_str());
  if (device::kReduceKernelImageBytes != 0) {
    std::printf("device reduction kernel: %zu bytes of fatbinary (sm_80, sm_90, compute_90)\n",
                device::kReduceKernelImageBytes);
  } else {
    std::printf("device reduction kernel: none (built without nvcc: reductions on device memory fail)\n");
  }
}

std::string currentValue(const params::Def& d) {
  return d.type == params::Type::kInt ? std::to_string(params::getInt(d.id)) : params::getString(d.id);
}

void printParams() {
  std::printf("# Parameters (%zu): NAME [alias] = value (source; default)\n", params::all().size());
  for (const params::Def& d : params::all()) {
    std::printf("%s", d.name);
    if (d.alias != nullptr) std::printf(" [%s]", d.alias);
    std::printf(" = \"%s\" (%s; default \"%s\")\n    %s\n", currentValue(d).c_str(), params::source(d.id),
                d.defaultValue, d.help);
  }
}

void printTransports() {
  std::printf("# Transports (in order of preference)\n");
  for (const TransportDef& t : transports()) std::printf("%-8s %s\n", t.name, t.help);
}

// The external NCCL net plugins NCCL_NET_PLUGIN names (or libnccl-net.so): what loaded,
// which table version, and the devices each reports once initialised.
void printExternalPlugins() {
  const std::string& value = params::getString(params::Id::NetPlugin);
  std::printf("# External network plugins (NCCL_NET_PLUGIN=%s)\n", value.empty() ? "unset: libnccl-net.so" : value.c_str());
  const std::vector<net::ext::LoadedPlugin>& plugins = net::ext::externalPlugins();
  if (plugins.empty()) std::printf("none loaded\n");
  for (const net::ext::LoadedPlugin& p : plugins) {
    if (p.net == nullptr) {
      std::printf("%s: %s\n", p.entry.c_str(), p.problem.c_str());
      continue;
    }
    std::printf("%s: %s, ncclNetPlugin_v%d \"%s\"\n", p.entry.c_str(), p.path.c_str(), p.version, p.net->name());
    Status s = p.net->init();
    if (!s.ok()) {
      std::printf("    init failed: %s\n", s.message().c_str());
      continue;
    }
    if (p.net->devices() == 0) std::printf("    no device\n");
    for (int d = 0; d < p.net->devices(); ++d) {
      net::Properties props;
      if (!p.net->getProperties(d, &props).ok()) {
        std::printf("    dev %d: properties unreadable\n", d);
        continue;
      }
      std::printf("    dev %d: %s port %d, %d Mb/s, PCI %s, max %d grouped receives\n", d, props.name.c_str(),
                  props.port, props.speedMbps, props.pciPath.empty() ? "(none)" : props.pciPath.c_str(),
                  props.maxRecvs);
    }
  }
}

// The net plugins, and what the IB net sees: every port of every RDMA device, usable or
// not, its GID table and the GID chosen (or why none), under the current parameters.
void printNets() {
  printExternalPlugins();
  std::printf("# Network plugins (in order of preference, after external ones; SNCCL_NET / NCCL_NET picks one)\n");
  for (const net::NetDef& d : net::netPlugins()) std::printf("%-8s %s\n", d.name, d.help);
#if SNCCL_HAVE_VERBS
  std::printf("# RDMA devices (IB net)\n");
  if (params::getInt(params::Id::IbDisable) == 1) {
    std::printf("off: NCCL_IB_DISABLE=1\n");
    return;
  }
  Result<std::vector<net::ib::PortReport>> ports = net::ib::describePorts(nullptr);
  if (!ports.ok()) {
    std::printf("off: %s\n", ports.status().message().c_str());
    return;
  }
  if (ports.value().empty()) std::printf("none: libibverbs finds no RDMA device\n");
  for (const net::ib::PortReport& p : ports.value()) {
    std::printf("%s:%d %s %s%s%s, %d Mb/s, MTU %d, PCI %s, NUMA %d: %s\n", p.dev.c_str(), p.port, p.state.c_str(),
                p.linkLayer.c_str(), p.netdev.empty() ? "" : " on ", p.netdev.c_str(), p.speedMbps, p.mtu,
                p.pciPath.empty() ? "(none)" : p.pciPath.c_str(), p.numaNode,
                p.used ? "used" : (!p.allowed ? "excluded by NCCL_IB_HCA" : "not used"));
    for (const auto& [e, readable] : p.gids)
      std::printf("    GID[%3d] %-40s %s\n", e.index, net::ib::gidString(e.raw).c_str(),
                  readable ? net::ib::gidTypeName(e.type) : "(type unreadable)");
    std::printf("    chosen: %s\n", p.gidChoice.c_str());
  }
#else
  std::printf("# RDMA devices: this build has no IB net (built without rdma-core's headers)\n");
#endif
}

void printAlgorithms() {
  std::printf("# Algorithms: collective name family (the cost model picks one per call: sn_info --model)\n");
  for (const AlgorithmDef& a : algorithms())
    std::printf("%-14s %-8s %-8s %s\n", collName(a.coll), a.name, a.family, a.help);
}

std::string cpuRanges(const std::vector<int>& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out.empty() ? "?" : out;
}

// What the communicator sees of this host (SNCCL_TOPO_FILE or discovery): NUMA nodes and
// their CPUs, GPUs and NICs with their nodes, and how helper threads would be placed.
// `sn_topo` shows the full tree, paths and plans.
int printTopology() {
  const Result<topo::System>& r = topo::processSystem();
  std::printf("# Topology (sn_topo shows the tree, paths and rings)\n");
  if (!r.ok()) {
    std::printf("unavailable: %s\n", r.status().message().c_str());
    return 1;
  }
  const topo::System& sys = r.value();
  int here = topo::currentNumaNode();
  for (int c : sys.cpus()) {
    int numa = sys.node(c).cpu.numaId;
    std::vector<int> cpus = sys.cpuList(c);
    std::printf("NUMA %d: %zu CPUs (%s)%s\n", numa, cpus.size(), cpuRanges(cpus).c_str(),
                numa == here ? "  <- this process runs here" : "");
  }
  for (int g : sys.gpus()) std::printf("%s: NUMA %d\n", sys.label(g).c_str(), sys.numaOf(g));
  for (int n : sys.nics()) std::printf("%s (%s): NUMA %d\n", sys.label(n).c_str(), sys.nicName(n).c_str(), sys.numaOf(n));
  if (sys.gpus().empty()) std::printf("no GPU\n");
  if (sys.nics().empty()) std::printf("no NIC in the topology\n");
  bool bind = params::getInt(params::Id::NumaBind) != 0;
  std::vector<int> helper = topo::helperCpus(sys, here, bind);
  if (helper.empty())
    std::printf("helper threads: not pinned (%s)\n", !bind ? "SNCCL_NUMA_BIND=0" : "one NUMA node or node unknown");
  else
    std::printf("helper threads of a rank here: pinned to CPUs %s\n", cpuRanges(helper).c_str());
  return 0;
}

// The cost model's decision tables (the TUNING log's, without a communicator) for a
// shape: this host as one node of --nranks processes (default 8), or --nodes emulated
// nodes; --threads for ranks that are threads of one process.
int printModel(int nranks, int nnodes, bool threads) {
  if (nranks < 1 || nnodes < 1 || nnodes > nranks) {
    std::fprintf(stderr, "sn_info --model: need 1 <= --nodes <= --nranks\n");
    return 2;
  }
  Result<SlotGeometry> geometry = slotGeometry(nnodes > 1, nnodes > 1 ? processNetSlotDefaults() : net::SlotDefaults{});
  if (!geometry.ok()) {
    std::fprintf(stderr, "sn_info --model: %s\n", geometry.status().message().c_str());
    return 2;
  }
  const size_t slot = geometry.value().slotBytes;
  tuning::CommShape shape =
      tuning::evenShape(nranks, nnodes, threads ? tuning::LinkClass::kLocal : tuning::LinkClass::kShm);
  // One node: its ranks map each other's buffers (threads, or processes with buffers from
  // ncclMemAlloc), so the single copy is offered from SNCCL_SINGLE_COPY_BYTES on.
  if (nnodes == 1) shape.singleCopyBytes = size_t(std::max<int64_t>(0, params::getInt(params::Id::SingleCopyBytes)));
  const tuning::Tuner t = tuning::makeTuner(shape, slot, tuning::hostDefaults(), tuning::processOverrides());
  std::printf("# Cost model (predicted us per algorithm; SNCCL_ALGO applied)\n%s\n", tuning::describeTuner(t).c_str());
  // The single copy's column and picks assume mappable buffers: say where that holds.
  const int64_t single = params::getInt(params::Id::SingleCopyBytes);
  for (CollKind c : tuning::tunedCollectives()) {
    for (const std::string& line : tuning::decisionTable(t, c)) std::printf("%s\n", line.c_str());
    if (c != CollKind::kAllReduce || nnodes != 1 || nranks < 2) continue;
    if (single > 0)
      std::printf("# AllReduce \"single\" (from %lld bytes, SNCCL_SINGLE_COPY_BYTES)%s; a call whose buffers "
                  "some rank cannot map runs the best other algorithm (NCCL_DEBUG=INFO says when a "
                  "communicator switches)\n",
                  (long long)single, threads ? "" : ": when every rank's buffers come from ncclMemAlloc");
    else
      std::printf("# AllReduce single copy: off (SNCCL_SINGLE_COPY_BYTES=0)\n");
  }
  return 0;
}

int usage(const char* argv0, int rc) {
  std::fprintf(rc == 0 ? stdout : stderr,
               "usage: %s [--params] [--transports] [--net] [--algorithms] [--topology] [--help]\n"
               "       %s --model [--nranks N] [--nodes M] [--threads]\n"
               "Prints the version, host identity and the selected lists (default: all);\n"
               "--model prints the cost model's decision tables for N ranks on M nodes of this host kind.\n",
               argv0, argv0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  bool params = false, trans = false, nets = false, algos = false, topology = false, model = false, threads = false;
  int nranks = 8, nnodes = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--model") == 0) { model = true; continue; }
    if (std::strcmp(argv[i], "--threads") == 0) { threads = true; continue; }
    if ((std::strcmp(argv[i], "--nranks") == 0 || std::strcmp(argv[i], "--nodes") == 0) && i + 1 < argc) {
      (argv[i][2] == 'n' && argv[i][3] == 'r' ? nranks : nnodes) = std::atoi(argv[i + 1]);
      ++i;
      continue;
    }
    if (std::strcmp(argv[i], "--params") == 0) params = true;
    else if (std::strcmp(argv[i], "--transports") == 0) trans = true;
    else if (std::strcmp(argv[i], "--net") == 0) nets = true;
    else if (std::strcmp(argv[i], "--algorithms") == 0) algos = true;
    else if (std::strcmp(argv[i], "--topology") == 0) topology = true;
    else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return usage(argv[0], 0);
    else return usage(argv[0], 2);
  }
  if (model) return printModel(nranks, nnodes, threads);
  if (!params && !trans && !nets && !algos && !topology) params = trans = nets = algos = topology = true;
  printVersion();
  if (params) printParams();
  if (trans) printTransports();
  if (nets) printNets();
  if (algos) printAlgorithms();
  if (topology && printTopology() != 0) return 1;
  return 0;
}
