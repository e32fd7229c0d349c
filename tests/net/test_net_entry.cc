// The net proxy entries (transport/net/net_entry.h) on their own: a SendEntry and a
// RecvEntry joined by the socket Net over loopback, each with a ring in local memory that
// the test drives as the executors would (posting on the send ring, consuming and
// releasing on the receive ring, planning receives, claiming and giving claims up).
// Covers what only shows at this level: where planned messages land (receives posted
// before the plan included), a message whose size the plan did not expect, and what an
// entry does when the executor gives its claim up (ProxyEntry::settle).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "transport/connection.h"
#include "transport/net/net_entry.h"
#include "loop_net.h"
#include "transport/net/socket/socket_net.h"

namespace snccl::net {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kSteps = 4;
constexpr uint32_t kSlot = 64 << 10;

// One ring's memory, as NetRing (net_transport.cc) lays it out.
struct Ring {
  Ring() { initConnCtrl(&ctrl, kSteps, kSlot); }
  RingView view(bool withPlan) { return {&ctrl, slots.data(), kSteps, kSlot, &note, withPlan ? &plan : nullptr}; }
  char* slot(uint64_t step) { return slots.data() + (step % kSteps) * size_t(kSlot); }

  alignas(64) ConnCtrl ctrl;
  std::vector<char> slots = std::vector<char>(size_t(kSteps) * kSlot, 0);
  FailureNote note;
  RecvPlan plan;
};

struct Link {
  Link() {
    Net* net = loopNet();
    Handle h{};
    ListenComm* l = nullptr;
    Status s = net->listen(0, &h, &l);
    EXPECT_TRUE(s.ok()) << s.message();
    recv = std::make_unique<RecvEntry>(net, r.view(true), l, EntryInfo{"test recv", 1, 0, 20});
    send = std::make_unique<SendEntry>(net, s_.view(false), h, EntryInfo{"test send", 0, 1, 20});
  }
  ~Link() {
    recv->closeNet();  // first: its goodbye lets the sender's close finish without lingering
    send->closeNet();
  }
  // Progresses both entries (as the proxy or a claimant would) until done() or 10 s.
  template <class F>
  bool until(F done) {
    auto deadline = Clock::now() + std::chrono::seconds(10);
    while (!done() && Clock::now() < deadline) {
      {
        std::lock_guard<std::mutex> a(send->driveMutex());
        send->progress();
      }
      std::lock_guard<std::mutex> b(recv->driveMutex());
      recv->progress();
    }
    return done();
  }
  // The sending executor: message `step` of `bytes` from its slot, filled with `fill`.
  void post(uint64_t step, uint32_t bytes, char fill) {
    std::memset(s_.slot(step), fill, bytes);
    ConnFifoEntry& e = s_.ctrl.fifo[step % kSteps];
    e.bytes = bytes;
    e.sig = 0;
    e.where = kInSlot;
    s_.ctrl.tail.store(step + 1);
  }
  // Both ends connected, the receive ring's kSteps receives posted, nothing in flight.
  bool connect() {
    return until([&] { return !recv->needsProxy(); });
  }

  Ring s_, r;
  std::unique_ptr<SendEntry> send;
  std::unique_ptr<RecvEntry> recv;
};

bool filledWith(const char* p, size_t n, char c) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != c) return false;
  return true;
}

// The receive ring keeps kSteps receives posted into its slots; a plan set afterwards
// (an operation starting) moves them, so its first messages land in its memory too.
// Steps without a target stay in their slots.
TEST(NetEntry, ReceivesPostedBeforeThePlanLandAtItsTargets) {
  Link l;
  ASSERT_TRUE(l.connect());
  std::vector<char> t0(40000, 0), t2(50000, 0);
  RecvTarget targets[] = {{0, 40000, t0.data()}, {2, 50000, t2.data()}};
  l.r.plan.set(0, targets);
  l.post(0, 40000, 'a');
  l.post(1, 30000, 'b');
  l.post(2, 50000, 'c');
  ASSERT_TRUE(l.until([&] { return l.r.ctrl.tail.load() == 3; })) << "tail " << l.r.ctrl.tail.load();
  const ConnFifoEntry* f = l.r.ctrl.fifo;
  EXPECT_EQ(f[0].where, uint32_t(kAtPointer));
  EXPECT_EQ(f[0].at, t0.data());
  EXPECT_EQ(f[1].where, uint32_t(kInSlot));
  EXPECT_EQ(f[2].where, uint32_t(kAtPointer));
  EXPECT_EQ(f[2].at, t2.data());
  EXPECT_TRUE(filledWith(t0.data(), t0.size(), 'a'));
  EXPECT_TRUE(filledWith(l.r.slot(1), 30000, 'b'));
  EXPECT_TRUE(filledWith(t2.data(), t2.size(), 'c'));
  EXPECT_TRUE(filledWith(l.r.slot(0), kSlot, 0)) << "a moved receive wrote its slot";
  EXPECT_TRUE(filledWith(l.r.slot(2), kSlot, 0)) << "a moved receive wrote its slot";
  EXPECT_EQ(l.r.ctrl.poison.load(), 0u);
}

