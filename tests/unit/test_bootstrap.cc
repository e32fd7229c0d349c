// Bootstrap and socket helper tests: ranks as threads and as forked processes. Every
// multi-rank test runs under a watchdog so a hang fails with a message instead of
// stalling the suite.
#include <fcntl.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/socket.h"
#include "core/bootstrap.h"
#include "core/bootstrap_wire.h"

namespace snccl {
namespace {

using Clock = std::chrono::steady_clock;
using BootPtr = std::unique_ptr<Bootstrap>;
constexpr int kTimeoutSec = 10;

// Parameters are read once per process: set the timeout before anything reads it.
const bool kEnvReady = [] {
  setenv("SNCCL_TIMEOUT", "10", 1);
  return true;
}();

double secondsSince(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Kills the process with a message if not disarmed in time (threads cannot be cancelled).
class Watchdog {
 public:
  explicit Watchdog(int seconds) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    name_ = info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
    thread_ = std::thread([this, seconds] {
      std::unique_lock<std::mutex> lk(mu_);
      if (!cv_.wait_for(lk, std::chrono::seconds(seconds), [this] { return done_; })) {
        fprintf(stderr, "WATCHDOG: %s hung for %d s\n", name_.c_str(), seconds);
        fflush(stderr);
        _exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> g(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

void runThreads(int n, const std::function<void(int)>& fn, int watchdogSec = 60) {
  Watchdog dog(watchdogSec);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) ts.emplace_back(fn, r);
  for (auto& t : ts) t.join();
}

std::vector<std::byte> infoFor(int rank, size_t size = 12) {
  std::vector<std::byte> v(size);
  for (size_t i = 0; i < size; ++i) v[i] = std::byte(static_cast<uint8_t>(rank * 31 + i));
  return v;
}

// Inits n ranks on threads from one id; fails the test when any init fails.
std::vector<BootPtr> initAll(int n, const ncclUniqueId& id, size_t infoSize = 12) {
  std::vector<BootPtr> boots(static_cast<size_t>(n));
  runThreads(n, [&](int r) {
    auto info = infoFor(r, infoSize);
    auto res = Bootstrap::init(id, r, n, info, nullptr);
    ASSERT_TRUE(res.ok()) << "rank " << r << ": " << res.status().message();
    boots[static_cast<size_t>(r)] = std::move(res).value();
  });
  for (auto& b : boots) EXPECT_NE(b, nullptr);
  return boots;
}

std::vector<BootPtr> initAll(int n, size_t infoSize = 12) {
  ncclUniqueId id;
  Status s = Bootstrap::createUniqueId(&id);
  EXPECT_TRUE(s.ok()) << s.message();
  return initAll(n, id, infoSize);
}

uint16_t freeLoopbackPort() {
  auto a = sock::Address::parse("127.0.0.1:1");
  a->setPort(0);
  auto lis = sock::Socket::listen(*a, true);
  return lis.ok() ? lis->peer().port() : 0;
}

// ---- Pure helpers ------------------------------------------------------------------

TEST(SocketIfname, FilterSyntax) {
  auto f = sock::IfnameFilter::parse("eth,ib");
  EXPECT_FALSE(f.exclude);
  EXPECT_FALSE(f.exact);
  EXPECT_TRUE(f.matches("eth0"));
  EXPECT_TRUE(f.matches("ib1"));
  EXPECT_FALSE(f.matches("lo"));

  auto ex = sock::IfnameFilter::parse("^docker,lo");
  EXPECT_TRUE(ex.exclude);
  EXPECT_FALSE(ex.matches("docker0"));
  EXPECT_FALSE(ex.matches("lo"));
  EXPECT_TRUE(ex.matches("eth0"));

  auto exact = sock::IfnameFilter::parse("=eth0");
  EXPECT_TRUE(exact.exact);
  EXPECT_TRUE(exact.matches("eth0"));
  EXPECT_FALSE(exact.matches("eth01"));

  auto exExact = sock::IfnameFilter::parse("^=eth0, eth1");
  EXPECT_TRUE(exExact.exclude && exExact.exact);
  ASSERT_EQ(exExact.names.size(), 2u);
  EXPECT_FALSE(exExact.matches("eth1"));
  EXPECT_TRUE(exExact.matches("eth10"));
  EXPECT_TRUE(sock::IfnameFilter::parse("").matches("anything"));
}

std::vector<sock::Interface> fakeInterfaces() {
  auto mk = [](const char* name, const char* addr, bool up, bool lo) {
    sock::Interface i;
    i.name = name;
    i.addr = *sock::Address::parse(addr);
    i.up = up;
    i.loopback = lo;
    return i;
  };
  return {mk("lo", "127.0.0.1:1", true, true),      mk("docker0", "172.17.0.1:1", true, false),
          mk("eth0", "10.0.0.2:1", false, false),   mk("eth1", "10.0.1.2:1", true, false),
          mk("ib0", "[fd00::5]:1", true, false),    mk("eth1", "[fe80::1]:1", true, false)};
}

TEST(SocketIfname, SelectInterface) {
  auto all = fakeInterfaces();
  auto pick = [&](const char* spec, int fam) {
    auto r = sock::selectInterface(all, spec, fam);
    return r.ok() ? r->name + " " + r->addr.hostString() : "ERR " + r.status().message();
  };
  EXPECT_EQ(pick("", AF_UNSPEC), "eth1 10.0.1.2");  // eth0 down, docker skipped
  EXPECT_EQ(pick("", AF_INET6), "ib0 fd00::5");     // link-local skipped
  EXPECT_EQ(pick("ib", AF_UNSPEC), "ib0 fd00::5");
  EXPECT_EQ(pick("=lo", AF_UNSPEC), "lo 127.0.0.1");
  EXPECT_EQ(pick("^eth,ib,lo", AF_UNSPEC), "docker0 172.17.0.1");
  EXPECT_EQ(pick("docker", AF_INET), "docker0 172.17.0.1");
  std::vector<sock::Interface> onlyLo(all.begin(), all.begin() + 1);
  EXPECT_EQ(sock::selectInterface(onlyLo, "", AF_UNSPEC)->name, "lo");

  auto none = sock::selectInterface(all, "=eth", AF_UNSPEC);
  ASSERT_FALSE(none.ok());
  const std::string& m = none.status().message();
  EXPECT_NE(m.find("=eth"), std::string::npos) << m;
  for (const char* name : {"lo (", "docker0 (", "eth0 (", "eth1 (", "ib0 ("})
    EXPECT_NE(m.find(name), std::string::npos) << name << " missing in: " << m;
  EXPECT_FALSE(sock::selectInterface(all, "eth0", AF_UNSPEC).ok());  // eth0 is down
}

// Rails: the bootstrap's choice first, then every other up match of its family (one
// address per interface), only with a spec, at most maxCount.
TEST(SocketIfname, SelectInterfacesForRails) {
  auto all = fakeInterfaces();
  all.push_back(all[3]);
  all.back().name = "eth2";
  all.back().addr = *sock::Address::parse("10.0.2.2:1");
  all.push_back(all[3]);
  all.back().name = "eth3";
  all.back().addr = *sock::Address::parse("[fd00::9]:1");  // another family than eth1's
  auto names = [&](const char* spec, size_t max) {
    auto r = sock::selectInterfaces(all, spec, AF_UNSPEC, max);
    if (!r.ok()) return "ERR " + r.status().message();
    std::string out;
    for (const sock::Interface& i : *r) out += (out.empty() ? "" : " ") + i.name;
    return out;
  };
  EXPECT_EQ(names("", 4), "eth1");              // no spec: one rail, as the bootstrap
  EXPECT_EQ(names("eth", 4), "eth1 eth2");      // eth0 down, eth3 IPv6, eth1's link-local ignored
  EXPECT_EQ(names("eth", 1), "eth1");
  EXPECT_EQ(names("=eth2,eth1", 4), "eth1 eth2");
  EXPECT_EQ(names("^lo,docker", 4), "eth1 eth2");
  EXPECT_EQ(names("ib", 4), "ib0");
  EXPECT_EQ(names("nosuch", 4).rfind("ERR", 0), 0u);
}

TEST(SocketIfname, RealInterfacesAndFamily) {
  auto all = sock::listInterfaces();
  ASSERT_TRUE(all.ok()) << all.status().message();
  EXPECT_TRUE(sock::selectInterface(*all, "", AF_UNSPEC).ok());
  auto bad = sock::selectInterface(*all, "nosuchif", AF_UNSPEC);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("lo ("), std::string::npos) << bad.status().message();
  EXPECT_EQ(*sock::parseFamily("AF_INET6"), AF_INET6);
  EXPECT_EQ(*sock::parseFamily("af_inet"), AF_INET);
  EXPECT_EQ(*sock::parseFamily(""), AF_UNSPEC);
  EXPECT_FALSE(sock::parseFamily("AF_UNIX").ok());
}

TEST(SocketAddress, ParseFormatWire) {
  auto a = sock::Address::parse("127.0.0.1:4242");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->toString(), "127.0.0.1:4242");
  EXPECT_TRUE(a->isLoopback());
  auto b = sock::Address::parse("[::1]:80");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->toString(), "[::1]:80");
  EXPECT_EQ(sock::Address::parse("fd00::2:99")->toString(), "[fd00::2]:99");
  auto back = sock::Address::fromWire(b->toWire());
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(*back == *b);
  for (const char* bad : {"", "host", "1.2.3.4:", "1.2.3.4:0", "1.2.3.4:70000", "[::1:5", ":80"})
    EXPECT_FALSE(sock::Address::parse(bad).ok()) << bad;
}

TEST(SocketIo, ConnectRefusedTimesOutAndAbortIsPrompt) {
  uint16_t port = freeLoopbackPort();
  auto to = *sock::Address::parse("127.0.0.1:" + std::to_string(port));
  auto t0 = Clock::now();
  auto r = sock::Socket::connect(to, sock::Waiter::after(1));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ncclRemoteError);
  EXPECT_NE(r.status().message().find(to.toString()), std::string::npos) << r.status().message();
  EXPECT_LT(secondsSince(t0), 3.0);

  std::atomic<bool> flag{true};
  t0 = Clock::now();
  r = sock::Socket::connect(to, sock::Waiter::after(10, &flag));
  EXPECT_FALSE(r.ok());
  EXPECT_LT(secondsSince(t0), 1.0);
}

// A run of refusals ends a connect after w.refusedLimit; timeouts name the real limit.
TEST(SocketIo, RefusedWindowAndTimeoutsSayTheRealLimit) {
  uint16_t port = freeLoopbackPort();
  auto to = *sock::Address::parse("127.0.0.1:" + std::to_string(port));
  sock::Waiter w = sock::Waiter::after(10);
  w.refusedLimit = std::chrono::milliseconds(500);
  auto t0 = Clock::now();
  auto r = sock::Socket::connect(to, w);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nothing listens at " + to.toString()), std::string::npos)
      << r.status().message();
  EXPECT_LT(secondsSince(t0), 8.0);
  // A wait capped to 0.2 s out of 600 says 0.2 s.
  auto any = *sock::Address::parse("127.0.0.1:1");
  any.setPort(0);
  auto lis = sock::Socket::listen(any, false);
  ASSERT_TRUE(lis.ok());
  auto c = sock::Socket::connect(lis->peer(), sock::Waiter::after(5));
  ASSERT_TRUE(c.ok());
  char b;
  Status s = c->recvAll(&b, 1, sock::Waiter::after(600).capped(std::chrono::milliseconds(200)), "a byte");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("timed out after 0.2 s"), std::string::npos) << s.message();
}

// ---- Rendezvous --------------------------------------------------------------------

TEST(Bootstrap, InitVariousSizesInfoVisible) {
  for (int n : {1, 2, 3, 5, 8}) {
    auto boots = initAll(n);
    ASSERT_EQ(boots.size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) {
      ASSERT_NE(boots[r], nullptr);
      EXPECT_EQ(boots[r]->rank(), r);
      EXPECT_EQ(boots[r]->nranks(), n);
      EXPECT_EQ(boots[r]->commHash(), boots[0]->commHash());
      for (int p = 0; p < n; ++p) {
        auto want = infoFor(p);
        auto got = boots[r]->peerInfo(p);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "n=" << n << " r=" << r << " p=" << p;
      }
    }
  }
}

TEST(Bootstrap, CommHashDiffersPerId) {
  auto a = initAll(2);
  auto b = initAll(2);
  EXPECT_NE(a[0]->commHash(), b[0]->commHash());
}

TEST(Bootstrap, BadIdAndArguments) {
  ncclUniqueId id{};
  auto r = Bootstrap::init(id, 0, 1, {}, nullptr);
  EXPECT_EQ(r.status().code(), ncclInvalidArgument);
  ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
  EXPECT_EQ(Bootstrap::init(id, 2, 2, {}, nullptr).status().code(), ncclInvalidArgument);
  auto boots = initAll(1, id, 0);
  uint8_t x = 0;
  EXPECT_EQ(boots[0]->send(1, 0, &x, 1).code(), ncclInvalidArgument);
  EXPECT_EQ(boots[0]->recv(0, Bootstrap::kReservedTagBase, &x, 1).code(), ncclInvalidArgument);
}

TEST(Bootstrap, NranksMismatchAndDuplicateRankFailFast) {
  struct Case {
    std::vector<int> ranks, nranks;
    const char* needle;
  };
  for (const Case& c : {Case{{0, 1, 2}, {3, 3, 4}, "nranks mismatch"}, Case{{0, 1, 1}, {3, 3, 3}, "twice"}}) {
    ncclUniqueId id;
    ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
    auto t0 = Clock::now();
    runThreads(3, [&](int k) {
      auto res = Bootstrap::init(id, c.ranks[k], c.nranks[k], infoFor(k), nullptr);
      ASSERT_FALSE(res.ok());
      EXPECT_EQ(res.status().code(), ncclInvalidUsage);
      EXPECT_NE(res.status().message().find(c.needle), std::string::npos) << res.status().message();
    });
    EXPECT_LT(secondsSince(t0), kTimeoutSec / 2.0);
  }
}

TEST(Bootstrap, AbortFlagStopsInitWaitingForMissingRanks) {
  ncclUniqueId id;
  ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
  std::atomic<bool> flag{false};
  Watchdog dog(30);
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    flag = true;
  });
  auto t0 = Clock::now();
  auto res = Bootstrap::init(id, 0, 2, {}, &flag);  // rank 1 never comes
  setter.join();
  EXPECT_FALSE(res.ok());
  EXPECT_LT(secondsSince(t0), 2.0) << res.status().message();
}

