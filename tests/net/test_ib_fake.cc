// The IB net over the fake verbs provider (fake_verbs.h): what Soft-RoCE cannot be made to
// do on demand. Error completions of each kind become errors that name the status, the
// QP, the device and both GIDs, with the code that says whose fault it is, and reach the
// peer out of band; a completion no request asked for fails the comm; asynchronous QP,
// port and device events fail the connections they concern; the queue pairs get the
// attributes the parameters ask for; everything is released on close. Data movement
// itself is tested on a real device (tests/rdma).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/fake_verbs.h"
#include "transport/net/ib/ib_conn.h"
#include "transport/net/ib/ib_net.h"
#include "transport/net/ib/ib_wire.h"
#include "transport/net/socket/rail_order.h"

namespace {

using snccl::Status;
namespace net = snccl::net;
namespace ib = snccl::net::ib;
using snccl::test::FakeFabric;

// Parameters are read once per process: the control sockets go over loopback, and the
// QP attributes are set to values the tests check.
const bool kEnv = [] {
  setenv("SNCCL_SOCKET_IFNAME", "=lo", 1);
  setenv("NCCL_IB_TC", "106", 1);
  setenv("NCCL_IB_TIMEOUT", "14", 1);
  setenv("NCCL_IB_RETRY_CNT", "5", 1);
  setenv("NCCL_IB_SL", "3", 1);
  setenv("SNCCL_IB_RAILS", "2", 1);  // one device of two ports where the fabric has two
  return true;
}();

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// One fabric, one IB net on it, one connection (both ends in this thread).
struct Fixture {
  FakeFabric fabric;
  std::unique_ptr<net::Net> net;
  net::ListenComm* listen = nullptr;
  net::SendComm* send = nullptr;
  net::RecvComm* recv = nullptr;
  std::vector<char> src = std::vector<char>(1 << 16), dst = std::vector<char>(1 << 16);
  net::MemHandle *smh = nullptr, *rmh = nullptr;

