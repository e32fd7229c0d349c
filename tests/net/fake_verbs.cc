#include "net/fake_verbs.h"

#include <arpa/inet.h>
#include <endian.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <set>

#include "common/status.h"

namespace snccl::test {

namespace {

[[noreturn]] __attribute__((format(printf, 1, 2))) void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "fake_verbs: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  va_end(ap);
  std::abort();
}

// The objects handed out. Each embeds the verbs struct as its first member, so the
// pointer the caller holds is the wrapper's address; a pointer is only converted back
// after it was found in the fabric's set of live objects.
struct Context {
  ibv_context ctx{};
  int dev = 0;
  struct Event {
    ibv_event_type type;
    enum Kind { kQp, kCq, kPort, kDevice } kind;
    uint32_t id;  // QP number, CQ handle or port number
    bool dead;    // its QP or CQ was destroyed before the event was taken
  };
  // One eventfd count per queued event (EFD_SEMAPHORE), dead ones included, so that a
  // read of async_fd and a pop of this queue always go together.
  std::deque<Event> events;
};

struct Pd {
  ibv_pd pd{};
  Context* ctx = nullptr;
  int mrs = 0, qps = 0;
};

struct Mr {
  ibv_mr mr{};
  Pd* pd = nullptr;
  uint8_t* base = nullptr;  // the registered memory
  uint64_t iova = 0;        // the address work requests use for `base`
  size_t len = 0;
  unsigned access = 0;
};

struct Cqe {
  ibv_wc wc;
  uint32_t retire;  // send queue slots of wc.qp_num this completion frees when polled
};

struct Channel;

struct Cq {
  ibv_cq cq{};
  Context* ctx = nullptr;
  int capacity = 0;
  std::deque<Cqe> entries;
  int qps = 0;
  int eventsUnacked = 0;
  // Overflowed once: the CQ is in error, as on hardware, and takes no more completions.
  bool broken = false;
  // Completion events (enableCompletionChannels): the channel, whether reqNotifyCq armed
  // the CQ for the next completion, and events taken by getCqEvent and not acked.
  Channel* channel = nullptr;
  bool armed = false;
  int compEventsUnacked = 0;
};

// A completion channel: its fd (an eventfd) is readable while `pending` holds events.
struct Channel {
  ibv_comp_channel ch{};
  Context* ctx = nullptr;
  std::deque<Cq*> pending;
  int cqs = 0;
};

struct Fault {
  ibv_wc_status status;
  uint32_t vendorErr;
};

struct SendWr {
  uint64_t wrId = 0;
  ibv_wr_opcode opcode = IBV_WR_RDMA_WRITE;
  bool signaled = false;
  uint32_t imm = 0;  // network byte order, carried unchanged
  uint64_t remoteAddr = 0;
  uint32_t rkey = 0;
  std::vector<ibv_sge> sges;
  bool isInline = false;
  std::vector<uint8_t> inlineData;  // copied at post time
  std::optional<Fault> fault;
};

struct Qp {
  ibv_qp qp{};
  Context* ctx = nullptr;
  Pd* pd = nullptr;
  Cq* sendCq = nullptr;
  Cq* recvCq = nullptr;
  FakeQpInfo info;
  std::deque<uint64_t> recvs;  // wr_ids of posted receives
  std::deque<SendWr> held;     // behind a WRITE_WITH_IMM waiting for a receive (RNR, rnr_retry 7)
  uint32_t pendingUnsignaled = 0;  // executed unsignaled WRs the next completion retires
  std::optional<Fault> armed;
  int eventsUnacked = 0;
};

struct DeviceObj {
  ibv_device dev{};
};

ibv_device_attr defaultAttr() {
  ibv_device_attr a{};
  std::snprintf(a.fw_ver, sizeof a.fw_ver, "%s", "16.35.0000 (fake)");
  a.node_guid = htobe64(0x0002c90300a0b0c0ULL);
  a.sys_image_guid = a.node_guid;
  a.max_mr_size = ~uint64_t(0);
  a.page_size_cap = 0xfffffffffffff000ULL;
  a.vendor_id = 0x02c9;
  a.vendor_part_id = 4123;
  a.max_qp = 4096;
  a.max_qp_wr = 32768;
  a.max_sge = 30;
  a.max_sge_rd = 30;
  a.max_cq = 4096;
  a.max_cqe = 4194303;
  a.max_mr = 65536;
  a.max_pd = 1024;
  a.max_qp_rd_atom = 16;
  a.max_res_rd_atom = 16 * 4096;
  a.max_qp_init_rd_atom = 16;
  a.atomic_cap = IBV_ATOMIC_HCA;
  a.max_pkeys = 128;
  a.local_ca_ack_delay = 16;
  return a;
}

bool isQpEvent(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: return true;
    default: return false;
  }
}

bool isPortEvent(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
    case IBV_EVENT_GID_CHANGE: return true;
    default: return false;
  }
}

template <class T, class Ptr>
T* findIn(const std::map<Ptr*, std::unique_ptr<T>>& m, Ptr* p) {
  auto it = m.find(p);
  return it == m.end() ? nullptr : it->second.get();
}

}  // namespace

struct FakeFabric::Impl {
  mutable std::mutex mu;
  net::ib::Verbs table{};
  bool enumerated = false;

  std::vector<FakeDevice> devices;
  std::vector<std::unique_ptr<DeviceObj>> deviceObjs;
  std::set<ibv_device**> lists;
  std::map<ibv_context*, std::unique_ptr<Context>> contexts;
  std::map<ibv_pd*, std::unique_ptr<Pd>> pds;
  std::map<ibv_mr*, std::unique_ptr<Mr>> mrs;
  std::map<ibv_cq*, std::unique_ptr<Cq>> cqs;
  std::map<ibv_comp_channel*, std::unique_ptr<Channel>> channels;
  std::map<uint32_t, std::unique_ptr<Qp>> qps;  // by QP number: creation order
  std::map<ibv_qp*, Qp*> qpsByPtr;
  std::map<uint32_t, Mr*> byLkey, byRkey;

  uint32_t nextHandle = 1;
  uint32_t nextQpNum = 0x1c0;
  uint32_t nextKey = 0x31;
  int eventsTaken = 0;
  int eventsAcked = 0;
  int portEventsUnacked = 0;  // port and device events taken and not acked
  std::vector<std::string> misuses;

  void misuse(std::string what) { misuses.push_back(std::move(what)); }

  // ---- Lookups (mu held) ---------------------------------------------------------------
  Context* context(ibv_context* c, const char* call) {
    Context* x = findIn(contexts, c);
    if (x == nullptr) misuse(format("%s: %p is not an open fake context", call, static_cast<void*>(c)));
    return x;
  }
  Pd* pd(ibv_pd* p, const char* call) {
    Pd* x = findIn(pds, p);
    if (x == nullptr) misuse(format("%s: %p is not a live fake PD", call, static_cast<void*>(p)));
    return x;
  }
  Cq* cq(ibv_cq* c, const char* call) {
    Cq* x = findIn(cqs, c);
    if (x == nullptr) misuse(format("%s: %p is not a live fake CQ", call, static_cast<void*>(c)));
    return x;
  }
  Qp* qp(ibv_qp* q, const char* call) {
    auto it = qpsByPtr.find(q);
    if (it == qpsByPtr.end()) {
      misuse(format("%s: %p is not a live fake QP", call, static_cast<void*>(q)));
      return nullptr;
    }
    return it->second;
  }
  Qp* qpByNum(uint32_t n) {
    auto it = qps.find(n);
    return it == qps.end() ? nullptr : it->second.get();
  }
  Cq* cqByHandle(uint32_t h) {
    for (auto& [p, c] : cqs)
      if (c->cq.handle == h) return c.get();
    return nullptr;
  }
  int deviceIndex(const char* name) const {
    for (size_t i = 0; i < devices.size(); ++i)
      if (devices[i].name == name) return int(i);
    return -1;
  }
  FakePort* port(int dev, int port) {
    if (dev < 0 || size_t(dev) >= devices.size() || port < 1 || size_t(port) > devices[size_t(dev)].ports.size())
      return nullptr;
    return &devices[size_t(dev)].ports[size_t(port - 1)];
  }
  const ibv_device_attr& attr(int dev) const { return *devices[size_t(dev)].attr; }
  template <class M, class Pred>
  int countOn(const M& m, Pred pred) const {
    int n = 0;
    for (auto& [k, v] : m)
      if (pred(*v)) ++n;
    return n;
  }

