// Unit tests of the adaptive multipath connection (multipath_conn.h) on loopback, with two
// "rails" (127.0.0.1 and 127.0.0.2, both on lo): chunking and reassembly for every size
// class, many messages in flight, completion order, retargeting, both paths carrying
// data, a path that fails mid-transfer (its chunks go again on the other path and every
// message arrives intact), a path that goes silent and comes back (late: its chunks go
// on the other path, copies count once), the last path failing (an error, not a hang),
// aborts and clean closes, and two connections over the same rails counting each other's
// unacknowledged bytes. A real pulled cable is in test_net_multirail.
//
// Both ends run on the test thread (the connection is non-blocking).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "common/socket.h"
#include "transport/net/socket/multipath_conn.h"
#include "transport/net/socket/socket_setup.h"

namespace snccl::net {
namespace {

using Clock = std::chrono::steady_clock;
using socknet::MpRequest;
using socknet::MultipathConn;

constexpr size_t kChunk = 64 * 1024;

std::vector<char> pattern(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    v[i] = char(x >> 24);
  }
  return v;
}

sock::Address loop(const char* host) {
  sock::Address a = sock::Address::parse(std::string(host) + ":1").value();
  a.setPort(0);
  return a;
}

// Opens one adaptive connection of `sockets` paths over two loopback rails (bounded).
void openPaths(int sockets, std::vector<sock::Socket>* ss, std::vector<sock::Socket>* rs, size_t* chunk = nullptr) {
  socknet::RailPlan plan;
  plan.rails = {loop("127.0.0.1"), loop("127.0.0.2")};
  plan.adaptive = true;
  plan.chunkBytes = kChunk;
  Handle h{};
  socknet::SocketTuning tuning{20, ""};
  auto l = socknet::SocketListen::create(plan.rails[0], sockets - 1, tuning, &h, plan);
  ASSERT_TRUE(l.ok()) << l.status().message();
  auto c = socknet::Connector::start(h, tuning, plan.rails);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c.value()->adaptive());
  EXPECT_EQ(c.value()->rails(), 2);
  if (chunk != nullptr) *chunk = c.value()->chunkBytes();
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((ss->empty() || rs->empty()) && Clock::now() < deadline) {
    if (ss->empty()) *ss = c.value()->step().value();
    if (rs->empty()) *rs = l.value()->tryAccept().value();
  }
  ASSERT_EQ(ss->size(), size_t(sockets));
  ASSERT_EQ(rs->size(), size_t(sockets));
  // Socket i goes to rail i % 2, from rail i % 2.
  for (int i = 0; i < sockets; ++i) {
    EXPECT_EQ((*ss)[size_t(i)].peer().hostString(), i % 2 == 0 ? "127.0.0.1" : "127.0.0.2");
    EXPECT_EQ((*ss)[size_t(i)].localAddress().value().hostString(), i % 2 == 0 ? "127.0.0.1" : "127.0.0.2");
  }
}

struct Ends {
  std::unique_ptr<MultipathConn> tx, rx;
  std::vector<int> txFds, rxFds;  // the paths' descriptors, for failure injection
};

void openEnds(int sockets, Ends* e, int stallMs = 300, std::shared_ptr<socknet::RailBook> rails = nullptr) {
  std::vector<sock::Socket> ss, rs;
  size_t chunk = 0;
  openPaths(sockets, &ss, &rs, &chunk);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(chunk, kChunk);
  for (auto& s : ss) e->txFds.push_back(s.fd());
  for (auto& s : rs) e->rxFds.push_back(s.fd());
  e->tx = std::make_unique<MultipathConn>(true, std::move(ss), "test send",
                                          socknet::MultipathConfig{kChunk, stallMs, std::move(rails)});
  e->rx = std::make_unique<MultipathConn>(false, std::move(rs), "test recv",
                                          socknet::MultipathConfig{kChunk, stallMs, nullptr});
}