  // `devices` fake devices of one RoCE port each: fake0 (10.0.0.1), fake1 (10.0.1.1).
  void open(int devices = 1) {
    fabric.addDefaultDevice();
    if (devices > 1) {
      snccl::test::FakePort p;
      p.gids[0] = snccl::test::FakeGid{snccl::test::gidBytes("fe80::2"), "RoCE v2"};
      p.gids[1] = snccl::test::FakeGid{snccl::test::gidBytes("::ffff:10.0.1.1"), "RoCE v2"};
      fabric.addDevice("fake1", {p});
    }
    net = ib::makeIbNet(fabric.verbs());
    ASSERT_TRUE(kEnv);
    Status s = net->init();
    ASSERT_TRUE(s.ok()) << s.message();
    ASSERT_EQ(net->devices(), 1);
    net::Handle h;
    ASSERT_TRUE(net->listen(0, &h, &listen).ok());
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (send == nullptr || recv == nullptr) {
      if (send == nullptr) {
        s = net->connect(0, &h, &send);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      if (recv == nullptr) {
        s = net->accept(listen, &recv);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      ASSERT_LT(std::chrono::steady_clock::now(), until) << "connect/accept did not finish";
    }
    ASSERT_TRUE(net->regMr(send, src.data(), src.size(), net::kPtrHost, &smh).ok());
    ASSERT_TRUE(net->regMr(recv, dst.data(), dst.size(), net::kPtrHost, &rmh).ok());
  }

  ib::Endpoint* sendEp() { return static_cast<ib::IbSendComm*>(send)->ep.get(); }
  ib::Endpoint* recvEp() { return static_cast<ib::IbRecvComm*>(recv)->ep.get(); }

  net::Request* postRecv(size_t bytes = 4096) {
    void* d = dst.data();
    int tag = 0;
    net::Request* r = nullptr;
    Status s = net->irecv(recv, 1, &d, &bytes, &tag, &rmh, &r);
    EXPECT_TRUE(s.ok()) << s.message();
    return r;
  }
  // Waits for the credit; testing `rr` meanwhile, if given, drives the receiving end (as
  // its proxy thread would: a receiver that gave a rail up writes its grants again).
  net::Request* postSend(size_t bytes = 4096, uint32_t imm = 0, net::Request* rr = nullptr) {
    net::Request* r = nullptr;
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10); r == nullptr;) {
      Status s = net->isend(send, src.data(), bytes, 0, imm, smh, &r);
      EXPECT_TRUE(s.ok()) << s.message();
      if (!s.ok() || std::chrono::steady_clock::now() > until) return nullptr;
      bool done = false;
      if (r == nullptr && rr != nullptr) {
        EXPECT_TRUE(net->test(rr, &done, nullptr, nullptr).ok());
      }
    }
    return r;
  }
  // Tests r until done or an error (returned); fails the test after `seconds`.
  Status wait(net::Request* r, bool* done, size_t* size = nullptr, uint32_t* imm = nullptr, int seconds = 10) {
    *done = false;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!*done) {
      Status s = net->test(r, done, size, imm);
      if (!s.ok()) return s;
      if (std::chrono::steady_clock::now() > until) {
        ADD_FAILURE() << "request neither completed nor failed in " << seconds << " s";
        break;
      }
    }
    return Status();
  }
  // Tests both requests until both are done or one fails (returned).
  Status waitBoth(net::Request* sr, net::Request* rr, size_t* got = nullptr, int seconds = 10) {
    bool sd = false, rd = false;
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (!sd || !rd) {
      if (!sd) SNCCL_TRY(net->test(sr, &sd, nullptr, nullptr));
      if (!rd) SNCCL_TRY(net->test(rr, &rd, got, nullptr));
      if (std::chrono::steady_clock::now() > until) {
        ADD_FAILURE() << "requests neither completed nor failed in " << seconds << " s";
        break;
      }
    }
    return Status();
  }
  // One message of `n` bytes (a pattern from `seed`) through both ends; "" when it
  // arrived whole.
  std::string roundTrip(size_t n, int seed) {
    for (size_t i = 0; i < n; ++i) src[i] = char(i * 5 + n + size_t(seed));
    std::memset(dst.data(), 0x33, dst.size());
    net::Request* rr = postRecv(dst.size());
    net::Request* sr = postSend(n, uint32_t(n), rr);
    if (rr == nullptr || sr == nullptr) return "not posted";
    size_t got = 0;
    Status s = waitBoth(sr, rr, &got);
    if (!s.ok()) return s.message();
    if (got != n) return "got " + std::to_string(got) + " of " + std::to_string(n) + " bytes";
    return std::memcmp(src.data(), dst.data(), n) == 0 ? "" : "payload differs";
  }
  void close() {
    if (smh != nullptr) (void)net->deregMr(send, smh);
    if (rmh != nullptr) (void)net->deregMr(recv, rmh);
    smh = rmh = nullptr;
    if (send != nullptr) (void)net->closeSend(send, 0);
    if (recv != nullptr) (void)net->closeRecv(recv, 0);
    if (listen != nullptr) (void)net->closeListen(listen);
    send = nullptr;
    recv = nullptr;
    listen = nullptr;
  }
  ~Fixture() {
    close();
    net.reset();
  }
};

// Closes the connection and the net: every verbs object is released, and the fake saw
// no misuse.
void expectAllReleased(Fixture* f) {
  f->close();
  f->net.reset();
  snccl::test::FakeCounts c = f->fabric.counts();
  EXPECT_EQ(c.qps, 0);
  EXPECT_EQ(c.cqs, 0);
  EXPECT_EQ(c.mrs, 0);
  EXPECT_EQ(c.pds, 0);
  EXPECT_EQ(c.contexts, 0);
  EXPECT_TRUE(f->fabric.misuse().empty()) << f->fabric.misuse().front();
}

TEST(IbFake, QueuePairsGetTheAttributesTheParametersAskFor) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  for (ibv_qp* qp : f.sendEp()->qps()) {
    auto info = f.fabric.qpInfo(qp->qp_num);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->state, IBV_QPS_RTS);
    EXPECT_EQ(info->trafficClass, 106);
    EXPECT_EQ(info->sl, 3);
    EXPECT_EQ(info->timeout, 14);
    EXPECT_EQ(info->retryCnt, 5);
    EXPECT_EQ(info->rnrRetry, 7);
    EXPECT_EQ(info->sgidIndex, 1) << "the IPv4-mapped RoCE v2 GID of the default port";
  }
}