TEST(Bootstrap, RogueConnectionsRejectedRendezvousSurvives) {
  ncclUniqueId id;
  ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
  boot::IdLayout l;
  std::memcpy(&l, id.internal, sizeof l);
  auto root = *sock::Address::fromWire(l.root);
  auto w = sock::Waiter::after(5);
  Watchdog dog(60);
  // A silent client, a client with a wrong secret and one speaking another protocol.
  auto silent = sock::Socket::connect(root, w);
  ASSERT_TRUE(silent.ok());
  for (int variant = 0; variant < 2; ++variant) {
    auto rogue = sock::Socket::connect(root, w);
    ASSERT_TRUE(rogue.ok()) << rogue.status().message();
    std::string me = rogue->localAddress()->toString();
    boot::Secret wrong = l.secret;
    wrong[3] ^= 1;
    boot::Hello h = boot::makeHello(wrong, l.commHash, 0, boot::ConnKind::kRegister);
    if (variant == 1) std::memcpy(&h, "GET / HTTP/1.1\r\n", 16);
    ASSERT_TRUE(rogue->sendAll(&h, sizeof h, w, "rogue hello").ok());
    auto t0 = Clock::now();
    while (std::string(log::lastError()).find(me) == std::string::npos && secondsSince(t0) < 5)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::string warn = log::lastError();
    EXPECT_NE(warn.find(me), std::string::npos) << warn;
    EXPECT_NE(warn.find(variant == 0 ? "wrong secret" : "bad magic"), std::string::npos) << warn;
    // The root closed us: the next read sees EOF.
    char c;
    EXPECT_FALSE(rogue->recvAll(&c, 1, w, "eof").ok());
  }
  auto boots = initAll(3, id);
  std::vector<int> v(3);
  runThreads(3, [&](int r) {
    std::vector<int> all(3);
    all[r] = r + 100;
    ASSERT_TRUE(boots[r]->allGather(all.data(), sizeof(int)).ok());
    if (r == 0) v = all;
  });
  EXPECT_EQ(v, (std::vector<int>{100, 101, 102}));
}

