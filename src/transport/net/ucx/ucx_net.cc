// The UCX net (ucx_net.h).
#include "transport/net/ucx/ucx_net.h"

#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/log.h"
#include "common/params.h"
#include "common/socket.h"
#include "transport/net/ucx/ucx_api.h"

namespace snccl::net {

namespace {

using ucx::Ucp;

enum AmId : unsigned { kAmHello = 1, kAmCts = 2, kAmBye = 3, kAmProbe = 4 };

// How often a comm that waits on its peer with nothing in flight sends a PROBE.
constexpr std::chrono::milliseconds kProbeInterval{1000};

// How long an aborting end waits for its peer to take its goodbye (lingerForPeer). A
// peer that progresses answers within a round trip; one that does not costs this much
// per comm.
constexpr std::chrono::milliseconds kAbortLinger{500};

constexpr uint32_t kHandleMagic = 0x55435831;  // "UCX1"
constexpr uint16_t kHandleVersion = 2;

// How a sender reaches the receiver (SNCCL_UCX_CONNECT, the receiver's choice).
enum class Connect : uint16_t {
  kAddress = 0,   // the receiver's worker address follows the head
  kSockaddr = 1,  // a sock::Address::Wire follows: the receiver's UCP listener
};

struct HandleHead {
  uint32_t magic;
  uint16_t version;
  Connect connect;
  uint64_t nonce;
  uint32_t addrBytes;  // the bytes that follow the head
  uint32_t reserved;
};

Result<Connect> connectFromParams() {
  const std::string& mode = params::getString(params::Id::UcxConnect);
  if (mode == "address" || mode.empty()) return Connect::kAddress;
  if (mode == "sockaddr") return Connect::kSockaddr;
  return InvalidArgument("SNCCL_UCX_CONNECT=%s: expected address or sockaddr", mode.c_str());
}

// Tags of data messages: seq in the low 24 bits (at most kMaxSteps messages are ever
// outstanding on a comm, so they never collide), the imm above them, a marker on top.
constexpr uint64_t kDataMarker = uint64_t(0xD5) << 56;
constexpr uint64_t kSeqBits = 24;
constexpr uint64_t kSeqMask = (uint64_t(1) << kSeqBits) - 1;
constexpr ucp_tag_t kMatchMask = (uint64_t(0xFF) << 56) | kSeqMask;
ucp_tag_t dataTag(uint64_t seq, uint32_t imm) { return kDataMarker | (uint64_t(imm) << kSeqBits) | (seq & kSeqMask); }
uint32_t tagImm(ucp_tag_t tag) { return uint32_t(tag >> kSeqBits); }

// A control message in flight: its header must stay valid until UCX completes the send.
struct CtrlSend {
  uint64_t words[2] = {};
  std::vector<char> data;
  void* req = nullptr;  // null once complete
};

class Endpoint;

class UcxRequest final : public Request {
 public:
  Endpoint* end = nullptr;
  void* ucp = nullptr;  // the UCP request; null when it completed at once
  bool recv = false;
  size_t size = 0;
  uint64_t seq = 0;  // receives: the message number it waits for
  ucp_tag_recv_info_t info{};
};

// One end of a connection (or a listener waiting for its sender): a worker, the endpoint
// to the peer, and what the active-message handlers learnt.
class Endpoint {
 public:
  explicit Endpoint(const Ucp* u) : u_(u) {}
  ~Endpoint() {
    destroy(false, std::chrono::milliseconds(100));
    if (wakeFd >= 0) ::close(wakeFd);
    if (probeFd >= 0) ::close(probeFd);
  }

  Status createWorker(ucp_context_h ctx) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;  // one thread at a time, not always the same
    SNCCL_TRY(check(u_->workerCreate(ctx, &wp, &worker), "ucp_worker_create"));
    for (unsigned id : {kAmHello, kAmCts, kAmBye, kAmProbe}) SNCCL_TRY(setHandler(id));
    return OkStatus();
  }

  Status connectTo(const void* address) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = static_cast<const ucp_address_t*>(address);
    failOnPeerError(&ep);
    return check(u_->epCreate(worker, &ep, &this->ep), "ucp_ep_create");
  }

  // UCX's peer error handling: a dead process or a failed path fails the endpoint, and
  // onError records why.
  void failOnPeerError(ucp_ep_params_t* ep) {
    ep->field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep->err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep->err_handler.cb = onError;
    ep->err_handler.arg = this;
  }

