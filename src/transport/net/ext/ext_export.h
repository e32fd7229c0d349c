// The reverse of ext_net.h: a snccl Net exported as an NCCL plugin table, so that a library
// built from snccl's own transports loads wherever an ncclNetPlugin_vN does (snccl's
// loader, or NCCL's). The tests build snccl's Socket and IB nets this way and run the
// multi-rank suites through the loader.
//
// A plugin source defines exportedNet() and one table:
//   snccl::net::Net* snccl::net::ext::exportedNet() { return snccl::net::socketNet(); }
//   extern "C" {
//   [[gnu::visibility("default")]] snccl::net::abi::NetV8 ncclNetPlugin_v8 =
//       snccl::net::ext::exportTable<8>("SnSocket");
//   }
// and links the snccl layers with their symbols kept local (-Wl,--exclude-libs,ALL), so
// its copy of snccl never binds to the one in the process that loads it.
//
// What the table does with ncclNet's calls:
//  - the listen handle carries the Net's handle behind its length, without its trailing
//    zeros (126 bytes at most besides them); connect keeps the Net's Handle for each
//    handle address while the connect is in progress, because a Net may keep its state
//    there between calls;
//  - isend sends imm 0 (ncclNet has none); test reports the sizes of the request's buffers;
//  - errors come back as the Status's ncclResult_t, and their text goes to the logger the
//    plugin was initialised with, as a WARN (INFO when the peer closed the connection in
//    order: the caller's receives posted for a next operation fail then);
//  - device offload, dma-buf registration and virtual NICs are not offered.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "common/log.h"
#include "transport/net/ext/nccl_net_abi.h"
#include "transport/net/net.h"

namespace snccl::net::ext {

// Defined by the plugin library: the Net it exports.
Net* exportedNet();

template <int V>
class Exporter {
  using Props = typename abi::Version<V>::Props;

  struct State {
    std::mutex mu;
    abi::Logger logger = nullptr;
    std::map<void*, Handle> connecting;                        // by the caller's handle address
    std::map<int, std::pair<std::string, std::string>> names;  // per device: name, pciPath
    // Each comm's requests not yet completed, freed when it closes (receives posted for a
    // next operation are never tested).
    std::map<Comm*, std::set<void*>> pending;
  };
  static State& state() {
    // The plugin's only state: ncclNet's calls carry no context before v11. Never
    // destroyed: a communicator still alive at exit may close its connections after the
    // library's statics are gone.
    static State& s = *new State;
    return s;
  }
  struct Req {
    Request* r;
    int n;
    Comm* comm;
  };
  static Req* track(Request* r, int n, Comm* c) {
    auto* q = new Req{r, n, c};
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    st.pending[c].insert(q);
    return q;
  }
  static void untrack(Req* q) {
    State& st = state();
    {
      std::lock_guard<std::mutex> lock(st.mu);
      auto it = st.pending.find(q->comm);
      if (it != st.pending.end()) it->second.erase(q);
    }
    delete q;
  }
  // The comm's requests, taken out of the table before the Net closes the comm (whose
  // address another comm may get at once) and freed after: they go with it.
  static std::set<void*> takePending(Comm* c) {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.pending.find(c);
    if (it == st.pending.end()) return {};
    std::set<void*> out = std::move(it->second);
    st.pending.erase(it);
    return out;
  }
  static void freeAll(const std::set<void*>& reqs) {
    for (void* q : reqs) delete static_cast<Req*>(q);
  }
  // The ncclNet handle: the Net handle's length (2 bytes), then its first kHandlePayload
  // bytes; the rest of a longer handle must be zeros (as the socket and IB nets' are at
  // listen time: their tails hold a connect's stage) and is restored as zeros.
  static constexpr size_t kHandlePayload = abi::kHandleBytes - sizeof(uint16_t);

  // The Status's code; its text goes to the logger, as a WARN unless it is the consequence
  // of the peer's clean close (`comm`'s Net::peerClosed), which the caller cannot tell.
  static ncclResult_t fail(const Status& s, Comm* comm = nullptr) {
    if (s.ok()) return ncclSuccess;
    abi::Logger log = state().logger;
    bool closed = comm != nullptr && exportedNet()->peerClosed(comm);
    if (log != nullptr)
      log(closed ? abi::kLogInfo : abi::kLogWarn, closed ? kNetSubsys : ~0UL, __FILE__, __LINE__, "%s",
          s.message().c_str());
    return s.code();
  }
  static constexpr unsigned long kNetSubsys = 0x10;
  static Comm* comm(void* c) { return static_cast<Comm*>(c); }

