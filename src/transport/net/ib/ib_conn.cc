#include "transport/net/ib/ib_conn.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "common/log.h"
#include "transport/net/socket/socket_link.h"

namespace snccl::net::ib {

static_assert(kSlots <= 64, "the offer masks keep a bit per slot in 64 bits");

namespace {

enum Kind : uint64_t {
  kData = 1,
  kCts = 2,
  kProbe = 3,
  kRecv = 4,
  kCredit = 5,
  kOffer = 6,
  kRegrant = 7,  // a grant written again after the control queue pair's rail failed
  kNews = 8,     // rail news (ib_wire.h)
  kPing = 9,     // a probe write that checks the peer after the control socket failed
};

uint64_t wrId(Kind k, int slot, int part) { return (uint64_t(k) << 56) | (uint64_t(slot) << 16) | uint64_t(part); }
Kind wrKind(uint64_t id) { return Kind(id >> 56); }
int wrSlot(uint64_t id) { return int((id >> 16) & 0xffff); }
int wrPart(uint64_t id) { return int(id & 0xffff); }

const char* kindName(Kind k) {
  switch (k) {
    case kData: return "data write";
    case kCts: return "credit write";
    case kProbe: return "probe write";
    case kRecv: return "receive";
    case kCredit: return "credit receive";
    case kOffer:
      return "offer write";
    case kRegrant:
      return "credit write";
    case kNews:
      return "rail news write";
    case kPing:
      return "ping write";
    default: return "unknown work request";
  }
}

// What a failed completion most likely means, for the error message.
const char* statusHint(ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return "the peer stopped acknowledging: its host or process is gone, a link is cut, or the path cannot carry "
             "RoCE (NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT bound how long it was retried)";
    case IBV_WC_REM_ACCESS_ERR:
      return "the peer refused the write: its memory is no longer registered (did it exit or abort?)";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "the peer had no receive posted";
    case IBV_WC_WR_FLUSH_ERR: return "the queue pair had already failed";
    case IBV_WC_LOC_PROT_ERR: return "a local buffer was not registered (a bug in snccl)";
    case IBV_WC_REM_OP_ERR: return "the peer could not complete the operation";
    default: return "";
  }
}

bool localFault(ibv_wc_status s) {
  return s == IBV_WC_LOC_LEN_ERR || s == IBV_WC_LOC_QP_OP_ERR || s == IBV_WC_LOC_PROT_ERR ||
         s == IBV_WC_MW_BIND_ERR || s == IBV_WC_LOC_EEC_OP_ERR;
}

std::string gidText(const uint8_t raw[16]) {
  std::array<uint8_t, 16> a{};
  std::memcpy(a.data(), raw, 16);
  return gidString(a);
}

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t randomNonzero() {
  std::random_device rd;
  uint64_t v = 0;
  while (v == 0) v = (uint64_t(rd()) << 32) ^ rd();
  return v;
}

// A completion channel whose fd does not block, or null.
ibv_comp_channel* openChannel(const Verbs* v, ibv_context* ctx) {
  ibv_comp_channel* ch = v->createCompChannel(ctx);
  if (ch == nullptr) return nullptr;
  int fl = ::fcntl(ch->fd, F_GETFL);
  if (fl < 0 || ::fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
    v->destroyCompChannel(ch);
    return nullptr;
  }
  return ch;
}

// Whether the handle's registrations (one per rail of the comm, all of the same range)
// cover [p, p + size).
bool covers(const IbMemHandle* h, int nrails, uintptr_t p, size_t size) {
  if (h == nullptr || h->nrails != nrails) return false;
  const ibv_mr* mr = h->mr[0];
  return p >= reinterpret_cast<uintptr_t>(mr->addr) && p + size <= reinterpret_cast<uintptr_t>(mr->addr) + mr->length;
}

}  // namespace

// ---- Endpoint ----------------------------------------------------------------------

Endpoint::Endpoint(std::vector<const IbPort*> ports, bool sender, ConnParams params, sock::Socket ctl)
    : v_(ports.front()->hca->verbs()), sender_(sender), params_(params), ctl_(std::move(ctl)) {
  nrails_ = int(std::min<size_t>(ports.size(), kMaxRails));
  for (int i = 0; i < nrails_; ++i) rails_[size_t(i)].port = ports[size_t(i)];
  what_ = std::string(sender ? "send to " : "receive from ") + ctl_.peer().hostString();
  probeValue_ = randomNonzero();
}

Endpoint::~Endpoint() {
  for (ibv_qp* qp : qps_) v_->destroyQp(qp);
  for (int i = 0; i < nrails_; ++i) {
    Rail& r = rails_[size_t(i)];
    if (r.cq != nullptr && r.unackedEvents > 0) v_->ackCqEvents(r.cq, r.unackedEvents);  // destroy waits for acks
    if (r.cq != nullptr) v_->destroyCq(r.cq);
    if (r.channel != nullptr) v_->destroyCompChannel(r.channel);
    if (r.regionMr != nullptr) r.port->hca->releaseMr(r.regionMr);
  }
  if (watching_)
    for (int i = 0; i < nrails_; ++i) rails_[size_t(i)].port->hca->unwatch(wakeFd_);
  if (wakeFd_ >= 0) ::close(wakeFd_);
  std::free(region_);
}

Status Endpoint::createResources(int nqps) {
  region_ = static_cast<Region*>(std::aligned_alloc(alignof(Region), sizeof(Region)));
  if (region_ == nullptr) return SystemError("NET/IB: out of memory for a connection's %zu-byte region", sizeof(Region));
  std::memset(static_cast<void*>(region_), 0, sizeof(Region));  // also faults the pages in before the NIC uses them
  // A completion channel per rail lets a thread with nothing to do sleep in poll() until
  // a CQ has news; without them the comm is polled on a timer.
  if (v_->createCompChannel != nullptr) wakeFd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wakeFd_ >= 0) {
    for (int i = 0; i < nrails_; ++i) rails_[size_t(i)].port->hca->watch(wakeFd_);
    watching_ = true;
  }
  // Outstanding completions: receiver 2 x kSlots credit writes + kSlots offers + kSlots x
  // nqps records, and after its control rail failed kSlots grants and kSlots offers written
  // again; sender kSlots x nqps record writes + 2 x kSlots + 8 credit receives; probes.
  const int cqe = kSlots * (nqps + 5) + 2 * nqps + 40;
  rates_ = QpRates(nqps);
  for (int i = 0; i < nrails_; ++i) {
    Rail& r = rails_[size_t(i)];
    SNCCL_ASSIGN_OR_RETURN(r.regionMr, r.port->hca->acquireMr(region_, sizeof(Region), /*control=*/true));
    if (wakeFd_ >= 0) r.channel = openChannel(v_, r.port->hca->ctx());
    r.cq = v_->createCq(r.port->hca->ctx(), cqe, &r.sink, r.channel, 0);
    if (r.cq == nullptr) return ErrnoError(errno, "NET/IB: %s: ibv_create_cq(%d) failed", r.port->label().c_str(), cqe);
  }
  for (int q = 0; q < nqps; ++q) {
    Rail& r = rails_[size_t(qpRail(q, nrails_))];
    ibv_qp_init_attr ia{};
    ia.qp_context = &r.sink;
    ia.send_cq = r.cq;
    ia.recv_cq = r.cq;
    ia.qp_type = IBV_QPT_RC;
    // The receiver's control queue pair: 2 x kSlots grants + kSlots offers, and 2 x kSlots
    // more after a rail failed (regrant: the grants of the messages in flight, their offers).
    ia.cap.max_send_wr = 5 * kSlots + 8;
    ia.cap.max_recv_wr = 2 * kSlots + 8;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    ibv_qp* qp = v_->createQp(r.port->hca->pd(), &ia);
    if (qp == nullptr)
      return ErrnoError(errno, "NET/IB: %s: ibv_create_qp failed (%zu QPs exist on this comm)", r.port->label().c_str(),
                        qps_.size());
    qps_.push_back(qp);
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = uint8_t(r.port->port);
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (int rc = v_->modifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return ErrnoError(rc, "NET/IB: %s: QP 0x%x to INIT failed", r.port->label().c_str(), qp->qp_num);
  }
  // The receiver keeps kSlots zero-length receives posted on every queue pair: each
  // record write of a part consumes one, and at most kSlots requests are in flight, each
  // with one part per queue pair. A queue pair that took the parts of a failed rail may
  // get more records than that for a moment; the sender's NIC then retries them
  // (rnr_retry 7).
  if (!sender_)
    for (int q = 0; q < nqps; ++q) SNCCL_TRY(postRecvs(q, kSlots));
  // The sender's first queue pair of each rail may be the control queue pair (ib_wire.h),
  // which takes the credit writes (RDMA_WRITE_WITH_IMM, so that a sender asleep waiting
  // for a credit gets a completion event). Up to 2 x kSlots can be in flight between two
  // polls of the sender's CQ: the receiver grants kSlots past what it has retired, and it
  // retires only what the sender sent, itself kSlots past what the sender has retired.
  if (sender_)
    for (int q = 0; q < std::min(nrails_, nqps); ++q) SNCCL_TRY(postRecvs(q, 2 * kSlots + 8, kCredit));
  return OkStatus();
}

