// The fake verbs provider (fake_verbs.h) against the verbs contract, driven only through
// the Verbs table as the IB net drives it: enumeration and queries, the RC state machine,
// RDMA WRITE and WRITE_WITH_IMM, the error completions a real device gives (remote
// access, RNR, flush, transport retry), fault injection and asynchronous events.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "net/fake_verbs.h"
#include "transport/net/ib/ib_verbs.h"

namespace snccl::test {
namespace {

using net::ib::Verbs;

struct Endpoint {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* sendCq = nullptr;
  ibv_cq* recvCq = nullptr;
  ibv_qp* qp = nullptr;
};

struct QpCaps {
  uint32_t sendWr = 64, recvWr = 64, sge = 4, inlineData = 64;
  int cqe = 256;
  bool sigAll = false;
};

class FakeVerbs : public ::testing::Test {
 protected:
  FakeFabric fabric;
  const Verbs* v = fabric.verbs();

  ibv_context* open(const char* name) {
    int n = 0;
    ibv_device** list = v->getDeviceList(&n);
    ibv_context* ctx = nullptr;
    for (int i = 0; i < n; ++i)
      if (std::strcmp(v->getDeviceName(list[i]), name) == 0) ctx = v->openDevice(list[i]);
    v->freeDeviceList(list);
    EXPECT_NE(ctx, nullptr) << name;
    return ctx;
  }

  Endpoint endpoint(ibv_context* ctx, ibv_pd* pd, const QpCaps& caps = QpCaps{}) {
    Endpoint e;
    e.ctx = ctx;
    e.pd = pd;
    e.sendCq = v->createCq(ctx, caps.cqe, nullptr, nullptr, 0);
    e.recvCq = v->createCq(ctx, caps.cqe, nullptr, nullptr, 0);
    ibv_qp_init_attr a{};
    a.send_cq = e.sendCq;
    a.recv_cq = e.recvCq;
    a.qp_type = IBV_QPT_RC;
    a.sq_sig_all = caps.sigAll;
    a.cap.max_send_wr = caps.sendWr;
    a.cap.max_recv_wr = caps.recvWr;
    a.cap.max_send_sge = caps.sge;
    a.cap.max_recv_sge = caps.sge;
    a.cap.max_inline_data = caps.inlineData;
    e.qp = v->createQp(pd, &a);
    EXPECT_NE(e.qp, nullptr);
    return e;
  }

  int toInit(ibv_qp* qp, uint8_t port = 1, int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = port;
    a.qp_access_flags = access;
    return v->modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  }

  static ibv_qp_attr rtrAttr(uint32_t destQpn, const char* dgid, uint8_t sgidIndex = 1) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = destQpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    GidBytes g = gidBytes(dgid);
    std::memcpy(a.ah_attr.grh.dgid.raw, g.data(), 16);
    a.ah_attr.grh.sgid_index = sgidIndex;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = 0;
    a.ah_attr.sl = 0;
    a.ah_attr.port_num = 1;
    return a;
  }
  static constexpr int kRtrMask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;

  static ibv_qp_attr rtsAttr(uint8_t rnrRetry) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = rnrRetry;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    return a;
  }
  static constexpr int kRtsMask =
      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

  // a -> b and b -> a on port 1 of the default device (GID 1, ::ffff:10.0.0.1).
  void connect(const Endpoint& a, const Endpoint& b, uint8_t rnrRetry = 7,
               int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) {
    for (auto [self, peer] : {std::pair{a, b}, std::pair{b, a}}) {
      ASSERT_EQ(toInit(self.qp, 1, access), 0);
      ibv_qp_attr rtr = rtrAttr(peer.qp->qp_num, "::ffff:10.0.0.1");
      ASSERT_EQ(v->modifyQp(self.qp, &rtr, kRtrMask), 0);
    }
    for (const Endpoint& e : {a, b}) {
      ibv_qp_attr rts = rtsAttr(rnrRetry);
      ASSERT_EQ(v->modifyQp(e.qp, &rts, kRtsMask), 0);
    }
  }

  std::vector<ibv_wc> drain(ibv_cq* cq) {
    std::vector<ibv_wc> out;
    ibv_wc wc[4];
    int n;
    while ((n = v->pollCq(cq, 4, wc)) > 0) out.insert(out.end(), wc, wc + n);
    EXPECT_GE(n, 0);
    return out;
  }

  int write(const Endpoint& e, uint64_t wrId, const void* src, uint32_t len, uint32_t lkey, uint64_t dst,
            uint32_t rkey, bool signaled = true, bool withImm = false, uint32_t immHost = 0, unsigned flags = 0) {
    ibv_sge sge{reinterpret_cast<uintptr_t>(src), len, lkey};
    ibv_send_wr wr{};
    wr.wr_id = wrId;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = withImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
    wr.send_flags = (signaled ? IBV_SEND_SIGNALED : 0) | flags;
    wr.imm_data = htonl(immHost);
    wr.wr.rdma.remote_addr = dst;
    wr.wr.rdma.rkey = rkey;
    ibv_send_wr* bad = nullptr;
    int rc = v->postSend(e.qp, &wr, &bad);
    if (rc != 0) {
      EXPECT_EQ(bad, &wr);
    }
    return rc;
  }

  int recv(const Endpoint& e, uint64_t wrId) {
    ibv_recv_wr wr{};
    wr.wr_id = wrId;
    ibv_recv_wr* bad = nullptr;
    return v->postRecv(e.qp, &wr, &bad);
  }

  void destroy(const Endpoint& e) {
    EXPECT_EQ(v->destroyQp(e.qp), 0);
    EXPECT_EQ(v->destroyCq(e.sendCq), 0);
    EXPECT_EQ(v->destroyCq(e.recvCq), 0);
  }

  // Waits up to a second for async_fd to become readable, so that a missing event fails
  // the test instead of blocking getAsyncEvent forever.
  static bool eventReady(ibv_context* ctx) {
    pollfd pfd{ctx->async_fd, POLLIN, 0};
    return poll(&pfd, 1, 1000) == 1;
  }

  ibv_qp_state state(ibv_qp* qp) { return fabric.qpInfo(qp->qp_num)->state; }

  void expectAllReleased(size_t misuses = 0) {
    FakeCounts c = fabric.counts();
    EXPECT_EQ(c.contexts, 0);
    EXPECT_EQ(c.pds, 0);
    EXPECT_EQ(c.mrs, 0);
    EXPECT_EQ(c.cqs, 0);
    EXPECT_EQ(c.qps, 0);
    EXPECT_EQ(c.deviceLists, 0);
    EXPECT_EQ(c.asyncEventsTaken, c.asyncEventsAcked);
    std::vector<std::string> m = fabric.misuse();
    EXPECT_EQ(m.size(), misuses) << (m.empty() ? "" : m.front());
  }
};