// Sends every message of `sizes` (posting up to `window` at a time on each end) and checks
// each arrives whole, with its imm, in order. `during(sent)` runs on every pass.
void transfer(Ends& e, const std::vector<size_t>& sizes, int window, const std::function<void(size_t)>& during = {}) {
  std::vector<std::vector<char>> src, dst;
  for (size_t i = 0; i < sizes.size(); ++i) {
    src.push_back(pattern(sizes[i], uint32_t(i + 1)));
    dst.emplace_back(sizes[i] + 100, char(0x5a));
  }
  std::deque<std::pair<size_t, MpRequest*>> sends, recvs;
  size_t posted = 0, sent = 0, sendsDone = 0, recvsDone = 0;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (recvsDone < sizes.size() && Clock::now() < deadline) {
    while (posted < sizes.size() && recvs.size() < size_t(window)) {
      auto r = e.rx->irecv(dst[posted].data(), dst[posted].size(), 3);
      ASSERT_TRUE(r.ok()) << r.status().message();
      if (r.value() == nullptr) break;
      recvs.emplace_back(posted++, r.value());
    }
    while (sent < sizes.size() && sends.size() < size_t(window)) {
      auto r = e.tx->isend(src[sent].data(), src[sent].size(), 3, uint32_t(1000 + sent));
      ASSERT_TRUE(r.ok()) << r.status().message();
      if (r.value() == nullptr) break;
      sends.emplace_back(sent++, r.value());
    }
    if (!sends.empty()) {
      bool done = false;
      size_t n = 0;
      Status s = e.tx->test(sends.front().second, &done, &n, nullptr);
      ASSERT_TRUE(s.ok()) << s.message();
      if (done) {
        EXPECT_EQ(n, sizes[sends.front().first]);
        EXPECT_EQ(sends.front().first, sendsDone++);
        sends.pop_front();
      }
    }
    if (!recvs.empty()) {
      bool done = false;
      size_t n = 0;
      uint32_t imm = 0;
      Status s = e.rx->test(recvs.front().second, &done, &n, &imm);
      ASSERT_TRUE(s.ok()) << s.message();
      if (done) {
        size_t i = recvs.front().first;
        EXPECT_EQ(i, recvsDone++);
        EXPECT_EQ(n, sizes[i]);
        EXPECT_EQ(imm, 1000 + i);
        if (sizes[i] > 0) {  // memcmp of an empty vector's null data is undefined
          EXPECT_EQ(std::memcmp(dst[i].data(), src[i].data(), sizes[i]), 0) << "message " << i << " of " << sizes[i];
        }
        EXPECT_EQ(dst[i][sizes[i]], char(0x5a)) << "message " << i << " wrote past its end";
        recvs.pop_front();
      }
    }
    if (during) during(sent);
  }
  ASSERT_EQ(recvsDone, sizes.size()) << "receives did not complete within 60 s";
  // The receiver acknowledged every chunk when it completed the last receive (progress
  // flushes acknowledgements after reading): the sends complete without it.
  while (!sends.empty() && Clock::now() < deadline) {
    bool done = false;
    ASSERT_TRUE(e.tx->test(sends.front().second, &done, nullptr, nullptr).ok());
    if (done) sends.pop_front();
  }
  ASSERT_TRUE(sends.empty()) << "sends did not complete within 60 s";
}

TEST(Multipath, EverySizeClassArrivesWholeAndInOrder) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  transfer(e, {0, 1, 7, 4095, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk + 13, (1 << 20) + 5, 0, 8 << 20, 33}, 4);
  EXPECT_EQ(e.tx->livePaths(), 2);
}

// Posts a receive on e's receiving end and sends `src` into it once its credit is there;
// the receiving end is not progressed, so nothing is acknowledged.
void sendUnread(Ends& e, std::vector<char>& src, std::vector<char>& dst) {
  auto r = e.rx->irecv(dst.data(), dst.size(), 3);
  ASSERT_TRUE(r.ok() && r.value() != nullptr);
  auto deadline = Clock::now() + std::chrono::seconds(10);
  MpRequest* s = nullptr;
  while (s == nullptr && Clock::now() < deadline) {
    auto q = e.tx->isend(src.data(), src.size(), 3, 0);
    ASSERT_TRUE(q.ok()) << q.status().message();
    s = q.value();
  }
  ASSERT_NE(s, nullptr) << "no credit within 10 s";
}

