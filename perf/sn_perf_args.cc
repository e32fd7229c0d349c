// nccl-tests 2.19's command line. Flags that only make sense on a GPU (-G, -D, -x, -V)
// are refused with a message rather than silently ignored: a user who asks for CUDA graphs
// must not be handed host numbers labelled as such.
#include <getopt.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sn_perf.h"
#include "sn_perf_data.h"

namespace snperf {

namespace {

const option kLongOpts[] = {
    {"nthreads", required_argument, nullptr, 't'},       {"ngpus", required_argument, nullptr, 'g'},
    {"minbytes", required_argument, nullptr, 'b'},       {"maxbytes", required_argument, nullptr, 'e'},
    {"stepbytes", required_argument, nullptr, 'i'},      {"stepfactor", required_argument, nullptr, 'f'},
    {"iters", required_argument, nullptr, 'n'},          {"agg_iters", required_argument, nullptr, 'm'},
    {"warmup_iters", required_argument, nullptr, 'w'},   {"run_cycles", required_argument, nullptr, 'N'},
    {"parallel_init", required_argument, nullptr, 'p'},  {"check", required_argument, nullptr, 'c'},
    {"op", required_argument, nullptr, 'o'},             {"datatype", required_argument, nullptr, 'd'},
    {"root", required_argument, nullptr, 'r'},           {"blocking", required_argument, nullptr, 'z'},
    {"stream_null", required_argument, nullptr, 'y'},    {"timeout", required_argument, nullptr, 'T'},
    {"cudagraph", required_argument, nullptr, 'G'},      {"report_cputime", required_argument, nullptr, 'C'},
    {"report_timestamps", required_argument, nullptr, 'S'}, {"average", required_argument, nullptr, 'a'},
    {"local_register", required_argument, nullptr, 'R'}, {"cta_policy", required_argument, nullptr, 'x'},
    {"device_implementation", required_argument, nullptr, 'D'},
    {"device_cta_count", required_argument, nullptr, 'V'}, {"output_file", required_argument, nullptr, 'J'},
    {"unalign", required_argument, nullptr, 'u'},        {"memory", required_argument, nullptr, 'M'},
    {"per_iter_timing", required_argument, nullptr, 'I'}, {"per_iter_skip", required_argument, nullptr, 'K'},
    {"alloc", required_argument, nullptr, 'A'},
    {"help", no_argument, nullptr, 'h'},                 {nullptr, 0, nullptr, 0}};

void usage(const char* prog) {
  std::printf(
      "USAGE: %s\n"
      "  [-t,--nthreads <threads per process>] [-g,--ngpus <ranks per thread>]\n"
      "  [-b,--minbytes <min size in bytes>] [-e,--maxbytes <max size in bytes>]\n"
      "  [-i,--stepbytes <increment size>] [-f,--stepfactor <increment factor>]\n"
      "  [-n,--iters <iteration count>] [-m,--agg_iters <aggregated iteration count>]\n"
      "  [-w,--warmup_iters <warmup iteration count>] [-N,--run_cycles <cycle count> (0 = infinite)]\n"
      "  [-p,--parallel_init <0/1>] [-c,--check <check iteration count>]\n"
      "  [-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
      "  [-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/f8e4m3/f8e5m2/all>]\n"
      "  [-r,--root <root|all>] [-z,--blocking <0/1/2/3>] [-y,--stream_null <0/1>]\n"
      "  [-T,--timeout <time in seconds>] [-C,--report_cputime <0/1>] [-S,--report_timestamps <0/1>]\n"
      "  [-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
      "  [-R,--local_register <0/1/2> (1: ncclCommRegister, 2: symmetric window)]\n"
      "  [-J,--output_file <JSON report file>] [-u,--unalign <elements>] [-M,--memory <0/1>]\n"
      "  [-I,--per_iter_timing <0/1> time each call after a barrier; a line per size gives the\n"
      "   median, 99th percentile and largest time per call of the slowest rank]\n"
      "  [-A,--alloc <memalloc/malloc/memalign/device> buffers from ncclMemAlloc (default), malloc,\n"
      "   posix_memalign to 64 bytes, or CUDA device memory (calls on one CUDA stream per rank)]\n"
      "  [-h,--help]\n"
      "Ranks = processes x threads x ranks per thread. Processes: mpirun (the *_perf_mpi\n"
      "executables) or RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (perf/launch_local.sh).\n"
      "-G, -D, -x, -V (CUDA graphs and the device API) are not available.\n",
      prog);
}

bool parseInt(const char* text, long lo, long hi, int* out) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 0);
  if (end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = int(v);
  return true;
}

bool parseBool(const char* text, bool* out) {
  int v = 0;
  if (!parseInt(text, 0, 1, &v)) return false;
  *out = v != 0;
  return true;
}

bool parseTypes(const char* text, Options* o) {
  o->types.clear();
  if (std::strcmp(text, "all") == 0) {
    for (int t = 0; t < ncclNumTypes; ++t) o->types.push_back(ncclDataType_t(t));
    return true;
  }
  const TypeDesc* t = findType(text);
  if (t == nullptr) return false;
  o->types.push_back(t->dt);
  return true;
}

bool parseOps(const char* text, Options* o) {
  o->ops.clear();
  for (int op = 0; op < kNumOpKinds; ++op)
    if (std::strcmp(text, "all") == 0 || std::strcmp(text, opKindName(op)) == 0) o->ops.push_back(op);
  return !o->ops.empty();
}

bool parseAlloc(const char* text, Options* o) {
  for (BufAlloc a : {BufAlloc::kMemAlloc, BufAlloc::kMalloc, BufAlloc::kMemalign, BufAlloc::kDevice})
    if (std::strcmp(text, bufAllocName(a)) == 0) {
      o->alloc = a;
      return true;
    }
  return false;
}

// A flag for CUDA-only machinery: accepted when it asks for nothing.
int refuseDevice(const char* prog, int flag, const char* arg, const char* what) {
  int v = 0;
  if ((flag == 'G' || flag == 'D') && parseInt(arg, 0, 0, &v)) return -1;
  std::fprintf(stderr, "%s: -%c (%s) needs CUDA; snccl's perf tools run on host memory and have no device "
               "implementation\n", prog, flag, what);
  return kInvalidUsage;
}

// Handles one flag; returns -1 to go on, else an exit code.
int applyFlag(int c, const char* arg, const char* prog, Options* o) {
  int v = 0;
  bool ok = true;
  switch (c) {
    case 't': ok = parseInt(arg, 1, 1024, &o->nThreads); break;
    case 'g': ok = parseInt(arg, 1, 1024, &o->nGpus); break;
    case 'b': ok = parseSize(arg, &o->minBytes); break;
    case 'e': ok = parseSize(arg, &o->maxBytes); break;
    case 'i': ok = parseSize(arg, &o->stepBytes); break;
    case 'f': ok = parseInt(arg, 1, 1 << 20, &o->stepFactor); break;
    case 'n': ok = parseInt(arg, 1, 1 << 30, &o->iters); break;
    case 'm': ok = parseInt(arg, 1, 1 << 20, &o->aggIters); break;
    case 'w': ok = parseInt(arg, 0, 1 << 30, &o->warmup); break;
    case 'N': ok = parseInt(arg, 0, 1 << 30, &o->cycles); break;
    case 'p': ok = parseBool(arg, &o->parallelInit); break;
    case 'c': ok = parseInt(arg, 0, 1 << 20, &o->check); break;
    case 'o': ok = parseOps(arg, o); break;
    case 'd': ok = parseTypes(arg, o); break;
    case 'r': ok = std::strcmp(arg, "all") == 0 ? (o->root = -1, true) : parseInt(arg, 0, 1 << 30, &o->root); break;
    case 'z': ok = parseInt(arg, 0, 3, &o->blocking); break;
    case 'y': ok = parseBool(arg, &o->streamNull); break;
    case 'T': ok = parseInt(arg, 0, 1 << 30, &o->timeoutSec); break;
    case 'C': ok = parseBool(arg, &o->cpuTime); break;
    case 'S': ok = parseBool(arg, &o->timestamps); break;
    case 'a': ok = parseInt(arg, 0, 3, &o->average); break;
    case 'R': ok = parseInt(arg, 0, 2, &o->localRegister); break;
    case 'J': o->jsonFile = arg; break;
    case 'u': ok = parseInt(arg, 0, 1 << 20, &o->unalign); break;
    case 'M': ok = parseBool(arg, &o->memReport); break;
    case 'A': ok = parseAlloc(arg, o); break;
    case 'G': return refuseDevice(prog, c, arg, "CUDA graphs");
    case 'D': return refuseDevice(prog, c, arg, "device implementation");
    case 'x': return refuseDevice(prog, c, arg, "CTA policy");
    case 'V': return refuseDevice(prog, c, arg, "device CTA count");
    case 'I': ok = parseBool(arg, &o->perIterTiming); break;
    case 'K':
      if (parseInt(arg, 0, 0, &v)) return -1;
      std::fprintf(stderr, "%s: -%c (skipping the first timed iterations) is not implemented\n", prog, c);
      return kNotImplemented;
    case 'h': usage(prog); return kOk;
    default: usage(prog); return kInvalidUsage;
  }
  if (ok) return -1;
  std::fprintf(stderr, "%s: invalid value '%s' for -%c\n", prog, arg, c);
  return kInvalidUsage;
}

}  // namespace