  // The sender's endpoint to a receiver's listener, through UCX's connection manager.
  Status connectToListener(const sock::Address& address) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR;
    ep.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
    ep.sockaddr.addr = address.sa();
    ep.sockaddr.addrlen = address.len();
    failOnPeerError(&ep);
    return check(u_->epCreate(worker, &ep, &this->ep), "ucp_ep_create (to a listener)");
  }

  // Listens on `local` (port 0: any free one); *bound is the address senders connect to.
  Status listenOn(const sock::Address& local, sock::Address* bound) {
    ucp_listener_params_t lp{};
    lp.field_mask = UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | UCP_LISTENER_PARAM_FIELD_CONN_HANDLER;
    lp.sockaddr.addr = local.sa();
    lp.sockaddr.addrlen = local.len();
    lp.conn_handler.cb = onConnRequest;
    lp.conn_handler.arg = this;
    SNCCL_TRY(check(u_->listenerCreate(worker, &lp, &listener), "ucp_listener_create"));
    ucp_listener_attr_t attr{};
    attr.field_mask = UCP_LISTENER_ATTR_FIELD_SOCKADDR;
    SNCCL_TRY(check(u_->listenerQuery(listener, &attr), "ucp_listener_query"));
    *bound = local;
    bound->setPort(sock::Address(reinterpret_cast<const sockaddr*>(&attr.sockaddr), sizeof attr.sockaddr).port());
    return OkStatus();
  }

  // The receiver's endpoint for the connection its listener was asked for; the listener
  // (one connection per listen comm) is closed.
  Status acceptRequest() {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST;
    ep.conn_request = connRequest;
    failOnPeerError(&ep);
    connRequest = nullptr;
    Status s = check(u_->epCreate(worker, &ep, &this->ep), "ucp_ep_create (for a connection request)");
    closeListener();
    return s;
  }

  Status workerAddress(std::vector<unsigned char>* out) {
    ucp_address_t* a = nullptr;
    size_t n = 0;
    SNCCL_TRY(check(u_->workerGetAddress(worker, &a, &n), "ucp_worker_get_address"));
    out->assign(reinterpret_cast<unsigned char*>(a), reinterpret_cast<unsigned char*>(a) + n);
    u_->workerReleaseAddress(worker, a);
    return OkStatus();
  }

  // An active message of two 64-bit words (and optional data) to the peer.
  Status sendCtrl(unsigned id, uint64_t a, uint64_t b, const void* data = nullptr, size_t bytes = 0) {
    CtrlSend& c = ctrl_.emplace_back();
    c.words[0] = a;
    c.words[1] = b;
    if (bytes > 0) c.data.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_AM_SEND_FLAG_EAGER;
    ucs_status_ptr_t s =
        u_->amSendNbx(ep, id, c.words, sizeof c.words, c.data.empty() ? nullptr : c.data.data(), c.data.size(), &p);
    if (UCS_PTR_IS_ERR(s)) {
      ctrl_.pop_back();
      return failure("sending a control message", UCS_PTR_STATUS(s));
    }
    c.req = s;
    reapCtrl();
    return OkStatus();
  }

  void progress() {
    u_->workerProgress(worker);
    reapCtrl();
  }

  // A cut link hides the peer: an end that waits with nothing in flight would hear of it
  // only from UCX's keepalive (20 s by default, and not on every transport) or at
  // SNCCL_TIMEOUT. While a caller waits, a PROBE every kProbeInterval keeps a message in
  // flight: the peer's transport acknowledges it without the peer's own progress, and on
  // a dead path it fails (RC: after its retries), failing the endpoint.
  void probeWhileWaiting() {
    const auto now = std::chrono::steady_clock::now();
    if (!ctrl_.empty() || ep == nullptr || now - lastProbe_ < kProbeInterval) return;
    lastProbe_ = now;
    (void)sendCtrl(kAmProbe, 0, 0);  // a send that fails at once fails nothing; the next wait tries again
  }
  // A caller waits on this end: a request is in flight, or a send waits for its credit.
  bool waiting() const { return !live.empty() || wantCredit; }
  // Arms probeFd to fire when the next PROBE is due; false when it cannot.
  bool armProbeTimer() {
    if (probeFd < 0) probeFd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (probeFd < 0) return false;
    uint64_t expired = 0;
    if (read(probeFd, &expired, sizeof expired) < 0) expired = 0;  // EAGAIN: it has not fired
    const auto due = lastProbe_ + kProbeInterval - std::chrono::steady_clock::now();
    const int64_t ns = std::max<int64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(due).count(), 1000000);
    itimerspec t{};
    t.it_value.tv_sec = ns / 1000000000;
    t.it_value.tv_nsec = ns % 1000000000;
    return timerfd_settime(probeFd, 0, &t, nullptr) == 0;
  }
  // Every control message sent so far has left.
  bool ctrlIdle() const { return ctrl_.empty(); }

  // The comm's state as an error: a failed endpoint, or (receivers) the peer's goodbye.
  Status health() {
    if (error != UCS_OK) return failure("the connection", error);
    return OkStatus();
  }

  // An error for `what`. A peer that aborts sends its BYE (with the abort code naming
  // where the failure started) just before its endpoint goes, and UCX may report the
  // endpoint failed before this end has read the BYE: what already arrived is taken in
  // first, so that peerAbortCode() has the code when the caller asks for it.
  Status failure(const char* what, ucs_status_t s) {
    for (int i = 0; i < 100 && u_->workerProgress(worker) != 0; ++i) {
    }
    return RemoteError("NET/UCX : %s failed: %s%s", what, u_->statusString(s),
                       abortCode != 0 ? " (the peer aborted)" : "");
  }

  // Closes the endpoint and destroys the worker, cancelling what is still posted. With
  // `flush`, what was sent (the goodbye included) first reaches the peer, for at most
  // `wait`; without, only the goodbye is given a moment to leave. The close itself never
  // waits for the peer.
  void destroy(bool flush, std::chrono::milliseconds wait) {
    closeListener();
    for (UcxRequest* r : live) {
      if (r->ucp != nullptr) {
        u_->requestCancel(worker, r->ucp);
        u_->requestFree(r->ucp);
      }
      delete r;
    }
    live.clear();
    if (ep != nullptr) {
      ucp_request_param_t p{};
      if (flush) {
        waitFor(u_->epFlushNbx(ep, &p), wait);
      } else {
        waitCtrl(std::chrono::milliseconds(100));  // the goodbye leaves, if it can at once
      }
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = UCP_EP_CLOSE_FLAG_FORCE;
      waitFor(u_->epCloseNbx(ep, &p), wait);
      ep = nullptr;
    }
    for (CtrlSend& c : ctrl_)
      if (c.req != nullptr) {
        u_->requestCancel(worker, c.req);
        u_->requestFree(c.req);
      }
    ctrl_.clear();
    if (worker != nullptr) {
      // Cancelled requests return to UCX's pool once progress completes them.
      for (int i = 0; i < 1000 && u_->workerProgress(worker) != 0; ++i) {
      }
      u_->workerDestroy(worker);
      worker = nullptr;
    }
  }

  // An aborting end progresses, for at most `wait`, until the peer answers its goodbye
  // with its own or is gone. The goodbye names where the failure started, and closing
  // sooner can lose it: UCX may still hold it behind messages the peer has not taken;
  // closing a socket with unread credits makes the kernel reset the connection, dropping
  // what is still queued; and in sockaddr mode the connection manager's report of the
  // close can reach the peer before the data does. A live peer that reads the goodbye
  // fails its comm and closes it, sending its own, so the wait is short unless the peer
  // is not progressing. (A peer that aborted on its own sends its goodbye unasked; it
  // already knows its own cause.)
  void lingerForPeer(std::chrono::milliseconds wait) {
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (ep != nullptr && error == UCS_OK && !bye) {
      if (std::chrono::steady_clock::now() >= deadline) {
        SN_INFO(log::kNet, "NET/UCX : aborting: the peer did not answer the goodbye within %lld ms; closing anyway",
                static_cast<long long>(wait.count()));
        return;
      }
      progress();
    }
  }

  // Handlers' arguments stay valid: an Endpoint never moves (comms hold it by pointer).
  Status setHandler(unsigned id) {
    ucp_am_handler_param_t h{};
    h.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
                   UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    h.id = id;
    h.cb = id == kAmHello ? onHello : id == kAmCts ? onCts : id == kAmBye ? onBye : onProbe;
    h.arg = this;
    h.flags = UCP_AM_FLAG_WHOLE_MSG;
    return check(u_->workerSetAmRecvHandler(worker, &h), "ucp_worker_set_am_recv_handler");
  }

  Status check(ucs_status_t s, const char* call) const {
    if (s == UCS_OK) return OkStatus();
    return SystemError("NET/UCX : %s: %s", call, u_->statusString(s));
  }

  const Ucp* u_;
  ucp_worker_h worker = nullptr;
  ucp_ep_h ep = nullptr;
  ucp_listener_h listener = nullptr;         // sockaddr mode, until a sender connects
  ucp_conn_request_h connRequest = nullptr;  // the connection its sender asked for
  ucs_status_t error = UCS_OK;
  uint64_t nonce = 0;
  // What the handlers learnt.
  bool helloArrived = false;
  std::vector<unsigned char> helloAddress;
  std::deque<std::pair<uint64_t, uint64_t>> credits;  // (seq, bytes) the receiver posted
  bool bye = false;
  uint32_t abortCode = 0;
  uint64_t byeSeq = 0;      // the messages the peer had sent when it said goodbye
  bool wantCredit = false;  // an isend found no credit: a credit arriving is news
  // Sequence numbers: messages sent (sender) or receives posted (receiver).
  uint64_t seq = 0;
  std::unordered_set<UcxRequest*> live;  // requests not yet completed, freed on close
  int fd = -1;                           // the worker's event descriptor (-1: not known yet)
  int wakeFd = -1;                       // an eventfd pollFds signals when sleeping is wrong
  int probeFd = -1;                      // a timerfd that wakes a sleeping caller for the next PROBE

 private:
  void waitFor(ucs_status_ptr_t s, std::chrono::milliseconds wait) {
    if (!UCS_PTR_IS_PTR(s)) return;
    auto deadline = std::chrono::steady_clock::now() + wait;
    while (u_->requestCheckStatus(s) == UCS_INPROGRESS && std::chrono::steady_clock::now() < deadline)
      u_->workerProgress(worker);
    if (u_->requestCheckStatus(s) == UCS_INPROGRESS) u_->requestCancel(worker, s);
    u_->requestFree(s);
  }

  // Progresses the worker until every control message (the goodbye last) has left.
  void waitCtrl(std::chrono::milliseconds wait) {
    auto deadline = std::chrono::steady_clock::now() + wait;
    reapCtrl();
    while (!ctrl_.empty() && std::chrono::steady_clock::now() < deadline) progress();
  }

  void reapCtrl() {
    for (CtrlSend& c : ctrl_) {
      if (c.req == nullptr) continue;
      ucs_status_t st = u_->requestCheckStatus(c.req);
      if (st == UCS_INPROGRESS) continue;
      // A lost credit or HELLO would leave the peer waiting: the comm fails instead.
      if (st != UCS_OK && error == UCS_OK) error = st;
      u_->requestFree(c.req);
      c.req = nullptr;
    }
    while (!ctrl_.empty() && ctrl_.front().req == nullptr) ctrl_.pop_front();
  }

  void closeListener() {
    if (listener == nullptr) return;
    if (connRequest != nullptr) u_->listenerReject(listener, connRequest);
    connRequest = nullptr;
    u_->listenerDestroy(listener);
    listener = nullptr;
  }

  // A listen comm takes one connection: a second request (a stranger) is refused.
  static void onConnRequest(ucp_conn_request_h request, void* arg) {
    auto* e = static_cast<Endpoint*>(arg);
    if (e->connRequest != nullptr || e->ep != nullptr) {
      e->u_->listenerReject(e->listener, request);
      return;
    }
    e->connRequest = request;
  }

  static void onError(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* e = static_cast<Endpoint*>(arg);
    if (e->error == UCS_OK) e->error = status;
  }

  static ucs_status_t onProbe(void*, const void*, size_t, void*, size_t, const ucp_am_recv_param_t*) { return UCS_OK; }

  static void words(const void* header, size_t bytes, uint64_t out[2]) {
    out[0] = out[1] = 0;
    std::memcpy(out, header, std::min(bytes, 2 * sizeof(uint64_t)));
  }
  // HELLO (nonce, 0), with the sender's worker address as data in address mode; one
  // whose nonce is not the handle's is a stranger's and is ignored.
  static ucs_status_t onHello(void* arg, const void* header, size_t headerBytes, void* data, size_t bytes,
                              const ucp_am_recv_param_t*) {
    auto* e = static_cast<Endpoint*>(arg);
    uint64_t w[2];
    words(header, headerBytes, w);
    if (!e->helloArrived && w[0] == e->nonce) {
      e->helloArrived = true;
      if (data != nullptr)
        e->helloAddress.assign(static_cast<unsigned char*>(data), static_cast<unsigned char*>(data) + bytes);
    }
    return UCS_OK;
  }
  // CTS (seq, bytes): a receive is posted.
  static ucs_status_t onCts(void* arg, const void* header, size_t headerBytes, void*, size_t,
                            const ucp_am_recv_param_t*) {
    uint64_t w[2];
    words(header, headerBytes, w);
    static_cast<Endpoint*>(arg)->credits.emplace_back(w[0], w[1]);
    return UCS_OK;
  }
  // BYE (abort code, messages sent): the peer closes, in order when the code is 0. A
  // sender's count says which receives were never going to be matched: the goodbye may
  // overtake data on another of UCX's lanes, and receives below the count still complete.
  static ucs_status_t onBye(void* arg, const void* header, size_t headerBytes, void*, size_t,
                            const ucp_am_recv_param_t*) {
    auto* e = static_cast<Endpoint*>(arg);
    uint64_t w[2];
    words(header, headerBytes, w);
    e->bye = true;
    e->abortCode = uint32_t(w[0]);
    e->byeSeq = w[1];
    return UCS_OK;
  }

  std::deque<CtrlSend> ctrl_;  // deque: elements never move, so headers stay put
  std::chrono::steady_clock::time_point lastProbe_ = std::chrono::steady_clock::now();
};

