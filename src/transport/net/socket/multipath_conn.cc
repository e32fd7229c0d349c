// Adaptive multipath connection: chunk pulling, acknowledgements, path failover.
#include "transport/net/socket/multipath_conn.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/net/socket/socket_io.h"

namespace snccl::net::socknet {

namespace {

using sockwire::MpRecord;
constexpr size_t kRec = sizeof(MpRecord);

// Every path gets about the same queueing delay D, so that the chunks of one message finish
// together on fast and slow paths: a path takes a chunk while the data ahead on its rail
// (RailShare::ahead, every connection's) would take less than D at the rail's rate, so it
// holds about its rate times D, and at least one chunk. D is the larger of kTargetDelaySec
// and the time the slowest usable path needs for one chunk plus its extra delay (a queue
// that other flows keep standing on its rail, setExtras), at most kMaxDelaySec: a path that
// delivers 20 ms late takes a chunk only when the others have 20 ms of data ahead, or a
// message would wait for it with the other paths idle.
// kTargetDelaySec keeps every path busy while the proxies turn around. On shaped veth rails
// a millisecond did best: four rails, one loaded by other flows, made sendrecv 94-95% of
// what they could carry with 1 ms, 90% with 2 and 80% with 4 (docs/performance.md, "Four
// rails"); equal rails were at 98% with all three. A path slower than
// 1/kUsableRatio of the fastest does not set D: it still takes part, one chunk at a time,
// but the others' queues are not stretched to match it.
constexpr double kTargetDelaySec = 0.001;
constexpr double kMaxDelaySec = 0.05;
constexpr double kUsableRatio = 8;
// A path is late (multipath_conn.h) after kLateFactor times what its rail's chunks in flight
// (every connection's) and one more should take at the rail's rate, and at least
// kLateMinSec: well above the few milliseconds an acknowledgement can wait behind the other
// direction's data on a shaped rail, so a path that is only busy is not taken for a stalled
// one.
// A rail's extra delay (setExtras) below kMinExtraSec is taken for noise in the floors (the
// rate estimate that the expected arrival comes from, threads' wake-ups): equal rails must
// not look unequal.
constexpr double kMinExtraSec = 0.002;
// A path that took no chunk for kProbeSec takes one (soonest): if it is as slow or late as
// estimated, that chunk holds up its message about once a second.
constexpr double kProbeSec = 1.0;
constexpr double kLateFactor = 4;
constexpr double kLateMinSec = 0.025;
constexpr size_t kMaxWindow = 16u << 20;
constexpr size_t kSenderInBytes = 64 * kRec;  // records read per recv(2) on the sending end
constexpr size_t kSinkBytes = 64 * 1024;
constexpr size_t kMaxOutBytes = 1 << 20;

MpRecord record(uint16_t type) {
  MpRecord r{};
  r.type = type;
  return r;
}

std::string pathLabel(const sock::Socket& s) {
  Result<sock::Address> local = s.localAddress();
  return (local.ok() ? local.value().hostString() : std::string("?")) + " -> " + s.peer().hostString();
}

}  // namespace

MultipathConn::MultipathConn(bool sender, std::vector<sock::Socket> socks, std::string what, MultipathConfig cfg)
    : sender_(sender), cfg_(cfg), what_(std::move(what)) {
  paths_.resize(socks.size());
  for (size_t i = 0; i < socks.size(); ++i) {
    Path& p = paths_[i];
    p.label = pathLabel(socks[i]);
    p.sock = std::move(socks[i]);
    p.in.resize(sender ? kSenderInBytes : kRec);
    p.out.reserve(8 * kRec);
    p.window = 4 * cfg_.chunkBytes;  // until the first rate sample
    if (sender) p.rail = cfg_.rails != nullptr ? cfg_.rails->get(p.label) : std::make_shared<RailShare>();
  }
  for (MpRequest& r : pool_) r.conn = this;
  if (!sender) sink_.resize(kSinkBytes);
}

MultipathConn::~MultipathConn() {
  for (Path& p : paths_)
    if (p.rail != nullptr) p.rail->forget(p.unackedBytes);
}

int MultipathConn::livePaths() const {
  return int(std::count_if(paths_.begin(), paths_.end(), [](const Path& p) { return p.alive; }));
}

MpRequest* MultipathConn::allocRequest() {
  for (MpRequest& r : pool_)
    if (!r.used) {
      r.used = true;
      r.complete = false;
      r.matched = false;
      r.imm = 0;
      r.nextChunk = 0;
      r.acked = 0;
      r.retry.clear();
      r.target = nullptr;
      r.targetSize = 0;
      r.gotCount = 0;
      return &r;
    }
  return nullptr;
}

void MultipathConn::releaseRequest(MpRequest* r) {
  r->used = false;
  auto it = std::find(order_.begin(), order_.end(), r);
  if (it != order_.end()) order_.erase(it);
}

bool MultipathConn::inOrderComplete(const MpRequest* r) const {
  if (!r->complete) return false;
  for (const MpRequest* o : order_) {
    if (o == r) return true;
    if (!o->complete) return false;
  }
  return true;
}

void MultipathConn::queueRecord(Path& p, const void* rec) {
  const char* c = static_cast<const char*>(rec);
  p.out.insert(p.out.end(), c, c + kRec);
}

void MultipathConn::queueAll(const void* rec) {
  for (Path& p : paths_)
    if (p.alive) queueRecord(p, rec);
}

Status MultipathConn::fail(Status s) {
  if (!error_.ok()) return error_;
  s.addContext("NET/Socket " + what_);
  if (!peerBye_) SN_INFO(log::kNet, "%s", s.message().c_str());
  error_ = s;
  return error_;
}

Result<MpRequest*> MultipathConn::isend(void* data, size_t size, int tag, uint32_t imm) {
  SNCCL_TRY(credits_.empty() ? progress() : (error_.ok() ? OkStatus() : error_));
  if (peerBye_) return fail(RemoteError("the receiver closed the connection; cannot send a %zu-byte message", size));
  wantCredit_ = credits_.empty();
  if (wantCredit_) return static_cast<MpRequest*>(nullptr);
  MpRequest* r = allocRequest();
  if (r == nullptr) return r;
  const Credit c = credits_.front();
  if (size > c.size || tag != c.tag) {
    releaseRequest(r);
    return fail(
        InvalidUsage("message of %zu bytes (tag %d) does not fit the peer's posted receive of %zu bytes "
                     "(tag %d): both ends must use the same SNCCL_BUFFSIZE/SNCCL_STEPS",
                     size, tag, c.size, c.tag));
  }
  credits_.pop_front();
  r->seq = seq_++;
  r->data = static_cast<char*>(data);
  r->size = size;
  r->tag = tag;
  r->imm = imm;
  r->nchunks = size == 0 ? 1 : uint32_t((size + cfg_.chunkBytes - 1) / cfg_.chunkBytes);
  r->got.assign((r->nchunks + 63) / 64, 0);
  order_.push_back(r);
  SNCCL_TRY(sendAll());
  return r;
}

Result<MpRequest*> MultipathConn::irecv(void* data, size_t size, int tag) {
  if (!error_.ok()) return error_;
  MpRequest* r = allocRequest();
  if (r == nullptr) return r;
  r->seq = seq_++;
  r->data = static_cast<char*>(data);
  r->size = size;
  r->tag = tag;
  order_.push_back(r);
  if (!peerBye_ && !byeSent_) {
    MpRecord cts = record(sockwire::kMpCts);
    cts.seq = r->seq;
    cts.total = size;
    cts.tag = tag;
    queueAll(&cts);
    for (size_t i = 0; i < paths_.size(); ++i)
      if (paths_[i].alive) SNCCL_TRY(flushOut(paths_[i], i));
  }
  return r;
}

bool MultipathConn::retarget(MpRequest* r, void* data, size_t size) {
  if (sender_ || !error_.ok() || r == nullptr || r->conn != this || !r->used || r->matched) return false;
  r->target = static_cast<char*>(data);
  r->targetSize = size;
  return true;
}

Status MultipathConn::test(MpRequest* r, bool* done, size_t* size, uint32_t* imm) {
  *done = false;
  if (r == nullptr || r->conn != this || !r->used) return InternalError("NET/Socket: test of an invalid request");
  Status s = progress();
  // After the peer's goodbye on every path nothing more arrives: a receive still
  // incomplete then never completes, and a send never is acknowledged (a receiver
  // acknowledges what it took before its goodbye, on the same path).
  if (s.ok() && !r->complete && peerBye_) {
    bool more = std::any_of(paths_.begin(), paths_.end(), [](const Path& p) { return p.alive && !p.byeSeen; });
    if (!more)
      s = fail(sender_ ? RemoteError("the receiver closed the connection before it took this %zu-byte message", r->size)
                       : RemoteError("the sender closed the connection before the message this receive waits for"));
  }
  if (!s.ok()) {
    releaseRequest(r);
    return s;
  }
  if (!inOrderComplete(r)) return OkStatus();
  *done = true;
  if (size != nullptr) *size = r->size;
  if (imm != nullptr) *imm = r->imm;
  releaseRequest(r);
  return OkStatus();
}

Status MultipathConn::progress() {
  if (!error_.ok()) return error_;
  for (size_t i = 0; i < paths_.size(); ++i)
    if (paths_[i].alive) SNCCL_TRY(readPath(i));
  if (!sender_) {
    for (size_t i = 0; i < paths_.size(); ++i)
      if (paths_[i].alive) SNCCL_TRY(flushOut(paths_[i], i));
    return OkStatus();
  }
  SNCCL_TRY(sendAll());
  return checkStalls(Clock::now());
}

bool MultipathConn::pullChunk(ChunkRef* c) {
  for (MpRequest* r : order_) {
    if (r->complete) continue;
    while (!r->retry.empty() && r->has(r->retry.back())) r->retry.pop_back();
    uint32_t index;
    if (!r->retry.empty()) {
      index = r->retry.back();
      r->retry.pop_back();
    } else if (r->nextChunk < r->nchunks) {
      index = r->nextChunk++;
    } else {
      continue;
    }
    size_t off = size_t(index) * cfg_.chunkBytes;
    *c = ChunkRef{r, r->seq, index, uint32_t(std::min(cfg_.chunkBytes, r->size - off))};
    return true;
  }
  return false;
}

Status MultipathConn::sendAll() {
  // First what is under way (a chunk half written, records between chunks), then new
  // chunks one per path per round, the emptiest window first: one message spreads over
  // every path that has room, and a path whose socket is full or whose window is used up
  // leaves the rest to the others.
  for (size_t i = 0; i < paths_.size(); ++i)
    if (paths_[i].alive) SNCCL_TRY(sendPath(i, false));
  for (bool any = true; any;) {
    any = false;
    // Fill is read once per path: other connections on the same rails change it meanwhile
    // (from other threads), and a sort needs keys that hold still.
    order64_.clear();
    for (size_t i = 0; i < paths_.size(); ++i) {
      const Path& p = paths_[i];
      if (!p.alive || p.late || p.writing || p.outOff < p.out.size()) continue;
      const double f = fill(p);
      if (f < 1) order64_.push_back({f, i});
    }
    std::sort(order64_.begin(), order64_.end());
    const Clock::time_point now = Clock::now();
    for (auto [f, i] : order64_) {
      if (!soonest(i, now)) continue;
      bool took = false;
      SNCCL_TRY(sendPath(i, true, &took));
      any = any || (took && paths_[i].alive && !paths_[i].writing);
    }
  }
  return OkStatus();
}

double MultipathConn::fill(const Path& p) const {
  if (p.rate <= 0 || alone_ || delay_ <= 0) return double(p.unackedBytes) / double(p.window);
  return p.unackedBytes >= kMaxWindow ? 1 : p.rail->ahead() / delay_;
}

bool MultipathConn::soonest(size_t i, Clock::time_point now) const {
  const Path& p = paths_[i];
  if (p.rate <= 0) return true;  // no estimate yet: it takes chunks to get one
  // A path left idle gets a chunk now and then: its rate and delay are only measured on
  // its chunks, and what made it look slow or late (a queue, a bad first sample, a
  // stall) may be gone; without one it would never be measured again.
  if (p.unacked.empty() && seconds(now - p.lastProgress) >= kProbeSec) return true;
  const double c = double(cfg_.chunkBytes);
  const double mine = p.rail->ahead() + c / p.rate + p.extra;
  for (size_t j = 0; j < paths_.size(); ++j) {
    const Path& q = paths_[j];
    if (j != i && q.alive && !q.late && q.rate > 0 && q.rail->ahead() + c / q.rate + q.extra < mine) return false;
  }
  return true;
}

Status MultipathConn::sendPath(size_t i, bool pull, bool* took) {
  Path& p = paths_[i];
  for (;;) {
    if (!p.alive) return OkStatus();
    if (!p.writing) {
      // Records go between chunks, never inside one.
      if (p.outOff < p.out.size()) {
        SNCCL_TRY(flushOut(p, i));
        if (!p.alive || p.outOff < p.out.size()) return OkStatus();
      }
      const Clock::time_point now = Clock::now();
      if (!pull || byeSent_ || closing_ || p.late || fill(p) >= 1) return OkStatus();
      ChunkRef c;
      if (!pullChunk(&c)) return OkStatus();
      c.sent = now;
      c.expectSec = p.rate > 0 ? p.rail->ahead() + double(c.len) / p.rate : 0;
      p.rail->sent(c.len, now);
      pull = false;  // one new chunk per call
      if (took != nullptr) *took = true;
      MpRecord h = record(sockwire::kMpChunk);
      h.imm = c.req->imm;
      h.seq = c.req->seq;
      h.total = c.req->size;
      h.offset = uint64_t(c.index) * cfg_.chunkBytes;
      h.tag = c.req->tag;
      h.len = c.len;
      std::memcpy(p.hdr.data(), &h, kRec);
      p.cur = c;
      p.wdone = 0;
      p.writing = true;
      if (p.unacked.empty()) p.lastProgress = now;
      p.unacked.push_back(c);
      p.unackedBytes += c.len;
    }
    const size_t total = kRec + p.cur.len;
    iovec iov[2];
    int n = 0;
    if (p.wdone < kRec) iov[n++] = iovec{p.hdr.data() + p.wdone, kRec - p.wdone};
    size_t payloadDone = p.wdone > kRec ? p.wdone - kRec : 0;
    if (p.cur.len > payloadDone)
      iov[n++] = iovec{p.cur.req->data + size_t(p.cur.index) * cfg_.chunkBytes + payloadDone, p.cur.len - payloadDone};
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = size_t(n);
    ssize_t k = ::sendmsg(p.sock.fd(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return OkStatus();
      return pathFailed(i, socketError("send to", p.sock, errno));
    }
    p.wdone += size_t(k);
    if (p.wdone < total) return OkStatus();  // the socket is full: the rest on the next pass
    p.writing = false;
  }
}

void MultipathConn::queueAck(Path& p) {
  if (sender_ || p.ackQueued == p.ackWritten) return;
  MpRecord a = record(sockwire::kMpAck);
  a.seq = p.ackQueued;
  a.total = uint64_t(steadyNs(Clock::now()));
  queueRecord(p, &a);
  p.ackWritten = p.ackQueued;
}

Status MultipathConn::flushOut(Path& p, size_t i) {
  // One acknowledgement covers every chunk taken so far: queued only once the socket took
  // the records before it, so that a slow path carries one, not one per pass.
  if (p.outOff == p.out.size()) queueAck(p);
  while (p.outOff < p.out.size()) {
    Result<size_t> k = sendSome(p.sock, p.out.data() + p.outOff, p.out.size() - p.outOff);
    if (!k.ok()) return pathFailed(i, k.status());
    if (k.value() == 0) {
      // Records pile up only on a path the peer no longer reads (a cut cable: the socket
      // buffer filled without an error): bounded, the path is given up.
      if (p.out.size() - p.outOff > kMaxOutBytes)
        return pathFailed(i, RemoteError("%zu bytes of records wait on a full socket: the peer does not read the path",
                                         p.out.size() - p.outOff));
      return OkStatus();
    }
    p.outOff += k.value();
  }
  p.out.clear();
  p.outOff = 0;
  if (p.shutAfterFlush) {
    ::shutdown(p.sock.fd(), SHUT_WR);
    p.shutAfterFlush = false;
  }
  return OkStatus();
}

Status MultipathConn::readPath(size_t i) {
  Path& p = paths_[i];
  while (p.alive && !p.held && error_.ok()) {
    // A sender reads records only, many per call; a receiver one header at a time, so that
    // a chunk's payload goes straight to its place.
    const bool payload = !sender_ && p.reading;
    char* dst = p.in.data() + p.inLen;
    size_t ask = (sender_ ? p.in.size() : kRec) - p.inLen;
    if (payload) {
      ask = p.rlen - p.rdone;
      if (p.dst != nullptr) {
        dst = p.dst + p.rdone;
      } else {
        dst = sink_.data();
        ask = std::min(ask, sink_.size());
      }
    }
    bool eof = false;
    Result<size_t> k = recvSome(p.sock, dst, ask, &eof);
    if (!k.ok()) {
      if (!closing_) return pathFailed(i, k.status());
      p.alive = false;
      return OkStatus();
    }
    if (eof) {
      if (closing_ || (p.byeSeen && !p.reading && p.inLen == 0)) {
        p.alive = false;
        return OkStatus();
      }
      return pathFailed(i, RemoteError("%s closed the path without a goodbye (its process died or reset it)",
                                       p.sock.peer().toString().c_str()));
    }
    if (k.value() == 0) return OkStatus();
    if (payload) {
      p.rdone += k.value();
      if (p.rdone == p.rlen) chunkDone(i);
    } else {
      p.inLen += k.value();
      size_t off = 0;
      while (p.inLen - off >= kRec && p.alive && error_.ok()) {
        SNCCL_TRY(handleRecord(i, p.in.data() + off));
        off += kRec;
      }
      if (off > 0) {
        std::memmove(p.in.data(), p.in.data() + off, p.inLen - off);
        p.inLen -= off;
      }
    }
    // A short read drained the socket: the next would only say EAGAIN (a system call).
    if (k.value() < ask) return OkStatus();
  }
  return error_;
}

Status MultipathConn::handleRecord(size_t i, const char* raw) {
  Path& p = paths_[i];
  MpRecord rec;
  std::memcpy(&rec, raw, kRec);
  const Clock::time_point now = sender_ ? Clock::now() : Clock::time_point{};
  if (sender_) p.lastHeard = now;
  auto protocol = [&](const char* what) {
    return fail(InternalError("protocol error on path %zu (%s): %s (record type %u)", i, p.label.c_str(), what,
                              unsigned(rec.type)));
  };
  switch (rec.type) {
    case sockwire::kMpChunk:
      if (sender_) return protocol("a chunk sent to the sending end");
      return startChunk(i, raw);
    case sockwire::kMpCts:
      if (!sender_) return protocol("a credit sent to the receiving end");
      // Each path carries every credit in order from the first (the receiver writes each
      // on every live path and never returns to a dead one), so a copy is either the next
      // credit or one already kept.
      if (rec.seq > creditsSeen_) return protocol("credit out of order");
      if (rec.seq < creditsSeen_) return OkStatus();
      if (credits_.size() >= size_t(kMaxRequests)) return protocol("more credits than receives can be posted");
      credits_.push_back(Credit{size_t(rec.total), rec.tag});
      ++creditsSeen_;
      return OkStatus();
    case sockwire::kMpAck:
      if (!sender_) return protocol("an acknowledgement sent to the receiving end");
      if (rec.seq < p.acked || rec.seq - p.acked > p.unacked.size() - (p.writing ? 1 : 0))
        return protocol("acknowledgement of chunks never sent");
      ackChunks(p, rec.seq, int64_t(rec.total), now);
      return OkStatus();
    case sockwire::kMpPing: {
      if (sender_) return protocol("a ping sent to the sending end");
      MpRecord pong = record(sockwire::kMpPong);
      queueRecord(p, &pong);
      return OkStatus();
    }
    case sockwire::kMpPong:
      return sender_ ? OkStatus() : protocol("a pong sent to the receiving end");
    case sockwire::kMpDrop:
      if (rec.path >= paths_.size()) return protocol("drop of a path that does not exist");
      return pathFailed(rec.path, RemoteError("the peer stopped using it"));
    case sockwire::kMpBye:
      peerBye_ = true;
      p.byeSeen = true;
      if (!sender_ && !byeSent_) {
        // Answer on every path and send nothing after it, so that the sender's close finds
        // no unread credit (which would turn its close into a reset).
        MpRecord bye = record(sockwire::kMpBye);
        for (Path& q : paths_)
          if (q.alive) {
            queueAck(q);
            queueRecord(q, &bye);
            q.shutAfterFlush = true;
          }
        byeSent_ = true;
      }
      return OkStatus();
    case sockwire::kMpAbort:
      peerAbort_ = rec.imm;
      return fail(RemoteError("%s reported a failure (%s) and closed the connection", p.sock.peer().toString().c_str(),
                              resultName(int(rec.imm & 0xff))));
    default:
      return protocol("unknown record type");
  }
}

Status MultipathConn::startChunk(size_t i, const char* raw) {
  Path& p = paths_[i];
  MpRecord h;
  std::memcpy(&h, raw, kRec);
  MpRequest* r = nullptr;
  for (MpRequest* o : order_)
    if (o->seq == h.seq) r = o;
  if (r == nullptr && h.seq >= seq_)
    return fail(InternalError("protocol error on path %zu (%s): a chunk of message %llu, which has no posted receive",
                              i, p.label.c_str(), (unsigned long long)h.seq));
  p.reading = true;
  p.rreq = r;
  p.rlen = h.len;
  p.rdone = 0;
  p.dst = nullptr;
  if (r != nullptr && !r->complete) {
    if (!r->matched) {
      if (r->target != nullptr && h.total == r->targetSize) {
        r->data = r->target;  // retarget(): the expected message goes to the new memory
        r->size = r->targetSize;
      }
      if (h.total > r->size || h.tag != r->tag)
        return fail(InvalidUsage("a %llu-byte message (tag %d) arrived for a %zu-byte receive (tag %d)",
                                 (unsigned long long)h.total, h.tag, r->size, r->tag));
      r->matched = true;
      r->size = size_t(h.total);
      r->imm = h.imm;
      r->nchunks = r->size == 0 ? 1 : uint32_t((r->size + cfg_.chunkBytes - 1) / cfg_.chunkBytes);
      r->got.assign((r->nchunks + 63) / 64, 0);
      r->gotCount = 0;
    }
    const uint64_t index = h.offset / cfg_.chunkBytes;
    const size_t expect = r->size == 0 ? 0 : std::min(cfg_.chunkBytes, r->size - std::min<size_t>(r->size, h.offset));
    if (h.total != r->size || h.offset % cfg_.chunkBytes != 0 || index >= r->nchunks || h.len != expect)
      return fail(
          InternalError("protocol error on path %zu (%s): chunk at %llu of %u bytes does not fit message %llu "
                        "of %zu bytes",
                        i, p.label.c_str(), (unsigned long long)h.offset, h.len, (unsigned long long)h.seq, r->size));
    p.rindex = uint32_t(index);
    if (!r->has(uint32_t(index))) p.dst = r->data + h.offset;
  }
  if (p.rlen == 0) chunkDone(i);
  return OkStatus();
}

void MultipathConn::chunkDone(size_t i) {
  Path& p = paths_[i];
  p.reading = false;
  ++p.received;
  p.ackQueued = p.received;
  MpRequest* r = p.rreq;
  if (p.dst == nullptr || r == nullptr || r->complete) return;
  if (r->has(p.rindex)) return;
  r->mark(p.rindex);
  p.bytes += p.rlen;
  if (++r->gotCount < r->nchunks) return;
  r->complete = true;
  // Copies of its chunks still being read on other paths (sent again after a path looked
  // dead) must not write into a buffer that now belongs to the caller again.
  for (Path& q : paths_)
    if (q.reading && q.rreq == r) q.dst = nullptr;
}

bool MultipathConn::awaited(const ChunkRef& c) {
  const MpRequest* r = c.req;
  return r->used && r->seq == c.seq && !r->complete && !r->has(c.index);
}

void MultipathConn::ackChunks(Path& p, uint64_t count, int64_t stampNs, Clock::time_point now) {
  uint64_t bytes = 0;
  Clock::time_point sent{};  // of the last chunk acknowledged; none: no new chunk
  double expectSec = 0;
  for (uint64_t n = p.acked; n < count; ++n) {
    ChunkRef c = p.unacked.front();
    p.unacked.pop_front();
    bytes += c.len;
    sent = c.sent;
    expectSec = c.expectSec;
    if (!awaited(c)) {
      duplicateBytes_ += c.len;  // its copy on another path was acknowledged first
      continue;
    }
    c.req->mark(c.index);
    if (++c.req->acked == c.req->nchunks) c.req->complete = true;
  }
  const size_t popped = size_t(count - p.acked);
  p.resent = p.resent > popped ? p.resent - popped : 0;
  const bool wasLate = p.late;
  p.late = false;
  p.unackedBytes -= bytes;
  p.bytes += bytes;
  p.acked = count;
  p.lastProgress = now;
  p.pinged = false;
  const bool sampled = p.rail->acked(bytes, now, stampNs, sent, expectSec, wasLate);
  const double rate = p.rail->rate();  // also another connection's samples
  setExtras();
  if (sampled || rate != p.rate) {
    p.rate = rate;
    setWindows();
  } else if (wasLate) {
    setWindows();
  }
}

void MultipathConn::setWindows() {
  // Windows balance the paths' delays; a path left alone (the others dead or late) has
  // nothing to balance against, and a window of a few milliseconds would leave it idle
  // while an acknowledgement crosses back.
  const auto usable = [](const Path& q) { return q.alive && !q.late; };
  alone_ = std::count_if(paths_.begin(), paths_.end(), usable) == 1;
  if (alone_) {
    std::find_if(paths_.begin(), paths_.end(), usable)->window = kMaxWindow;
    return;
  }
  double fastest = 0;
  for (const Path& q : paths_)
    if (q.alive) fastest = std::max(fastest, q.rate);
  if (fastest <= 0) return;
  double delay = kTargetDelaySec;
  for (const Path& q : paths_)
    if (q.alive && q.rate * kUsableRatio >= fastest)
      delay = std::max(delay, double(cfg_.chunkBytes) / q.rate + q.extra);
  delay = std::min(delay, kMaxDelaySec);
  delay_ = delay;
  for (Path& q : paths_) {
    if (!q.alive || q.rate <= 0) continue;
    q.window = std::clamp(size_t(q.rate * delay), cfg_.chunkBytes, kMaxWindow);
  }
}

void MultipathConn::setExtras() {
  // Floors carry the receiver's clock offset, which may wrap: each is taken relative to
  // the first path's that has one, modulo 2^64.
  bool any = false;
  int64_t base = 0;
  int64_t least = INT64_MAX;
  for (const Path& q : paths_) {
    int64_t f;
    if (!q.alive || q.late || !q.rail->floorNs(&f)) continue;
    if (!any) base = f;
    any = true;
    least = std::min(least, int64_t(uint64_t(f) - uint64_t(base)));
  }
  for (Path& q : paths_) {
    int64_t f;
    q.extra = 0;
    if (!any || !q.rail->floorNs(&f)) continue;
    const double extra = 1e-9 * double(int64_t(uint64_t(f) - uint64_t(base)) - least);
    if (extra >= kMinExtraSec) q.extra = std::min(kMaxDelaySec, extra);
  }
}

Status MultipathConn::checkStalls(Clock::time_point now) {
  if (livePaths() < 2) return OkStatus();  // nowhere to go: TCP's own timeout decides
  const auto stall = std::chrono::milliseconds(cfg_.stallMs);
  for (size_t i = 0; i < paths_.size(); ++i) {
    Path& p = paths_[i];
    if (!p.alive || p.unacked.empty()) continue;
    const auto silent = now - p.lastProgress;
    if (!p.late && seconds(silent) >= lateAfterSec(p)) {
      if (!p.pinged) {
        SNCCL_TRY(ping(i, now));
      } else if (heardSincePing(i, true)) {
        p.late = true;
        resendFrom(p);
        setWindows();
        SN_INFO(log::kNet,
                "NET/Socket %s: path %zu (%s) is late: no acknowledgement for %.0f ms; its %zu unacknowledged "
                "chunks go again on the other paths",
                what_.c_str(), i, p.label.c_str(), 1e3 * seconds(silent), p.unacked.size());
      }
    }
    if (silent < stall / 2) continue;
    if (!p.pinged) {
      SNCCL_TRY(ping(i, now));
      continue;
    }
    if (silent < stall || !heardSincePing(i, false)) continue;
    const long ms = long(std::chrono::duration_cast<std::chrono::milliseconds>(silent).count());
    SNCCL_TRY(pathFailed(i, RemoteError("no chunk acknowledged for %ld ms (SNCCL_SOCKET_PATH_TIMEOUT=%d) while the "
                                        "receiver answers on other paths: the path is cut or stuck",
                                        ms, cfg_.stallMs)));
  }
  return OkStatus();
}

Status MultipathConn::ping(size_t i, Clock::time_point now) {
  Path& p = paths_[i];
  p.pinged = true;
  p.pingAt = now;
  MpRecord rec = record(sockwire::kMpPing);
  for (size_t j = 0; j < paths_.size(); ++j)
    if (j != i && paths_[j].alive) {
      queueRecord(paths_[j], &rec);
      if (!paths_[j].writing) SNCCL_TRY(flushOut(paths_[j], j));
    }
  return OkStatus();
}

bool MultipathConn::heardSincePing(size_t i, bool usable) const {
  for (size_t j = 0; j < paths_.size(); ++j) {
    const Path& q = paths_[j];
    if (j != i && q.alive && !(usable && q.late) && q.lastHeard > paths_[i].pingAt) return true;
  }
  return false;
}

double MultipathConn::lateAfterSec(const Path& p) const {
  if (p.rate <= 0) return kLateMinSec;
  // Its chunks queue behind every connection's on the rail.
  const size_t queued = std::max(p.unackedBytes, p.rail->unacked());
  return std::max(kLateMinSec, kLateFactor * (double(queued) + double(cfg_.chunkBytes)) / p.rate) + p.extra;
}

void MultipathConn::resendFrom(Path& p) {
  for (size_t k = p.resent; k < p.unacked.size(); ++k) {
    const ChunkRef& c = p.unacked[k];
    if (!awaited(c)) continue;
    c.req->retry.push_back(c.index);
    ++resentChunks_;
  }
  p.resent = p.unacked.size();
}

Status MultipathConn::pathFailed(size_t i, const Status& why) {
  Path& p = paths_[i];
  if (!p.alive) return error_;
  p.alive = false;
  ::shutdown(p.sock.fd(), SHUT_RDWR);
  const uint64_t before = resentChunks_;
  resendFrom(p);
  const size_t resend = size_t(resentChunks_ - before);
  p.unacked.clear();
  p.resent = 0;
  p.late = false;
  if (sender_) p.rail->forget(p.unackedBytes);
  p.unackedBytes = 0;
  p.writing = false;
  p.reading = false;
  p.out.clear();
  p.outOff = 0;
  const int live = livePaths();
  if (closing_) return OkStatus();
  setWindows();  // a slow path gone may shorten the others' delay
  if (live == 0) {
    Status s = why;
    return fail(s.addContext(format("path %zu (%s), the last of %zu", i, p.label.c_str(), paths_.size())));
  }
  if (!peerBye_)
    SN_WARN("NET/Socket %s: path %zu (%s) dropped: %s; %d of %zu paths left%s", what_.c_str(), i, p.label.c_str(),
            why.message().c_str(), live, paths_.size(),
            resend > 0 ? format(", %zu unacknowledged chunks go again on them", resend).c_str() : "");
  MpRecord drop = record(sockwire::kMpDrop);
  drop.path = uint16_t(i);
  queueAll(&drop);
  return OkStatus();
}

bool MultipathConn::pollFds(std::vector<pollfd>* fds) const {
  if (!error_.ok() || (order_.empty() && !wantCredit_)) return true;
  bool timer = false;
  for (const Path& p : paths_) {
    if (!p.alive) continue;
    short ev = p.held ? 0 : POLLIN;
    if (p.writing || p.outOff < p.out.size() || (!sender_ && p.ackQueued > p.ackWritten)) ev |= POLLOUT;
    fds->push_back(pollfd{p.sock.fd(), ev, 0});
    timer = timer || !p.unacked.empty();
  }
  return !timer;
}

bool MultipathConn::quiescent() const {
  if (!error_.ok()) return false;
  for (const Path& p : paths_) {
    if (!p.alive) continue;
    if (p.writing || p.reading || p.outOff < p.out.size() || !p.unacked.empty() || p.ackQueued > p.ackWritten)
      return false;
  }
  return true;
}

void MultipathConn::close(uint32_t abortCode, int lingerMs) {
  closing_ = true;
  if (sender_) {
    std::string stats;
    for (size_t i = 0; i < paths_.size(); ++i) {
      const Path& p = paths_[i];
      stats += format("%s path %zu (%s%s): %.1f MB, %.1f MB/s, window %zu KiB", i > 0 ? ";" : "", i, p.label.c_str(),
                      p.alive ? "" : ", dropped", double(p.bytes) / 1e6, p.rate / 1e6, p.window >> 10);
    }
    if (resentChunks_ > 0)
      stats += format("; %llu chunks sent again, %.1f MB acknowledged twice", (unsigned long long)resentChunks_,
                      double(duplicateBytes_) / 1e6);
    SN_INFO(log::kNet, "NET/Socket %s: closing;%s", what_.c_str(), stats.c_str());
  }
  if (abortCode != 0 || !error_.ok()) {
    if (!error_.ok()) return;  // the sockets close with the connection
    MpRecord a = record(sockwire::kMpAbort);
    a.imm = abortCode;
    for (size_t i = 0; i < paths_.size(); ++i) {
      Path& p = paths_[i];
      if (!p.alive || p.writing) continue;  // a path inside a chunk just ends
      queueRecord(p, &a);
      (void)flushOut(p, i);
      // Unread bytes would make the close a reset that may destroy the ABORT: read them.
      char sink[4096];
      while (::recv(p.sock.fd(), sink, sizeof sink, MSG_DONTWAIT) > 0) {
      }
    }
    return;
  }
  if (!byeSent_) {
    // A receiver acknowledges what it took first: the sender's sends complete, and one
    // that finds the goodbye on every path before its acknowledgement never will (test()).
    MpRecord bye = record(sockwire::kMpBye);
    for (Path& p : paths_)
      if (p.alive && !p.writing) {
        queueAck(p);
        queueRecord(p, &bye);
      }
    byeSent_ = true;
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(lingerMs);
  auto pending = [&] {
    for (const Path& p : paths_)
      if (p.alive && (p.outOff < p.out.size() || (sender_ && !p.byeSeen))) return true;
    return false;
  };
  bool shut = false;
  while (error_.ok() && pending() && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (size_t i = 0; i < paths_.size(); ++i) {
      Path& p = paths_[i];
      if (!p.alive) continue;
      if (!p.writing) (void)flushOut(p, i);
      if (sender_) (void)readPath(i);
      if (p.alive) fds.push_back(pollfd{p.sock.fd(), short(POLLIN | (p.outOff < p.out.size() ? POLLOUT : 0)), 0});
    }
    if (!sender_) {
      bool flushed =
          std::none_of(paths_.begin(), paths_.end(), [](const Path& p) { return p.alive && p.outOff < p.out.size(); });
      if (flushed) return;
    } else if (!shut) {
      // Paths end with a FIN after the goodbye; each stays open for reading until the
      // receiver's answer, so that no unread credit turns the close into a reset.
      bool flushed =
          std::none_of(paths_.begin(), paths_.end(), [](const Path& p) { return p.alive && p.outOff < p.out.size(); });
      if (flushed) {
        for (Path& p : paths_)
          if (p.alive) ::shutdown(p.sock.fd(), SHUT_WR);
        shut = true;
      }
    }
    if (fds.empty()) break;
    (void)::poll(fds.data(), fds.size(), 20);
  }
}

}  // namespace snccl::net::socknet
