// The compressing net (compress_net.h).
#include "transport/net/compress/compress_net.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/wait.h"
#include "transport/net/compress/mode_switch.h"
#include "transport/net/compress/wire.h"

namespace snccl::net {

namespace {

using compress::Codec;
using compress::CodecConfig;
using compress::Coder;
using compress::kWireMagic;
using compress::WireHeader;

// The listen handle's trailer: magic, codec, 3 bytes of padding.
constexpr size_t kTrailer = 8;
// Messages below this go raw: the header and a call to the codec cost more than they save.
constexpr size_t kMinCompress = 1024;

// A buffer of a connection's staging pool, registered with the inner comm when the inner
// plugin needs registration.
struct Stage {
  std::unique_ptr<char[]> data;
  size_t cap = 0;
  MemHandle* mh = nullptr;
};

class StagePool {
 public:
  StagePool(Net* inner, Comm* comm) : inner_(inner), comm_(comm) {}
  // A buffer of at least `bytes`, or nullptr with *st set.
  Stage* take(size_t bytes, Status* st) {
    for (size_t i = 0; i < free_.size(); ++i)
      if (free_[i]->cap >= bytes) {
        Stage* s = free_[i];
        free_.erase(free_.begin() + long(i));
        return s;
      }
    auto s = std::make_unique<Stage>();
    s->cap = std::max<size_t>(bytes, 4096);
    s->data.reset(new (std::nothrow) char[s->cap]);
    if (!s->data) {
      *st = SystemError("NET/compress: cannot allocate a staging buffer of %zu bytes", s->cap);
      return nullptr;
    }
    if (!inner_->usesUnregisteredHostMemory()) {
      Status r = inner_->regMr(comm_, s->data.get(), s->cap, kPtrHost, &s->mh);
      if (!r.ok()) {
        *st = r;
        return nullptr;
      }
    }
    all_.push_back(std::move(s));
    return all_.back().get();
  }
  void give(Stage* s) {
    if (s != nullptr) free_.push_back(s);
  }
  // Deregisters every buffer (before the inner comm closes).
  void release() {
    for (auto& s : all_)
      if (s->mh != nullptr) {
        (void)inner_->deregMr(comm_, s->mh);
        s->mh = nullptr;
      }
  }

 private:
  Net* inner_;
  Comm* comm_;
  std::vector<std::unique_ptr<Stage>> all_;
  std::vector<Stage*> free_;
};

struct CRequest;

struct CListen : ListenComm {
  ListenComm* inner;
  explicit CListen(ListenComm* c) : inner(c) {}
};

struct CSend : SendComm {
  SendComm* inner;
  StagePool pool;
  Coder coder;
  // A message encoded for an isend that found no credit: the caller retries with the same
  // one, which is then sent without encoding it again.
  const void* pendingSrc = nullptr;
  size_t pendingSize = 0, pendingWire = 0;
  Stage* pending = nullptr;
  int inflight = 0;           // sends started and not completed
  compress::ModeSwitch mode;  // whether compressing pays on this connection
  std::set<CRequest*> live;
  CSend(Net* net, SendComm* c, const CodecConfig& cfg) : inner(c), pool(net, c), coder(cfg) {}
};

struct CRecv : RecvComm {
  RecvComm* inner;
  StagePool pool;
  Coder coder;
  std::set<CRequest*> live;
  CRecv(Net* net, RecvComm* c, const CodecConfig& cfg) : inner(c), pool(net, c), coder(cfg) {}
};

enum class Kind { kSend, kRecv, kFlush };

struct CRequest : Request {
  Kind kind;
  Request* inner;
  CSend* send = nullptr;
  CRecv* recv = nullptr;
  size_t rawSize = 0;  // a send's size as the caller gave it
  struct Slot {
    Stage* stage = nullptr;
    void* dst = nullptr;
    size_t cap = 0;
  };
  std::vector<Slot> slots;   // receives: one per posted buffer
  void* retarget = nullptr;  // retargetRecv: where a message of retargetSize goes
  size_t retargetSize = 0;
  CRequest(Kind k, Request* r) : kind(k), inner(r) {}
};

class CompressNet final : public Net {
 public:
  CompressNet(Net* inner, const CodecConfig& cfg)
      : inner_(inner), cfg_(cfg), name_(std::string(inner->name()) + "+" + compress::codecName(cfg.codec)) {}