// Ranks that disagree on a count: the message is larger than the target planned for it.
// It lands in its slot with its real size, for the executor to report the mismatch, and
// the connection stays healthy (before, the receive had the target's exact size, and the
// transport failed the whole connection).
TEST(NetEntry, MessageOfAnotherSizeThanPlannedLandsInItsSlot) {
  Link l;
  ASSERT_TRUE(l.connect());
  std::vector<char> target(40000, 0);
  RecvTarget t{0, 40000, target.data()};
  l.r.plan.set(0, std::span<const RecvTarget>(&t, 1));
  l.post(0, 50000, 'd');
  ASSERT_TRUE(l.until([&] { return l.r.ctrl.tail.load() == 1 || l.r.ctrl.poison.load() != 0; }));
  EXPECT_EQ(l.r.ctrl.poison.load(), 0u) << l.r.note.get();
  EXPECT_EQ(l.r.ctrl.fifo[0].where, uint32_t(kInSlot));
  EXPECT_EQ(l.r.ctrl.fifo[0].bytes, 50000u);
  EXPECT_TRUE(filledWith(l.r.slot(0), 50000, 'd'));
  EXPECT_TRUE(filledWith(target.data(), target.size(), 0));
}

// The executor sets its plan and gives the claim up (to sleep) before any drive: the
// entry's settle re-posts the freed slot's receive, and must apply the plan to the
// receives already posted first, whatever order it looks steps up in.
TEST(NetEntry, PlanSetJustBeforeTheClaimIsGivenUpStillApplies) {
  Link l;
  ASSERT_TRUE(l.connect());
  l.post(0, 100, 'a');
  ASSERT_TRUE(l.until([&] { return l.r.ctrl.tail.load() == 1 && l.s_.ctrl.head.load() == 1; }));
  std::vector<char> t1(40000, 0), t4(40000, 0);
  RecvTarget targets[] = {{0, 40000, t1.data()}, {3, 40000, t4.data()}};
  l.recv->claim();
  l.r.plan.set(1, targets);   // the operation starts at step 1 ...
  l.r.ctrl.head.store(1);     // ... after its executor consumed step 0
  l.recv->unclaimAfterDriving(true);
  l.post(1, 40000, 'e');
  ASSERT_TRUE(l.until([&] { return l.r.ctrl.tail.load() == 2; }));
  EXPECT_EQ(l.r.ctrl.fifo[1].where, uint32_t(kAtPointer));
  EXPECT_TRUE(filledWith(t1.data(), t1.size(), 'e'));
}

// A failed operation poisons its rings while it holds their claims and then gives them
// up (runRunners). A send ring with nothing left in flight must still make its entry
// close the comm with an ABORT (so the peer fails fast) or wake the proxy to do so.
TEST(NetEntry, PoisonedIdleSendRingTellsThePeerWhenItsClaimIsGivenUp) {
  Link l;
  ASSERT_TRUE(l.connect());
  l.post(0, 100, 'a');
  ASSERT_TRUE(l.until([&] { return l.r.ctrl.tail.load() == 1 && l.s_.ctrl.head.load() == 1; }));
  l.r.ctrl.head.store(1);  // the receiving executor consumed it
  ASSERT_TRUE(l.until([&] { return !l.recv->needsProxy(); }));
  l.send->claim();
  l.s_.ctrl.poison.store(encodePoison(ncclInternalError, 0));
  bool wake = l.send->unclaimAfterDriving(false);
  // The peer's entry polls its socket (it has receives posted) and sees the ABORT.
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (l.r.ctrl.poison.load() == 0 && Clock::now() < deadline) {
    std::lock_guard<std::mutex> lock(l.recv->driveMutex());
    l.recv->progress();
  }
  EXPECT_TRUE(wake || l.r.ctrl.poison.load() != 0) << "nobody tells the peer: the entry neither sent the ABORT nor "
                                                       "asked for the proxy";
  EXPECT_NE(l.r.ctrl.poison.load(), 0u) << "the ABORT did not reach the peer";
}

}  // namespace
}  // namespace snccl::net
