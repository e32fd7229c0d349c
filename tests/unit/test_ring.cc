// The ring protocol (transport/ring.h) on its own, over a control block in this process:
// credits, where messages are, the publish/sleep-flag pairing, poison. And Connection's
// capabilities (connection.h): a transport that offers none gets the plain ring, and the
// ones it offers are the ones called. Timings only bound waits that must end early (a
// missing wake-up shows as a 5 s sleep against a 2.5 s limit).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "common/process_barrier.h"
#include "common/wait.h"
#include "transport/connection.h"

namespace snccl {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kSteps = 4;
constexpr uint32_t kSlot = 256;

struct Memory {
  Memory() { initConnCtrl(&ctrl, kSteps, kSlot); }
  alignas(128) ConnCtrl ctrl;
  std::vector<char> slots = std::vector<char>(size_t(kSteps) * kSlot, 0);
};

// Two views of one ring, as its two ends hold them.
struct Ends {
  explicit Ends(RingConfig config = {})
      : send(&m.ctrl, m.slots.data(), config), recv(&m.ctrl, m.slots.data(), config) {}
  Memory m;
  Ring send, recv;
};

int64_t elapsedUs(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count();
}

TEST(Ring, CreditsAreNstepsAheadOfHead) {
  Ends e;
  uint64_t cachedHead = 0;
  for (uint64_t s = 0; s < kSteps; ++s) {
    EXPECT_TRUE(e.send.hasCredit(s, cachedHead)) << "step " << s;
    e.send.post(s, 8, s + 1, kInSlot, nullptr);
  }
  EXPECT_FALSE(e.send.hasCredit(kSteps, cachedHead)) << "the sender may overrun the receiver";
  EXPECT_EQ(e.send.tail(), kSteps);
  e.recv.release(1);
  EXPECT_TRUE(e.send.hasCredit(kSteps, cachedHead));
  EXPECT_EQ(cachedHead, 1u) << "a credit found means the head was reloaded";
  EXPECT_FALSE(e.send.hasCredit(kSteps + 1, cachedHead));
  EXPECT_TRUE(e.send.creditFor(kSteps + 1, 2));
  EXPECT_FALSE(e.send.creditFor(kSteps + 2, 2));
}

TEST(Ring, CachedCounterIsReloadedOnlyWhenItGivesNothing) {
  Ends e;
  uint64_t cachedTail = 0;
  EXPECT_FALSE(e.recv.hasMessage(0, cachedTail));
  e.send.post(0, 8, 1, kInSlot, nullptr);
  e.send.post(1, 8, 2, kInSlot, nullptr);
  EXPECT_TRUE(e.recv.hasMessage(0, cachedTail));
  EXPECT_EQ(cachedTail, 2u);
  // Message 1 is known from the cache: no reload, even though tail moved on.
  e.send.post(2, 8, 3, kInSlot, nullptr);
  EXPECT_TRUE(e.recv.hasMessage(1, cachedTail));
  EXPECT_EQ(cachedTail, 2u);
  EXPECT_TRUE(e.recv.hasMessage(2, cachedTail));
  EXPECT_EQ(cachedTail, 3u);
}

TEST(Ring, MessagesAreInTheirSlotAtTheirPointerOrInline) {
  Ends plain;
  char user[16] = "user memory";
  std::memcpy(plain.send.sendBuffer(0, 8), "slot0", 6);
  plain.send.post(0, 8, 11, plain.send.placement(8), nullptr);
  plain.send.post(1, sizeof user, 12, kAtPointer, user);
  uint32_t bytes = 0;
  uint64_t sig = 0;
  const char* p = plain.recv.read(0, &bytes, &sig);
  EXPECT_EQ(p, plain.m.slots.data()) << "a plain ring carries every message in its slot";
  EXPECT_STREQ(p, "slot0");
  EXPECT_EQ(bytes, 8u);
  EXPECT_EQ(sig, 11u);
  EXPECT_EQ(plain.recv.read(1, &bytes, &sig), user);
  EXPECT_EQ(plain.recv.messageAt(1), user);
  EXPECT_EQ(bytes, sizeof user);
  // The entry of step 1 comes round again at step 1 + kSteps: it must not keep its pointer.
  plain.recv.release(2);
  plain.send.post(1 + kSteps, 8, 13, kInSlot, nullptr);
  EXPECT_EQ(plain.recv.messageAt(1 + kSteps), plain.recv.slot(1 + kSteps));

  Ends inl(RingConfig{.inlineMessages = true});
  EXPECT_FALSE(inl.recv.inlineArrived(0));
  char* small = inl.send.sendBuffer(0, kInlineBytes);
  EXPECT_EQ(small, inl.m.ctrl.fifo[0].data) << "a message that fits travels in its entry";
  std::memcpy(small, "inline", 7);
  inl.send.post(0, kInlineBytes, 21, inl.send.placement(kInlineBytes), nullptr);
  EXPECT_TRUE(inl.recv.inlineArrived(0));
  EXPECT_FALSE(inl.recv.inlineArrived(1));
  EXPECT_STREQ(inl.recv.readInline(0, &bytes, &sig), "inline");
  EXPECT_EQ(inl.send.sendBuffer(1, kInlineBytes + 1), inl.send.slot(1));
  inl.send.post(1, kInlineBytes + 1, 22, inl.send.placement(kInlineBytes + 1), nullptr);
  EXPECT_TRUE(inl.recv.inlineArrived(1));
  EXPECT_EQ(inl.recv.readInline(1, &bytes, &sig), inl.recv.slot(1));
  EXPECT_EQ(bytes, kInlineBytes + 1);
}

// No system call when nobody sleeps: the wake word moves only for an announced sleeper,
// on either side, and stops moving once it withdrew.
void wakeWordMovesOnlyForSleepers(RingConfig config) {
  Ends e(config);
  std::atomic<uint32_t>& tailWord = e.recv.wakeWord(RingSide::kReceiver);
  std::atomic<uint32_t>& headWord = e.send.wakeWord(RingSide::kSender);
  e.send.post(0, 8, 1, kInSlot, nullptr);
  e.recv.release(1);
  EXPECT_EQ(tailWord.load(), 0u);
  EXPECT_EQ(headWord.load(), 0u);
  ASSERT_TRUE(e.recv.announce(RingSide::kReceiver));
  e.send.post(1, 8, 2, kInSlot, nullptr);
  EXPECT_EQ(tailWord.load(), 1u) << "a post did not wake the sleeping receiver";
  EXPECT_EQ(headWord.load(), 0u);
  e.recv.withdraw(RingSide::kReceiver);
  e.send.post(2, 8, 3, kInSlot, nullptr);
  EXPECT_EQ(tailWord.load(), 1u) << "a post woke a receiver that no longer sleeps";
  ASSERT_TRUE(e.send.announce(RingSide::kSender));
  e.recv.release(2);
  EXPECT_EQ(headWord.load(), 1u) << "a release did not wake the sleeping sender";
  EXPECT_EQ(tailWord.load(), 1u);
}

TEST(Ring, WakeWordMovesOnlyForSleepersWithFullFences) { wakeWordMovesOnlyForSleepers({}); }

TEST(Ring, WakeWordMovesOnlyForSleepersWithLightPublishing) {
  if (!registerProcessBarrier()) GTEST_SKIP() << "SKIPPED LOUDLY: no membarrier GLOBAL_EXPEDITED here";
  wakeWordMovesOnlyForSleepers({.lightPublish = true});
}

// The whole pairing with a real sleeper: it announces, re-checks the counter, sleeps
// (5 s) on the wake word; a post from another thread must end the sleep.
void sleeperIsWoken(RingConfig config, RingSide side) {
  Ends e(config);
  if (side == RingSide::kSender)
    for (uint64_t s = 0; s < kSteps; ++s) e.send.post(s, 8, s + 1, kInSlot, nullptr);  // no credit left
  Ring& sleeper = side == RingSide::kSender ? e.send : e.recv;
  std::atomic<bool> announced{false};
  int64_t sleptUs = -1;
  std::thread t([&] {
    std::atomic<uint32_t>& word = sleeper.wakeWord(side);
    if (!sleeper.announce(side)) return;
    announced.store(true);
    auto t0 = Clock::now();
    for (;;) {
      uint32_t seq = word.load(std::memory_order_seq_cst);
      bool ready = side == RingSide::kSender ? sleeper.creditFor(kSteps, sleeper.head(std::memory_order_seq_cst))
                                             : sleeper.tail(std::memory_order_seq_cst) > 0;
      if (ready || elapsedUs(t0) > 5'000'000) break;
      futexWait(&word, seq, 5'000'000);
    }
    sleptUs = elapsedUs(t0);
    sleeper.withdraw(side);
  });
  while (!announced.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // it is in futexWait by now
  if (side == RingSide::kSender)
    e.recv.release(1);
  else
    e.send.post(0, 8, 1, kInSlot, nullptr);
  t.join();
  ASSERT_GE(sleptUs, 0) << "the barrier failed";
  EXPECT_LT(sleptUs, 2'500'000) << "the sleeper was not woken (slept " << sleptUs << " us of 5 s)";
}

TEST(Ring, SleepingReceiverIsWokenByPost) { sleeperIsWoken({}, RingSide::kReceiver); }
TEST(Ring, SleepingSenderIsWokenByRelease) { sleeperIsWoken({}, RingSide::kSender); }

TEST(Ring, SleepersAreWokenWithLightPublishing) {
  if (!registerProcessBarrier()) GTEST_SKIP() << "SKIPPED LOUDLY: no membarrier GLOBAL_EXPEDITED here";
  sleeperIsWoken({.lightPublish = true}, RingSide::kReceiver);
  sleeperIsWoken({.lightPublish = true}, RingSide::kSender);
}

// Poison: the first word stays, and both wake words move, so a sleeper on either side
// wakes to see it.
TEST(Ring, PoisonKeepsTheFirstWordAndWakesBothSides) {
  Ends e;
  EXPECT_EQ(e.recv.poisoned(), 0u);
  std::atomic<int> woken{0};
  auto sleeper = [&](Ring& r, RingSide side) {
    std::atomic<uint32_t>& word = r.wakeWord(side);
    uint32_t seq = word.load();
    auto t0 = Clock::now();
    while (r.poisoned(std::memory_order_seq_cst) == 0 && elapsedUs(t0) < 5'000'000) {
      futexWait(&word, seq, 5'000'000);
      seq = word.load();
    }
    if (elapsedUs(t0) < 2'500'000) woken.fetch_add(1);
  };
  std::thread a(sleeper, std::ref(e.send), RingSide::kSender);
  std::thread b(sleeper, std::ref(e.recv), RingSide::kReceiver);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  uint32_t first = encodePoison(5, 3);
  e.send.poison(first);
  e.recv.poison(encodePoison(6, 1));
  a.join();
  b.join();
  EXPECT_EQ(woken.load(), 2) << "a sleeper outlived the poison";
  EXPECT_EQ(e.recv.poisoned(), first);
  EXPECT_EQ(poisonCode(e.send.poisoned()), 5);
  EXPECT_EQ(poisonOrigin(e.send.poisoned()), 3);
}

// ---- Connection and capabilities ---------------------------------------------------

// A transport's memory that offers no capability: the plain ring.
struct PlainMemory : ConnMemory {
  explicit PlainMemory(bool* freed) : freed(freed) {}
  ~PlainMemory() override { *freed = true; }
  bool* freed;
};

TEST(Connection, TransportWithoutCapabilitiesGetsThePlainRing) {
  Memory m;
  bool freed = false;
  {
    Connection send(&m.ctrl, m.slots.data(), std::make_unique<PlainMemory>(&freed), 1, 0, "plain");
    Connection recv(&m.ctrl, m.slots.data(), nullptr, 0, 0, "plain");  // no memory to own at all
    EXPECT_FALSE(send.drivable());
    EXPECT_FALSE(send.sendsAtPointers());
    EXPECT_FALSE(recv.receivesAtPointers());
    EXPECT_EQ(send.failureDetail(), "");
    EXPECT_EQ(recv.failureDetail(), "");
    send.quiesce();  // nothing to wait for
    recv.quiesce();
    // Every message in its slot, even one that would fit an entry: not an inline ring.
    char* slot = send.trySendSlot(8);
    ASSERT_EQ(slot, m.slots.data());
    std::memcpy(slot, "8 bytes", 8);
    send.post(8, 42);
    EXPECT_EQ(m.ctrl.fifo[0].where, uint32_t(kInSlot));
    EXPECT_EQ(m.ctrl.fifo[0].seq.load(), 0u) << "a plain ring has no inline flag to set";
    uint32_t bytes = 0;
    uint64_t sig = 0;
    EXPECT_STREQ(recv.tryRecvSlot(&bytes, &sig), "8 bytes");
    EXPECT_EQ(sig, 42u);
    recv.release();
    EXPECT_EQ(m.ctrl.head.load(), 1u);
    EXPECT_FALSE(freed);
  }
  EXPECT_TRUE(freed) << "the Connection did not free its transport's memory";
}

TEST(Connection, CreditsRunOutAndComeBack) {
  Memory m;
  Connection send(&m.ctrl, m.slots.data(), nullptr, 1, 0, "plain");
  Connection recv(&m.ctrl, m.slots.data(), nullptr, 0, 0, "plain");
  for (uint32_t i = 0; i < kSteps; ++i) {
    ASSERT_NE(send.trySendSlot(8), nullptr) << i;
    send.post(8, i);
  }
  EXPECT_EQ(send.trySendSlot(8), nullptr);
  EXPECT_FALSE(send.ready(true));
  EXPECT_TRUE(recv.ready(false));
  uint32_t bytes = 0;
  uint64_t sig = 0;
  ASSERT_NE(recv.tryRecvSlot(&bytes, &sig), nullptr);
  recv.release();
  EXPECT_TRUE(send.ready(true));
  EXPECT_NE(send.trySendSlot(8), nullptr);
  recv.poison(encodePoison(3, 0));
  EXPECT_EQ(send.poisoned(), encodePoison(3, 0));
}

// A transport whose far end is a helper with every capability: each call reaches it.
struct HelperMemory : ConnMemory, Drivable, ZeroCopySend, ZeroCopyRecv {
  explicit HelperMemory(bool isSend) : send(isSend) {}
  ConnCaps caps() override {
    ++capsCalls;
    return {.drivable = this,
            .zeroCopySend = send ? static_cast<ZeroCopySend*>(this) : nullptr,
            .zeroCopyRecv = send ? nullptr : static_cast<ZeroCopyRecv*>(this)};
  }
  std::string failureDetail() const override { return "link down"; }
  void claimDrive() override { ++claims; }
  void releaseDrive(bool waiting) override { releases += waiting ? 10 : 1; }
  bool drive() override { return ++drives > 0; }
  void quiesce() override { ++quiesces; }
  void planRecvs(uint64_t first, std::span<const RecvTarget> targets) override {
    planFirst = first;
    planCount = targets.size();
  }
  bool send;
  int capsCalls = 0, claims = 0, releases = 0, drives = 0, quiesces = 0;
  uint64_t planFirst = ~0ull;
  size_t planCount = 0;
};

TEST(Connection, CapabilitiesReachTheTransport) {
  Memory sm, rm;
  auto sendMem = std::make_unique<HelperMemory>(true);
  auto recvMem = std::make_unique<HelperMemory>(false);
  HelperMemory* s = sendMem.get();
  HelperMemory* r = recvMem.get();
  Connection send(&sm.ctrl, sm.slots.data(), std::move(sendMem), 1, 0, "helper");
  Connection recv(&rm.ctrl, rm.slots.data(), std::move(recvMem), 0, 0, "helper");
  EXPECT_TRUE(send.drivable());
  EXPECT_TRUE(send.sendsAtPointers());
  EXPECT_FALSE(send.receivesAtPointers());
  EXPECT_TRUE(recv.receivesAtPointers());
  EXPECT_FALSE(recv.sendsAtPointers());
  EXPECT_EQ(send.failureDetail(), "link down");
  send.claimDrive();
  EXPECT_TRUE(send.drive());
  send.releaseDrive(true);
  EXPECT_EQ(s->claims, 1);
  EXPECT_EQ(s->drives, 1);
  EXPECT_EQ(s->releases, 10);
  send.quiesce();
  recv.quiesce();
  EXPECT_EQ(s->quiesces, 1);
  EXPECT_EQ(r->quiesces, 1);
  // A plan counts from the next message this end receives.
  rm.ctrl.tail.store(1);
  uint32_t bytes = 0;
  uint64_t sig = 0;
  ASSERT_NE(recv.tryRecvSlot(&bytes, &sig), nullptr);
  recv.release();
  RecvTarget t{0, 8, nullptr};
  recv.planRecvs(std::span<const RecvTarget>(&t, 1));
  EXPECT_EQ(r->planFirst, 1u);
  EXPECT_EQ(r->planCount, 1u);
  // Learned once, at construction.
  send.trySendSlot(8);
  send.post(8, 0);
  EXPECT_EQ(s->capsCalls, 1);
  EXPECT_EQ(r->capsCalls, 1);
}

}  // namespace
}  // namespace snccl