class UListen final : public ListenComm {
 public:
  std::unique_ptr<Endpoint> end;
};
class USend final : public SendComm {
 public:
  std::unique_ptr<Endpoint> end;
};
class URecv final : public RecvComm {
 public:
  std::unique_ptr<Endpoint> end;
};

Endpoint* endOf(const Comm* c) {
  if (auto* s = dynamic_cast<const USend*>(c)) return s->end.get();
  if (auto* r = dynamic_cast<const URecv*>(c)) return r->end.get();
  if (auto* l = dynamic_cast<const UListen*>(c)) return l->end.get();
  return nullptr;
}

class UcxNet final : public Net {
 public:
  const char* name() const override { return "UCX"; }

  Status init() override {
    std::call_once(once_, [this] { initStatus_ = doInit(); });
    return initStatus_;
  }
  int devices() const override { return initStatus_.ok() && ctx_ != nullptr ? 1 : 0; }

  Status getProperties(int dev, Properties* p) const override {
    if (dev != 0) return InvalidArgument("NET/UCX : no device %d", dev);
    *p = Properties{};
    const char* devs = std::getenv("UCX_NET_DEVICES");
    p->name = devs != nullptr && *devs != '\0' ? devs : "ucx";
    p->ptrSupport = kPtrHost;
    p->speedMbps = 10000;  // UCX does not say; as the socket net assumes for virtual links
    p->maxComms = 65536;
    p->maxRecvs = 1;
    p->maxP2pBytes = size_t(1) << 31;
    p->imm = true;
    return OkStatus();
  }