  const char* name() const override { return name_.c_str(); }
  Status init() override { return inner_->init(); }
  int devices() const override { return inner_->devices(); }
  Status getProperties(int dev, Properties* props) const override {
    SNCCL_TRY(inner_->getProperties(dev, props));
    // Every message grows by its header on the inner plugin.
    if (props->maxP2pBytes > sizeof(WireHeader)) props->maxP2pBytes -= sizeof(WireHeader);
    return OkStatus();
  }

  Status listen(int dev, Handle* handle, ListenComm** listenComm) override {
    ListenComm* l = nullptr;
    SNCCL_TRY(inner_->listen(dev, handle, &l));
    unsigned char t[kTrailer] = {};
    std::memcpy(t, &kWireMagic, 4);
    t[4] = uint8_t(cfg_.codec);
    handle->bytes.insert(handle->bytes.end(), t, t + kTrailer);
    *listenComm = new CListen(l);
    return OkStatus();
  }

  Status connect(int dev, Handle* handle, SendComm** sendComm) override {
    *sendComm = nullptr;
    Handle* ih = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = connecting_.find(handle);
      if (it == connecting_.end()) {
        SNCCL_TRY(checkTrailer(*handle));
        auto inner = std::make_unique<Handle>();
        inner->bytes.assign(handle->bytes.begin(), handle->bytes.end() - kTrailer);
        it = connecting_.emplace(handle, std::move(inner)).first;
      }
      ih = it->second.get();
    }
    SendComm* s = nullptr;
    Status st = inner_->connect(dev, ih, &s);
    if (!st.ok() || s != nullptr) forget(handle);
    SNCCL_TRY(st);
    if (s != nullptr) *sendComm = new CSend(inner_, s, cfg_);
    return OkStatus();
  }

  Status accept(ListenComm* listenComm, RecvComm** recvComm) override {
    *recvComm = nullptr;
    RecvComm* r = nullptr;
    SNCCL_TRY(inner_->accept(static_cast<CListen*>(listenComm)->inner, &r));
    if (r != nullptr) *recvComm = new CRecv(inner_, r, cfg_);
    return OkStatus();
  }

  void cancelConnect(Handle* handle) override {
    Handle* ih = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = connecting_.find(handle);
      if (it != connecting_.end()) ih = it->second.get();
    }
    if (ih != nullptr) inner_->cancelConnect(ih);
    forget(handle);
  }

  Status regMr(Comm* comm, void* data, size_t size, int type, MemHandle** mh) override {
    return inner_->regMr(innerOf(comm), data, size, type, mh);
  }
  bool usesUnregisteredHostMemory() const override { return inner_->usesUnregisteredHostMemory(); }
  Status deregMr(Comm* comm, MemHandle* mh) override { return inner_->deregMr(innerOf(comm), mh); }
  void forgetRange(const void* data, size_t size) override { inner_->forgetRange(data, size); }
  SlotDefaults slotDefaults() const override { return inner_->slotDefaults(); }
  bool pollsInUserSpace() const override { return inner_->pollsInUserSpace(); }

  Status isend(SendComm* comm, void* data, size_t size, int tag, uint32_t imm, MemHandle* /*mh*/,
               Request** request) override {
    *request = nullptr;
    auto* c = static_cast<CSend*>(comm);
    c->mode.pending(Backoff::nowNs());
    if (c->pending == nullptr || c->pendingSrc != data || c->pendingSize != size) {
      c->pool.give(c->pending);
      c->pending = nullptr;
      SNCCL_TRY(encode(c, data, size));
    }
    Request* r = nullptr;
    SNCCL_TRY(inner_->isend(c->inner, c->pending->data.get(), c->pendingWire, tag, imm, c->pending->mh, &r));
    if (r == nullptr) return OkStatus();  // no credit yet: keep the encoding for the retry
    auto* cr = new CRequest(Kind::kSend, r);
    cr->send = c;
    cr->rawSize = size;
    cr->slots.push_back({c->pending, nullptr, 0});
    c->pending = nullptr;
    c->live.insert(cr);
    c->mode.started(size);
    ++c->inflight;
    *request = cr;
    return OkStatus();
  }