// ---- Messages ----------------------------------------------------------------------

TEST(Bootstrap, SendRecvTagsOutOfOrderAndSizes) {
  auto boots = initAll(3);
  runThreads(3, [&](int r) {
    Bootstrap& b = *boots[r];
    if (r == 0) {
      for (uint32_t tag : {1u, 2u, 3u, 5u}) ASSERT_TRUE(b.send(1, tag, &tag, sizeof tag).ok());
      uint32_t second = 55;
      ASSERT_TRUE(b.send(1, 5, &second, sizeof second).ok());
      ASSERT_TRUE(b.send(1, 9, nullptr, 0).ok());
      std::vector<char> big(3 << 20, 'x');
      big.back() = 'y';
      ASSERT_TRUE(b.send(2, 7, big.data(), big.size()).ok());
      uint32_t wrong = 1;
      ASSERT_TRUE(b.send(2, 8, &wrong, sizeof wrong).ok());
    } else if (r == 1) {
      uint32_t v = 0;
      for (auto [tag, want] : std::vector<std::pair<uint32_t, uint32_t>>{{3, 3}, {5, 5}, {1, 1}, {5, 55}, {2, 2}}) {
        ASSERT_TRUE(b.recv(0, tag, &v, sizeof v).ok()) << tag;
        EXPECT_EQ(v, want) << "tag " << tag;
      }
      EXPECT_TRUE(b.recv(0, 9, nullptr, 0).ok());
      uint64_t self = 77, back = 0;
      ASSERT_TRUE(b.send(1, 4, &self, sizeof self).ok());
      ASSERT_TRUE(b.recv(1, 4, &back, sizeof back).ok());
      EXPECT_EQ(back, 77u);
    } else {
      std::vector<char> big(3 << 20);
      ASSERT_TRUE(b.recv(0, 7, big.data(), big.size()).ok());
      EXPECT_EQ(big.front(), 'x');
      EXPECT_EQ(big.back(), 'y');
      uint64_t tooBig = 0;
      Status s = b.recv(0, 8, &tooBig, sizeof tooBig);
      EXPECT_EQ(s.code(), ncclInvalidUsage);
      EXPECT_NE(s.message().find("4 bytes"), std::string::npos) << s.message();
    }
  });
}

