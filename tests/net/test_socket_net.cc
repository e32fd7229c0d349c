// Unit tests of the socket net on loopback: the split rule, setup, credits, ordering,
// messages larger than a stream part, many messages, poll descriptors, hostile
// connections, errors when the peer closes, aborts or dies, and the local-link check
// that tells a node whose own link is down from one whose peer is gone.
//
// Both ends run on the test thread (the API is non-blocking), except where a peer must
// die: then it is a forked child.
#include <gtest/gtest.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <numeric>
#include <random>
#include <vector>

#include "common/socket.h"
#include "loop_net.h"
#include "support/harness.h"
#include "transport/net/net.h"
#include "transport/net/socket/socket_conn.h"
#include "transport/net/socket/socket_link.h"
#include "transport/net/socket/socket_net.h"
#include "transport/net/socket/socket_setup.h"
#include "transport/net/socket/socket_wire.h"

namespace snccl::net {
namespace {

using Clock = std::chrono::steady_clock;
using sockwire::Part;

// Messages split over two data streams (the default is one).
constexpr int kStreams = 2;

struct Pair {
  SendComm* send = nullptr;
  RecvComm* recv = nullptr;
};

// Drives listen/connect/accept until both ends are up (bounded).
Pair connectPair(Net* net) {
  Pair p;
  Handle h{};
  ListenComm* l = nullptr;
  Status s = net->listen(0, &h, &l);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return p;
  Handle ch = h;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((p.send == nullptr || p.recv == nullptr) && Clock::now() < deadline) {
    if (p.send == nullptr) {
      Status cs = net->connect(0, &ch, &p.send);
      EXPECT_TRUE(cs.ok()) << cs.message();
      if (!cs.ok()) break;
    }
    if (p.recv == nullptr) {
      Status as = net->accept(l, &p.recv);
      EXPECT_TRUE(as.ok()) << as.message();
      if (!as.ok()) break;
    }
  }
  EXPECT_TRUE(net->closeListen(l).ok());
  EXPECT_NE(p.send, nullptr);
  EXPECT_NE(p.recv, nullptr);
  return p;
}

void closePair(Net* net, Pair& p) {
  if (p.recv) { EXPECT_TRUE(net->closeRecv(p.recv, 0).ok()); }
  if (p.send) { EXPECT_TRUE(net->closeSend(p.send, 0).ok()); }
  p = Pair{};
}

Request* postRecv(Net* net, RecvComm* rc, void* buf, size_t size, int tag = 0) {
  Request* r = nullptr;
  Status s = net->irecv(rc, 1, &buf, &size, &tag, nullptr, &r);
  EXPECT_TRUE(s.ok()) << s.message();
  return r;
}

// Tests the request until it completes or fails; progresses `other` meanwhile (the
// other end of the pair lives on this thread too).
Status waitReq(Net* net, Request* r, size_t* size = nullptr, uint32_t* imm = nullptr,
               const std::function<void()>& other = {}, int timeoutSec = 20) {
  auto deadline = Clock::now() + std::chrono::seconds(timeoutSec);
  while (Clock::now() < deadline) {
    bool done = false;
    Status s = net->test(r, &done, size, imm);
    if (!s.ok() || done) return s;
    if (other) other();
  }
  return RemoteError("test: request did not complete within %d s", timeoutSec);
}

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  for (char& c : v) c = char(g());
  return v;
}

// ---- The split rule ---------------------------------------------------------------

TEST(SocketWire, SplitCoversMessageInOrderWithinStreamLimit) {
  Part parts[sockwire::kMaxStreams];
  for (int ns : {1, 2, 3, 8, 64})
    for (size_t size : {size_t(0), size_t(1), sockwire::kInlineMax, sockwire::kInlineMax + 1, size_t(65536),
                        size_t(131072), size_t(131072 + 7), size_t(1) << 20, size_t(5000001)})
      for (uint64_t seq : {0ull, 1ull, 5ull, 1000003ull}) {
        int n = sockwire::splitMessage(seq, size, ns, parts);
        if (size <= sockwire::kInlineMax) {
          EXPECT_EQ(n, 0);
          continue;
        }
        ASSERT_GE(n, 1);
        ASSERT_LE(n, ns);
        size_t off = 0;
        std::vector<int> used(size_t(ns), 0);
        for (int i = 0; i < n; ++i) {
          EXPECT_EQ(parts[i].offset, off);
          EXPECT_GT(parts[i].len, 0u);
          if (i + 1 < n) { EXPECT_GE(parts[i].len, std::min(size, sockwire::kMinPart)); }
          EXPECT_EQ(parts[i].stream, int((seq + uint64_t(i)) % uint64_t(ns)));
          EXPECT_EQ(used[size_t(parts[i].stream)]++, 0) << "two parts on one stream";
          off += parts[i].len;
        }
        EXPECT_EQ(off, size);
      }
}

TEST(SocketWire, StreamCountFollowsNcclLimits) {
  EXPECT_EQ(socketStreamsFromParams(1, 2), 2);
  EXPECT_EQ(socketStreamsFromParams(4, 4), 16);
  EXPECT_EQ(socketStreamsFromParams(16, 16), 64);  // product capped at 64
  EXPECT_EQ(socketStreamsFromParams(100, 1), 16);  // at most 16 threads
  EXPECT_EQ(socketStreamsFromParams(0, 0), 1);
  EXPECT_EQ(socketStreamsFromParams(-2, -2), 1);
}

// ---- Through the Net interface ------------------------------------------------------

TEST(SocketNet, PropertiesAndRegistration) {
  Net* net = loopNet(kStreams);
  EXPECT_STREQ(net->name(), "Socket");
  EXPECT_EQ(net->devices(), 1);
  Properties p;
  ASSERT_TRUE(net->getProperties(0, &p).ok());
  EXPECT_EQ(p.name, "lo");
  EXPECT_EQ(p.ptrSupport, kPtrHost);
  EXPECT_EQ(p.maxRecvs, 1);
  EXPECT_GT(p.speedMbps, 0);
  EXPECT_FALSE(net->getProperties(1, &p).ok());
  MemHandle* mh = nullptr;
  EXPECT_TRUE(net->regMr(nullptr, &p, 8, kPtrHost, &mh).ok());
  EXPECT_FALSE(net->regMr(nullptr, &p, 8, kPtrCuda, &mh).ok());
}

TEST(SocketNet, IsendWaitsForPostedReceive) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  std::vector<char> src = pattern(1000, 1), dst(1000, 0);
  Request* sr = nullptr;
  // No receive posted: no credit, however often we ask.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(net->isend(p.send, src.data(), src.size(), 0, 42, nullptr, &sr).ok());
    ASSERT_EQ(sr, nullptr) << "isend started a message without a posted receive";
    usleep(200);
  }
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (sr == nullptr && Clock::now() < deadline)
    ASSERT_TRUE(net->isend(p.send, src.data(), src.size(), 0, 42, nullptr, &sr).ok());
  ASSERT_NE(sr, nullptr);
  // One credit, one message: a second isend must wait again.
  Request* extra = nullptr;
  ASSERT_TRUE(net->isend(p.send, src.data(), src.size(), 0, 43, nullptr, &extra).ok());
  EXPECT_EQ(extra, nullptr);
  size_t got = 0;
  uint32_t imm = 0;
  ASSERT_TRUE(waitReq(net, sr).ok());
  Status s = waitReq(net, rr, &got, &imm);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(imm, 42u);
  EXPECT_EQ(src, dst);
  closePair(net, p);
}

