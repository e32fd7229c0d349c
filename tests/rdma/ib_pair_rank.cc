// One rank of a two-"node" run over the IB net, one rank per QEMU guest (rxe_vm.sh pair):
// RANK, WORLD_SIZE and SNCCL_COMM_ID (MASTER_ADDR:MASTER_PORT) say who it is.
//
//   ib_pair_rank grid              every collective (net_checks.h); exit 0 when all pass
//   ib_pair_rank loop [--die-after N] [--cut-after N CMD]
//       AllReduce in a loop until one fails (at most 120 s). --die-after: this rank exits
//       abruptly after N iterations (a killed peer). --cut-after: this rank runs CMD (say,
//       `ip link set eth0 down`) after N iterations and goes on. Prints the error and how
//       long after the fault it came; exit 0 when the loop ended in an error, 1 when not.
//   ib_pair_rank survive N [--cut-after K CMD]
//       N AllReduces of 400 KB (each checked: every rank contributes rank + 1), running CMD
//       after K of them; exit 0 when all N succeeded with the right sums, 1 when not (a
//       fault the connection should live through, such as one rail of several cut).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "net/net_checks.h"
#include "snccl/nccl.h"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int envInt(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : -1;
}

}  // namespace

int main(int argc, char** argv) {
  const int rank = envInt("RANK"), size = envInt("WORLD_SIZE");
  if (argc < 2 || rank < 0 || size < 1 || std::getenv("SNCCL_COMM_ID") == nullptr) {
    std::fprintf(stderr, "usage: RANK=r WORLD_SIZE=n SNCCL_COMM_ID=host:port %s grid|loop [...]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  int dieAfter = -1, cutAfter = -1;
  std::string cutCmd;
  for (int i = 2; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--die-after") == 0) dieAfter = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "--cut-after") == 0 && i + 2 < argc) {
      cutAfter = std::atoi(argv[++i]);
      cutCmd = argv[++i];
    }
  }
  ncclUniqueId id;
  ncclComm_t comm = nullptr;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, size, id, rank) != ncclSuccess) {
    std::printf("[rank %d] init failed: %s\n", rank, ncclGetLastError(nullptr));
    return 1;
  }
  if (mode == "survive") {
    const int iters = argc > 2 ? std::atoi(argv[2]) : 0;
    const int32_t want = size * (size + 1) / 2;
    std::vector<int32_t> v(100000);
    for (int it = 0; it < iters; ++it) {
      if (it == cutAfter) {
        std::printf("[rank %d] after %d iterations: %s\n", rank, it, cutCmd.c_str());
        std::fflush(stdout);
        if (std::system(cutCmd.c_str()) != 0) std::printf("[rank %d] the fault command failed\n", rank);
      }
      std::fill(v.begin(), v.end(), rank + 1);
      ncclResult_t r = ncclAllReduce(v.data(), v.data(), v.size(), ncclInt32, ncclSum, comm, nullptr);
      if (r != ncclSuccess || std::count(v.begin(), v.end(), want) != ptrdiff_t(v.size())) {
        std::printf("[rank %d] FAILED at iteration %d: %s\n", rank, it,
                    r != ncclSuccess ? ncclGetLastError(comm) : "wrong sums");
        ncclCommAbort(comm);
        return 1;
      }
    }
    std::printf("[rank %d] %d iterations PASSED\n", rank, iters);
    ncclCommDestroy(comm);
    return 0;
  }
  if (mode == "grid") {
    nettest::Checker c(comm, rank, size);
    bool ok = c.all({0, 1, 7, 1031, 30001});
    std::printf("[rank %d] grid %s %s\n", rank, ok ? "PASSED" : "FAILED:", c.error().c_str());
    ncclCommDestroy(comm);
    return ok ? 0 : 1;
  }
  std::vector<int32_t> buf(5000, 1);
  double tFault = 0;
  const double end = now() + 120;
  for (int it = 0; now() < end; ++it) {
    if (it == dieAfter) {
      std::printf("[rank %d] exiting abruptly after %d iterations\n", rank, it);
      std::fflush(stdout);
      _exit(9);
    }
    if (it == cutAfter) {
      std::printf("[rank %d] after %d iterations: %s\n", rank, it, cutCmd.c_str());
      std::fflush(stdout);
      tFault = now();
      if (std::system(cutCmd.c_str()) != 0) std::printf("[rank %d] the fault command failed\n", rank);
    }
    ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclSum, comm, nullptr);
    if (r != ncclSuccess) {
      std::printf("[rank %d] ERROR after %d iterations (%.1f s after a local fault): %s: %s\n", rank, it,
                  tFault > 0 ? now() - tFault : -1.0, ncclGetErrorString(r), ncclGetLastError(comm));
      ncclCommAbort(comm);
      return 0;
    }
    if (it % 50 == 0) {
      std::printf("[rank %d] %d iterations\n", rank, it);
      std::fflush(stdout);
    }
  }
  std::printf("[rank %d] NO ERROR within 120 s\n", rank);
  ncclCommAbort(comm);
  return 1;
}