// An abort notice names the rank where the failure started, so that a peer learning of
// the abort from the notice (before any poisoned ring reaches it) names the root cause.
TEST(Bootstrap, AbortNoticeCarriesTheOrigin) {
  auto boots = initAll(4);
  Watchdog dog(30);
  const int targets[] = {2, 3};
  boots[0]->notifyAbort(targets, std::chrono::milliseconds(2000), 1);  // rank 1 failed first
  boots[1]->notifyAbort(targets, std::chrono::milliseconds(2000), 1);  // rank 1 is the origin itself
  for (int r : targets) {
    for (int from : {0, 1}) {
      int origin = -7;
      auto deadline = Clock::now() + std::chrono::seconds(10);
      while (!boots[r]->peerAborted(from, &origin) && Clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      EXPECT_TRUE(boots[r]->peerAborted(from)) << "rank " << r << " never saw rank " << from << "'s notice";
      EXPECT_EQ(origin, 1) << "rank " << r << ", notice from rank " << from;
    }
    int origin = -7;
    EXPECT_FALSE(boots[r]->peerAborted(r == 2 ? 3 : 2, &origin)) << "no notice was sent between ranks 2 and 3";
  }
}

TEST(Bootstrap, LargeCrossingSendsDoNotDeadlock) {
  auto boots = initAll(2);
  const size_t n = 16 << 20;
  runThreads(2, [&](int r) {
    std::vector<char> out(n, char('a' + r)), in(n);
    ASSERT_TRUE(boots[r]->send(1 - r, 3, out.data(), n).ok());
    ASSERT_TRUE(boots[r]->recv(1 - r, 3, in.data(), n).ok());
    EXPECT_EQ(in[n / 2], char('a' + 1 - r));
  });
}

TEST(Bootstrap, TwoThreadsOfOneRankReceiveConcurrently) {
  auto boots = initAll(3);
  Watchdog dog(60);
  std::vector<std::thread> ts;
  for (int k = 0; k < 2; ++k)
    ts.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        int v = -1;
        ASSERT_TRUE(boots[0]->recv(k + 1, 10 + k, &v, sizeof v).ok());
        EXPECT_EQ(v, i * 10 + k);
        ASSERT_TRUE(boots[0]->send(k + 1, 20 + k, &v, sizeof v).ok());
      }
    });
  for (int k = 0; k < 2; ++k)
    ts.emplace_back([&, k] {
      for (int i = 0; i < 50; ++i) {
        int v = i * 10 + k, echo = -1;
        ASSERT_TRUE(boots[k + 1]->send(0, 10 + k, &v, sizeof v).ok());
        ASSERT_TRUE(boots[k + 1]->recv(0, 20 + k, &echo, sizeof echo).ok());
        EXPECT_EQ(echo, v);
      }
    });
  for (auto& t : ts) t.join();
}