TEST(Multipath, ConnectionsOverTheSameRailsCountEachOthersBacklog) {
  auto book = std::make_shared<socknet::RailBook>();
  Ends a, b;
  openEnds(2, &a, 300, book);
  openEnds(2, &b, 300, book);
  if (HasFatalFailure()) return;
  std::vector<char> src(1 << 20, 7), dstA(1 << 20), dstB(1 << 20);
  std::shared_ptr<socknet::RailShare> rail0 = book->get("127.0.0.1 -> 127.0.0.1");
  std::shared_ptr<socknet::RailShare> rail1 = book->get("127.0.0.2 -> 127.0.0.2");
  sendUnread(a, src, dstA);
  if (HasFatalFailure()) return;
  EXPECT_GT(a.tx->pathInFlight(0), 0u);
  EXPECT_GT(a.tx->pathInFlight(1), 0u);
  EXPECT_EQ(rail0->unacked(), a.tx->pathInFlight(0));
  EXPECT_EQ(rail1->unacked(), a.tx->pathInFlight(1));
  sendUnread(b, src, dstB);
  if (HasFatalFailure()) return;
  EXPECT_EQ(rail0->unacked(), a.tx->pathInFlight(0) + b.tx->pathInFlight(0));
  EXPECT_EQ(rail1->unacked(), a.tx->pathInFlight(1) + b.tx->pathInFlight(1));
  // A connection that ends gives its share back.
  a.tx.reset();
  EXPECT_EQ(rail0->unacked(), b.tx->pathInFlight(0));
  EXPECT_EQ(rail1->unacked(), b.tx->pathInFlight(1));
}

TEST(Multipath, ManyMessagesInFlightUseBothRails) {
  Ends e;
  openEnds(4, &e);
  if (HasFatalFailure()) return;
  std::vector<size_t> sizes(200, 512 * 1024 + 64);
  transfer(e, sizes, 16);
  for (int i = 0; i < 4; ++i) EXPECT_GT(e.tx->pathBytes(i), 0u) << "path " << i << " carried nothing";
  uint64_t total = 0;
  for (int i = 0; i < 4; ++i) total += e.tx->pathBytes(i);
  // A path late on a busy machine has its chunks sent again: count each chunk once.
  EXPECT_EQ(total - e.tx->duplicateBytes(), 200u * (512 * 1024 + 64));
}

// A path whose socket fails mid-transfer (here: shut down under the sender) is dropped;
// its unacknowledged chunks go again on the other, and every message arrives intact.
TEST(Multipath, FailedPathIsDroppedAndItsChunksResent) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  std::vector<size_t> sizes(120, 1 << 20);
  bool cut = false;
  transfer(e, sizes, 8, [&](size_t sent) {
    if (!cut && sent >= 30 && e.tx->pathInFlight(1) > 0) {  // chunks to send again
      ::shutdown(e.txFds[1], SHUT_RDWR);
      cut = true;
    }
  });
  EXPECT_TRUE(cut);
  EXPECT_EQ(e.tx->livePaths(), 1);
}

// A path that goes silent without any error (the receiver stops reading it, as a pulled
// cable stops a path) is late: its chunks go again on the other path, and messages keep
// completing long before the path timeout (a minute here). Once the path is read again it
// is kept and carries new chunks, within a probe period (a second) if its estimate then
// says it is slow; its late copies are counted once.
TEST(Multipath, SilentPathIsBypassedAndUsedAgainWhenItRecovers) {
  Ends e;
  openEnds(2, &e, 60000);
  if (HasFatalFailure()) return;
  std::vector<size_t> sizes(160, 1 << 20);
  size_t heldAt = 0;
  bool released = false;
  uint64_t bytesAtRelease = 0, duplicatesAtRelease = 0;
  Clock::time_point releasedAt{};
  const auto newOnPath1 = [&] {
    return e.tx->pathBytes(1) - bytesAtRelease > e.tx->duplicateBytes() - duplicatesAtRelease;
  };
  transfer(e, sizes, 8, [&](size_t sent) {
    if (heldAt == 0 && sent >= 30 && e.tx->pathInFlight(1) > 0) {
      e.rx->holdPath(1, true);
      heldAt = sent;
    } else if (heldAt != 0 && !released && sent >= heldAt + 60) {  // 52 sends at least completed meanwhile
      e.rx->holdPath(1, false);
      released = true;
      releasedAt = Clock::now();
      bytesAtRelease = e.tx->pathBytes(1);
      duplicatesAtRelease = e.tx->duplicateBytes();
    } else if (released && !newOnPath1() && Clock::now() - releasedAt < std::chrono::seconds(3)) {
      usleep(1000);  // the sends left may take less than a probe period
    }
  });
  ASSERT_TRUE(released) << "messages stopped while path 1 was silent";
  EXPECT_EQ(e.tx->livePaths(), 2);
  EXPECT_GT(e.tx->resentChunks(), 0u);
  // Path 1's late copies are acknowledged after the release too: count only new chunks.
  EXPECT_TRUE(newOnPath1()) << "path 1 carried no new chunk within 3 s of its recovery";
  EXPECT_EQ(e.tx->pathBytes(0) + e.tx->pathBytes(1) - e.tx->duplicateBytes(), 160u << 20);
}