 public:
  static ncclResult_t init6(abi::Logger logger) {
    state().logger = logger;
    if (logger != nullptr) log::setSink(logThrough);
    return fail(exportedNet()->init());
  }
  // The plugin's own lines go to its host's logger, which owns the log's destination.
  static void logThrough(log::Level level, uint64_t subsys, const char* file, int line, const char* text) {
    if (abi::Logger log = state().logger; log != nullptr)
      log(static_cast<abi::LogLevel>(level), static_cast<unsigned long>(subsys), file, line, "%s", text);
  }
  static ncclResult_t init10(abi::Logger logger, abi::ProfilerCallback) { return init6(logger); }
  static ncclResult_t init11(void** ctx, uint64_t, abi::CommConfig*, abi::Logger logger, abi::ProfilerCallback) {
    *ctx = exportedNet();
    return init6(logger);
  }
  static ncclResult_t finalize(void*) { return ncclSuccess; }
  static ncclResult_t setNetAttr(void*, abi::NetAttr*) { return ncclSuccess; }

  static ncclResult_t devices(int* n) {
    *n = exportedNet()->devices();
    return ncclSuccess;
  }

  static ncclResult_t getProperties(int dev, Props* out) {
    Properties p;
    Status s = exportedNet()->getProperties(dev, &p);
    if (!s.ok()) return fail(s);
    *out = Props{};
    State& st = state();
    {
      std::lock_guard<std::mutex> lock(st.mu);
      auto& kept = st.names[dev];  // the strings live as long as the plugin
      if (kept.first != p.name || kept.second != p.pciPath) kept = {p.name, p.pciPath};
      out->name = kept.first.data();
      out->pciPath = kept.second.empty() ? nullptr : kept.second.data();
    }
    out->guid = p.guid;
    out->ptrSupport = abi::kPtrHost;
    out->speed = p.speedMbps;
    out->port = p.port;
    out->latency = p.latencyUs;
    out->maxComms = p.maxComms > 0 ? p.maxComms : 65536;
    out->maxRecvs = p.maxRecvs;
    if constexpr (V >= 9) {
      out->maxP2pBytes = p.maxP2pBytes > 0 ? p.maxP2pBytes : abi::kMaxNetSizeBeforeV9;
      out->maxCollBytes = out->maxP2pBytes;
      out->vProps.ndevs = 1;
      out->vProps.devs[0] = dev;
    }
    if constexpr (V >= 11) out->maxMultiRequestSize = 1;
    return ncclSuccess;
  }

  static ncclResult_t listen(int dev, void* handle, void** listenComm) {
    Handle h;
    ListenComm* l = nullptr;
    Status s = exportedNet()->listen(dev, &h, &l);
    if (!s.ok()) return fail(s);
    size_t n = h.bytes.size();
    bool fits = n <= UINT16_MAX && std::all_of(h.bytes.begin() + std::min(n, kHandlePayload), h.bytes.end(),
                                               [](unsigned char b) { return b == 0; });
    if (!fits) {
      exportedNet()->closeListen(l).ok();
      return fail(InternalError("a %zu-byte listen handle does not fit ncclNet's %zu bytes", n, abi::kHandleBytes));
    }
    auto* out = static_cast<unsigned char*>(handle);
    std::memset(out, 0, abi::kHandleBytes);
    auto len = static_cast<uint16_t>(n);
    std::memcpy(out, &len, sizeof len);
    std::memcpy(out + sizeof len, h.bytes.data(), std::min(n, kHandlePayload));
    *listenComm = l;
    return ncclSuccess;
  }
  static ncclResult_t listen11(void*, int dev, void* handle, void** listenComm) {
    return listen(dev, handle, listenComm);
  }

