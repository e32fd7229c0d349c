// One established socket-net connection (either end): the control socket, the data
// streams, the request pool, and all non-blocking I/O on them.
//
// Buffering is bounded: at most kMaxRequests requests per connection, so the control
// output holds at most that many frames (plus inline payloads), each stream at most that
// many parts, and the sender's credit list at most that many posted receives. Payloads
// above sockwire::kInlineMax are never staged: they go from the caller's buffer to the
// socket and back; smaller ones ride in the MSG frame through the control buffers.
//
// Credits: each posted receive becomes one CTS frame, but the receiver holds frames back
// while the sender has more credits granted (and not yet used by a message the receiver
// has read) than are held, and writes the held ones in one batch when that stops being
// true (releaseCredits). At 8 B that halves the credit writes with 4 receives posted: a
// write costs a system call plus the peer's TCP receive path in this thread. So the
// oldest unmatched receive always has its credit granted, and a sender that used its
// credits has sent messages whose reading, by whoever drives the receiver (its rank
// inside an operation, or the proxy), releases the rest. With n receives posted and the
// receiving rank making no call, the sender gets at least floor(n/2)+1 credits at once
// and the rest once the proxy reads its messages; a proxy that slept while the rank held
// the ring looks again within net/proxy.cc's kClaimedTickMs (5 ms).
//
// Errors are sticky: once a socket fails, every later call returns the same Status, which
// names the peer and what was lost. A goodbye (BYE) from the peer is not an error by
// itself; only a receive that can no longer be satisfied is.
#pragma once

#include <array>
#include <deque>
#include <string>
#include <vector>

#include "common/socket.h"
#include "transport/net/net.h"
#include "transport/net/socket/socket_wire.h"

namespace snccl::net::socknet {

constexpr int kMaxRequests = 64;  // >= SNCCL_STEPS' maximum: one request per ring slot

class Conn;

// What the requests of both connection kinds derive from: which kind a Net request is
// (Conn's, or MultipathConn's: multipath_conn.h).
class SockReqBase : public Request {
 public:
  bool multipath = false;
};

class SockRequest : public SockReqBase {
 public:
  Conn* conn = nullptr;
  bool used = false;
  bool matched = false;  // receive: its MSG frame arrived (size and imm are known)
  int tag = 0;
  char* data = nullptr;
  size_t size = 0;       // receive: posted bytes until matched, then the message's bytes
  char* target = nullptr;  // receive: retarget()'s memory, for a message of targetSize bytes
  size_t targetSize = 0;
  uint32_t imm = 0;
  int partsLeft = 0;     // stream parts not yet fully written / read
  uint64_t frameEnd = 0; // control bytes that must be written before it completes
};

class Conn {
 public:
  // socks[0] is the control socket, socks[1..] the data streams, all connected.
  Conn(bool sender, std::vector<sock::Socket> socks, std::string what);
  Conn(const Conn&) = delete;
  Conn& operator=(const Conn&) = delete;

  bool sender() const { return sender_; }
  int nstreams() const { return int(streams_.size()); }
  const std::string& what() const { return what_; }

  // Null when there is no credit (sender) or no free request.
  Result<SockRequest*> isend(void* data, size_t size, int tag, uint32_t imm);
  Result<SockRequest*> irecv(void* data, size_t size, int tag);
  Status test(SockRequest* r, bool* done, size_t* size, uint32_t* imm);
  // Receiver (Net::retargetRecv): a message of exactly `size` bytes for this posted
  // receive lands at `data` instead of where it was posted. Only until its MSG frame is
  // matched (no byte of it read yet); false after.
  bool retarget(SockRequest* r, void* data, size_t size);
  // Only while a request is live (or an isend waits for credit): the caller tests its
  // requests after a wake-up, and that is what consumes the readiness. An idle connection
  // registers nothing, so unread credits cannot keep poll() returning. Always true: the
  // descriptors say when progress is possible (Net::pollFds).
  bool pollFds(std::vector<pollfd>* fds) const;
  // Nothing to write and no message part in flight on any stream (Net::quiescent).
  bool quiescent() const {
    if (!error_.ok() || outOff_ < out_.size()) return false;
    for (const Stream& st : streams_)
      if (!st.tasks.empty()) return false;
    return true;
  }

