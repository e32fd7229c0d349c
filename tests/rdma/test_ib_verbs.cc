// The IB net on a real verbs device (Soft-RoCE in the QEMU guest of rxe_vm.sh): device
// and GID discovery, connections, messages of every shape, credits, and the errors a
// real device produces. Each case runs in a child process with its own environment,
// because parameters are read once per process. Skips (loudly) without an RDMA device.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "support/harness.h"
#include "transport/net/ib/ib_conn.h"
#include "transport/net/ib/ib_net.h"
#include "transport/net/ib/ib_select.h"
#include "transport/net/ib/ib_wire.h"

namespace {

using snccl::Status;
namespace net = snccl::net;
namespace ib = snccl::net::ib;

bool haveRdmaDevice(std::string* why) {
  auto v = ib::systemVerbs();
  if (!v.ok()) {
    *why = v.status().message();
    return false;
  }
  int n = 0;
  ibv_device** list = v.value()->getDeviceList(&n);
  if (list != nullptr) v.value()->freeDeviceList(list);
  if (n <= 0) *why = "libibverbs finds no RDMA device (run under tests/rdma/rxe_vm.sh)";
  return n > 0;
}

// Returns what failed from a function that reports errors as text.
#define OK_OR_RETURN(expr)                                                   \
  do {                                                                       \
    Status s_ = (expr);                                                      \
    if (!s_.ok()) return std::string(#expr) + ": " + s_.message();           \
  } while (0)

#define SKIP_UNLESS_RDMA()                                                      \
  do {                                                                          \
    std::string why_;                                                           \
    if (!haveRdmaDevice(&why_)) {                                               \
      std::fprintf(stderr, "RDMA SKIP: %s\n", why_.c_str());                    \
      GTEST_SKIP() << why_;                                                     \
    }                                                                           \
  } while (0)

// Runs fn in a child with `env` set; the child's failures come back as its exit status
// and stderr. fn returns "" on success, else what went wrong.
std::string inChild(const std::vector<std::pair<std::string, std::string>>& env,
                    const std::function<std::string()>& fn, int timeoutSec = 120) {
  int pipefd[2];
  if (pipe(pipefd) != 0) return "pipe failed";
  pid_t pid = fork();
  if (pid == 0) {
    close(pipefd[0]);
    alarm(unsigned(timeoutSec));  // a hang ends the child (SIGALRM), never the test run
    for (auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::string err = fn();
    ssize_t w = write(pipefd[1], err.data(), err.size());
    (void)w;
    _exit(err.empty() ? 0 : 1);
  }
  close(pipefd[1]);
  std::string out;
  char buf[4096];
  for (ssize_t k; (k = read(pipefd[0], buf, sizeof buf)) > 0;) out.append(buf, size_t(k));
  close(pipefd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) return "child killed by signal " + std::to_string(WTERMSIG(status)) + " (hang?) " + out;
  if (WEXITSTATUS(status) != 0 && out.empty()) return "child failed without a message";
  return out;
}

std::vector<std::pair<std::string, std::string>> baseEnv() {
  std::vector<std::pair<std::string, std::string>> env = {{"SNCCL_IB_TIMEOUT", "12"}, {"SNCCL_IB_RETRY_CNT", "3"}};
  if (const char* ifname = std::getenv("SNCCL_RXE_IFNAME")) env.emplace_back("SNCCL_SOCKET_IFNAME", ifname);
  return env;
}

// Two ends of one connection in this process, on device 0.
struct Pair {
  std::unique_ptr<net::Net> net;
  net::ListenComm* listen = nullptr;
  net::SendComm* send = nullptr;
  net::RecvComm* recv = nullptr;

  std::string open() {
    auto v = ib::systemVerbs();
    if (!v.ok()) return v.status().message();
    net = ib::makeIbNet(v.value());
    Status s = net->init();
    if (!s.ok()) return "init: " + s.message();
    if (net->devices() < 1) return "no IB device after init";
    net::Handle h;
    s = net->listen(0, &h, &listen);
    if (!s.ok()) return "listen: " + s.message();
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (send == nullptr || recv == nullptr) {
      if (send == nullptr) {
        s = net->connect(0, &h, &send);
        if (!s.ok()) return "connect: " + s.message();
      }
      if (recv == nullptr) {
        s = net->accept(listen, &recv);
        if (!s.ok()) return "accept: " + s.message();
      }
      if (std::chrono::steady_clock::now() > until) return "connect/accept did not finish in 60 s";
    }
    return "";
  }
  void close() {
    if (send != nullptr) (void)net->closeSend(send, 0);
    if (recv != nullptr) (void)net->closeRecv(recv, 0);
    if (listen != nullptr) (void)net->closeListen(listen);
    send = nullptr;
    recv = nullptr;
    listen = nullptr;
  }
};

// Drives both requests until done or an error; returns the errors as text.
std::string drive(net::Net* n, net::Request* sr, net::Request* rr, size_t* got, uint32_t* imm, int seconds = 60) {
  bool sd = sr == nullptr, rd = rr == nullptr;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!sd || !rd) {
    if (!sd) {
      Status s = n->test(sr, &sd, nullptr, nullptr);
      if (!s.ok()) return "send: " + s.message();
    }
    if (!rd) {
      Status s = n->test(rr, &rd, got, imm);
      if (!s.ok()) return "recv: " + s.message();
    }
    if (std::chrono::steady_clock::now() > until) return "requests not done in time";
  }
  return "";
}

TEST(IbVerbs, DiscoversThePortAndChoosesTheIpv4RoceV2Gid) {
  SKIP_UNLESS_RDMA();
  std::string err = inChild(baseEnv(), []() -> std::string {
    auto rep = ib::describePorts(nullptr);
    if (!rep.ok()) return rep.status().message();
    bool found = false;
    for (const ib::PortReport& p : rep.value()) {
      std::fprintf(stderr, "%s:%d %s %s gid: %s\n", p.dev.c_str(), p.port, p.state.c_str(), p.linkLayer.c_str(),
                   p.gidChoice.c_str());
      if (p.state != "ACTIVE" || p.linkLayer != "Ethernet") continue;
      int want = -1;
      for (auto& [e, readable] : p.gids)
        if (want < 0 && e.type == ib::GidType::kRoceV2 && ib::gidIsV4Mapped(e.raw)) want = e.index;
      if (want < 0) return "no RoCE v2 IPv4-mapped GID on " + p.dev;
      if (p.gidChoice.rfind("index " + std::to_string(want) + " ", 0) != 0)
        return "chose '" + p.gidChoice + "', expected index " + std::to_string(want);
      if (!p.used) return p.dev + " is active but not used";
      found = true;
    }
    return found ? "" : "no active Ethernet (RoCE) port";
  });
  EXPECT_EQ(err, "");
}

TEST(IbVerbs, ForcedGidIndexAndBadParametersAreHonouredOrRefused) {
  SKIP_UNLESS_RDMA();
  auto env = baseEnv();
  env.emplace_back("NCCL_IB_GID_INDEX", "1");
  EXPECT_EQ(inChild(env, []() -> std::string {
              auto rep = ib::describePorts(nullptr);
              if (!rep.ok()) return rep.status().message();
              for (const ib::PortReport& p : rep.value())
                if (p.used && p.gidChoice.find("from NCCL_IB_GID_INDEX") == std::string::npos)
                  return "forced index not reported: " + p.gidChoice;
              return "";
            }),
            "");
  for (auto [name, value] : {std::pair{"NCCL_IB_TIMEOUT", "32"}, std::pair{"NCCL_IB_RETRY_CNT", "8"},
                             std::pair{"NCCL_IB_HCA", "rxe0:x"}}) {
    std::vector<std::pair<std::string, std::string>> bad = {{name, value}};
    std::string err = inChild(bad, [name]() -> std::string {
      auto n = ib::makeIbNet(ib::systemVerbs().value());
      Status s = n->init();
      if (s.ok()) return "init accepted it";
      if (s.code() != ncclInvalidArgument) return "wrong code: " + s.message();
      if (s.message().find(name) == std::string::npos) return "message does not name the variable: " + s.message();
      return "";
    });
    EXPECT_EQ(err, "") << name << "=" << value;
  }
  auto excluded = baseEnv();
  excluded.emplace_back("NCCL_IB_HCA", "^rxe");
  EXPECT_EQ(inChild(excluded, []() -> std::string {
              auto n = ib::makeIbNet(ib::systemVerbs().value());
              Status s = n->init();
              if (!s.ok()) return s.message();
              return n->devices() == 0 ? "" : "^rxe left " + std::to_string(n->devices()) + " devices";
            }),
            "");
}

// Messages of every shape over an open pair, three rounds, each checked byte for byte.
std::string shapesOver(Pair& p) {
  std::string err;
  std::vector<size_t> sizes = {0, 1, 7, 4095, 65536, 65537, (1u << 20) + 3};
  std::vector<char> src((1u << 20) + 64), dst((1u << 20) + 64);
  net::MemHandle *smh = nullptr, *rmh = nullptr;
  Status s = p.net->regMr(p.send, src.data(), src.size(), net::kPtrHost, &smh);
  if (s.ok()) s = p.net->regMr(p.recv, dst.data(), dst.size(), net::kPtrHost, &rmh);
  if (!s.ok()) return "regMr: " + s.message();
  for (int round = 0; round < 3 && err.empty(); ++round) {
    for (size_t n : sizes) {
      for (size_t i = 0; i < n; ++i) src[i + 1] = char(i * 7 + n + size_t(round));
      std::memset(dst.data(), 0x5a, dst.size());
      void* d = dst.data() + 1;
      size_t cap = dst.size() - 1;
      int tag = 5;
      net::Request *rr = nullptr, *sr = nullptr;
      s = p.net->irecv(p.recv, 1, &d, &cap, &tag, &rmh, &rr);
      if (!s.ok() || rr == nullptr) return "irecv: " + s.message();
      for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30); sr == nullptr;) {
        s = p.net->isend(p.send, src.data() + 1, n, 5, uint32_t(0xabc00000 + n), smh, &sr);
        if (!s.ok()) return "isend: " + s.message();
        if (std::chrono::steady_clock::now() > until) return "no credit within 30 s";
      }
      size_t got = 0;
      uint32_t imm = 0;
      err = drive(p.net.get(), sr, rr, &got, &imm);
      if (!err.empty()) return err;
      if (got != n) return "size " + std::to_string(got) + " for " + std::to_string(n);
      if (imm != uint32_t(0xabc00000 + n)) return "imm wrong for " + std::to_string(n);
      if (std::memcmp(dst.data() + 1, src.data() + 1, n) != 0) return "payload differs at size " + std::to_string(n);
      if (dst[n + 1] != 0x5a) return "wrote past the message at size " + std::to_string(n);
    }
  }
  OK_OR_RETURN(p.net->deregMr(p.send, smh));
  OK_OR_RETURN(p.net->deregMr(p.recv, rmh));
  return err;
}