  static ncclResult_t connect6(int dev, void* handle, void** sendComm) {
    *sendComm = nullptr;
    State& st = state();
    Handle* h;
    {
      std::lock_guard<std::mutex> lock(st.mu);
      auto [it, fresh] = st.connecting.try_emplace(handle);
      h = &it->second;
      if (fresh) {
        const auto* in = static_cast<const unsigned char*>(handle);
        uint16_t len = 0;
        std::memcpy(&len, in, sizeof len);
        h->bytes.assign(len, 0);
        std::memcpy(h->bytes.data(), in + sizeof len, std::min<size_t>(len, kHandlePayload));
      }
    }
    SendComm* s = nullptr;
    Status r = exportedNet()->connect(dev, h, &s);
    if (!r.ok() || s != nullptr) {
      std::lock_guard<std::mutex> lock(st.mu);
      st.connecting.erase(handle);
    }
    if (s != nullptr) *sendComm = static_cast<Comm*>(s);
    return fail(r);
  }
  static ncclResult_t connect7(int dev, void* handle, void** sendComm, abi::DeviceHandle**) {
    return connect6(dev, handle, sendComm);
  }
  static ncclResult_t connect10(int dev, abi::CommConfig*, void* handle, void** sendComm, abi::DeviceHandle**) {
    return connect6(dev, handle, sendComm);
  }
  static ncclResult_t connect11(void*, int dev, void* handle, void** sendComm, abi::DeviceHandle**) {
    return connect6(dev, handle, sendComm);
  }

  static ncclResult_t accept6(void* listenComm, void** recvComm) {
    *recvComm = nullptr;
    RecvComm* r = nullptr;
    Status s = exportedNet()->accept(static_cast<ListenComm*>(listenComm), &r);
    if (r != nullptr) *recvComm = static_cast<Comm*>(r);
    return fail(s);
  }
  static ncclResult_t accept7(void* listenComm, void** recvComm, abi::DeviceHandle**) {
    return accept6(listenComm, recvComm);
  }

  template <typename Size>
  static ncclResult_t regMr(void* c, void* data, Size size, int type, void** mhandle) {
    if (type != abi::kPtrHost) return fail(InvalidUsage("only host memory can be registered"));
    MemHandle* mh = nullptr;
    Status s = exportedNet()->regMr(comm(c), data, size_t(size), kPtrHost, &mh);
    *mhandle = mh;
    return fail(s);
  }
  static ncclResult_t regMrDmaBuf(void*, void*, size_t, int, uint64_t, int, void**) {
    return fail(InvalidUsage("dma-buf registration is not offered"));
  }
  static ncclResult_t deregMr(void* c, void* mhandle) {
    return fail(exportedNet()->deregMr(comm(c), static_cast<MemHandle*>(mhandle)));
  }

  template <typename Size>
  static ncclResult_t isend(void* c, void* data, Size size, int tag, void* mh, void** request) {
    *request = nullptr;
    Request* r = nullptr;
    Status s = exportedNet()->isend(static_cast<SendComm*>(comm(c)), data, size_t(size), tag, 0,
                                    static_cast<MemHandle*>(mh), &r);
    if (r != nullptr) *request = track(r, 1, comm(c));
    return fail(s, comm(c));
  }
  static ncclResult_t isend10(void* c, void* data, size_t size, int tag, void* mh, void*, void** request) {
    return isend<size_t>(c, data, size, tag, mh, request);
  }

  template <typename Size>
  static ncclResult_t irecv(void* c, int n, void** data, Size* sizes, int* tags, void** mhs, void** request) {
    *request = nullptr;
    if (n < 1 || n > abi::kMaxRecvs) return fail(InvalidUsage("irecv of %d buffers", n));
    size_t sz[abi::kMaxRecvs];
    MemHandle* handles[abi::kMaxRecvs];
    for (int i = 0; i < n; ++i) {
      sz[i] = size_t(sizes[i]);
      handles[i] = static_cast<MemHandle*>(mhs[i]);
    }
    Request* r = nullptr;
    Status s = exportedNet()->irecv(static_cast<RecvComm*>(comm(c)), n, data, sz, tags, handles, &r);
    if (r != nullptr) *request = track(r, n, comm(c));
    return fail(s, comm(c));
  }
  static ncclResult_t irecv10(void* c, int n, void** data, size_t* sizes, int* tags, void** mhs, void**,
                              void** request) {
    return irecv<size_t>(c, n, data, sizes, tags, mhs, request);
  }