// The same from the receiving end: its socket of path 0 fails; the sender learns it from
// the failed socket (or the receiver's DROP) and finishes on path 1.
TEST(Multipath, PathFailingAtTheReceiverIsSurvived) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  std::vector<size_t> sizes(80, 700001);
  bool cut = false;
  transfer(e, sizes, 8, [&](size_t sent) {
    if (!cut && sent >= 20) {
      ::shutdown(e.rxFds[0], SHUT_RDWR);
      cut = true;
    }
  });
  EXPECT_TRUE(cut);
}

// Retargeting a posted receive before any chunk of its message arrived moves the message.
TEST(Multipath, RetargetBeforeTheFirstChunk) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  std::vector<char> src = pattern(300000, 9), posted(400000, 0), target(300000, 0);
  auto r = e.rx->irecv(posted.data(), posted.size(), 1);
  ASSERT_TRUE(r.ok() && r.value() != nullptr);
  EXPECT_TRUE(e.rx->retarget(r.value(), target.data(), target.size()));
  MpRequest* s = nullptr;
  bool sdone = false, rdone = false;
  size_t n = 0;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while ((!sdone || !rdone) && Clock::now() < deadline) {
    if (s == nullptr) s = e.tx->isend(src.data(), src.size(), 1, 5).value();
    if (s != nullptr && !sdone) {
      ASSERT_TRUE(e.tx->test(s, &sdone, nullptr, nullptr).ok());
    }
    if (!rdone) {
      ASSERT_TRUE(e.rx->test(r.value(), &rdone, &n, nullptr).ok());
    }
  }
  ASSERT_TRUE(sdone && rdone);
  EXPECT_EQ(n, src.size());
  EXPECT_EQ(std::memcmp(target.data(), src.data(), src.size()), 0);
  EXPECT_EQ(posted[0], 0);
}

// With every path gone the connection fails with an error naming the last one; it does
// not hang.
TEST(Multipath, LosingEveryPathIsAnError) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  std::vector<char> src = pattern(4 << 20, 3), dst(4 << 20);
  auto r = e.rx->irecv(dst.data(), dst.size(), 0);
  ASSERT_TRUE(r.ok());
  MpRequest* s = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (s == nullptr && Clock::now() < deadline) {
    bool rdone = false;
    ASSERT_TRUE(e.rx->test(r.value(), &rdone, nullptr, nullptr).ok());
    s = e.tx->isend(src.data(), src.size(), 0, 0).value();
  }
  ASSERT_NE(s, nullptr);
  ::shutdown(e.rxFds[0], SHUT_RDWR);
  ::shutdown(e.rxFds[1], SHUT_RDWR);
  Status st;
  bool done = false;
  while (st.ok() && !done && Clock::now() < deadline) st = e.tx->test(s, &done, nullptr, nullptr);
  EXPECT_FALSE(st.ok()) << "the send completed or hung with no path left";
  EXPECT_NE(st.message().find("the last of 2"), std::string::npos) << st.message();
}

// An abort code reaches the peer on the surviving paths.
TEST(Multipath, AbortCodeReachesThePeer) {
  Ends e;
  openEnds(3, &e);
  if (HasFatalFailure()) return;
  std::vector<char> dst(1000);
  auto r = e.rx->irecv(dst.data(), dst.size(), 0);
  ASSERT_TRUE(r.ok());
  e.tx->close(0x305, 0);
  Status st;
  bool done = false;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (st.ok() && !done && Clock::now() < deadline) st = e.rx->test(r.value(), &done, nullptr, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(e.rx->peerAbortCode(), 0x305u);
}

// A clean close: the receiver learns it is a goodbye, not a loss.
TEST(Multipath, CleanCloseIsAGoodbye) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  transfer(e, {1000, 200000}, 2);
  std::vector<char> dst(1000);
  auto r = e.rx->irecv(dst.data(), dst.size(), 0);
  ASSERT_TRUE(r.ok());
  e.tx->close(0, 1000);
  Status st;
  bool done = false;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (st.ok() && !done && Clock::now() < deadline) st = e.rx->test(r.value(), &done, nullptr, nullptr);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(e.rx->peerClosed());
}