std::string sendRecvShapes() {
  Pair p;
  std::string err = p.open();
  if (err.empty()) err = shapesOver(p);
  p.close();
  return err;
}

TEST(IbVerbs, MessagesOfEveryShapeArriveWholeOnOneQp) {
  SKIP_UNLESS_RDMA();
  EXPECT_EQ(inChild(baseEnv(), sendRecvShapes), "");
}

TEST(IbVerbs, MessagesAreStripedOverThreeQps) {
  SKIP_UNLESS_RDMA();
  auto env = baseEnv();
  env.emplace_back("NCCL_IB_QPS_PER_CONNECTION", "3");
  env.emplace_back("SNCCL_IB_SPLIT_BYTES", "4096");
  EXPECT_EQ(inChild(env, sendRecvShapes), "");
}

// Net::retargetRecv and irecvWithOffer over verbs (ib_wire.h): the receiver offers a
// second place for a message, taken only at exactly the offered size. An offer made with
// the receive (it travels in front of the grant) or well before the send is taken: the
// message lands there and the receive's own buffer stays untouched. An offer that comes after the
// sender wrote the message is still kept, by a copy. A message of another size ignores
// it, and a receive whose record arrived cannot be offered a place any more.
std::string retargetCases() {
  Pair p;
  std::string err = p.open();
  if (!err.empty()) return err;
  const size_t n = (1u << 20) + 129;  // striped into parts when the connection has several QPs
  std::vector<char> src(n + 64), slot(n + 64), target(n + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = char(i * 11 + 3);
  net::MemHandle *smh = nullptr, *slotMh = nullptr, *targetMh = nullptr;
  OK_OR_RETURN(p.net->regMr(p.send, src.data(), src.size(), net::kPtrHost, &smh));
  OK_OR_RETURN(p.net->regMr(p.recv, slot.data(), slot.size(), net::kPtrHost, &slotMh));
  OK_OR_RETURN(p.net->regMr(p.recv, target.data(), target.size(), net::kPtrHost, &targetMh));
  // Posts a receive into `slot`; offerBytes > 0: with an offer of `target` (irecvWithOffer).
  auto post = [&](net::Request** rr, size_t offerBytes) -> std::string {
    std::memset(slot.data(), 0x5a, slot.size());
    std::memset(target.data(), 0x6b, target.size());
    void* d = slot.data();
    size_t cap = slot.size();
    int tag = 1;
    bool offered = false;
    Status s = offerBytes == 0 ? p.net->irecv(p.recv, 1, &d, &cap, &tag, &slotMh, rr)
                               : p.net->irecvWithOffer(p.recv, d, cap, tag, slotMh, target.data(), offerBytes, targetMh,
                                                       rr, &offered);
    if (!s.ok() || *rr == nullptr) return "irecv: " + s.message();
    return offerBytes == 0 || offered ? "" : "the offer was refused";
  };
  auto send = [&](size_t bytes, net::Request** sr) -> std::string {
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30); *sr == nullptr;) {
      Status s = p.net->isend(p.send, src.data(), bytes, 1, 7, smh, sr);
      if (!s.ok()) return "isend: " + s.message();
      if (std::chrono::steady_clock::now() > until) return "no credit within 30 s";
    }
    return "";
  };
  // Tests the receive (it cannot finish yet) for `ms`, so that what it posted lands.
  auto settle = [&](net::Request* rr, int ms) -> std::string {
    for (auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
         std::chrono::steady_clock::now() < until;) {
      bool done = false;
      Status s = p.net->test(rr, &done, nullptr, nullptr);
      if (!s.ok() || done) return "receive: " + (s.ok() ? std::string("done before its send") : s.message());
    }
    return "";
  };
  auto holds = [&](const std::vector<char>& buf, size_t bytes) {
    return std::memcmp(buf.data(), src.data(), bytes) == 0;
  };
  auto untouched = [](const std::vector<char>& buf, char fill) {
    for (char c : buf)
      if (c != fill) return false;
    return true;
  };
  std::string name;
  for (const char* c : {"offered with the receive", "offered after the grant", "offered after the send", "another size",
                        "refused after a record"}) {
    name = c;
    net::Request *rr = nullptr, *sr = nullptr;
    size_t got = 0;
    uint32_t imm = 0;
    const bool withOffer = name == "offered with the receive" || name == "another size";
    if (!(err = post(&rr, withOffer ? n : 0)).empty()) break;
    if (name == "offered with the receive") {
      if (!(err = send(n, &sr)).empty() || !(err = drive(p.net.get(), sr, rr, &got, &imm)).empty()) break;
      if (got != n || !holds(target, n) || target[n] != 0x6b) return name + ": not at the offered place";
      if (!untouched(slot, 0x5a)) return name + ": the receive's own buffer was written too";
    } else if (name == "offered after the grant") {
      if (!(err = settle(rr, 200)).empty()) break;
      if (!p.net->retargetRecv(rr, target.data(), n, targetMh)) return name + ": refused";
      if (!(err = settle(rr, 1000)).empty()) break;  // a loopback write takes microseconds: ample
      if (!(err = send(n, &sr)).empty() || !(err = drive(p.net.get(), sr, rr, &got, &imm)).empty()) break;
      if (got != n || !holds(target, n)) return name + ": not at the offered place";
      if (!untouched(slot, 0x5a)) return name + ": the sender did not take an offer made 1 s before it started";
    } else if (name == "offered after the send") {
      if (!(err = settle(rr, 50)).empty() || !(err = send(n, &sr)).empty()) break;
      if (!(err = drive(p.net.get(), sr, nullptr, nullptr, nullptr)).empty()) break;
      if (!p.net->retargetRecv(rr, target.data(), n, targetMh)) return name + ": refused before the record was seen";
      if (!(err = drive(p.net.get(), nullptr, rr, &got, &imm)).empty()) break;
      if (got != n || !holds(target, n)) return name + ": not copied to the offered place";
      if (!holds(slot, n)) return name + ": the message did not land in the receive's buffer first";
    } else if (name == "another size") {
      if (!(err = send(n - 1, &sr)).empty() || !(err = drive(p.net.get(), sr, rr, &got, &imm)).empty()) break;
      if (got != n - 1 || !holds(slot, n - 1)) return name + ": not in the receive's buffer";
      if (!untouched(target, 0x6b)) return name + ": a message of another size went to the offered place";
    } else {
      // Two receives: testing the second finds both records, but only the first can be
      // reported, so the second is seen and still in flight.
      net::Request* rr2 = nullptr;
      void* d = target.data();
      size_t cap = target.size();
      int tag = 1;
      Status s = p.net->irecv(p.recv, 1, &d, &cap, &tag, &targetMh, &rr2);
      if (!s.ok() || rr2 == nullptr) return name + ": second irecv: " + s.message();
      if (!(err = settle(rr, 50)).empty() || !(err = send(16, &sr)).empty()) break;
      net::Request* sr2 = nullptr;
      if (!(err = drive(p.net.get(), sr, nullptr, nullptr, nullptr)).empty() || !(err = send(16, &sr2)).empty() ||
          !(err = drive(p.net.get(), sr2, nullptr, nullptr, nullptr)).empty())
        break;
      bool done = false;
      for (int i = 0; i < 1000 && s.ok(); ++i) s = p.net->test(rr2, &done, nullptr, nullptr);
      if (!s.ok() || done) return name + ": the second receive " + (s.ok() ? "finished first" : s.message());
      if (p.net->retargetRecv(rr2, slot.data(), 16, slotMh)) return name + ": accepted an offer after the record";
      if (!(err = drive(p.net.get(), nullptr, rr, &got, &imm)).empty() ||
          !(err = drive(p.net.get(), nullptr, rr2, &got, &imm)).empty())
        break;
    }
  }
  if (!err.empty()) err = name + ": " + err;
  OK_OR_RETURN(p.net->deregMr(p.send, smh));
  OK_OR_RETURN(p.net->deregMr(p.recv, slotMh));
  OK_OR_RETURN(p.net->deregMr(p.recv, targetMh));
  p.close();
  return err;
}

