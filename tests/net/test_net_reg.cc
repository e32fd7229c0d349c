// Memory registration on the net path (transport/net/reg_cache.h), through the public API
// over a plugin that demands it (strict_net.h): every message is sent from and received
// into registered memory, each ring's slots are registered once per connection, buffers
// registered with ncclCommRegister are used in place and others go through slots, and
// nothing stays registered when a comm closes. Over a plugin without imm
// (StrictNoImm), the operation signature's digest travels in a prefix of the payload and
// still names mismatched collectives.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "mp/user_buffers.h"
#include "net/net_checks.h"
#include "net/net_cluster.h"
#include "net/strict_net.h"

namespace snccl::net {
std::span<const NetDef> testNetPlugins() { return nettest::strictNetDefs(); }
}  // namespace snccl::net

namespace {

using nettest::Cluster;
using nettest::Outcome;
using nettest::Shared;
using nettest::strictNet;

Cluster strictCluster(int nranks, const char* net = "Strict") {
  Cluster c;
  c.nranks = nranks;
  c.ranksPerNode = 1;
  c.env = {{"SNCCL_SOCKET_IFNAME", "=lo"}, {"SNCCL_TIMEOUT", "60"}, {"SNCCL_NET", net}};
  return c;
}

using Variant = nettest::StrictNet::Variant;

// Each comm registers its ring's slots (its wire slots, without imm) first, when it
// comes up, and never again; its other registrations are ranges of the RegCache (the
// user's buffers, scratch). "" when so, else what is wrong.
std::string ringRegistrationsOnce(const std::vector<std::pair<const void*, size_t>>& user,
                                  Variant v = nettest::StrictNet::kStrict) {
  std::map<const void*, std::vector<nettest::StrictNet::Reg>> perComm;
  for (const nettest::StrictNet::Reg& r : strictNet(v)->registrations()) perComm[r.comm].push_back(r);
  if (perComm.empty()) return "no ring was registered";
  for (const auto& [comm, regs] : perComm) {
    const nettest::StrictNet::Reg& ring = regs.front();
    for (auto [p, n] : user)
      if (ring.begin == reinterpret_cast<uintptr_t>(p)) return "a comm registered a user buffer before its ring";
    size_t again = 0;
    for (size_t i = 1; i < regs.size(); ++i) again += regs[i].begin == ring.begin && regs[i].bytes == ring.bytes;
    if (again != 0) return "a comm registered its ring " + std::to_string(again + 1) + " times";
  }
  return "";
}

nettest::Body checkAllStrict(Variant v) {
  return [v](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
    nettest::Checker c(comm, rank, n);
    bool ok = c.all({0, 1, 7, 1031, 200003});
    std::string err = c.error();
    if (ok && strictNet(v)->violations() != 0) {
      ok = false;
      err = std::to_string(strictNet(v)->violations()) + " plugin calls without a covering registration";
    }
    if (ok) {
      err = ringRegistrationsOnce({}, v);
      ok = err.empty();
    }
    if (ok && v == nettest::StrictNet::kBigHandle && strictNet(v)->bigHandles() == 0) {
      ok = false;
      err = "no connection was made through a large handle";
    }
    nettest::report(sh, rank, ok ? 0 : 1, err);
    return ok;
  };
}

TEST(NetReg, CollectivesOverAPluginThatNeedsRegistration) {
  Outcome o = nettest::runCluster(strictCluster(3), checkAllStrict(nettest::StrictNet::kStrict));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Without imm every message carries the signature's digest in front of its payload; slots
// of the same geometry still hold full messages (tiny slots: every message fills one).
TEST(NetReg, CollectivesOverAPluginWithoutImm) {
  Outcome o = nettest::runCluster(strictCluster(3, "StrictNoImm"), checkAllStrict(nettest::StrictNet::kNoImm));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
  Cluster tiny = strictCluster(2, "StrictNoImm");
  tiny.env.push_back({"SNCCL_BUFFSIZE", "16384"});
  tiny.env.push_back({"SNCCL_STEPS", "2"});
  o = nettest::runCluster(tiny, checkAllStrict(nettest::StrictNet::kNoImm));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// What torch and MPI programs pass (mp/user_buffers.h), over a plugin that demands
// registered memory: malloc'd buffers freed and reallocated between calls (often at the
// same address), registered in odd rounds, and registered buffers in a process that forks
// a child which never calls snccl. Every plugin call must be covered by a live
// registration, so a cache entry outliving its buffer would be caught.
TEST(NetReg, ReallocatedAndForkSharedMallocBuffers) {
  for (bool forks : {false, true}) {
    Outcome o = nettest::runCluster(strictCluster(3), [forks](ncclComm_t comm, int rank, int n, Shared* sh, bool*) {
      bool ok = forks ? userbuf::forkBody(comm, rank, n) : userbuf::reallocBody(comm, rank, n);
      std::string err = ok ? "" : "a call failed or a result was wrong (the rank's stderr says which)";
      if (ok && strictNet(nettest::StrictNet::kStrict)->violations() != 0) {
        ok = false;
        err = std::to_string(strictNet(nettest::StrictNet::kStrict)->violations()) +
              " plugin calls without a covering registration";
      }
      nettest::report(sh, rank, ok ? 0 : 1, err);
      return ok;
    });
    EXPECT_TRUE(o.allExitedZero()) << (forks ? "fork: " : "reallocated: ") << o.describe();
  }
}

// Listen handles of 328 bytes travel whole from receiver to sender (ConnBlob::payload).
TEST(NetReg, ListenHandlesLongerThanNcclsTravelWhole) {
  Outcome o = nettest::runCluster(strictCluster(3, "StrictBigHandle"), checkAllStrict(nettest::StrictNet::kBigHandle));
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// Ranks that call different reductions exchange messages of the same sizes: only the
// signature's digest (in the imm, or in the prefix) tells them apart.
TEST(NetReg, MismatchedCollectivesAreNamedWithAndWithoutImm) {
  for (const char* net : {"Strict", "StrictNoImm"}) {
    Outcome o = nettest::runCluster(strictCluster(2, net), [](ncclComm_t comm, int rank, int, Shared* sh, bool* abort) {
      std::vector<int32_t> in(100000, rank + 1), out(100000);
      ncclResult_t res = ncclAllReduce(in.data(), out.data(), in.size(), ncclInt32, rank == 0 ? ncclSum : ncclMax,
                                       comm, nullptr);
      *abort = true;
      nettest::report(sh, rank, res, ncclGetLastError(comm));
      return res != ncclSuccess;
    });
    EXPECT_TRUE(o.allExitedZero()) << net << ": both ranks should fail\n" << o.describe();
    bool named = false;
    for (const nettest::RankReport& r : o.reports)
      named |= r.code == ncclInvalidUsage && std::strstr(r.msg, "ranks called different operations") != nullptr;
    EXPECT_TRUE(named) << net << ": no rank reported the mismatch\n" << o.describe();
  }
}

// Both ranks exchange `count` ints from `send` into `recv`; true when the data is right.
bool exchange(ncclComm_t comm, int rank, int32_t* send, int32_t* recv, size_t count, int salt, std::string* err) {
  int peer = 1 - rank;
  for (size_t i = 0; i < count; ++i) send[i] = int32_t(rank * 1000003 + salt * 7 + int(i));
  std::memset(recv, 0xff, count * sizeof *recv);
  ncclResult_t res = ncclGroupStart();
  if (res == ncclSuccess) res = ncclSend(send, count, ncclInt32, peer, comm, nullptr);
  if (res == ncclSuccess) res = ncclRecv(recv, count, ncclInt32, peer, comm, nullptr);
  ncclResult_t end = ncclGroupEnd();
  if (res == ncclSuccess) res = end;
  if (res != ncclSuccess) {
    *err = std::string("send/recv: ") + ncclGetLastError(comm);
    return false;
  }
  for (size_t i = 0; i < count; ++i)
    if (recv[i] != int32_t(peer * 1000003 + salt * 7 + int(i))) {
      *err = "send/recv: wrong element " + std::to_string(i);
      return false;
    }
  return true;
}

TEST(NetReg, RegisteredBuffersInPlaceOthersThroughSlots) {
  Cluster c = strictCluster(2);
  // 64 KiB slots, 4 per ring: a 1 MiB message is 16 messages of at least 32 KiB, so most
  // are sent from and received into the user's buffers when those are registered.
  c.env.push_back({"SNCCL_NET_BUFFSIZE", "262144"});
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int, Shared* sh, bool*) {
    const size_t count = 256 * 1024;
    const size_t bytes = count * sizeof(int32_t);
    std::vector<int32_t> sendReg(count), recvReg(count), sendU(count), recvU(count);
    void* hs = nullptr;
    void* hr = nullptr;
    std::string err;
    auto fail = [&](const std::string& what) {
      nettest::report(sh, rank, 1, what);
      return false;
    };
    if (ncclCommRegister(comm, sendReg.data(), bytes, &hs) != ncclSuccess ||
        ncclCommRegister(comm, recvReg.data(), bytes, &hr) != ncclSuccess)
      return fail("ncclCommRegister failed");
    nettest::StrictNet* net = strictNet();
    for (int it = 0; it < 3; ++it)
      if (!exchange(comm, rank, sendReg.data(), recvReg.data(), count, it, &err)) return fail(err);
    if (net->sendsWithin(sendReg.data(), bytes) == 0) return fail("nothing was sent from the registered buffer");
    if (net->recvsWithin(recvReg.data(), bytes) == 0) return fail("nothing was received into the registered buffer");
    for (int it = 0; it < 3; ++it)
      if (!exchange(comm, rank, sendU.data(), recvU.data(), count, 10 + it, &err)) return fail(err);
    if (net->sendsWithin(sendU.data(), bytes) != 0) return fail("sent from an unregistered buffer");
    if (net->recvsWithin(recvU.data(), bytes) != 0) return fail("received into an unregistered buffer");
    // Out-of-place AllReduce between registered buffers.
    for (size_t i = 0; i < count; ++i) sendReg[i] = int32_t(i % 1000) * (rank + 1);
    if (ncclAllReduce(sendReg.data(), recvReg.data(), count, ncclInt32, ncclSum, comm, nullptr) != ncclSuccess)
      return fail(std::string("allreduce: ") + ncclGetLastError(comm));
    for (size_t i = 0; i < count; ++i)
      if (recvReg[i] != int32_t(i % 1000) * 3) return fail("allreduce: wrong element " + std::to_string(i));
    if (!(err = ringRegistrationsOnce({{sendReg.data(), bytes}, {recvReg.data(), bytes}})).empty()) return fail(err);
    // Deregistered, the buffers are no longer used in place.
    if (ncclCommDeregister(comm, hs) != ncclSuccess || ncclCommDeregister(comm, hr) != ncclSuccess)
      return fail("ncclCommDeregister failed");
    size_t sentBefore = net->sendsWithin(sendReg.data(), bytes);
    size_t recvBefore = net->recvsWithin(recvReg.data(), bytes);
    for (int it = 0; it < 2; ++it)
      if (!exchange(comm, rank, sendReg.data(), recvReg.data(), count, 20 + it, &err)) return fail(err);
    if (net->sendsWithin(sendReg.data(), bytes) != sentBefore) return fail("sent from a deregistered buffer");
    if (net->recvsWithin(recvReg.data(), bytes) != recvBefore) return fail("received into a deregistered buffer");
    if (net->violations() != 0)
      return fail(std::to_string(net->violations()) + " plugin calls without a covering registration");
    nettest::report(sh, rank, 0, "");
    return true;
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

// ncclCommDeregister while an operation sends from the buffer (the user's error, as in
// NCCL; reg_cache.h says what happens): the library neither crashes nor sends without a
// registration, the messages not yet handed to the plugin go through slots, and nothing
// stays registered when the comms close. The receiver starts late, so that rank 0's send
// is stalled on credits when the buffer is deregistered.
TEST(NetReg, DeregisteringABufferInUseIsSurvived) {
  Cluster c = strictCluster(2);
  c.env.push_back({"SNCCL_NET_BUFFSIZE", "262144"});
  Outcome o = nettest::runCluster(c, [](ncclComm_t comm, int rank, int, Shared* sh, bool*) {
    const size_t count = 256 * 1024;
    const size_t bytes = count * sizeof(int32_t);
    std::vector<int32_t> buf(count);
    auto fail = [&](const std::string& what) {
      nettest::report(sh, rank, 1, what);
      return false;
    };
    // Connections are made by the first operation that needs them: one first, so that the
    // stalled send below has its connection.
    std::vector<int32_t> warm(count);
    ncclResult_t res = rank == 0 ? ncclSend(warm.data(), count, ncclInt32, 1, comm, nullptr)
                                 : ncclRecv(warm.data(), count, ncclInt32, 0, comm, nullptr);
    if (res != ncclSuccess) return fail(std::string("first send/recv: ") + ncclGetLastError(comm));
    if (rank == 0) {
      for (size_t i = 0; i < count; ++i) buf[i] = int32_t(i * 3 + 1);
      void* h = nullptr;
      if (ncclCommRegister(comm, buf.data(), bytes, &h) != ncclSuccess) return fail("ncclCommRegister failed");
      std::thread user([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        (void)ncclCommDeregister(comm, h);
      });
      res = ncclSend(buf.data(), count, ncclInt32, 1, comm, nullptr);
      user.join();
      // 16 messages of 64 KiB: the receiver's 4 posted receives let the first ones leave
      // in place before the deregistration; the others cannot.
      size_t inPlace = strictNet()->sendsWithin(buf.data(), bytes);
      if (inPlace == 0) return fail("nothing was sent in place before the deregistration");
      if (inPlace >= 16) return fail("everything was sent in place: the deregistration came too late to test");
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(1000));
      res = ncclRecv(buf.data(), count, ncclInt32, 0, comm, nullptr);
      for (size_t i = 0; res == ncclSuccess && i < count; ++i)
        if (buf[i] != int32_t(i * 3 + 1)) return fail("wrong element " + std::to_string(i));
    }
    if (res != ncclSuccess) return fail(std::string("send/recv: ") + ncclGetLastError(comm));
    if (strictNet()->violations() != 0)
      return fail(std::to_string(strictNet()->violations()) + " plugin calls without a covering registration");
    nettest::report(sh, rank, 0, "");
    return true;
  });
  EXPECT_TRUE(o.allExitedZero()) << o.describe();
}

}  // namespace
