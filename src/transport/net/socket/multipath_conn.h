// An adaptive multipath socket-net connection (SNCCL_ROUTING=adaptive): one message is
// cut into chunks, and each path (a TCP socket, usually one per rail) pulls the next chunk
// when it has room, so a path takes what it delivers now instead of a fixed share.
//
// Every socket of the connection is a path; they are equal (there is no control socket to
// lose). Towards the receiver a path carries CHUNK records (a header and the payload,
// written to the caller's buffer at the chunk's offset, so chunks may arrive in any order
// over the paths); back towards the sender it carries CTS (a posted receive: the sender's
// credit), ACK (how many chunks this path delivered so far) and PONG records. The
// receiver writes each CTS on every live path and the sender keeps the first copy, so a
// credit survives the loss of any path but the last.
//
// Room on a path is time: the data ahead of a new chunk on the path's rail, at the rail's
// delivery rate, must take less than a delay that all paths share (one chunk at least). A
// rail is what the paths between the same two addresses share, over every connection of
// the Net (RailShare): they queue at the same links, so the data ahead counts all of their
// unacknowledged bytes. Acknowledgements carry the receiver's clock, so the bytes that
// arrived and whose acknowledgement still waits behind the other direction's data are not
// counted as ahead. They also tell how much later than the sender expected a rail's chunks
// arrive at best (RailShare::floorNs): a rail whose floor is above the quickest rail's has
// a delay that the sender's own data does not explain (a queue that other flows keep full
// in a switch), which is added to its data ahead when chunks are placed and to the delay
// that all paths share. A path left alone (the others late or dead) has no such limit. A path
// with room still leaves a chunk to another that would deliver it sooner after what is
// ahead of it. A path that slows down gets fewer chunks, one that recovers more; all
// paths have about the same queueing delay, so the chunks of one message finish together
// (requests complete in order: one late chunk holds up every message after it).
//
// A send completes when all its chunks are acknowledged (not when they are written): so a
// chunk still in a path that goes silent or dies can be sent again. Writes are idempotent
// and each end counts a chunk once (a bitmap per message: arrived at the receiver,
// acknowledged at the sender), so copies are harmless; a chunk that arrives for a message
// already complete is read into a sink.
//
// A path is late when it has had no acknowledgement for several times what its chunks in
// flight should take (at least kLateMinSec, multipath_conn.cc) while the receiver answers
// on another path that is not late (the sender asks with a PING). Its unacknowledged
// chunks are then queued again for the other paths, and it takes no new chunk until an
// acknowledgement arrives on it: a stalled path costs a message tens of milliseconds, and
// a path that was only slow for a while is used again.
//
// A path dies when its socket fails or ends, or when it has chunks unacknowledged for
// SNCCL_SOCKET_PATH_TIMEOUT milliseconds while the receiver answers on another path (the
// PING went when the path was late, or after half of that time): a cut cable stalls TCP
// without any error for minutes. The sender then sends the path's unacknowledged chunks again on the
// others and tells the receiver with a DROP record; the receiver stops reading the path.
// Only when the last path dies does the connection fail.
//
// Requests complete in the order they were posted (Net's contract).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/socket.h"
#include "transport/net/socket/rail_share.h"
#include "transport/net/socket/socket_conn.h"

namespace snccl::net::socknet {

struct MultipathConfig {
  size_t chunkBytes = 128 * 1024;  // from the receiver's handle: both ends use the same
  int stallMs = 1000;              // SNCCL_SOCKET_PATH_TIMEOUT
  // The Net's rails: a sender's paths between the same addresses share one RailShare
  // (null: each path has its own).
  std::shared_ptr<RailBook> rails;
};

class MultipathConn;

class MpRequest : public SockReqBase {
 public:
  MpRequest() { multipath = true; }
  MultipathConn* conn = nullptr;
  bool used = false;
  bool complete = false;
  uint64_t seq = 0;  // message number on this connection (both ends count the same)
  char* data = nullptr;
  size_t size = 0;  // receive: posted bytes until matched, then the message's bytes
  int tag = 0;
  uint32_t imm = 0;
  uint32_t nchunks = 0;
  // Sender: the next chunk never sent, chunks acknowledged, chunks to send again.
  uint32_t nextChunk = 0;
  uint32_t acked = 0;
  std::vector<uint32_t> retry;
  // Receiver: the first chunk header arrived.
  bool matched = false;
  char* target = nullptr;  // retarget()
  size_t targetSize = 0;
  // Which chunks arrived (receiver) or were acknowledged (sender), and how many.
  std::vector<uint64_t> got;
  uint32_t gotCount = 0;
  bool has(uint32_t index) const { return (got[index / 64] >> (index % 64) & 1) != 0; }
  void mark(uint32_t index) { got[index / 64] |= uint64_t(1) << (index % 64); }
};

class MultipathConn {
 public:
  using Clock = std::chrono::steady_clock;
  // Every socket is a path, named in messages by its addresses.
  MultipathConn(bool sender, std::vector<sock::Socket> socks, std::string what, MultipathConfig cfg);
  ~MultipathConn();
  MultipathConn(const MultipathConn&) = delete;
  MultipathConn& operator=(const MultipathConn&) = delete;