TEST(Bootstrap, AllGatherOddCountsAndBarrier) {
  for (int n : {1, 3, 5, 7}) {
    auto boots = initAll(n);
    runThreads(n, [&](int r) {
      for (size_t size : {size_t(1), size_t(13), size_t(0), size_t(4096 + 3)}) {
        std::vector<uint8_t> data(size * n, 0);
        for (size_t i = 0; i < size; ++i) data[r * size + i] = uint8_t(r * 7 + i);
        ASSERT_TRUE(boots[r]->allGather(data.data(), size).ok());
        for (int p = 0; p < n; ++p)
          for (size_t i = 0; i < size; ++i) ASSERT_EQ(data[p * size + i], uint8_t(p * 7 + i)) << n << "/" << size;
      }
    });
  }
  std::atomic<int> arrived{0};
  auto boots = initAll(5);
  runThreads(5, [&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(30 * r));
    arrived++;
    ASSERT_TRUE(boots[r]->barrier().ok());
    EXPECT_EQ(arrived.load(), 5);
  });
}

TEST(Bootstrap, AllGather64Ranks) {
  auto boots = initAll(64, 4);
  runThreads(64, [&](int r) {
    std::vector<int> v(64, -1);
    v[r] = r * r;
    ASSERT_TRUE(boots[r]->allGather(&v[0], sizeof(int)).ok());
    for (int p = 0; p < 64; ++p) ASSERT_EQ(v[p], p * p);
    ASSERT_TRUE(boots[r]->barrier().ok());
  }, 120);
}

// Splits by color and checks the children: ranks, hash, infos, allGather, a ring message.
void checkSplit(int n, int colors) {
  auto boots = initAll(n);
  runThreads(n, [&](int r) {
    int color = r % colors;
    std::vector<int> members;
    for (int p = color; p < n; p += colors) members.push_back(p);
    int childRank = r / colors;
    uint64_t hash = 0xabc0 + color;
    auto info = infoFor(1000 + r, 5);
    auto child = boots[r]->split(members, childRank, hash, info, nullptr);
    ASSERT_TRUE(child.ok()) << child.status().message();
    Bootstrap& c = **child;
    int m = static_cast<int>(members.size());
    EXPECT_EQ(c.rank(), childRank);
    EXPECT_EQ(c.nranks(), m);
    EXPECT_EQ(c.commHash(), hash);
    for (int k = 0; k < m; ++k) {
      auto want = infoFor(1000 + members[k], 5);
      ASSERT_EQ(std::memcmp(c.peerInfo(k).data(), want.data(), 5), 0);
    }
    std::vector<int> parents(m, -1);
    parents[childRank] = r;
    ASSERT_TRUE(c.allGather(parents.data(), sizeof(int)).ok());
    EXPECT_EQ(parents, members);
    int token = r, got = -1;
    ASSERT_TRUE(c.send((childRank + 1) % m, 1, &token, sizeof token).ok());
    ASSERT_TRUE(c.recv((childRank + m - 1) % m, 1, &got, sizeof got).ok());
    EXPECT_EQ(got, members[(childRank + m - 1) % m]);
    ASSERT_TRUE(c.barrier().ok());
    ASSERT_TRUE(boots[r]->barrier().ok());  // the parent still works
  });
}

TEST(Bootstrap, SplitHalvesAndOddGroups) {
  checkSplit(6, 2);
  checkSplit(7, 3);
  checkSplit(3, 3);  // singleton children
}

TEST(Bootstrap, SplitHashMismatchIsAnError) {
  auto boots = initAll(2);
  runThreads(2, [&](int r) {
    int members[] = {0, 1};
    auto child = boots[r]->split(members, r, 100 + r, {}, nullptr);
    EXPECT_EQ(child.status().code(), ncclInvalidUsage) << child.status().message();
  });
}

// ---- Faults ------------------------------------------------------------------------

