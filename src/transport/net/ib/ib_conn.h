// One IB net connection end (ib_wire.h describes the protocol), and the non-blocking
// setup that creates it.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/socket.h"
#include "transport/net/ib/ib_device.h"
#include "transport/net/ib/ib_split.h"
#include "transport/net/ib/ib_wire.h"
#include "transport/net/net.h"

namespace snccl::net::ib {

struct ConnParams {
  QpParams qp;
  bool adaptive = false;  // a sender cuts messages by each queue pair's rate (ib_split.h)
  int probeTimeoutMs = 10000;
  int lingerMs = 1000;
};

class Endpoint;

class IbRequest : public Request {
 public:
  Endpoint* ep = nullptr;
  uint64_t seq = 0;
  bool live = false;
  bool complete = false;
  int nparts = 0;      // sender: parts posted; receiver: from the records (0 until the first)
  int partsDone = 0;
  // Sender: where each part went and which are done, so that a failed rail's parts can
  // be written again (ib_wire.h).
  uint32_t doneMask = 0;
  uint8_t partQp[kMaxQps] = {};
  uint32_t partLen[kMaxQps] = {};
  const char* data = nullptr;  // sender: the source; receiver: where the receive was posted
  MemHandle* mh = nullptr;
  CtsEntry dest{};          // sender: where the message goes (the grant, or the offer it took)
  bool retargeted = false;  // sender: dest is the offer (kRecordRetargeted)
  char* offer = nullptr;    // receiver: the place offered (Endpoint::retarget), or null
  size_t offerBytes = 0;
  int tag = 0;            // receiver: the receive's tag
  DoneRecord first{};     // receiver: the first record that arrived (partsDone > 0)
  uint32_t partsSeen = 0;  // receiver: a bit per part whose record arrived
  size_t size = 0;     // sender: bytes sent; receiver: bytes received
  uint32_t imm = 0;
};

// A local port one end uses (ib_wire.h: a rail) and the verbs objects on its device.
struct Rail {
  const IbPort* port = nullptr;
  const Verbs* v = nullptr;
  ibv_comp_channel* channel = nullptr;
  unsigned unackedEvents = 0;
  ibv_cq* cq = nullptr;
  ibv_mr* regionMr = nullptr;  // the end's Region on this device
  AsyncSink sink;
};

// The resources and state of one end. Used by one thread at a time (net.h).
class Endpoint {
 public:
  // `ports`: the rails, 1..kMaxRails.
  Endpoint(std::vector<const IbPort*> ports, bool sender, ConnParams params, sock::Socket ctl);
  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  // Setup steps (ib_conn.cc Setup drives them).
  Status createResources(int nqps);
  Meta localMeta() const;
  Status connectQps(const Meta& peer);
  Status postProbes();
  // An 8-byte signaled RDMA write of this end's probeOut into the peer's probeIn on queue
  // pair q (with immediate data when imm is given): the setup probe, a ping, rail news.
  // probeIn means something only during setup. Returns ibv_post_send's errno, 0 when posted.
  int postProbeWrite(int q, int kind, const uint32_t* imm);
  // True once this end's probe writes completed and the peer's arrived.
  Result<bool> probeDone();
  std::string pathDescription() const;  // both ends' devices, GIDs and hosts

  // Data path.
  Result<IbRequest*> isend(void* data, size_t size, int tag, uint32_t imm, MemHandle* mh);
  Result<IbRequest*> irecv(void* data, size_t size, int tag, MemHandle* mh);
  // irecv with retarget(offer, offerBytes, offerMh) at once (Net::irecvWithOffer): the
  // offer is written in front of the grant, so the sender sees both. *offered: whether
  // retarget() took it.
  Result<IbRequest*> irecvWithOffer(void* data, size_t size, int tag, MemHandle* mh, void* offer, size_t offerBytes,
                                    MemHandle* offerMh, bool* offered);
  // Net::retargetRecv: offers `data` (registered by `mh`) to the sender as the place for
  // message r if it has exactly `size` bytes (ib_wire.h). True when it will be there once
  // test() reports it: written there by the sender, or copied there from the receive's
  // buffer when the offer came too late. False once part of the message arrived, or for
  // a receive offered a place before.
  bool retarget(IbRequest* r, void* data, size_t size, MemHandle* mh);
  Status test(IbRequest* r, bool* done, size_t* size, uint32_t* imm);

