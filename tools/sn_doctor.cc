// sn_doctor: merges the flight recorder dumps of a job's ranks (SNCCL_FLIGHT_DIR, or
// sncclCommDumpFlightRecorder) and names, per communicator, what went wrong first.
//
//   sn_doctor DIR|FILE...
//
// Exit status: 0 when no communicator shows a fault, 1 when one does, 2 when nothing
// could be read.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "flight_doctor.h"

namespace {

void usage() {
  std::printf(
      "usage: sn_doctor DIR|FILE...\n"
      "Reads snccl flight recorder dumps (snccl-flight-*.txt in each DIR, or the FILEs given),\n"
      "groups them by communicator and names what went wrong first in each: a mismatched\n"
      "call, a rank that died, stopped or fell behind, or a failed link between two ranks.\n"
      "Dumps are written to SNCCL_FLIGHT_DIR on a communicator's first error or abort, on\n"
      "SNCCL_FLIGHT_SIGNAL, and by sncclCommDumpFlightRecorder (docs/operations.md).\n"
      "Exit status: 0 no fault, 1 a fault, 2 no dump could be read.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "-h") == 0 || std::strcmp(argv[1], "--help") == 0) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  std::vector<snccl::doctor::Dump> dumps;
  for (int i = 1; i < argc; ++i) {
    for (const std::string& f : snccl::doctor::dumpFiles(argv[i])) {
      snccl::doctor::Dump d;
      std::string err;
      if (snccl::doctor::readDump(f, &d, &err)) {
        dumps.push_back(std::move(d));
      } else {
        std::fprintf(stderr, "sn_doctor: %s: %s\n", f.c_str(), err.c_str());
      }
    }
  }
  if (dumps.empty()) {
    std::fprintf(stderr, "sn_doctor: no flight recorder dump found\n");
    return 2;
  }
  bool fault = false;
  for (const auto& [hash, group] : snccl::doctor::byComm(dumps)) {
    const snccl::doctor::Diagnosis dx = snccl::doctor::diagnose(group);
    fault |= dx.verdict != snccl::doctor::Verdict::kNoFault;
    std::printf("communicator %016llx (%d ranks, %zu dumps)\n", (unsigned long long)hash, group[0].nranks,
                group.size());
    std::printf("  verdict: %s\n  %s\n", snccl::doctor::verdictName(dx.verdict), dx.summary.c_str());
    for (const std::string& line : dx.details) std::printf("    %s\n", line.c_str());
  }
  return fault ? 1 : 0;
}