Status Endpoint::postRecvs(int q, int count, int kind) {
  for (int i = 0; i < count; ++i) {
    ibv_recv_wr wr{};
    wr.wr_id = wrId(Kind(kind), 0, q);
    ibv_recv_wr* bad = nullptr;
    if (int rc = v_->postRecv(qps_[size_t(q)], &wr, &bad))
      return ErrnoError(rc, "NET/IB: %s: ibv_post_recv on QP 0x%x failed", railOf(q).port->label().c_str(),
                        qps_[size_t(q)]->qp_num);
  }
  return OkStatus();
}

Meta Endpoint::localMeta() const {
  Meta m{};
  m.magic = kMetaMagic;
  m.version = kMetaVersion;
  m.nqps = uint16_t(qps_.size());
  m.nrails = uint16_t(nrails_);
  m.tc = uint8_t(params_.qp.tc);
  m.sl = uint8_t(params_.qp.sl);
  m.regionAddr = reinterpret_cast<uint64_t>(region_);
  m.probeValue = probeValue_;
  for (int i = 0; i < nrails_; ++i) {
    const IbPort* p = rails_[size_t(i)].port;
    RailMeta& r = m.rails[i];
    r.ethernet = p->ethernet ? 1 : 0;
    r.mtu = uint8_t(p->mtu);
    r.lid = p->lid;
    r.gidIndex = uint32_t(p->gidIndex);
    std::memcpy(r.gid, p->gid.raw, 16);
    r.regionRkey = rails_[size_t(i)].regionMr->rkey;
    r.port = uint16_t(p->port);
    std::snprintf(r.dev, sizeof r.dev, "%s", p->hca->name().c_str());
  }
  for (size_t q = 0; q < qps_.size(); ++q) m.qpn[q] = qps_[q]->qp_num;
  return m;
}

std::string Endpoint::railPath(int rail, int peerRail) const {
  const IbPort* p = rails_[size_t(rail)].port;
  const RailMeta& r = peer_.rails[peerRail];
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s (GID %s, index %d) to %.64s:%u at %s (GID %s, index %u)", p->label().c_str(),
                gidText(p->gid.raw).c_str(), p->gidIndex, r.dev, unsigned(r.port), ctl_.peer().hostString().c_str(),
                gidText(r.gid).c_str(), unsigned(r.gidIndex));
  return buf;
}

std::string Endpoint::pathDescription() const {
  // Rail i talks to the peer's rail i (ib_wire.h): one path per pair in use.
  const int peerRails = std::max<int>(1, peer_.nrails);
  std::string out;
  for (int i = 0; i < std::max(nrails_, peerRails); ++i)
    out += (i > 0 ? " + " : "") + railPath(qpRail(i, nrails_), qpRail(i, peerRails));
  return out;
}