  // ---- Events and completions (mu held) ------------------------------------------------
  void raise(Context* c, ibv_event_type type, Context::Event::Kind kind, uint32_t id) {
    c->events.push_back(Context::Event{type, kind, id, false});
    uint64_t one = 1;
    if (write(c->ctx.async_fd, &one, sizeof one) != sizeof one) die("eventfd write: %s", std::strerror(errno));
  }

  void push(Cq* c, const ibv_wc& wc, uint32_t retire) {
    if (c->broken) return;
    if (c->entries.size() >= size_t(c->capacity)) {
      // Overflow: the completion is lost and the CQ is in error from now on.
      c->broken = true;
      raise(c->ctx, IBV_EVENT_CQ_ERR, Context::Event::kCq, c->cq.handle);
      return;
    }
    c->entries.push_back(Cqe{wc, retire});
    if (c->channel != nullptr && c->armed) {
      // One event per arming, as reqNotifyCq(cq, 0) asks.
      c->armed = false;
      c->channel->pending.push_back(c);
      uint64_t one = 1;
      if (write(c->channel->ch.fd, &one, sizeof one) != sizeof one) die("eventfd write: %s", std::strerror(errno));
    }
  }

  void completeSend(Qp* q, const SendWr& w, ibv_wc_status status, uint32_t vendorErr) {
    ibv_wc wc{};
    wc.wr_id = w.wrId;
    wc.status = status;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.vendor_err = vendorErr;
    wc.qp_num = q->info.qpNum;
    push(q->sendCq, wc, q->pendingUnsignaled + 1);
    q->pendingUnsignaled = 0;
  }

  void flushRecv(Qp* q, uint64_t wrId) {
    ibv_wc wc{};
    wc.wr_id = wrId;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = q->info.qpNum;
    push(q->recvCq, wc, 0);
  }

  void setState(Qp* q, ibv_qp_state s) {
    q->info.state = s;
    q->qp.state = s;
  }

  // The QP goes to ERR: its receives and held sends complete with IBV_WC_WR_FLUSH_ERR,
  // and writes others hold for it can never land.
  void enterError(Qp* q) {
    if (q->info.state == IBV_QPS_ERR) return;
    setState(q, IBV_QPS_ERR);
    for (uint64_t r : q->recvs) flushRecv(q, r);
    q->recvs.clear();
    std::deque<SendWr> held = std::move(q->held);
    q->held.clear();
    for (const SendWr& w : held) completeSend(q, w, IBV_WC_WR_FLUSH_ERR, 0);
    failHeldTo(q->info.qpNum);
  }

  // Writes held for `qpNum` (a peer that is gone or in error): the first fails with a
  // transport retry error, which puts its sender in ERR and flushes the rest.
  void failHeldTo(uint32_t qpNum) {
    for (auto& [n, s] : qps) {
      if (s->held.empty() || s->info.destQpNum != qpNum || s->info.state == IBV_QPS_ERR) continue;
      SendWr w = std::move(s->held.front());
      s->held.pop_front();
      completeSend(s.get(), w, IBV_WC_RETRY_EXC_ERR, 0);
      enterError(s.get());
    }
  }

  // The peer a write from `s` reaches, or nullptr when its packets would go nowhere.
  Qp* reachablePeer(Qp* s) {
    Qp* p = qpByNum(s->info.destQpNum);
    if (p == nullptr || p->info.killed) return nullptr;
    if (p->info.state != IBV_QPS_RTR && p->info.state != IBV_QPS_RTS) return nullptr;
    if (p->info.destQpNum != s->info.qpNum) return nullptr;
    FakePort* sp = port(s->ctx->dev, s->info.port);
    FakePort* pp = port(p->ctx->dev, p->info.port);
    if (sp == nullptr || pp == nullptr || sp->state != IBV_PORT_ACTIVE || pp->state != IBV_PORT_ACTIVE) return nullptr;
    if (sp->linkLayer != pp->linkLayer) return nullptr;
    if (pp->linkLayer == IBV_LINK_LAYER_ETHERNET) {
      if (!s->info.isGlobal) return nullptr;
      bool found = false;
      for (auto& [i, g] : pp->gids)
        if (i < pp->gidTblLen && g.raw == s->info.dgid && g.raw != GidBytes{}) found = true;
      if (!found) return nullptr;
    } else if (s->info.dlid != pp->lid) {
      return nullptr;
    }
    return p;
  }

  // The memory [addr, addr+len) of `m` in the address space of work requests, or nullptr.
  static uint8_t* covers(const Mr* m, uint64_t addr, uint64_t len) {
    if (addr < m->iova || len > m->len || addr - m->iova > m->len - len) return nullptr;
    return m->base + (addr - m->iova);
  }

  // Carries out a write. Returns false when it must wait for a receive of the peer
  // (RNR with rnr_retry 7); the caller then holds it.
  bool execute(Qp* s, SendWr& w) {
    if (w.fault) {
      completeSend(s, w, w.fault->status, w.fault->vendorErr);
      enterError(s);
      return true;
    }
    // Local gather, checked against the local keys (inline data was copied at post).
    struct Piece {
      const uint8_t* p;
      size_t n;
    };
    std::vector<Piece> pieces;
    uint64_t len = 0;
    if (w.isInline) {
      pieces.push_back({w.inlineData.data(), w.inlineData.size()});
      len = w.inlineData.size();
    } else {
      for (const ibv_sge& g : w.sges) {
        auto it = byLkey.find(g.lkey);
        const uint8_t* src = it == byLkey.end() || it->second->pd != s->pd ? nullptr
                                                                            : covers(it->second, g.addr, g.length);
        if (src == nullptr && g.length > 0) {
          completeSend(s, w, IBV_WC_LOC_PROT_ERR, 0);
          enterError(s);
          return true;
        }
        pieces.push_back({src, g.length});
        len += g.length;
      }
    }
    Qp* p = reachablePeer(s);
    if (p == nullptr) {
      completeSend(s, w, IBV_WC_RETRY_EXC_ERR, 0);
      enterError(s);
      return true;
    }
    const bool imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    if (imm && p->recvs.empty()) {
      if (s->info.rnrRetry == 7) return false;
      completeSend(s, w, IBV_WC_RNR_RETRY_EXC_ERR, 0);
      enterError(s);
      return true;
    }
    uint8_t* dst = nullptr;
    if (len > 0) {
      // A zero-length write names no remote memory: its rkey is not checked.
      auto it = byRkey.find(w.rkey);
      const Mr* rm = it == byRkey.end() ? nullptr : it->second;
      if (rm != nullptr && rm->pd == p->pd && (rm->access & IBV_ACCESS_REMOTE_WRITE) &&
          (p->info.accessFlags & IBV_ACCESS_REMOTE_WRITE))
        dst = covers(rm, w.remoteAddr, len);
      if (dst == nullptr) {
        // Both ends go to ERR, as rxe does: a responder that saw an access violation
        // drops the connection.
        completeSend(s, w, IBV_WC_REM_ACCESS_ERR, 0);
        enterError(s);
        enterError(p);
        return true;
      }
    }
    for (const Piece& piece : pieces) {
      if (piece.n == 0) continue;
      std::memmove(dst, piece.p, piece.n);
      dst += piece.n;
    }
    if (imm) {
      ibv_wc wc{};
      wc.wr_id = p->recvs.front();
      p->recvs.pop_front();
      wc.status = IBV_WC_SUCCESS;
      wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
      wc.byte_len = uint32_t(len);
      wc.imm_data = w.imm;
      wc.qp_num = p->info.qpNum;
      wc.src_qp = s->info.qpNum;
      wc.wc_flags = IBV_WC_WITH_IMM;
      wc.sl = s->info.sl;
      if (FakePort* sp = port(s->ctx->dev, s->info.port)) wc.slid = sp->lid;
      push(p->recvCq, wc, 0);
    }
    if (w.signaled) {
      completeSend(s, w, IBV_WC_SUCCESS, 0);
    } else {
      ++s->pendingUnsignaled;
    }
    return true;
  }

