// sn_quant_perf: ncclAllReduce against sncclAllReduceQuantized (int8 and int4) on the same float32
// buffers, side by side in one run.
//
//   sn_quant_perf [-b 64M] [-e 64M] [-f 4] [-n 5] [-r 5] [-B 256] [-I ifname]
//                 [-k allreduce,int8,int4] [-P normal|sparse|random]
//
// Ranks come from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT (one process per rank, as the sn_*_perf
// tools' launch mode; perf/netns_pair.sh sets them) or run as one rank alone. For each size, `-r`
// rounds each time the three kinds in turn, `-n` calls per kind and round; the table gives per kind
// the median time per call over the rounds, its speed-up over ncclAllReduce, the bytes this rank's
// interface (-I, default $NETNS_IFNAME) sent per call, how many fewer that is than ncclAllReduce's,
// and the largest error of any element against the exact sum (computed in double). The inputs are
// normally distributed gradients-like values, a different stream per rank.
#include <getopt.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "sn_perf.h"
#include "snccl/snccl.h"

namespace {

struct Kind {
  const char* name;
  int bits;  // 0: ncclAllReduce
};
constexpr Kind kKinds[] = {{"allreduce", 0}, {"int8", 8}, {"int4", 4}};

long long txBytes(const std::string& ifname) {
  if (ifname.empty()) return -1;
  std::ifstream f("/sys/class/net/" + ifname + "/statistics/tx_bytes");
  long long v = -1;
  f >> v;
  return v;
}

// Rank r's inputs for -P pattern.
std::vector<float> inputs(const std::string& pattern, int rank, size_t count) {
  std::vector<float> v(count);
  std::mt19937 rng(1234 + rank);
  std::normal_distribution<float> g(0.0f, 1.0f);
  if (pattern == "random") {
    for (float& x : v) {
      const uint32_t bits = (uint32_t(rng()) & 0x807fffffu) | (uint32_t(64 + rng() % 128) << 23);
      std::memcpy(&x, &bits, sizeof x);  // any sign and mantissa, exponents 2^-63 .. 2^64
    }
  } else {
    const bool sparse = pattern == "sparse";
    for (float& x : v) x = (!sparse || rng() % 10 == 0) ? g(rng) : 0.0f;
  }
  return v;
}

[[noreturn]] void die(const char* what, ncclResult_t r) {
  std::fprintf(stderr, "sn_quant_perf: %s: %s (%s)\n", what, ncclGetErrorString(r), ncclGetLastError(nullptr));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = size_t(64) << 20, maxBytes = minBytes, block = 256;
  int factor = 4, iters = 5, rounds = 5;
  const char* ifenv = std::getenv("NETNS_IFNAME");
  std::string ifname = ifenv != nullptr ? ifenv : "";
  std::string pattern = "normal", kindList = "allreduce,int8,int4";
  int c;
  while ((c = getopt(argc, argv, "b:e:f:n:r:B:I:k:P:h")) != -1) {
    switch (c) {
      case 'b':
        snperf::parseSize(optarg, &minBytes);
        break;
      case 'e':
        snperf::parseSize(optarg, &maxBytes);
        break;
      case 'f':
        factor = std::max(2, std::atoi(optarg));
        break;
      case 'n':
        iters = std::max(1, std::atoi(optarg));
        break;
      case 'r':
        rounds = std::max(1, std::atoi(optarg));
        break;
      case 'B':
        block = std::strtoul(optarg, nullptr, 10);
        break;
      case 'I':
        ifname = optarg;
        break;
      case 'k':
        kindList = optarg;
        break;
      case 'P':
        pattern = optarg;
        break;
      default:
        std::fprintf(stderr,
                     "usage: %s [-b bytes] [-e bytes] [-f factor] [-n iters] [-r rounds] [-B block]\n"
                     "       [-I ifname] [-k kinds] [-P normal|sparse|random]\n",
                     argv[0]);
        return c == 'h' ? 0 : 2;
    }
  }
  std::string err;
  auto coord = snperf::makeLaunchCoordinator(&argc, &argv, &err);
  if (!coord) {
    std::fprintf(stderr, "sn_quant_perf: %s\n", err.c_str());
    return 2;
  }
  const int rank = coord->rank(), n = coord->size();
  if (pattern != "normal" && pattern != "sparse" && pattern != "random") {
    std::fprintf(stderr, "sn_quant_perf: -P %s: expected normal, sparse or random\n", pattern.c_str());
    return 2;
  }
  std::vector<int> kinds;
  for (int k = 0; k < 3; ++k)
    if (("," + kindList + ",").find(std::string(",") + kKinds[k].name + ",") != std::string::npos) kinds.push_back(k);
  if (kinds.empty()) {
    std::fprintf(stderr, "sn_quant_perf: -k %s names none of allreduce, int8, int4\n", kindList.c_str());
    return 2;
  }
  ncclUniqueId id;
  if (rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) die("ncclGetUniqueId", ncclSystemError);
  if (!coord->broadcastId(&id)) return 1;
  ncclComm_t comm;
  if (ncclResult_t r = ncclCommInitRank(&comm, n, id, rank); r != ncclSuccess) die("ncclCommInitRank", r);
  if (rank == 0)
    std::printf(
        "# sn_quant_perf: %d ranks, %s inputs, block %zu, %d rounds x %d calls, bytes sent counted on %s\n"
        "# %12s %10s %12s %8s %14s %9s %12s\n",
        n, pattern.c_str(), block, rounds, iters, ifname.empty() ? "(none: -I)" : ifname.c_str(), "size(B)", "kind",
        "time(us)", "speedup", "sent/call(B)", "fewer", "max err");
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= size_t(factor)) {
    const size_t count = bytes / sizeof(float);
    std::vector<float> send = inputs(pattern, rank, count), recv(count);
    std::vector<std::vector<float>> residual(3);
    for (int k : kinds)
      if (kKinds[k].bits != 0) residual[k].assign(count, 0.0f);
    // The exact sum, from every rank's inputs regenerated here.
    std::vector<double> exact(count, 0.0);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> in = r == rank ? send : inputs(pattern, r, count);
      for (size_t i = 0; i < count; ++i) exact[i] += in[i];
    }
    std::vector<std::vector<double>> us(3);
    std::vector<long long> sent(3, 0);
    std::vector<double> maxErr(3, 0.0);
    for (int round = 0; round <= rounds; ++round) {  // round 0 warms up
      for (int k : kinds) {
        const long long tx0 = txBytes(ifname);
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) {
          ncclResult_t r = kKinds[k].bits == 0
                               ? ncclAllReduce(send.data(), recv.data(), count, ncclFloat32, ncclSum, comm, nullptr)
                               : sncclAllReduceQuantized(send.data(), recv.data(), count, ncclFloat32, ncclSum,
                                                         kKinds[k].bits, block, residual[k].data(), comm, nullptr);
          if (r != ncclSuccess) die(kKinds[k].name, r);
        }
        const double t = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        const long long tx1 = txBytes(ifname);
        if (round == 0) continue;
        us[k].push_back(t / iters);
        if (tx0 >= 0 && tx1 >= tx0) sent[k] += tx1 - tx0;
        if (round == 1)
          for (size_t i = 0; i < count; ++i) maxErr[k] = std::max(maxErr[k], std::fabs(double(recv[i]) - exact[i]));
      }
    }
    std::vector<double> med(3);
    for (int k : kinds) {
      std::sort(us[k].begin(), us[k].end());
      med[k] = us[k][us[k].size() / 2];
    }
    if (rank == 0)
      for (int k : kinds) {
        // Relative to ncclAllReduce when it ran (-k), else to the first kind.
        const int ref = kinds[0];
        const double perCall = double(sent[k]) / (double(rounds) * iters);
        const double base = double(sent[ref]) / (double(rounds) * iters);
        std::printf("  %12zu %10s %12.0f %7.2fx %14.0f %8.1f%% %12.3g\n", bytes, kKinds[k].name, med[k],
                    med[ref] / med[k], perCall, base > 0 ? 100.0 * (1.0 - perCall / base) : 0.0, maxErr[k]);
      }
    std::fflush(stdout);
  }
  ncclCommDestroy(comm);
  return 0;
}
