// sn_allreduce_perf: an nccl-tests style benchmark of ncclAllReduce on host memory.
//
// Minimal first version: ranks are threads of this process (-g N), sizes -b/-e/-f,
// iterations -n/-w, validation -c. Output follows nccl-tests 2.19's table.
#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "snccl/nccl.h"
#include "snccl/snccl.h"

namespace {

struct Options {
  size_t minBytes = 32 << 20;
  size_t maxBytes = 32 << 20;
  size_t stepBytes = 1 << 20;
  int stepFactor = 0;
  int iters = 20;
  int warmup = 1;
  int check = 1;
  int ngpus = 1;
  int nthreads = 1;
};

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (*end) {
    case 'G': case 'g': v *= 1024.0;  [[fallthrough]];
    case 'M': case 'm': v *= 1024.0;  [[fallthrough]];
    case 'K': case 'k': v *= 1024.0; break;
    default: break;
  }
  return size_t(v);
}

// Fits a number into `width` characters the way nccl-tests does.
std::string fit(double v, int width) {
  char buf[64];
  for (const char* f : {"%.2f", "%.1f", "%.0f"}) {
    std::snprintf(buf, sizeof buf, f, v);
    if (int(std::strlen(buf)) <= width) return buf;
  }
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

struct RankState {
  ncclComm_t comm;
  float* send;
  float* recv;
  long wrong = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  static option longOpts[] = {{"minbytes", 1, 0, 'b'}, {"maxbytes", 1, 0, 'e'}, {"stepbytes", 1, 0, 'i'},
                              {"stepfactor", 1, 0, 'f'}, {"iters", 1, 0, 'n'}, {"warmup_iters", 1, 0, 'w'},
                              {"check", 1, 0, 'c'}, {"ngpus", 1, 0, 'g'}, {"nthreads", 1, 0, 't'},
                              {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "b:e:i:f:n:w:c:g:t:h", longOpts, nullptr)) != -1) {
    switch (c) {
      case 'b': o.minBytes = parseSize(optarg); break;
      case 'e': o.maxBytes = parseSize(optarg); break;
      case 'i': o.stepBytes = parseSize(optarg); break;
      case 'f': o.stepFactor = std::atoi(optarg); break;
      case 'n': o.iters = std::atoi(optarg); break;
      case 'w': o.warmup = std::atoi(optarg); break;
      case 'c': o.check = std::atoi(optarg); break;
      case 'g': o.ngpus = std::atoi(optarg); break;
      case 't': o.nthreads = std::atoi(optarg); break;
      default:
        std::printf("usage: %s [-b minbytes] [-e maxbytes] [-f stepfactor | -i stepbytes] [-n iters] "
                    "[-w warmup] [-c check] [-g ranks] [-t threads]\n", argv[0]);
        return c == 'h' ? 0 : 6;
    }
  }
  const int n = o.ngpus * o.nthreads;
  if (n < 1 || o.maxBytes < o.minBytes) {
    std::fprintf(stderr, "invalid arguments\n");
    return 6;
  }
  int version = 0;
  ncclGetVersion(&version);
  std::printf("# nccl-tests version 2.19.6 nccl-headers=%d nccl-library=%d\n", NCCL_VERSION_CODE, version);
  std::printf("# Collective test starting: sn_allreduce_perf\n");
  std::printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d agg iters: 1 "
              "validation: %d graph: 0 unalign: 0\n#\n# Using devices\n",
              o.nthreads, o.ngpus, o.minBytes, o.maxBytes, o.stepFactor ? size_t(o.stepFactor) : o.stepBytes,
              o.stepFactor ? "factor" : "bytes", o.warmup, o.iters, o.check);
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  for (int r = 0; r < n; ++r)
    std::printf("#  Rank %2d Group  0 Pid %6d on %10s device %2d [0000:00:00] host memory\n", r, getpid(), host, r);
  std::printf("#\n#%66s%-36s%s\n", "", "out-of-place", "in-place");
  std::printf("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   "
              "busbw #wrong\n");
  std::printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  "
              "(GB/s)\n");

  std::vector<ncclComm_t> comms(n);
  if (ncclCommInitAll(comms.data(), n, nullptr) != ncclSuccess) {
    std::fprintf(stderr, "%s: Test NCCL failure '%s'\n", host, ncclGetLastError(nullptr));
    return 3;
  }
  std::vector<RankState> st(n);
  size_t maxCount = o.maxBytes / sizeof(float);
  for (int r = 0; r < n; ++r) {
    st[r].comm = comms[r];
    void* p;
    ncclMemAlloc(&p, std::max<size_t>(maxCount, 1) * sizeof(float));
    st[r].send = static_cast<float*>(p);
    ncclMemAlloc(&p, std::max<size_t>(maxCount, 1) * sizeof(float));
    st[r].recv = static_cast<float*>(p);
  }
  double bwSum = 0;
  int bwCount = 0;
  long wrongResults = 0;
  std::atomic<int> failed{0};
  for (size_t bytes = o.minBytes; bytes <= o.maxBytes;
       bytes = o.stepFactor > 1 ? bytes * o.stepFactor : bytes + std::max<size_t>(o.stepBytes, 1)) {
    size_t count = bytes / sizeof(float);
    std::printf("%12zu  %12zu  %8s  %6s  %6s", count * sizeof(float), count, "float", "sum", "-1");
    for (int inplace = 0; inplace < 2; ++inplace) {
      std::barrier sync(n);
      std::vector<double> usec(n);
      std::vector<std::thread> threads;
      for (int r = 0; r < n; ++r)
        threads.emplace_back([&, r] {
          RankState& s = st[r];
          float* out = inplace ? s.send : s.recv;
          auto run = [&] {
            if (ncclAllReduce(s.send, out, count, ncclFloat, ncclSum, s.comm, nullptr) != ncclSuccess) failed++;
          };
          for (int i = 0; i < o.warmup; ++i) run();
          sync.arrive_and_wait();
          auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < o.iters; ++i) run();
          auto t1 = std::chrono::steady_clock::now();
          usec[r] = std::chrono::duration<double, std::micro>(t1 - t0).count() / std::max(o.iters, 1);
          s.wrong = 0;
          if (o.check) {
            // Small integers: exact in any summation order.
            for (size_t i = 0; i < count; ++i) s.send[i] = float((r + i) % 8);
            sync.arrive_and_wait();
            run();
            for (size_t i = 0; i < count; ++i) {
              float e = 0;
              for (int q = 0; q < n; ++q) e += float((q + i) % 8);
              if (out[i] != e) ++s.wrong;
            }
          }
        });
      for (auto& t : threads) t.join();
      double t = 0;
      long wrong = 0;
      for (int r = 0; r < n; ++r) t += usec[r], wrong += st[r].wrong;
      t /= n;
      double algbw = double(count * sizeof(float)) / t / 1e3;
      double busbw = algbw * (n > 1 ? 2.0 * (n - 1) / n : 1.0);
      bwSum += busbw;
      ++bwCount;
      if (wrong) ++wrongResults;
      std::printf("  %7s  %6s  %6s", fit(t, 7).c_str(), fit(algbw, 6).c_str(), fit(busbw, 6).c_str());
      if (o.check) std::printf("  %6ld", wrong); else std::printf("  %6s", "N/A");
    }
    std::printf("\n");
    std::fflush(stdout);
    if (o.stepFactor <= 1 && o.stepBytes == 0) break;
  }
  for (int r = 0; r < n; ++r) {
    ncclMemFree(st[r].send);
    ncclMemFree(st[r].recv);
    ncclCommDestroy(comms[r]);
  }
  std::printf("# Out of bounds values : %ld %s\n", wrongResults, wrongResults ? "FAILED" : "OK");
  std::printf("# Avg bus bandwidth    : %g \n#\n# Collective test concluded: sn_allreduce_perf\n",
              bwCount ? bwSum / bwCount : 0.0);
  if (failed) return 3;
  return wrongResults ? 7 : 0;
}