  // A receive was posted on `p`: writes held for it go, in order, while receives last.
  void drainHeldTo(Qp* p) {
    for (auto& [n, s] : qps) {
      if (s->info.destQpNum != p->info.qpNum) continue;
      while (!s->held.empty() && s->info.state == IBV_QPS_RTS) {
        SendWr w = std::move(s->held.front());
        s->held.pop_front();
        if (!execute(s.get(), w)) {
          s->held.push_front(std::move(w));
          break;
        }
      }
    }
  }

  int postOneSend(Qp* q, const ibv_send_wr* wr) {
    const ibv_qp_state st = q->info.state;
    if (st != IBV_QPS_RTS && st != IBV_QPS_ERR) return EINVAL;
    if (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return EINVAL;
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > q->info.cap.max_send_sge) return EINVAL;
    if (wr->num_sge > 0 && wr->sg_list == nullptr) return EINVAL;
    SendWr w;
    w.wrId = wr->wr_id;
    w.opcode = wr->opcode;
    w.signaled = q->info.sqSigAll || (wr->send_flags & IBV_SEND_SIGNALED);
    w.imm = wr->imm_data;
    w.remoteAddr = wr->wr.rdma.remote_addr;
    w.rkey = wr->wr.rdma.rkey;
    w.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    w.isInline = wr->send_flags & IBV_SEND_INLINE;
    if (w.isInline) {
      uint64_t total = 0;
      for (const ibv_sge& g : w.sges) total += g.length;
      if (total > q->info.cap.max_inline_data) return EINVAL;
      for (const ibv_sge& g : w.sges) {
        const uint8_t* p = reinterpret_cast<const uint8_t*>(uintptr_t(g.addr));
        w.inlineData.insert(w.inlineData.end(), p, p + g.length);
      }
    }
    if (q->info.sqOutstanding >= q->info.cap.max_send_wr) return ENOMEM;
    ++q->info.sqOutstanding;
    if (q->armed) {
      w.fault = q->armed;
      q->armed.reset();
    }
    if (st == IBV_QPS_ERR) {
      completeSend(q, w, IBV_WC_WR_FLUSH_ERR, 0);
      return 0;
    }
    // RC executes in order: behind a held write, everything waits.
    if (!q->held.empty() || !execute(q, w)) q->held.push_back(std::move(w));
    return 0;
  }

  int postOneRecv(Qp* q, const ibv_recv_wr* wr) {
    if (q->info.state == IBV_QPS_RESET) return EINVAL;
    if (wr->num_sge < 0 || uint32_t(wr->num_sge) > q->info.cap.max_recv_sge) return EINVAL;
    if (q->recvs.size() >= q->info.cap.max_recv_wr) return ENOMEM;
    if (q->info.state == IBV_QPS_ERR) {
      flushRecv(q, wr->wr_id);
      return 0;
    }
    q->recvs.push_back(wr->wr_id);
    return 0;
  }

