// Collectives over the IB net on a real verbs device, through the public API: ranks as
// processes of one guest, each its own "node" (SNCCL_HOSTID), so every connection
// between them is an RC connection on the Soft-RoCE device. Every collective, odd rank
// counts, zero and unaligned counts, in and out of place (net_checks.h); few and small
// slots so that credits run out; striping over queue pairs; malloc'd buffers, registered
// in odd rounds (received into in place: the receiver offers them to the sender), freed
// and reallocated between calls; and a peer killed in the middle. Skips (loudly) without
// an RDMA device.
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "mp/user_buffers.h"
#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/net_log.h"
#include "transport/net/ib/ib_verbs.h"

namespace {

using nettest::Cluster;
using nettest::Outcome;
using nettest::Shared;

bool haveRdmaDevice() {
  auto v = snccl::net::ib::systemVerbs();
  if (!v.ok()) return false;
  int n = 0;
  ibv_device** list = v.value()->getDeviceList(&n);
  if (list != nullptr) v.value()->freeDeviceList(list);
  return n > 0;
}

#define SKIP_UNLESS_RDMA()                                                                  \
  do {                                                                                      \
    if (!haveRdmaDevice()) {                                                                \
      std::fprintf(stderr, "RDMA SKIP: no RDMA device (run under tests/rdma/rxe_vm.sh)\n"); \
      GTEST_SKIP() << "no RDMA device";                                                     \
    }                                                                                       \
  } while (0)

// Soft-RoCE under emulation moves tens of MB/s: counts stay small.
const std::vector<size_t> kCounts = {0, 1, 7, 1031, 30001};

nettest::Body checkAll(std::vector<size_t> counts) {
  return [counts](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker c(comm, rank, n);
    bool ok = c.all(counts);
    nettest::report(sh, rank, ok ? 0 : 1, c.error());
    return ok;
  };
}

Cluster ibCluster(int nranks, int perNode = 1) {
  Cluster c;
  c.nranks = nranks;
  c.ranksPerNode = perNode;
  c.timeoutSec = 600;
  c.env = {{"SNCCL_NET", "IB"}, {"SNCCL_TIMEOUT", "120"}, {"NCCL_IB_TIMEOUT", "14"}};
  if (const char* ifname = std::getenv("SNCCL_RXE_IFNAME")) c.env.push_back({"SNCCL_SOCKET_IFNAME", ifname});
  return c;
}

// Also: the IB net's own slot geometry (NCCL's 8 x 512 KiB, net::Net::slotDefaults) on
// every rank when the user set none.
TEST(IbRanks, TwoNodes) {
  SKIP_UNLESS_RDMA();
  const std::string all = nettest::runLogged(ibCluster(2), "INIT", checkAll(kCounts));
  const std::string want =
      "8 slots of 524288 B per connection (SNCCL_NET_STEPS=8, SNCCL_NET_BUFFSIZE=4194304, the net's defaults; "
      "ranks span nodes)";
  size_t lines = 0;
  for (size_t at = all.find(want); at != std::string::npos; at = all.find(want, at + 1)) ++lines;
  EXPECT_EQ(lines, 2u) << all;
}

TEST(IbRanks, ThreeNodes) {
  SKIP_UNLESS_RDMA();
  Outcome o = nettest::runCluster(ibCluster(3), checkAll(kCounts));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(IbRanks, ThreeNodesTwoQpsTinySlots) {
  SKIP_UNLESS_RDMA();
  Cluster c = ibCluster(3);
  c.env.push_back({"NCCL_IB_QPS_PER_CONNECTION", "2"});
  c.env.push_back({"SNCCL_IB_SPLIT_BYTES", "4096"});
  c.env.push_back({"SNCCL_NET_BUFFSIZE", "16384"});
  c.env.push_back({"SNCCL_NET_STEPS", "2"});
  Outcome o = nettest::runCluster(c, checkAll({0, 5, 9001}));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// What torch and MPI programs pass (mp/user_buffers.h): every collective on malloc'd
// buffers, freed and reallocated between calls, registered with ncclCommRegister in odd
// rounds, so that the registered ones are received into in place (the IB net offers them
// to the sender in front of each credit) and a registration outliving its buffer would
// show as wrong results or a remote access error.
TEST(IbRanks, ThreeNodesReallocatedAndRegisteredUserBuffers) {
  SKIP_UNLESS_RDMA();
  Outcome o = nettest::runCluster(ibCluster(3), [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    bool ok = userbuf::reallocBody(comm, rank, n);
    nettest::report(sh, rank, ok ? 0 : 1, ok ? "" : "a call failed or a result was wrong (see the rank's stderr)");
    return ok;
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Rank 2 is killed while the ranks loop on AllReduce: every survivor returns an error
// (nothing hangs), and at least one names the IB net as where it learned of it.
TEST(IbRanks, KilledPeerGivesErrorsNotHangs) {
  SKIP_UNLESS_RDMA();
  Cluster c = ibCluster(3);
  c.env[1] = {"SNCCL_TIMEOUT", "30"};
  Outcome o = nettest::runCluster(
      c,
      [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
        std::vector<int32_t> buf(5000, 1);
        double end = nettest::nowSec() + 120;
        for (int it = 0; nettest::nowSec() < end; ++it) {
          ncclResult_t res = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt32, ncclSum, comm, nullptr);
          if (res != ncclSuccess) {
            nettest::report(sh, rank, res, ncclGetLastError(nullptr));
            *abort = true;
            return true;
          }
          __atomic_store_n(&sh->r[rank].iters, it + 1, __ATOMIC_RELEASE);
        }
        nettest::report(sh, rank, 0, "no error within 120 s");
        *abort = true;
        return false;
      },
      [&](Shared* sh, const std::vector<pid_t>& pids) {
        double deadline = nettest::nowSec() + 120;
        while (__atomic_load_n(&sh->r[2].iters, __ATOMIC_ACQUIRE) < 3 && nettest::nowSec() < deadline) usleep(5000);
        kill(pids[2], SIGKILL);
      });
  std::string all = o.describe();
  std::fprintf(stderr, "%s", all.c_str());
  bool namesIb = false;
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(o.reports[r].code, 0) << "rank " << r << " did not fail\n" << all;
    EXPECT_NE(o.reports[r].code, -1) << "rank " << r << " never finished\n" << all;
    namesIb = namesIb || std::string(o.reports[r].msg).find("NET/IB") != std::string::npos;
  }
  EXPECT_TRUE(namesIb) << all;
}

}  // namespace