TEST(IbFake, MessagesArriveAndEverythingIsReleasedOnClose) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  for (size_t n : {size_t(0), size_t(1), size_t(4097), size_t(65536)}) {
    for (size_t i = 0; i < n; ++i) f.src[i] = char(i * 3 + n);
    net::Request* rr = f.postRecv(f.dst.size());
    net::Request* sr = f.postSend(n, uint32_t(n) | 0x80000000u);
    ASSERT_NE(rr, nullptr);
    ASSERT_NE(sr, nullptr);
    bool done = false;
    size_t got = 0;
    uint32_t imm = 0;
    ASSERT_TRUE(f.wait(sr, &done).ok());
    Status s = f.wait(rr, &done, &got, &imm);
    ASSERT_TRUE(s.ok()) << s.message();
    EXPECT_EQ(got, n);
    EXPECT_EQ(imm, uint32_t(n) | 0x80000000u);
    EXPECT_EQ(std::memcmp(f.src.data(), f.dst.data(), n), 0);
  }
  expectAllReleased(&f);
}

// A range is registered once per device: a second registration it covers (from the
// other comm too) shares it, and it is deregistered when the last one is released.
TEST(IbFake, RegistrationsAreSharedAndReferenceCounted) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  const int base = f.fabric.counts().mrs;  // the two comms' regions and f's two buffers
  std::vector<char> buf(1 << 20);
  net::MemHandle *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_TRUE(f.net->regMr(f.send, buf.data(), buf.size(), net::kPtrHost, &a).ok());
  ASSERT_TRUE(f.net->regMr(f.recv, buf.data() + 4096, 8192, net::kPtrHost, &b).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base + 1) << "a covered range was registered again";
  ASSERT_TRUE(f.net->regMr(f.send, buf.data() + buf.size() - 10, 4096, net::kPtrHost, &c).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base + 2) << "a range past the end needs its own registration";
  ASSERT_TRUE(f.net->deregMr(f.send, a).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base + 2) << "still referenced by b";
  ASSERT_TRUE(f.net->deregMr(f.recv, b).ok());
  ASSERT_TRUE(f.net->deregMr(f.send, c).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base);
  // Memory given back (Net::forgetRange) while a registration of it is still held: the
  // next registration at that address is a new one, since the pages may be others now.
  ASSERT_TRUE(f.net->regMr(f.send, buf.data(), buf.size(), net::kPtrHost, &a).ok());
  f.net->forgetRange(buf.data() + 100, 10);
  ASSERT_TRUE(f.net->regMr(f.recv, buf.data(), buf.size(), net::kPtrHost, &b).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base + 2) << "a registration of forgotten memory was handed out again";
  EXPECT_NE(static_cast<ib::IbMemHandle*>(a)->mr[0], static_cast<ib::IbMemHandle*>(b)->mr[0]);
  ASSERT_TRUE(f.net->regMr(f.send, buf.data() + 4096, 4096, net::kPtrHost, &c).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base + 2) << "the new registration is shared as usual";
  for (auto [comm, h] : {std::pair<net::Comm*, net::MemHandle*>{f.send, a}, {f.recv, b}, {f.send, c}})
    ASSERT_TRUE(f.net->deregMr(comm, h).ok());
  EXPECT_EQ(f.fabric.counts().mrs, base) << "the forgotten registration was not released with its last handle";
}

struct ErrorCase {
  ibv_wc_status status;
  const char* text;     // rdma-core's status string
  ncclResult_t code;    // whose fault: the network/peer (remote) or this node (system)
  const char* hint;
};