TEST(IbVerbs, RetargetedReceivesLandAtTheOfferedPlace) {
  SKIP_UNLESS_RDMA();
  EXPECT_EQ(inChild(baseEnv(), retargetCases), "");
  auto striped = baseEnv();
  striped.emplace_back("NCCL_IB_QPS_PER_CONNECTION", "3");
  striped.emplace_back("SNCCL_IB_SPLIT_BYTES", "4096");
  EXPECT_EQ(inChild(striped, retargetCases), "") << "over 3 queue pairs";
}

// Packets a device's port has sent (rxe's hw_counters), -1 when unreadable.
long long sentPackets(const std::string& dev) {
  std::ifstream f("/sys/class/infiniband/" + dev + "/ports/1/hw_counters/sent_pkts");
  long long n = -1;
  if (!(f >> n)) return -1;
  return n;
}

// SNCCL_IB_RAILS=2 on a host with two devices (rxe_vm.sh -d 2): one Net device named
// for both, a queue pair of the connection on each, and messages of every shape striped
// over them arrive whole, each device sending packets of its own.
TEST(IbVerbs, MessagesAreStripedOverTwoRails) {
  SKIP_UNLESS_RDMA();
  auto env = baseEnv();
  env.emplace_back("SNCCL_IB_RAILS", "2");
  env.emplace_back("SNCCL_IB_SPLIT_BYTES", "4096");
  EXPECT_EQ(inChild(env, []() -> std::string {
              Pair p;
              std::string err = p.open();
              if (!err.empty()) return err;
              net::Properties props;
              OK_OR_RETURN(p.net->getProperties(0, &props));
              if (p.net->devices() != 1 || props.name.find('+') == std::string::npos) {
                p.close();
                const char* ndev = std::getenv("SNCCL_RXE_NDEV");
                if (ndev != nullptr && std::atoi(ndev) >= 2) return "two devices, but one rail: " + props.name;
                std::fprintf(stderr, "RDMA SKIP: one device (%s); run under rxe_vm.sh -d 2\n", props.name.c_str());
                return "";
              }
              const auto& qps = static_cast<ib::IbSendComm*>(p.send)->ep->qps();
              if (qps.size() != 2) return "the connection has " + std::to_string(qps.size()) + " queue pairs, not 2";
              std::string devs[2];
              for (int q = 0; q < 2; ++q) devs[q] = qps[size_t(q)]->context->device->name;
              if (props.name != devs[0] + "+" + devs[1])
                return "queue pairs on " + devs[0] + " and " + devs[1] + ", device " + props.name;
              const long long before[2] = {sentPackets(devs[0]), sentPackets(devs[1])};
              err = shapesOver(p);
              p.close();
              if (!err.empty()) return err;
              for (int q = 0; q < 2; ++q) {
                const long long after = sentPackets(devs[q]);
                std::fprintf(stderr, "%s sent %lld packets\n", devs[q].c_str(), after - before[q]);
                if (before[q] >= 0 && after <= before[q] + 100) return devs[q] + " carried (almost) nothing";
              }
              return "";
            }),
            "");
}