TEST(Bootstrap, AbortUnblocksRecvQuickly) {
  auto boots = initAll(2);
  Watchdog dog(30);
  auto t0 = Clock::now();
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    boots[0]->abort();
  });
  int v;
  Status s = boots[0]->recv(1, 1, &v, sizeof v);
  aborter.join();
  EXPECT_FALSE(s.ok());
  EXPECT_LT(secondsSince(t0), 1.5) << s.message();
  EXPECT_NE(s.message().find("aborted"), std::string::npos) << s.message();
  EXPECT_FALSE(boots[0]->send(1, 1, &v, sizeof v).ok());
}

TEST(Bootstrap, PeerClosingIsRemoteErrorNamingTagAndRank) {
  auto boots = initAll(2);
  int v = 1;
  ASSERT_TRUE(boots[1]->send(0, 3, &v, sizeof v).ok());
  ASSERT_TRUE(boots[0]->recv(1, 3, &v, sizeof v).ok());
  boots[1].reset();
  auto t0 = Clock::now();
  Status s = boots[0]->recv(1, 7, &v, sizeof v);
  EXPECT_EQ(s.code(), ncclRemoteError);
  EXPECT_LT(secondsSince(t0), 2.0);
  EXPECT_NE(s.message().find("rank 1 ("), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("closed the bootstrap connection while we waited for tag 7"), std::string::npos)
      << s.message();
}

// Forks n rank processes that read the id from a pipe; returns their pids.
std::vector<pid_t> forkRanks(int n, const std::function<int(int, const ncclUniqueId&)>& body) {
  std::vector<pid_t> pids;
  std::vector<int> writeEnds;
  for (int r = 0; r < n; ++r) {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(40);  // the child's own watchdog
      close(fds[1]);
      ncclUniqueId id;
      if (read(fds[0], &id, sizeof id) != sizeof id) _exit(90);
      _exit(body(r, id));
    }
    close(fds[0]);
    pids.push_back(pid);
    writeEnds.push_back(fds[1]);
  }
  ncclUniqueId id;
  EXPECT_TRUE(Bootstrap::createUniqueId(&id).ok());
  for (int fd : writeEnds) {
    EXPECT_EQ(write(fd, &id, sizeof id), static_cast<ssize_t>(sizeof id));
    close(fd);
  }
  return pids;
}

