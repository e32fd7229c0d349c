// The proxy thread and its doorbell, with fake entries: an executor-style bump wakes a
// sleeping proxy every time (no lost wake-ups), release() waits until the entry lets go
// of its ring, the thread ends with the last entry and comes back with the next, an idle
// proxy does not spin, and an entry an executor claims is left to it until the claim
// ends (then a sleeping proxy takes over when, and only when, the entry needs it).
#include <gtest/gtest.h>
#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "common/wait.h"
#include "support/harness.h"
#include "transport/net/doorbell.h"
#include "transport/net/proxy.h"

namespace snccl::net {
namespace {

using Clock = std::chrono::steady_clock;

int threadCount() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

template <class F>
bool eventually(F pred, int ms = 5000) {
  auto end = Clock::now() + std::chrono::milliseconds(ms);
  while (Clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return pred();
}

// Shared state the test keeps after the proxy deleted the entry.
struct Probe {
  std::atomic<uint32_t> word{0};      // the "ring" word an executor bumps
  std::atomic<uint32_t> sleeping{0};  // set by arm(), as a ring's sleeping flag
  std::atomic<int> work{0};           // pending units of work
  std::atomic<int> handled{0};
  std::atomic<long> passes{0};
  std::atomic<bool> flushed{true};
  std::atomic<bool> closed{false};
  std::atomic<bool> owes{true};       // needsProxy()
};

class FakeEntry : public ProxyEntry {
 public:
  explicit FakeEntry(Probe* p) : p_(p) {}
  bool progress() override {
    p_->passes++;
    int w = p_->work.exchange(0);
    p_->handled += w;
    return w > 0;
  }
  bool pollFds(std::vector<pollfd>*) override { return true; }
  std::atomic<uint32_t>* wakeWord() override { return &p_->word; }
  bool arm() override {
    p_->sleeping.store(1, std::memory_order_seq_cst);
    return p_->work.load(std::memory_order_seq_cst) == 0;
  }
  void disarm() override { p_->sleeping.store(0); }
  bool detachReady() override { return p_->flushed.load(); }
  void closeNet() override { p_->closed = true; }
  bool needsProxy() override { return p_->owes.load(); }

 private:
  Probe* p_;
};

// What Connection::post does: publish, then bump and wake if the other end sleeps.
void post(Probe& p) {
  p.work.fetch_add(1, std::memory_order_seq_cst);
  if (p.sleeping.load(std::memory_order_seq_cst)) {
    p.word.fetch_add(1, std::memory_order_seq_cst);
    futexWakeAll(&p.word);
  }
}

TEST(Doorbell, RingsForEveryBumpEvenWhileBusy) {
  int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(efd, 0);
  {
    Doorbell bell(efd);
    if (!bell.available()) GTEST_SKIP() << "futex_waitv unavailable (Linux < 5.16): the proxy uses a timer";
    std::atomic<uint32_t> w{0};
    bell.setWords({&w});
    for (int i = 0; i < 500; ++i) {
      w.fetch_add(1);
      futexWakeAll(&w);
      if (i % 3 == 0) {  // a second bump right away: lands while the thread is ringing
        w.fetch_add(1);
        futexWakeAll(&w);
      }
      pollfd p{efd, POLLIN, 0};
      ASSERT_EQ(poll(&p, 1, 5000), 1) << "bump " << i << " did not ring";
      uint64_t v;
      ASSERT_EQ(read(efd, &v, sizeof v), ssize_t(sizeof v));
    }
    bell.setWords({});
    w.fetch_add(1);
    futexWakeAll(&w);
    pollfd p{efd, POLLIN, 0};
    EXPECT_EQ(poll(&p, 1, 100), 0) << "a word no longer watched still rang";
  }
  close(efd);
}

// release() returns once the ring is free; closeNet (which touches the probe) follows on
// the proxy thread, so wait for it before the probe goes away.
void releaseAndWait(ProxyEntry* e, Probe& p) {
  Proxy::instance().release(e);
  ASSERT_TRUE(eventually([&] { return p.closed.load(); })) << "closeNet never ran";
}

ProxyEntry* addFake(Probe* p) {
  auto e = std::make_unique<FakeEntry>(p);
  ProxyEntry* raw = e.get();
  Proxy::instance().add(std::move(e));
  return raw;
}

TEST(Proxy, SleepingProxyWakesForEveryPost) {
  sntest::Watchdog dog(120, "SleepingProxyWakesForEveryPost");
  Probe p;
  ProxyEntry* e = addFake(&p);
  for (int i = 1; i <= 300; ++i) {
    // Let it fall asleep (armed), then post like an executor.
    ASSERT_TRUE(eventually([&] { return p.sleeping.load() == 1; })) << "proxy never slept";
    if (i % 2) std::this_thread::sleep_for(std::chrono::microseconds(100));
    post(p);
    ASSERT_TRUE(eventually([&] { return p.handled.load() == i; })) << "post " << i << " was not noticed";
  }
  releaseAndWait(e, p);
}

TEST(Proxy, IdleProxyDoesNotSpin) {
  Probe p;
  ProxyEntry* e = addFake(&p);
  ASSERT_TRUE(eventually([&] { return p.sleeping.load() == 1; }));
  long before = p.passes.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // Each pass is a wake-up; an idle proxy sleeps in poll() with no timer.
  EXPECT_LT(p.passes.load() - before, 5);
  releaseAndWait(e, p);
}

TEST(Proxy, ReleaseWaitsUntilTheEntryLetsGoOfItsRing) {
  sntest::Watchdog dog(60, "ReleaseWaitsUntilTheEntryLetsGoOfItsRing");
  Probe p;
  p.flushed = false;  // e.g. messages still to send
  ProxyEntry* e = addFake(&p);
  std::atomic<bool> released{false};
  std::thread t([&] {
    Proxy::instance().release(e);
    released = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(released.load()) << "release returned while the entry still needed its ring";
  EXPECT_FALSE(p.closed.load());
  p.flushed = true;
  post(p);  // any wake-up lets the proxy look again
  t.join();
  EXPECT_TRUE(released.load());
  EXPECT_TRUE(eventually([&] { return p.closed.load(); }));
}

// The executor's claim: while it holds one, the proxy leaves the entry alone even when it
// wakes for another entry; tryDrive moves it from the claimant's thread.
TEST(Proxy, ClaimedEntryIsLeftToItsClaimant) {
  sntest::Watchdog dog(60, "ClaimedEntryIsLeftToItsClaimant");
  Probe p, other;
  ProxyEntry* e = addFake(&p);
  ProxyEntry* eo = addFake(&other);
  ASSERT_TRUE(eventually([&] { return p.sleeping.load() == 1; }));
  e->claim();
  post(other);  // wakes the proxy, which must now skip the claimed entry
  ASSERT_TRUE(eventually([&] { return other.handled.load() == 1; }));
  p.work.fetch_add(1);  // work only the claimant may do
  for (int i = 0; i < 20; ++i) {
    post(other);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_TRUE(eventually([&] { return other.handled.load() == 21; }));
  EXPECT_EQ(p.handled.load(), 0) << "the proxy progressed an entry an executor claimed";
  EXPECT_TRUE(e->tryDrive());
  EXPECT_EQ(p.handled.load(), 1);
  EXPECT_FALSE(e->tryDrive()) << "nothing left to move";
  // Giving the claim up with work pending: the proxy must take over.
  p.work.fetch_add(1);
  e->unclaim();
  Proxy::instance().unclaimed();
  EXPECT_TRUE(eventually([&] { return p.handled.load() == 2; })) << "the proxy did not take the entry back";
  releaseAndWait(e, p);
  releaseAndWait(eo, other);
}

// A claim given up while the proxy sleeps with only that entry claimed (so it watches
// nothing but its eventfd): unclaimed() must wake it, whatever the interleaving.
TEST(Proxy, UnclaimWakesASleepingProxy) {
  sntest::Watchdog dog(120, "UnclaimWakesASleepingProxy");
  Probe p;
  ProxyEntry* e = addFake(&p);
  for (int i = 1; i <= 200; ++i) {
    e->claim();
    if (i % 2) std::this_thread::sleep_for(std::chrono::microseconds(300));  // let it sleep
    p.work.fetch_add(1);
    // What NetRing::releaseDrive does while the executor is about to sleep on the ring.
    // The fake's progress() runs inside unclaimAfterDriving, so add the work after it.
    bool wake = e->unclaimAfterDriving(true);
    EXPECT_TRUE(wake);
    p.work.fetch_add(1);
    Proxy::instance().unclaimed();
    ASSERT_TRUE(eventually([&] { return p.handled.load() == 2 * i; })) << "round " << i << ": proxy slept on";
  }
  releaseAndWait(e, p);
}

// Between operations an entry that owes nothing is handed back without waking the proxy
// (a wake-up costs more than a small operation here); any later wake-up picks it up.
TEST(Proxy, UnclaimWithoutWorkLeavesTheProxyAsleep) {
  sntest::Watchdog dog(60, "UnclaimWithoutWorkLeavesTheProxyAsleep");
  Probe p, other;
  ProxyEntry* e = addFake(&p);
  ProxyEntry* eo = addFake(&other);
  ASSERT_TRUE(eventually([&] { return p.sleeping.load() == 1 && other.sleeping.load() == 1; }));
  e->claim();
  post(other);
  ASSERT_TRUE(eventually([&] { return other.handled.load() == 1 && other.sleeping.load() == 1; }));
  p.owes = false;
  EXPECT_FALSE(e->unclaimAfterDriving(false)) << "an entry that owes nothing asked for the proxy";
  long before = other.passes.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_LT(other.passes.load() - before, 3) << "the proxy woke although nothing needed it";
  p.owes = true;
  e->claim();
  EXPECT_TRUE(e->unclaimAfterDriving(false));
  // Unclaimed but unwatched: the next wake-up for any reason includes it again.
  p.work.fetch_add(1);
  post(other);
  EXPECT_TRUE(eventually([&] { return p.handled.load() == 1 && other.handled.load() == 2; }));
  releaseAndWait(e, p);
  releaseAndWait(eo, other);
}

TEST(Proxy, ThreadEndsWithTheLastEntryAndRestarts) {
  sntest::Watchdog dog(60, "ThreadEndsWithTheLastEntryAndRestarts");
  // This thread and the watchdog's; earlier tests' proxies have ended.
  ASSERT_TRUE(eventually([&] { return threadCount() == 2; })) << threadCount() << " threads before the test";
  const int base = threadCount();
  for (int round = 0; round < 3; ++round) {
    Probe a, b;
    ProxyEntry* ea = addFake(&a);
    ProxyEntry* eb = addFake(&b);
    // The proxy and (where futex_waitv exists) its doorbell.
    EXPECT_TRUE(eventually([&] { return threadCount() > base; }));
    post(a);
    post(b);
    EXPECT_TRUE(eventually([&] { return a.handled.load() == 1 && b.handled.load() == 1; }));
    releaseAndWait(ea, a);
    EXPECT_GT(threadCount(), base) << "stopped while an entry was left";
    releaseAndWait(eb, b);
    EXPECT_TRUE(eventually([&] { return threadCount() == base; })) << "proxy still running without entries";
  }
}

}  // namespace
}  // namespace snccl::net