Status Endpoint::connectQps(const Meta& peer) {
  peer_ = peer;
  if (peer.nqps != qps_.size())
    return InternalError("NET/IB: %s: the peer has %u queue pairs, this end %zu", what_.c_str(), unsigned(peer.nqps),
                         qps_.size());
  for (size_t q = 0; q < qps_.size(); ++q) {
    const IbPort* port = railOf(int(q)).port;
    const RailMeta& pr = peerRailOf(int(q));
    const std::string path = railPath(qpRail(int(q), nrails_), qpRail(int(q), peer_.nrails));
    if (bool(pr.ethernet) != port->ethernet)
      return InvalidUsage("NET/IB: %s: link layers differ on the path %s: this end is %s, the peer %s", what_.c_str(),
                          path.c_str(), port->ethernet ? "Ethernet (RoCE)" : "InfiniBand",
                          pr.ethernet ? "Ethernet (RoCE)" : "InfiniBand");
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = ibv_mtu(std::min<int>(port->mtu, pr.mtu));
    a.dest_qp_num = peer.qpn[q];
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = uint8_t(port->port);
    a.ah_attr.sl = uint8_t(params_.qp.sl);
    a.ah_attr.dlid = pr.lid;
    if (port->ethernet) {
      a.ah_attr.is_global = 1;
      std::memcpy(a.ah_attr.grh.dgid.raw, pr.gid, 16);
      a.ah_attr.grh.sgid_index = uint8_t(port->gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = uint8_t(params_.qp.tc);
    }
    if (int rc = v_->modifyQp(qps_[q], &a,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return ErrnoError(rc, "NET/IB: QP 0x%x to RTR failed on the path %s", qps_[q]->qp_num, path.c_str());
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RTS;
    r.timeout = uint8_t(params_.qp.timeout);
    r.retry_cnt = uint8_t(params_.qp.retryCnt);
    r.rnr_retry = 7;  // no RNR but after a rail failed (createResources); 7 = retry forever
    r.sq_psn = 0;
    r.max_rd_atomic = 1;
    if (int rc = v_->modifyQp(qps_[q], &r,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                  IBV_QP_MAX_QP_RD_ATOMIC))
      return ErrnoError(rc, "NET/IB: QP 0x%x to RTS failed on the path %s", qps_[q]->qp_num, path.c_str());
  }
  return OkStatus();
}

int Endpoint::postProbeWrite(int q, int kind, const uint32_t* imm) {
  ibv_sge sge{reinterpret_cast<uint64_t>(&region_->probeOut), sizeof(uint64_t), railOf(q).regionMr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId(Kind(kind), 0, q);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = imm != nullptr ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (imm != nullptr) wr.imm_data = htonl(*imm);
  wr.wr.rdma.remote_addr = peer_.regionAddr + offsetof(Region, probeIn);
  wr.wr.rdma.rkey = peerRailOf(q).regionRkey;
  ibv_send_wr* bad = nullptr;
  return v_->postSend(qps_[size_t(q)], &wr, &bad);
}

Status Endpoint::postProbes() {
  region_->probeOut = probeValue_;
  for (size_t q = 0; q < qps_.size(); ++q)
    if (int rc = postProbeWrite(int(q), kProbe, nullptr))
      return ErrnoError(rc, "NET/IB: posting the probe write on %s failed", pathDescription().c_str());
  return OkStatus();
}

Result<bool> Endpoint::probeDone() {
  SNCCL_TRY(progress());
  const uint64_t in = __atomic_load_n(&region_->probeIn, __ATOMIC_ACQUIRE);
  return probesDone_ == int(qps_.size()) && in == peer_.probeValue;
}

int Endpoint::qpIndex(int rail, uint32_t qpn) const {
  // QP numbers are per device: the rail whose CQ reported it tells which device.
  for (size_t q = 0; q < qps_.size(); ++q)
    if (qpRail(int(q), nrails_) == rail && qps_[q]->qp_num == qpn) return int(q);
  return -1;
}

Status Endpoint::fail(Status s) {
  if (!failed_.ok()) return failed_;
  failed_ = s;
  // Tell the peer at once, out of band: its queue pairs may be healthy and it would
  // otherwise wait for data that will not come.
  if (ctl_.valid() && !ctlLost_) {
    CtlFrame f{uint32_t(Ctl::kAbort), uint32_t(s.code())};
    ssize_t w = ::send(ctl_.fd(), &f, sizeof f, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
  }
  return failed_;
}

Status Endpoint::completionError(int rail, const ibv_wc& wc) {
  const Kind k = wrKind(wc.wr_id);
  const int q = qpIndex(rail, wc.qp_num);
  const std::string path = q >= 0 ? railPath(rail, qpRail(q, std::max<int>(1, peer_.nrails))) : pathDescription();
  const char* hint = statusHint(wc.status);
  std::string msg = "NET/IB: " + what_ + ": " + kindName(k) + " on QP 0x";
  char buf[768];
  std::snprintf(buf, sizeof buf, "%x completed with status '%s' (%d), vendor error 0x%x%s%s; path %s", wc.qp_num,
                v_->wcStatusStr(wc.status), int(wc.status), wc.vendor_err, *hint ? ": " : "", hint, path.c_str());
  msg += buf;
  return localFault(wc.status) ? SystemError("%s", msg.c_str()) : RemoteError("%s", msg.c_str());
}

Status Endpoint::handleCompletion(int rail, const ibv_wc& wc) {
  // After the first failure the queue pairs flush everything still posted; the first
  // error is the cause and is kept. A flush seen first is itself a consequence (a fatal
  // event, a port going down, the peer's failure): give its news a moment to arrive, so
  // the error names the cause.
  // Any first error may be this node's own doing (a port or link going down makes the
  // queue pairs fail with local or retry errors before the event says why): look for a
  // local cause the same way.
  // A rail the connection can live without is given up instead, whatever the error
  // (ib_wire.h; should the cause be the peer's, the other rails fail next), and what its
  // queue pairs flush afterwards is expected.
  const Kind k = wrKind(wc.wr_id);
  if (!sender_ && (k == kOffer || k == kRegrant)) {
    // The staged entry may be reused once the write that reads it is done, failed or
    // flushed; an older write of it on a rail given up does not count.
    const int slot = wrSlot(wc.wr_id) % kSlots;
    if (entryRail_[k == kOffer ? 1 : 0][slot] == rail)
      (k == kOffer ? offersBusy_ : grantsBusy_) &= ~(uint64_t(1) << slot);
  }
  if (wc.status != IBV_WC_SUCCESS && railDead(rail)) return OkStatus();
  if (wc.status != IBV_WC_SUCCESS && canLoseRail(rail) && failed_.ok()) {
    SNCCL_TRY(checkControl(true));  // the peer's failure notice, if it came first, names the cause
    return loseRail(
        rail, format("%s on QP 0x%x completed with status '%s'", kindName(k), wc.qp_num, v_->wcStatusStr(wc.status)));
  }
  if (wc.status != IBV_WC_SUCCESS && failed_.ok()) {
    for (int i = 0; i < 100 && failed_.ok(); ++i) {
      Status s = checkHealth();
      if (s.ok() && i == 0) s = checkLink();
      if (s.ok() && wc.status == IBV_WC_WR_FLUSH_ERR) s = checkControl(true);
      if (!s.ok()) return s;
      if (wc.status != IBV_WC_WR_FLUSH_ERR && i >= 20) break;  // 20 ms for a local event
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (wc.status != IBV_WC_SUCCESS) return fail(completionError(rail, wc));
  switch (k) {
    case kCts:
    case kOffer:
    case kRegrant:
    case kNews:
    case kPing:
      return OkStatus();
    case kCredit: {
      // The grant itself is in the FIFO (written by this same operation); the completion
      // only consumed a receive, which goes back. Rail news comes the same way.
      const int q = qpIndex(rail, wc.qp_num);
      if (!sender_ || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || q < 0 || q >= nrails_)
        return fail(InternalError("NET/IB: %s: unexpected credit completion (QP 0x%x, opcode %d)", what_.c_str(),
                                  wc.qp_num, int(wc.opcode)));
      if (!railDead(rail)) SNCCL_TRY(postRecvs(q, 1, kCredit));
      const uint32_t imm = ntohl(wc.imm_data);
      return immSlot(imm) == kNewsSlot ? railNews(imm) : OkStatus();
    }
    case kProbe: ++probesDone_; return OkStatus();
    case kData: {
      IbRequest& r = reqs_[wrSlot(wc.wr_id) % kSlots];
      const int part = wrPart(wc.wr_id), q = qpIndex(rail, wc.qp_num);
      if (q >= 0 && params_.adaptive) rates_.completed(q, nowSec());
      if (!sender_ || q < 0 || !r.live || part >= r.nparts)
        return fail(InternalError("NET/IB: %s: a send completion (QP 0x%x, slot %d, part %d) matches no request in "
                                  "flight", what_.c_str(), wc.qp_num, wrSlot(wc.wr_id), part));
      // A part written again on another queue pair completes there; an earlier write of
      // it (on a rail given up) may still report here, and a part the receiver confirmed
      // in its RailState is done already.
      if (r.partQp[part] != q || (r.doneMask >> part & 1) != 0) return OkStatus();
      if (r.complete)
        return fail(InternalError("NET/IB: %s: a send completion (QP 0x%x, slot %d, part %d) for a finished message",
                                  what_.c_str(), wc.qp_num, wrSlot(wc.wr_id), part));
      r.doneMask |= uint32_t(1) << part;
      if (++r.partsDone == r.nparts) r.complete = true;
      return OkStatus();
    }
    case kRecv: {
      const int q = qpIndex(rail, wc.qp_num);
      const uint32_t imm = ntohl(wc.imm_data);
      const int slot = immSlot(imm), part = immPart(imm);
      if (!sender_ && q >= 0 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && slot == kNewsSlot) {
        if (!railDead(rail)) SNCCL_TRY(postRecvs(q, 1));
        return railNews(imm);
      }
      if (sender_ || q < 0 || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM || slot >= kSlots || part >= kMaxQps)
        return fail(InternalError("NET/IB: %s: unexpected receive completion (QP 0x%x, opcode %d, imm 0x%x)",
                                  what_.c_str(), wc.qp_num, int(wc.opcode), imm));
      IbRequest& r = reqs_[slot];
      DoneRecord rec;
      std::memcpy(&rec, &region_->records[slot][part], sizeof rec);
      // A part of a message whose record already arrived (the slot still holds it): the
      // device delivered the write twice. No sender posts a part twice on a live rail.
      const bool ofSlot = immSeq16(imm) == uint16_t(r.seq & 0xffff) && rec.seq == r.seq;
      if (ofSlot && rec.part == part && r.partsDone > 0 && (r.partsSeen >> part & 1) != 0)
        return fail(
            SystemError("NET/IB: %s: part %d of message %llu arrived a second time on QP 0x%x (%s, rail %d); %s",
                        what_.c_str(), part, static_cast<unsigned long long>(r.seq), wc.qp_num,
                        r.live ? "in flight" : "already retired", rail, kDeliveredTwice));
      if (!r.live || r.complete || !ofSlot)
        return fail(InternalError(
            "NET/IB: %s: a receive completion (QP 0x%x, imm 0x%x, record of message %llu) "
            "matches no posted receive (slot %d %s, message %llu, %d of %d parts seen as 0x%x; "
            "rail %d, queue pair %d, %llu retired, %llu posted, rails 0x%x given up)",
            what_.c_str(), wc.qp_num, imm, static_cast<unsigned long long>(rec.seq), slot,
            r.live ? "in flight" : "free", static_cast<unsigned long long>(r.seq), r.partsDone, r.nparts, r.partsSeen,
            rail, q, static_cast<unsigned long long>(retired_), static_cast<unsigned long long>(posted_), deadRails_));
      const std::string problem =
          recordProblem(rec, r.seq, part, int(qps_.size()), r.size, r.offer != nullptr ? r.offerBytes : kNoOffer,
                        r.partsDone > 0 ? &r.first : nullptr, r.partsSeen);
      if (!problem.empty())
        return fail(InternalError("NET/IB: %s: QP 0x%x: %s", what_.c_str(), wc.qp_num, problem.c_str()));
      if (!railDead(rail)) SNCCL_TRY(postRecvs(q, 1));
      if (r.partsDone == 0) r.first = rec;
      r.partsSeen |= uint32_t(1) << rec.part;
      r.nparts = rec.nparts;
      r.imm = rec.imm;
      if (++r.partsDone == r.nparts) {
        r.size = rec.size;
        r.complete = true;
      }
      return OkStatus();
    }
  }
  return fail(InternalError("NET/IB: %s: completion with unknown work request id 0x%llx on QP 0x%x", what_.c_str(),
                            static_cast<unsigned long long>(wc.wr_id), wc.qp_num));
}

Status Endpoint::progress() {
  if (!failed_.ok()) return failed_;
  if (wakeSet_) {
    uint64_t n = 0;
    ssize_t r = ::read(wakeFd_, &n, sizeof n);
    (void)r;
    wakeSet_ = false;
  }
  for (int i = 0; i < npending_; ++i) SNCCL_TRY(handleCompletion(pendingRail_[i], pending_[i]));
  npending_ = 0;
  SNCCL_TRY(pollRails((uint32_t(1) << nrails_) - 1));
  SNCCL_TRY(checkHealth());
  SNCCL_TRY(checkControl(false));
  // A receiver that gave up rails reports only now, when every completion is handled.
  while (stateOwed_) {
    stateOwed_ = false;
    SNCCL_TRY(sendRailState());
  }
  return OkStatus();
}

Status Endpoint::pollRails(uint32_t mask) {
  for (int rail = 0; rail < nrails_; ++rail) {
    if ((mask >> rail & 1) == 0) continue;
    for (;;) {
      ibv_wc wcs[16];
      int n = v_->pollCq(rails_[size_t(rail)].cq, 16, wcs);
      if (n < 0) return fail(SystemError("NET/IB: %s: ibv_poll_cq failed (%d)", what_.c_str(), n));
      for (int i = 0; i < n; ++i) SNCCL_TRY(handleCompletion(rail, wcs[i]));
      if (n < 16) break;
    }
  }
  return OkStatus();
}

int Endpoint::liveQps(int* live) const {
  int n = 0;
  for (int q = 0; q < int(qps_.size()); ++q)
    if (!railDead(qpRail(q, nrails_))) live[n++] = q;
  return n;
}

bool Endpoint::railFault(int rail) const {
  const Rail& r = rails_[size_t(rail)];
  return r.port->hca->fatal() || !r.port->hca->portUp(r.port->port) ||
         r.sink.event.load(std::memory_order_acquire) >= 0;
}

Status Endpoint::checkHealth() {
  // This node's own faults first: a port that went down or a dead device also fails
  // the queue pairs on it. A rail the connection can live without is given up instead.
  for (int i = 0; i < nrails_; ++i) {
    const Rail& r = rails_[size_t(i)];
    if (railDead(i) || !railFault(i)) continue;
    std::string why;
    bool local = true;  // this node's fault, not the connection's
    if (r.port->hca->fatal()) {
      why = "device " + r.port->hca->name() + " reported a fatal error";
    } else if (!r.port->hca->portUp(r.port->port)) {
      why = "port " + r.port->label() + " is down";
    } else {
      why = format("asynchronous event '%s' on the connection (%s)",
                   v_->eventTypeStr(ibv_event_type(r.sink.event.load(std::memory_order_acquire))),
                   r.port->label().c_str());
      local = false;
    }
    if (canLoseRail(i)) {
      SNCCL_TRY(loseRail(i, why));
      continue;
    }
    const std::string msg = "NET/IB: " + what_ + ": " + why + "; path " + pathDescription();
    return fail(local ? SystemError("%s", msg.c_str()) : RemoteError("%s", msg.c_str()));
  }
  return OkStatus();
}

// The first live rail whose Ethernet interface is down, with why; "" when none is.
std::string Endpoint::linkProblem(int* rail) const {
  for (int i = 0; i < nrails_; ++i) {
    const IbPort* p = rails_[size_t(i)].port;
    std::string problem = railDead(i) || p->netdev.empty() ? "" : socknet::interfaceProblem(p->netdev);
    if (!problem.empty()) {
      *rail = i;
      return problem;
    }
  }
  return "";
}

Status Endpoint::checkLink() {
  // RoCE: the port follows its Ethernet interface, whose state is read fresh (one
  // netlink query: only on the error path), since the port event may come later than
  // the failures the link causes.
  for (;;) {
    int rail = 0;
    std::string local = linkProblem(&rail);
    if (local.empty()) return OkStatus();
    const std::string label = rails_[size_t(rail)].port->label();
    if (!canLoseRail(rail))
      return fail(SystemError("NET/IB: %s: port %s is down: this node's network link is down: %s; path %s",
                              what_.c_str(), label.c_str(), local.c_str(), pathDescription().c_str()));
    SNCCL_TRY(loseRail(rail, "port " + label + " is down: this node's network link is down: " + local));
  }
}

// ---- Rail failover (ib_wire.h) -----------------------------------------------------

bool Endpoint::canLoseRail(int rail) const {
  if (nrails_ < 2 || peer_.nrails != nrails_) return false;
  const uint32_t live = ((uint32_t(1) << nrails_) - 1) & ~deadRails_ & ~(uint32_t(1) << rail);
  return live != 0;
}

int Endpoint::ctlQp() const {
  for (int rail = 0; rail < nrails_; ++rail)
    if (!railDead(rail)) return rail;  // queue pair r is rail r's first
  return 0;
}

Status Endpoint::loseRail(int rail, const std::string& why) {
  if (railDead(rail)) return OkStatus();
  SN_WARN("NET/IB : %s: rail %s failed (%s); the connection goes on over the other rails", what_.c_str(),
          rails_[size_t(rail)].port->label().c_str(), why.c_str());
  SNCCL_TRY(stopRails(uint32_t(1) << rail));
  if (!sender_) {
    stateOwed_ = true;  // progress() sends it
    return OkStatus();
  }
  return sendRailDown();
}

Status Endpoint::stopRails(uint32_t mask) {
  const int ctlBefore = ctlQp();
  deadRails_ |= mask;
  // In the error state a queue pair takes no more writes and flushes what it has posted.
  for (size_t q = 0; q < qps_.size(); ++q) {
    if ((mask >> qpRail(int(q), nrails_) & 1) == 0) continue;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    if (int rc = v_->modifyQp(qps_[q], &a, IBV_QP_STATE))
      return fail(ErrnoError(rc, "NET/IB: %s: QP 0x%x to ERR failed", what_.c_str(), qps_[q]->qp_num));
  }
  return !sender_ && ctlQp() != ctlBefore ? regrant() : OkStatus();
}

Status Endpoint::regrant() {
  // The grants and offers of messages not retired may have been lost with the old control
  // queue pair. Writing them again is harmless: the same bytes land in the same entries,
  // and the sender reads an entry only when it starts its message. Until a rewritten
  // grant's write is done its staging entry is kept (stageRecv).
  const int q = ctlQp();
  const int rail = qpRail(q, nrails_);
  ibv_sge sges[2 * kSlots];
  ibv_send_wr wrs[2 * kSlots];
  int n = 0;
  for (uint64_t seq = retired_; seq < granted_; ++seq) {
    const int slot = int(seq % kSlots);
    const uint64_t bit = uint64_t(1) << slot;
    if (reqs_[slot].offer != nullptr && (offersOwed_ & bit) == 0) {
      prepareEntryWrite(kOffer, slot, q, &sges[n], &wrs[n]);
      offersBusy_ |= bit;
      entryRail_[1][slot] = uint8_t(rail);
      ++n;
    }
    prepareEntryWrite(kRegrant, slot, q, &sges[n], &wrs[n]);
    wrs[n].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wrs[n].imm_data = htonl(packImm(seq));
    grantsBusy_ |= bit;
    entryRail_[0][slot] = uint8_t(rail);
    ++n;
  }
  SN_INFO(log::kNet, "NET/IB : %s: grants of messages %llu to %llu written again on QP 0x%x (%d writes)", what_.c_str(),
          static_cast<unsigned long long>(retired_), static_cast<unsigned long long>(granted_), qps_[size_t(q)]->qp_num,
          n);
  if (n == 0) return OkStatus();
  for (int i = 0; i + 1 < n; ++i) wrs[i].next = &wrs[i + 1];
  ibv_send_wr* bad = nullptr;
  if (int rc = v_->postSend(qps_[size_t(q)], wrs, &bad))
    return fail(ErrnoError(rc, "NET/IB: %s: ibv_post_send (%d credits written again) on QP 0x%x failed", what_.c_str(),
                           n, qps_[size_t(q)]->qp_num));
  return OkStatus();
}

Status Endpoint::sendRailDown() {
  // The immediate carries the news; the receiver keeps receives posted on every queue
  // pair.
  const int q = ctlQp();
  const uint32_t imm = railDownImm(deadRails_);
  if (int rc = postProbeWrite(q, kNews, &imm))
    return fail(ErrnoError(rc, "NET/IB: %s: a rail failed, and the peer cannot be told: ibv_post_send on QP 0x%x",
                           what_.c_str(), qps_[size_t(q)]->qp_num));
  return OkStatus();
}

Status Endpoint::sendRailState() {
  // The records that landed on the failed rails before their queue pairs stopped are in
  // their completion queues (the ones armWait kept were handled by progress()): take
  // them all, then say what arrived. Each report has its own entry: rails only fail,
  // and the last one cannot, so there are at most kMaxRails - 1.
  SNCCL_TRY(pollRails(deadRails_));
  if (reportsSent_ >= kMaxRails - 1)
    return fail(
        InternalError("NET/IB: %s: rail report %d of at most %d", what_.c_str(), reportsSent_ + 1, kMaxRails - 1));
  const int k = reportsSent_++;
  RailState& st = region_->railStates[k];
  st.rails = deadRails_;
  st.retired = retired_;
  st.posted = posted_;
  for (int slot = 0; slot < kSlots; ++slot) {
    const IbRequest& r = reqs_[slot];
    st.seq[slot] = r.live ? r.seq : UINT64_MAX;
    st.partsSeen[slot] = r.live ? r.partsSeen : 0;
  }
  settledRails_ = deadRails_;
  const int q = ctlQp();
  SN_INFO(log::kNet, "NET/IB : %s: rail report %d (rails 0x%x given up, %llu messages retired, %llu posted) on QP 0x%x",
          what_.c_str(), k, deadRails_, static_cast<unsigned long long>(retired_),
          static_cast<unsigned long long>(posted_), qps_[size_t(q)]->qp_num);
  ibv_sge sge{reinterpret_cast<uint64_t>(&st), sizeof st, railOf(q).regionMr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = wrId(kNews, k, q);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(railStateImm(k));
  wr.wr.rdma.remote_addr = peer_.regionAddr + offsetof(Region, railStates) + size_t(k) * sizeof(RailState);
  wr.wr.rdma.rkey = peerRailOf(q).regionRkey;
  ibv_send_wr* bad = nullptr;
  if (int rc = v_->postSend(qps_[size_t(q)], &wr, &bad))
    return fail(ErrnoError(rc, "NET/IB: %s: a rail failed, and the peer cannot be told: ibv_post_send on QP 0x%x",
                           what_.c_str(), qps_[size_t(q)]->qp_num));
  return OkStatus();
}

Status Endpoint::railNews(uint32_t imm) {
  const uint32_t arg = imm >> 16;
  if (!sender_ && immPart(imm) == kNewsRailDown) {
    // The sender gave up rails: the receiver stops them and says what it has.
    const uint32_t fresh = arg & ~settledRails_ & ((uint32_t(1) << nrails_) - 1);
    if (fresh == 0) return OkStatus();
    SNCCL_TRY(peerLostRails(fresh));
    stateOwed_ = true;  // progress() sends it
    return OkStatus();
  }
  if (sender_ && immPart(imm) == kNewsRailState && arg < uint32_t(kMaxRails - 1)) {
    RailState st;
    std::memcpy(&st, &region_->railStates[arg], sizeof st);
    return railStateArrived(st);
  }
  return fail(InternalError("NET/IB: %s: rail news with unknown immediate 0x%x", what_.c_str(), imm));
}

Status Endpoint::railStateArrived(const RailState& st) {
  const uint32_t mask = st.rails & ((uint32_t(1) << nrails_) - 1);
  if ((mask & ~settledRails_) == 0) return OkStatus();  // nothing new
  SNCCL_TRY(peerLostRails(mask));
  settledRails_ |= mask;
  return resendLostParts(st);
}

Status Endpoint::peerLostRails(uint32_t mask) {
  for (int rail = 0; rail < nrails_; ++rail) {
    if ((mask >> rail & 1) == 0 || railDead(rail)) continue;
    if (!canLoseRail(rail))
      return fail(RemoteError("NET/IB: %s: the peer gave up rail %d, which this connection cannot lose; path %s",
                              what_.c_str(), rail, pathDescription().c_str()));
    SN_WARN("NET/IB : %s: the peer gave up rail %s; the connection goes on over the other rails", what_.c_str(),
            rails_[size_t(rail)].port->label().c_str());
    SNCCL_TRY(stopRails(uint32_t(1) << rail));
  }
  return OkStatus();
}

Status Endpoint::resendLostParts(const RailState& st) {
  int live[kMaxQps];
  const int nlive = liveQps(live);
  int turn = 0;
  SN_INFO(log::kNet, "NET/IB : %s: the receiver's rail report (rails 0x%x, %llu retired) for messages %llu to %llu",
          what_.c_str(), st.rails, static_cast<unsigned long long>(st.retired),
          static_cast<unsigned long long>(retired_), static_cast<unsigned long long>(posted_));
  for (uint64_t seq = retired_; seq < posted_; ++seq) {
    IbRequest& r = reqs_[seq % kSlots];
    if (!r.live || r.complete) continue;
    const int slot = int(seq % kSlots);
    const bool retired = seq < st.retired;  // the receiver has all of it
    // A message granted after the report (its grant came on a live queue pair, and the
    // sender took it before the report): none of it had arrived.
    const bool later = seq >= st.posted;
    if (!retired && !later && st.seq[slot] != seq)
      return fail(InternalError("NET/IB: %s: after a rail failed, the peer has no receive for message %llu in flight",
                                what_.c_str(), static_cast<unsigned long long>(seq)));
    const uint32_t seen = later ? 0 : st.partsSeen[slot];
    size_t off = 0;
    for (int part = 0; part < r.nparts; off += r.partLen[part], ++part) {
      if ((r.doneMask >> part & 1) != 0) continue;
      if (retired || (seen >> part & 1) != 0) {
        r.doneMask |= uint32_t(1) << part;
        ++r.partsDone;
      } else if (railDead(qpRail(r.partQp[part], nrails_))) {
        SNCCL_TRY(postPart(r, part, off, live[turn++ % nlive]));
      }
    }
    if (r.partsDone == r.nparts) r.complete = true;
  }
  SN_INFO(log::kNet, "NET/IB : %s: %d parts written again", what_.c_str(), turn);
  return OkStatus();
}

Status Endpoint::checkControl(bool force) {
  if (ctlLost_) return OkStatus();
  // The coarse clock (the kernel's tick, a few ms) is read from memory: a waiting rank
  // polls this once per pass, and where the precise clock is a system call (a guest on
  // an emulated HPET) that alone costs more than the poll.
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  const int64_t now = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
  if (!force && now < nextCtlCheckNs_) return OkStatus();
  nextCtlCheckNs_ = now + 1000000;  // a system call per millisecond (or tick), not per poll
  for (;;) {
    CtlFrame f{};
    ssize_t k = ::recv(ctl_.fd(), &f, sizeof f, MSG_DONTWAIT | MSG_PEEK);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return OkStatus();
    bool outstanding = false;
    for (const IbRequest& r : reqs_) outstanding = outstanding || (r.live && !r.complete);
    if (k <= 0) {
      const int err = k < 0 ? errno : 0;
      if (peerBye_ && !outstanding) {
        ctlClosed_ = true;
        return OkStatus();
      }
      if (err != 0) {
        // The control connection failed (reset, or TCP gave up: a cut link). A rail whose
        // link is down here is given up, or the connection fails naming it; a path that
        // timed out (not a peer that reset it) may be the control socket's alone.
        SNCCL_TRY(checkLink());
        if (err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == ENETDOWN) return controlLost(err);
        ctlClosed_ = true;
        return fail(RemoteError("NET/IB: %s: the control connection to the peer failed (%s)%s; path %s",
                                what_.c_str(), std::strerror(err), outstanding ? " with operations in flight" : "",
                                pathDescription().c_str()));
      }
      ctlClosed_ = true;
      return fail(RemoteError("NET/IB: %s: the peer closed the connection%s (process gone?); path %s", what_.c_str(),
                              outstanding ? " with operations in flight" : "", pathDescription().c_str()));
    }
    if (size_t(k) < sizeof f) return OkStatus();  // the rest of the frame is on its way
    k = ::recv(ctl_.fd(), &f, sizeof f, MSG_DONTWAIT);
    if (f.type == uint32_t(Ctl::kAbort)) {
      if (peerAbort_ == 0 || (f.code >> 8) != 0) peerAbort_ = f.code;
      return fail(RemoteError("NET/IB: %s: the peer reported a failure (%s); path %s", what_.c_str(),
                              resultName(int(f.code & 0xff)), pathDescription().c_str()));
    }
    if (f.type == uint32_t(Ctl::kBye)) {
      peerBye_ = true;
      if (outstanding)
        return fail(RemoteError("NET/IB: %s: the peer closed the connection with operations in flight; path %s",
                                what_.c_str(), pathDescription().c_str()));
    }
  }
}

Status Endpoint::controlLost(int err) {
  // The queue pairs may well run over another network than the TCP socket (or over
  // rails that live on). A probe write on each live one tells whether the peer is still
  // there: if not, it fails with the retry error, naming the path.
  ctlLost_ = true;
  SN_WARN(
      "NET/IB : %s: the control connection to the peer failed (%s); the connection goes on over its queue "
      "pairs, without failure notices from the peer",
      what_.c_str(), std::strerror(err));
  int live[kMaxQps];
  const int nlive = liveQps(live);
  for (int i = 0; i < nlive; ++i) {
    const int q = live[i];
    if (int rc = postProbeWrite(q, kPing, nullptr))
      return fail(
          ErrnoError(rc, "NET/IB: %s: ibv_post_send (ping) on QP 0x%x failed", what_.c_str(), qps_[size_t(q)]->qp_num));
  }
  return OkStatus();
}

Result<IbRequest*> Endpoint::isend(void* data, size_t size, int tag, uint32_t imm, MemHandle* mh) {
  if (!failed_.ok()) return failed_;
  const uint64_t seq = posted_;
  if (seq - retired_ >= uint64_t(kSlots)) return nullptr;
  const int slot = int(seq % kSlots);
  const CtsEntry* e = &region_->fifo[slot];
  if (__atomic_load_n(&e->idx, __ATOMIC_ACQUIRE) != seq + 1) {
    // No credit yet: look for failures meanwhile. That progress() (or the caller's next
    // test()) may take the credit's completion event while the credit lands: look again
    // now, and have armWait() look before the caller sleeps.
    SNCCL_TRY(progress());
    if (__atomic_load_n(&e->idx, __ATOMIC_ACQUIRE) != seq + 1) {
      creditWanted_ = true;
      return nullptr;
    }
  }
  creditWanted_ = false;
  const uint64_t cap = e->size;
  const int32_t ctsTag = e->tag;
  if (ctsTag != tag)
    return fail(InternalError("NET/IB: %s: message %llu has tag %d, the receive posted for it tag %d", what_.c_str(),
                              static_cast<unsigned long long>(seq), tag, ctsTag));
  if (size > cap)
    return fail(InvalidUsage("NET/IB: %s: message %llu has %zu bytes, its receive %llu", what_.c_str(),
                             static_cast<unsigned long long>(seq), size, static_cast<unsigned long long>(cap)));
  auto* h = static_cast<IbMemHandle*>(mh);
  const auto p = reinterpret_cast<uintptr_t>(data);
  if (size > 0 && !covers(h, nrails_, p, size))
    return InvalidUsage("NET/IB: %s: isend of %zu bytes at %p that its memory handle does not cover", what_.c_str(),
                        size, data);
  // The receiver's offer for this message, if it wrote one in time and the size is the
  // one offered; decided here for every part, and said in every record (ib_wire.h).
  const CtsEntry* offer = &region_->offers[slot];
  const bool retargeted =
      size > 0 && __atomic_load_n(&offer->idx, __ATOMIC_ACQUIRE) == seq + 1 && offer->size == uint64_t(size);
  const CtsEntry dest = retargeted ? *offer : *e;
  int live[kMaxQps];
  const int nlive = liveQps(live);
  size_t lens[kMaxQps];
  int nparts = 0;
  if (params_.adaptive) {
    const double now = nowSec();
    double rates[kMaxQps];
    size_t backlog[kMaxQps];
    for (int i = 0; i < nlive; ++i) {
      rates[i] = rates_.rate(live[i], now);
      backlog[i] = rates_.outstanding(live[i]);
    }
    nparts = splitByRate(size, nlive, params_.qp.splitBytes, std::span<const double>(rates, size_t(nlive)),
                         std::span<const size_t>(backlog, size_t(nlive)), lens);
  } else {
    nparts = splitEqual(size, nlive, params_.qp.splitBytes, lens);
  }
  IbRequest& r = reqs_[slot];
  r = IbRequest{};
  r.ep = this;
  r.seq = seq;
  r.live = true;
  r.nparts = nparts;
  r.size = size;
  r.imm = imm;
  r.data = static_cast<const char*>(data);
  r.mh = mh;
  r.dest = dest;
  r.retargeted = retargeted;
  ++posted_;
  size_t off = 0;
  for (int part = 0; part < nparts; off += lens[part], ++part) {
    r.partLen[part] = uint32_t(lens[part]);
    SNCCL_TRY(postPart(r, part, off, live[partQp(seq, part, nparts, nlive)]));
  }
  return &r;
}

Status Endpoint::postPart(IbRequest& r, int part, size_t off, int q) {
  const int slot = int(r.seq % kSlots);
  const int rail = qpRail(q, nrails_);
  const size_t len = r.partLen[part];
  r.partQp[part] = uint8_t(q);
  if (params_.adaptive) rates_.posted(q, len, nowSec());
  qpBytes_[q] += len;
  DoneRecord& rec = region_->records[slot][part];
  rec = DoneRecord{r.seq, r.size, r.imm, uint16_t(r.nparts), uint16_t(part), r.retargeted ? kRecordRetargeted : 0, 0};
  ibv_sge sges[2];
  ibv_send_wr wrs[2]{};
  int n = 0;
  if (len > 0) {
    const auto* h = static_cast<const IbMemHandle*>(r.mh);
    sges[n] = ibv_sge{reinterpret_cast<uintptr_t>(r.data) + off, uint32_t(len), h->mr[size_t(rail)]->lkey};
    wrs[n].wr_id = wrId(kData, slot, part);
    wrs[n].opcode = IBV_WR_RDMA_WRITE;
    wrs[n].wr.rdma.remote_addr = r.dest.addr + off;
    wrs[n].wr.rdma.rkey = r.dest.rkey[qpRail(q, peer_.nrails)];
    ++n;
  }
  sges[n] = ibv_sge{reinterpret_cast<uint64_t>(&rec), sizeof rec, rails_[size_t(rail)].regionMr->lkey};
  wrs[n].wr_id = wrId(kData, slot, part);
  wrs[n].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wrs[n].send_flags = IBV_SEND_SIGNALED;
  wrs[n].imm_data = htonl(packImm(r.seq, part));
  wrs[n].wr.rdma.remote_addr =
      peer_.regionAddr + offsetof(Region, records) + (size_t(slot) * kMaxQps + size_t(part)) * sizeof(DoneRecord);
  wrs[n].wr.rdma.rkey = peerRailOf(q).regionRkey;
  ++n;
  for (int i = 0; i < n; ++i) {
    wrs[i].sg_list = &sges[i];
    wrs[i].num_sge = 1;
    wrs[i].next = i + 1 < n ? &wrs[i + 1] : nullptr;
  }
  ibv_send_wr* bad = nullptr;
  if (int rc = v_->postSend(qps_[size_t(q)], wrs, &bad))
    return fail(ErrnoError(rc, "NET/IB: %s: ibv_post_send on QP 0x%x failed", what_.c_str(), qps_[size_t(q)]->qp_num));
  return OkStatus();
}

Result<IbRequest*> Endpoint::irecv(void* data, size_t size, int tag, MemHandle* mh) {
  SNCCL_ASSIGN_OR_RETURN(IbRequest * r, stageRecv(data, size, tag, mh));
  if (r != nullptr) SNCCL_TRY(flushGrants());
  return r;
}

Result<IbRequest*> Endpoint::irecvWithOffer(void* data, size_t size, int tag, MemHandle* mh, void* offer,
                                            size_t offerBytes, MemHandle* offerMh, bool* offered) {
  *offered = false;
  SNCCL_ASSIGN_OR_RETURN(IbRequest * r, stageRecv(data, size, tag, mh));
  if (r == nullptr) return r;
  *offered = retarget(r, offer, offerBytes, offerMh);  // staged: it goes in front of the grant
  SNCCL_TRY(flushGrants());
  return r;
}

Result<IbRequest*> Endpoint::stageRecv(void* data, size_t size, int tag, MemHandle* mh) {
  if (!failed_.ok()) return failed_;
  const uint64_t seq = posted_;
  const int slot = int(seq % kSlots);
  if (seq - retired_ >= uint64_t(kSlots)) return nullptr;
  if ((grantsBusy_ >> slot & 1) != 0) {
    SNCCL_TRY(progress());  // the rewritten grant's completion frees the slot
    if ((grantsBusy_ >> slot & 1) != 0) return nullptr;
  }
  auto* h = static_cast<IbMemHandle*>(mh);
  const auto p = reinterpret_cast<uintptr_t>(data);
  if (size > 0 && !covers(h, nrails_, p, size))
    return InvalidUsage("NET/IB: %s: irecv of %zu bytes at %p that its memory handle does not cover", what_.c_str(),
                        size, data);
  IbRequest& r = reqs_[slot];
  r = IbRequest{};
  r.ep = this;
  r.seq = seq;
  r.live = true;
  r.size = size;  // the capacity until the message says how much arrived
  r.data = static_cast<const char*>(data);
  r.tag = tag;
  CtsEntry& c = region_->fifo[slot];
  c = CtsEntry{uint64_t(p), uint64_t(size), {}, tag, 0, seq + 1};
  for (int i = 0; i < nrails_ && h != nullptr; ++i) c.rkey[i] = h->mr[size_t(i)]->rkey;
  ++posted_;  // its grant is staged; flushGrants writes it
  return &r;
}

void Endpoint::prepareEntryWrite(int kind, int slot, int q, ibv_sge* sge, ibv_send_wr* wr) const {
  const bool grant = kind != kOffer;
  const CtsEntry* src = grant ? &region_->fifo[slot] : &region_->offers[slot];
  const size_t at = grant ? offsetof(Region, fifo) : offsetof(Region, offers);
  *sge = ibv_sge{reinterpret_cast<uint64_t>(src), sizeof(CtsEntry), railOf(q).regionMr->lkey};
  *wr = ibv_send_wr{};
  wr->wr_id = wrId(Kind(kind), slot, 0);
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->opcode = IBV_WR_RDMA_WRITE;
  wr->send_flags = IBV_SEND_SIGNALED;
  wr->wr.rdma.remote_addr = peer_.regionAddr + at + size_t(slot) * sizeof(CtsEntry);
  wr->wr.rdma.rkey = peerRailOf(q).regionRkey;
}

Status Endpoint::flushGrants() {
  // One post for all: a doorbell (a system call on some providers) per batch, not per
  // receive. An offer goes first: RC places the writes of one queue pair in order, so a
  // sender that sees the grant sees the offer.
  ibv_sge sges[2 * kSlots];
  ibv_send_wr wrs[2 * kSlots];  // prepareEntryWrite fills the entries used
  int n = 0;
  const int q = ctlQp();
  for (uint64_t seq = granted_; seq < posted_; ++seq) {
    const int slot = int(seq % kSlots);
    const uint64_t bit = uint64_t(1) << slot;
    if ((offersOwed_ & bit) != 0) {
      prepareEntryWrite(kOffer, slot, q, &sges[n], &wrs[n]);
      offersOwed_ &= ~bit;
      offersBusy_ |= bit;
      entryRail_[1][slot] = uint8_t(qpRail(q, nrails_));
      ++n;
    }
    prepareEntryWrite(kCts, slot, q, &sges[n], &wrs[n]);
    wrs[n].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;  // wakes a sender waiting for credit
    wrs[n].imm_data = htonl(packImm(seq));
    ++n;
  }
  granted_ = posted_;
  if (n == 0) return OkStatus();
  for (int i = 0; i + 1 < n; ++i) wrs[i].next = &wrs[i + 1];
  ibv_send_wr* bad = nullptr;
  if (int rc = v_->postSend(qps_[size_t(q)], wrs, &bad))
    return fail(ErrnoError(rc, "NET/IB: %s: ibv_post_send (%d credits) on QP 0x%x failed", what_.c_str(), n,
                           qps_[size_t(q)]->qp_num));
  return OkStatus();
}

bool Endpoint::retarget(IbRequest* r, void* data, size_t size, MemHandle* mh) {
  const int slot = int(r->seq % kSlots);
  const uint64_t bit = uint64_t(1) << slot;
  const auto p = reinterpret_cast<uintptr_t>(data);
  // Not once a record arrived (the sender has chosen), and not while this slot's last
  // offer is still being written from its staging entry.
  if (sender_ || !failed_.ok() || !r->live || r->complete || r->partsDone > 0 || r->offer != nullptr || size == 0 ||
      ((offersBusy_ | offersOwed_) & bit) != 0 || !covers(static_cast<IbMemHandle*>(mh), nrails_, p, size))
    return false;
  const auto* h = static_cast<IbMemHandle*>(mh);
  CtsEntry& c = region_->offers[slot];
  c = CtsEntry{uint64_t(p), uint64_t(size), {}, r->tag, 0, r->seq + 1};
  for (int i = 0; i < nrails_; ++i) c.rkey[i] = h->mr[size_t(i)]->rkey;
  if (r->seq < granted_) {
    // The grant is out: the sender may take the offer or may already have started.
    ibv_sge sge;
    ibv_send_wr wr;
    const int q = ctlQp();
    prepareEntryWrite(kOffer, slot, q, &sge, &wr);
    ibv_send_wr* bad = nullptr;
    if (int rc = v_->postSend(qps_[size_t(q)], &wr, &bad)) {
      (void)fail(ErrnoError(rc, "NET/IB: %s: ibv_post_send (offer) on QP 0x%x failed", what_.c_str(),
                            qps_[size_t(q)]->qp_num));
      return false;
    }
    offersBusy_ |= bit;
    entryRail_[1][slot] = uint8_t(qpRail(q, nrails_));
  } else {
    offersOwed_ |= bit;  // flushGrants writes it in front of its grant
  }
  r->offer = static_cast<char*>(data);
  r->offerBytes = size;
  return true;
}

Status Endpoint::test(IbRequest* r, bool* done, size_t* size, uint32_t* imm) {
  *done = false;
  SNCCL_TRY(progress());
  // Messages complete in the order they were posted (net.h).
  if (!r->complete || r->seq != retired_) return OkStatus();
  *done = true;
  // An offer the sender did not take in time: the message is where the receive was
  // posted, and goes where retarget() promised.
  if (!sender_ && r->offer != nullptr && r->size == r->offerBytes) {
    if ((r->first.flags & kRecordRetargeted) != 0) {
      ++offersTaken_;
    } else {
      std::memcpy(r->offer, r->data, r->size);
      ++offersCopied_;
    }
  }
  if (size != nullptr) *size = r->size;
  if (imm != nullptr) *imm = r->imm;
  r->live = false;
  ++retired_;
  return OkStatus();
}

bool Endpoint::armWait(std::vector<pollfd>* fds) {
  if (!failed_.ok() || ctlClosed_) return false;
  for (int i = 0; i < nrails_; ++i)
    if (rails_[size_t(i)].channel == nullptr) return false;
  // wakeFd_ is also the devices' alarm (Hca::watch): clear it, then look at what their
  // event threads recorded, which they store before they write.
  uint64_t drained = 0;
  ssize_t k = ::read(wakeFd_, &drained, sizeof drained);
  (void)k;
  wakeSet_ = false;
  bool fault = false;
  for (int i = 0; i < nrails_; ++i) fault = fault || (!railDead(i) && railFault(i));
  for (int i = 0; i < nrails_; ++i) {
    Rail& r = rails_[size_t(i)];
    ibv_cq* cq = nullptr;
    void* ctx = nullptr;
    while (v_->getCqEvent(r.channel, &cq, &ctx) == 0) ++r.unackedEvents;  // non-blocking fd: ends with EAGAIN
    if (r.unackedEvents > 0) {
      v_->ackCqEvents(r.cq, r.unackedEvents);
      r.unackedEvents = 0;
    }
    if (v_->reqNotifyCq(r.cq, 0) != 0) return false;
    // A completion that arrived before the CQ was armed raises no event: look once more,
    // keeping what is found for the next progress().
    int n = v_->pollCq(r.cq, kPendingMax - npending_, pending_ + npending_);
    if (n < 0) return false;
    for (int k = 0; k < n; ++k) pendingRail_[npending_ + k] = i;
    npending_ += n;
  }
  // A credit a send waits for that landed after its completion was taken by progress():
  // no event will come for it.
  const bool credit = sender_ && creditWanted_ && posted_ - retired_ < uint64_t(kSlots) &&
                      __atomic_load_n(&region_->fifo[posted_ % kSlots].idx, __ATOMIC_ACQUIRE) == posted_ + 1;
  if (npending_ > 0 || credit || fault) {
    // Work is already here: a descriptor that is ready now, so the caller does not sleep
    // (a "cannot tell" answer would cost it a timer tick).
    uint64_t one = 1;
    if (!wakeSet_ && ::write(wakeFd_, &one, sizeof one) != sizeof one) return false;
    wakeSet_ = true;
    fds->push_back(pollfd{wakeFd_, POLLIN, 0});
    return true;
  }
  for (int i = 0; i < nrails_; ++i) fds->push_back(pollfd{rails_[size_t(i)].channel->fd, POLLIN, 0});
  if (!ctlLost_) fds->push_back(pollfd{ctl_.fd(), POLLIN, 0});
  fds->push_back(pollfd{wakeFd_, POLLIN, 0});
  return true;
}

void Endpoint::close(uint32_t abortCode) {
  if (sender_ && qps_.size() > 1 && posted_ > 0) {
    // How the striping spread the bytes (adaptive routing gives a slow rail less), and
    // what adaptive routing last estimated of each queue pair.
    std::string spread;
    const double now = nowSec();
    for (size_t q = 0; q < qps_.size(); ++q) {
      spread += format("%s%llu (%s", q > 0 ? ", " : "", static_cast<unsigned long long>(qpBytes_[q]),
                       railOf(int(q)).port->label().c_str());
      if (params_.adaptive) spread += format(", %.1f MB/s", 1e-6 * rates_.rate(int(q), now));
      spread += ")";
    }
    SN_INFO(log::kNet, "NET/IB : %s: %llu messages, bytes per queue pair: %s", what_.c_str(),
            static_cast<unsigned long long>(posted_), spread.c_str());
  }
  if (!sender_ && offersTaken_ + offersCopied_ > 0)
    SN_INFO(log::kNet, "NET/IB : %s: %llu messages, %llu written where the receiver offered, %llu copied there",
            what_.c_str(), static_cast<unsigned long long>(posted_), static_cast<unsigned long long>(offersTaken_),
            static_cast<unsigned long long>(offersCopied_));
  if (ctl_.valid()) {
    CtlFrame f{uint32_t(abortCode != 0 ? Ctl::kAbort : Ctl::kBye), abortCode};
    ssize_t w = ::send(ctl_.fd(), &f, sizeof f, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)w;
    // Wait (bounded) for the peer's own goodbye, so that neither end unregisters memory
    // the other may still write into while it finishes.
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(params_.lingerMs);
    bool heard = peerBye_ || peerAbort_ != 0 || ctlLost_;
    while (!heard) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd pf{ctl_.fd(), POLLIN, 0};
      int pr = ::poll(&pf, 1, int(left.count()));
      if (pr < 0 && errno == EINTR) continue;
      if (pr <= 0) break;
      CtlFrame in{};
      ssize_t k = ::recv(ctl_.fd(), &in, sizeof in, MSG_DONTWAIT);
      if (k <= 0 && !(k < 0 && (errno == EAGAIN || errno == EINTR))) break;  // EOF or error: gone
      if (k == sizeof in && (in.type == uint32_t(Ctl::kBye) || in.type == uint32_t(Ctl::kAbort))) heard = true;
    }
    ctl_.close();
  }
}

// ---- Setup -------------------------------------------------------------------------

Setup::Setup(std::vector<const IbPort*> ports, bool sender, ConnParams params, sock::Socket ctl)
    : sender_(sender), probeTimeoutMs_(params.probeTimeoutMs) {
  fd_ = ctl.fd();
  const int nrails = int(ports.size());
  ep_ = std::make_unique<Endpoint>(std::move(ports), sender, params, std::move(ctl));
  state_ = sender ? State::kSendMeta : State::kRecvMeta;
  if (sender) {
    // NCCL_IB_QPS_PER_CONNECTION on each rail (ib_net.cc keeps the product in range).
    Status s = ep_->createResources(params.qp.qpsPerConn * nrails);
    if (!s.ok()) {
      error_ = s;
      return;
    }
    Meta m = ep_->localMeta();
    buf_.assign(reinterpret_cast<const char*>(&m), reinterpret_cast<const char*>(&m) + sizeof m);
  } else {
    buf_.assign(sizeof(Meta), 0);
  }
}

Status Setup::ioStep(bool send, bool* complete) {
  *complete = false;
  while (done_ < buf_.size()) {
    ssize_t k = send ? ::send(fd_, buf_.data() + done_, buf_.size() - done_, MSG_DONTWAIT | MSG_NOSIGNAL)
                     : ::recv(fd_, buf_.data() + done_, buf_.size() - done_, MSG_DONTWAIT);
    if (k > 0) {
      done_ += size_t(k);
      continue;
    }
    if (k == 0 && !send) return RemoteError("NET/IB: %s: the peer closed the connection during setup", ep_->what().c_str());
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return OkStatus();
    return ErrnoError(errno, "NET/IB: %s: setup", ep_->what().c_str());
  }
  done_ = 0;
  *complete = true;
  return OkStatus();
}

Result<std::unique_ptr<Endpoint>> Setup::step() {
  SNCCL_TRY(error_);
  bool complete = false;
  for (;;) {
    switch (state_) {
      case State::kSendMeta:
        SNCCL_TRY(ioStep(true, &complete));
        if (!complete) return std::unique_ptr<Endpoint>();
        state_ = sender_ ? State::kRecvMeta : State::kRecvReady;
        buf_.assign(sender_ ? sizeof(Meta) : sizeof(CtlFrame), 0);
        break;
      case State::kRecvMeta: {
        SNCCL_TRY(ioStep(false, &complete));
        if (!complete) return std::unique_ptr<Endpoint>();
        std::memcpy(&peer_, buf_.data(), sizeof peer_);
        if (std::string problem = metaProblem(&peer_); !problem.empty())
          return InternalError("NET/IB: %s: %s", ep_->what().c_str(), problem.c_str());
        if (!sender_) SNCCL_TRY(ep_->createResources(peer_.nqps));
        SNCCL_TRY(ep_->connectQps(peer_));
        if (sender_) {
          CtlFrame f{uint32_t(Ctl::kReady), 0};
          buf_.assign(reinterpret_cast<const char*>(&f), reinterpret_cast<const char*>(&f) + sizeof f);
          state_ = State::kSendReady;
        } else {
          Meta m = ep_->localMeta();
          buf_.assign(reinterpret_cast<const char*>(&m), reinterpret_cast<const char*>(&m) + sizeof m);
          state_ = State::kSendMeta;
        }
        break;
      }
      case State::kSendReady:
        SNCCL_TRY(ioStep(true, &complete));
        if (!complete) return std::unique_ptr<Endpoint>();
        SNCCL_TRY(ep_->postProbes());
        probeDeadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(probeTimeoutMs_);
        state_ = State::kProbe;
        break;
      case State::kRecvReady: {
        SNCCL_TRY(ioStep(false, &complete));
        if (!complete) return std::unique_ptr<Endpoint>();
        CtlFrame f{};
        std::memcpy(&f, buf_.data(), sizeof f);
        if (f.type != uint32_t(Ctl::kReady))
          return InternalError("NET/IB: %s: setup expected the peer's ready, got frame %u", ep_->what().c_str(), f.type);
        SNCCL_TRY(ep_->postProbes());
        probeDeadline_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(probeTimeoutMs_);
        state_ = State::kProbe;
        break;
      }
      case State::kProbe: {
        Result<bool> ok = ep_->probeDone();
        if (!ok.ok())
          return Status(ok.status()).addContext("NET/IB: the new connection's probe write failed");
        if (ok.value()) {
          state_ = State::kDone;
          SN_INFO(log::kNet, "NET/IB : %s: connected, path %s", ep_->what().c_str(), ep_->pathDescription().c_str());
          return std::move(ep_);
        }
        if (std::chrono::steady_clock::now() > probeDeadline_)
          return RemoteError("NET/IB: %s: the path %s carried no RDMA write within %d ms, although its TCP control "
                             "connection works: check that both GIDs are routable to each other (same subnet or "
                             "routed, NCCL_IB_GID_INDEX), the MTU, PFC/ECN settings and filters on UDP port 4791",
                             ep_->what().c_str(), ep_->pathDescription().c_str(), probeTimeoutMs_);
        return std::unique_ptr<Endpoint>();
      }
      case State::kDone:
        return InternalError("NET/IB: setup stepped after it finished");
    }
  }
}

}  // namespace snccl::net::ib
