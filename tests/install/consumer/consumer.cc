// Installed-package consumer (C++): version, then a 2-rank allreduce, one thread per rank.
#include <nccl.h>  // the include directory of snccl::snccl makes NCCL's spelling work
#include <snccl/snccl.h>

#include <cstdio>
#include <thread>
#include <vector>

int main() {
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) return 1;
  std::printf("%s: ncclGetVersion %d\n", sncclVersionString(), version);
  constexpr int kRanks = 2;
  ncclComm_t comms[kRanks];
  if (ncclCommInitAll(comms, kRanks, nullptr) != ncclSuccess) return 2;
  int bad = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      std::vector<int> buf(1000, r + 1);
      if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt, ncclSum, comms[r], nullptr) != ncclSuccess ||
          buf[0] != 3 || buf[999] != 3)
        bad = 1;
    });
  }
  for (auto& t : threads) t.join();
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  std::printf("allreduce over %d ranks: %s\n", kRanks, bad ? "WRONG" : "ok");
  return bad ? 3 : 0;
}