// An error completion of the data write fails the send with a message that names the
// status, its number, the vendor error, the QP, the device and both GIDs; the receiver
// is told out of band at once.
TEST(IbFake, ErrorCompletionsAreNamedAndReachThePeer) {
  const ErrorCase cases[] = {
      {IBV_WC_RETRY_EXC_ERR, "transport retry counter exceeded", ncclRemoteError, "stopped acknowledging"},
      {IBV_WC_RNR_RETRY_EXC_ERR, "RNR retry counter exceeded", ncclRemoteError, "no receive posted"},
      {IBV_WC_REM_ACCESS_ERR, "remote access error", ncclRemoteError, "refused the write"},
      {IBV_WC_LOC_PROT_ERR, "local protection error", ncclSystemError, "not registered"},
  };
  for (const ErrorCase& c : cases) {
    SCOPED_TRACE(c.text);
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(f.open());
    net::Request* rr = f.postRecv();
    ibv_qp* qp = f.sendEp()->qps()[0];
    f.fabric.failNextSend(qp->qp_num, c.status, 0x81);
    net::Request* sr = f.postSend();
    ASSERT_NE(sr, nullptr);
    bool done = false;
    Status s = f.wait(sr, &done);
    ASSERT_FALSE(s.ok()) << "the send completed";
    const std::string& m = s.message();
    EXPECT_EQ(s.code(), c.code) << m;
    char qpText[32];
    std::snprintf(qpText, sizeof qpText, "QP 0x%x", qp->qp_num);
    for (std::string want : {std::string(c.text), "(" + std::to_string(int(c.status)) + ")",
                             std::string("vendor error 0x81"), std::string(qpText), std::string("fake0:1"),
                             std::string("::ffff:10.0.0.1"), std::string(c.hint)})
      EXPECT_TRUE(contains(m, want)) << "lacks '" << want << "': " << m;
    // A second look returns the same first error, not the flushes that follow it.
    EXPECT_EQ(f.net->test(sr, &done, nullptr, nullptr).message(), m);
    Status rs = f.wait(rr, &done, nullptr, nullptr, 5);
    ASSERT_FALSE(rs.ok()) << "the receiver was not told";
    EXPECT_TRUE(contains(rs.message(), "reported a failure")) << rs.message();
    EXPECT_EQ(f.net->peerAbortCode(f.recv) & 0xff, uint32_t(c.code));
  }
}

// Completions nobody asked for fail the comm loudly instead of completing something.
TEST(IbFake, ACompletionForNoRequestFailsTheComm) {
  {
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(f.open());
    net::Request* rr = f.postRecv();
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.qp_num = f.recvEp()->qps()[0]->qp_num;
    wc.wr_id = uint64_t(4) << 56;  // one of the zero-length receives
    wc.imm_data = htonl(ib::packImm(7));  // slot 7: no receive posted there
    f.fabric.injectCompletion(f.recvEp()->cq(), wc);
    bool done = false;
    Status s = f.wait(rr, &done);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(contains(s.message(), "matches no posted receive")) << s.message();
    EXPECT_EQ(s.code(), ncclInternalError);
  }
  {
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(f.open());
    net::Request* rr = f.postRecv();
    net::Request* sr = f.postSend();
    ASSERT_NE(sr, nullptr);
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.qp_num = f.sendEp()->qps()[0]->qp_num;
    wc.wr_id = (uint64_t(1) << 56) | (uint64_t(9) << 16);  // a data write of slot 9: never posted
    f.fabric.injectCompletion(f.sendEp()->cq(), wc);
    bool done = false;
    Status s = f.wait(sr, &done);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(contains(s.message(), "matches no request in flight")) << s.message();
    (void)rr;
  }
  {
    // A second completion for a message that already arrived (Soft-RoCE delivers a write
    // twice after some retransmissions): the device's fault, named as such.
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(f.open());
    net::Request* rr = f.postRecv();
    net::Request* sr = f.postSend();
    ASSERT_NE(sr, nullptr);
    ASSERT_TRUE(f.waitBoth(sr, rr).ok());
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.qp_num = f.recvEp()->qps()[0]->qp_num;
    wc.wr_id = uint64_t(4) << 56;
    wc.imm_data = htonl(ib::packImm(0));  // message 0, part 0: retired above
    f.fabric.injectCompletion(f.recvEp()->cq(), wc);
    rr = f.postRecv();
    bool done = false;
    Status s = f.wait(rr, &done);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(contains(s.message(), "part 0 of message 0 arrived a second time")) << s.message();
    EXPECT_TRUE(contains(s.message(), "delivered a write twice")) << s.message();
    EXPECT_EQ(s.code(), ncclSystemError);
  }
}