  // ---- modify_qp (mu held) --------------------------------------------------------------
  // The kernel's table for RC (ib_modify_qp_is_ok): attributes a transition requires and
  // those it may carry. Alternate paths are not modelled, so ALT_PATH and PATH_MIG_STATE
  // are refused.
  static bool transition(ibv_qp_state cur, ibv_qp_state next, int* req, int* opt) {
    *req = 0;
    *opt = 0;
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return true;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
      *req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return true;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) {
      *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      return true;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
      *req = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
             IBV_QP_MIN_RNR_TIMER;
      *opt = IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
      return true;
    }
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
      *req = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
      *opt = IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER;
      return true;
    }
    if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) {
      *opt = IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER;
      return true;
    }
    return false;
  }

  int modify(Qp* q, const ibv_qp_attr* a, int mask) {
    const ibv_qp_state cur = q->info.state;
    if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) return EINVAL;
    const ibv_qp_state next = (mask & IBV_QP_STATE) ? a->qp_state : cur;
    int req = 0, opt = 0;
    if (!transition(cur, next, &req, &opt)) return EINVAL;
    const int attrs = mask & ~(IBV_QP_STATE | IBV_QP_CUR_STATE);
    if ((attrs & req) != req || (attrs & ~(req | opt)) != 0) return EINVAL;

    const FakeDevice& dev = devices[size_t(q->ctx->dev)];
    const ibv_device_attr& da = *dev.attr;
    const uint8_t portNum = (attrs & IBV_QP_PORT) ? a->port_num : q->info.port;
    const FakePort* p = port(q->ctx->dev, portNum);
    if ((attrs & IBV_QP_PORT) && p == nullptr) return EINVAL;
    if ((attrs & IBV_QP_PKEY_INDEX) && a->pkey_index >= da.max_pkeys) return EINVAL;
    const unsigned qpAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC;
    if ((attrs & IBV_QP_ACCESS_FLAGS) && (unsigned(a->qp_access_flags) & ~qpAccess) != 0) return EINVAL;
    if (attrs & IBV_QP_AV) {
      const ibv_ah_attr& ah = a->ah_attr;
      if (p == nullptr || ah.port_num != portNum) return EINVAL;
      if (p->linkLayer == IBV_LINK_LAYER_ETHERNET) {
        // RoCE needs a GRH whose source GID is configured.
        if (!ah.is_global || ah.grh.sgid_index >= p->gidTblLen) return EINVAL;
        auto g = p->gids.find(ah.grh.sgid_index);
        if (g == p->gids.end() || g->second.raw == GidBytes{}) return EINVAL;
      }
    }
    if ((attrs & IBV_QP_PATH_MTU) &&
        (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096 || p == nullptr || a->path_mtu > p->maxMtu))
      return EINVAL;
    if ((attrs & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) return EINVAL;
    if ((attrs & IBV_QP_RQ_PSN) && a->rq_psn > 0xffffff) return EINVAL;
    if ((attrs & IBV_QP_SQ_PSN) && a->sq_psn > 0xffffff) return EINVAL;
    if ((attrs & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > da.max_qp_rd_atom) return EINVAL;
    if ((attrs & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > da.max_qp_init_rd_atom) return EINVAL;
    if ((attrs & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
    // The verbs fields are 5 and 3 bits wide: a larger value would be cut, not refused, by
    // many drivers; the fake refuses it.
    if ((attrs & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
    if ((attrs & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
    if ((attrs & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;

    FakeQpInfo& i = q->info;
    if (attrs & IBV_QP_PORT) i.port = portNum;
    if (attrs & IBV_QP_ACCESS_FLAGS) i.accessFlags = unsigned(a->qp_access_flags);
    if (attrs & IBV_QP_AV) {
      i.isGlobal = a->ah_attr.is_global;
      i.sgidIndex = a->ah_attr.grh.sgid_index;
      std::memcpy(i.dgid.data(), a->ah_attr.grh.dgid.raw, 16);
      i.trafficClass = a->ah_attr.grh.traffic_class;
      i.hopLimit = a->ah_attr.grh.hop_limit;
      i.sl = a->ah_attr.sl;
      i.dlid = a->ah_attr.dlid;
    }
    if (attrs & IBV_QP_PATH_MTU) i.pathMtu = a->path_mtu;
    if (attrs & IBV_QP_DEST_QPN) i.destQpNum = a->dest_qp_num;
    if (attrs & IBV_QP_RQ_PSN) i.rqPsn = a->rq_psn;
    if (attrs & IBV_QP_MAX_DEST_RD_ATOMIC) i.maxDestRdAtomic = a->max_dest_rd_atomic;
    if (attrs & IBV_QP_MIN_RNR_TIMER) i.minRnrTimer = a->min_rnr_timer;
    if (attrs & IBV_QP_TIMEOUT) i.timeout = a->timeout;
    if (attrs & IBV_QP_RETRY_CNT) i.retryCnt = a->retry_cnt;
    if (attrs & IBV_QP_RNR_RETRY) i.rnrRetry = a->rnr_retry;
    if (attrs & IBV_QP_SQ_PSN) i.sqPsn = a->sq_psn;
    if (attrs & IBV_QP_MAX_QP_RD_ATOMIC) i.maxRdAtomic = a->max_rd_atomic;

    if (next == IBV_QPS_ERR) {
      enterError(q);
    } else if (next == IBV_QPS_RESET) {
      // Reset empties the queues without completions.
      setState(q, IBV_QPS_RESET);
      q->recvs.clear();
      q->held.clear();
      q->armed.reset();
      i.sqOutstanding = 0;
      q->pendingUnsignaled = 0;
      failHeldTo(i.qpNum);
    } else {
      setState(q, next);
    }
    return 0;
  }

  void destroyQpLocked(Qp* q) {
    const uint32_t n = q->info.qpNum;
    for (auto& [c, ctx] : contexts)
      for (Context::Event& e : ctx->events)
        if (e.kind == Context::Event::kQp && e.id == n) e.dead = true;
    --q->pd->qps;
    --q->sendCq->qps;
    --q->recvCq->qps;
    qpsByPtr.erase(&q->qp);
    qps.erase(n);
    failHeldTo(n);
  }

  ibv_mr* regMr(ibv_pd* pdp, void* addr, size_t len, uint64_t iova, unsigned access) {
    Pd* p = pd(pdp, "regMr");
    if (p == nullptr) {
      errno = EINVAL;
      return nullptr;
    }
    const unsigned known = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                           IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_OPTIONAL_RANGE;
    const bool needsLocalWrite = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    if (len == 0 || (access & ~known) != 0 || (needsLocalWrite && !(access & IBV_ACCESS_LOCAL_WRITE))) {
      errno = EINVAL;
      return nullptr;
    }
    if (addr == nullptr) {
      errno = EFAULT;
      return nullptr;
    }
    const int dev = p->ctx->dev;
    if (countOn(mrs, [&](const Mr& m) { return m.pd->ctx->dev == dev; }) >= attr(dev).max_mr) {
      errno = ENOMEM;
      return nullptr;
    }
    auto m = std::make_unique<Mr>();
    m->pd = p;
    m->base = static_cast<uint8_t*>(addr);
    m->iova = iova;
    m->len = len;
    m->access = access;
    m->mr.context = &p->ctx->ctx;
    m->mr.pd = pdp;
    m->mr.addr = addr;
    m->mr.length = len;
    m->mr.handle = nextHandle++;
    // Distinct local and remote keys: a local key used as a remote one, or the reverse,
    // fails.
    const uint32_t k = nextKey++;
    m->mr.lkey = (k << 8) | 0x0a;
    m->mr.rkey = (k << 8) | 0x5b;
    ++p->mrs;
    byLkey[m->mr.lkey] = m.get();
    byRkey[m->mr.rkey] = m.get();
    ibv_mr* out = &m->mr;
    mrs.emplace(out, std::move(m));
    return out;
  }
};

namespace {

std::atomic<FakeFabric::Impl*> gFabric{nullptr};

FakeFabric::Impl& fab() {
  FakeFabric::Impl* f = gFabric.load();
  if (f == nullptr) die("a verbs call with no FakeFabric alive");
  return *f;
}

using Lock = std::lock_guard<std::mutex>;

// ---- The Verbs table ----------------------------------------------------------------------

const char* wcStatusStr(ibv_wc_status s) {
  // The texts of rdma-core's ibv_wc_status_str.
  switch (s) {
    case IBV_WC_SUCCESS: return "success";
    case IBV_WC_LOC_LEN_ERR: return "local length error";
    case IBV_WC_LOC_QP_OP_ERR: return "local QP operation error";
    case IBV_WC_LOC_EEC_OP_ERR: return "local EE context operation error";
    case IBV_WC_LOC_PROT_ERR: return "local protection error";
    case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
    case IBV_WC_MW_BIND_ERR: return "memory management operation error";
    case IBV_WC_BAD_RESP_ERR: return "bad response error";
    case IBV_WC_LOC_ACCESS_ERR: return "local access error";
    case IBV_WC_REM_INV_REQ_ERR: return "remote invalid request error";
    case IBV_WC_REM_ACCESS_ERR: return "remote access error";
    case IBV_WC_REM_OP_ERR: return "remote operation error";
    case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    case IBV_WC_LOC_RDD_VIOL_ERR: return "local RDD violation error";
    case IBV_WC_REM_INV_RD_REQ_ERR: return "remote invalid RD request";
    case IBV_WC_REM_ABORT_ERR: return "aborted error";
    case IBV_WC_INV_EECN_ERR: return "invalid EE context number";
    case IBV_WC_INV_EEC_STATE_ERR: return "invalid EE context state";
    case IBV_WC_FATAL_ERR: return "fatal error";
    case IBV_WC_RESP_TIMEOUT_ERR: return "response timeout error";
    case IBV_WC_GENERAL_ERR: return "general error";
    case IBV_WC_TM_ERR: return "TM error";
    case IBV_WC_TM_RNDV_INCOMPLETE: return "TM software rendezvous";
  }
  return "unknown";
}

const char* eventTypeStr(ibv_event_type t) {
  // The texts of rdma-core's ibv_event_type_str.
  switch (t) {
    case IBV_EVENT_CQ_ERR: return "CQ error";
    case IBV_EVENT_QP_FATAL: return "local work queue catastrophic error";
    case IBV_EVENT_QP_REQ_ERR: return "invalid request local work queue error";
    case IBV_EVENT_QP_ACCESS_ERR: return "local access violation work queue error";
    case IBV_EVENT_COMM_EST: return "communication established";
    case IBV_EVENT_SQ_DRAINED: return "send queue drained";
    case IBV_EVENT_PATH_MIG: return "path migrated";
    case IBV_EVENT_PATH_MIG_ERR: return "path migration request error";
    case IBV_EVENT_DEVICE_FATAL: return "local catastrophic error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_LID_CHANGE: return "LID change";
    case IBV_EVENT_PKEY_CHANGE: return "P_Key change";
    case IBV_EVENT_SM_CHANGE: return "SM change";
    case IBV_EVENT_SRQ_ERR: return "SRQ catastrophic error";
    case IBV_EVENT_SRQ_LIMIT_REACHED: return "SRQ limit reached";
    case IBV_EVENT_QP_LAST_WQE_REACHED: return "last WQE reached";
    case IBV_EVENT_CLIENT_REREGISTER: return "client reregistration";
    case IBV_EVENT_GID_CHANGE: return "GID table change";
    case IBV_EVENT_WQ_FATAL: return "WQ fatal";
  }
  return "unknown";
}

ibv_device** getDeviceList(int* num) {
  auto& f = fab();
  Lock l(f.mu);
  f.enumerated = true;
  auto** list = new ibv_device*[f.deviceObjs.size() + 1];
  for (size_t i = 0; i < f.deviceObjs.size(); ++i) list[i] = &f.deviceObjs[i]->dev;
  list[f.deviceObjs.size()] = nullptr;
  f.lists.insert(list);
  if (num != nullptr) *num = int(f.deviceObjs.size());
  return list;
}

void freeDeviceList(ibv_device** list) {
  auto& f = fab();
  Lock l(f.mu);
  if (f.lists.erase(list) == 0) {
    f.misuse(format("freeDeviceList: %p is not a list getDeviceList returned", static_cast<void*>(list)));
    return;
  }
  delete[] list;
}

int deviceOf(FakeFabric::Impl& f, ibv_device* d) {
  for (size_t i = 0; i < f.deviceObjs.size(); ++i)
    if (&f.deviceObjs[i]->dev == d) return int(i);
  return -1;
}

const char* getDeviceName(ibv_device* d) {
  auto& f = fab();
  Lock l(f.mu);
  if (deviceOf(f, d) < 0) {
    f.misuse("getDeviceName: not a fake device");
    return nullptr;
  }
  return d->name;
}

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int pollCq(ibv_cq* cq, int n, ibv_wc* wc);

ibv_context* openDevice(ibv_device* d) {
  auto& f = fab();
  Lock l(f.mu);
  const int dev = deviceOf(f, d);
  if (dev < 0) {
    f.misuse("openDevice: not a fake device");
    errno = ENODEV;
    return nullptr;
  }
  const int fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
  if (fd < 0) return nullptr;
  auto c = std::make_unique<Context>();
  c->dev = dev;
  c->ctx.device = d;
  // The inline data-path calls of verbs.h (ibv_post_send, ibv_poll_cq) jump through these.
  c->ctx.ops.post_send = postSend;
  c->ctx.ops.post_recv = postRecv;
  c->ctx.ops.poll_cq = pollCq;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = fd;
  c->ctx.num_comp_vectors = 1;
  ibv_context* out = &c->ctx;
  f.contexts.emplace(out, std::move(c));
  return out;
}

int closeDevice(ibv_context* ctx) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "closeDevice");
  if (c == nullptr) return EINVAL;
  const int pds = f.countOn(f.pds, [&](const Pd& p) { return p.ctx == c; });
  const int cqs = f.countOn(f.cqs, [&](const Cq& q) { return q.ctx == c; });
  if (pds + cqs > 0) {
    f.misuse(format("closeDevice: %d PDs and %d CQs of the context are still open", pds, cqs));
    return EBUSY;
  }
  close(c->ctx.async_fd);
  f.contexts.erase(ctx);
  return 0;
}

int queryDevice(ibv_context* ctx, ibv_device_attr* attr) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "queryDevice");
  if (c == nullptr) return EINVAL;
  *attr = f.attr(c->dev);
  attr->phys_port_cnt = uint8_t(f.devices[size_t(c->dev)].ports.size());
  return 0;
}

int queryPort(ibv_context* ctx, uint8_t portNum, ibv_port_attr* attr) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "queryPort");
  if (c == nullptr) return EINVAL;
  const FakePort* p = f.port(c->dev, portNum);
  if (p == nullptr) return EINVAL;
  *attr = ibv_port_attr{};
  attr->state = p->state;
  attr->max_mtu = p->maxMtu;
  attr->active_mtu = p->activeMtu;
  attr->gid_tbl_len = p->gidTblLen;
  attr->max_msg_sz = 0x40000000;
  attr->pkey_tbl_len = uint16_t(f.attr(c->dev).max_pkeys);
  attr->lid = p->lid;
  attr->active_width = p->activeWidth;
  attr->active_speed = p->activeSpeed;
  attr->phys_state = p->state == IBV_PORT_ACTIVE ? 5 : 3;  // LinkUp : Disabled
  attr->link_layer = p->linkLayer;
  return 0;
}

int queryGid(ibv_context* ctx, uint8_t portNum, int index, ibv_gid* gid) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "queryGid");
  const FakePort* p = c == nullptr ? nullptr : f.port(c->dev, portNum);
  if (p == nullptr || index < 0 || index >= p->gidTblLen) {
    errno = EINVAL;
    return -1;
  }
  // An unconfigured entry reads as the zero GID, as libibverbs reports it.
  auto it = p->gids.find(index);
  std::memset(gid->raw, 0, sizeof gid->raw);
  if (it != p->gids.end()) std::memcpy(gid->raw, it->second.raw.data(), 16);
  return 0;
}

ibv_pd* allocPd(ibv_context* ctx) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "allocPd");
  if (c == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  if (f.countOn(f.pds, [&](const Pd& p) { return p.ctx->dev == c->dev; }) >= f.attr(c->dev).max_pd) {
    errno = ENOMEM;
    return nullptr;
  }
  auto p = std::make_unique<Pd>();
  p->ctx = c;
  p->pd.context = ctx;
  p->pd.handle = f.nextHandle++;
  ibv_pd* out = &p->pd;
  f.pds.emplace(out, std::move(p));
  return out;
}

int deallocPd(ibv_pd* pd) {
  auto& f = fab();
  Lock l(f.mu);
  Pd* p = f.pd(pd, "deallocPd");
  if (p == nullptr) return EINVAL;
  if (p->mrs + p->qps > 0) {
    f.misuse(format("deallocPd: %d MRs and %d QPs of the PD are still open", p->mrs, p->qps));
    return EBUSY;
  }
  f.pds.erase(pd);
  return 0;
}

ibv_mr* regMr(ibv_pd* pd, void* addr, size_t len, int access) {
  auto& f = fab();
  Lock l(f.mu);
  return f.regMr(pd, addr, len, reinterpret_cast<uintptr_t>(addr), unsigned(access));
}

ibv_mr* regMrIova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova, unsigned access) {
  auto& f = fab();
  Lock l(f.mu);
  return f.regMr(pd, addr, len, iova, access);
}

