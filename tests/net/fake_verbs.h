// A verbs provider in process memory behind the IB net's Verbs table
// (transport/net/ib/ib_verbs.h), for unit tests of what is hard to provoke on a real
// device: error completions, RNR, a completion no request asked for, asynchronous events,
// a peer that vanishes.
//
// It is deterministic and synchronous: a work request is carried out inside postSend,
// under one fabric-wide mutex, so the two ends of a connection may be driven from two
// threads. Only what the IB net uses exists: RC queue pairs, RDMA WRITE and RDMA WRITE
// with immediate, receives without a shared receive queue, CQs without completion
// channels.
//
// Where the verbs contract leaves room, the fake takes the strict reading, so that a bug
// which a particular device would forgive shows here:
//  - modifyQp checks the attribute mask of each RC transition as the kernel does
//    (required bits present, nothing outside required|optional) and the values' ranges
//    (timeout 0..31, retry_cnt and rnr_retry 0..7): EINVAL.
//  - A write reaches its peer only if the peer exists, is RTR or RTS, is connected back
//    to the writer (its dest_qp_num), the writer's route names the peer's port (RoCE: the
//    dgid is one of the peer port's GIDs; InfiniBand: the dlid is its LID) and both ports
//    are active. Otherwise the writer gets IBV_WC_RETRY_EXC_ERR at once: no retries.
//  - The remote key must cover the whole range with IBV_ACCESS_REMOTE_WRITE, belong to the
//    peer QP's protection domain, and the peer QP must allow remote writes
//    (qp_access_flags); else IBV_WC_REM_ACCESS_ERR and nothing is written.
//  - A send queue slot is freed only when the completion of its work request, or of a
//    later one on the same queue, is polled, as on hardware: a sender that never signals
//    fills its queue and gets ENOMEM.
//  - Destroying an object still in use (a PD with MRs or QPs, a CQ with QPs, a context
//    with PDs or CQs, a QP or CQ with events taken and not acked) fails with EBUSY and is
//    recorded in misuse(). Real libibverbs blocks forever in destroyQp/destroyCq while
//    events are unacked; here the test fails instead.
//  - Immediate data is carried unchanged: the sender's wr.imm_data (network byte order)
//    is the receiver's wc.imm_data.
//  - A send completion leaves byte_len 0: verbs defines it for receives only.
//
// Errors end a connection as on a device: the failing work request completes with its
// status (signaled or not), its QP goes to ERR, and everything it had posted or posts
// later completes with IBV_WC_WR_FLUSH_ERR. A remote access error puts the responder in
// ERR too, as rxe does. A WRITE_WITH_IMM that finds no receive posted fails at once with
// IBV_WC_RNR_RETRY_EXC_ERR, unless the sender's rnr_retry is 7 (retry forever): then it,
// and every later work request of that QP (RC executes in order), waits until the peer
// posts a receive. A completion that does not fit its CQ is lost, the CQ takes no more,
// and IBV_EVENT_CQ_ERR is raised on its context.
#pragma once

#include <infiniband/verbs.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/net/ib/ib_verbs.h"

namespace snccl::test {

using GidBytes = std::array<uint8_t, 16>;

// An IPv6 address in text ("fe80::1", "::ffff:10.0.0.1") as GID bytes; aborts if it is
// not one (a typo in a test).
GidBytes gidBytes(const char* ipv6);

struct FakeGid {
  GidBytes raw{};
  // The sysfs gid_attrs/types text ("RoCE v2", "IB/RoCE v1"); nullopt: the file cannot be
  // read (readGidType returns nullopt), as in a container.
  std::optional<std::string> type = "RoCE v2";
};

struct FakePort {
  ibv_port_state state = IBV_PORT_ACTIVE;
  uint8_t linkLayer = IBV_LINK_LAYER_ETHERNET;
  ibv_mtu maxMtu = IBV_MTU_4096;
  ibv_mtu activeMtu = IBV_MTU_1024;
  uint8_t activeWidth = 2;   // 4x
  uint8_t activeSpeed = 32;  // EDR (25 Gb/s per lane)
  uint16_t lid = 0;          // InfiniBand; 0 on Ethernet
  int gidTblLen = 16;
  // Configured entries by index; the others read as the zero GID (unconfigured), and
  // their type cannot be read. Entries need not start at 0.
  std::map<int, FakeGid> gids;
};

struct FakeDevice {
  std::string name;
  std::vector<FakePort> ports;  // port numbers 1..size()
  std::string pciPath;          // "" for a software device
  int numaNode = -1;
  // What queryDevice reports, and the limits the fake enforces (max_qp, max_cq, max_mr,
  // max_pd, max_cqe, max_qp_wr, max_sge, max_qp_rd_atom, max_qp_init_rd_atom,
  // max_pkeys). Filled with ConnectX-like values by addDevice unless set.
  std::optional<ibv_device_attr> attr;
  uint32_t maxInlineData = 220;  // largest cap.max_inline_data createQp grants
};

// One active Ethernet port: gid[0] fe80::1 and gid[1] ::ffff:10.0.0.1, both RoCE v2.
FakePort defaultRocePort();
// One active InfiniBand port with the given LID: gid[0] fe80::<lid> of type "IB".
FakePort defaultIbPort(uint16_t lid);

// The RTR and RTS attributes a QP was given, and its queues, as seen by the fabric.
struct FakeQpInfo {
  uint32_t qpNum = 0;
  ibv_qp_state state = IBV_QPS_RESET;
  std::string device;
  uint8_t port = 0;
  unsigned accessFlags = 0;  // qp_access_flags from INIT (or later)
  ibv_qp_cap cap{};
  bool sqSigAll = false;
  // RTR
  uint32_t destQpNum = 0;
  ibv_mtu pathMtu = IBV_MTU_256;
  uint32_t rqPsn = 0;
  uint8_t maxDestRdAtomic = 0;
  uint8_t minRnrTimer = 0;
  bool isGlobal = false;
  uint8_t sgidIndex = 0;
  GidBytes dgid{};
  uint8_t trafficClass = 0;
  uint8_t hopLimit = 0;
  uint8_t sl = 0;
  uint16_t dlid = 0;
  // RTS
  uint8_t timeout = 0;
  uint8_t retryCnt = 0;
  uint8_t rnrRetry = 0;
  uint32_t sqPsn = 0;
  uint8_t maxRdAtomic = 0;
  // Queues
  size_t postedRecvs = 0;     // posted and not consumed
  size_t heldSends = 0;       // waiting for a receive of the peer (rnr_retry 7)
  uint32_t sqOutstanding = 0; // send queue slots not yet retired by a polled completion
  bool killed = false;
};

struct FakeCounts {
  int contexts = 0, pds = 0, mrs = 0, cqs = 0, qps = 0;
  int deviceLists = 0;        // getDeviceList results not yet freed
  int asyncEventsTaken = 0;   // by getAsyncEvent
  int asyncEventsAcked = 0;   // by ackAsyncEvent
  int asyncEventsQueued = 0;  // injected or raised and not yet taken
};

class FakeFabric {
 public:
  // Becomes the process's fabric: only one may exist at a time (aborts otherwise).
  FakeFabric();
  // Frees whatever the code under test left open; check counts() before if that matters.
  ~FakeFabric();
  FakeFabric(const FakeFabric&) = delete;
  FakeFabric& operator=(const FakeFabric&) = delete;