  Result<MpRequest*> isend(void* data, size_t size, int tag, uint32_t imm);
  Result<MpRequest*> irecv(void* data, size_t size, int tag);
  Status test(MpRequest* r, bool* done, size_t* size, uint32_t* imm);
  bool retarget(MpRequest* r, void* data, size_t size);
  // False while a path has chunks unacknowledged: the stall check needs a timer then.
  bool pollFds(std::vector<pollfd>* fds) const;
  bool quiescent() const;
  void close(uint32_t abortCode, int lingerMs);
  uint32_t peerAbortCode() const { return peerAbort_; }
  bool peerClosed() const { return peerBye_ && peerAbort_ == 0; }

  // For tests and sn_info-style reports.
  int paths() const { return int(paths_.size()); }
  int livePaths() const;
  // Payload bytes a path delivered: acknowledged (sender) or received (receiver).
  uint64_t pathBytes(int i) const { return paths_[size_t(i)].bytes; }
  // Sender: the path's window, and its bytes written and not yet acknowledged.
  size_t pathWindow(int i) const { return paths_[size_t(i)].window; }
  size_t pathInFlight(int i) const { return paths_[size_t(i)].unackedBytes; }
  // Sender: chunks queued again because their path was late or died, and the payload
  // bytes of acknowledgements for chunks already acknowledged on another path.
  uint64_t resentChunks() const { return resentChunks_; }
  uint64_t duplicateBytes() const { return duplicateBytes_; }
  // For tests: the receiving end stops (or resumes) reading path i, as a pulled cable
  // stops a path without any error.
  void holdPath(int i, bool hold) { paths_[size_t(i)].held = hold; }

 private:
  struct Credit {
    size_t size;
    int tag;
  };
  struct ChunkRef {
    MpRequest* req;
    uint64_t seq;  // req's message: the request may be released and reused meanwhile
    uint32_t index;
    uint32_t len;
    Clock::time_point sent{};  // sender: given to its path
    double expectSec = 0;      // sender: the data ahead of it and its bytes, at the rate then
  };
  struct Path {
    sock::Socket sock;
    std::string label;
    bool alive = true;
    uint64_t bytes = 0;
    // Records to write in this end's direction (sender: DROP, BYE, ABORT, PING; receiver:
    // CTS, BYE, ABORT, PONG), and the cumulative ACK not yet written (receiver).
    std::vector<char> out;
    size_t outOff = 0;
    uint64_t ackQueued = 0;
    uint64_t ackWritten = 0;
    // Incoming records being assembled (a receiver reads one header at a time, so that a
    // chunk's payload goes straight to its place).
    std::vector<char> in;
    size_t inLen = 0;
    bool held = false;            // holdPath()
    bool byeSeen = false;         // the peer's BYE arrived on this path
    bool shutAfterFlush = false;  // receiver: answered a BYE; end the path once it is written
    // Sender: the chunk being written (header + payload), chunks not yet acknowledged
    // (the one being written is the last), the window, the rate estimate.
    bool writing = false;
    std::array<char, 40> hdr{};
    ChunkRef cur{};
    size_t wdone = 0;
    std::deque<ChunkRef> unacked;
    size_t unackedBytes = 0;
    size_t resent = 0;  // leading entries of unacked already queued again for other paths
    bool late = false;  // resendLate() ran; cleared by the next acknowledgement
    uint64_t acked = 0;
    Clock::time_point lastProgress{};  // last acknowledgement, or when unacked became non-empty
    Clock::time_point lastHeard{};     // last record of any kind from the receiver
    bool pinged = false;
    Clock::time_point pingAt{};
    std::shared_ptr<RailShare> rail;  // backlog and rate, with other connections' paths
    double rate = 0;                  // rail->rate() at the last acknowledgement
    double extra = 0;                 // setExtras(): its rail's delay beyond the quickest rail's
    size_t window = 0;
    // Receiver: the chunk being read.
    bool reading = false;
    char* dst = nullptr;  // null: read into the sink
    MpRequest* rreq = nullptr;
    uint32_t rindex = 0;
    size_t rlen = 0;
    size_t rdone = 0;
    uint64_t received = 0;  // chunks fully read (what ACK reports)
  };