// One posted receive is one credit: no send starts before its receive, at most kSlots
// receives are outstanding, and messages complete in order.
TEST(IbVerbs, CreditsBoundWhatIsInFlight) {
  SKIP_UNLESS_RDMA();
  EXPECT_EQ(inChild(baseEnv(), []() -> std::string {
              Pair p;
              std::string err = p.open();
              if (!err.empty()) return err;
              std::vector<uint64_t> src(ib::kSlots + 1), dst(ib::kSlots + 1);
              net::MemHandle *smh = nullptr, *rmh = nullptr;
              OK_OR_RETURN(p.net->regMr(p.send, src.data(), src.size() * 8, net::kPtrHost, &smh));
              OK_OR_RETURN(p.net->regMr(p.recv, dst.data(), dst.size() * 8, net::kPtrHost, &rmh));
              net::Request* sr = nullptr;
              for (int i = 0; i < 1000; ++i) {
                Status s = p.net->isend(p.send, &src[0], 8, 0, 0, smh, &sr);
                if (!s.ok() || sr != nullptr) return "a send started without a receive";
              }
              std::vector<net::Request*> rr;
              for (int i = 0; i <= ib::kSlots; ++i) {
                void* d = &dst[size_t(i)];
                size_t cap = 8;
                int tag = 0;
                net::Request* r = nullptr;
                Status s = p.net->irecv(p.recv, 1, &d, &cap, &tag, &rmh, &r);
                if (!s.ok()) return s.message();
                if (i < ib::kSlots && r == nullptr) return "receive " + std::to_string(i) + " refused";
                if (i == ib::kSlots && r != nullptr) return "more receives than credits";
                if (r != nullptr) rr.push_back(r);
              }
              std::vector<net::Request*> srs;
              for (int i = 0; i < ib::kSlots; ++i) {
                src[size_t(i)] = 1000 + uint64_t(i);
                net::Request* r = nullptr;
                for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30); r == nullptr;) {
                  Status s = p.net->isend(p.send, &src[size_t(i)], 8, 0, uint32_t(i), smh, &r);
                  if (!s.ok()) return s.message();
                  if (std::chrono::steady_clock::now() > until) return "no credit";
                }
                srs.push_back(r);
              }
              for (int i = 0; i < ib::kSlots; ++i) {
                size_t got = 0;
                uint32_t imm = 0;
                err = drive(p.net.get(), srs[size_t(i)], rr[size_t(i)], &got, &imm);
                if (!err.empty()) return err;
                if (imm != uint32_t(i) || dst[size_t(i)] != 1000 + uint64_t(i)) return "message out of order or wrong";
              }
              OK_OR_RETURN(p.net->deregMr(p.send, smh));
              OK_OR_RETURN(p.net->deregMr(p.recv, rmh));
              p.close();
              return "";
            }),
            "");
}