  // Prepares to sleep: arms the completion queue's event and appends the descriptors
  // whose readiness means progress may be possible (the completion channel, the control
  // socket). False when the caller must poll instead: no channel, a completion already
  // waiting, a failed comm.
  bool armWait(std::vector<pollfd>* fds);

  void close(uint32_t abortCode);
  uint32_t peerAbortCode() const { return peerAbort_; }
  int rails() const { return nrails_; }
  const IbPort* port(int rail = 0) const { return rails_[size_t(rail)].port; }
  const std::string& what() const { return what_; }
  // The verbs objects, for diagnostics and for tests that inject faults into them.
  ibv_cq* cq(int rail = 0) const { return rails_[size_t(rail)].cq; }
  const std::vector<ibv_qp*>& qps() const { return qps_; }
  uint32_t deadRails() const { return deadRails_; }  // a bit per rail given up

 private:
  Status progress();
  Status pollRails(uint32_t mask);  // handles the completions of the rails in mask
  int liveQps(int* live) const;     // the queue pairs of rails not given up, in order
  Status handleCompletion(int rail, const ibv_wc& wc);
  Status checkControl(bool force);
  Status checkHealth();  // events the devices' threads recorded
  bool railFault(int rail) const;  // one of them concerns this rail (checkHealth says which)
  Status checkLink();    // this node's Ethernet interfaces under the ports (RoCE)
  Status fail(Status s);
  Status completionError(int rail, const ibv_wc& wc);
  int qpIndex(int rail, uint32_t qpn) const;
  const Rail& railOf(int q) const { return rails_[size_t(qpRail(q, nrails_))]; }
  const RailMeta& peerRailOf(int q) const { return peer_.rails[qpRail(q, peer_.nrails)]; }
  Status postRecvs(int qp, int count, int kind = 4 /* kRecv */);
  // Receiver: a request for the next message, its grant staged but not written (null: no
  // credit free).
  Result<IbRequest*> stageRecv(void* data, size_t size, int tag, MemHandle* mh);
  // Receiver: writes the staged grants, each behind its offer when it has one, in one post.
  Status flushGrants();
  // Receiver: a plain RDMA write of slot's staged grant (kind kCts or kRegrant) or offer
  // (kOffer) into the same entry of the sender's Region, on queue pair q.
  void prepareEntryWrite(int kind, int slot, int q, ibv_sge* sge, ibv_send_wr* wr) const;
  // The queue pair that carries grants, offers and rail news (ib_wire.h): the first of the
  // first rail not given up.
  int ctlQp() const;
  std::string railPath(int rail, int peerRail) const;
  // Writes part `part` of request `r` (data, then its record) on queue pair `q`.
  Status postPart(IbRequest& r, int part, size_t off, int q);
  // Rail failover (ib_wire.h). Whether the connection can live on without `rail`: another
  // rail lives, and both ends have the same rails (rail i is the peer's rail i).
  bool canLoseRail(int rail) const;
  // This end saw `rail` fail (why): stops using it and tells the peer (the receiver: with
  // its RailState).
  Status loseRail(int rail, const std::string& why);
  // Stops the rails in mask (their queue pairs to the error state); a receiver whose
  // control queue pair was among them writes its entries again on the next one.
  Status stopRails(uint32_t mask);
  Status regrant();
  Status sendRailDown();  // sender: the rails it gave up, on a live queue pair
  Status sendRailState();
  // The peer's rail news arrived (the immediate of a write on queue pair q).
  Status railNews(uint32_t imm);
  // Sender: the receiver's RailState.
  Status railStateArrived(const RailState& st);
  Status peerLostRails(uint32_t mask);  // the peer gave these up: stop them here too
  Status resendLostParts(const RailState& st);
  // The TCP control connection failed while queue pairs live: a probe write on each live
  // queue pair checks that the peer is still there.
  Status controlLost(int err);
  bool railDead(int rail) const { return (deadRails_ >> rail & 1) != 0; }
  std::string linkProblem(int* rail) const;