// A connected loopback pair on the default device with registered buffers.
class FakeVerbsPair : public FakeVerbs {
 protected:
  static constexpr size_t kLen = 4096;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  Endpoint a, b;
  std::vector<uint8_t> src = std::vector<uint8_t>(kLen), dst = std::vector<uint8_t>(kLen);
  ibv_mr* srcMr = nullptr;
  ibv_mr* dstMr = nullptr;
  size_t expectedMisuses = 0;  // contract violations a test commits on purpose

  void SetUp() override {
    fabric.addDefaultDevice();
    ctx = open("fake0");
    pd = v->allocPd(ctx);
    a = endpoint(ctx, pd);
    b = endpoint(ctx, pd);
    for (size_t i = 0; i < kLen; ++i) src[i] = uint8_t(i * 7 + 1);
    srcMr = v->regMr(pd, src.data(), kLen, IBV_ACCESS_LOCAL_WRITE);
    dstMr = v->regMr(pd, dst.data(), kLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    ASSERT_NE(srcMr, nullptr);
    ASSERT_NE(dstMr, nullptr);
  }

  void TearDown() override {
    destroy(a);
    destroy(b);
    EXPECT_EQ(v->deregMr(srcMr), 0);
    EXPECT_EQ(v->deregMr(dstMr), 0);
    EXPECT_EQ(v->deallocPd(pd), 0);
    EXPECT_EQ(v->closeDevice(ctx), 0);
    expectAllReleased(expectedMisuses);
  }

  // Both QPs back to RESET and connected again, after an error.
  void reconnect(uint8_t rnrRetry = 7, int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) {
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(v->modifyQp(a.qp, &reset, IBV_QP_STATE), 0);
    ASSERT_EQ(v->modifyQp(b.qp, &reset, IBV_QP_STATE), 0);
    drain(a.sendCq);
    drain(a.recvCq);
    drain(b.sendCq);
    drain(b.recvCq);
    connect(a, b, rnrRetry, access);
  }

  uint64_t dstAddr(size_t off = 0) const { return reinterpret_cast<uintptr_t>(dst.data()) + off; }
  int writeAtoB(uint64_t wrId, uint32_t len, bool signaled = true, bool withImm = false, uint32_t imm = 0) {
    return write(a, wrId, src.data(), len, srcMr->lkey, dstAddr(), dstMr->rkey, signaled, withImm, imm);
  }
  bool landed(size_t len) const { return std::memcmp(src.data(), dst.data(), len) == 0; }
  bool untouched() const {
    for (uint8_t x : dst)
      if (x != 0) return false;
    return true;
  }
};

// ---- Enumeration and queries ----------------------------------------------------------------

TEST_F(FakeVerbs, EnumerationAndQueries) {
  fabric.addDefaultDevice();
  FakeDevice ib;
  ib.name = "fake_ib1";
  ib.ports = {defaultIbPort(7), defaultIbPort(8)};
  ib.ports[1].state = IBV_PORT_DOWN;
  ib.pciPath = "/sys/devices/pci0000:00/0000:00:02.0/0000:0c:00.0";
  ib.numaNode = 1;
  EXPECT_EQ(fabric.addDevice(ib), 1);

  int n = -1;
  ibv_device** list = v->getDeviceList(&n);
  ASSERT_EQ(n, 2);
  EXPECT_EQ(list[2], nullptr);
  EXPECT_STREQ(v->getDeviceName(list[0]), "fake0");
  EXPECT_STREQ(v->getDeviceName(list[1]), "fake_ib1");
  EXPECT_EQ(fabric.counts().deviceLists, 1);
  ibv_context* roce = v->openDevice(list[0]);
  ibv_context* ibc = v->openDevice(list[1]);
  v->freeDeviceList(list);
  ASSERT_NE(roce, nullptr);
  ASSERT_NE(ibc, nullptr);
  EXPECT_GE(roce->async_fd, 0);

  ibv_device_attr da{};
  ASSERT_EQ(v->queryDevice(ibc, &da), 0);
  EXPECT_EQ(da.phys_port_cnt, 2);
  EXPECT_GT(da.max_qp, 0);
  EXPECT_GT(da.max_cqe, 0);
  EXPECT_GT(da.max_qp_wr, 0);
  EXPECT_GT(da.max_sge, 0);

  ibv_port_attr pa{};
  ASSERT_EQ(v->queryPort(roce, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.active_mtu, IBV_MTU_1024);
  EXPECT_EQ(pa.gid_tbl_len, 16);
  ASSERT_EQ(v->queryPort(ibc, 2, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(pa.lid, 8);
  EXPECT_EQ(v->queryPort(roce, 2, &pa), EINVAL);
  EXPECT_EQ(v->queryPort(roce, 0, &pa), EINVAL);

  ibv_gid g{};
  ASSERT_EQ(v->queryGid(roce, 1, 1, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, gidBytes("::ffff:10.0.0.1").data(), 16), 0);
  ASSERT_EQ(v->queryGid(roce, 1, 0, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, gidBytes("fe80::1").data(), 16), 0);
  ASSERT_EQ(v->queryGid(roce, 1, 5, &g), 0) << "an unconfigured entry reads as zero";
  EXPECT_EQ(std::memcmp(g.raw, GidBytes{}.data(), 16), 0);
  EXPECT_EQ(v->queryGid(roce, 1, 16, &g), -1) << "beyond gid_tbl_len";

  EXPECT_EQ(v->readGidType("fake0", 1, 1), std::optional<std::string>("RoCE v2"));
  EXPECT_EQ(v->readGidType("fake0", 1, 5), std::nullopt) << "unconfigured";
  EXPECT_EQ(v->readGidType("fake_ib1", 1, 0), std::optional<std::string>("IB"));
  EXPECT_EQ(v->readGidType("nodev", 1, 0), std::nullopt);
  EXPECT_EQ(v->pciPath("fake_ib1"), ib.pciPath);
  EXPECT_EQ(v->numaNode("fake_ib1"), 1);
  EXPECT_EQ(v->pciPath("fake0"), "");
  EXPECT_EQ(v->numaNode("fake0"), -1);

  EXPECT_EQ(v->closeDevice(roce), 0);
  EXPECT_EQ(v->closeDevice(ibc), 0);
  expectAllReleased();
}

TEST_F(FakeVerbs, SparseGidTableAndUnreadableTypes) {
  FakePort p;
  p.gidTblLen = 8;
  for (int i = 4; i < 8; ++i) p.gids[i] = FakeGid{gidBytes(i < 6 ? "fe80::7" : "::ffff:10.7.0.1"), std::nullopt};
  p.gids[7].type = "RoCE v2";
  fabric.addDevice("late0", {p});
  ibv_context* ctx = open("late0");
  ibv_gid g{};
  ASSERT_EQ(v->queryGid(ctx, 1, 0, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, GidBytes{}.data(), 16), 0);
  ASSERT_EQ(v->queryGid(ctx, 1, 6, &g), 0);
  EXPECT_EQ(std::memcmp(g.raw, gidBytes("::ffff:10.7.0.1").data(), 16), 0);
  EXPECT_EQ(v->readGidType("late0", 1, 6), std::nullopt) << "configured, type unreadable";
  EXPECT_EQ(v->readGidType("late0", 1, 7), std::optional<std::string>("RoCE v2"));
  EXPECT_EQ(v->queryGid(ctx, 1, 8, &g), -1);
  EXPECT_EQ(v->closeDevice(ctx), 0);
}

// ---- The RC state machine ---------------------------------------------------------------------

TEST_F(FakeVerbsPair, BringUpRecordsTheAttributes) {
  EXPECT_EQ(state(a.qp), IBV_QPS_RESET);
  ASSERT_EQ(toInit(a.qp), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_INIT);
  ibv_qp_attr rtr = rtrAttr(b.qp->qp_num, "::ffff:10.0.0.1", 1);
  rtr.ah_attr.grh.traffic_class = 106;
  rtr.ah_attr.sl = 3;
  ASSERT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_RTR);
  ibv_qp_attr rts = rtsAttr(7);
  rts.timeout = 20;
  rts.retry_cnt = 5;
  ASSERT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), 0);

  std::optional<FakeQpInfo> i = fabric.qpInfo(a.qp->qp_num);
  ASSERT_TRUE(i.has_value());
  EXPECT_EQ(i->state, IBV_QPS_RTS);
  EXPECT_EQ(i->device, "fake0");
  EXPECT_EQ(i->port, 1);
  EXPECT_EQ(i->accessFlags, unsigned(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
  EXPECT_EQ(i->destQpNum, b.qp->qp_num);
  EXPECT_TRUE(i->isGlobal);
  EXPECT_EQ(i->sgidIndex, 1);
  EXPECT_EQ(i->dgid, gidBytes("::ffff:10.0.0.1"));
  EXPECT_EQ(i->trafficClass, 106);
  EXPECT_EQ(i->hopLimit, 255);
  EXPECT_EQ(i->sl, 3);
  EXPECT_EQ(i->pathMtu, IBV_MTU_1024);
  EXPECT_EQ(i->minRnrTimer, 12);
  EXPECT_EQ(i->timeout, 20);
  EXPECT_EQ(i->retryCnt, 5);
  EXPECT_EQ(i->rnrRetry, 7);
  EXPECT_EQ(i->cap.max_send_wr, 64u);
  EXPECT_EQ(fabric.qpNums(), (std::vector<uint32_t>{a.qp->qp_num, b.qp->qp_num}));
  EXPECT_NE(a.qp->qp_num, b.qp->qp_num);
}

TEST_F(FakeVerbsPair, BadTransitionsAreRefused) {
  ibv_qp_attr rtr = rtrAttr(b.qp->qp_num, "::ffff:10.0.0.1");
  EXPECT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask), EINVAL) << "RESET -> RTR";
  ibv_qp_attr init{};
  init.qp_state = IBV_QPS_INIT;
  init.port_num = 1;
  EXPECT_EQ(v->modifyQp(a.qp, &init, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT), EINVAL) << "no ACCESS_FLAGS";
  EXPECT_EQ(v->modifyQp(a.qp, &init,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_TIMEOUT),
            EINVAL)
      << "an attribute RESET -> INIT does not take";
  EXPECT_EQ(toInit(a.qp, 2), EINVAL) << "the device has one port";
  EXPECT_EQ(toInit(a.qp, 1, 1 << 4), EINVAL) << "MW_BIND is no QP access flag";
  EXPECT_EQ(state(a.qp), IBV_QPS_RESET);
  ASSERT_EQ(toInit(a.qp), 0);

  ibv_qp_attr rts = rtsAttr(7);
  EXPECT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), EINVAL) << "INIT -> RTS";
  EXPECT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask & ~IBV_QP_MIN_RNR_TIMER), EINVAL);
  ibv_qp_attr noGrh = rtr;
  noGrh.ah_attr.is_global = 0;
  EXPECT_EQ(v->modifyQp(a.qp, &noGrh, kRtrMask), EINVAL) << "RoCE needs a GRH";
  ibv_qp_attr badSgid = rtrAttr(b.qp->qp_num, "::ffff:10.0.0.1", 5);
  EXPECT_EQ(v->modifyQp(a.qp, &badSgid, kRtrMask), EINVAL) << "GID 5 is not configured";
  ibv_qp_attr bigMtu = rtr;
  bigMtu.path_mtu = ibv_mtu(6);
  EXPECT_EQ(v->modifyQp(a.qp, &bigMtu, kRtrMask), EINVAL);
  EXPECT_EQ(state(a.qp), IBV_QPS_INIT);
  ASSERT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask), 0);

  ibv_recv_wr rwr{};
  ibv_recv_wr* rbad = nullptr;
  ibv_send_wr swr{};
  swr.opcode = IBV_WR_RDMA_WRITE;
  ibv_send_wr* sbad = nullptr;
  EXPECT_EQ(v->postSend(a.qp, &swr, &sbad), EINVAL) << "sends need RTS";
  EXPECT_EQ(sbad, &swr);
  EXPECT_EQ(v->postRecv(b.qp, &rwr, &rbad), EINVAL) << "receives need a QP out of RESET";
  EXPECT_EQ(rbad, &rwr);

  for (auto [field, value] : {std::pair{0, 32}, std::pair{1, 8}, std::pair{2, 8}}) {
    ibv_qp_attr bad = rtsAttr(7);
    if (field == 0) bad.timeout = uint8_t(value);
    if (field == 1) bad.retry_cnt = uint8_t(value);
    if (field == 2) bad.rnr_retry = uint8_t(value);
    EXPECT_EQ(v->modifyQp(a.qp, &bad, kRtsMask), EINVAL) << "field " << field << " = " << value;
  }
  EXPECT_EQ(v->modifyQp(a.qp, &rts, kRtsMask & ~IBV_QP_SQ_PSN), EINVAL);
  EXPECT_EQ(state(a.qp), IBV_QPS_RTR);
  ASSERT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), 0);
  swr.opcode = IBV_WR_SEND;
  EXPECT_EQ(v->postSend(a.qp, &swr, &sbad), EINVAL) << "only RDMA writes";
  swr.opcode = IBV_WR_RDMA_READ;
  EXPECT_EQ(v->postSend(a.qp, &swr, &sbad), EINVAL);

  // Any state -> ERR, ERR -> RESET, and up again.
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(v->modifyQp(a.qp, &err, IBV_QP_STATE), 0);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
  EXPECT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), EINVAL) << "ERR -> RTS";
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(v->modifyQp(a.qp, &reset, IBV_QP_STATE), 0);
  EXPECT_EQ(toInit(a.qp), 0);
  EXPECT_EQ(v->modifyQp(b.qp, &err, IBV_QP_STATE), 0) << "RESET -> ERR";
}