// Waits for a child with a deadline; kills it on a timeout. Returns the exit code or -signal.
int waitChild(pid_t pid, int seconds) {
  auto t0 = Clock::now();
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (secondsSince(t0) > seconds) {
      ADD_FAILURE() << "child " << pid << " hung; killing it";
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -999;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

TEST(BootstrapProcess, KilledRankMakesPeersFailWithinTimeout) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  auto body = [&](int r, const ncclUniqueId& id) -> int {
    auto b = Bootstrap::init(id, r, 3, infoFor(r), nullptr);
    if (!b.ok()) return fprintf(stderr, "rank %d init: %s\n", r, b.status().message().c_str()), 10;
    int v = 0;
    if (r == 2) {
      if (!(*b)->send(0, 1, &v, sizeof v).ok()) return 11;
      if (write(ready[1], "k", 1) != 1) return 12;
      pause();  // killed by the parent
      return 13;
    }
    if (r == 0 && !(*b)->recv(2, 1, &v, sizeof v).ok()) return 14;
    auto t0 = Clock::now();
    // Rank 0 has a connection from rank 2 and sees it close; rank 1 never heard from
    // rank 2 and can only time out.
    Status s = (*b)->recv(2, 2, &v, sizeof v);
    double took = secondsSince(t0);
    fprintf(stderr, "rank %d after %.1f s: %s\n", r, took, s.message().c_str());
    if (s.code() != ncclRemoteError) return 15;
    if (r == 0 && (took > 3 || s.message().find("closed the bootstrap connection") == std::string::npos)) return 16;
    if (r == 1 && (took > kTimeoutSec + 3 || s.message().find("timed out after") == std::string::npos)) return 17;
    return 0;
  };
  auto pids = forkRanks(3, body);
  close(ready[1]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  kill(pids[2], SIGKILL);
  EXPECT_EQ(waitChild(pids[0], 30), 0);
  EXPECT_EQ(waitChild(pids[1], 30), 0);
  EXPECT_EQ(waitChild(pids[2], 30), -SIGKILL);
  close(ready[0]);
}

TEST(BootstrapProcess, RanksAsProcessesAllGather) {
  auto body = [](int r, const ncclUniqueId& id) -> int {
    auto b = Bootstrap::init(id, r, 4, infoFor(r), nullptr);
    if (!b.ok()) return 10;
    std::vector<int> v(4, -1);
    v[r] = r + 1;
    if (!(*b)->allGather(v.data(), sizeof(int)).ok()) return 11;
    if (v != std::vector<int>{1, 2, 3, 4}) return 12;
    return (*b)->barrier().ok() ? 0 : 13;
  };
  auto pids = forkRanks(4, body);
  for (pid_t p : pids) EXPECT_EQ(waitChild(p, 40), 0);
}

// ---- Strangers and exhausted descriptors --------------------------------------------

// Connects n clients to `to` that each send one byte and then hold the socket.
std::vector<sock::Socket> stalledStrangers(const sock::Address& to, int n) {
  std::vector<sock::Socket> out;
  auto w = sock::Waiter::after(5);
  for (int k = 0; k < n; ++k) {
    auto s = sock::Socket::connect(to, w);
    EXPECT_TRUE(s.ok()) << s.status().message();
    if (!s.ok()) break;
    char c = 'x';
    EXPECT_TRUE(s->sendAll(&c, 1, w, "one byte").ok());
    out.push_back(std::move(*s));
  }
  return out;
}

// Each stranger used to hold the root for its 5 s handshake limit, one after the other:
// 8 of them outlasted this binary's SNCCL_TIMEOUT of 10 s and init failed.
TEST(BootstrapStrangers, StalledStrangersDoNotDelayTheRoot) {
  ncclUniqueId id;
  ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
  boot::IdLayout l;
  std::memcpy(&l, id.internal, sizeof l);
  auto strangers = stalledStrangers(*sock::Address::fromWire(l.root), 8);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the root has seen their bytes
  auto t0 = Clock::now();
  auto boots = initAll(3, id);
  double took = secondsSince(t0);
  for (auto& b : boots) ASSERT_NE(b, nullptr);
  // Functional bound: far below one stranger's handshake limit times their number.
  EXPECT_LT(took, 5.0);
}

// The same against a rank's own listener, whose handshake limit was 2 s per stranger:
// 16 strangers held rank 0's reader for 32 s, past the 10 s its receive may wait.
TEST(BootstrapStrangers, StalledStrangersDoNotDelayARanksListener) {
  ncclUniqueId id;
  ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
  boot::IdLayout l;
  std::memcpy(&l, id.internal, sizeof l);
  Watchdog dog(60);
  // Rank 1 is played by hand, so that it learns rank 0's listener from the rank table.
  BootPtr rank0;
  std::thread t([&] {
    auto r = Bootstrap::init(id, 0, 2, infoFor(0), nullptr);
    ASSERT_TRUE(r.ok()) << r.status().message();
    rank0 = std::move(r).value();
  });
  auto any = *sock::Address::parse("127.0.0.1:1");
  any.setPort(0);
  auto myListener = sock::Socket::listen(any, false);
  ASSERT_TRUE(myListener.ok());
  auto info = infoFor(1);
  auto table = boot::registerWithRoot(l, 1, 2, myListener->peer(), info, sock::Waiter::after(10));
  t.join();
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_NE(rank0, nullptr);
  auto strangers = stalledStrangers(table->addrs[0], 16);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto w = sock::Waiter::after(10);
  auto conn = sock::Socket::connect(table->addrs[0], w);
  ASSERT_TRUE(conn.ok()) << conn.status().message();
  boot::Hello h = boot::makeHello(l.secret, table->commHash, 1, boot::ConnKind::kPeer);
  int32_t payload = 4242;
  boot::FrameHeader fh{5, 0, sizeof payload};
  ASSERT_TRUE(conn->sendAll(&h, sizeof h, w, "hello").ok());
  ASSERT_TRUE(conn->sendAll(&fh, sizeof fh, w, "header").ok());
  ASSERT_TRUE(conn->sendAll(&payload, sizeof payload, w, "payload").ok());
  auto t0 = Clock::now();
  int32_t got = 0;
  Status st = rank0->recv(1, 5, &got, sizeof got);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got, 4242);
  EXPECT_LT(secondsSince(t0), 5.0);
}

// A root out of descriptors (RLIMIT_NOFILE 64, 300 idle connections queued) used to spin
// on the readable listener: a WARN per failed accept (hundreds of thousands) and a full
// core, and no rank could register. Now it rests between attempts, drops strangers to
// make room, warns a few times, and the rendezvous completes. Runs in a fresh copy of
// this binary: the descriptor limit and the log settings are per process.
TEST(BootstrapStrangers, RootSurvivesRunningOutOfDescriptors) {
  if (const char* child = getenv("SNCCL_TEST_EMFILE_CHILD")) {
    int toParent = -1, fromParent = -1;
    ASSERT_EQ(sscanf(child, "%d,%d", &toParent, &fromParent), 2);
    rlimit lim{64, 64};
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lim), 0);
    ncclUniqueId id;
    ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
    ASSERT_EQ(write(toParent, &id, sizeof id), static_cast<ssize_t>(sizeof id));
    char go = 0;
    ASSERT_EQ(read(fromParent, &go, 1), 1);  // the strangers are queued at the root
    rusage r0{}, r1{};
    getrusage(RUSAGE_SELF, &r0);
    auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    getrusage(RUSAGE_SELF, &r1);
    double cpu = (r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) + (r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
                 1e-6 * ((r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) + (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec));
    double wall = secondsSince(t0);
    fprintf(stderr, "root process: %.2f s of CPU in %.2f s\n", cpu, wall);
    EXPECT_LT(cpu, wall / 2) << "the root spins while out of descriptors";
    auto boots = initAll(2, id);
    for (auto& b : boots) ASSERT_NE(b, nullptr);
    return;
  }
  std::string logPath = "/tmp/snccl_emfile_" + std::to_string(getpid()) + ".log";
  int up[2], down[2];
  ASSERT_EQ(pipe(up), 0);
  ASSERT_EQ(pipe(down), 0);
  std::string e1 = "SNCCL_TEST_EMFILE_CHILD=" + std::to_string(up[1]) + "," + std::to_string(down[0]);
  std::string e2 = "NCCL_DEBUG=WARN", e3 = "NCCL_DEBUG_FILE=" + logPath;
  std::string filter = "--gtest_filter=BootstrapStrangers.RootSurvivesRunningOutOfDescriptors";
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  for (std::string* e : {&e1, &e2, &e3}) env.push_back(e->data());
  env.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, filter.data(), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    execve(exe, argv, env.data());
    _exit(127);
  }
  close(up[1]);
  close(down[0]);
  ncclUniqueId id;
  ASSERT_EQ(read(up[0], &id, sizeof id), static_cast<ssize_t>(sizeof id));
  boot::IdLayout l;
  std::memcpy(&l, id.internal, sizeof l);
  auto root = *sock::Address::fromWire(l.root);
  std::vector<sock::Socket> idle;
  for (int k = 0; k < 300; ++k) {
    auto s = sock::Socket::connect(root, sock::Waiter::after(5));
    ASSERT_TRUE(s.ok()) << s.status().message();
    idle.push_back(std::move(*s));
  }
  ASSERT_EQ(write(down[1], "g", 1), 1);
  EXPECT_EQ(waitChild(pid, 60), 0);
  close(up[0]);
  close(down[1]);
  std::ifstream f(logPath);
  std::string line, sample;
  size_t warns = 0;
  while (std::getline(f, line))
    if (line.find("WARN") != std::string::npos && warns++ < 3) sample += line + "\n";
  std::remove(logPath.c_str());
  EXPECT_GT(warns, 0u) << "the root should say it ran out of descriptors";
  EXPECT_LT(warns, 60u) << sample;
}