// A write into memory the receiver no longer has registered fails on the real device
// with "remote access error": the sender's error names the status, the device and both
// GIDs; the receiver hears of it out of band at once instead of waiting.
TEST(IbVerbs, RemoteAccessErrorIsNamedOnBothEnds) {
  SKIP_UNLESS_RDMA();
  EXPECT_EQ(inChild(baseEnv(), []() -> std::string {
              Pair p;
              std::string err = p.open();
              if (!err.empty()) return err;
              std::vector<char> src(1 << 16), dst(1 << 16);
              net::MemHandle *smh = nullptr, *rmh = nullptr;
              OK_OR_RETURN(p.net->regMr(p.send, src.data(), src.size(), net::kPtrHost, &smh));
              OK_OR_RETURN(p.net->regMr(p.recv, dst.data(), dst.size(), net::kPtrHost, &rmh));
              void* d = dst.data();
              size_t cap = dst.size();
              int tag = 0;
              net::Request *rr = nullptr, *sr = nullptr;
              OK_OR_RETURN(p.net->irecv(p.recv, 1, &d, &cap, &tag, &rmh, &rr));
              OK_OR_RETURN(p.net->deregMr(p.recv, rmh));  // the granted buffer is gone before the data comes
              for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30); sr == nullptr;) {
                Status s = p.net->isend(p.send, src.data(), src.size(), 0, 0, smh, &sr);
                if (!s.ok()) return "isend: " + s.message();
                if (std::chrono::steady_clock::now() > until) return "no credit";
              }
              bool done = false;
              Status se;
              for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30); se.ok() && !done;) {
                se = p.net->test(sr, &done, nullptr, nullptr);
                if (std::chrono::steady_clock::now() > until) return "send neither completed nor failed";
              }
              if (se.ok()) return "the write into deregistered memory succeeded";
              const std::string& m = se.message();
              std::fprintf(stderr, "sender: %s\n", m.c_str());
              for (const char* want : {"remote access error", "rxe", "GID", "::ffff:"})
                if (m.find(want) == std::string::npos) return std::string("sender's error lacks '") + want + "': " + m;
              Status re;
              done = false;
              for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10); re.ok() && !done;) {
                re = p.net->test(rr, &done, nullptr, nullptr);
                if (std::chrono::steady_clock::now() > until) return "the receiver was not told";
              }
              std::fprintf(stderr, "receiver: %s\n", re.message().c_str());
              if (re.ok()) return "the receive completed";
              // The receiver's queue pair fails with the sender's (the responder's access
              // error moves it to the error state too): it reports either the peer's notice
              // or its own flushed receives, and names the path either way.
              if (re.message().find("reported a failure") == std::string::npos &&
                  re.message().find("Flushed") == std::string::npos)
                return "receiver's error: " + re.message();
              if (re.message().find("GID") == std::string::npos) return "receiver's error lacks the path";
              OK_OR_RETURN(p.net->deregMr(p.send, smh));
              p.close();
              return "";
            }),
            "");
}