  // Clean close: BYE, then (sender) wait up to lingerMs for the peer's BYE or EOF so that
  // unread credits cannot turn the close into a reset that destroys queued frames.
  // abortCode != 0: ABORT with the code, best effort, no waiting.
  void close(uint32_t abortCode, int lingerMs);
  uint32_t peerAbortCode() const { return peerAbort_; }
  // The peer's goodbye arrived (Net::peerClosed).
  bool peerClosed() const { return peerBye_ && peerAbort_ == 0; }
  // Receiver: how many times held credits were queued (each batch goes out in one write
  // when the socket has room). Fewer than the receives posted when batching works.
  uint64_t creditReleases() const { return creditReleases_; }
  // Payload bytes socket i carried (0: the control socket, its inline payloads; i > 0:
  // data stream i - 1), written by a sender or read by a receiver: the rail view of the
  // traffic counters (Net::railBytes).
  uint64_t socketBytes(int i) const { return i == 0 ? inlineBytes_ : streams_[size_t(i) - 1].bytes; }
  int sockets() const { return 1 + int(streams_.size()); }

 private:
  struct Task {
    SockRequest* req;
    char* ptr;
    size_t len;
    size_t done;
  };
  struct Stream {
    sock::Socket sock;
    std::deque<Task> tasks;
    uint64_t bytes = 0;  // payload moved
  };
  struct Credit {
    size_t size;
    int tag;
  };

  Status progress();
  // After queueing: writes what was queued (control frames; a sender's stream parts)
  // without reading anything.
  Status push();
  Status flushCtrl();
  Status readCtrl();
  Status handleFrame(const sockwire::Frame& f, const char* payload);
  Status matchMessage(const sockwire::Frame& f, const char* payload);
  Status pumpStream(int index);
  // Receiver: queues the held credits when the sender is low on them (the rule inside);
  // true if it queued any.
  bool releaseCredits();
  Status fail(Status s);
  // A socket to the peer failed with `s`. A peer that failed first sent an ABORT on the
  // control socket before it closed, and its sockets' reset can reach this end first: the
  // control socket is read once more (without blocking), so that its ABORT, which names
  // where the failure started (peerAbortCode), wins over this socket's reset.
  Status failSocket(Status s);
  void queueFrame(const sockwire::Frame& f, const void* payload, size_t n);
  void addParts(SockRequest* r, size_t size);
  SockRequest* allocRequest();
  void releaseRequest(SockRequest* r);
  size_t frameBytes(const sockwire::Frame& f) const;

  const bool sender_;
  sock::Socket ctrl_;
  std::vector<Stream> streams_;
  std::string what_;  // "rank 3 <- 10.77.0.2:41234" style description for messages
  std::array<SockRequest, kMaxRequests> pool_;
  std::deque<SockRequest*> awaiting_;  // receiver: posted, MSG not yet seen, in order
  std::deque<Credit> credits_;         // sender: posted receives of the peer, in order
  std::vector<sockwire::Frame> held_;  // receiver: CTS of the newest posted receives, not yet written
  uint64_t creditReleases_ = 0;
  uint64_t inlineBytes_ = 0;           // payload bytes carried inside MSG frames
  std::vector<char> out_;              // control frames not yet written
  size_t outOff_ = 0;
  std::vector<char> in_;               // control bytes read but not yet parsed: the first inLen_
  size_t inLen_ = 0;
  uint64_t seq_ = 0;                   // messages started (both ends count the same)
  uint64_t queued_ = 0;                // control bytes ever queued
  uint64_t flushed_ = 0;               // control bytes ever written
  int live_ = 0;                       // requests handed out and not yet completed
  bool wantCredit_ = false;            // the last isend found no credit
  uint32_t peerAbort_ = 0;             // the code of the peer's ABORT frame
  Status error_;
  bool ctrlEof_ = false;
  bool peerBye_ = false;
  bool byeSent_ = false;
  bool shutAfterFlush_ = false;  // receiver: answered a BYE, shut down once it is written
};

}  // namespace snccl::net::socknet