// A root that is gone (nothing listens at the id's address) is reported as such after
// SNCCL_ROOT_REFUSED_TIMEOUT (5 s), not after SNCCL_TIMEOUT (10 s here) of retries.
TEST(BootstrapStrangers, IdWhoseRootExitedFailsSoonAndSaysSo) {
  ncclUniqueId id;
  ASSERT_TRUE(Bootstrap::createUniqueId(&id).ok());
  boot::IdLayout l;
  std::memcpy(&l, id.internal, sizeof l);
  auto gone = *sock::Address::parse("127.0.0.1:" + std::to_string(freeLoopbackPort()));
  l.root = gone.toWire();
  std::memcpy(id.internal, &l, sizeof l);
  Watchdog dog(30);
  auto t0 = Clock::now();
  auto r = Bootstrap::init(id, 0, 2, infoFor(0), nullptr);
  double took = secondsSince(t0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ncclRemoteError);
  EXPECT_NE(r.status().message().find("nothing listens at " + gone.toString()), std::string::npos)
      << r.status().message();
  EXPECT_LT(took, kTimeoutSec - 1.0) << r.status().message();
}

// ---- SNCCL_COMM_ID -----------------------------------------------------------------

void runFixedRootRound(const std::string& hostPort, bool useEnv) {
  std::vector<BootPtr> boots(3);
  runThreads(3, [&](int r) {
    ncclUniqueId id, again;
    // Each rank derives the id itself, as launchers that only set SNCCL_COMM_ID do.
    Status s = useEnv ? Bootstrap::createUniqueId(&id) : Bootstrap::createUniqueIdAt(hostPort, &id);
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_TRUE(Bootstrap::createUniqueIdAt(hostPort, &again).ok());
    EXPECT_EQ(std::memcmp(&id, &again, sizeof id), 0);
    auto res = Bootstrap::init(id, r, 3, infoFor(r), nullptr);
    ASSERT_TRUE(res.ok()) << res.status().message();
    boots[r] = std::move(res).value();
    int v[3] = {0, 0, 0};
    v[r] = r + 1;
    ASSERT_TRUE(boots[r]->allGather(v, sizeof(int)).ok());
    EXPECT_EQ(v[0] + v[1] + v[2], 6);
  });
  for (auto& b : boots) ASSERT_NE(b, nullptr);
  EXPECT_EQ(boots[1]->commHash(), boots[0]->commHash());
}

TEST(BootstrapCommId, FixedLoopbackPortTwice) {
  std::string hostPort = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  runFixedRootRound(hostPort, false);
  runFixedRootRound(hostPort, false);  // the port is reused right away
}

// Parameters are read once per process, so the environment path runs in a fresh copy of
// this binary.
TEST(BootstrapCommId, FromEnvironment) {
  if (const char* child = getenv("SNCCL_TEST_COMMID_CHILD")) {
    runFixedRootRound(child, true);
    return;
  }
  std::string hostPort = "127.0.0.1:" + std::to_string(freeLoopbackPort());
  std::string e1 = "SNCCL_COMM_ID=" + hostPort, e2 = "SNCCL_TEST_COMMID_CHILD=" + hostPort;
  std::string filter = "--gtest_filter=BootstrapCommId.FromEnvironment";
  std::vector<char*> env;
  for (char** e = environ; *e; ++e) env.push_back(*e);
  env.push_back(e1.data());
  env.push_back(e2.data());
  env.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, filter.data(), nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    execve(exe, argv, env.data());
    _exit(127);
  }
  EXPECT_EQ(waitChild(pid, 60), 0);
}

}  // namespace
}  // namespace snccl
