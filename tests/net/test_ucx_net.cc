// The UCX net (transport/net/ucx/) over UCX's TCP transport on loopback, both ends driven
// by the test thread (one test gives the receiver a thread of its own): the
// receiver-driven credit rule (no send before a receive is posted, and a message larger
// than the receive is refused), sizes and imm of every kind of message, order, the
// goodbye of a clean close and the abort code of an aborting one (also behind queued
// messages, for a receiver that is briefly busy), a handle from another net refused, and
// (SNCCL_UCX_CONNECT=sockaddr) one sender per listener. A killed peer and a cut link are
// the multi-rank suites' (test_net_ranks_ucx, test_net_netns_ucx): UCX does not survive
// fork() in one process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "net_pair.h"
#include "transport/net/ucx/ucx_net.h"

namespace snccl::net {
namespace {

using Clock = std::chrono::steady_clock;

// The process's UCX net, on TCP over loopback; null (and the test skips) when UCX cannot
// be initialised here.
Net* loopUcx() {
  static Net* net = [] {
    setenv("UCX_TLS", "tcp", 1);
    setenv("UCX_NET_DEVICES", "lo", 1);
    Net* n = ucxNet();
    Status s = n->init();
    if (!s.ok()) {
      std::fprintf(stderr, "UCX SKIP: %s\n", s.message().c_str());
      return static_cast<Net*>(nullptr);
    }
    return n;
  }();
  return net;
}

#define NEED_UCX(net)   \
  Net* net = loopUcx(); \
  if (net == nullptr) GTEST_SKIP() << "UCX is not usable here"

Request* postRecv(Net* net, RecvComm* rc, void* data, size_t size) {
  int tag = 0;
  MemHandle* mh = nullptr;
  Request* r = nullptr;
  Status s = net->irecv(rc, 1, &data, &size, &tag, &mh, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

// isend retried (progressing the receive side meanwhile) until the net takes it.
Request* sendWhenCredited(Net* net, Pair& p, void* data, size_t size, uint32_t imm, Request* recv) {
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (Clock::now() < deadline) {
    Request* r = nullptr;
    Status s = net->isend(p.send, data, size, 0, imm, nullptr, &r);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok() || r != nullptr) return r;
    if (recv != nullptr) {
      bool done = false;
      EXPECT_TRUE(net->test(recv, &done, nullptr, nullptr).ok());
    }
  }
  ADD_FAILURE() << "no credit within 20 s";
  return nullptr;
}

TEST(UcxNet, PropertiesAndRegistration) {
  NEED_UCX(net);
  EXPECT_STREQ(net->name(), "UCX");
  ASSERT_EQ(net->devices(), 1);
  Properties p;
  ASSERT_TRUE(net->getProperties(0, &p).ok());
  EXPECT_EQ(p.name, "lo");  // UCX_NET_DEVICES
  EXPECT_TRUE(p.imm);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_TRUE(net->usesUnregisteredHostMemory());  // UCX registers what it uses itself
}

TEST(UcxNet, NoSendBeforeTheReceiveIsPosted) {
  NEED_UCX(net);
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  std::vector<char> src(4096, 'x'), dst(4096, 0);
  // No receive posted: however long the sender retries, the net takes nothing.
  for (int i = 0; i < 200; ++i) {
    Request* r = nullptr;
    ASSERT_TRUE(net->isend(p.send, src.data(), src.size(), 0, 7, nullptr, &r).ok());
    ASSERT_EQ(r, nullptr) << "a send started without a posted receive";
    usleep(500);
  }
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  Request* sr = sendWhenCredited(net, p, src.data(), src.size(), 7, rr);
  ASSERT_NE(sr, nullptr);
  size_t got = 0;
  uint32_t imm = 0;
  ASSERT_TRUE(wait(net, sr).ok());
  ASSERT_TRUE(wait(net, rr, &got, &imm).ok());
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(imm, 7u);
  EXPECT_EQ(dst, src);
  closePair(net, net, p);
}

TEST(UcxNet, EveryShapeArrivesInOrderWithItsImm) {
  NEED_UCX(net);
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  // Empty, tiny, unaligned, eager-sized and rendezvous-sized messages, each into a
  // receive larger than itself; several posted ahead, as a ring keeps its receives.
  const std::vector<size_t> sizes = {0, 1, 13, 4097, 65536, 1 << 20, (4 << 20) + 3, 8};
  const size_t cap = (4 << 20) + 64;
  std::vector<std::vector<char>> src(sizes.size()), dst(sizes.size(), std::vector<char>(cap, 0));
  for (size_t i = 0; i < sizes.size(); ++i) {
    src[i].resize(sizes[i]);
    for (size_t j = 0; j < sizes[i]; ++j) src[i][j] = char(j * 7 + i);
  }
  size_t next = 0;
  while (next < sizes.size()) {
    std::vector<Request*> recvs;
    for (size_t k = next; k < std::min(sizes.size(), next + 4); ++k)
      recvs.push_back(postRecv(net, p.recv, dst[k].data(), cap));
    std::vector<Request*> sends;
    for (size_t k = 0; k < recvs.size(); ++k) {
      uint32_t imm = 0xA5000000u + uint32_t(next + k);
      sends.push_back(sendWhenCredited(net, p, src[next + k].data(), sizes[next + k], imm, nullptr));
      ASSERT_NE(sends.back(), nullptr);
    }
    for (size_t k = 0; k < recvs.size(); ++k) {
      size_t got = 0;
      uint32_t imm = 0;
      Status s = wait(net, recvs[k], &got, &imm, [&] {
        for (Request*& sr : sends)
          if (sr != nullptr) {
            bool done = false;
            EXPECT_TRUE(net->test(sr, &done, nullptr, nullptr).ok());
            if (done) sr = nullptr;
          }
      });
      ASSERT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(got, sizes[next + k]);
      EXPECT_EQ(imm, 0xA5000000u + uint32_t(next + k));
      EXPECT_TRUE(std::equal(src[next + k].begin(), src[next + k].end(), dst[next + k].begin())) << "message " << next + k;
    }
    for (Request* sr : sends) {
      if (sr != nullptr) {
        ASSERT_TRUE(wait(net, sr).ok());
      }
    }
    next += recvs.size();
  }
  closePair(net, net, p);
}

TEST(UcxNet, MessageLargerThanTheReceiveIsRefused) {
  NEED_UCX(net);
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  std::vector<char> src(8192), dst(4096);
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  Status s;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  Request* sr = nullptr;
  while (Clock::now() < deadline && s.ok() && sr == nullptr)
    s = net->isend(p.send, src.data(), src.size(), 0, 0, nullptr, &sr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("8192-byte message for a 4096-byte receive"), std::string::npos) << s.message();
  closePair(net, net, p);
}

TEST(UcxNet, CleanCloseIsAGoodbyeAndAbortCarriesItsCode) {
  NEED_UCX(net);
  for (uint32_t code : {0u, 0x305u}) {
    SCOPED_TRACE(code);
    Pair p;
    ASSERT_TRUE(connectPair(net, net, &p).ok());
    std::vector<char> dst(64);
    Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
    ASSERT_NE(rr, nullptr);
    ASSERT_TRUE(net->closeSend(p.send, code).ok());
    p.send = nullptr;
    // The posted receive fails once the goodbye arrives; the peer's code comes with it.
    bool done = false;
    Status s;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (s.ok() && !done && Clock::now() < deadline) s = net->test(rr, &done, nullptr, nullptr);
    EXPECT_FALSE(s.ok());
    EXPECT_FALSE(done);
    EXPECT_EQ(net->peerClosed(p.recv), code == 0);
    EXPECT_EQ(net->peerAbortCode(p.recv), code);
    closePair(net, net, p);
  }
}

// A sender that aborts with messages still queued for a receiver that is briefly busy:
// its goodbye (with the code naming where the failure started) waits behind them, and
// the receiver, once it progresses again on its own thread as a live peer does, still
// gets the code rather than a bare reset.
TEST(UcxNet, AbortBehindQueuedMessagesStillCarriesItsCode) {
  NEED_UCX(net);
  constexpr uint32_t kCode = 0x207;
  constexpr size_t kMessages = 2048, kBytes = 8192;  // 16 MiB: more than the sockets buffer
  Pair p;
  ASSERT_TRUE(connectPair(net, net, &p).ok());
  std::vector<char> src(kBytes, 'a'), dst(kMessages * kBytes);
  std::vector<Request*> recvs;
  for (size_t i = 0; i < kMessages; ++i) {
    recvs.push_back(postRecv(net, p.recv, dst.data() + i * kBytes, kBytes));
    ASSERT_NE(recvs.back(), nullptr);
  }
  // One more receive, never matched: it fails with the goodbye, as a live peer's next
  // receive would.
  std::vector<char> next(kBytes);
  recvs.push_back(postRecv(net, p.recv, next.data(), next.size()));
  ASSERT_NE(recvs.back(), nullptr);
  for (size_t i = 0; i < kMessages; ++i) ASSERT_NE(sendWhenCredited(net, p, src.data(), kBytes, 0, nullptr), nullptr);
  // The receiver's comm has its own worker: its thread drives it alone, after a pause.
  uint32_t code = 0;
  std::thread receiver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    auto deadline = Clock::now() + std::chrono::seconds(20);
    for (Request* r : recvs) {
      bool done = false;
      Status s;
      while (s.ok() && !done && Clock::now() < deadline) s = net->test(r, &done, nullptr, nullptr);
      if (!s.ok()) break;  // a failed request is gone, and so is every later one
    }
    // As the transport does on a failed receive: take the peer's code, then close.
    code = net->peerAbortCode(p.recv);
    EXPECT_TRUE(net->closeRecv(p.recv, code).ok());
  });
  ASSERT_TRUE(net->closeSend(p.send, kCode).ok());
  receiver.join();
  EXPECT_EQ(code, kCode);
}

// SNCCL_UCX_CONNECT=sockaddr (test_ucx_net_sockaddr): a listener takes one sender and is
// closed once it is accepted, so a second sender on the same handle fails instead of
// waiting for credits that never come, and the first connection goes on.
TEST(UcxNet, ASockaddrListenerTakesOneSender) {
  NEED_UCX(net);
  const char* mode = std::getenv("SNCCL_UCX_CONNECT");
  if (mode == nullptr || std::string(mode) != "sockaddr") GTEST_SKIP() << "for SNCCL_UCX_CONNECT=sockaddr";
  Pair p;
  Handle h;
  ASSERT_TRUE(connectPair(net, net, &p, &h).ok());
  Handle second = h;
  SendComm* late = nullptr;
  Status st;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (st.ok() && late == nullptr && Clock::now() < deadline) st = net->connect(0, &second, &late);
  EXPECT_FALSE(st.ok()) << "a second sender connected to a listener that had its connection";
  EXPECT_NE(st.message().find("NET/UCX"), std::string::npos) << st.message();
  if (late != nullptr) {
    EXPECT_TRUE(net->closeSend(late, 0).ok());
  }
  net->cancelConnect(&second);
  std::vector<char> src(1000, 'q'), dst(1000, 0);
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  Request* sr = sendWhenCredited(net, p, src.data(), src.size(), 3, rr);
  ASSERT_NE(sr, nullptr);
  ASSERT_TRUE(wait(net, sr).ok());
  ASSERT_TRUE(wait(net, rr).ok());
  EXPECT_EQ(dst, src);
  closePair(net, net, p);
}

TEST(UcxNet, HandleOfAnotherNetIsRefused) {
  NEED_UCX(net);
  Handle h;
  h.bytes.assign(128, 0x11);
  SendComm* s = nullptr;
  Status st = net->connect(0, &h, &s);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not a UCX one"), std::string::npos) << st.message();
  EXPECT_EQ(s, nullptr);
}

}  // namespace
}  // namespace snccl::net