// Asynchronous events reach the connections they concern through the device's event
// thread: a fatal QP event, a port going down, a device-fatal error. Each is acknowledged.
TEST(IbFake, AsyncEventsFailTheirConnections) {
  struct Case {
    const char* what;
    const char* want;
    ncclResult_t code;
  };
  for (const Case& c : {Case{"qp", "asynchronous event", ncclRemoteError}, Case{"port", "is down", ncclSystemError},
                        Case{"device", "fatal error", ncclSystemError}}) {
    SCOPED_TRACE(c.what);
    Fixture f;
    ASSERT_NO_FATAL_FAILURE(f.open());
    net::Request* rr = f.postRecv();
    ibv_qp* qp = f.recvEp()->qps()[0];
    if (std::string(c.what) == "qp") f.fabric.injectAsyncEvent(qp->context, IBV_EVENT_QP_FATAL, qp);
    if (std::string(c.what) == "port") f.fabric.setPortState("fake0", 1, IBV_PORT_DOWN);
    if (std::string(c.what) == "device") f.fabric.injectAsyncEvent(qp->context, IBV_EVENT_DEVICE_FATAL, 1);
    bool done = false;
    Status s = f.wait(rr, &done);
    ASSERT_FALSE(s.ok()) << "the receive survived the event";
    EXPECT_TRUE(contains(s.message(), c.want)) << s.message();
    EXPECT_EQ(s.code(), c.code) << s.message();
    EXPECT_TRUE(contains(s.message(), "fake0")) << s.message();
    f.close();
    f.net.reset();  // joins the event thread: every event it took is acknowledged by then
    snccl::test::FakeCounts n = f.fabric.counts();
    EXPECT_EQ(n.asyncEventsTaken, n.asyncEventsAcked);
    EXPECT_GE(n.asyncEventsTaken, 1);
  }
}

// A peer whose queue pairs vanish (its process died without a goodbye reaching us):
// the sender's write fails with the retry error instead of hanging.
TEST(IbFake, VanishedPeerQpFailsTheNextWrite) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open());
  net::Request* rr = f.postRecv();
  (void)rr;
  for (ibv_qp* qp : f.recvEp()->qps()) f.fabric.killQp(qp->qp_num);
  net::Request* sr = f.postSend();
  ASSERT_NE(sr, nullptr);
  bool done = false;
  Status s = f.wait(sr, &done);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.message(), "transport retry counter exceeded")) << s.message();
}

// SNCCL_IB_RAILS=2 over two devices: one Net device whose connections have a queue pair
// on each, rail i to the peer's rail i; striped messages use both devices' keys (the
// fake refuses a key of another protection domain), and a failure on the second rail
// names that rail's device and GIDs.
TEST(IbFake, TwoDevicesCarryOneConnection) {
  Fixture f;
  ASSERT_NO_FATAL_FAILURE(f.open(2));
  ASSERT_EQ(f.net->devices(), 1);
  net::Properties props;
  ASSERT_TRUE(f.net->getProperties(0, &props).ok());
  EXPECT_EQ(props.name, "fake0+fake1");
  EXPECT_EQ(props.speedMbps, 2 * 100000) << "4x EDR on each rail";
  ASSERT_EQ(f.sendEp()->qps().size(), 2u);
  ASSERT_EQ(f.recvEp()->qps().size(), 2u);
  const char* devs[] = {"fake0", "fake1"};
  const char* gids[] = {"::ffff:10.0.0.1", "::ffff:10.0.1.1"};
  for (int q = 0; q < 2; ++q) {
    auto info = f.fabric.qpInfo(f.sendEp()->qps()[size_t(q)]->qp_num);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->device, devs[q]) << "queue pair " << q;
    EXPECT_EQ(info->dgid, snccl::test::gidBytes(gids[q])) << "queue pair " << q;
    EXPECT_EQ(info->state, IBV_QPS_RTS);
  }
  // 65536 bytes is SNCCL_IB_SPLIT_BYTES: two parts, one per device; smaller messages
  // alternate between them.
  for (int round = 0; round < 3; ++round)
    for (size_t n : {size_t(0), size_t(1), size_t(4097), size_t(65536)}) ASSERT_EQ(f.roundTrip(n, round), "") << n;
  expectAllReleased(&f);
}