int deregMr(ibv_mr* mr) {
  auto& f = fab();
  Lock l(f.mu);
  Mr* m = findIn(f.mrs, mr);
  if (m == nullptr) {
    f.misuse(format("deregMr: %p is not a live fake MR", static_cast<void*>(mr)));
    return EINVAL;
  }
  f.byLkey.erase(m->mr.lkey);
  f.byRkey.erase(m->mr.rkey);
  --m->pd->mrs;
  f.mrs.erase(mr);
  return 0;
}

ibv_cq* createCq(ibv_context* ctx, int cqe, void* cqContext, ibv_comp_channel* channel, int vector) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "createCq");
  // Completion channels only when the test enabled them (otherwise the IB net polls).
  Channel* ch = channel == nullptr ? nullptr : findIn(f.channels, channel);
  if (c == nullptr || (channel != nullptr && (ch == nullptr || ch->ctx != c)) || cqe < 1 ||
      cqe > f.attr(c->dev).max_cqe) {
    errno = EINVAL;
    return nullptr;
  }
  if (f.countOn(f.cqs, [&](const Cq& q) { return q.ctx->dev == c->dev; }) >= f.attr(c->dev).max_cq) {
    errno = ENOMEM;
    return nullptr;
  }
  auto q = std::make_unique<Cq>();
  q->ctx = c;
  q->capacity = cqe;
  q->cq.context = ctx;
  q->cq.cq_context = cqContext;
  q->cq.handle = f.nextHandle++;
  q->cq.cqe = cqe;
  q->cq.channel = channel;
  q->channel = ch;
  if (ch != nullptr) ++ch->cqs;
  ibv_cq* out = &q->cq;
  f.cqs.emplace(out, std::move(q));
  return out;
}