// Sends `sizes` through a pair with up to `window` receives posted, checking each
// message's bytes, size and imm, all from one thread.
void stream(Net* net, Pair& p, const std::vector<size_t>& sizes, size_t window) {
  size_t maxSize = *std::max_element(sizes.begin(), sizes.end());
  std::vector<std::vector<char>> src(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) src[i] = pattern(sizes[i], uint32_t(i + 7));
  std::vector<std::vector<char>> slots(window, std::vector<char>(maxSize));
  std::deque<std::pair<Request*, size_t>> sends, recvs;  // request, message index
  size_t nextSend = 0, nextPost = 0, nextDone = 0;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (nextDone < sizes.size()) {
    ASSERT_LT(Clock::now(), deadline) << "stalled at message " << nextDone;
    while (nextPost < sizes.size() && nextPost < nextDone + window) {
      Request* r = postRecv(net, p.recv, slots[nextPost % window].data(), maxSize);
      if (r == nullptr) break;
      recvs.emplace_back(r, nextPost++);
    }
    while (nextSend < nextPost) {
      Request* r = nullptr;
      Status s = net->isend(p.send, src[nextSend].data(), sizes[nextSend], 0, 1000 + nextSend, nullptr, &r);
      ASSERT_TRUE(s.ok()) << s.message();
      if (r == nullptr) break;
      sends.emplace_back(r, nextSend++);
    }
    while (!sends.empty()) {
      bool done = false;
      ASSERT_TRUE(net->test(sends.front().first, &done, nullptr, nullptr).ok());
      if (!done) break;
      sends.pop_front();
    }
    while (!recvs.empty()) {
      bool done = false;
      size_t got = 0;
      uint32_t imm = 0;
      Status s = net->test(recvs.front().first, &done, &got, &imm);
      ASSERT_TRUE(s.ok()) << s.message();
      if (!done) break;
      size_t i = recvs.front().second;
      recvs.pop_front();
      ASSERT_EQ(i, nextDone);
      ASSERT_EQ(got, sizes[i]) << "message " << i;
      ASSERT_EQ(imm, 1000 + i) << "message " << i;
      if (got > 0) {
        ASSERT_EQ(std::memcmp(slots[i % window].data(), src[i].data(), got), 0) << "message " << i << " corrupted";
      }
      ++nextDone;
    }
  }
}