  static ncclResult_t iflush(void* c, int n, void** data, int* sizes, void** mhs, void** request) {
    *request = nullptr;
    if (n < 1 || n > abi::kMaxRecvs) return fail(InvalidUsage("iflush of %d buffers", n));
    MemHandle* handles[abi::kMaxRecvs];
    for (int i = 0; i < n; ++i) handles[i] = static_cast<MemHandle*>(mhs[i]);
    Request* r = nullptr;
    Status s = exportedNet()->iflush(static_cast<RecvComm*>(comm(c)), n, data, sizes, handles, &r);
    if (r != nullptr) *request = track(r, n, comm(c));
    return fail(s);
  }

  static ncclResult_t test(void* request, int* done, int* sizes) {
    auto* q = static_cast<Req*>(request);
    bool finished = false;
    size_t got[abi::kMaxRecvs] = {};
    uint32_t imm = 0;
    Status s = exportedNet()->test(q->r, &finished, got, &imm);
    *done = finished ? 1 : 0;
    if (finished && sizes != nullptr)
      for (int i = 0; i < q->n; ++i) sizes[i] = int(got[i]);
    Comm* c = q->comm;
    if (finished || !s.ok()) untrack(q);
    return fail(s, c);
  }

  static ncclResult_t closeSend(void* c) {
    std::set<void*> reqs = takePending(comm(c));
    Status s = exportedNet()->closeSend(static_cast<SendComm*>(comm(c)), 0);
    freeAll(reqs);
    return fail(s);
  }
  static ncclResult_t closeRecv(void* c) {
    std::set<void*> reqs = takePending(comm(c));
    Status s = exportedNet()->closeRecv(static_cast<RecvComm*>(comm(c)), 0);
    freeAll(reqs);
    return fail(s);
  }
  static ncclResult_t closeListen(void* l) { return fail(exportedNet()->closeListen(static_cast<ListenComm*>(l))); }

  static ncclResult_t getDeviceMr(void*, void*, void**) { return fail(InvalidUsage("no device offload")); }
  static ncclResult_t irecvConsumed(void*, int, void*) { return ncclSuccess; }
  template <int kDevs>
  static ncclResult_t makeVDevice(int*, abi::VDeviceProps<kDevs>*) {
    return fail(InvalidUsage("virtual NICs are not offered"));
  }
};

// The table of version V over exportedNet(), named `name`.
template <int V>
typename abi::Version<V>::Net exportTable(const char* name) {
  using E = Exporter<V>;
  typename abi::Version<V>::Net t{};
  t.name = name;
  if constexpr (V >= 11) {
    t.init = E::init11;
    t.listen = E::listen11;
    t.connect = E::connect11;
    t.finalize = E::finalize;
    t.setNetAttr = E::setNetAttr;
  } else {
    if constexpr (V == 10) {
      t.init = E::init10;
      t.connect = E::connect10;
    } else {
      t.init = E::init6;
      if constexpr (V >= 7)
        t.connect = E::connect7;
      else
        t.connect = E::connect6;
    }
    t.listen = E::listen;
  }
  t.devices = E::devices;
  t.getProperties = E::getProperties;
  if constexpr (V >= 7)
    t.accept = E::accept7;
  else
    t.accept = E::accept6;
  if constexpr (V <= 7)
    t.regMr = E::template regMr<int>;
  else
    t.regMr = E::template regMr<size_t>;
  t.regMrDmaBuf = E::regMrDmaBuf;
  t.deregMr = E::deregMr;
  if constexpr (V >= 10) {
    t.isend = E::isend10;
    t.irecv = E::irecv10;
  } else if constexpr (V == 9) {
    t.isend = E::template isend<size_t>;
    t.irecv = E::template irecv<size_t>;
  } else {
    t.isend = E::template isend<int>;
    t.irecv = E::template irecv<int>;
  }
  t.iflush = E::iflush;
  t.test = E::test;
  t.closeSend = E::closeSend;
  t.closeRecv = E::closeRecv;
  t.closeListen = E::closeListen;
  if constexpr (V >= 7) {
    t.getDeviceMr = E::getDeviceMr;
    t.irecvConsumed = E::irecvConsumed;
  }
  if constexpr (V == 12)
    t.makeVDevice = E::template makeVDevice<8>;
  else if constexpr (V >= 9)
    t.makeVDevice = E::template makeVDevice<4>;
  return t;
}

}  // namespace snccl::net::ext