// The peer's process ends with a receive in flight: the sender waiting for its credit
// fails promptly (the control socket closes), naming the path, without a timeout.
TEST(IbVerbs, PeerGoneMidOperationFailsPromptly) {
  SKIP_UNLESS_RDMA();
  EXPECT_EQ(inChild(baseEnv(), []() -> std::string {
              Pair p;
              std::string err = p.open();
              if (!err.empty()) return err;
              std::vector<char> src(4096);
              net::MemHandle* smh = nullptr;
              OK_OR_RETURN(p.net->regMr(p.send, src.data(), src.size(), net::kPtrHost, &smh));
              // Close the receiving end abruptly, as a dying process's kernel would.
              net::RecvComm* gone = p.recv;
              p.recv = nullptr;
              OK_OR_RETURN(p.net->closeRecv(gone, 2 /* ncclSystemError */));
              auto t0 = std::chrono::steady_clock::now();
              net::Request* sr = nullptr;
              Status s;
              while (s.ok() && sr == nullptr) {
                s = p.net->isend(p.send, src.data(), src.size(), 0, 0, smh, &sr);
                if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return "no error in 10 s";
              }
              if (s.ok()) return "a send started to a closed peer";
              std::fprintf(stderr, "sender: %s\n", s.message().c_str());
              if (p.net->peerAbortCode(p.send) != 2) return "the peer's abort code did not arrive";
              OK_OR_RETURN(p.net->deregMr(p.send, smh));
              p.close();
              return "";
            }),
            "");
}

}  // namespace