TEST(SocketNet, ManyMessagesOfMixedSizesArriveInOrder) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  std::mt19937 g(5);
  std::vector<size_t> sizes;
  for (int i = 0; i < 2000; ++i) {
    int kind = int(g() % 4);
    sizes.push_back(kind == 0 ? g() % 300 : kind == 1 ? g() % 70000 : kind == 2 ? 131072 : g() % 3000);
  }
  sizes[0] = 0;
  stream(net, p, sizes, 8);
  closePair(net, p);
}

// Inline messages (up to kInlineMax) travel in the control socket. With a receiver that
// reads nothing for a while, the sender's control socket fills and its frames wait in
// the connection's output buffer, written as the receiver drains: all must arrive whole
// and in order. (64 messages of 64 KiB: far more than a socket that is not read holds.)
TEST(SocketNet, InlineMessagesWaitWhileTheReceiverDoesNotRead) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  constexpr int kMessages = socknet::kMaxRequests;
  const size_t size = sockwire::kInlineMax;
  std::vector<std::vector<char>> src(kMessages), dst(kMessages, std::vector<char>(size, 0));
  std::vector<Request*> recvs, sends;
  for (int i = 0; i < kMessages; ++i) {
    src[size_t(i)] = pattern(size, uint32_t(100 + i));
    Request* r = postRecv(net, p.recv, dst[size_t(i)].data(), size);
    ASSERT_NE(r, nullptr) << "receive " << i;
    recvs.push_back(r);
  }
  auto deadline = Clock::now() + std::chrono::seconds(20);
  for (int i = 0; i < kMessages; ++i) {
    Request* r = nullptr;
    while (r == nullptr && Clock::now() < deadline) {
      Status s = net->isend(p.send, src[size_t(i)].data(), size, 0, uint32_t(i), nullptr, &r);
      ASSERT_TRUE(s.ok()) << s.message();
    }
    ASSERT_NE(r, nullptr) << "no credit for message " << i;
    sends.push_back(r);
  }
  size_t nextSend = 0;
  auto progressSends = [&] {
    while (nextSend < sends.size()) {
      bool done = false;
      if (!net->test(sends[nextSend], &done, nullptr, nullptr).ok() || !done) return;
      ++nextSend;
    }
  };
  for (int i = 0; i < kMessages; ++i) {
    size_t got = 0;
    uint32_t imm = 0;
    Status st = waitReq(net, recvs[size_t(i)], &got, &imm, progressSends);
    ASSERT_TRUE(st.ok()) << "message " << i << ": " << st.message();
    EXPECT_EQ(got, size);
    EXPECT_EQ(imm, uint32_t(i));
    EXPECT_TRUE(dst[size_t(i)] == src[size_t(i)]) << "message " << i << " corrupted";
  }
  while (nextSend < sends.size()) {
    ASSERT_TRUE(waitReq(net, sends[nextSend]).ok());
    ++nextSend;
  }
  closePair(net, p);
}

TEST(SocketNet, MessagesLargerThanAStreamPart) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  // 8 MiB: four times the loopback socket buffers, split over the streams.
  stream(net, p, {size_t(8) << 20, sockwire::kMinPart + 1, (size_t(3) << 20) + 12345, size_t(8) << 20}, 2);
  closePair(net, p);
}

std::string congestionOf(int fd) {
  char name[32] = {};
  socklen_t len = sizeof name;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "getsockopt failed";
  return std::string(name, strnlen(name, len));
}

std::string systemCongestion() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string s;
  std::getline(f, s);
  return s;
}

// Opens one connection of `ns` streams with `tuning` on both ends (bounded).
void openSockets(int ns, const socknet::SocketTuning& tuning, std::vector<sock::Socket>* ss,
                 std::vector<sock::Socket>* rs) {
  Handle h{};
  sock::Address any = sock::Address::parse("127.0.0.1:1").value();
  any.setPort(0);  // ephemeral
  auto l = socknet::SocketListen::create(any, ns, tuning, &h);
  ASSERT_TRUE(l.ok()) << l.status().message();
  auto c = socknet::Connector::start(h, tuning);
  ASSERT_TRUE(c.ok()) << c.status().message();
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((ss->empty() || rs->empty()) && Clock::now() < deadline) {
    if (ss->empty()) ss->operator=(c.value()->step().value());
    if (rs->empty()) rs->operator=(l.value()->tryAccept().value());
  }
  ASSERT_EQ(ss->size(), size_t(ns) + 1);
  ASSERT_EQ(rs->size(), size_t(ns) + 1);
}