  Status listen(int, Handle* handle, ListenComm** listenComm) override {
    SNCCL_ASSIGN_OR_RETURN(const Connect mode, connectFromParams());
    auto l = std::make_unique<UListen>();
    l->end = std::make_unique<Endpoint>(u_);
    SNCCL_TRY(l->end->createWorker(ctx_));
    l->end->nonce = nextNonce();
    std::vector<unsigned char> addr;
    if (mode == Connect::kAddress) {
      SNCCL_TRY(l->end->workerAddress(&addr));
    } else {
      SNCCL_ASSIGN_OR_RETURN(const sock::Interface itf, sock::chooseLocalInterface());
      sock::Address local = itf.addr;
      local.setPort(0);
      sock::Address bound;
      SNCCL_TRY(l->end->listenOn(local, &bound));
      SN_INFO(log::kNet, "NET/UCX : listening on %s (%s) for a connection through UCX's connection manager",
              bound.toString().c_str(), itf.name.c_str());
      const sock::Address::Wire wire = bound.toWire();
      addr.assign(reinterpret_cast<const unsigned char*>(&wire), reinterpret_cast<const unsigned char*>(&wire + 1));
    }
    HandleHead head{kHandleMagic, kHandleVersion, mode, l->end->nonce, uint32_t(addr.size()), 0};
    handle->bytes.resize(sizeof head + addr.size());
    std::memcpy(handle->bytes.data(), &head, sizeof head);
    std::memcpy(handle->bytes.data() + sizeof head, addr.data(), addr.size());
    *listenComm = l.release();
    return OkStatus();
  }

