// `sn_sim fabric`: the fabric model's table (fabric_model.h). For each node count, each
// traffic pattern and each routing (ECMP or adaptive switches, one flow or snccl's
// multipath per connection), the utilisation of the NICs, averaged over seeds (the ECMP
// hashes, the adaptive placement order and the job's placement differ per seed).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fabric_model.h"

namespace snccl::sim::fabric {

namespace {

int usage(int rc) {
  std::fprintf(rc ? stderr : stdout,
               "usage: sn_sim fabric [--topology rail|fat] [--nodes N[,N...]] [--rails R] [--radix K]\n"
               "                     [--subflows S] [--seeds N] [--phases P] [--placement random|packed]\n"
               "                     [--completion] [--csv]\n"
               "The NICs' utilisation (1.0: every NIC busy at its rate) of ring and hierarchical AllReduce and\n"
               "AllToAll on a two-level leaf-spine fabric, with ECMP or adaptive switches, one flow per\n"
               "connection or S paths per connection (snccl's multipath). Defaults: rail, 32,256,1024 nodes,\n"
               "8 rails, radix 64, 4 subflows, 3 seeds, 16 AllToAll phases, random placement. AllToAll is\n"
               "measured by its throughput, or with --completion by how long its phases last (slow at scale).\n");
  return rc;
}

std::vector<int> parseList(const char* v) {
  std::vector<int> out;
  for (const char* p = v; p && *p;) {
    char* end = nullptr;
    long x = std::strtol(p, &end, 10);
    if (end == p || x <= 0) return {};
    out.push_back(int(x));
    p = *end == ',' ? end + 1 : end;
    if (*end != ',' && *end != '\0') return {};
  }
  return out;
}

}  // namespace

int fabricMain(int argc, char** argv) {
  FabricSpec fs;
  std::vector<int> nodes = {32, 256, 1024};
  int subflows = 4, seeds = 3, phases = 16;
  bool random = true, csv = false, completion = false;
  for (int i = 1; i < argc; ++i) {
    const char* flag = argv[i];
    auto is = [&](const char* f) { return std::strcmp(flag, f) == 0; };
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (is("-h") || is("--help")) return usage(0);
    if (is("--csv") || is("--completion")) {
      (is("--csv") ? csv : completion) = true;
      continue;
    }
    if (v == nullptr) return usage(2);
    ++i;
    if (is("--topology") && (std::strcmp(v, "rail") == 0 || std::strcmp(v, "fat") == 0)) {
      fs.topology = v[0] == 'r' ? Topology::kRailOptimized : Topology::kFatTree;
    } else if (is("--nodes")) {
      nodes = parseList(v);
      if (nodes.empty()) return usage(2);
    } else if (is("--rails")) {
      fs.rails = std::atoi(v);
    } else if (is("--radix")) {
      fs.radix = std::atoi(v);
    } else if (is("--subflows")) {
      subflows = std::atoi(v);
    } else if (is("--seeds")) {
      seeds = std::atoi(v);
    } else if (is("--phases")) {
      phases = std::atoi(v);
    } else if (is("--placement") && (std::strcmp(v, "random") == 0 || std::strcmp(v, "packed") == 0)) {
      random = v[0] == 'r';
    } else {
      return usage(2);
    }
  }
  if (seeds < 1 || phases < 1) return usage(2);
  struct Variant {
    Routing routing;
    int subflows;
  };
  const Variant variants[] = {
      {Routing::kEcmp, 1}, {Routing::kEcmp, subflows}, {Routing::kAdaptive, 1}, {Routing::kAdaptive, subflows}};
  if (csv) {
    std::printf("topology,nodes,rails,radix,placement,completion,pattern,routing,subflows,utilisation\n");
  } else {
    std::printf("# %s fabric, %d NICs per node, radix %d, %s placement, mean of %d seeds%s\n",
                topologyName(fs.topology), fs.rails, fs.radix, random ? "random" : "packed", seeds,
                completion ? ", AllToAll by completion" : "");
    std::printf("%-9s %-9s %8s", "pattern", "routing", "subflows");
    for (int n : nodes) std::printf(" %10s", (std::to_string(n) + " nodes").c_str());
    std::printf("\n");
  }
  for (Pattern p : {Pattern::kRing, Pattern::kHier, Pattern::kAllToAll})
    for (const Variant& v : variants) {
      if (!csv) std::printf("%-9s %-9s %8d", patternName(p), routingName(v.routing), v.subflows);
      for (int n : nodes) {
        fs.nodes = n;
        double sum = 0;
        for (int s = 0; s < seeds; ++s) {
          RunSpec spec{p, v.routing, v.subflows, random, uint64_t(s + 1), phases, completion};
          Result<RunResult> r = run(fs, spec);
          if (!r.ok()) {
            std::fprintf(stderr, "sn_sim fabric: %s\n", r.status().message().c_str());
            return 1;
          }
          sum += r.value().utilisation;
        }
        if (csv) {
          std::printf("%s,%d,%d,%d,%s,%d,%s,%s,%d,%.4f\n", topologyName(fs.topology), n, fs.rails, fs.radix,
                      random ? "random" : "packed", int(completion), patternName(p), routingName(v.routing), v.subflows,
                      sum / seeds);
        } else {
          std::printf(" %9.1f%%", 100.0 * sum / seeds);
        }
        std::fflush(stdout);
      }
      if (!csv) std::printf("\n");
    }
  return 0;
}

}  // namespace snccl::sim::fabric