// SNCCL_SOCKET_CC reaches every socket of a connection, control and streams, on both
// ends; empty leaves the system default. The default is reno (the parameter table).
TEST(SocketNet, CongestionControlOnEverySocket) {
  auto fromParams = socknet::socketTuningFromParams();
  ASSERT_TRUE(fromParams.ok()) << fromParams.status().message();
  EXPECT_EQ(fromParams.value().congestion, "reno");
  // Two names the kernel always has (reno is built in; the system default is loaded):
  // where the default is not reno, a connection that merely kept it fails the first.
  for (const std::string& cc : {std::string("reno"), systemCongestion(), std::string()}) {
    SCOPED_TRACE("SNCCL_SOCKET_CC=" + cc);
    std::vector<sock::Socket> ss, rs;
    openSockets(2, {20, cc}, &ss, &rs);
    if (HasFatalFailure()) return;
    const std::string want = cc.empty() ? systemCongestion() : cc;
    for (const std::vector<sock::Socket>* side : {&ss, &rs})
      for (const sock::Socket& s : *side) EXPECT_EQ(congestionOf(s.fd()), want);
  }
}

TEST(SocketNet, UnknownCongestionControlIsNamedWithTheChoices) {
  EXPECT_TRUE(socknet::checkCongestion("reno").ok());
  Status s = socknet::checkCongestion("no-such-cc");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ncclInvalidArgument);
  EXPECT_NE(s.message().find("SNCCL_SOCKET_CC=no-such-cc"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("available: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("reno"), std::string::npos) << s.message();
}

TEST(SocketNet, StreamCountsFromOneToMany) {
  for (int ns : {1, 3, 8}) {
    SCOPED_TRACE("streams " + std::to_string(ns));
    std::vector<sock::Socket> ss, rs;
    openSockets(ns, {20, ""}, &ss, &rs);
    if (HasFatalFailure()) return;
    socknet::Conn sender(true, std::move(ss), "test send");
    socknet::Conn receiver(false, std::move(rs), "test recv");
    EXPECT_EQ(sender.nstreams(), ns);
    std::vector<char> src = pattern(size_t(1) << 20, uint32_t(ns)), dst(src.size() + 64, 0);
    auto rr = receiver.irecv(dst.data(), dst.size(), 7);
    ASSERT_TRUE(rr.ok() && rr.value() != nullptr);
    socknet::SockRequest* sr = nullptr;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    bool rdone = false, sdone = false;
    size_t got = 0;
    uint32_t imm = 0;
    while ((!rdone || !sdone) && Clock::now() < deadline) {
      if (sr == nullptr) {
        auto r = sender.isend(src.data(), src.size(), 7, 99);
        ASSERT_TRUE(r.ok());
        sr = r.value();
      }
      if (sr != nullptr && !sdone) { ASSERT_TRUE(sender.test(sr, &sdone, nullptr, nullptr).ok()); }
      if (!rdone) { ASSERT_TRUE(receiver.test(rr.value(), &rdone, &got, &imm).ok()); }
    }
    ASSERT_TRUE(rdone && sdone);
    EXPECT_EQ(got, src.size());
    EXPECT_EQ(imm, 99u);
    EXPECT_EQ(std::memcmp(dst.data(), src.data(), src.size()), 0);
    receiver.close(0, 100);
    sender.close(0, 1000);
  }
}

// The receiver holds credits back while the sender has more granted than are held, and
// writes them in batches. Two promises: (1) without anything more from the receiver (it
// may be busy elsewhere), the sender holds credits for more than half of the receives
// posted and not yet matched, the oldest among them; (2) a receiver that only waits
// (posts nothing new) releases what it holds as messages arrive. And batching must
// actually save writes.
TEST(SocketNet, CreditsGoOutInBatchesWithoutStrandingTheSender) {
  std::vector<sock::Socket> ss, rs;
  openSockets(1, {20, ""}, &ss, &rs);
  if (HasFatalFailure()) return;
  socknet::Conn sender(true, std::move(ss), "test send");
  socknet::Conn receiver(false, std::move(rs), "test recv");
  constexpr int kWindow = 4, kRounds = 400, kSlots = 16;  // at most 10 receives are posted at once
  std::vector<std::vector<char>> slots(kSlots, std::vector<char>(64, 0));
  std::deque<socknet::SockRequest*> posted;
  int nextPost = 0;
  auto post = [&] {
    auto r = receiver.irecv(slots[size_t(nextPost % kSlots)].data(), 64, 0);
    ASSERT_TRUE(r.ok() && r.value() != nullptr) << "receive " << nextPost;
    posted.push_back(r.value());
    ++nextPost;
  };
  // Sends message i, progressing only the sender: a credit must be (or arrive) there.
  auto sendOne = [&](int i) {
    uint64_t word = uint64_t(i) * 0x9e3779b97f4a7c15ull;
    socknet::SockRequest* sr = nullptr;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (sr == nullptr && Clock::now() < deadline) {
      auto r = sender.isend(&word, sizeof word, 0, uint32_t(i));
      ASSERT_TRUE(r.ok()) << r.status().message();
      sr = r.value();
    }
    ASSERT_NE(sr, nullptr) << "message " << i
                           << ": no credit with the receiver idle (the sender must get more than half of the "
                              "posted receives)";
    bool done = false;
    while (!done && Clock::now() < deadline) ASSERT_TRUE(sender.test(sr, &done, nullptr, nullptr).ok());
    ASSERT_TRUE(done) << "message " << i << " did not leave";
  };
  auto recvOne = [&](int i) {
    socknet::SockRequest* rr = posted.front();
    posted.pop_front();
    bool done = false;
    size_t got = 0;
    uint32_t imm = 0;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (!done && Clock::now() < deadline) ASSERT_TRUE(receiver.test(rr, &done, &got, &imm).ok());
    ASSERT_TRUE(done) << "message " << i << " never arrived";
    EXPECT_EQ(imm, uint32_t(i));
    uint64_t word = 0;
    std::memcpy(&word, slots[size_t(i % kSlots)].data(), sizeof word);
    EXPECT_EQ(word, uint64_t(i) * 0x9e3779b97f4a7c15ull) << "message " << i;
  };
  // A fresh window, the receiver idle: more than half of it can be sent at once.
  for (int i = 0; i < kWindow; ++i) post();
  constexpr int kAhead = kWindow / 2 + 1;
  for (int i = 0; i < kAhead; ++i) {
    sendOne(i);
    if (HasFatalFailure()) return;
  }
  for (int i = 0; i < kAhead; ++i) {
    recvOne(i);
    if (HasFatalFailure()) return;
    post();
  }
  // Ping-pong, the latency-bound pattern batching is for: one message in flight, each
  // slot re-posted as soon as its message is consumed.
  for (int i = kAhead; i < kRounds; ++i) {
    sendOne(i);
    if (HasFatalFailure()) return;
    recvOne(i);
    if (HasFatalFailure()) return;
    post();
  }
  const uint64_t releases = receiver.creditReleases();
  // Batched: one write per two rounds here (203 in all); one per receive (over 400) without.
  EXPECT_LE(releases, uint64_t(kRounds) * 3 / 4) << "credits were not batched";
  // A burst that leaves credits held (6 posted on top of those left: some held), then a
  // receiver that only tests: the sender must get every credit as its messages arrive.
  for (int i = 0; i < 6; ++i) post();
  for (int i = kRounds; i < nextPost; ++i) {
    // The sender's credits for this message may come only from the receiver's tests of
    // earlier messages: interleave them as a real receiver would.
    socknet::SockRequest* sr = nullptr;
    uint64_t word = uint64_t(i) * 0x9e3779b97f4a7c15ull;
    auto deadline = Clock::now() + std::chrono::seconds(5);
    while (sr == nullptr && Clock::now() < deadline) {
      auto r = sender.isend(&word, sizeof word, 0, uint32_t(i));
      ASSERT_TRUE(r.ok()) << r.status().message();
      sr = r.value();
      if (sr == nullptr && !posted.empty()) {
        bool done = false;
        size_t got = 0;
        uint32_t imm = 0;
        // Test (not complete) the oldest receive: matching arrived frames releases credits.
        ASSERT_TRUE(receiver.test(posted.front(), &done, &got, &imm).ok());
        if (done) {
          int k = nextPost - int(posted.size());
          posted.pop_front();
          EXPECT_EQ(imm, uint32_t(k));
        }
      }
    }
    ASSERT_NE(sr, nullptr) << "message " << i << ": the receiver's tests never released its credit";
    bool done = false;
    while (!done && Clock::now() < deadline) ASSERT_TRUE(sender.test(sr, &done, nullptr, nullptr).ok());
    ASSERT_TRUE(done);
  }
  while (!posted.empty()) {
    recvOne(nextPost - int(posted.size()));
    if (HasFatalFailure()) return;
  }
  receiver.close(0, 100);
  sender.close(0, 1000);
}

TEST(SocketNet, MessageLargerThanPostedReceiveIsAnError) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  std::vector<char> src(5000), dst(4000);
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  Request* sr = nullptr;
  Status s;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (s.ok() && sr == nullptr && Clock::now() < deadline) s = net->isend(p.send, src.data(), src.size(), 0, 0, nullptr, &sr);
  EXPECT_FALSE(s.ok()) << "a 5000-byte message was accepted for a 4000-byte receive";
  EXPECT_NE(s.message().find("posted receive"), std::string::npos) << s.message();
  closePair(net, p);
}

// Net::retargetRecv: a message of the requested size for a posted receive lands in the new
// memory, until the receiver has read the message's frame; a message of another size
// still lands where the receive was posted.
TEST(SocketNet, PostedReceiveMovesUntilItsMessageStartsArriving) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  auto send = [&](std::vector<char>& src) {
    Request* sr = nullptr;
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (sr == nullptr && Clock::now() < deadline) {
      Status s = net->isend(p.send, src.data(), src.size(), 0, 0, nullptr, &sr);
      EXPECT_TRUE(s.ok()) << s.message();
      if (!s.ok()) break;
    }
    return sr;
  };
  // Completes receive r while progressing send s (both ends live on this thread).
  auto finish = [&](Request* r, Request* s, size_t* got) {
    Status st = waitReq(net, r, got, nullptr, [&] {
      bool done = false;
      if (s != nullptr && net->test(s, &done, nullptr, nullptr).ok() && done) s = nullptr;
    });
    if (st.ok() && s != nullptr) st = waitReq(net, s);
    return st;
  };
  const size_t small = 200 << 10, big = 16 << 20;  // big: more than loopback's socket buffers hold
  std::vector<char> src1 = pattern(small, 3), src2 = pattern(big, 4);
  std::vector<char> slot1(256 << 10, 0), target1(small, 0), slot2(big, 0), target2(big, 0);
  Request* r1 = postRecv(net, p.recv, slot1.data(), slot1.size());
  Request* r2 = postRecv(net, p.recv, slot2.data(), slot2.size());
  ASSERT_TRUE(r1 && r2);
  EXPECT_TRUE(net->retargetRecv(r1, target1.data(), target1.size(), nullptr));
  Request* s1 = send(src1);
  ASSERT_NE(s1, nullptr);
  size_t got = 0;
  Status st = finish(r1, s1, &got);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got, small);
  EXPECT_EQ(target1, src1) << "the moved receive did not land in its new memory";
  EXPECT_EQ(slot1, std::vector<char>(slot1.size(), 0)) << "the moved receive wrote its old memory";

  // Once bytes of the second message are in its slot, the receive stays where it is.
  Request* s2 = send(src2);
  ASSERT_NE(s2, nullptr);
  bool done = false;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (std::memcmp(slot2.data(), src2.data(), 64) != 0 && Clock::now() < deadline) {
    ASSERT_TRUE(net->test(r2, &done, &got, nullptr).ok());
    ASSERT_FALSE(done) << "16 MiB went through loopback at once; the test cannot check the late move";
    bool sd = false;
    if (s2 != nullptr && net->test(s2, &sd, nullptr, nullptr).ok() && sd) s2 = nullptr;
  }
  ASSERT_EQ(std::memcmp(slot2.data(), src2.data(), 64), 0) << "no byte of the message arrived";
  EXPECT_FALSE(net->retargetRecv(r2, target2.data(), target2.size(), nullptr)) << "moved a receive whose data was arriving";
  st = finish(r2, s2, &got);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got, big);
  EXPECT_TRUE(slot2 == src2) << "the receive that could not move lost data";
  EXPECT_TRUE(target2 == std::vector<char>(big, 0)) << "a refused move still wrote the new memory";

  // A message larger or smaller than the size asked for (ranks that disagree on a count)
  // lands where the receive was posted, whole, and the new memory stays untouched.
  for (size_t targetBytes : {size_t(100), size_t(2000)}) {
    std::vector<char> slot3(4000, 0), target3(targetBytes, 0);
    Request* r3 = postRecv(net, p.recv, slot3.data(), slot3.size());
    ASSERT_NE(r3, nullptr);
    ASSERT_TRUE(net->retargetRecv(r3, target3.data(), target3.size(), nullptr));
    std::vector<char> src3 = pattern(1000, 5);
    Request* s3 = send(src3);
    ASSERT_NE(s3, nullptr);
    st = finish(r3, s3, &got);
    ASSERT_TRUE(st.ok()) << st.message();
    EXPECT_EQ(got, src3.size());
    EXPECT_EQ(std::memcmp(slot3.data(), src3.data(), src3.size()), 0) << "target of " << targetBytes;
    EXPECT_EQ(target3, std::vector<char>(targetBytes, 0)) << "a message of another size went to the new memory";
  }
  closePair(net, p);
}