// ---- Data path ---------------------------------------------------------------------------------

TEST_F(FakeVerbsPair, WriteThenWriteWithImmediate) {
  connect(a, b);
  ASSERT_EQ(writeAtoB(11, 1000), 0);
  EXPECT_TRUE(landed(1000));
  EXPECT_EQ(dst[1000], 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(s[0].wr_id, 11u);
  EXPECT_EQ(s[0].qp_num, a.qp->qp_num);
  EXPECT_TRUE(drain(b.recvCq).empty()) << "a plain write consumes no receive";

  ASSERT_EQ(recv(b, 77), 0);
  ASSERT_EQ(recv(b, 78), 0);
  EXPECT_EQ(fabric.postedRecvs(b.qp->qp_num), 2u);
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_EQ(writeAtoB(12, kLen, /*signaled=*/false, /*withImm=*/true, 0x12345678), 0);
  EXPECT_TRUE(landed(kLen));
  EXPECT_TRUE(drain(a.sendCq).empty()) << "unsignaled";
  EXPECT_EQ(fabric.postedRecvs(b.qp->qp_num), 1u);
  std::vector<ibv_wc> r = drain(b.recvCq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(ntohl(r[0].imm_data), 0x12345678u) << "carried in network byte order";
  EXPECT_EQ(r[0].byte_len, kLen);
  EXPECT_EQ(r[0].qp_num, b.qp->qp_num);
  EXPECT_EQ(r[0].src_qp, a.qp->qp_num);
  EXPECT_EQ(r[0].wr_id, 77u) << "the first posted receive";

  // Zero bytes with immediate: consumes a receive, names no memory.
  ASSERT_EQ(write(a, 13, nullptr, 0, 0, 0, 0, true, true, 5), 0);
  r = drain(b.recvCq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 0u);
  EXPECT_EQ(r[0].wr_id, 78u);
  EXPECT_EQ(ntohl(r[0].imm_data), 5u);
  EXPECT_EQ(drain(a.sendCq).size(), 1u);
}

TEST_F(FakeVerbsPair, GatherInlineAndSignalAll) {
  connect(a, b);
  // Two SGEs gathered in order into one remote range.
  ibv_sge sges[2] = {{reinterpret_cast<uintptr_t>(src.data()) + 100, 50, srcMr->lkey},
                     {reinterpret_cast<uintptr_t>(src.data()), 100, srcMr->lkey}};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.sg_list = sges;
  wr.num_sge = 2;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = dstAddr(10);
  wr.wr.rdma.rkey = dstMr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(v->postSend(a.qp, &wr, &bad), 0);
  EXPECT_EQ(std::memcmp(&dst[10], &src[100], 50), 0);
  EXPECT_EQ(std::memcmp(&dst[60], &src[0], 100), 0);

  // Inline: from memory no key covers, copied at post.
  uint8_t stack[16] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
  ASSERT_EQ(write(a, 2, stack, sizeof stack, 0xdead, dstAddr(0), dstMr->rkey, true, false, 0, IBV_SEND_INLINE), 0);
  EXPECT_EQ(std::memcmp(dst.data(), stack, sizeof stack), 0);
  EXPECT_EQ(write(a, 3, src.data(), 65, 0, dstAddr(0), dstMr->rkey, true, false, 0, IBV_SEND_INLINE), EINVAL)
      << "beyond max_inline_data";
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 1u);
  EXPECT_EQ(s[1].wr_id, 2u);
  EXPECT_EQ(s[1].status, IBV_WC_SUCCESS);
}

TEST_F(FakeVerbs, SqSigAllSignalsEveryWrite) {
  fabric.addDefaultDevice();
  ibv_context* ctx = open("fake0");
  ibv_pd* pd = v->allocPd(ctx);
  QpCaps caps;
  caps.sigAll = true;
  Endpoint a = endpoint(ctx, pd, caps), b = endpoint(ctx, pd);
  connect(a, b);
  ASSERT_EQ(write(a, 5, nullptr, 0, 0, 0, 0, /*signaled=*/false), 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 5u);
  destroy(a);
  destroy(b);
  EXPECT_EQ(v->deallocPd(pd), 0);
  EXPECT_EQ(v->closeDevice(ctx), 0);
  expectAllReleased();
}

TEST_F(FakeVerbsPair, BadRemoteKeyIsARemoteAccessErrorAndWritesNothing) {
  connect(a, b);
  ASSERT_EQ(recv(b, 1), 0);
  ASSERT_EQ(recv(a, 2), 0);
  ASSERT_EQ(write(a, 21, src.data(), 64, srcMr->lkey, dstAddr(), dstMr->rkey + 1, /*signaled=*/false), 0);
  EXPECT_TRUE(untouched());
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_ACCESS_ERR) << "even unsignaled";
  EXPECT_EQ(s[0].wr_id, 21u);
  EXPECT_EQ(s[0].qp_num, a.qp->qp_num);
  EXPECT_STREQ(v->wcStatusStr(s[0].status), "remote access error");
  EXPECT_EQ(state(a.qp), IBV_QPS_ERR);
  EXPECT_EQ(a.qp->state, IBV_QPS_ERR);
  std::vector<ibv_wc> ar = drain(a.recvCq);
  ASSERT_EQ(ar.size(), 1u) << "a's receive, flushed as a entered ERR";
  EXPECT_EQ(ar[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(ar[0].wr_id, 2u);
  EXPECT_EQ(ar[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(state(b.qp), IBV_QPS_ERR) << "the responder drops the connection too";
  std::vector<ibv_wc> br = drain(b.recvCq);
  ASSERT_EQ(br.size(), 1u);
  EXPECT_EQ(br[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(br[0].wr_id, 1u);
  EXPECT_EQ(br[0].qp_num, b.qp->qp_num);

  // Later work requests flush, signaled or not.
  ASSERT_EQ(writeAtoB(22, 64, /*signaled=*/false), 0);
  ASSERT_EQ(recv(a, 3), 0);
  s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 22u);
  EXPECT_EQ(s[0].status, IBV_WC_WR_FLUSH_ERR);
  ar = drain(a.recvCq);
  ASSERT_EQ(ar.size(), 1u);
  EXPECT_EQ(ar[0].wr_id, 3u);
  EXPECT_EQ(ar[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(untouched());
}

TEST_F(FakeVerbsPair, RemoteKeyRangeAndAccessAreChecked) {
  struct Case {
    const char* what;
    uint64_t addr;
    uint32_t rkey;
    int responderAccess;
  };
  const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  const Case cases[] = {
      {"past the end of the region", dstAddr(kLen - 32), dstMr->rkey, rw},
      {"before the region", dstAddr() - 8, dstMr->rkey, rw},
      {"the local key is not the remote key", dstAddr(), dstMr->lkey, rw},
      {"a region without REMOTE_WRITE", reinterpret_cast<uintptr_t>(src.data()), srcMr->rkey, rw},
      {"a responder QP without REMOTE_WRITE", dstAddr(), dstMr->rkey, IBV_ACCESS_LOCAL_WRITE},
  };
  for (const Case& c : cases) {
    reconnect(7, c.responderAccess);
    ASSERT_EQ(write(a, 1, src.data(), 64, srcMr->lkey, c.addr, c.rkey), 0) << c.what;
    std::vector<ibv_wc> s = drain(a.sendCq);
    ASSERT_EQ(s.size(), 1u) << c.what;
    EXPECT_EQ(s[0].status, IBV_WC_REM_ACCESS_ERR) << c.what;
    EXPECT_TRUE(untouched()) << c.what;
  }
  reconnect();
  ASSERT_EQ(write(a, 2, src.data(), 32, srcMr->lkey, dstAddr(kLen - 32), dstMr->rkey), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_SUCCESS) << "the last bytes of the region";
}

TEST_F(FakeVerbsPair, LocalKeyMustCoverTheSource) {
  connect(a, b);
  ASSERT_EQ(write(a, 1, src.data() + kLen - 8, 16, srcMr->lkey, dstAddr(), dstMr->rkey), 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(state(a.qp), IBV_QPS_ERR);
  EXPECT_EQ(state(b.qp), IBV_QPS_RTS) << "nothing reached the peer";
  EXPECT_TRUE(untouched());
}

TEST_F(FakeVerbsPair, NoReceiveAndNoRnrRetriesIsAnRnrError) {
  connect(a, b, /*rnrRetry=*/0);
  ASSERT_EQ(writeAtoB(31, 128, /*signaled=*/false, /*withImm=*/true, 1), 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(s[0].wr_id, 31u);
  EXPECT_EQ(state(a.qp), IBV_QPS_ERR);
  EXPECT_EQ(state(b.qp), IBV_QPS_RTS);
  EXPECT_TRUE(untouched());
  EXPECT_STREQ(v->wcStatusStr(s[0].status), "RNR retry counter exceeded");
}

TEST_F(FakeVerbsPair, InfiniteRnrRetryHoldsUntilAReceiveIsPosted) {
  connect(a, b, /*rnrRetry=*/7);
  ASSERT_EQ(writeAtoB(41, 256, true, true, 0xabc), 0);
  // A plain write behind it waits too: RC executes in order.
  ASSERT_EQ(write(a, 42, src.data(), 8, srcMr->lkey, dstAddr(1024), dstMr->rkey), 0);
  EXPECT_TRUE(untouched());
  EXPECT_TRUE(drain(a.sendCq).empty());
  EXPECT_EQ(fabric.qpInfo(a.qp->qp_num)->heldSends, 2u);

  ASSERT_EQ(recv(b, 99), 0);
  EXPECT_TRUE(landed(256));
  EXPECT_EQ(std::memcmp(&dst[1024], src.data(), 8), 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 41u);
  EXPECT_EQ(s[1].wr_id, 42u);
  std::vector<ibv_wc> r = drain(b.recvCq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 99u);
  EXPECT_EQ(ntohl(r[0].imm_data), 0xabcu);
  EXPECT_EQ(fabric.qpInfo(a.qp->qp_num)->heldSends, 0u);
}

TEST_F(FakeVerbsPair, FailNextSend) {
  connect(a, b);
  ASSERT_EQ(recv(a, 7), 0);
  fabric.failNextSend(a.qp->qp_num, IBV_WC_RETRY_EXC_ERR, 0x81);
  ASSERT_EQ(writeAtoB(51, 64, /*signaled=*/false), 0);
  ASSERT_EQ(writeAtoB(52, 64, /*signaled=*/true), 0);
  EXPECT_TRUE(untouched());
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 51u) << "unsignaled, and completed: it failed";
  EXPECT_EQ(s[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(s[0].vendor_err, 0x81u);
  EXPECT_EQ(s[1].wr_id, 52u);
  EXPECT_EQ(s[1].status, IBV_WC_WR_FLUSH_ERR);
  std::vector<ibv_wc> r = drain(a.recvCq);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 7u) << "a's receive, flushed as the QP entered ERR";
  EXPECT_EQ(r[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(state(a.qp), IBV_QPS_ERR);
  EXPECT_EQ(state(b.qp), IBV_QPS_RTS);
  EXPECT_STREQ(v->wcStatusStr(IBV_WC_WR_FLUSH_ERR), "Work Request Flushed Error");
}

TEST_F(FakeVerbsPair, InjectedCompletionComesOutInOrder) {
  connect(a, b);
  ASSERT_EQ(writeAtoB(61, 8), 0);
  ibv_wc stray{};
  stray.wr_id = 0xfeedface;
  stray.status = IBV_WC_SUCCESS;
  stray.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
  stray.qp_num = 0x123456;
  fabric.injectCompletion(a.sendCq, stray);
  EXPECT_EQ(fabric.cqDepth(a.sendCq), 2u);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].wr_id, 61u);
  EXPECT_EQ(s[1].wr_id, 0xfeedfaceu);
  EXPECT_EQ(s[1].qp_num, 0x123456u);
}

TEST_F(FakeVerbsPair, AsyncEvents) {
  connect(a, b);
  pollfd pfd{ctx->async_fd, POLLIN, 0};
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "nothing queued";
  fabric.injectAsyncEvent(ctx, IBV_EVENT_QP_FATAL, a.qp);
  fabric.injectAsyncEvent(ctx, IBV_EVENT_PORT_ERR, 1);
  EXPECT_EQ(state(a.qp), IBV_QPS_ERR) << "a fatal QP error puts the QP in ERR";
  EXPECT_EQ(fabric.counts().asyncEventsQueued, 2);
  ASSERT_EQ(poll(&pfd, 1, 0), 1);
  EXPECT_TRUE(pfd.revents & POLLIN);

  ibv_async_event ev{};
  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, a.qp);
  EXPECT_STREQ(v->eventTypeStr(ev.event_type), "local work queue catastrophic error");
  EXPECT_EQ(v->destroyQp(a.qp), EBUSY) << "libibverbs would wait for the ack";
  ASSERT_EQ(fabric.misuse().size(), 1u);
  v->ackAsyncEvent(&ev);

  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(ev.element.port_num, 1);
  v->ackAsyncEvent(&ev);
  EXPECT_EQ(poll(&pfd, 1, 0), 0) << "drained";

  // Non-blocking async_fd: EAGAIN when nothing is queued, as libibverbs.
  ASSERT_EQ(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK), 0);
  errno = 0;
  EXPECT_EQ(v->getAsyncEvent(ctx, &ev), -1);
  EXPECT_EQ(errno, EAGAIN);

  FakeCounts c = fabric.counts();
  EXPECT_EQ(c.asyncEventsTaken, 2);
  EXPECT_EQ(c.asyncEventsAcked, 2);
  EXPECT_EQ(c.asyncEventsQueued, 0);
  expectedMisuses = 1;  // the destroyQp refused above
}

TEST_F(FakeVerbsPair, EventsOfADestroyedObjectVanish) {
  Endpoint c = endpoint(ctx, pd);
  fabric.injectAsyncEvent(ctx, IBV_EVENT_COMM_EST, c.qp);
  fabric.injectAsyncEvent(ctx, IBV_EVENT_CQ_ERR, c.recvCq);
  EXPECT_EQ(fabric.counts().asyncEventsQueued, 2);
  destroy(c);
  EXPECT_EQ(fabric.counts().asyncEventsQueued, 0);
  fabric.injectAsyncEvent(ctx, IBV_EVENT_LID_CHANGE, 1);
  // async_fd stayed readable for the dead events; getAsyncEvent skips them.
  ASSERT_TRUE(eventReady(ctx));
  ibv_async_event ev{};
  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_LID_CHANGE);
  v->ackAsyncEvent(&ev);
  EXPECT_EQ(fabric.counts().asyncEventsTaken, 1);
}

TEST_F(FakeVerbsPair, BlockingGetAsyncEventWaitsForAnEvent) {
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fabric.injectAsyncEvent(ctx, IBV_EVENT_CQ_ERR, b.recvCq);
  });
  ibv_async_event ev{};
  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  t.join();
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, b.recvCq);
  v->ackAsyncEvent(&ev);
}

TEST_F(FakeVerbsPair, PortDownRaisesAnEventAndWritesFail) {
  connect(a, b);
  fabric.setPortState("fake0", 1, IBV_PORT_DOWN);
  ibv_port_attr pa{};
  ASSERT_EQ(v->queryPort(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_DOWN);
  ASSERT_EQ(writeAtoB(1, 8), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_RETRY_EXC_ERR);
  ibv_async_event ev{};
  ASSERT_TRUE(eventReady(ctx));
  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(ev.element.port_num, 1);
  v->ackAsyncEvent(&ev);
  fabric.setPortState("fake0", 1, IBV_PORT_ACTIVE);
  ASSERT_TRUE(eventReady(ctx));
  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
  v->ackAsyncEvent(&ev);
}

TEST_F(FakeVerbsPair, KilledOrDestroyedPeerIsATransportRetryError) {
  connect(a, b);
  fabric.killQp(b.qp->qp_num);
  ASSERT_EQ(writeAtoB(1, 8), 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_STREQ(v->wcStatusStr(s[0].status), "transport retry counter exceeded");
  EXPECT_TRUE(untouched());
  EXPECT_TRUE(fabric.qpInfo(b.qp->qp_num)->killed);
}

TEST_F(FakeVerbsPair, HeldWritesFailWhenThePeerGoes) {
  connect(a, b, 7);
  ASSERT_EQ(writeAtoB(1, 8, true, true), 0);
  ASSERT_EQ(writeAtoB(2, 8, true, false), 0);
  EXPECT_TRUE(drain(a.sendCq).empty());
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(v->modifyQp(b.qp, &err, IBV_QP_STATE), 0);
  std::vector<ibv_wc> s = drain(a.sendCq);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(s[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_TRUE(untouched());
}

TEST_F(FakeVerbsPair, WrongRouteNeverArrives) {
  // a's route names a GID that b's port does not have.
  for (auto [self, peer, gid] : {std::tuple{a, b, "::ffff:10.0.0.2"}, std::tuple{b, a, "::ffff:10.0.0.1"}}) {
    ASSERT_EQ(toInit(self.qp), 0);
    ibv_qp_attr rtr = rtrAttr(peer.qp->qp_num, gid);
    ASSERT_EQ(v->modifyQp(self.qp, &rtr, kRtrMask), 0);
    ibv_qp_attr rts = rtsAttr(7);
    ASSERT_EQ(v->modifyQp(self.qp, &rts, kRtsMask), 0);
  }
  ASSERT_EQ(writeAtoB(1, 8), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(untouched());
}

TEST_F(FakeVerbsPair, PeerMustBeReadyAndConnectedBack) {
  // b is only in INIT: nothing is received before RTR.
  ASSERT_EQ(toInit(b.qp), 0);
  ASSERT_EQ(toInit(a.qp), 0);
  ibv_qp_attr rtr = rtrAttr(b.qp->qp_num, "::ffff:10.0.0.1");
  ASSERT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask), 0);
  ibv_qp_attr rts = rtsAttr(7);
  ASSERT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), 0);
  ASSERT_EQ(writeAtoB(1, 8), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_RETRY_EXC_ERR);

  // b is connected to another QP, not to a.
  Endpoint c = endpoint(ctx, pd);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(v->modifyQp(a.qp, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(toInit(a.qp), 0);
  ASSERT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask), 0);
  ASSERT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), 0);
  ibv_qp_attr toC = rtrAttr(c.qp->qp_num, "::ffff:10.0.0.1");
  ASSERT_EQ(v->modifyQp(b.qp, &toC, kRtrMask), 0);
  ASSERT_EQ(writeAtoB(2, 8), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_RETRY_EXC_ERR);
  destroy(c);

  // b connected to a, then in ERR.
  reconnect();
  ibv_qp_attr err{};
  err.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(v->modifyQp(b.qp, &err, IBV_QP_STATE), 0);
  ASSERT_EQ(writeAtoB(3, 8), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_TRUE(untouched());
}

TEST_F(FakeVerbs, CqOverflowDropsTheCompletionAndRaisesCqError) {
  fabric.addDefaultDevice();
  ibv_context* ctx = open("fake0");
  ibv_pd* pd = v->allocPd(ctx);
  QpCaps small;
  small.cqe = 2;
  Endpoint a = endpoint(ctx, pd, small), b = endpoint(ctx, pd);
  connect(a, b);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(write(a, i, nullptr, 0, 0, 0, 0), 0);
  EXPECT_EQ(drain(a.sendCq).size(), 2u);
  ibv_async_event ev{};
  ASSERT_TRUE(eventReady(ctx));
  ASSERT_EQ(v->getAsyncEvent(ctx, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, a.sendCq);
  EXPECT_STREQ(v->eventTypeStr(ev.event_type), "CQ error");
  v->ackAsyncEvent(&ev);
  destroy(a);
  destroy(b);
  EXPECT_EQ(v->deallocPd(pd), 0);
  EXPECT_EQ(v->closeDevice(ctx), 0);
  expectAllReleased();
}

TEST_F(FakeVerbs, SendQueueSlotsReturnWhenACompletionIsPolled) {
  fabric.addDefaultDevice();
  ibv_context* ctx = open("fake0");
  ibv_pd* pd = v->allocPd(ctx);
  QpCaps caps;
  caps.sendWr = 4;
  Endpoint a = endpoint(ctx, pd, caps), b = endpoint(ctx, pd);
  connect(a, b);
  for (uint64_t i = 0; i < 3; ++i) ASSERT_EQ(write(a, i, nullptr, 0, 0, 0, 0, /*signaled=*/false), 0);
  ASSERT_EQ(write(a, 3, nullptr, 0, 0, 0, 0, /*signaled=*/true), 0);
  EXPECT_EQ(fabric.qpInfo(a.qp->qp_num)->sqOutstanding, 4u);
  EXPECT_EQ(write(a, 4, nullptr, 0, 0, 0, 0), ENOMEM) << "the queue is full until the completion is polled";
  EXPECT_EQ(drain(a.sendCq).size(), 1u);
  EXPECT_EQ(fabric.qpInfo(a.qp->qp_num)->sqOutstanding, 0u) << "one completion retires the unsignaled ones before it";
  EXPECT_EQ(write(a, 4, nullptr, 0, 0, 0, 0), 0);
  destroy(a);
  destroy(b);
  EXPECT_EQ(v->deallocPd(pd), 0);
  EXPECT_EQ(v->closeDevice(ctx), 0);
  expectAllReleased();
}

TEST_F(FakeVerbs, ResourcesInUseAreNotReleased) {
  fabric.addDefaultDevice();
  ibv_context* ctx = open("fake0");
  ibv_pd* pd = v->allocPd(ctx);
  std::vector<uint8_t> buf(64);
  EXPECT_EQ(v->regMr(pd, buf.data(), 64, IBV_ACCESS_REMOTE_WRITE), nullptr) << "REMOTE_WRITE needs LOCAL_WRITE";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(v->regMr(pd, buf.data(), 0, IBV_ACCESS_LOCAL_WRITE), nullptr);
  ibv_mr* mr = v->regMr(pd, buf.data(), 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(mr, nullptr);
  ibv_mr* mr2 = v->regMrIova2(pd, buf.data(), 64, 0x1000, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr2, nullptr);
  EXPECT_NE(mr->lkey, mr2->lkey);
  EXPECT_NE(mr->rkey, mr2->rkey);
  Endpoint e = endpoint(ctx, pd);
  EXPECT_EQ(fabric.counts().mrs, 2);
  EXPECT_EQ(fabric.counts().qps, 1);
  EXPECT_EQ(fabric.counts().cqs, 2);
  EXPECT_EQ(v->deallocPd(pd), EBUSY);
  EXPECT_EQ(v->destroyCq(e.sendCq), EBUSY);
  EXPECT_EQ(v->closeDevice(ctx), EBUSY);
  EXPECT_EQ(fabric.misuse().size(), 3u);
  destroy(e);
  EXPECT_EQ(v->destroyQp(e.qp), EINVAL) << "twice";
  EXPECT_EQ(v->deregMr(mr), 0);
  EXPECT_EQ(v->deregMr(mr2), 0);
  EXPECT_EQ(v->deallocPd(pd), 0);
  EXPECT_EQ(v->closeDevice(ctx), 0);
  FakeCounts c = fabric.counts();
  EXPECT_EQ(c.contexts + c.pds + c.mrs + c.cqs + c.qps + c.deviceLists, 0);
  EXPECT_EQ(fabric.misuse().size(), 4u);
}

TEST_F(FakeVerbs, CreateQpLimits) {
  fabric.addDefaultDevice();
  ibv_context* ctx = open("fake0");
  ibv_pd* pd = v->allocPd(ctx);
  ibv_cq* cq = v->createCq(ctx, 8, nullptr, nullptr, 0);
  ibv_qp_init_attr a{};
  a.send_cq = cq;
  a.recv_cq = cq;
  a.qp_type = IBV_QPT_UD;
  a.cap.max_send_wr = 1;
  EXPECT_EQ(v->createQp(pd, &a), nullptr) << "RC only";
  a.qp_type = IBV_QPT_RC;
  a.cap.max_inline_data = 4096;
  EXPECT_EQ(v->createQp(pd, &a), nullptr) << "beyond the device's inline limit";
  a.cap.max_inline_data = 0;
  a.cap.max_send_sge = 1000;
  EXPECT_EQ(v->createQp(pd, &a), nullptr);
  EXPECT_EQ(v->createCq(ctx, 0, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(fabric.counts().qps, 0);
  EXPECT_EQ(v->destroyCq(cq), 0);
  EXPECT_EQ(v->deallocPd(pd), 0);
  EXPECT_EQ(v->closeDevice(ctx), 0);
  expectAllReleased();
}

TEST_F(FakeVerbs, InfinibandRouteUsesTheLid) {
  fabric.addDevice("ib0", {defaultIbPort(3)});
  fabric.addDevice("ib1", {defaultIbPort(4)});
  ibv_context* c0 = open("ib0");
  ibv_context* c1 = open("ib1");
  ibv_pd* p0 = v->allocPd(c0);
  ibv_pd* p1 = v->allocPd(c1);
  Endpoint a = endpoint(c0, p0), b = endpoint(c1, p1);
  std::vector<uint8_t> buf(64, 0), data(64, 0x5a);
  ibv_mr* dm = v->regMr(p1, buf.data(), 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  for (auto [self, peer, lid] : {std::tuple{a, b, 4}, std::tuple{b, a, 3}}) {
    ASSERT_EQ(toInit(self.qp), 0);
    ibv_qp_attr rtr = rtrAttr(peer.qp->qp_num, "::", 0);
    rtr.ah_attr.is_global = 0;
    rtr.ah_attr.dlid = uint16_t(lid);
    rtr.path_mtu = IBV_MTU_4096;
    ASSERT_EQ(v->modifyQp(self.qp, &rtr, kRtrMask), 0);
    ibv_qp_attr rts = rtsAttr(7);
    ASSERT_EQ(v->modifyQp(self.qp, &rts, kRtsMask), 0);
  }
  ASSERT_EQ(write(a, 1, data.data(), 64, 0, reinterpret_cast<uintptr_t>(buf.data()), dm->rkey, true, false, 0,
                  IBV_SEND_INLINE),
            0);
  EXPECT_EQ(buf, data);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_SUCCESS);
  // A key of another protection domain (ib1's MR used by a QP on ib0's PD) is no local key.
  ASSERT_EQ(write(a, 2, buf.data(), 8, dm->lkey, reinterpret_cast<uintptr_t>(buf.data()), dm->rkey), 0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_LOC_PROT_ERR);
  // A route to a LID nobody has.
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(v->modifyQp(a.qp, &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(toInit(a.qp), 0);
  ibv_qp_attr rtr = rtrAttr(b.qp->qp_num, "::", 0);
  rtr.ah_attr.is_global = 0;
  rtr.ah_attr.dlid = 5;
  ASSERT_EQ(v->modifyQp(a.qp, &rtr, kRtrMask), 0);
  ibv_qp_attr rts = rtsAttr(7);
  ASSERT_EQ(v->modifyQp(a.qp, &rts, kRtsMask), 0);
  ASSERT_EQ(write(a, 3, data.data(), 64, 0, reinterpret_cast<uintptr_t>(buf.data()), dm->rkey, true, false, 0,
                  IBV_SEND_INLINE),
            0);
  EXPECT_EQ(drain(a.sendCq).at(0).status, IBV_WC_RETRY_EXC_ERR);
  destroy(a);
  destroy(b);
  EXPECT_EQ(v->deregMr(dm), 0);
  EXPECT_EQ(v->deallocPd(p0), 0);
  EXPECT_EQ(v->deallocPd(p1), 0);
  EXPECT_EQ(v->closeDevice(c0), 0);
  EXPECT_EQ(v->closeDevice(c1), 0);
  expectAllReleased();
}

TEST_F(FakeVerbsPair, InlineDataPathOfVerbsHWorks) {
  // ibv_post_send and ibv_poll_cq of verbs.h jump through the context's ops.
  connect(a, b);
  ibv_sge sge{reinterpret_cast<uintptr_t>(src.data()), 32, srcMr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 3;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = dstAddr();
  wr.wr.rdma.rkey = dstMr->rkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(a.qp, &wr, &bad), 0);
  ibv_wc wc{};
  ASSERT_EQ(ibv_poll_cq(a.sendCq, 1, &wc), 1);
  EXPECT_EQ(wc.wr_id, 3u);
  EXPECT_TRUE(landed(32));
}

TEST_F(FakeVerbsPair, TwoThreadsStreamWritesWithImmediate) {
  connect(a, b, 7);
  constexpr int kMessages = 2000;
  std::atomic<bool> failed{false};
  std::thread receiver([&] {
    int got = 0, posted = 0;
    while (got < kMessages && !failed) {
      if (posted < kMessages && fabric.postedRecvs(b.qp->qp_num) < 8) {
        if (recv(b, uint64_t(posted)) != 0) failed = true;
        ++posted;
      }
      ibv_wc wc[8];
      const int n = v->pollCq(b.recvCq, 8, wc);
      for (int i = 0; i < n; ++i, ++got) {
        if (wc[i].status != IBV_WC_SUCCESS || ntohl(wc[i].imm_data) != uint32_t(got) ||
            wc[i].wr_id != uint64_t(got)) {
          ADD_FAILURE() << "message " << got << ": " << v->wcStatusStr(wc[i].status) << " imm "
                        << ntohl(wc[i].imm_data) << " wr_id " << wc[i].wr_id;
          failed = true;
        }
      }
    }
  });
  int completed = 0;
  for (int i = 0; i < kMessages && !failed; ++i) {
    // Every 16th signaled: polling those keeps the send queue of 64 from filling.
    const int rc = write(a, uint64_t(i), src.data(), 64, srcMr->lkey, dstAddr(), dstMr->rkey, i % 16 == 15,
                         true, uint32_t(i));
    if (rc != 0) {
      ADD_FAILURE() << "postSend " << i << ": " << rc;
      failed = true;
    }
    ibv_wc wc[4];
    int n;
    while ((n = v->pollCq(a.sendCq, 4, wc)) > 0) completed += n;
    while (!failed && fabric.qpInfo(a.qp->qp_num)->heldSends > 16) std::this_thread::yield();
  }
  receiver.join();
  completed += int(drain(a.sendCq).size());
  EXPECT_FALSE(failed);
  EXPECT_EQ(completed, kMessages / 16);
}

TEST(FakeVerbsStrings, MatchLibibverbs) {
  FakeFabric fabric;
  const Verbs* fake = fabric.verbs();
  EXPECT_STREQ(fake->wcStatusStr(IBV_WC_SUCCESS), "success");
  EXPECT_STREQ(fake->wcStatusStr(IBV_WC_REM_ACCESS_ERR), "remote access error");
  EXPECT_STREQ(fake->wcStatusStr(IBV_WC_LOC_PROT_ERR), "local protection error");
  EXPECT_STREQ(fake->eventTypeStr(IBV_EVENT_PORT_ERR), "port error");
  EXPECT_STREQ(fake->eventTypeStr(IBV_EVENT_DEVICE_FATAL), "local catastrophic error");
  EXPECT_STREQ(fake->wcStatusStr(ibv_wc_status(1000)), "unknown");
  Result<const Verbs*> real = net::ib::systemVerbs();
  if (!real.ok()) GTEST_SKIP() << real.status().message();
  for (int s = IBV_WC_SUCCESS; s <= IBV_WC_TM_RNDV_INCOMPLETE; ++s)
    EXPECT_STREQ(fake->wcStatusStr(ibv_wc_status(s)), real.value()->wcStatusStr(ibv_wc_status(s))) << s;
  for (int t = IBV_EVENT_CQ_ERR; t <= IBV_EVENT_WQ_FATAL; ++t)
    EXPECT_STREQ(fake->eventTypeStr(ibv_event_type(t)), real.value()->eventTypeStr(ibv_event_type(t))) << t;
}

}  // namespace
}  // namespace snccl::test