// Any rail that fails while another lives is given up (ib_wire.h): the parts the receiver
// lacks are written again on the live rail, the messages in flight arrive whole, and the
// connection goes on over the other rail alone. Rail 0 carries the credits, offers and
// rail news until then; the receiver writes its grants and offers again on rail 1. The
// ways a rail is seen to fail: the sender's write fails (it tells the receiver), the
// receiver's grant write fails (it tells the sender), or the port goes down under both
// ends. The last rail failing ends the connection, naming it.
TEST(IbFake, ARailThatFailsIsGivenUpAndTheConnectionGoesOn) {
  enum class Way { kSenderWrite, kReceiverGrant, kPortDown };
  for (int rail : {0, 1}) {
    for (Way way : {Way::kSenderWrite, Way::kReceiverGrant, Way::kPortDown}) {
      if (way == Way::kReceiverGrant && rail != 0) continue;  // grants go on the control rail only
      const char* names[] = {"sender's write failed", "receiver's grant failed", "port down"};
      SCOPED_TRACE(std::string("rail ") + std::to_string(rail) + ", " + names[int(way)]);
      Fixture f;
      ASSERT_NO_FATAL_FAILURE(f.open(2));
      ASSERT_EQ(f.roundTrip(65536, 1), "");
      ibv_qp* sendQp = f.sendEp()->qps()[size_t(rail)];
      ibv_qp* recvQp = f.recvEp()->qps()[size_t(rail)];
      const char* dev = rail == 0 ? "fake0" : "fake1";
      if (way == Way::kPortDown) {
        f.fabric.setPortState(dev, 1, IBV_PORT_DOWN);
      } else if (way == Way::kSenderWrite) {
        f.fabric.failNextSend(sendQp->qp_num, IBV_WC_RETRY_EXC_ERR);
      } else {
        // The grant of a receive offered a place is lost; the receiver finds out before
        // the sender starts, and both the grant and the offer are written again.
        f.fabric.failNextSend(recvQp->qp_num, IBV_WC_RETRY_EXC_ERR);
        std::vector<char> other(4097);
        net::MemHandle* omh = nullptr;
        ASSERT_TRUE(f.net->regMr(f.recv, other.data(), other.size(), net::kPtrHost, &omh).ok());
        for (size_t i = 0; i < other.size(); ++i) f.src[i] = char(i * 7 + 1);
        net::Request* rr = f.postRecv(f.dst.size());
        ASSERT_TRUE(f.net->retargetRecv(rr, other.data(), other.size(), omh));
        bool done = false;
        for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10); f.recvEp()->deadRails() == 0;) {
          ASSERT_TRUE(f.net->test(rr, &done, nullptr, nullptr).ok());
          ASSERT_LT(std::chrono::steady_clock::now(), until) << "the receiver did not give the rail up";
        }
        net::Request* sr = f.postSend(other.size());
        ASSERT_NE(sr, nullptr);
        size_t got = 0;
        Status s = f.waitBoth(sr, rr, &got);
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(got, other.size());
        EXPECT_EQ(std::memcmp(other.data(), f.src.data(), other.size()), 0) << "not at the offered place";
        ASSERT_TRUE(f.net->deregMr(f.recv, omh).ok());
      }
      for (int round = 0; round < 4; ++round)
        for (size_t n : {size_t(65536), size_t(4097), size_t(1)}) ASSERT_EQ(f.roundTrip(n, round), "") << n;
      // The rail's queue pairs are stopped at both ends; everything went over the other
      // rail since.
      EXPECT_EQ(f.sendEp()->deadRails(), 1u << rail);
      EXPECT_EQ(f.recvEp()->deadRails(), 1u << rail);
      for (ibv_qp* qp : {sendQp, recvQp}) {
        auto info = f.fabric.qpInfo(qp->qp_num);
        ASSERT_TRUE(info.has_value());
        EXPECT_EQ(info->state, IBV_QPS_ERR);
      }
      // The last rail cannot be given up: its failure ends the connection, naming it.
      f.fabric.failNextSend(f.sendEp()->qps()[size_t(1 - rail)]->qp_num, IBV_WC_RETRY_EXC_ERR);
      net::Request* rr = f.postRecv(f.dst.size());
      net::Request* sr = f.postSend(65536);
      ASSERT_NE(sr, nullptr);
      Status s = f.waitBoth(sr, rr);
      ASSERT_FALSE(s.ok()) << "the transfer completed";
      EXPECT_TRUE(contains(s.message(), rail == 0 ? "fake1:1" : "fake0:1")) << s.message();
      expectAllReleased(&f);
    }
  }
}

