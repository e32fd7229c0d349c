// The adapter from an NCCL plugin table to a Net (ext_net.h): one class template,
// instantiated per version, whose calls differ only where the versions' signatures do.
#include "transport/net/ext/ext_net.h"

#include <algorithm>
#include <climits>
#include <cstdarg>
#include <mutex>
#include <utility>
#include <vector>

#include "common/log.h"
#include "transport/net/ext/nccl_net_abi.h"

namespace snccl::net::ext {

namespace {

// The last WARN a plugin wrote on this thread. Plugins explain a failure in a WARN and
// return only a code, so the adapter adds that text to the error it returns.
thread_local std::string tLastPluginWarn;

// The logger plugins get: their lines join snccl's log with their own level and
// subsystem bits (which are NCCL's, as snccl's are).
void pluginLog(abi::LogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  log::Level l = level == abi::kLogWarn || level == abi::kLogAbort ? log::kWarn
                 : level == abi::kLogTrace                         ? log::kTrace
                                                                   : log::kInfo;
  if (level == abi::kLogNone || level == abi::kLogVersion) return;
  if (l != log::kWarn && !log::enabled(l, flags)) return;
  va_list ap;
  va_start(ap, fmt);
  std::string text = vformat(fmt, ap);
  va_end(ap);
  if (l == log::kWarn) tLastPluginWarn = text;
  log::write(l, l == log::kWarn ? log::kAll : flags, file != nullptr ? file : "plugin", line, "%s", text.c_str());
}

// snccl records no profiler events for plugins; the callback exists because some plugins
// call it without checking for null.
ncclResult_t pluginProfile(void** eHandle, int, void*, int64_t, void*) {
  if (eHandle != nullptr) *eHandle = nullptr;
  return ncclSuccess;
}

// The wrappers around the plugin's opaque pointers. A send or receive comm owns the
// wrappers of its requests: one per request the version lets it have in flight, made with
// the comm and reused, so that a request costs no allocation and the ones still posted
// when the comm closes (receives for a next operation) go with it.
struct Inner;
class XRequest final : public Request {
 public:
  void* ptr = nullptr;
  int n = 0;               // buffers (irecv's n; 1 for a send)
  Inner* owner = nullptr;  // the comm whose in-flight count it holds
};
struct Inner {
  Inner(void* p, int maxRequests) : ptr(p), slots(size_t(maxRequests)) {
    for (XRequest& r : slots) free.push_back(&r);
  }
  void* ptr;
  std::vector<XRequest> slots;  // never resized: requests point into it
  std::vector<XRequest*> free;
  int inflight() const { return int(slots.size() - free.size()); }
  bool full() const { return free.empty(); }
  XRequest* take(void* r, int n) {
    XRequest* x = free.back();
    free.pop_back();
    x->ptr = r;
    x->n = n;
    x->owner = this;
    return x;
  }
  void give(XRequest* x) { free.push_back(x); }
};
class XListen final : public ListenComm {
 public:
  explicit XListen(void* p) : ptr(p) {}
  void* ptr;
};
class XSend final : public SendComm {
 public:
  XSend(void* p, int maxRequests) : in(p, maxRequests) {}
  Inner in;
};
class XRecv final : public RecvComm {
 public:
  XRecv(void* p, int maxRequests) : in(p, maxRequests) {}
  Inner in;
};
class XMem final : public MemHandle {
 public:
  explicit XMem(void* p) : ptr(p) {}
  void* ptr;
};

Inner* innerOf(Comm* c) {
  if (auto* s = dynamic_cast<XSend*>(c)) return &s->in;
  if (auto* r = dynamic_cast<XRecv*>(c)) return &r->in;
  return nullptr;
}
void* mhOf(MemHandle* mh) { return mh != nullptr ? static_cast<XMem*>(mh)->ptr : nullptr; }

template <int V>
class ExtNet final : public Net {
  using Table = typename abi::Version<V>::Net;
  using Props = typename abi::Version<V>::Props;
  static constexpr int kMaxRequests = V == 6 ? abi::kMaxRequestsV6 : abi::kMaxRequests;
  // Before v9 sizes are ints, and NCCL never hands such a plugin more than 1 GiB at once.
  static constexpr bool kIntSizes = V < 9;