  // The first call creates the worker and the endpoint and sends the HELLO; the comm is
  // returned once the HELLO has left (UCX connects its transports on the way), so a
  // caller that then waits for the receiver's credit knows the path works.
  Status connect(int, Handle* handle, SendComm** sendComm) override {
    *sendComm = nullptr;
    std::unique_ptr<USend> pending;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = connecting_.find(handle);
      if (it != connecting_.end()) {
        pending = std::move(it->second);
        connecting_.erase(it);
      }
    }
    if (pending == nullptr) {
      SNCCL_ASSIGN_OR_RETURN(pending, startConnect(*handle));
    }
    pending->end->progress();
    SNCCL_TRY(pending->end->health());
    if (!pending->end->ctrlIdle()) {
      std::lock_guard<std::mutex> lock(mu_);
      connecting_[handle] = std::move(pending);
      return OkStatus();
    }
    *sendComm = pending.release();
    return OkStatus();
  }

  Status accept(ListenComm* listenComm, RecvComm** recvComm) override {
    *recvComm = nullptr;
    auto* l = static_cast<UListen*>(listenComm);
    if (l->end == nullptr) return InvalidUsage("NET/UCX : a listen comm accepts one connection");
    Endpoint* e = l->end.get();
    e->progress();
    if (e->listener != nullptr || e->connRequest != nullptr) {
      // sockaddr mode: the sender's request makes the endpoint, then its HELLO arrives.
      if (e->connRequest == nullptr) return OkStatus();
      SNCCL_TRY(e->acceptRequest());
      e->progress();
    }
    SNCCL_TRY(e->health());
    if (!e->helloArrived) return OkStatus();
    if (e->ep == nullptr) {
      if (e->helloAddress.empty()) return InternalError("NET/UCX : the sender's HELLO carries no worker address");
      SNCCL_TRY(e->connectTo(e->helloAddress.data()));
    }
    auto r = std::make_unique<URecv>();
    r->end = std::move(l->end);
    *recvComm = r.release();
    return OkStatus();
  }
  void cancelConnect(Handle* handle) override {
    std::lock_guard<std::mutex> lock(mu_);
    connecting_.erase(handle);
  }

  // UCX registers what it sends from and receives into itself (its registration cache).
  Status regMr(Comm*, void*, size_t, int, MemHandle** mh) override {
    *mh = nullptr;
    return OkStatus();
  }
  bool usesUnregisteredHostMemory() const override { return true; }
  Status deregMr(Comm*, MemHandle*) override { return OkStatus(); }

  Status isend(SendComm* comm, void* data, size_t size, int, uint32_t imm, MemHandle*, Request** request) override {
    *request = nullptr;
    Endpoint* e = static_cast<USend*>(comm)->end.get();
    SNCCL_TRY(e->health());
    if (e->credits.empty()) e->progress();
    if (e->credits.empty()) {
      if (e->bye) return RemoteError("NET/UCX : the receiver closed the connection; cannot send %zu bytes", size);
      e->wantCredit = true;
      e->probeWhileWaiting();
      return OkStatus();
    }
    e->wantCredit = false;
    auto [seq, bytes] = e->credits.front();
    if (seq != (e->seq & kSeqMask))
      return InternalError("NET/UCX : a credit for message %llu arrived while message %llu is next",
                           (unsigned long long)seq, (unsigned long long)e->seq);
    if (size > bytes)
      return InternalError("NET/UCX : a %zu-byte message for a %llu-byte receive", size, (unsigned long long)bytes);
    e->credits.pop_front();
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    ucs_status_ptr_t s = u_->tagSendNbx(e->ep, data, size, dataTag(e->seq, imm), &p);
    if (UCS_PTR_IS_ERR(s)) return e->failure("a send", UCS_PTR_STATUS(s));
    ++e->seq;
    *request = track(e, s, false, size);
    return OkStatus();
  }

  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int*, MemHandle**, Request** request) override {
    *request = nullptr;
    if (n != 1) return InvalidUsage("NET/UCX : irecv of %d buffers (maxRecvs is 1)", n);
    Endpoint* e = static_cast<URecv*>(comm)->end.get();
    SNCCL_TRY(e->health());
    if (e->bye && e->seq >= e->byeSeq) return RemoteError("NET/UCX : the sender closed the connection");
    auto* r = new UcxRequest;
    r->seq = e->seq;
    r->end = e;
    r->recv = true;
    r->size = sizes[0];
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE | UCP_OP_ATTR_FIELD_RECV_INFO;
    p.memory_type = UCS_MEMORY_TYPE_HOST;
    p.recv_info.tag_info = &r->info;
    ucs_status_ptr_t s = u_->tagRecvNbx(e->worker, data[0], sizes[0], dataTag(e->seq, 0), kMatchMask, &p);
    if (UCS_PTR_IS_ERR(s)) {
      delete r;
      return e->failure("posting a receive", UCS_PTR_STATUS(s));
    }
    r->ucp = UCS_PTR_IS_PTR(s) ? s : nullptr;
    e->live.insert(r);
    // The credit: the receive is posted before the sender may send into it.
    SNCCL_TRY(e->sendCtrl(kAmCts, e->seq & kSeqMask, sizes[0]));
    ++e->seq;
    *request = r;
    return OkStatus();
  }

  Status iflush(RecvComm*, int, void**, int*, MemHandle**, Request** request) override {
    *request = nullptr;  // host memory: nothing to flush
    return OkStatus();
  }

  Status test(Request* request, bool* done, size_t* sizes, uint32_t* imm) override {
    auto* r = static_cast<UcxRequest*>(request);
    Endpoint* e = r->end;
    *done = false;
    if (r->ucp != nullptr) {
      e->progress();
      ucs_status_t st = r->recv ? u_->tagRecvRequestTest(r->ucp, &r->info) : u_->requestCheckStatus(r->ucp);
      if (st == UCS_INPROGRESS) {
        Status h = e->health();
        if (h.ok() && r->recv && e->bye && r->seq >= e->byeSeq)
          h = RemoteError("NET/UCX : the sender closed the connection before the message this receive waits for");
        if (h.ok()) {
          e->probeWhileWaiting();
          return OkStatus();
        }
        finish(r);
        return h;
      }
      u_->requestFree(r->ucp);
      r->ucp = nullptr;
      if (st != UCS_OK) {
        Status f = e->failure(r->recv ? "a receive" : "a send", st);
        finish(r);
        return f;
      }
    }
    *done = true;
    if (sizes != nullptr) sizes[0] = r->recv ? r->info.length : r->size;
    if (imm != nullptr) *imm = r->recv ? tagImm(r->info.sender_tag) : 0;
    finish(r);
    return OkStatus();
  }

  bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const override {
    Endpoint* e = endOf(comm);
    if (e == nullptr || e->worker == nullptr) return false;
    if (e->fd < 0 && u_->workerGetEfd(e->worker, &e->fd) != UCS_OK) return false;
    if (e->wakeFd < 0) e->wakeFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->wakeFd < 0) return false;
    uint64_t drained = 0;
    if (read(e->wakeFd, &drained, sizeof drained) < 0) drained = 0;  // EAGAIN: it was not signalled
    // UCX's rule for sleeping: progress until nothing happens, then arm; armed, the
    // descriptor becomes readable on the next event. Progress that did something (a
    // request may have completed, a credit arrived), or a busy arm (events pending), mean
    // the caller must look again at once: the comm's own eventfd, signalled, says so
    // (a timer would cost a millisecond per message).
    bool creditWaiting = e->wantCredit && !e->credits.empty();  // a send waits for it, not for an event
    if (creditWaiting || u_->workerProgress(e->worker) != 0 || u_->workerArm(e->worker) != UCS_OK) {
      const uint64_t one = 1;
      if (write(e->wakeFd, &one, sizeof one) != ssize_t(sizeof one)) return false;
      fds->push_back({e->wakeFd, POLLIN, 0});
      return true;
    }
    fds->push_back({e->fd, POLLIN, 0});
    // A waiting end wakes for its next PROBE (probeWhileWaiting), once a second.
    if (e->waiting()) {
      if (!e->armProbeTimer()) return false;
      fds->push_back({e->probeFd, POLLIN, 0});
    }
    return true;
  }

  // A sender closing in order flushes its endpoint first: the peer may not have taken
  // the last messages yet (their sends complete once UCX has them, not once they
  // arrived), and it needs them even though this rank is done. A receiver has nothing
  // the peer needs, and its endpoint only carries credits: it does not wait for a flush,
  // which needs the peer's progress, and the peer may be closing its own comms one by one.
  Status closeSend(SendComm* comm, uint32_t abortCode) override {
    auto* s = static_cast<USend*>(comm);
    close(s->end.get(), abortCode, abortCode == 0);
    delete s;
    return OkStatus();
  }
  Status closeRecv(RecvComm* comm, uint32_t abortCode) override {
    auto* r = static_cast<URecv*>(comm);
    close(r->end.get(), abortCode, false);
    delete r;
    return OkStatus();
  }
  uint32_t peerAbortCode(const Comm* comm) const override {
    Endpoint* e = endOf(comm);
    return e != nullptr ? e->abortCode : 0;
  }
  bool peerClosed(const Comm* comm) const override {
    Endpoint* e = endOf(comm);
    return e != nullptr && e->bye && e->abortCode == 0;
  }
  Status closeListen(ListenComm* comm) override {
    delete static_cast<UListen*>(comm);
    return OkStatus();
  }

 private:
  Status doInit() {
    SNCCL_ASSIGN_OR_RETURN(u_, ucx::systemUcp());
    ucp_config_t* config = nullptr;
    SNCCL_TRY(check(u_->configRead(nullptr, nullptr, &config), "ucp_config_read"));
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    // Workers of this context are driven by different threads (listen on the caller's,
    // the proxy and the executors on theirs): UCX must lock the state they share.
    params.mt_workers_shared = 1;
    ucs_status_t s = u_->initVersion(UCP_API_MAJOR, UCP_API_MINOR, &params, config, &ctx_);
    u_->configRelease(config);
    SNCCL_TRY(check(s, "ucp_init"));
    unsigned major = 0, minor = 0, release = 0;
    u_->getVersion(&major, &minor, &release);
    SN_INFO(log::kNet | log::kInit, "NET/UCX : UCX %u.%u.%u (UCX_TLS=%s)", major, minor, release,
            std::getenv("UCX_TLS") != nullptr ? std::getenv("UCX_TLS") : "all");
    return OkStatus();
  }

  Status check(ucs_status_t s, const char* call) const {
    if (s == UCS_OK) return OkStatus();
    return SystemError("NET/UCX : %s: %s", call, u_->statusString(s));
  }

  Result<std::unique_ptr<USend>> startConnect(const Handle& handle) {
    HandleHead head{};
    if (handle.bytes.size() < sizeof head) return InternalError("NET/UCX : a %zu-byte handle", handle.bytes.size());
    std::memcpy(&head, handle.bytes.data(), sizeof head);
    if (head.magic != kHandleMagic || head.version != kHandleVersion ||
        (head.connect != Connect::kAddress && head.connect != Connect::kSockaddr) ||
        handle.bytes.size() != sizeof head + head.addrBytes)
      return InternalError("NET/UCX : the peer's listen handle is not a UCX one (does it use another net?)");
    auto s = std::make_unique<USend>();
    s->end = std::make_unique<Endpoint>(u_);
    SNCCL_TRY(s->end->createWorker(ctx_));
    if (head.connect == Connect::kSockaddr) {
      sock::Address::Wire wire{};
      if (head.addrBytes != sizeof wire)
        return InternalError("NET/UCX : a listener address of %u bytes", head.addrBytes);
      std::memcpy(&wire, handle.bytes.data() + sizeof head, sizeof wire);
      SNCCL_ASSIGN_OR_RETURN(const sock::Address listener, sock::Address::fromWire(wire));
      SNCCL_TRY(s->end->connectToListener(listener));
      SNCCL_TRY(s->end->sendCtrl(kAmHello, head.nonce, 0));
      return s;
    }
    SNCCL_TRY(s->end->connectTo(handle.bytes.data() + sizeof head));
    std::vector<unsigned char> mine;
    SNCCL_TRY(s->end->workerAddress(&mine));
    SNCCL_TRY(s->end->sendCtrl(kAmHello, head.nonce, 0, mine.data(), mine.size()));
    return s;
  }

  UcxRequest* track(Endpoint* e, ucs_status_ptr_t s, bool recv, size_t size) {
    auto* r = new UcxRequest;
    r->end = e;
    r->ucp = UCS_PTR_IS_PTR(s) ? s : nullptr;
    r->recv = recv;
    r->size = size;
    e->live.insert(r);
    return r;
  }
  void finish(UcxRequest* r) {
    if (r->ucp != nullptr) {
      u_->requestCancel(r->end->worker, r->ucp);
      u_->requestFree(r->ucp);
    }
    r->end->live.erase(r);
    delete r;
  }
  void close(Endpoint* e, uint32_t abortCode, bool flush) {
    // The goodbye says whether this end closes in order.
    if (e->ep != nullptr && e->error == UCS_OK) (void)e->sendCtrl(kAmBye, abortCode, e->seq);
    if (abortCode != 0) e->lingerForPeer(kAbortLinger);
    e->destroy(flush && e->error == UCS_OK, std::chrono::milliseconds(2000));
  }
  uint64_t nextNonce() {
    std::lock_guard<std::mutex> lock(mu_);
    return rng_();
  }

  const Ucp* u_ = nullptr;
  ucp_context_h ctx_ = nullptr;
  std::once_flag once_;
  Status initStatus_;
  std::mutex mu_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::map<const Handle*, std::unique_ptr<USend>> connecting_;  // connects waiting for their HELLO to leave
};

}  // namespace

Net* ucxNet() {
  static UcxNet* net = new UcxNet;  // lives until exit, as every plugin instance
  return net;
}

}  // namespace snccl::net