  // The table to hand to the code under test. Valid while this fabric lives.
  const net::ib::Verbs* verbs() const;
  // Adds completion channels to the table (createCompChannel, getCqEvent, ackCqEvents,
  // reqNotifyCq: an armed CQ raises one event at its next completion), so that the code
  // under test can sleep in poll(). Before the code under test takes the table.
  void enableCompletionChannels();

  // Configuration, before the code under test enumerates devices. Returns the device's
  // index in getDeviceList order.
  int addDevice(FakeDevice dev);
  int addDevice(const std::string& name, std::vector<FakePort> ports);
  // "fake0" with defaultRocePort() as port 1.
  int addDefaultDevice();

  // ---- Fault injection (any thread) -------------------------------------------------
  // The next work request posted on this QP completes with `status` (signaled or not)
  // and the QP goes to ERR: what it had outstanding and what is posted later is flushed.
  void failNextSend(uint32_t qpNum, ibv_wc_status status, uint32_t vendorErr = 0);
  // A completion no request asked for, appended to the CQ as the hardware would.
  void injectCompletion(ibv_cq* cq, const ibv_wc& wc);
  // Queues an asynchronous event on the context and makes its async_fd readable.
  // QP events (IBV_EVENT_QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR, COMM_EST, SQ_DRAINED,
  // PATH_MIG, PATH_MIG_ERR, QP_LAST_WQE_REACHED); the three error events also move the QP
  // to ERR, as the error that causes them does.
  void injectAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_qp* qp);
  // IBV_EVENT_CQ_ERR.
  void injectAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_cq* cq);
  // Port events (PORT_ACTIVE, PORT_ERR, LID_CHANGE, PKEY_CHANGE, SM_CHANGE,
  // CLIENT_REREGISTER, GID_CHANGE) with that port number, or IBV_EVENT_DEVICE_FATAL (port
  // ignored), which also moves every QP of the context to ERR.
  void injectAsyncEvent(ibv_context* ctx, ibv_event_type type, int port);
  // Changes a port's state as queryPort reports it and raises IBV_EVENT_PORT_ACTIVE or
  // IBV_EVENT_PORT_ERR on every open context of the device. Writes from or to a port that
  // is not active fail with IBV_WC_RETRY_EXC_ERR.
  void setPortState(const std::string& dev, uint8_t port, ibv_port_state state);
  // As if the process owning the QP died: nothing reaches it any more (writes to it fail
  // with IBV_WC_RETRY_EXC_ERR, held writes included) and it goes to ERR, flushing what it
  // had posted. The ibv_qp stays valid for destroyQp.
  void killQp(uint32_t qpNum);

  // ---- Observation (any thread) -----------------------------------------------------
  FakeCounts counts() const;
  // QP numbers of the live QPs, in creation order.
  std::vector<uint32_t> qpNums() const;
  std::optional<FakeQpInfo> qpInfo(uint32_t qpNum) const;
  // Receives posted on the QP and not yet consumed; 0 for an unknown QP.
  size_t postedRecvs(uint32_t qpNum) const;
  // Completions waiting in the CQ.
  size_t cqDepth(ibv_cq* cq) const;
  // Contract violations the fake saw and survived (an unknown or destroyed object passed
  // in, an ack for an event never taken, ...), one line each.
  std::vector<std::string> misuse() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace snccl::test