int destroyCq(ibv_cq* cq) {
  auto& f = fab();
  Lock l(f.mu);
  Cq* q = f.cq(cq, "destroyCq");
  if (q == nullptr) return EINVAL;
  if (q->qps > 0) {
    f.misuse(format("destroyCq: %d QPs still use the CQ", q->qps));
    return EBUSY;
  }
  if (q->eventsUnacked > 0) {
    f.misuse(format("destroyCq: %d events of the CQ taken and not acked (libibverbs would block forever)",
                    q->eventsUnacked));
    return EBUSY;
  }
  if (q->compEventsUnacked > 0) {
    f.misuse(format("destroyCq: %d completion events taken and not acked (libibverbs would block forever)",
                    q->compEventsUnacked));
    return EBUSY;
  }
  for (auto& [c, ctx] : f.contexts)
    for (Context::Event& e : ctx->events)
      if (e.kind == Context::Event::kCq && e.id == q->cq.handle) e.dead = true;
  if (Channel* ch = q->channel) {
    --ch->cqs;
    ch->pending.erase(std::remove(ch->pending.begin(), ch->pending.end(), q), ch->pending.end());
  }
  f.cqs.erase(cq);
  return 0;
}

ibv_comp_channel* createCompChannel(ibv_context* ctx) {
  auto& f = fab();
  Lock l(f.mu);
  Context* c = f.context(ctx, "createCompChannel");
  if (c == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  auto ch = std::make_unique<Channel>();
  ch->ctx = c;
  ch->ch.context = ctx;
  ch->ch.fd = eventfd(0, EFD_CLOEXEC);
  if (ch->ch.fd < 0) return nullptr;
  ibv_comp_channel* out = &ch->ch;
  f.channels.emplace(out, std::move(ch));
  return out;
}

int destroyCompChannel(ibv_comp_channel* channel) {
  auto& f = fab();
  Lock l(f.mu);
  Channel* ch = findIn(f.channels, channel);
  if (ch == nullptr) {
    f.misuse("destroyCompChannel: not a live fake channel");
    return EINVAL;
  }
  if (ch->cqs > 0) {
    f.misuse(format("destroyCompChannel: %d CQs still use the channel", ch->cqs));
    return EBUSY;
  }
  close(ch->ch.fd);
  f.channels.erase(channel);
  return 0;
}

int getCqEvent(ibv_comp_channel* channel, ibv_cq** cq, void** cqContext) {
  auto& f = fab();
  Lock l(f.mu);
  Channel* ch = findIn(f.channels, channel);
  if (ch == nullptr) {
    f.misuse("getCqEvent: not a live fake channel");
    errno = EINVAL;
    return -1;
  }
  // The caller made the fd non-blocking (the real call would otherwise block): no event
  // is EAGAIN.
  if (ch->pending.empty()) {
    errno = EAGAIN;
    return -1;
  }
  Cq* q = ch->pending.front();
  ch->pending.pop_front();
  ++q->compEventsUnacked;
  *cq = &q->cq;
  *cqContext = q->cq.cq_context;
  if (ch->pending.empty()) {
    uint64_t n = 0;
    if (read(ch->ch.fd, &n, sizeof n) != sizeof n) die("eventfd read: %s", std::strerror(errno));
  }
  return 0;
}

void ackCqEvents(ibv_cq* cq, unsigned n) {
  auto& f = fab();
  Lock l(f.mu);
  Cq* q = f.cq(cq, "ackCqEvents");
  if (q == nullptr) return;
  if (int(n) > q->compEventsUnacked) f.misuse(format("ackCqEvents: %u acked, %d taken", n, q->compEventsUnacked));
  q->compEventsUnacked -= std::min(int(n), q->compEventsUnacked);
}

int reqNotifyCq(ibv_cq* cq, int solicitedOnly) {
  auto& f = fab();
  Lock l(f.mu);
  Cq* q = f.cq(cq, "reqNotifyCq");
  if (q == nullptr || q->channel == nullptr || solicitedOnly != 0) return EINVAL;
  q->armed = true;  // the next completion raises an event; those already queued do not
  return 0;
}

ibv_qp* createQp(ibv_pd* pd, ibv_qp_init_attr* a) {
  auto& f = fab();
  Lock l(f.mu);
  Pd* p = f.pd(pd, "createQp");
  if (p == nullptr || a == nullptr) {
    errno = EINVAL;
    return nullptr;
  }
  Cq* scq = f.cq(a->send_cq, "createQp send_cq");
  Cq* rcq = f.cq(a->recv_cq, "createQp recv_cq");
  const int dev = p->ctx->dev;
  const ibv_device_attr& da = f.attr(dev);
  const ibv_qp_cap& cap = a->cap;
  if (a->qp_type != IBV_QPT_RC || scq == nullptr || rcq == nullptr || scq->ctx != p->ctx || rcq->ctx != p->ctx ||
      a->srq != nullptr || cap.max_send_wr > uint32_t(da.max_qp_wr) || cap.max_recv_wr > uint32_t(da.max_qp_wr) ||
      cap.max_send_sge > uint32_t(da.max_sge) || cap.max_recv_sge > uint32_t(da.max_sge) ||
      cap.max_inline_data > f.devices[size_t(dev)].maxInlineData) {
    errno = EINVAL;
    return nullptr;
  }
  if (f.countOn(f.qps, [&](const Qp& q) { return q.ctx->dev == dev; }) >= da.max_qp) {
    errno = ENOMEM;
    return nullptr;
  }
  auto q = std::make_unique<Qp>();
  q->ctx = p->ctx;
  q->pd = p;
  q->sendCq = scq;
  q->recvCq = rcq;
  const uint32_t n = f.nextQpNum++;
  q->qp.context = &p->ctx->ctx;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  q->qp.handle = f.nextHandle++;
  q->qp.qp_num = n;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  q->info.qpNum = n;
  q->info.device = f.devices[size_t(dev)].name;
  q->info.cap = cap;
  q->info.sqSigAll = a->sq_sig_all != 0;
  ++p->qps;
  ++scq->qps;
  ++rcq->qps;
  ibv_qp* out = &q->qp;
  f.qpsByPtr[out] = q.get();
  f.qps.emplace(n, std::move(q));
  return out;
}

int modifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask) {
  auto& f = fab();
  Lock l(f.mu);
  Qp* q = f.qp(qp, "modifyQp");
  if (q == nullptr || attr == nullptr) return EINVAL;
  return f.modify(q, attr, mask);
}

int destroyQp(ibv_qp* qp) {
  auto& f = fab();
  Lock l(f.mu);
  Qp* q = f.qp(qp, "destroyQp");
  if (q == nullptr) return EINVAL;
  if (q->eventsUnacked > 0) {
    f.misuse(format("destroyQp: %d events of QP %#x taken and not acked (libibverbs would block forever)",
                    q->eventsUnacked, q->info.qpNum));
    return EBUSY;
  }
  f.destroyQpLocked(q);
  return 0;
}