 public:
  ExtNet(const Table* t, std::string lib) : t_(t), lib_(std::move(lib)) {
    name_ = t_->name != nullptr ? t_->name : lib_;
  }
  const char* name() const override { return name_.c_str(); }

  Status init() override {
    std::call_once(initOnce_, [this] {
      ncclResult_t r;
      if constexpr (V >= 11) {
        r = t_->init(&ctx_, 0, &config_, pluginLog, pluginProfile);
      } else if constexpr (V == 10) {
        r = t_->init(pluginLog, pluginProfile);
      } else {
        r = t_->init(pluginLog);
      }
      initStatus_ = check(r, "init");
      if (!initStatus_.ok()) return;
      int n = 0;
      initStatus_ = check(t_->devices(&n), "devices");
      if (!initStatus_.ok()) return;
      // Only devices that move host memory as it is: not GPU-only ones, nor ones whose data
      // a device kernel must unpack (netDeviceType other than host, from v7).
      for (int d = 0; d < n; ++d) {
        Props p{};
        if (t_->getProperties(d, &p) != ncclSuccess) continue;
        bool host = (p.ptrSupport & abi::kPtrHost) != 0;
        if constexpr (V >= 7) host = host && p.netDeviceType == abi::kDeviceHost;
        if (host) {
          usable_.push_back(d);
        } else {
          SN_INFO(log::kNet | log::kInit, "NET/%s : device %d (%s) does not take host memory; not used", name_.c_str(),
                  d, p.name != nullptr ? p.name : "?");
        }
      }
    });
    return initStatus_;
  }
  int devices() const override { return int(usable_.size()); }

  Status getProperties(int dev, Properties* out) const override {
    if (dev < 0 || dev >= devices()) return InvalidArgument("NET/%s : no device %d", name_.c_str(), dev);
    Props p{};
    SNCCL_TRY(check(t_->getProperties(usable_[size_t(dev)], &p), "getProperties"));
    *out = Properties{};
    out->name = p.name != nullptr ? p.name : "";
    out->pciPath = p.pciPath != nullptr ? p.pciPath : "";
    out->guid = p.guid;
    out->ptrSupport = p.ptrSupport;
    out->speedMbps = p.speed;
    out->port = p.port;
    out->latencyUs = p.latency;
    out->maxComms = p.maxComms;
    out->maxRecvs = std::clamp(p.maxRecvs, 1, abi::kMaxRecvs);
    if constexpr (kIntSizes) {
      out->maxP2pBytes = abi::kMaxNetSizeBeforeV9;
    } else {
      out->maxP2pBytes = p.maxP2pBytes > 0 ? p.maxP2pBytes : abi::kMaxNetSizeBeforeV9;
    }
    out->imm = false;
    return OkStatus();
  }

  Status listen(int dev, Handle* handle, ListenComm** listenComm) override {
    if (dev < 0 || dev >= devices()) return InvalidArgument("NET/%s : no device %d", name_.c_str(), dev);
    dev = usable_[size_t(dev)];
    handle->bytes.assign(abi::kHandleBytes, 0);
    void* l = nullptr;
    ncclResult_t r;
    if constexpr (V >= 11) {
      r = t_->listen(ctx_, dev, handle->bytes.data(), &l);
    } else {
      r = t_->listen(dev, handle->bytes.data(), &l);
    }
    SNCCL_TRY(check(r, "listen"));
    *listenComm = new XListen(l);
    return OkStatus();
  }

  Status connect(int dev, Handle* handle, SendComm** sendComm) override {
    *sendComm = nullptr;
    if (dev < 0 || dev >= devices()) return InvalidArgument("NET/%s : no device %d", name_.c_str(), dev);
    dev = usable_[size_t(dev)];
    // NCCL hands plugins a handle of kHandleBytes; one that came shorter is padded once,
    // before the first call, so the plugin's state in it stays put across calls.
    if (handle->bytes.size() < abi::kHandleBytes) handle->bytes.resize(abi::kHandleBytes, 0);
    void* s = nullptr;
    abi::DeviceHandle* offload = nullptr;  // no device offload is asked for
    ncclResult_t r;
    if constexpr (V >= 11) {
      r = t_->connect(ctx_, dev, handle->bytes.data(), &s, &offload);
    } else if constexpr (V == 10) {
      r = t_->connect(dev, &config_, handle->bytes.data(), &s, &offload);
    } else if constexpr (V >= 7) {
      r = t_->connect(dev, handle->bytes.data(), &s, &offload);
    } else {
      r = t_->connect(dev, handle->bytes.data(), &s);
    }
    SNCCL_TRY(check(r, "connect"));
    if (s != nullptr) *sendComm = new XSend(s, kMaxRequests);
    return OkStatus();
  }