// With completion channels, a connection with nothing to do sleeps in poll() on the
// descriptors pollFds() gives. A completion wakes it; so does a port going down, which no
// completion may announce for a long time (outstanding writes wait out their retries):
// the device's event thread wakes the sleeper, which gives the rail up at once.
TEST(IbFake, SleepingConnectionWakesForCompletionsAndPortEvents) {
  Fixture f;
  f.fabric.enableCompletionChannels();
  ASSERT_NO_FATAL_FAILURE(f.open(2));
  ASSERT_EQ(f.roundTrip(65536, 1), "");
  // Sleeps in poll() on the receiver's descriptors until they are ready; milliseconds
  // waited, or -1 when nothing woke it within 5 s.
  auto sleepOnRecv = [&]() -> long {
    std::vector<pollfd> fds;
    EXPECT_TRUE(f.net->pollFds(f.recv, &fds)) << "the receiver cannot sleep";
    if (fds.empty()) return -1;
    const auto t0 = std::chrono::steady_clock::now();
    int n = ::poll(fds.data(), fds.size(), 5000);
    if (n <= 0) return -1;
    return long(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count());
  };
  // A message: the receiver, asleep before it was sent, wakes for it. (Testing the
  // receive first takes the completion of its grant's write.)
  net::Request* rr = f.postRecv(4096);
  ASSERT_NE(rr, nullptr);
  bool done = false;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.net->test(rr, &done, nullptr, nullptr).ok());
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    net::Request* sr = f.postSend(4096);
    bool sent = false;
    EXPECT_TRUE(sr != nullptr && f.wait(sr, &sent).ok());
  });
  EXPECT_GE(sleepOnRecv(), 0) << "the message did not wake the receiver";
  sender.join();
  ASSERT_TRUE(f.wait(rr, &done).ok());
  // A port down, with a receive posted and nothing in flight (the grant's own completion
  // taken first): the event thread wakes it.
  rr = f.postRecv(4096);
  ASSERT_NE(rr, nullptr);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(f.net->test(rr, &done, nullptr, nullptr).ok());
  std::thread cut([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    f.fabric.setPortState("fake1", 1, IBV_PORT_DOWN);
  });
  const long waited = sleepOnRecv();
  cut.join();
  EXPECT_GE(waited, 0) << "the port event did not wake the receiver";
  ASSERT_TRUE(f.net->test(rr, &done, nullptr, nullptr).ok());
  EXPECT_EQ(f.recvEp()->deadRails(), 2u) << "the receiver did not give rail 1 up on waking";
  // The connection goes on over rail 0, sleeping and waking as before.
  net::Request* sr = f.postSend(4096, 0, rr);
  ASSERT_NE(sr, nullptr);
  size_t got = 0;
  Status st = f.waitBoth(sr, rr, &got);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(got, 4096u);
  for (int round = 0; round < 3; ++round) ASSERT_EQ(f.roundTrip(65536, round), "");
  expectAllReleased(&f);
}

// With several rails, the ports on the NUMA nodes this process runs on come first in a
// device (as the socket net orders its interfaces): fake0 on another node, fake1 on this
// one, makes the device "fake1+fake0".
TEST(IbFake, RailsNearTheProcessComeFirst) {
  cpu_set_t affinity;
  ASSERT_EQ(sched_getaffinity(0, sizeof affinity, &affinity), 0);
  const std::vector<int> local = snccl::net::socknet::numaNodesOf("/sys", affinity);
  if (local.empty()) GTEST_SKIP() << "this machine's sysfs has no NUMA nodes";
  const int here = local.front();
  FakeFabric fabric;
  snccl::test::FakeDevice far;
  far.name = "fake0";
  far.ports = {snccl::test::defaultRocePort()};
  far.numaNode = here + 1000;
  snccl::test::FakeDevice near = far;
  near.name = "fake1";
  near.numaNode = here;
  fabric.addDevice(far);
  fabric.addDevice(near);
  auto n = ib::makeIbNet(fabric.verbs());
  ASSERT_TRUE(n->init().ok());
  ASSERT_EQ(n->devices(), 1);
  net::Properties props;
  ASSERT_TRUE(n->getProperties(0, &props).ok());
  EXPECT_EQ(props.name, "fake1+fake0");
}

}  // namespace