TEST(SocketNet, PollDescriptorsReportIncomingData) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  std::vector<char> src = pattern(200000, 3), dst(200000);
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  Request* sr = nullptr;
  {
    // Idle (nothing asked of it): nothing to wait for, so nothing that could keep a
    // poll() returning.
    std::vector<pollfd> fds;
    ASSERT_TRUE(net->pollFds(p.send, &fds));
    EXPECT_TRUE(fds.empty());
  }
  auto deadline = Clock::now() + std::chrono::seconds(10);
  for (;;) {
    ASSERT_TRUE(net->isend(p.send, src.data(), src.size(), 0, 5, nullptr, &sr).ok());
    if (sr != nullptr || Clock::now() > deadline) break;
    // Waiting for a credit: the control socket is what brings it.
    std::vector<pollfd> fds;
    ASSERT_TRUE(net->pollFds(p.send, &fds));
    ASSERT_FALSE(fds.empty()) << "a sender waiting for credit must watch its control socket";
    poll(fds.data(), fds.size(), 100);
  }
  ASSERT_NE(sr, nullptr);
  // The receiver sleeps in poll() on its descriptors and wakes for the data.
  bool rdone = false, sdone = false;
  int wakeups = 0;
  while (!rdone && Clock::now() < deadline) {
    if (!sdone) { ASSERT_TRUE(net->test(sr, &sdone, nullptr, nullptr).ok()); }
    std::vector<pollfd> fds;
    ASSERT_TRUE(net->pollFds(p.recv, &fds));
    ASSERT_FALSE(fds.empty());
    if (poll(fds.data(), fds.size(), 1000) > 0) ++wakeups;
    ASSERT_TRUE(net->test(rr, &rdone, nullptr, nullptr).ok());
  }
  EXPECT_TRUE(rdone);
  EXPECT_GT(wakeups, 0);
  EXPECT_EQ(src, dst);
  closePair(net, p);
}

