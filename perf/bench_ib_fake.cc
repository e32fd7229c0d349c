// The IB net's own cost per message: one connection's two ends in this thread over the
// fake verbs provider (tests/net/fake_verbs.h), which carries out each work request
// inside postSend with a memcpy. What a message costs here is the plugin's software
// path on both ends (grant, send, the record write, completions, test) plus the fake's
// bookkeeping: an upper bound of what the proxy spends per message on a real device,
// where the NIC does the fake's work.
//
//   build/perf/bench_ib_fake --benchmark_min_time=0.5
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "net/fake_verbs.h"
#include "transport/net/ib/ib_net.h"

namespace {

namespace net = snccl::net;

struct Conn {
  snccl::test::FakeFabric fabric;
  std::unique_ptr<net::Net> n;
  net::ListenComm* listen = nullptr;
  net::SendComm* send = nullptr;
  net::RecvComm* recv = nullptr;
  std::vector<char> src, dst;
  net::MemHandle *smh = nullptr, *rmh = nullptr;

  explicit Conn(size_t bytes) : src(bytes + 1), dst(bytes + 1) {
    setenv("SNCCL_SOCKET_IFNAME", "=lo", 1);
    fabric.addDefaultDevice();
    n = net::ib::makeIbNet(fabric.verbs());
    if (!n->init().ok() || n->devices() != 1) std::abort();
    net::Handle h;
    if (!n->listen(0, &h, &listen).ok()) std::abort();
    while (send == nullptr || recv == nullptr) {
      if (send == nullptr && !n->connect(0, &h, &send).ok()) std::abort();
      if (recv == nullptr && !n->accept(listen, &recv).ok()) std::abort();
    }
    if (!n->regMr(send, src.data(), src.size(), net::kPtrHost, &smh).ok()) std::abort();
    if (!n->regMr(recv, dst.data(), dst.size(), net::kPtrHost, &rmh).ok()) std::abort();
  }
  ~Conn() {
    (void)n->deregMr(send, smh);
    (void)n->deregMr(recv, rmh);
    (void)n->closeSend(send, 1);  // an abort code: no goodbye to wait for
    (void)n->closeRecv(recv, 1);
    (void)n->closeListen(listen);
  }

  // One message: the receive (its credit), the send, and tests until both are done.
  void message(size_t bytes) {
    void* d = dst.data();
    size_t cap = bytes;
    int tag = 0;
    net::Request *rr = nullptr, *sr = nullptr;
    if (!n->irecv(recv, 1, &d, &cap, &tag, &rmh, &rr).ok() || rr == nullptr) std::abort();
    while (sr == nullptr)
      if (!n->isend(send, src.data(), bytes, 0, 7, smh, &sr).ok()) std::abort();
    bool sd = false, rd = false;
    while (!sd || !rd) {
      if (!sd && !n->test(sr, &sd, nullptr, nullptr).ok()) std::abort();
      if (!rd && !n->test(rr, &rd, nullptr, nullptr).ok()) std::abort();
    }
  }
};

void BM_IbFakeMessage(benchmark::State& state) {
  const size_t bytes = size_t(state.range(0));
  Conn c(bytes);
  for (auto _ : state) c.message(bytes);
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_IbFakeMessage)->Arg(8)->Arg(4096);

}  // namespace

BENCHMARK_MAIN();