const char* bufAllocName(BufAlloc a) {
  switch (a) {
    case BufAlloc::kMalloc: return "malloc";
    case BufAlloc::kMemalign: return "memalign";
    case BufAlloc::kDevice:
      return "device";
    default: return "memalloc";
  }
}

bool parseSize(const char* text, size_t* out) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (end == text || !(v >= 0)) return false;
  double mult = 1;
  switch (*end) {
    case 'T': case 't': mult *= 1024.0; [[fallthrough]];
    case 'G': case 'g': mult *= 1024.0; [[fallthrough]];
    case 'M': case 'm': mult *= 1024.0; [[fallthrough]];
    case 'K': case 'k': mult *= 1024.0; ++end; break;
    default: break;
  }
  if (*end == 'B' || *end == 'b') ++end;
  if (*end != '\0' || v * mult > 9.0e18) return false;
  *out = size_t(std::llround(v * mult));
  return true;
}

int parseOptions(int argc, char** argv, const char* prog, Options* o) {
  optind = 0;  // GNU getopt: full re-initialisation, so the parser can run more than once
  int c;
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:N:p:c:o:d:r:z:y:T:G:C:S:a:R:x:D:V:J:u:M:I:K:A:h", kLongOpts,
                          nullptr)) != -1) {
    int rc = applyFlag(c, optarg, prog, o);
    if (rc >= 0) return rc;
  }
  if (optind < argc) {
    std::fprintf(stderr, "%s: unexpected argument '%s'\n", prog, argv[optind]);
    return kInvalidUsage;
  }
  if (o->minBytes > o->maxBytes) {
    std::fprintf(stderr, "%s: invalid sizes for 'minbytes' and 'maxbytes': %zu > %zu\n", prog, o->minBytes,
                 o->maxBytes);
    return kInvalidUsage;
  }
  if (o->stepFactor <= 1 && o->stepBytes == 0 && o->minBytes < o->maxBytes) {
    std::fprintf(stderr, "%s: -i 0 without -f never reaches maxbytes\n", prog);
    return kInvalidUsage;
  }
  return -1;
}

}  // namespace snperf