// Sends `src` on the next credit and tests the receive `r` until it completes: the send
// request, or null (with the failure recorded) when an end failed or `deadline` passed.
MpRequest* deliver(Ends& e, std::vector<char>& src, MpRequest* r, Clock::time_point deadline) {
  MpRequest* s = nullptr;
  while (s == nullptr && Clock::now() < deadline) {
    auto k = e.tx->isend(src.data(), src.size(), 0, 0);
    if (!k.ok()) {
      ADD_FAILURE() << k.status().message();
      return nullptr;
    }
    s = k.value();
  }
  bool done = false;
  while (s != nullptr && !done && Clock::now() < deadline) {
    Status st = e.rx->test(r, &done, nullptr, nullptr);
    if (!st.ok()) {
      ADD_FAILURE() << st.message();
      return nullptr;
    }
  }
  if (s == nullptr || !done) {
    ADD_FAILURE() << (s == nullptr ? "no credit" : "the receive did not complete") << " within the deadline";
    return nullptr;
  }
  return s;
}

// The receiver takes a message and closes at once (a communicator destroyed right after
// the peer's goodbye): the sender's request still completes, because the receiver
// acknowledges what it took before its own goodbye.
TEST(Multipath, ReceiverClosingRightAfterAMessageAcknowledgesIt) {
  for (size_t size : {size_t(8), size_t(200000)}) {
    SCOPED_TRACE(size);
    Ends e;
    openEnds(2, &e);
    if (HasFatalFailure()) return;
    std::vector<char> src = pattern(size, 7), dst(size);
    auto r = e.rx->irecv(dst.data(), dst.size(), 0);
    ASSERT_TRUE(r.ok() && r.value() != nullptr);
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    MpRequest* s = deliver(e, src, r.value(), deadline);
    ASSERT_NE(s, nullptr);
    e.rx->close(0, 1000);
    bool done = false;
    Status st;
    while (st.ok() && !done && Clock::now() < deadline) st = e.tx->test(s, &done, nullptr, nullptr);
    EXPECT_TRUE(st.ok() && done) << (st.ok() ? "the send never completed" : st.message());
  }
}

// The receiver posts two receives, takes one message and closes: a message the sender
// sends afterwards on the second credit fails once the receiver's goodbye has arrived on
// every path, instead of waiting for acknowledgements that cannot come.
TEST(Multipath, SendAfterTheReceiverClosedFailsPromptly) {
  Ends e;
  openEnds(2, &e);
  if (HasFatalFailure()) return;
  std::vector<char> src = pattern(1000, 3), dst0(1000), dst1(1000);
  auto r0 = e.rx->irecv(dst0.data(), dst0.size(), 0);
  auto r1 = e.rx->irecv(dst1.data(), dst1.size(), 0);
  ASSERT_TRUE(r0.ok() && r0.value() != nullptr && r1.ok() && r1.value() != nullptr);
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  MpRequest* s0 = deliver(e, src, r0.value(), deadline);
  ASSERT_NE(s0, nullptr);
  bool done = false;
  while (!done && Clock::now() < deadline) ASSERT_TRUE(e.tx->test(s0, &done, nullptr, nullptr).ok());
  ASSERT_TRUE(done);
  e.rx->close(0, 1000);
  // The send fails at once (the sender read the goodbye for want of a credit) or when
  // tested, not when the 20 s deadline ends the loop.
  auto k = e.tx->isend(src.data(), src.size(), 0, 0);
  Status st = k.status();
  done = false;
  while (st.ok() && k.value() != nullptr && !done && Clock::now() < deadline)
    st = e.tx->test(k.value(), &done, nullptr, nullptr);
  EXPECT_FALSE(done) << "a message the receiver never took completed";
  EXPECT_FALSE(st.ok()) << "the send hung after the receiver closed";
  EXPECT_NE(st.message().find("the receiver closed the connection"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace snccl::net