int getAsyncEvent(ibv_context* ctx, ibv_async_event* ev) {
  auto& f = fab();
  int fd;
  {
    Lock l(f.mu);
    Context* c = f.context(ctx, "getAsyncEvent");
    if (c == nullptr) {
      errno = EINVAL;
      return -1;
    }
    fd = c->ctx.async_fd;
  }
  for (;;) {
    // Blocks as libibverbs does, unless the caller made async_fd non-blocking (EAGAIN).
    uint64_t one;
    if (read(fd, &one, sizeof one) != sizeof one) return -1;
    Lock l(f.mu);
    Context* c = f.context(ctx, "getAsyncEvent");
    if (c == nullptr || c->events.empty()) {
      errno = EBADF;
      return -1;
    }
    Context::Event e = c->events.front();
    c->events.pop_front();
    if (e.dead) continue;  // its object was destroyed: as if never raised
    *ev = ibv_async_event{};
    ev->event_type = e.type;
    switch (e.kind) {
      case Context::Event::kQp: {
        Qp* q = f.qpByNum(e.id);
        ++q->eventsUnacked;
        ev->element.qp = &q->qp;
        break;
      }
      case Context::Event::kCq: {
        Cq* q = f.cqByHandle(e.id);
        ++q->eventsUnacked;
        ev->element.cq = &q->cq;
        break;
      }
      case Context::Event::kPort:
      case Context::Event::kDevice:
        ++f.portEventsUnacked;
        ev->element.port_num = int(e.id);
        break;
    }
    ++f.eventsTaken;
    return 0;
  }
}

void ackAsyncEvent(ibv_async_event* ev) {
  auto& f = fab();
  Lock l(f.mu);
  int* unacked = &f.portEventsUnacked;
  if (isQpEvent(ev->event_type)) {
    auto it = f.qpsByPtr.find(ev->element.qp);
    unacked = it == f.qpsByPtr.end() ? nullptr : &it->second->eventsUnacked;
  } else if (ev->event_type == IBV_EVENT_CQ_ERR) {
    Cq* q = findIn(f.cqs, ev->element.cq);
    unacked = q == nullptr ? nullptr : &q->eventsUnacked;
  }
  if (unacked == nullptr || *unacked == 0) {
    f.misuse(format("ackAsyncEvent: no '%s' event of that object is taken and not acked",
                    eventTypeStr(ev->event_type)));
    return;
  }
  --*unacked;
  ++f.eventsAcked;
}

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  auto& f = fab();
  Lock l(f.mu);
  Qp* q = f.qp(qp, "postSend");
  for (; wr != nullptr; wr = wr->next) {
    const int err = q == nullptr ? EINVAL : f.postOneSend(q, wr);
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      return err;
    }
  }
  return 0;
}

int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  auto& f = fab();
  Lock l(f.mu);
  Qp* q = f.qp(qp, "postRecv");
  int err = 0;
  for (; wr != nullptr; wr = wr->next) {
    err = q == nullptr ? EINVAL : f.postOneRecv(q, wr);
    if (err != 0) {
      if (bad != nullptr) *bad = wr;
      break;
    }
  }
  if (q != nullptr) f.drainHeldTo(q);
  return err;
}

int pollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  auto& f = fab();
  Lock l(f.mu);
  Cq* q = f.cq(cq, "pollCq");
  if (q == nullptr || n < 0) return -EINVAL;
  int got = 0;
  while (got < n && !q->entries.empty()) {
    const Cqe& e = q->entries.front();
    wc[got++] = e.wc;
    // Polling a send completion frees the send queue slots it covers.
    if (e.retire > 0)
      if (Qp* qp = f.qpByNum(e.wc.qp_num)) qp->info.sqOutstanding -= std::min(e.retire, qp->info.sqOutstanding);
    q->entries.pop_front();
  }
  return got;
}

std::optional<std::string> readGidType(const char* dev, int portNum, int index) {
  auto& f = fab();
  Lock l(f.mu);
  const FakePort* p = f.port(f.deviceIndex(dev), portNum);
  if (p == nullptr || index < 0 || index >= p->gidTblLen) return std::nullopt;
  auto it = p->gids.find(index);
  if (it == p->gids.end()) return std::nullopt;
  return it->second.type;
}

std::string pciPath(const char* dev) {
  auto& f = fab();
  Lock l(f.mu);
  const int d = f.deviceIndex(dev);
  return d < 0 ? "" : f.devices[size_t(d)].pciPath;
}

int numaNode(const char* dev) {
  auto& f = fab();
  Lock l(f.mu);
  const int d = f.deviceIndex(dev);
  return d < 0 ? -1 : f.devices[size_t(d)].numaNode;
}

}  // namespace

// ---- FakeFabric ---------------------------------------------------------------------------

GidBytes gidBytes(const char* ipv6) {
  GidBytes g{};
  if (inet_pton(AF_INET6, ipv6, g.data()) != 1) die("gidBytes: '%s' is not an IPv6 address", ipv6);
  return g;
}

FakePort defaultRocePort() {
  FakePort p;
  p.gids[0] = FakeGid{gidBytes("fe80::1"), "RoCE v2"};
  p.gids[1] = FakeGid{gidBytes("::ffff:10.0.0.1"), "RoCE v2"};
  return p;
}

FakePort defaultIbPort(uint16_t lid) {
  FakePort p;
  p.linkLayer = IBV_LINK_LAYER_INFINIBAND;
  p.activeMtu = IBV_MTU_4096;
  p.lid = lid;
  p.gidTblLen = 128;
  GidBytes g = gidBytes("fe80::");
  g[14] = uint8_t(lid >> 8);
  g[15] = uint8_t(lid);
  p.gids[0] = FakeGid{g, "IB"};
  return p;
}

FakeFabric::FakeFabric() : impl_(std::make_unique<Impl>()) {
  Impl* expected = nullptr;
  if (!gFabric.compare_exchange_strong(expected, impl_.get())) die("a second FakeFabric while one is alive");
  net::ib::Verbs& v = impl_->table;
  v.getDeviceList = getDeviceList;
  v.freeDeviceList = freeDeviceList;
  v.getDeviceName = getDeviceName;
  v.openDevice = openDevice;
  v.closeDevice = closeDevice;
  v.queryDevice = queryDevice;
  v.queryPort = queryPort;
  v.queryGid = queryGid;
  v.allocPd = allocPd;
  v.deallocPd = deallocPd;
  v.regMr = regMr;
  v.regMrIova2 = regMrIova2;
  v.deregMr = deregMr;
  v.createCq = createCq;
  v.destroyCq = destroyCq;
  v.createQp = createQp;
  v.modifyQp = modifyQp;
  v.destroyQp = destroyQp;
  v.getAsyncEvent = getAsyncEvent;
  v.ackAsyncEvent = ackAsyncEvent;
  v.wcStatusStr = wcStatusStr;
  v.eventTypeStr = eventTypeStr;
  v.postSend = postSend;
  v.postRecv = postRecv;
  v.pollCq = pollCq;
  v.readGidType = readGidType;
  v.pciPath = pciPath;
  v.numaNode = numaNode;
}

FakeFabric::~FakeFabric() {
  {
    Lock l(impl_->mu);
    for (auto& [p, c] : impl_->contexts) close(c->ctx.async_fd);
    for (auto& [p, c] : impl_->channels) close(c->ch.fd);
    for (ibv_device** list : impl_->lists) delete[] list;
  }
  gFabric.store(nullptr);
}

const net::ib::Verbs* FakeFabric::verbs() const { return &impl_->table; }

void FakeFabric::enableCompletionChannels() {
  net::ib::Verbs& v = impl_->table;
  v.createCompChannel = createCompChannel;
  v.destroyCompChannel = destroyCompChannel;
  v.getCqEvent = getCqEvent;
  v.ackCqEvents = ackCqEvents;
  v.reqNotifyCq = reqNotifyCq;
}

