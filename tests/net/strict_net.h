// A test Net that demands what a verbs or UCX plugin demands: it wraps the socket Net and
// refuses (an error Status) every isend, irecv and retargetRecv whose MemHandle is not a
// live registration on that comm covering [data, data + size). It counts regMr/deregMr,
// records where messages were sent from and received into, and ends the process (exit
// status 9, with a line on stderr) when a comm closes with a registration still live,
// so a rank that leaks one fails its test even after the test's own checks ran.
//
// "StrictNoImm" also reports no imm support (Properties::imm): it drops the imm isend is
// given and hands test() a wrong one, so only a transport that prefixes the imm to the
// payload gets it across. "StrictBigHandle" makes its listen handles 200 bytes longer than
// the socket net's 128 (a trailer that connect checks and takes off), as a UCX worker
// address would be.
//
// A test binary makes them selectable as SNCCL_NET=<name> by defining
// snccl::net::testNetPlugins() (net.h) with strictNetDefs(); it must link the static
// layers (snccl_core), since the shared libraries never see that definition.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <unistd.h>
#include <vector>

#include "transport/net/net.h"
#include "transport/net/socket/socket_net.h"

namespace nettest {

using namespace snccl;
using namespace snccl::net;

class StrictNet : public Net {
 public:
  struct Reg {
    const Comm* comm;
    uintptr_t begin;
    size_t bytes;
  };

  enum Variant { kStrict, kNoImm, kBigHandle };
  static constexpr size_t kHandleExtra = 200;
  explicit StrictNet(Variant v) : imm_(v != kNoImm), extra_(v == kBigHandle ? kHandleExtra : 0) {}
  const char* name() const override { return !imm_ ? "StrictNoImm" : extra_ > 0 ? "StrictBigHandle" : "Strict"; }
  Status init() override { return inner_->init(); }
  int devices() const override { return inner_->devices(); }
  Status getProperties(int dev, Properties* props) const override {
    SNCCL_TRY(inner_->getProperties(dev, props));
    props->imm = imm_;
    return OkStatus();
  }
  Status listen(int dev, Handle* handle, ListenComm** listenComm) override {
    SNCCL_TRY(inner_->listen(dev, handle, listenComm));
    if (extra_ == 0) return OkStatus();
    // inner bytes | extra_ bytes of a pattern | the inner size (4 bytes)
    auto inner = uint32_t(handle->bytes.size());
    for (size_t i = 0; i < extra_; ++i) handle->bytes.push_back(static_cast<unsigned char>(i * 7 + 1));
    const auto* n = reinterpret_cast<const unsigned char*>(&inner);
    handle->bytes.insert(handle->bytes.end(), n, n + sizeof inner);
    return OkStatus();
  }
  Status connect(int dev, Handle* handle, SendComm** sendComm) override {
    if (extra_ == 0) return inner_->connect(dev, handle, sendComm);
    *sendComm = nullptr;
    Handle inner;
    SNCCL_TRY(unwrap(*handle, &inner));
    Status s = inner_->connect(dev, &inner, sendComm);
    std::copy(inner.bytes.begin(), inner.bytes.end(), handle->bytes.begin());  // its connect state
    if (s.ok() && *sendComm != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      ++bigHandles_;
    }
    return s;
  }
  Status accept(ListenComm* listenComm, RecvComm** recvComm) override { return inner_->accept(listenComm, recvComm); }
  void cancelConnect(Handle* handle) override {
    if (extra_ == 0) return inner_->cancelConnect(handle);
    Handle inner;
    if (!unwrap(*handle, &inner).ok()) return;
    inner_->cancelConnect(&inner);
    std::copy(inner.bytes.begin(), inner.bytes.end(), handle->bytes.begin());
  }