  Status accept(ListenComm* listenComm, RecvComm** recvComm) override {
    *recvComm = nullptr;
    void* c = nullptr;
    ncclResult_t r;
    if constexpr (V >= 7) {
      abi::DeviceHandle* offload = nullptr;
      r = t_->accept(static_cast<XListen*>(listenComm)->ptr, &c, &offload);
    } else {
      r = t_->accept(static_cast<XListen*>(listenComm)->ptr, &c);
    }
    SNCCL_TRY(check(r, "accept"));
    if (c != nullptr) *recvComm = new XRecv(c, kMaxRequests);
    return OkStatus();
  }

  // ncclNet has no way to abandon a connect: what the plugin made so far stays with it.
  void cancelConnect(Handle*) override {}

  Status regMr(Comm* comm, void* data, size_t size, int type, MemHandle** mh) override {
    Inner* in = innerOf(comm);
    if (in == nullptr) return InvalidUsage("NET/%s : regMr on a listen comm", name());
    void* h = nullptr;
    ncclResult_t r;
    if constexpr (V <= 7) {  // regMr's size is an int
      if (size > size_t(INT_MAX)) return InvalidArgument("NET/%s : %zu bytes are too many to register", name(), size);
      r = t_->regMr(in->ptr, data, int(size), type, &h);
    } else {
      r = t_->regMr(in->ptr, data, size, type, &h);
    }
    SNCCL_TRY(check(r, "regMr"));
    *mh = new XMem(h);
    return OkStatus();
  }

  Status deregMr(Comm* comm, MemHandle* mh) override {
    Inner* in = innerOf(comm);
    auto* m = static_cast<XMem*>(mh);
    ncclResult_t r = in != nullptr ? t_->deregMr(in->ptr, m->ptr) : ncclInvalidUsage;
    delete m;
    return check(r, "deregMr");
  }

  Status isend(SendComm* comm, void* data, size_t size, int tag, uint32_t, MemHandle* mh, Request** request) override {
    *request = nullptr;
    Inner& in = static_cast<XSend*>(comm)->in;
    if (in.full()) return OkStatus();
    void* r = nullptr;
    ncclResult_t res;
    if constexpr (kIntSizes) {
      if (size > abi::kMaxNetSizeBeforeV9)
        return InvalidArgument("NET/%s : a %zu-byte message exceeds the plugin's limit", name(), size);
      res = t_->isend(in.ptr, data, int(size), tag, mhOf(mh), &r);
    } else if constexpr (V >= 10) {
      res = t_->isend(in.ptr, data, size, tag, mhOf(mh), nullptr, &r);
    } else {
      res = t_->isend(in.ptr, data, size, tag, mhOf(mh), &r);
    }
    SNCCL_TRY(check(res, "isend"));
    if (r != nullptr) *request = in.take(r, 1);
    return OkStatus();
  }

  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle** mhs,
               Request** request) override {
    *request = nullptr;
    if (n < 1 || n > abi::kMaxRecvs) return InvalidUsage("NET/%s : irecv of %d buffers", name(), n);
    Inner& in = static_cast<XRecv*>(comm)->in;
    if (in.full()) return OkStatus();
    void* handles[abi::kMaxRecvs] = {};
    for (int i = 0; i < n; ++i) handles[i] = mhOf(mhs[i]);
    void* r = nullptr;
    ncclResult_t res;
    if constexpr (kIntSizes) {
      int isizes[abi::kMaxRecvs];
      for (int i = 0; i < n; ++i) {
        if (sizes[i] > abi::kMaxNetSizeBeforeV9)
          return InvalidArgument("NET/%s : a %zu-byte receive exceeds the plugin's limit", name(), sizes[i]);
        isizes[i] = int(sizes[i]);
      }
      res = t_->irecv(in.ptr, n, data, isizes, tags, handles, &r);
    } else if constexpr (V >= 10) {
      void* phandles[abi::kMaxRecvs] = {};
      res = t_->irecv(in.ptr, n, data, sizes, tags, handles, phandles, &r);
    } else {
      res = t_->irecv(in.ptr, n, data, sizes, tags, handles, &r);
    }
    SNCCL_TRY(check(res, "irecv"));
    if (r != nullptr) *request = in.take(r, n);
    return OkStatus();
  }