  Status progress();
  Status sendAll();
  // Sender: how much of path p's room is in use (below 1: it may take a chunk).
  double fill(const Path& p) const;
  // Whether path i would deliver a new chunk no later than any other path could, after
  // what each has ahead of it (at its rate): a slow path takes a chunk only when the faster
  // ones are that far behind, so it does not hold up the message the chunk belongs to.
  // A path with an extra delay that was idle for a while is soonest, so that its delay is
  // measured again.
  bool soonest(size_t i, Clock::time_point now) const;
  // Writes what path i has under way; with `pull`, then at most one new chunk (*took).
  Status sendPath(size_t i, bool pull, bool* took = nullptr);
  Status readPath(size_t i);
  Status flushOut(Path& p, size_t i);
  void queueAck(Path& p);  // receiver: the cumulative ACK of the chunks taken, if any is new
  Status handleRecord(size_t i, const char* rec);
  Status startChunk(size_t i, const char* rec);
  void chunkDone(size_t i);
  void ackChunks(Path& p, uint64_t count, int64_t stampNs, Clock::time_point now);
  // Sender: whether c's message still waits for c (not acknowledged on any path).
  static bool awaited(const ChunkRef& c);
  // Sender: queues path i's unacknowledged chunks from `resent` on for the other paths.
  void resendFrom(Path& p);
  // Sender: how long path p may go without an acknowledgement before it is late.
  double lateAfterSec(const Path& p) const;
  // Sender: asks the receiver on every path but i whether it is there (path i is silent).
  Status ping(size_t i, Clock::time_point now);
  // Sender: whether another path (one that is not late, with `usable`) heard from the
  // receiver since path i's PING: then path i, not the receiver, is stuck.
  bool heardSincePing(size_t i, bool usable) const;
  // Every live path's window from the rates (multipath_conn.cc: equal queueing delay).
  void setWindows();
  // Every live path's extra delay: its rail's floor less the least of the live paths'.
  void setExtras();
  bool pullChunk(ChunkRef* c);
  Status pathFailed(size_t i, const Status& why);
  Status checkStalls(Clock::time_point now);
  void queueRecord(Path& p, const void* rec);
  void queueAll(const void* rec);
  Status fail(Status s);
  MpRequest* allocRequest();
  void releaseRequest(MpRequest* r);
  bool inOrderComplete(const MpRequest* r) const;

  const bool sender_;
  const MultipathConfig cfg_;
  std::vector<Path> paths_;
  std::string what_;
  std::array<MpRequest, kMaxRequests> pool_;
  std::deque<MpRequest*> order_;  // live requests, oldest first
  std::deque<Credit> credits_;    // sender: the peer's posted receives, in order
  uint64_t creditsSeen_ = 0;      // sender: CTS records kept (the next one's number)
  uint64_t seq_ = 0;              // messages started
  bool wantCredit_ = false;
  uint64_t resentChunks_ = 0;
  uint64_t duplicateBytes_ = 0;
  // sendAll's scratch: the paths that may take a chunk, with their fill.
  std::vector<std::pair<double, size_t>> order64_;
  double delay_ = 0;    // setWindows(): the queueing delay every path gets (D)
  bool alone_ = false;  // setWindows(): one usable path, with kMaxWindow
  std::vector<char> sink_;
  uint32_t peerAbort_ = 0;
  bool peerBye_ = false;
  bool byeSent_ = false;
  bool closing_ = false;  // close(): a path that ends now is no news
  Status error_;
};

}  // namespace snccl::net::socknet