TEST(SocketNet, CleanCloseOfReceiverFailsLaterSends) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  ASSERT_TRUE(net->closeRecv(p.recv, 0).ok());
  p.recv = nullptr;
  std::vector<char> src(100);
  Status s;
  Request* sr = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (s.ok() && Clock::now() < deadline) s = net->isend(p.send, src.data(), src.size(), 0, 0, nullptr, &sr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("closed"), std::string::npos) << s.message();
  closePair(net, p);
}

TEST(SocketNet, PendingReceiveFailsWhenSenderCloses) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  std::vector<char> dst(100);
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  ASSERT_NE(rr, nullptr);
  ASSERT_TRUE(net->closeSend(p.send, 0).ok());
  p.send = nullptr;
  Status s = waitReq(net, rr, nullptr, nullptr, {}, 10);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ncclRemoteError);
  EXPECT_NE(s.message().find("closed the connection"), std::string::npos) << s.message();
  closePair(net, p);
}

TEST(SocketNet, AbortReachesThePeerWithItsCode) {
  Net* net = loopNet(kStreams);
  Pair p = connectPair(net);
  ASSERT_TRUE(p.send && p.recv);
  std::vector<char> dst(100);
  Request* rr = postRecv(net, p.recv, dst.data(), dst.size());
  // The code in the low byte, the caller's bits above it (snccl: the failing rank + 1).
  const uint32_t word = uint32_t(ncclSystemError) | (6u << 8);
  EXPECT_EQ(net->peerAbortCode(p.recv), 0u);
  ASSERT_TRUE(net->closeSend(p.send, word).ok());
  p.send = nullptr;
  Status s = waitReq(net, rr, nullptr, nullptr, {}, 10);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("reported a failure"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(resultName(ncclSystemError)), std::string::npos) << s.message();
  EXPECT_EQ(net->peerAbortCode(p.recv), word) << "the abort word must reach the peer unchanged";
  closePair(net, p);
}