  Status irecv(RecvComm* comm, int n, void** data, size_t* sizes, int* tags, MemHandle** /*mhs*/,
               Request** request) override {
    *request = nullptr;
    auto* c = static_cast<CRecv*>(comm);
    std::vector<CRequest::Slot> slots(size_t(std::max(n, 0)));
    std::vector<void*> stageData(slots.size());
    std::vector<size_t> stageSizes(slots.size());
    std::vector<MemHandle*> stageMh(slots.size());
    Status st;
    for (size_t i = 0; i < slots.size(); ++i) {
      slots[i] = {c->pool.take(sizes[i] + sizeof(WireHeader), &st), data[i], sizes[i]};
      if (slots[i].stage == nullptr) {
        for (auto& s : slots) c->pool.give(s.stage);
        return st;
      }
      stageData[i] = slots[i].stage->data.get();
      stageSizes[i] = sizes[i] + sizeof(WireHeader);
      stageMh[i] = slots[i].stage->mh;
    }
    Request* r = nullptr;
    st = inner_->irecv(c->inner, n, stageData.data(), stageSizes.data(), tags, stageMh.data(), &r);
    if (!st.ok() || r == nullptr) {
      for (auto& s : slots) c->pool.give(s.stage);
      return st;
    }
    auto* cr = new CRequest(Kind::kRecv, r);
    cr->recv = c;
    cr->slots = std::move(slots);
    c->live.insert(cr);
    *request = cr;
    return OkStatus();
  }

  // The message is decoded when test() sees it complete, so it can go anywhere until then.
  bool retargetRecv(Request* request, void* data, size_t size, MemHandle* /*mh*/) override {
    auto* r = static_cast<CRequest*>(request);
    if (r->kind != Kind::kRecv || r->slots.size() != 1) return false;
    r->retarget = data;
    r->retargetSize = size;
    return true;
  }

  Status iflush(RecvComm* comm, int n, void** data, int* sizes, MemHandle** mhs, Request** request) override {
    *request = nullptr;
    Request* r = nullptr;
    SNCCL_TRY(inner_->iflush(static_cast<CRecv*>(comm)->inner, n, data, sizes, mhs, &r));
    if (r != nullptr) *request = new CRequest(Kind::kFlush, r);
    return OkStatus();
  }

  Status test(Request* request, bool* done, size_t* sizes, uint32_t* imm) override {
    auto* r = static_cast<CRequest*>(request);
    // A flush reports as many sizes as it had buffers (at most maxRecvs, 8 in NCCL).
    std::vector<size_t> got(std::max<size_t>(r->slots.size(), 8), 0);
    Status st = inner_->test(r->inner, done, got.data(), imm);
    if (st.ok() && !*done) return st;
    if (st.ok() && r->kind == Kind::kRecv) st = decodeAll(r, got, sizes);
    if (st.ok() && r->kind == Kind::kSend && sizes != nullptr) sizes[0] = r->rawSize;
    if (st.ok() && r->kind == Kind::kFlush && sizes != nullptr) sizes[0] = got[0];
    finish(r);
    return st;
  }

  bool pollFds(const Comm* comm, std::vector<pollfd>* fds) const override {
    return inner_->pollFds(innerOf(const_cast<Comm*>(comm)), fds);
  }
  bool quiescent(const Comm* comm) const override { return inner_->quiescent(innerOf(const_cast<Comm*>(comm))); }

  Status closeSend(SendComm* comm, uint32_t abortCode) override {
    return closeWrapped(static_cast<CSend*>(comm), [&](SendComm* in) { return inner_->closeSend(in, abortCode); });
  }
  Status closeRecv(RecvComm* comm, uint32_t abortCode) override {
    return closeWrapped(static_cast<CRecv*>(comm), [&](RecvComm* in) { return inner_->closeRecv(in, abortCode); });
  }
  uint32_t peerAbortCode(const Comm* comm) const override {
    return inner_->peerAbortCode(innerOf(const_cast<Comm*>(comm)));
  }
  bool peerClosed(const Comm* comm) const override { return inner_->peerClosed(innerOf(const_cast<Comm*>(comm))); }
  // The wire's bytes: compressed, as the rails carried them.
  bool railBytes(const Comm* comm, std::vector<RailBytes>* out) const override {
    return inner_->railBytes(innerOf(const_cast<Comm*>(comm)), out);
  }
  Status closeListen(ListenComm* comm) override {
    auto* l = static_cast<CListen*>(comm);
    Status st = inner_->closeListen(l->inner);
    delete l;
    return st;
  }

 private:
  // Drops the requests the caller will never test, deregisters the staging buffers (before
  // the inner comm closes), closes the inner comm and frees the wrapper.
  template <typename C, typename CloseInner>
  static Status closeWrapped(C* c, CloseInner&& closeInner) {
    for (CRequest* r : c->live) delete r;
    c->live.clear();
    c->pool.release();
    Status st = closeInner(c->inner);
    delete c;
    return st;
  }

