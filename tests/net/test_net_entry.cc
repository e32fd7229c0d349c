// The net proxy entries (transport/net/net_entry.h) on their own: a SendEntry and a
// RecvEntry joined by the socket Net over loopback, each with a ring in local memory that
// the test drives as the executors would (posting on the send ring, consuming and
// releasing on the receive ring, planning receives, claiming and giving claims up).
// Covers what only shows at this level: where planned messages land (receives posted
// before the plan included), a message whose size the plan did not expect, and what an
// entry does when the executor gives its claim up (ProxyEntry::settle).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
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
  explicit Link(Net* net = loopNet()) {
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

// The socket Net, except that while `hold` is set a send that completed is reported as
// not done yet: a send the net owes nothing more for (quiescent) but that no test() has
// retired, as an RDMA write whose completion waits in the completion queue.
class HoldingNet : public Net {
 public:
  explicit HoldingNet(Net* inner) : inner_(inner) {}
  std::atomic<bool> hold{false};
  size_t held() const { return held_.size(); }

  const char* name() const override { return "Holding"; }
  Status init() override { return inner_->init(); }
  int devices() const override { return inner_->devices(); }
  Status getProperties(int dev, Properties* p) const override { return inner_->getProperties(dev, p); }
  Status listen(int dev, Handle* h, ListenComm** l) override { return inner_->listen(dev, h, l); }
  Status connect(int dev, Handle* h, SendComm** s) override { return inner_->connect(dev, h, s); }
  Status accept(ListenComm* l, RecvComm** r) override { return inner_->accept(l, r); }
  void cancelConnect(Handle* h) override { inner_->cancelConnect(h); }
  Status regMr(Comm* c, void* d, size_t n, int type, MemHandle** mh) override { return inner_->regMr(c, d, n, type, mh); }
  bool usesUnregisteredHostMemory() const override { return inner_->usesUnregisteredHostMemory(); }
  Status deregMr(Comm* c, MemHandle* mh) override { return inner_->deregMr(c, mh); }
  Status isend(SendComm* c, void* d, size_t n, int tag, uint32_t imm, MemHandle* mh, Request** r) override {
    Status s = inner_->isend(c, d, n, tag, imm, mh, r);
    if (s.ok() && *r != nullptr) sends_.insert(*r);
    return s;
  }
  Status irecv(RecvComm* c, int n, void** d, size_t* sz, int* tags, MemHandle** mhs, Request** r) override {
    return inner_->irecv(c, n, d, sz, tags, mhs, r);
  }
  Status iflush(RecvComm* c, int n, void** d, int* sz, MemHandle** mhs, Request** r) override {
    return inner_->iflush(c, n, d, sz, mhs, r);
  }
  Status test(Request* r, bool* done, size_t* sizes, uint32_t* imm) override {
    auto h = held_.find(r);
    if (h != held_.end()) {
      *done = !hold;
      if (*done) {
        if (sizes != nullptr) *sizes = h->second.first;
        if (imm != nullptr) *imm = h->second.second;
        held_.erase(h);
      }
      return OkStatus();
    }
    size_t size = 0;
    uint32_t im = 0;
    Status s = inner_->test(r, done, &size, &im);
    if (s.ok() && *done && sends_.erase(r) == 1 && hold) {
      held_[r] = {size, im};
      *done = false;
      return s;
    }
    if (sizes != nullptr) *sizes = size;
    if (imm != nullptr) *imm = im;
    return s;
  }
  bool pollFds(const Comm* c, std::vector<pollfd>* fds) const override { return inner_->pollFds(c, fds); }
  bool quiescent(const Comm* c) const override { return inner_->quiescent(c); }
  Status closeSend(SendComm* c, uint32_t code) override { return inner_->closeSend(c, code); }
  Status closeRecv(RecvComm* c, uint32_t code) override { return inner_->closeRecv(c, code); }
  uint32_t peerAbortCode(const Comm* c) const override { return inner_->peerAbortCode(c); }
  bool peerClosed(const Comm* c) const override { return inner_->peerClosed(c); }
  Status closeListen(ListenComm* l) override { return inner_->closeListen(l); }

 private:
  Net* inner_;
  std::set<Request*> sends_;
  std::map<Request*, std::pair<size_t, uint32_t>> held_;
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

// An operation's last send is usually still waiting for its completion when the executor
// gives its claim up. A net that owes nothing more for it (quiescent) lets the claim go
// without waking the proxy; the next pass, whoever runs it, retires the send.
TEST(NetEntry, SendAwaitingOnlyItsCompletionNeedsNoProxy) {
  HoldingNet net(loopNet());
  Link l(&net);
  ASSERT_TRUE(l.connect());
  net.hold = true;
  l.post(0, 100, 'a');
  ASSERT_TRUE(l.until([&] { return l.r.ctrl.tail.load() == 1 && net.held() == 1; }));
  EXPECT_EQ(l.s_.ctrl.head.load(), 0u) << "the send was retired while held";
  l.send->claim();
  EXPECT_FALSE(l.send->unclaimAfterDriving(false)) << "a send that only waits to be retired woke the proxy";
  net.hold = false;
  EXPECT_TRUE(l.until([&] { return l.s_.ctrl.head.load() == 1; })) << "the send was never retired";
}

}  // namespace
}  // namespace snccl::net
