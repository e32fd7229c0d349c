// Socket-net connection: credits, message framing, striping over streams, errors.
#include "transport/net/socket/socket_conn.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "common/log.h"
#include "transport/net/socket/socket_io.h"

namespace snccl::net::socknet {

namespace {

using sockwire::Frame;

// Control bytes read per recv(2). The receiving end reads MSG frames with inline payloads:
// more than the largest frame, so that one read takes at least a whole one. The sending
// end reads only bare frames (credits, goodbye, abort).
constexpr size_t kRecvReadChunk = sizeof(sockwire::Frame) + sockwire::kInlineMax + 4096;
constexpr size_t kSendReadChunk = 4096;
static_assert(kSendReadChunk >= sizeof(sockwire::Frame));

}  // namespace

Conn::Conn(bool sender, std::vector<sock::Socket> socks, std::string what)
    : sender_(sender), ctrl_(std::move(socks[0])), what_(std::move(what)) {
  for (size_t i = 1; i < socks.size(); ++i) streams_.push_back(Stream{std::move(socks[i]), {}, 0});
  for (SockRequest& r : pool_) r.conn = this;
  // Room for a few frames with inline payloads; more only while the socket is full (at
  // most kMaxRequests frames, the bound on buffering).
  out_.reserve(2 * (sizeof(Frame) + sockwire::kInlineMax));
  held_.reserve(kMaxRequests);
  // Room for an incomplete frame plus a chunk behind it (readCtrl).
  in_.resize(sender ? 2 * kSendReadChunk : kRecvReadChunk + sizeof(Frame) + sockwire::kInlineMax);
}

SockRequest* Conn::allocRequest() {
  for (SockRequest& r : pool_)
    if (!r.used) {
      r.used = true;
      r.matched = false;
      r.partsLeft = 0;
      r.imm = 0;
      r.frameEnd = 0;
      r.target = nullptr;
      r.targetSize = 0;
      ++live_;
      return &r;
    }
  return nullptr;
}

void Conn::releaseRequest(SockRequest* r) {
  r->used = false;
  --live_;
}

size_t Conn::frameBytes(const Frame& f) const {
  // Only MSG frames carry payloads, and only towards a receiver: on a sender one is a
  // protocol error that handleFrame reports without waiting for (or buffering) a payload.
  return sizeof(Frame) + (!sender_ && f.type == sockwire::kMsg && f.size <= sockwire::kInlineMax ? size_t(f.size) : 0);
}

void Conn::queueFrame(const Frame& f, const void* payload, size_t n) {
  const char* fp = reinterpret_cast<const char*>(&f);
  out_.insert(out_.end(), fp, fp + sizeof f);
  if (n > 0) out_.insert(out_.end(), static_cast<const char*>(payload), static_cast<const char*>(payload) + n);
  queued_ += sizeof f + n;
}

Status Conn::fail(Status s) {
  if (!error_.ok()) return error_;
  s.addContext("NET/Socket " + what_);
  // After the peer's goodbye, failures are consequences of its close, not news; but the
  // answer to its goodbye should still reach it, or its close waits for its deadline.
  // The proxy entry warns with the ranks' names; here only the transport's view, at INFO.
  if (!peerBye_) SN_INFO(log::kNet, "%s", s.message().c_str());
  if (peerBye_ && outOff_ < out_.size()) {
    ssize_t k = ::send(ctrl_.fd(), out_.data() + outOff_, out_.size() - outOff_, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k == ssize_t(out_.size() - outOff_) && shutAfterFlush_) ::shutdown(ctrl_.fd(), SHUT_WR);
  }
  error_ = s;
  for (Stream& st : streams_) st.tasks.clear();
  awaiting_.clear();
  held_.clear();  // releaseCredits counts held receives among awaiting_
  return error_;
}

Status Conn::failSocket(Status s) {
  if (error_.ok() && !ctrlEof_) (void)readCtrl();  // an ABORT waiting there fails the Conn first
  return fail(std::move(s));
}

// Assigns the parts of the message just framed (or matched) to the streams.
void Conn::addParts(SockRequest* r, size_t size) {
  sockwire::Part parts[sockwire::kMaxStreams];
  int n = sockwire::splitMessage(seq_++, size, nstreams(), parts);
  r->partsLeft = n;
  for (int i = 0; i < n; ++i)
    streams_[parts[i].stream].tasks.push_back(Task{r, r->data + parts[i].offset, parts[i].len, 0});
}

Result<SockRequest*> Conn::isend(void* data, size_t size, int tag, uint32_t imm) {
  // Read the control socket (for credits) only when none is known: each read is a system
  // call (~1 us here) on a small message's critical path.
  SNCCL_TRY(credits_.empty() ? progress() : (error_.ok() ? OkStatus() : error_));
  if (peerBye_ || ctrlEof_)
    return fail(RemoteError("the receiver closed the connection; cannot send a %zu-byte message", size));
  wantCredit_ = credits_.empty();
  if (wantCredit_) return static_cast<SockRequest*>(nullptr);
  SockRequest* r = allocRequest();
  if (r == nullptr) return r;
  Credit c = credits_.front();
  if (size > c.size || tag != c.tag) {
    releaseRequest(r);
    return fail(InvalidUsage("message of %zu bytes (tag %d) does not fit the peer's posted receive of %zu bytes "
                             "(tag %d): both ends must use the same SNCCL_BUFFSIZE/SNCCL_STEPS",
                             size, tag, c.size, c.tag));
  }
  credits_.pop_front();
  r->data = static_cast<char*>(data);
  r->size = size;
  r->tag = tag;
  r->imm = imm;
  Frame f{sockwire::kMsg, tag, size, imm, 0};
  queueFrame(f, data, size <= sockwire::kInlineMax ? size : 0);
  if (size <= sockwire::kInlineMax) inlineBytes_ += size;
  r->frameEnd = queued_;
  addParts(r, size);
  SNCCL_TRY(push());
  return r;
}

Result<SockRequest*> Conn::irecv(void* data, size_t size, int tag) {
  if (!error_.ok()) return error_;
  SockRequest* r = allocRequest();
  if (r == nullptr) return r;
  r->data = static_cast<char*>(data);
  r->size = size;
  r->tag = tag;
  awaiting_.push_back(r);
  // After the sender's goodbye the receive is still posted, not refused: messages framed
  // before the goodbye may still be arriving on the streams for earlier receives, and this
  // one fails in test() only when it is next in line, so nothing delivered is lost.
  if (!peerBye_ && !ctrlEof_ && !byeSent_) {
    held_.push_back(Frame{sockwire::kCts, tag, size, 0, 0});
    if (!releaseCredits()) return r;  // held: no write now
  }
  SNCCL_TRY(push());
  return r;
}

bool Conn::releaseCredits() {
  // Credits are held back while the sender has more of them (granted and not yet used by a
  // matched MSG) than are held: it can keep sending meanwhile, and one write later grants
  // the batch. While any are held, awaiting_ is exactly the granted unmatched receives
  // followed by the held ones (held_ is cleared when the peer's BYE ends the sending; no
  // receive posted after it has a credit). Invariant after every call: held_ is empty or
  // granted > held_.size() >= 1, so the oldest unmatched receive always has its credit
  // granted, and a sender that runs out of credits has sent messages whose matching (the
  // receiver's next read of the control socket, by whoever drives it) releases the rest.
  if (held_.empty()) return false;
  const size_t granted = awaiting_.size() - held_.size();
  if (granted > held_.size()) return false;
  for (const Frame& f : held_) queueFrame(f, nullptr, 0);
  held_.clear();
  ++creditReleases_;
  return true;
}

bool Conn::retarget(SockRequest* r, void* data, size_t size) {
  // Stream parts are assigned only when the MSG frame is matched, so until then every
  // byte of the message is still in the sockets.
  if (sender_ || !error_.ok() || r == nullptr || r->conn != this || !r->used || r->matched) return false;
  r->target = static_cast<char*>(data);
  r->targetSize = size;
  return true;
}

Status Conn::test(SockRequest* r, bool* done, size_t* size, uint32_t* imm) {
  *done = false;
  if (r == nullptr || r->conn != this || !r->used) return InternalError("NET/Socket: test of an invalid request");
  // A send that already left (isend wrote a small message whole) completes without
  // reading the control socket: that read is a system call, and the credits it would
  // find are read when an isend needs one.
  if (sender_ && error_.ok() && r->partsLeft == 0 && flushed_ >= r->frameEnd) {
    *done = true;
    if (size != nullptr) *size = r->size;
    if (imm != nullptr) *imm = r->imm;
    releaseRequest(r);
    return OkStatus();
  }
  Status s = progress();
  // An unmatched receive after the goodbye will never be filled. Fail only once the
  // messages framed before the goodbye have fully arrived: failing clears the streams.
  bool streaming = std::any_of(streams_.begin(), streams_.end(), [](const Stream& st) { return !st.tasks.empty(); });
  if (s.ok() && !sender_ && !r->matched && (peerBye_ || ctrlEof_) && !streaming)
    s = fail(RemoteError("the sender closed the connection before the message this receive waits for"));
  if (!s.ok()) {
    releaseRequest(r);
    return s;
  }
  // A send is complete once its payload and its frame (which may carry the payload
  // inline) left this process: the caller may reuse the buffer and may go idle.
  if (r->partsLeft > 0 || flushed_ < r->frameEnd || (!sender_ && !r->matched)) return OkStatus();
  *done = true;
  if (size != nullptr) *size = r->size;
  if (imm != nullptr) *imm = r->imm;
  releaseRequest(r);
  return OkStatus();
}

Status Conn::progress() {
  if (!error_.ok()) return error_;
  SNCCL_TRY(flushCtrl());
  if (!ctrlEof_) SNCCL_TRY(readCtrl());
  if (outOff_ < out_.size()) SNCCL_TRY(flushCtrl());  // credits the messages just read released
  for (int i = 0; i < nstreams(); ++i) SNCCL_TRY(pumpStream(i));
  return OkStatus();
}

Status Conn::push() {
  if (!error_.ok()) return error_;
  SNCCL_TRY(flushCtrl());
  if (sender_)
    for (int i = 0; i < nstreams(); ++i) SNCCL_TRY(pumpStream(i));
  return OkStatus();
}

Status Conn::flushCtrl() {
  while (outOff_ < out_.size()) {
    Result<size_t> k = sendSome(ctrl_, out_.data() + outOff_, out_.size() - outOff_);
    if (!k.ok()) {
      // A peer that said goodbye may already be gone; what we still had to say is moot.
      if (!peerBye_) return failSocket(k.status());
      out_.clear();
      outOff_ = 0;
      return OkStatus();
    }
    if (k.value() == 0) {
      // The socket is full: drop what was written, so that out_ holds only unwritten
      // frames (at most kMaxRequests, the bound on buffering) however long this lasts.
      out_.erase(out_.begin(), out_.begin() + ptrdiff_t(outOff_));
      outOff_ = 0;
      return OkStatus();
    }
    outOff_ += k.value();
    flushed_ += k.value();
  }
  out_.clear();
  outOff_ = 0;
  if (shutAfterFlush_) {
    ::shutdown(ctrl_.fd(), SHUT_WR);
    shutAfterFlush_ = false;
  }
  return OkStatus();
}

Status Conn::readCtrl() {
  // in_ holds inLen_ bytes: at most one incomplete frame between calls (the sender's:
  // under sizeof(Frame); the receiver's: under sizeof(Frame) + kInlineMax), so a chunk
  // always fits behind it. No resizing here: growing a vector zero-fills, and
  // this runs on every poll of the connection.
  for (;;) {
    bool eof = false;
    const size_t chunk = sender_ ? kSendReadChunk : kRecvReadChunk;
    Result<size_t> k = recvSome(ctrl_, in_.data() + inLen_, chunk, &eof);
    if (!k.ok()) {
      ctrlEof_ = true;
      if (peerBye_) return OkStatus();
      return fail(k.status());
    }
    inLen_ += k.value();
    size_t off = 0;
    while (inLen_ - off >= sizeof(Frame)) {
      Frame f;
      std::memcpy(&f, in_.data() + off, sizeof f);
      size_t need = frameBytes(f);
      if (inLen_ - off < need) break;
      SNCCL_TRY(handleFrame(f, in_.data() + off + sizeof f));
      off += need;
    }
    if (off > 0) {
      std::memmove(in_.data(), in_.data() + off, inLen_ - off);
      inLen_ -= off;
    }
    if (eof) {
      ctrlEof_ = true;
      if (!peerBye_)
        return fail(RemoteError("lost the connection to %s: it closed the control socket without a goodbye "
                                "(the peer process died or reset the connection)",
                                ctrl_.peer().toString().c_str()));
      return OkStatus();
    }
    // A short read drained the socket: the next read would only say EAGAIN (a system
    // call). What arrives meanwhile is read on the next pass.
    if (k.value() < chunk) return OkStatus();
  }
}

Status Conn::handleFrame(const Frame& f, const char* payload) {
  switch (f.type) {
    case sockwire::kCts:
      if (!sender_ || credits_.size() >= size_t(kMaxRequests))
        return fail(InternalError("protocol error: unexpected credit frame from %s", ctrl_.peer().toString().c_str()));
      credits_.push_back(Credit{size_t(f.size), f.tag});
      return OkStatus();
    case sockwire::kMsg:
      if (sender_)
        return fail(InternalError("protocol error: message frame sent to the sending end by %s",
                                  ctrl_.peer().toString().c_str()));
      return matchMessage(f, payload);
    case sockwire::kBye:
      peerBye_ = true;
      held_.clear();  // nothing follows the answer below: the sender sends no more messages
      if (!sender_ && !byeSent_) {
        // Answer so the sender's close can finish without waiting for its deadline, and
        // send nothing after it: no credit can be left unread at the sender's close.
        queueFrame(Frame{sockwire::kBye, 0, 0, 0, 0}, nullptr, 0);
        byeSent_ = true;
        shutAfterFlush_ = true;
      }
      return OkStatus();
    case sockwire::kAbort:
      peerAbort_ = uint32_t(f.imm);
      return fail(RemoteError("%s reported a failure (%s) and closed the connection",
                              ctrl_.peer().toString().c_str(), resultName(int(f.imm & 0xff))));
    default:
      return fail(InternalError("protocol error: unknown frame type %u from %s", f.type,
                                ctrl_.peer().toString().c_str()));
  }
}

Status Conn::matchMessage(const Frame& f, const char* payload) {
  if (awaiting_.empty())
    return fail(InternalError("protocol error: a %llu-byte message arrived without a posted receive",
                              (unsigned long long)f.size));
  SockRequest* r = awaiting_.front();
  if (r->target != nullptr && f.size == r->targetSize) {
    r->data = r->target;  // retarget(): the expected message goes to the new memory
    r->size = r->targetSize;
  }
  if (f.size > r->size || f.tag != r->tag)
    return fail(InvalidUsage("a %llu-byte message (tag %d) arrived for a %zu-byte receive (tag %d)",
                             (unsigned long long)f.size, f.tag, r->size, r->tag));
  awaiting_.pop_front();
  releaseCredits();
  r->matched = true;
  r->size = size_t(f.size);
  r->imm = f.imm;
  if (f.size <= sockwire::kInlineMax) {
    std::memcpy(r->data, payload, r->size);
    inlineBytes_ += r->size;
  }
  addParts(r, r->size);
  return OkStatus();
}

Status Conn::pumpStream(int index) {
  Stream& st = streams_[index];
  while (!st.tasks.empty()) {
    Task& t = st.tasks.front();
    bool eof = false;
    Result<size_t> k = sender_ ? sendSome(st.sock, t.ptr + t.done, t.len - t.done)
                               : recvSome(st.sock, t.ptr + t.done, t.len - t.done, &eof);
    if (!k.ok()) {
      Status s = k.status();
      return failSocket(s.addContext(format("data stream %d", index)));
    }
    if (eof)
      return failSocket(RemoteError("data stream %d from %s closed in the middle of a message (%zu of %zu bytes of "
                              "its part received)",
                              index, st.sock.peer().toString().c_str(), t.done, t.len));
    if (k.value() == 0) return OkStatus();
    const bool shortMove = k.value() < t.len - t.done;
    t.done += k.value();
    st.bytes += k.value();
    if (t.done == t.len) {
      t.req->partsLeft--;
      st.tasks.pop_front();
    }
    // A short move filled the socket's send buffer or drained its receive queue: the next
    // call would only say EAGAIN (a system call). What frees up meanwhile is moved on the
    // next pass.
    if (shortMove) return OkStatus();
  }
  return OkStatus();
}

bool Conn::pollFds(std::vector<pollfd>* fds) const {
  if (!error_.ok() || (live_ == 0 && !wantCredit_)) return true;
  // Never register a socket with no wanted event: poll would report its hang-up forever.
  short ce = short((ctrlEof_ ? 0 : POLLIN) | (outOff_ < out_.size() ? POLLOUT : 0));
  if (ce != 0) fds->push_back(pollfd{ctrl_.fd(), ce, 0});
  for (const Stream& st : streams_)
    if (!st.tasks.empty()) fds->push_back(pollfd{st.sock.fd(), short(sender_ ? POLLOUT : POLLIN), 0});
  return true;
}

void Conn::close(uint32_t abortCode, int lingerMs) {
  if (abortCode != 0 || !error_.ok()) {
    if (error_.ok()) {
      queueFrame(Frame{sockwire::kAbort, 0, 0, abortCode, 0}, nullptr, 0);
      (void)flushCtrl();
      // Closing a socket with unread bytes (credits a sender never needed) makes the
      // kernel send a reset, which may destroy the ABORT before the peer reads it: read
      // what has arrived first, best effort.
      char sink[4096];
      while (::recv(ctrl_.fd(), sink, sizeof sink, MSG_DONTWAIT) > 0) {
      }
    }
    return;  // the sockets close with the Conn
  }
  if (!byeSent_) {
    queueFrame(Frame{sockwire::kBye, 0, 0, 0, 0}, nullptr, 0);
    byeSent_ = true;
  }
  auto deadline = sock::Clock::now() + std::chrono::milliseconds(lingerMs);
  auto waitFor = [&](short ev) {
    int ms = int(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - sock::Clock::now()).count());
    pollfd p{ctrl_.fd(), ev, 0};
    return ms > 0 && ::poll(&p, 1, std::min(ms, 100)) >= 0;
  };
  while (error_.ok() && outOff_ < out_.size()) {
    if (!flushCtrl().ok() || outOff_ >= out_.size() || !waitFor(POLLOUT)) break;
  }
  if (!sender_) return;
  // Data streams end with a FIN after their queued bytes; the control socket stays open
  // for reading until the receiver's answer, so no unread credit turns the close into a
  // reset that would discard frames still queued for the receiver.
  for (Stream& st : streams_) ::shutdown(st.sock.fd(), SHUT_WR);
  ::shutdown(ctrl_.fd(), SHUT_WR);
  while (error_.ok() && !ctrlEof_ && !peerBye_) {
    if (!readCtrl().ok() || ctrlEof_ || peerBye_ || !waitFor(POLLIN)) break;
  }
}

}  // namespace snccl::net::socknet
