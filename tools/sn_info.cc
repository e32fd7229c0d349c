// sn_info: what this snccl build knows about itself and this host. Lists the parameter
// registry (every environment variable snccl reads), the transports, the algorithms, the
// version and the host identity that decides which ranks share a node.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "collectives/algorithm.h"
#include "common/params.h"
#include "snccl/nccl.h"
#include "snccl/snccl.h"
#include "transport/transport.h"

namespace {

using namespace snccl;

void printVersion() {
  int code = 0;
  ncclGetVersion(&code);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::printf("# Version\n%s, ncclGetVersion = %d\n", sncclVersionString(), code);
  std::printf("# Host\nhostname %s, hostHash 0x%016llx\n", host, (unsigned long long)hostHash());
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

void printAlgorithms() {
  std::printf("# Algorithms: collective name family (the first listed per collective is its default)\n");
  for (const AlgorithmDef& a : algorithms())
    std::printf("%-14s %-8s %-8s %s\n", collName(a.coll), a.name, a.family, a.help);
}

int usage(const char* argv0, int rc) {
  std::fprintf(rc == 0 ? stdout : stderr,
               "usage: %s [--params] [--transports] [--algorithms] [--help]\n"
               "Prints the version, host identity and the selected lists (default: all).\n",
               argv0);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  bool params = false, trans = false, algos = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--params") == 0) params = true;
    else if (std::strcmp(argv[i], "--transports") == 0) trans = true;
    else if (std::strcmp(argv[i], "--algorithms") == 0) algos = true;
    else if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) return usage(argv[0], 0);
    else return usage(argv[0], 2);
  }
  if (!params && !trans && !algos) params = trans = algos = true;
  printVersion();
  if (params) printParams();
  if (trans) printTransports();
  if (algos) printAlgorithms();
  return 0;
}