  std::array<Rail, kMaxRails> rails_;
  int nrails_ = 0;
  const Verbs* v_;
  bool sender_;
  ConnParams params_;
  sock::Socket ctl_;
  std::string what_;  // "send to 10.0.0.2" for messages

  static constexpr int kPendingMax = 16;
  ibv_wc pending_[kPendingMax];  // completions armWait found, handled by the next progress()
  int pendingRail_[kPendingMax];  // the rail whose queue each came from
  int npending_ = 0;
  // An eventfd, ready while completions are pending (wakeSet_: armWait set it) or after an
  // event thread recorded a fault on one of the rails' devices (watching_: Hca::watch).
  int wakeFd_ = -1;
  bool wakeSet_ = false;
  bool watching_ = false;
  bool ctlClosed_ = false;       // the peer's end of the control socket is closed
  bool ctlLost_ = false;         // the control socket's path failed; the queue pairs live on
  bool creditWanted_ = false;    // sender: isend found no credit for message posted_

  Region* region_ = nullptr;
  std::vector<ibv_qp*> qps_;
  QpRates rates_{1};  // sender, adaptive: what each queue pair delivers
  uint32_t deadRails_ = 0;      // a bit per rail that failed
  uint32_t settledRails_ = 0;   // sender: failed rails whose RailState came; receiver: reported
  bool stateOwed_ = false;      // receiver: a RailState to send at the end of progress()
  int reportsSent_ = 0;         // receiver: RailStates written (each into its own entry)
  uint64_t qpBytes_[kMaxQps] = {};  // sender: bytes posted on each queue pair
  Meta peer_{};
  uint64_t probeValue_ = 0;
  int probesDone_ = 0;

  IbRequest reqs_[kSlots];
  uint64_t posted_ = 0;   // requests started
  uint64_t granted_ = 0;  // receiver: requests whose grant was posted (flushGrants)
  uint64_t offersBusy_ = 0;    // receiver: a bit per slot whose staged offer is still being written
  uint64_t grantsBusy_ = 0;    // receiver: a bit per slot whose grant is being written again (regrant)
  uint8_t entryRail_[2][kSlots] = {};  // receiver: the rail of the busy [grant, offer] write
  uint64_t offersOwed_ = 0;    // receiver: a bit per slot whose offer waits to go in front of its grant
  uint64_t offersTaken_ = 0;   // receiver: messages the sender wrote to the place offered
  uint64_t offersCopied_ = 0;  // receiver: messages copied there because the offer came late
  uint64_t retired_ = 0;  // requests reported done to the caller
  Status failed_;
  uint32_t peerAbort_ = 0;
  bool peerBye_ = false;
  int64_t nextCtlCheckNs_ = 0;  // CLOCK_MONOTONIC_COARSE
};

class IbSendComm : public SendComm {
 public:
  std::unique_ptr<Endpoint> ep;
};
class IbRecvComm : public RecvComm {
 public:
  std::unique_ptr<Endpoint> ep;
};

// A registration on every rail of the comm it was made for (one per device).
class IbMemHandle : public MemHandle {
 public:
  std::array<std::shared_ptr<Hca>, kMaxRails> hca;
  std::array<ibv_mr*, kMaxRails> mr{};
  int nrails = 0;
};

// The non-blocking setup of one end: TCP control socket first (the socket net's
// listener and connector), then metadata each way, queue pairs to RTS, and the probe:
// one RDMA write each way on every queue pair, so that a path that carries TCP but not
// RoCE fails here with both ends named, not at the first collective.
class Setup {
 public:
  Setup(std::vector<const IbPort*> ports, bool sender, ConnParams params, sock::Socket ctl);
  // The finished endpoint, null while in progress.
  Result<std::unique_ptr<Endpoint>> step();

 private:
  enum class State { kSendMeta, kRecvMeta, kSendReady, kRecvReady, kProbe, kDone };
  Status ioStep(bool send, bool* complete);

  std::unique_ptr<Endpoint> ep_;
  Status error_;  // resources could not be created
  bool sender_;
  State state_;
  std::vector<char> buf_;
  size_t done_ = 0;
  Meta peer_{};
  int probeTimeoutMs_;
  std::chrono::steady_clock::time_point probeDeadline_{};
  int fd_;
};

}  // namespace snccl::net::ib