  Status iflush(RecvComm* comm, int n, void** data, int* sizes, MemHandle** mhs, Request** request) override {
    *request = nullptr;
    if (n < 1 || n > abi::kMaxRecvs) return InvalidUsage("NET/%s : iflush of %d buffers", name(), n);
    Inner& in = static_cast<XRecv*>(comm)->in;
    // A flush is a request like the others: NCCL never has more in flight either.
    if (in.full()) return InvalidUsage("NET/%s : iflush with %d requests in flight", name(), in.inflight());
    void* handles[abi::kMaxRecvs] = {};
    for (int i = 0; i < n; ++i) handles[i] = mhOf(mhs[i]);
    void* r = nullptr;
    SNCCL_TRY(check(t_->iflush(in.ptr, n, data, sizes, handles, &r), "iflush"));
    // A null request from iflush means there was nothing to flush, in ncclNet and here.
    if (r != nullptr) *request = in.take(r, n);
    return OkStatus();
  }

  Status test(Request* request, bool* done, size_t* sizes, uint32_t* imm) override {
    auto* x = static_cast<XRequest*>(request);
    int finished = 0;
    int got[abi::kMaxRecvs] = {};
    ncclResult_t r = t_->test(x->ptr, &finished, got);
    *done = false;
    if (r == ncclSuccess && finished == 0) return OkStatus();
    if (r == ncclSuccess) {
      *done = true;
      if (sizes != nullptr)
        for (int i = 0; i < x->n; ++i) sizes[i] = size_t(got[i] < 0 ? 0 : got[i]);
      if (imm != nullptr) *imm = 0;
    }
    x->owner->give(x);
    return check(r, "test");
  }

  bool pollFds(const Comm*, std::vector<pollfd>*) const override { return false; }

  Status closeSend(SendComm* comm, uint32_t) override {
    auto* s = static_cast<XSend*>(comm);
    ncclResult_t r = t_->closeSend(s->in.ptr);
    delete s;
    return check(r, "closeSend");
  }
  Status closeRecv(RecvComm* comm, uint32_t) override {
    auto* c = static_cast<XRecv*>(comm);
    ncclResult_t r = t_->closeRecv(c->in.ptr);
    delete c;
    return check(r, "closeRecv");
  }
  uint32_t peerAbortCode(const Comm*) const override { return 0; }
  Status closeListen(ListenComm* comm) override {
    auto* l = static_cast<XListen*>(comm);
    ncclResult_t r = t_->closeListen(l->ptr);
    delete l;
    return check(r, "closeListen");
  }

 private:
  Status check(ncclResult_t r, const char* call) const {
    if (r == ncclSuccess) return OkStatus();
    std::string why;
    if (!tLastPluginWarn.empty()) why = "; its last warning: " + std::exchange(tLastPluginWarn, std::string());
    return Error(r, "NET/%s : the plugin's %s returned %s (%s, ncclNetPlugin_v%d)%s", name_.c_str(), call,
                 resultName(r), lib_.c_str(), V, why.c_str());
  }

  const Table* t_;
  std::string lib_;
  std::string name_;
  void* ctx_ = nullptr;  // v11+: the plugin's context
  abi::CommConfig config_{abi::kTrafficClassUndef};
  std::once_flag initOnce_;
  Status initStatus_;
  std::vector<int> usable_;  // the plugin's device index of each device this Net reports
};

template <int V>
std::unique_ptr<Net> make(const void* table, const std::string& lib) {
  return std::make_unique<ExtNet<V>>(static_cast<const typename abi::Version<V>::Net*>(table), lib);
}

}  // namespace

std::unique_ptr<Net> wrapTable(int version, const void* table, const std::string& lib) {
  switch (version) {
    case 6:
      return make<6>(table, lib);
    case 7:
      return make<7>(table, lib);
    case 8:
      return make<8>(table, lib);
    case 9:
      return make<9>(table, lib);
    case 10:
      return make<10>(table, lib);
    case 11:
      return make<11>(table, lib);
    case 12:
      return make<12>(table, lib);
    default:
      return nullptr;
  }
}

}  // namespace snccl::net::ext
