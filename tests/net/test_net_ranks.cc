// The net transport end to end through the public API: ranks as processes on loopback,
// grouped into "nodes" by SNCCL_HOSTID, so ranks of different nodes talk through the
// socket net and the proxy thread while ranks of one node use shm.
#include <gtest/gtest.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/net_log.h"
#include "support/temp_dir.h"

namespace {

using nettest::Cluster;
using nettest::runLogged;
using nettest::Outcome;
using nettest::Shared;

const std::vector<size_t> kCounts = {0, 1, 7, 1031, 200003};

nettest::Body checkAll(std::vector<size_t> counts) {
  return [counts](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker c(comm, rank, n);
    bool ok = c.all(counts);
    nettest::report(sh, rank, ok ? 0 : 1, c.error());
    return ok;
  };
}

Cluster loopback(int nranks, int perNode) {
  Cluster c;
  c.nranks = nranks;
  c.ranksPerNode = perNode;
  c.env = {{"SNCCL_SOCKET_IFNAME", "=lo"}, {"SNCCL_TIMEOUT", "60"}};
  return c;
}

TEST(NetRanks, TwoNodesOneRankEach) {
  Outcome o = nettest::runCluster(loopback(2, 1), checkAll(kCounts));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(NetRanks, ThreeNodesOneRankEach) {
  Outcome o = nettest::runCluster(loopback(3, 1), checkAll(kCounts));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(NetRanks, FourNodesOneRankEach) {
  Outcome o = nettest::runCluster(loopback(4, 1), checkAll(kCounts));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

TEST(NetRanks, TwoNodesTwoRanksEachMixShmAndNet) {
  Outcome o = nettest::runCluster(loopback(4, 2), checkAll(kCounts));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Small slots and few steps: every message fills a slot, credits run out constantly.
TEST(NetRanks, TinySlotsExerciseCredits) {
  Cluster c = loopback(3, 1);
  c.env.push_back({"SNCCL_BUFFSIZE", "16384"});
  c.env.push_back({"SNCCL_STEPS", "2"});
  Outcome o = nettest::runCluster(c, checkAll({1, 1031, 50000}));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// The executor drives its net rings only while it runs an operation, and between
// operations hands them back without waking the proxy when they owe nothing. Here one
// rank at a time stays out of the collectives for a while, so the others post the next
// operation's data and credits to a rank whose rings nobody drives and whose proxy may be
// asleep; tiny slots make every operation need many credits. Nothing may be lost or hang.
TEST(NetRanks, IdleGapsBetweenOperationsLoseNothing) {
  Cluster c = loopback(3, 1);
  c.env.push_back({"SNCCL_BUFFSIZE", "16384"});
  c.env.push_back({"SNCCL_STEPS", "2"});
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    const size_t count = 20011;  // ~10 slots of 8 KiB per rank's share
    std::vector<float> in(count), out(count);
    std::string err;
    for (int it = 0; it < 12 && err.empty(); ++it) {
      if (rank == it % n) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      for (size_t i = 0; i < count; ++i) in[i] = float((rank + 1) * (it + 1) + int(i % 7));
      ncclResult_t r = ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr);
      if (r != ncclSuccess) {
        err = "iteration " + std::to_string(it) + ": " + ncclGetErrorString(r);
        break;
      }
      for (size_t i = 0; i < count && err.empty(); ++i) {
        float want = float(n * (n + 1) / 2 * (it + 1) + n * int(i % 7));
        if (out[i] != want)
          err = "iteration " + std::to_string(it) + " element " + std::to_string(i) + ": " + std::to_string(out[i]) +
                " != " + std::to_string(want);
      }
    }
    nettest::report(sh, rank, err.empty() ? 0 : 1, err);
    return err.empty();
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Large chunks of an input the operation does not write leave from the user's buffer
// (SNCCL_NET_SEND_USER_BUFFERS, Connection::postAt). The call must still return only once
// the net no longer reads that buffer: each rank overwrites its input the moment the call
// returns, and the peer must have received the values from before. 16 MiB is 32 slots'
// worth, far more than the net holds in flight when the sender's call could return early.
TEST(NetRanks, InputMayChangeOnceTheCallReturns) {
  Outcome o = nettest::runCluster(loopback(2, 1), [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    const size_t count = 4u << 20;  // floats
    std::vector<float> in(count), out(count);
    std::string err;
    auto fill = [&](float base) {
      for (size_t i = 0; i < count; ++i) in[i] = base + float(i % 1000);
    };
    auto checkReceived = [&](float base) {
      for (size_t i = 0; i < count && err.empty(); ++i)
        if (out[i] != base + float(i % 1000))
          err = "Recv: element " + std::to_string(i) + " is " + std::to_string(out[i]);
    };
    for (int it = 0; it < 3 && err.empty(); ++it) {
      // Send/receive, one direction per iteration parity.
      const int sender = it % 2;
      fill(float(1000 * (it + 1)));
      ncclResult_t r = rank == sender ? ncclSend(in.data(), count, ncclFloat, 1 - sender, comm, nullptr)
                                      : ncclRecv(out.data(), count, ncclFloat, sender, comm, nullptr);
      std::memset(in.data(), 0xff, count * sizeof(float));  // NaNs from here on
      if (r != ncclSuccess) err = std::string("send/recv: ") + ncclGetErrorString(r);
      if (err.empty() && rank != sender) checkReceived(float(1000 * (it + 1)));
      // AllReduce out of place: every rank sends chunks of its input to the other.
      fill(float(10 * (it + 1)));
      r = ncclAllReduce(in.data(), out.data(), count, ncclFloat, ncclSum, comm, nullptr);
      std::memset(in.data(), 0xff, count * sizeof(float));
      if (r != ncclSuccess && err.empty()) err = std::string("allreduce: ") + ncclGetErrorString(r);
      if (err.empty()) {
        for (size_t i = 0; i < count && err.empty(); ++i) {
          float want = float(n) * (float(10 * (it + 1)) + float(i % 1000));
          if (out[i] != want)
            err = "AllReduce: element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", not " +
                  std::to_string(want);
        }
      }
    }
    nettest::report(sh, rank, err.empty() ? 0 : 1, err);
    return err.empty();
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// A send from the user's buffer that cannot finish: the receiving process is stopped, so
// nothing drains its sockets. The operation must still end with an error (the socket's
// user timeout, SNCCL_TIMEOUT/2, names it: "timed out"), after making the net drop that
// buffer (CommRunner::quiesceTransfers, which here finds the send still pending), instead of
// waiting for the send forever. 16 MiB slots put 64 MiB in flight at once, far more than
// the sockets between the two processes hold.
TEST(NetRanks, StuckSendFromTheUserBufferEndsAtTheTimeout) {
  Cluster c = loopback(2, 1);
  c.env[1] = {"SNCCL_TIMEOUT", "3"};
  c.env.push_back({"SNCCL_NET_BUFFSIZE", "67108864"});
  c.timeoutSec = 120;
  auto body = [](ncclComm_t comm, int rank, int, Shared* sh, bool* abort) {
    float x = 1, y = 0;  // connects both directions and posts the receiver's credits
    if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
      nettest::report(sh, rank, 1, std::string("first allreduce: ") + ncclGetLastError(comm));
      return false;
    }
    // Rank 1's call may return before its own message has left its process (the proxy
    // finishes connecting and sending): it is stopped only once rank 0 got that message.
    if (rank == 0) __atomic_store_n(&sh->r[0].iters, 1, __ATOMIC_SEQ_CST);
    if (rank == 1) {
      while (__atomic_load_n(&sh->r[0].iters, __ATOMIC_SEQ_CST) == 0) usleep(1000);  // bounded by the watchdog
      __atomic_store_n(&sh->r[1].iters, 1, __ATOMIC_SEQ_CST);  // ready to be stopped
      for (;;) pause();                                        // then killed
    }
    while (__atomic_load_n(&sh->go, __ATOMIC_SEQ_CST) == 0) usleep(1000);
    std::vector<float> buf(16u << 20, 1.0f);  // 64 MiB
    ncclResult_t r = ncclSend(buf.data(), buf.size(), ncclFloat, 1, comm, nullptr);
    nettest::report(sh, 0, r, ncclGetLastError(comm));
    *abort = true;
    return r != ncclSuccess;
  };
  auto supervise = [](Shared* sh, const std::vector<pid_t>& pids) {
    // Bounded by the cluster's watchdog, which kills every rank.
    while (__atomic_load_n(&sh->r[1].iters, __ATOMIC_SEQ_CST) == 0) usleep(1000);
    kill(pids[1], SIGSTOP);
    __atomic_store_n(&sh->go, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->r[0].code, __ATOMIC_SEQ_CST) == -1) usleep(1000);
    kill(pids[1], SIGKILL);
  };
  Outcome o = nettest::runCluster(c, body, supervise);
  EXPECT_TRUE(WIFEXITED(o.status[0]) && WEXITSTATUS(o.status[0]) == 0) << o.describe();
  EXPECT_EQ(o.reports[0].code, ncclRemoteError) << o.describe();
  EXPECT_NE(std::string(o.reports[0].msg).find("timed out"), std::string::npos) << o.describe();
}

// Two ranks that each send to the other before they receive, without a group: each send
// completes only once the peer's net has taken its messages (they leave from the user's
// buffer), so it relies on the receive rings keeping their nsteps receives posted while
// their own rank is busy sending (4 x 512 KiB here), and their credits reaching the sender
// (the socket net holds some back until it reads the sender's messages: the next test).
// 1 MiB + 28 B is three messages.
// Connections are made by the first operation that needs them, with both ends in it: a
// grouped exchange makes them first (an ungrouped send would wait for the peer's end).
TEST(NetRanks, UngroupedSendsBothWaysWithinTheRingsBuffers) {
  Outcome o = nettest::runCluster(loopback(2, 1), [](ncclComm_t comm, int rank, int, Shared* sh, bool*) {
    const size_t count = (1u << 18) + 7;
    std::vector<float> in(count), out(count, -1.0f);
    for (size_t i = 0; i < count; ++i) in[i] = float(rank * 1000000 + int(i % 100000));
    std::string err;
    ncclGroupStart();
    ncclSend(in.data(), 1, ncclFloat, 1 - rank, comm, nullptr);
    ncclRecv(out.data(), 1, ncclFloat, 1 - rank, comm, nullptr);
    if (ncclGroupEnd() != ncclSuccess) err = std::string("connecting: ") + ncclGetLastError(comm);
    for (int it = 0; it < 3 && err.empty(); ++it) {
      if (ncclSend(in.data(), count, ncclFloat, 1 - rank, comm, nullptr) != ncclSuccess ||
          ncclRecv(out.data(), count, ncclFloat, 1 - rank, comm, nullptr) != ncclSuccess) {
        err = ncclGetLastError(comm);
        break;
      }
      for (size_t i = 0; i < count && err.empty(); ++i)
        if (out[i] != float((1 - rank) * 1000000 + int(i % 100000)))
          err = "element " + std::to_string(i) + " is " + std::to_string(out[i]);
    }
    nettest::report(sh, rank, err.empty() ? 0 : 1, err);
    return err.empty();
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// A send of exactly the ring's buffers (4 x 512 KiB) to a rank that makes no call at all
// meanwhile must complete, as it does with NCCL within its buffers: the receiving ring has
// its 4 receives posted, but the socket net grants some of their credits only when it
// reads the sender's first messages (socket_conn.h). The receiving rank's proxy must do
// that read even though its rank gave the ring back between operations without waking it
// (the ring owed nothing then). Rank 1 waits (up to 20 s, making no snccl call) for rank 0
// to say its send returned, then receives and checks the data either way, so a failure
// ends cleanly.
TEST(NetRanks, SendOfTheRingsBuffersCompletesWhileThePeerMakesNoCall) {
  Outcome o = nettest::runCluster(loopback(2, 1), [](ncclComm_t comm, int rank, int, Shared* sh, bool*) {
    const size_t count = size_t(1) << 19;  // 2 MiB of floats: four 512 KiB messages
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = rank == 0 ? float(int(i % 100003)) : -1.0f;
    std::string err;
    float one = 1.0f, got = 0.0f;
    ncclGroupStart();
    ncclSend(&one, 1, ncclFloat, 1 - rank, comm, nullptr);
    ncclRecv(&got, 1, ncclFloat, 1 - rank, comm, nullptr);
    if (ncclGroupEnd() != ncclSuccess) err = std::string("connecting: ") + ncclGetLastError(comm);
    int* sent = &sh->r[0].iters;  // rank 0's flag: its send returned
    if (err.empty() && rank == 0) {
      if (ncclSend(buf.data(), count, ncclFloat, 1, comm, nullptr) != ncclSuccess) err = ncclGetLastError(comm);
      __atomic_store_n(sent, 1, __ATOMIC_SEQ_CST);
    } else if (err.empty()) {
      double deadline = nettest::nowSec() + 20;
      while (__atomic_load_n(sent, __ATOMIC_SEQ_CST) == 0 && nettest::nowSec() < deadline) usleep(1000);
      if (__atomic_load_n(sent, __ATOMIC_SEQ_CST) == 0)
        err = "rank 0's send of the ring's buffers did not return in 20 s while this rank made no call";
      if (ncclRecv(buf.data(), count, ncclFloat, 0, comm, nullptr) != ncclSuccess) {
        err += std::string(err.empty() ? "" : "; ") + "receive: " + ncclGetLastError(comm);
      } else {
        for (size_t i = 0; i < count; ++i)
          if (buf[i] != float(int(i % 100003))) {
            err += std::string(err.empty() ? "" : "; ") + "element " + std::to_string(i) + " is " +
                   std::to_string(buf[i]);
            break;
          }
      }
    }
    nettest::report(sh, rank, err.empty() ? 0 : 1, err);
    return err.empty();
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Large receives into an out-of-place output land there straight from the net
// (SNCCL_NET_RECV_USER_BUFFERS, Connection::planRecvs), so the net holds pointers
// into the user's buffer while the call runs. When the call fails, it must return only
// once the net dropped them: here the sender stops after 4 MiB of 64 MiB, the receiver's
// call times out with receives for the next messages posted into its buffer, and only
// then does the sender send the rest (on credits the receiver gave before it failed).
// The receiver overwrites its buffer once its call returned; none of the late data may
// land there.
TEST(NetRanks, FailedReceiveLeavesTheOutputAlone) {
  Cluster c = loopback(2, 1);
  c.env[1] = {"SNCCL_TIMEOUT", "3"};
  c.timeoutSec = 120;
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int, Shared* sh, bool* abort) {
    const size_t total = 16u << 20, first = 1u << 20;  // floats: 64 MiB, of which 4 MiB is sent
    float x = 1, y = 0;  // connects both directions and posts the receiver's credits
    if (ncclAllReduce(&x, &y, 1, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess) {
      nettest::report(sh, rank, 1, std::string("first allreduce: ") + ncclGetLastError(comm));
      return false;
    }
    *abort = true;  // the communicator failed on purpose
    if (rank == 0) {
      std::vector<float> buf(total, 1.0f);
      ncclResult_t r = ncclSend(buf.data(), first, ncclFloat, 1, comm, nullptr);
      if (r != ncclSuccess) {
        nettest::report(sh, 0, 1, std::string("first send: ") + ncclGetLastError(comm));
        return false;
      }
      // Bounded by the cluster's watchdog.
      while (__atomic_load_n(&sh->r[1].iters, __ATOMIC_SEQ_CST) == 0) usleep(1000);
      (void)ncclSend(buf.data() + first, total - first, ncclFloat, 1, comm, nullptr);  // fails, or not
      nettest::report(sh, 0, 0, "");
      __atomic_store_n(&sh->r[0].iters, 1, __ATOMIC_SEQ_CST);
      return true;
    }
    std::vector<float> out(total, 0.0f);
    ncclResult_t r = ncclRecv(out.data(), total, ncclFloat, 0, comm, nullptr);
    std::string err;
    if (r == ncclSuccess) err = "the receive of 64 MiB of which 4 MiB were sent succeeded";
    for (size_t i = 0; i < first && err.empty(); ++i)
      if (out[i] != 1.0f) err = "element " + std::to_string(i) + " of the part sent is " + std::to_string(out[i]);
    std::fill(out.begin(), out.end(), -2.0f);
    __atomic_store_n(&sh->r[1].iters, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(&sh->r[0].iters, __ATOMIC_SEQ_CST) == 0) usleep(1000);
    usleep(200000);  // whatever the net still does with the late data, it did by now
    for (size_t i = 0; i < total && err.empty(); ++i)
      if (out[i] != -2.0f)
        err = "element " + std::to_string(i) + " changed to " + std::to_string(out[i]) + " after the call returned";
    nettest::report(sh, 1, err.empty() ? 0 : 1, err.empty() ? std::string(ncclGetLastError(comm)) : err);
    return err.empty();
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  EXPECT_NE(std::string(o.reports[1].msg).find("timed out"), std::string::npos) << o.describe();
}

// NCCL_DEBUG=INFO NET names the transport and the net of every connection, and the
// NCCL names of the stream parameters are honoured.
TEST(NetRanks, LogsTransportAndHonoursNcclStreamNames) {
  Cluster c = loopback(2, 1);
  c.env.push_back({"NCCL_SOCKET_NTHREADS", "2"});
  c.env.push_back({"NCCL_NSOCKS_PERTHREAD", "3"});
  std::string all = runLogged(c, "INIT,NET", checkAll({1031, 100000}));
  EXPECT_NE(all.find("[send] via NET/Socket/0"), std::string::npos) << all;
  EXPECT_NE(all.find("[receive] via NET/Socket/0"), std::string::npos) << all;
  EXPECT_NE(all.find("6 streams"), std::string::npos) << all;
  EXPECT_NE(all.find("connected via NET/Socket/0 (lo)"), std::string::npos) << all;
  EXPECT_NE(all.find("congestion control reno"), std::string::npos) << all;
}

// AlltoAll and Gather over zero, one, odd and large counts, three element sizes (int8
// unaligned), in and out of place, every root.
nettest::Body checkAlltoAllAndGather() {
  return [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker c(comm, rank, n);
    bool ok = true;
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1031), size_t(200003)})
      for (const auto& [dt, esz] : std::vector<std::pair<ncclDataType_t, size_t>>{
               {ncclInt8, 1}, {ncclFloat32, 4}, {ncclFloat64, 8}})
        for (bool inPlace : {false, true}) {
          ok = ok && c.alltoallBytes(count, dt, esz, inPlace);
          for (int root = 0; root < n && ok; ++root) ok = c.gatherBytes(count, dt, esz, root, inPlace);
        }
    nettest::report(sh, rank, ok ? 0 : 1, c.error());
    return ok;
  };
}

// Incast control (SNCCL_INCAST_SENDERS) across nodes: the grants travel on channel 1,
// which these collectives use for nothing else, so its connections show that they ran.
// One rank per node at 5 nodes with one sender at a time; 3 nodes of 2 ranks (shm inside
// a node, the net between) with two; and without the setting, no grants.
TEST(NetRanks, IncastGrantsKeepAlltoAllAndGatherExact) {
  struct Run {
    int nranks, perNode;
    const char* limit;
  };
  for (const Run& r : {Run{5, 1, "1"}, Run{6, 2, "2"}, Run{5, 1, nullptr}}) {
    Cluster c = loopback(r.nranks, r.perNode);
    if (r.limit != nullptr) {
      c.env.push_back({"SNCCL_INCAST_SENDERS", r.limit});
      c.env.push_back({"SNCCL_INCAST_MIN_BYTES", "0"});
    }
    const std::string all = runLogged(c, "INIT,NET", checkAlltoAllAndGather());
    const bool grants = all.find("Channel 01") != std::string::npos;
    EXPECT_EQ(grants, r.limit != nullptr) << r.nranks << " ranks, SNCCL_INCAST_SENDERS="
                                          << (r.limit ? r.limit : "(unset)");
  }
}

// Every stream count the parameters document works across nodes: 16 and 64 streams
// (plus the control socket) arrive at the listener at once, before any of them greets.
TEST(NetRanks, ManyStreamsPerConnectionWork) {
  for (const auto& [nthreads, nsocks] : std::vector<std::pair<const char*, const char*>>{{"1", "16"}, {"4", "16"}}) {
    SCOPED_TRACE(std::string(nthreads) + " x " + nsocks);
    Cluster c = loopback(2, 1);
    c.env[1] = {"SNCCL_TIMEOUT", "30"};
    c.timeoutSec = 120;
    c.env.push_back({"NCCL_SOCKET_NTHREADS", nthreads});
    c.env.push_back({"NCCL_NSOCKS_PERTHREAD", nsocks});
    Outcome o = nettest::runCluster(c, checkAll({1, 1031, 200003}));
    EXPECT_TRUE(o.allExitedZero()) << o.describe();
  }
}

// Adaptive routing over several sockets of one rail: every socket is a path. Unset,
// SNCCL_SOCKET_CHUNKSIZE gives 128 KiB chunks to a connection of two paths and 32 KiB to
// one of more (socket_net.cc, defaultChunkBytes); a value given is used as it is. Every
// size arrives whole either way.
TEST(NetRanks, AdaptiveChunkSizeFollowsThePathCount) {
  struct Case {
    const char* nsocks;
    const char* chunk;  // nullptr: unset
    const char* expect;
  };
  for (const Case& k : std::vector<Case>{{"2", nullptr, "131072"}, {"4", nullptr, "32768"}, {"4", "65536", "65536"}}) {
    SCOPED_TRACE(std::string(k.nsocks) + " paths, SNCCL_SOCKET_CHUNKSIZE=" + (k.chunk ? k.chunk : "(unset)"));
    Cluster c = loopback(2, 1);
    c.env.push_back({"SNCCL_ROUTING", "adaptive"});
    c.env.push_back({"NCCL_NSOCKS_PERTHREAD", k.nsocks});
    if (k.chunk != nullptr) c.env.push_back({"SNCCL_SOCKET_CHUNKSIZE", k.chunk});
    const std::string all = runLogged(c, "NET", checkAll({1, 1031, 200003, size_t(3) << 20}));
    const std::string want = std::string("adaptive routing in ") + k.expect + "-byte chunks";
    EXPECT_NE(all.find(want), std::string::npos) << "no \"" << want << "\" in:\n" << all;
    EXPECT_EQ(all.find("WARN"), std::string::npos) << all;
  }
}

// A clean run ends without a warning. When a rank destroys its communicator its sends
// say goodbye while the peer's receives for a next operation are still posted; those
// used to fail with a WARN ("connection failed: ... the sender closed the connection").
TEST(NetRanks, CleanTeardownLogsNoWarning) {
  for (int round = 0; round < 4; ++round) {
    Cluster c = loopback(4, 1);
    std::string all = runLogged(c, "INIT", checkAll({1, 1031}));
    EXPECT_EQ(all.find(" WARN "), std::string::npos) << all.substr(all.find(" WARN ") == std::string::npos ? 0 : all.find(" WARN "), 400);
  }
}

// Slot geometry: a communicator across nodes takes SNCCL_NET_STEPS x SNCCL_NET_BUFFSIZE
// (4 x 512 KiB) on every rank, unless the user set NCCL_BUFFSIZE / SNCCL_STEPS and not
// the net names; one node keeps SNCCL_BUFFSIZE / SNCCL_STEPS (8 x 128 KiB). Every case
// also runs AllReduces, so both ends of each connection agreed.
TEST(NetRanks, SlotGeometryFollowsWhetherRanksSpanNodes) {
  struct Case {
    int nranks, perNode;
    std::vector<std::pair<std::string, std::string>> env;
    std::string want;
  };
  const std::vector<Case> cases = {
      {2, 1, {}, "4 slots of 524288 B per connection (SNCCL_NET_STEPS=4, SNCCL_NET_BUFFSIZE=2097152; ranks span nodes)"},
      {3, 1, {{"NCCL_BUFFSIZE", "1048576"}}, "4 slots of 262144 B per connection (SNCCL_NET_STEPS=4, SNCCL_BUFFSIZE=1048576"},
      {2, 1, {{"NCCL_BUFFSIZE", "1048576"}, {"SNCCL_NET_BUFFSIZE", "65536"}, {"SNCCL_STEPS", "2"}},
       "2 slots of 32768 B per connection (SNCCL_STEPS=2, SNCCL_NET_BUFFSIZE=65536"},
      {2, 2, {{"NCCL_SHM_DISABLE", "1"}}, "8 slots of 131072 B per connection (SNCCL_STEPS=8, SNCCL_BUFFSIZE=1048576; ranks on one node)"},
  };
  for (const Case& k : cases) {
    Cluster c = loopback(k.nranks, k.perNode);
    c.env.insert(c.env.end(), k.env.begin(), k.env.end());
    std::string all = runLogged(c, "INIT", checkAll({1, 1031, 300000}));
    size_t lines = 0;
    for (size_t at = all.find(k.want); at != std::string::npos; at = all.find(k.want, at + 1)) ++lines;
    EXPECT_EQ(lines, size_t(k.nranks)) << k.want << "\n" << all;
  }
}

// One node, shm disabled: the net transport takes over (NCCL_SHM_DISABLE semantics).
TEST(NetRanks, ShmDisabledFallsBackToNet) {
  Cluster c = loopback(3, 3);
  c.env.push_back({"NCCL_SHM_DISABLE", "1"});
  c.env.push_back({"NCCL_DEBUG", "INFO"});
  c.env.push_back({"NCCL_DEBUG_SUBSYS", "NET"});
  Outcome o = nettest::runCluster(c, checkAll({1, 1031, 100000}));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// A net that does not exist is named in the error, with the ones that do.
TEST(NetRanks, UnknownNetIsAClearError) {
  Cluster c = loopback(2, 1);
  c.env.push_back({"NCCL_NET", "NoSuchNet"});
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
    int32_t x = 1;
    ncclResult_t res = ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, nullptr);
    nettest::report(sh, rank, res, ncclGetLastError(nullptr));
    *abort = true;
    return res != ncclSuccess;
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  for (int r = 0; r < 2; ++r) {
    std::string msg = o.reports[r].msg;
    // The rank that fails first says why; its peer may only see it fail.
    if (o.reports[r].code == ncclInvalidArgument) {
      EXPECT_NE(msg.find("NoSuchNet"), std::string::npos) << msg;
      EXPECT_NE(msg.find("Socket"), std::string::npos) << msg;
    }
  }
  EXPECT_TRUE(o.reports[0].code == ncclInvalidArgument || o.reports[1].code == ncclInvalidArgument) << o.describe();
}

// Ranks on different nodes that disagree on the slot geometry (one sets SNCCL_NET_STEPS)
// fail the first collective with an error that names both settings and SNCCL_NET, not
// with a protocol error or a hang.
TEST(NetRanks, SlotGeometryMismatchIsAClearError) {
  Cluster c = loopback(2, 1);
  c.rankEnv = {{}, {{"SNCCL_NET_STEPS", "2"}}};
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
    std::vector<int32_t> x(1031, rank);
    ncclResult_t res = ncclAllReduce(x.data(), x.data(), x.size(), ncclInt32, ncclSum, comm, nullptr);
    nettest::report(sh, rank, res, ncclGetLastError(nullptr));
    *abort = true;
    return res != ncclSuccess;
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  bool named = false;
  for (int r = 0; r < 2; ++r) {
    const std::string msg = o.reports[r].msg;
    if (o.reports[r].code != ncclInvalidUsage) continue;
    named = true;
    // The same 2 MiB per connection (SNCCL_NET_BUFFSIZE), cut into 4 or 2 slots.
    EXPECT_NE(msg.find("disagree on connection geometry ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("4 x 524288"), std::string::npos) << msg;
    EXPECT_NE(msg.find("2 x 1048576"), std::string::npos) << msg;
    EXPECT_NE(msg.find("SNCCL_NET_STEPS/SNCCL_NET_BUFFSIZE"), std::string::npos) << msg;
    EXPECT_NE(msg.find("SNCCL_NET identically"), std::string::npos) << msg;
  }
  EXPECT_TRUE(named) << "no rank said why: " << o.describe();
}

// Communicators come and go in one process: the proxy stops with the last connection
// and starts again with the next.
TEST(NetRanks, SuccessiveCommunicatorsRestartTheProxy) {
  Cluster c = loopback(2, 1);
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker first(comm, rank, n);
    if (!first.allReduceSum(100000, false)) {
      nettest::report(sh, rank, 1, first.error());
      return false;
    }
    // A child communicator (split) while the parent is alive, destroyed, then another.
    for (int round = 0; round < 2; ++round) {
      ncclComm_t child = nullptr;
      if (ncclCommSplit(comm, 0, rank, &child, nullptr) != ncclSuccess) {
        nettest::report(sh, rank, 1, std::string("split: ") + ncclGetLastError(nullptr));
        return false;
      }
      nettest::Checker cc(child, rank, n);
      bool ok = cc.allGather(3000, false) && cc.sendRecvRing(70000);
      if (ncclCommDestroy(child) != ncclSuccess || !ok) {
        nettest::report(sh, rank, 1, cc.error() + ncclGetLastError(nullptr));
        return false;
      }
    }
    return first.broadcast(5000, false, 1);
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// A rank that dies mid-run: the survivors fail with ncclRemoteError, quickly (the
// closed sockets poison their rings), not at SNCCL_TIMEOUT and not never.
TEST(NetRanks, KilledPeerGivesErrorsNotHangs) {
  Cluster c = loopback(3, 1);
  c.env[1] = {"SNCCL_TIMEOUT", "30"};
  c.timeoutSec = 120;
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int n, Shared* sh, bool* abort) {
    // Out of place and 4 MiB: the survivors' sends to each other leave from `in`
    // itself (Connection::postAt), so the failure also takes the path that makes the net
    // let go of user memory before the call returns (CommRunner::quiesceTransfers).
    std::vector<float> in(1 << 20, 1.0f), out(1 << 20);
    for (int it = 0; it < 100000; ++it) {
      if (rank == 2 && it == 20) {
        sh->r[rank].tEnd = nettest::nowSec();
        raise(SIGKILL);
      }
      ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclFloat32, ncclMax, comm, nullptr);
      if (res != ncclSuccess) {
        nettest::report(sh, rank, res, ncclGetLastError(nullptr));
        sh->r[rank].iters = it;
        *abort = true;
        return true;
      }
    }
    nettest::report(sh, rank, 0, "no error after the peer died");
    return false;
  });
  ASSERT_TRUE(WIFSIGNALED(o.status[2])) << o.describe();
  double tKill = o.reports[2].tEnd;
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(WIFEXITED(o.status[r]) && WEXITSTATUS(o.status[r]) == 0) << o.describe();
    EXPECT_EQ(o.reports[r].code, ncclRemoteError) << o.describe();
    // Well before SNCCL_TIMEOUT (30 s): the lost connection itself is the signal.
    EXPECT_LT(o.reports[r].tEnd - tKill, 15.0) << o.describe();
    // Whoever the survivor waited for, the root cause travels with the poison (across
    // nodes in ABORT frames): the dead rank is named.
    EXPECT_NE(std::string(o.reports[r].msg).find("rank 2"), std::string::npos) << o.describe();
  }
  // The first survivor to fail learnt it from its own connection to the dead rank (the
  // other may learn it from that survivor's ABORT): its error carries the network's cause.
  int withCause = 0;
  for (int r = 0; r < 2; ++r) withCause += std::string(o.reports[r].msg).find("NET/") != std::string::npos;
  EXPECT_GE(withCause, 1) << o.describe();
}

}  // namespace