  static Comm* innerOf(Comm* c) {
    if (auto* s = dynamic_cast<CSend*>(c)) return s->inner;
    if (auto* r = dynamic_cast<CRecv*>(c)) return r->inner;
    if (auto* l = dynamic_cast<CListen*>(c)) return l->inner;
    return c;
  }

  Status checkTrailer(const Handle& h) const {
    uint32_t magic = 0;
    if (h.bytes.size() >= kTrailer) std::memcpy(&magic, h.bytes.data() + h.bytes.size() - kTrailer, 4);
    if (magic != kWireMagic)
      return InvalidUsage(
          "SNCCL_NET_COMPRESS=%s on this rank, but the receiving rank does not compress: set it "
          "alike on every rank",
          compress::codecName(cfg_.codec));
    const auto codec = Codec(h.bytes[h.bytes.size() - kTrailer + 4]);
    if (codec != cfg_.codec)
      return InvalidUsage("SNCCL_NET_COMPRESS differs between ranks: %s here, %s on the receiving rank",
                          compress::codecName(cfg_.codec), compress::codecName(codec));
    return OkStatus();
  }

  void forget(Handle* handle) {
    std::lock_guard<std::mutex> lock(mu_);
    connecting_.erase(handle);
  }

  // Encodes one message into c->pending: compressed when that pays, raw otherwise.
  Status encode(CSend* c, const void* data, size_t size) {
    Status st;
    Stage* s = c->pool.take(sizeof(WireHeader) + size, &st);
    if (s == nullptr) return st;
    WireHeader h{kWireMagic, uint8_t(Codec::kRaw), {}, size};
    char* payload = s->data.get() + sizeof(WireHeader);
    size_t wire = size;
    if (size >= kMinCompress && c->mode.compress() && c->coder.worthCompressing(data, size)) {
      // Only a result smaller than the message is kept (cap = size - 1).
      const size_t got = c->coder.compress(data, size, payload, size - 1);
      if (got > 0) {
        h.codec = uint8_t(cfg_.codec);
        wire = got;
      }
    }
    if (h.codec == uint8_t(Codec::kRaw) && size > 0) std::memcpy(payload, data, size);
    std::memcpy(s->data.get(), &h, sizeof h);
    c->pending = s;
    c->pendingSrc = data;
    c->pendingSize = size;
    c->pendingWire = sizeof(WireHeader) + wire;
    return OkStatus();
  }

  Status decodeAll(CRequest* r, const std::vector<size_t>& got, size_t* sizes) {
    for (size_t i = 0; i < r->slots.size(); ++i) {
      const CRequest::Slot& s = r->slots[i];
      compress::DecodeTarget t{s.dst, s.cap, r->retarget, r->retargetSize};
      SNCCL_ASSIGN_OR_RETURN(size_t raw, compress::decodeMessage(r->recv->coder, s.stage->data.get(), got[i], t));
      if (sizes != nullptr) sizes[i] = raw;
    }
    return OkStatus();
  }

  void finish(CRequest* r) {
    if (r->send != nullptr && r->kind == Kind::kSend) {
      CSend* c = r->send;
      --c->inflight;
      const bool was = c->mode.compress();
      const int windows = c->mode.windows();
      c->mode.completed(Backoff::nowNs(), c->inflight == 0 && c->pending == nullptr);
      if (c->mode.windows() != windows)
        SN_INFO(log::kNet, "NET/compress: window %d: compressing %.3g GB/s, raw %.3g GB/s: %s", c->mode.windows(),
                c->mode.rate(true) / 1e9, c->mode.rate(false) / 1e9,
                c->mode.compress() == was ? (was ? "compressing" : "raw") : (was ? "now raw" : "now compressing"));
    }
    if (r->send != nullptr) {
      for (auto& s : r->slots) r->send->pool.give(s.stage);
      r->send->live.erase(r);
    }
    if (r->recv != nullptr) {
      for (auto& s : r->slots) r->recv->pool.give(s.stage);
      r->recv->live.erase(r);
    }
    delete r;
  }

  Net* inner_;
  CodecConfig cfg_;
  std::string name_;
  std::mutex mu_;
  std::map<const Handle*, std::unique_ptr<Handle>> connecting_;  // under mu_
};

}  // namespace

Net* compressNet(Net* inner, const CodecConfig& cfg) { return new CompressNet(inner, cfg); }

}  // namespace snccl::net