int FakeFabric::addDevice(FakeDevice dev) {
  Lock l(impl_->mu);
  if (impl_->enumerated) die("addDevice(%s) after getDeviceList", dev.name.c_str());
  if (dev.name.empty() || dev.name.size() >= IBV_SYSFS_NAME_MAX || impl_->deviceIndex(dev.name.c_str()) >= 0)
    die("addDevice: bad or duplicate name '%s'", dev.name.c_str());
  if (dev.ports.empty() || dev.ports.size() > 255) die("addDevice(%s): 1..255 ports", dev.name.c_str());
  if (!dev.attr) dev.attr = defaultAttr();
  auto obj = std::make_unique<DeviceObj>();
  obj->dev.node_type = IBV_NODE_CA;
  obj->dev.transport_type = IBV_TRANSPORT_IB;
  const int index = int(impl_->devices.size());
  std::snprintf(obj->dev.name, sizeof obj->dev.name, "%s", dev.name.c_str());
  std::snprintf(obj->dev.dev_name, sizeof obj->dev.dev_name, "uverbs%d", index);
  std::snprintf(obj->dev.dev_path, sizeof obj->dev.dev_path, "/sys/class/infiniband_verbs/uverbs%d", index);
  std::snprintf(obj->dev.ibdev_path, sizeof obj->dev.ibdev_path, "/sys/class/infiniband/%s", dev.name.c_str());
  impl_->deviceObjs.push_back(std::move(obj));
  impl_->devices.push_back(std::move(dev));
  return index;
}

int FakeFabric::addDevice(const std::string& name, std::vector<FakePort> ports) {
  FakeDevice d;
  d.name = name;
  d.ports = std::move(ports);
  return addDevice(std::move(d));
}

int FakeFabric::addDefaultDevice() { return addDevice("fake0", {defaultRocePort()}); }

void FakeFabric::failNextSend(uint32_t qpNum, ibv_wc_status status, uint32_t vendorErr) {
  Lock l(impl_->mu);
  Qp* q = impl_->qpByNum(qpNum);
  if (q == nullptr) die("failNextSend: no QP %#x", qpNum);
  if (status == IBV_WC_SUCCESS) die("failNextSend: IBV_WC_SUCCESS is no failure");
  q->armed = Fault{status, vendorErr};
}

void FakeFabric::injectCompletion(ibv_cq* cq, const ibv_wc& wc) {
  Lock l(impl_->mu);
  Cq* q = findIn(impl_->cqs, cq);
  if (q == nullptr) die("injectCompletion: not a live fake CQ");
  impl_->push(q, wc, 0);
}

void FakeFabric::injectAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_qp* qp) {
  Lock l(impl_->mu);
  Context* c = findIn(impl_->contexts, ctx);
  auto it = impl_->qpsByPtr.find(qp);
  if (c == nullptr || it == impl_->qpsByPtr.end() || it->second->ctx != c || !isQpEvent(type))
    die("injectAsyncEvent: %s needs a live QP of the context", eventTypeStr(type));
  Qp* q = it->second;
  impl_->raise(c, type, Context::Event::kQp, q->info.qpNum);
  if (type == IBV_EVENT_QP_FATAL || type == IBV_EVENT_QP_REQ_ERR || type == IBV_EVENT_QP_ACCESS_ERR)
    impl_->enterError(q);
}

void FakeFabric::injectAsyncEvent(ibv_context* ctx, ibv_event_type type, ibv_cq* cq) {
  Lock l(impl_->mu);
  Context* c = findIn(impl_->contexts, ctx);
  Cq* q = findIn(impl_->cqs, cq);
  if (c == nullptr || q == nullptr || q->ctx != c || type != IBV_EVENT_CQ_ERR)
    die("injectAsyncEvent: %s needs a live CQ of the context", eventTypeStr(type));
  impl_->raise(c, type, Context::Event::kCq, q->cq.handle);
}

void FakeFabric::injectAsyncEvent(ibv_context* ctx, ibv_event_type type, int port) {
  Lock l(impl_->mu);
  Context* c = findIn(impl_->contexts, ctx);
  if (c == nullptr) die("injectAsyncEvent: not an open fake context");
  if (type == IBV_EVENT_DEVICE_FATAL) {
    impl_->raise(c, type, Context::Event::kDevice, 0);
    for (auto& [n, q] : impl_->qps)
      if (q->ctx == c) impl_->enterError(q.get());
    return;
  }
  if (!isPortEvent(type) || impl_->port(c->dev, port) == nullptr)
    die("injectAsyncEvent: %s needs a port event type and a port of the device", eventTypeStr(type));
  impl_->raise(c, type, Context::Event::kPort, uint32_t(port));
}

void FakeFabric::setPortState(const std::string& dev, uint8_t port, ibv_port_state state) {
  Lock l(impl_->mu);
  const int d = impl_->deviceIndex(dev.c_str());
  FakePort* p = impl_->port(d, port);
  if (p == nullptr) die("setPortState: no port %s:%d", dev.c_str(), port);
  const bool wasActive = p->state == IBV_PORT_ACTIVE;
  p->state = state;
  if (wasActive == (state == IBV_PORT_ACTIVE)) return;
  for (auto& [ptr, c] : impl_->contexts)
    if (c->dev == d)
      impl_->raise(c.get(), state == IBV_PORT_ACTIVE ? IBV_EVENT_PORT_ACTIVE : IBV_EVENT_PORT_ERR,
                   Context::Event::kPort, port);
}

void FakeFabric::killQp(uint32_t qpNum) {
  Lock l(impl_->mu);
  Qp* q = impl_->qpByNum(qpNum);
  if (q == nullptr) die("killQp: no QP %#x", qpNum);
  q->info.killed = true;
  impl_->enterError(q);
  impl_->failHeldTo(qpNum);
}

FakeCounts FakeFabric::counts() const {
  Lock l(impl_->mu);
  FakeCounts c;
  c.contexts = int(impl_->contexts.size());
  c.pds = int(impl_->pds.size());
  c.mrs = int(impl_->mrs.size());
  c.cqs = int(impl_->cqs.size());
  c.qps = int(impl_->qps.size());
  c.deviceLists = int(impl_->lists.size());
  c.asyncEventsTaken = impl_->eventsTaken;
  c.asyncEventsAcked = impl_->eventsAcked;
  for (auto& [p, ctx] : impl_->contexts)
    for (const Context::Event& e : ctx->events)
      if (!e.dead) ++c.asyncEventsQueued;
  return c;
}

std::vector<uint32_t> FakeFabric::qpNums() const {
  Lock l(impl_->mu);
  std::vector<uint32_t> v;
  for (auto& [n, q] : impl_->qps) v.push_back(n);
  return v;
}

std::optional<FakeQpInfo> FakeFabric::qpInfo(uint32_t qpNum) const {
  Lock l(impl_->mu);
  Qp* q = impl_->qpByNum(qpNum);
  if (q == nullptr) return std::nullopt;
  FakeQpInfo i = q->info;
  i.postedRecvs = q->recvs.size();
  i.heldSends = q->held.size();
  return i;
}

size_t FakeFabric::postedRecvs(uint32_t qpNum) const {
  Lock l(impl_->mu);
  Qp* q = impl_->qpByNum(qpNum);
  return q == nullptr ? 0 : q->recvs.size();
}

size_t FakeFabric::cqDepth(ibv_cq* cq) const {
  Lock l(impl_->mu);
  Cq* q = findIn(impl_->cqs, cq);
  return q == nullptr ? 0 : q->entries.size();
}

std::vector<std::string> FakeFabric::misuse() const {
  Lock l(impl_->mu);
  return impl_->misuses;
}

}  // namespace snccl::test