// The receiver is a child process that dies (SIGKILL) mid-stream: the sender gets an
// error naming the lost connection, promptly, not a hang.
TEST(SocketNet, PeerDeathIsAnErrorNotAHang) {
  Net* net = loopNet(kStreams);
  Handle h{};
  ListenComm* l = nullptr;
  ASSERT_TRUE(net->listen(0, &h, &l).ok());
  std::fflush(stdout);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RecvComm* rc = nullptr;
    while (rc == nullptr)
      if (!net->accept(l, &rc).ok()) _exit(2);
    std::vector<char> buf(1 << 20);
    Request* r = postRecv(net, rc, buf.data(), buf.size());
    if (r == nullptr) _exit(3);
    if (!waitReq(net, r).ok()) _exit(4);
    raise(SIGKILL);  // dies with receives of its peer's later messages never posted
  }
  // Only now a watchdog thread: no other thread may exist while forking.
  sntest::Watchdog dog(60, "PeerDeathIsAnErrorNotAHang", [child] { kill(child, SIGKILL); });
  ASSERT_TRUE(net->closeListen(l).ok());
  SendComm* sc = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (sc == nullptr && Clock::now() < deadline) ASSERT_TRUE(net->connect(0, &h, &sc).ok());
  ASSERT_NE(sc, nullptr);
  std::vector<char> src(1 << 20, 'x');
  Status s;
  auto t0 = Clock::now();
  for (int i = 0; i < 1000 && s.ok(); ++i) {
    Request* r = nullptr;
    while (s.ok() && r == nullptr) {
      s = net->isend(sc, src.data(), src.size(), 0, 0, nullptr, &r);
      usleep(100);
    }
    if (s.ok()) s = waitReq(net, r);
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  int status = 0;
  waitpid(child, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "child status " << status;
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ncclRemoteError) << s.message();
  EXPECT_LT(secs, 15.0);
  EXPECT_TRUE(s.message().find("lost") != std::string::npos || s.message().find("failed") != std::string::npos)
      << s.message();
  EXPECT_TRUE(net->closeSend(sc, 0).ok());
}