  Status regMr(Comm* comm, void* data, size_t size, int type, MemHandle** mh) override {
    *mh = nullptr;
    if (comm == nullptr || type != kPtrHost || data == nullptr || size == 0)
      return InvalidArgument("NET/Strict: regMr(comm %p, %p, %zu, type %d)", (void*)comm, data, size, type);
    auto* m = new Mr{comm, reinterpret_cast<uintptr_t>(data), size};
    std::lock_guard<std::mutex> lock(mu_);
    live_.push_back(m);
    regs_.push_back({comm, m->begin, size});
    *mh = m;
    return OkStatus();
  }
  Status deregMr(Comm* comm, MemHandle* mh) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(live_.begin(), live_.end(), mh);
    if (it == live_.end() || (*it)->comm != comm) {
      ++violations_;
      return InvalidArgument("NET/Strict: deregMr of a handle not registered on this comm");
    }
    delete *it;
    live_.erase(it);
    ++deregs_;
    return OkStatus();
  }
  bool usesUnregisteredHostMemory() const override { return false; }

  Status isend(SendComm* comm, void* data, size_t size, int tag, uint32_t imm, MemHandle* mh,
               Request** request) override {
    *request = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      SNCCL_TRY(check(comm, mh, data, size, "isend"));
    }
    SNCCL_TRY(inner_->isend(comm, data, size, tag, imm_ ? imm : 0, nullptr, request));
    if (*request != nullptr) {  // started: a refused isend (no credit yet) is retried
      std::lock_guard<std::mutex> lock(mu_);
      sends_.push_back({comm, reinterpret_cast<uintptr_t>(data), size});
    }
    return OkStatus();
  }
  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle** mhs,
               Request** request) override {
    *request = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (mhs == nullptr) return InvalidArgument("NET/Strict: irecv without MemHandles");
      for (int i = 0; i < n; ++i) SNCCL_TRY(check(comm, mhs[i], data[i], sizes[i], "irecv"));
    }
    SNCCL_TRY(inner_->irecv(comm, n, data, sizes, tags, nullptr, request));
    if (*request != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      recvComm_[*request] = comm;
      for (int i = 0; i < n; ++i) recvs_.push_back({comm, reinterpret_cast<uintptr_t>(data[i]), sizes[i]});
    }
    return OkStatus();
  }
  bool retargetRecv(Request* request, void* data, size_t size, MemHandle* mh) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = recvComm_.find(request);
      if (it == recvComm_.end() || !check(it->second, mh, data, size, "retargetRecv").ok()) return false;
    }
    if (!inner_->retargetRecv(request, data, size, nullptr)) return false;
    std::lock_guard<std::mutex> lock(mu_);
    recvs_.push_back({recvComm_[request], reinterpret_cast<uintptr_t>(data), size});
    return true;
  }
  Status iflush(RecvComm* comm, int n, void** data, int* sizes, MemHandle** mhs, Request** request) override {
    return inner_->iflush(comm, n, data, sizes, mhs, request);
  }
  Status test(Request* request, bool* done, size_t* sizes, uint32_t* imm) override {
    Status s = inner_->test(request, done, sizes, imm);
    if (!imm_ && imm != nullptr) *imm = 0x5eed5eed;
    if (!s.ok() || *done) {
      std::lock_guard<std::mutex> lock(mu_);
      recvComm_.erase(request);
    }
    return s;
  }
  bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const override { return inner_->pollFds(comm, fds); }
  bool quiescent(const Comm* comm) const override { return inner_->quiescent(comm); }
  Status closeSend(SendComm* comm, uint32_t abortCode) override {
    checkClosing(comm);
    return inner_->closeSend(comm, abortCode);
  }
  Status closeRecv(RecvComm* comm, uint32_t abortCode) override {
    checkClosing(comm);
    return inner_->closeRecv(comm, abortCode);
  }
  uint32_t peerAbortCode(const Comm* comm) const override { return inner_->peerAbortCode(comm); }
  Status closeListen(ListenComm* comm) override { return inner_->closeListen(comm); }

  // ---- What the tests look at --------------------------------------------------------
  std::vector<Reg> registrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return regs_;
  }
  size_t deregistrations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return deregs_;
  }
  size_t violations() const {
    std::lock_guard<std::mutex> lock(mu_);
    return violations_;
  }
  // Sends started from / receives posted or moved into [p, p + bytes).
  size_t sendsWithin(const void* p, size_t bytes) const { return within(sends_, p, bytes); }
  size_t recvsWithin(const void* p, size_t bytes) const { return within(recvs_, p, bytes); }
  size_t sends() const {
    std::lock_guard<std::mutex> lock(mu_);
    return sends_.size();
  }
  // Connections made through a handle longer than the socket net's (StrictBigHandle).
  size_t bigHandles() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bigHandles_;
  }

 private:
  struct Mr : MemHandle {
    Mr(const Comm* c, uintptr_t b, size_t n) : comm(c), begin(b), bytes(n) {}
    const Comm* comm;
    uintptr_t begin;
    size_t bytes;
  };

  // The socket net's handle inside one of ours, after checking the trailer arrived whole.
  Status unwrap(const Handle& outer, Handle* inner) const {
    uint32_t n = 0;
    if (outer.bytes.size() >= sizeof n) std::memcpy(&n, outer.bytes.data() + outer.bytes.size() - sizeof n, sizeof n);
    bool ok = outer.bytes.size() == size_t(n) + extra_ + sizeof n;
    for (size_t i = 0; ok && i < extra_; ++i) ok = outer.bytes[n + i] == static_cast<unsigned char>(i * 7 + 1);
    if (!ok) return InternalError("NET/StrictBigHandle: a %zu-byte handle arrived damaged", outer.bytes.size());
    inner->bytes.assign(outer.bytes.begin(), outer.bytes.begin() + n);
    return OkStatus();
  }

  Status check(const Comm* comm, MemHandle* mh, void* data, size_t size, const char* what) {
    auto* m = static_cast<Mr*>(mh);
    auto at = reinterpret_cast<uintptr_t>(data);
    bool live = mh != nullptr && std::find(live_.begin(), live_.end(), mh) != live_.end();
    if (live && m->comm == comm && m->begin <= at && at + size <= m->begin + m->bytes) return OkStatus();
    ++violations_;
    return InvalidArgument("NET/Strict: %s of %zu bytes at %p without a registration covering it (handle %p%s)", what,
                           size, data, (void*)mh, mh == nullptr ? "" : live ? ", another range or comm" : ", dead");
  }
  void checkClosing(const Comm* comm) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const Mr* m : live_)
      if (m->comm == comm) {
        std::fprintf(stderr, "NET/Strict: a comm closed with %zu bytes at %p still registered\n", m->bytes,
                     (void*)m->begin);
        std::fflush(stderr);
        _exit(9);
      }
  }
  size_t within(const std::vector<Reg>& list, const void* p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto b = reinterpret_cast<uintptr_t>(p);
    return size_t(std::count_if(list.begin(), list.end(),
                                [&](const Reg& r) { return r.begin >= b && r.begin + r.bytes <= b + bytes; }));
  }

  const bool imm_;
  const size_t extra_;  // bytes added to listen handles
  size_t bigHandles_ = 0;
  Net* inner_ = socketNet();
  mutable std::mutex mu_;
  std::vector<Mr*> live_;
  std::vector<Reg> regs_;
  size_t deregs_ = 0;
  size_t violations_ = 0;
  std::vector<Reg> sends_;
  std::vector<Reg> recvs_;
  std::map<Request*, const Comm*> recvComm_;
};

// The process's instance of each (SNCCL_NET picks one; the others stay unused).
inline StrictNet* strictNet(StrictNet::Variant v = StrictNet::kStrict) {
  static StrictNet* nets[] = {new StrictNet(StrictNet::kStrict), new StrictNet(StrictNet::kNoImm),
                              new StrictNet(StrictNet::kBigHandle)};
  return nets[v];
}

inline std::span<const NetDef> strictNetDefs() {
  static const NetDef defs[] = {
      {"Strict", "test: the socket net, demanding registered memory",
       []() -> Net* { return strictNet(StrictNet::kStrict); }},
      {"StrictNoImm", "test: Strict without imm", []() -> Net* { return strictNet(StrictNet::kNoImm); }},
      {"StrictBigHandle", "test: Strict with 328-byte listen handles",
       []() -> Net* { return strictNet(StrictNet::kBigHandle); }},
  };
  return defs;
}

}  // namespace nettest