// A connection to the listener's port that does not know the handle's nonce is dropped;
// the real sender still gets through.
TEST(SocketNet, ListenerDropsConnectionsWithoutTheKey) {
  Net* net = loopNet(kStreams);
  Handle h{};
  ListenComm* l = nullptr;
  ASSERT_TRUE(net->listen(0, &h, &l).ok());
  sockwire::HandleWire w;
  std::memcpy(&w, h.bytes.data(), sizeof w);
  auto addr = sock::Address::fromWire(w.addr);
  ASSERT_TRUE(addr.ok());
  auto intruder = sock::Socket::connect(addr.value(), sock::Waiter::after(10));
  ASSERT_TRUE(intruder.ok());
  sockwire::Hello bad{};
  bad.magic = sockwire::kMagic;
  bad.version = sockwire::kVersion;
  bad.nonce = w.nonce ^ 1;
  bad.nstreams = w.nstreams;
  ASSERT_TRUE(intruder.value().sendAll(&bad, sizeof bad, sock::Waiter::after(10), "hello").ok());
  SendComm* sc = nullptr;
  RecvComm* rc = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((sc == nullptr || rc == nullptr) && Clock::now() < deadline) {
    if (sc == nullptr) { ASSERT_TRUE(net->connect(0, &h, &sc).ok()); }
    if (rc == nullptr) { ASSERT_TRUE(net->accept(l, &rc).ok()); }
  }
  ASSERT_TRUE(sc && rc);
  // The intruder was closed by the listener.
  char c;
  bool eof = false;
  deadline = Clock::now() + std::chrono::seconds(5);
  while (!eof && Clock::now() < deadline) {
    auto k = intruder.value().recvSome(&c, 1, &eof);
    if (!k.ok()) break;
    usleep(1000);
  }
  EXPECT_TRUE(eof);
  Pair p{sc, rc};
  stream(net, p, {100, 100000}, 2);
  EXPECT_TRUE(net->closeListen(l).ok());
  closePair(net, p);
}

// The local-link check (socket_link.h): a loopback connection's link is fine, an
// unconnected socket has none to judge, a missing interface is named, and only errnos a
// link or path failure can cause trigger the check. A link that really goes down is
// tests/net/test_net_netns.cc's LinkCut tests.
TEST(SocketLink, LoopbackIsFineAndMissingInterfacesAreNamed) {
  Result<sock::Address> addr = sock::Address::parse("127.0.0.1:1");
  ASSERT_TRUE(addr.ok()) << addr.status().message();
  sock::Address any = addr.value();
  any.setPort(0);  // ephemeral
  Result<sock::Socket> l = sock::Socket::listen(any, false);
  ASSERT_TRUE(l.ok()) << l.status().message();
  Result<sock::Socket> c = sock::Socket::connect(l.value().peer(), sock::Waiter::after(10));
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(socknet::localLinkProblem(c.value().fd()), "");
  EXPECT_EQ(socknet::localLinkProblem(l.value().fd()), "");
  EXPECT_EQ(socknet::interfaceProblem("lo"), "");
  std::string missing = socknet::interfaceProblem("sncclnope0");
  EXPECT_NE(missing.find("sncclnope0"), std::string::npos) << missing;
  EXPECT_NE(missing.find("no longer exists"), std::string::npos) << missing;
  EXPECT_TRUE(socknet::linkRelatedErrno(ETIMEDOUT));
  EXPECT_TRUE(socknet::linkRelatedErrno(ENETDOWN));
  EXPECT_TRUE(socknet::linkRelatedErrno(EHOSTUNREACH));
  EXPECT_FALSE(socknet::linkRelatedErrno(ECONNRESET));
  EXPECT_FALSE(socknet::linkRelatedErrno(EPIPE));
}

}  // namespace
}  // namespace snccl::net
