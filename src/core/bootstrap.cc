// TCP bootstrap: unique ids, init through the root, per-peer messages, ring allGather,
// barrier, split and abort.
//
// Connections: to send to peer p a rank connects to p's listener once and keeps that
// socket for sending only; the socket p opens to us is used for receiving only. So all
// messages from p to us travel on one TCP stream and keep their order.
//
// Receiving: one thread at a time holds the "reader" role. It polls the listener, the
// accepted-but-unidentified connections and every peer's incoming socket, and moves each
// complete message into the inbox keyed by (peer, tag). It gives the role up after every
// poll slice (<= 100 ms) so threads waiting for other peers or tags are never starved and
// a message one thread reads on behalf of another is handed over promptly. `mu_` is only
// ever held for table updates, never across I/O, so abort() can take it without blocking.
#include "core/bootstrap.h"

#include <poll.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <string>

#include "common/greeter.h"
#include "common/log.h"
#include "common/params.h"
#include "core/bootstrap_wire.h"

namespace snccl {
namespace {

using boot::ConnKind;
using boot::FrameHeader;
using boot::Secret;

constexpr uint32_t kTagAllGather = Bootstrap::kReservedTagBase + 1;
constexpr uint32_t kTagBarrier = Bootstrap::kReservedTagBase + 2;
constexpr uint32_t kTagSplit = Bootstrap::kReservedTagBase + 3;
constexpr uint32_t kTagAbort = Bootstrap::kReservedTagBase + 4;  // empty: "I am aborting"
// Small messages go out as one send() together with their header.
constexpr size_t kCoalesceLimit = 64 * 1024;

// Per split member: what it tells the others about its child endpoint.
struct SplitEntry {
  uint64_t childHash;
  uint32_t infoSize;
  uint32_t reserved;
  sock::Address::Wire addr;
};

class TcpBootstrap final : public Bootstrap {
 public:
  struct Config {
    int rank = 0;
    int nranks = 0;
    uint64_t commHash = 0;
    Secret secret{};
    sock::Socket listener;
    std::vector<sock::Address> addrs;
    std::vector<std::byte> infos;  // nranks x infoSize
    size_t infoSize = 0;
    const std::atomic<bool>* userAbort = nullptr;
  };

  explicit TcpBootstrap(Config c);

  Result<std::unique_ptr<Bootstrap>> split(std::span<const int> members, int childRank, uint64_t childHash,
                                           std::span<const std::byte> info,
                                           const std::atomic<bool>* abortFlag) override;
  void setPeerWatch(PeerWatch gone) override {
    std::lock_guard<std::mutex> g(mu_);
    peerWatch_ = std::move(gone);
  }
  int rank() const override { return rank_; }
  int nranks() const override { return nranks_; }
  uint64_t commHash() const override { return commHash_; }
  std::span<const std::byte> peerInfo(int rank) const override;
  Status send(int peer, uint32_t tag, const void* data, size_t size) override;
  Status recv(int peer, uint32_t tag, void* data, size_t size) override;
  Status allGather(void* data, size_t size) override;
  Status barrier() override;
  void abort() override;
  void notifyAbort(std::span<const int> peers, std::chrono::milliseconds budget, int origin) override;
  bool peerAborted(int peer, int* origin = nullptr) override;

 private:
  // A message being reassembled from a peer's stream (reader only). The reader never
  // waits for the rest of a message: two ranks sending each other large messages must
  // both keep draining while their own sends are blocked.
  struct Incoming {
    FrameHeader header{};
    size_t headerGot = 0;
    std::vector<std::byte> payload;
    size_t payloadGot = 0;
  };

  struct SendSide {
    std::mutex mu;        // one sender per peer at a time keeps frames whole
    sock::Socket sock;    // assigned under mu_ as well (abort() reads it)
    std::string broken;   // why the connection failed; empty while usable
  };

  sock::Waiter waiter() const { return sock::Waiter::fromParams(userAbort_, &aborted_); }
  std::string peerName(int peer) const;
  Status checkPeer(int peer, uint32_t tag, const char* op) const;
  Status sendImpl(int peer, uint32_t tag, const void* data, size_t size);
  Status recvImpl(int peer, uint32_t tag, void* data, size_t size);
  Status connectTo(int peer, SendSide& side, const sock::Waiter& w);
  Status deliver(int peer, uint32_t tag, std::vector<std::byte> msg);
  Status takeMessage(int peer, uint32_t tag, void* data, size_t size, std::vector<std::byte>& msg);

  // Reader role (see the file comment).
  Status pumpOnce(int timeoutMs);
  void pumpIfIdle();
  // The greeting of a peer's connection: a Hello (sock::Greeter::Framer).
  Result<size_t> frameHello(std::span<const std::byte> got) const;
  void identify(sock::Greeter::Greeted g);
  void readAvailable(int peer);
  void markClosed(int peer, const std::string& reason);

  Status ringAllGather(std::byte* data, size_t size, std::span<const int> ring, int me, uint32_t tag);

  const int rank_;
  const int nranks_;
  const uint64_t commHash_;
  const Secret secret_;
  const std::vector<sock::Address> addrs_;
  const std::vector<std::byte> infos_;
  const size_t infoSize_;
  const std::atomic<bool>* const userAbort_;
  std::vector<int> allRanks_;  // 0..nranks-1, the ring of allGather
  sock::Socket listener_;
  std::atomic<bool> aborted_{false};

  std::mutex mu_;
  PeerWatch peerWatch_;  // under mu_
  std::condition_variable cv_;
  bool readerActive_ = false;                  // under mu_
  std::vector<sock::Socket> recvSocks_;        // written by the reader under mu_
  std::vector<std::string> recvClosed_;        // under mu_: why p's stream ended
  std::vector<char> peerAborted_;              // under mu_: p sent kTagAbort
  std::vector<int> peerAbortOrigin_;           // under mu_: the root cause its notice names
  std::map<std::pair<int, uint32_t>, std::deque<std::vector<std::byte>>> inbox_;  // under mu_
  sock::Greeter greeter_;                      // reader only: accepted, not yet identified
  std::vector<Incoming> partial_;              // reader only, per peer
  std::vector<std::unique_ptr<SendSide>> send_;
};

TcpBootstrap::TcpBootstrap(Config c)
    : rank_(c.rank), nranks_(c.nranks), commHash_(c.commHash), secret_(c.secret), addrs_(std::move(c.addrs)),
      infos_(std::move(c.infos)), infoSize_(c.infoSize), userAbort_(c.userAbort), allRanks_(c.nranks),
      listener_(std::move(c.listener)), recvSocks_(c.nranks), recvClosed_(c.nranks), peerAborted_(c.nranks),
      peerAbortOrigin_(c.nranks, -1),
      greeter_(sock::Greeter::Options{format("bootstrap rank %d listening on %s", c.rank,
                                             listener_.peer().toString().c_str()),
                                      boot::kMaxPendingPeers, boot::kGreetingDeadline},
               sizeof(boot::Hello), [this](std::span<const std::byte> got) { return frameHello(got); }),
      partial_(c.nranks) {
  std::iota(allRanks_.begin(), allRanks_.end(), 0);
  for (int p = 0; p < nranks_; ++p) send_.push_back(std::make_unique<SendSide>());
}

std::string TcpBootstrap::peerName(int peer) const {
  return format("rank %d (%s)", peer, addrs_[static_cast<size_t>(peer)].toString().c_str());
}

std::span<const std::byte> TcpBootstrap::peerInfo(int rank) const {
  if (rank < 0 || rank >= nranks_) return {};
  return std::span<const std::byte>(infos_).subspan(infoSize_ * static_cast<size_t>(rank), infoSize_);
}

Status TcpBootstrap::checkPeer(int peer, uint32_t tag, const char* op) const {
  if (peer < 0 || peer >= nranks_)
    return InvalidArgument("bootstrap %s: peer %d is not in [0, %d)", op, peer, nranks_);
  if (tag >= kReservedTagBase)
    return InvalidArgument("bootstrap %s: tag 0x%x is reserved (>= 0x%x)", op, tag, kReservedTagBase);
  return OkStatus();
}

Status TcpBootstrap::send(int peer, uint32_t tag, const void* data, size_t size) {
  SNCCL_TRY(checkPeer(peer, tag, "send"));
  return sendImpl(peer, tag, data, size);
}

Status TcpBootstrap::recv(int peer, uint32_t tag, void* data, size_t size) {
  SNCCL_TRY(checkPeer(peer, tag, "recv"));
  return recvImpl(peer, tag, data, size);
}

// ---- Sending ------------------------------------------------------------------------

Status TcpBootstrap::deliver(int peer, uint32_t tag, std::vector<std::byte> msg) {
  std::lock_guard<std::mutex> g(mu_);
  inbox_[{peer, tag}].push_back(std::move(msg));
  cv_.notify_all();
  return OkStatus();
}

Status TcpBootstrap::connectTo(int peer, SendSide& side, const sock::Waiter& w) {
  // Connect in slices so that a peer that died (its listener gone, the connect retried
  // until the deadline) is noticed through the peer watch.
  Result<sock::Socket> r = InternalError("no connect attempt");
  PeerWatch watch;
  {
    std::lock_guard<std::mutex> g(mu_);
    watch = peerWatch_;
  }
  for (;;) {
    r = sock::Socket::connect(addrs_[static_cast<size_t>(peer)], w.capped(std::chrono::seconds(1)));
    if (r.ok() || w.expired() || w.aborted()) break;
    pumpIfIdle();  // an abort notice from the peer arrives on our side of the streams
    {
      std::lock_guard<std::mutex> g(mu_);
      if (peerAborted_[static_cast<size_t>(peer)])
        return RemoteError("rank %d: %s aborted its communicator before we could connect to it", rank_,
                           peerName(peer).c_str());
    }
    if (std::string death = watch ? watch(peer) : std::string(); !death.empty())
      return RemoteError("rank %d: %s %s before we could connect to it", rank_, peerName(peer).c_str(),
                         death.c_str());
  }
  if (!r.ok()) return Status(r.status()).addContext("connecting to " + peerName(peer));
  boot::Hello h = boot::makeHello(secret_, commHash_, rank_, ConnKind::kPeer);
  SNCCL_TRY(r->sendAll(&h, sizeof h, w, "the bootstrap hello"));
  std::lock_guard<std::mutex> g(mu_);
  side.sock = std::move(*r);
  return OkStatus();
}

Status TcpBootstrap::sendImpl(int peer, uint32_t tag, const void* data, size_t size) {
  const auto* bytes = static_cast<const std::byte*>(data);
  if (peer == rank_) return deliver(peer, tag, std::vector<std::byte>(bytes, bytes + size));
  sock::Waiter w = waiter();
  SendSide& side = *send_[static_cast<size_t>(peer)];
  std::lock_guard<std::mutex> g(side.mu);
  std::string ctx = format("rank %d sending tag %u (%zu bytes) to %s", rank_, tag, size, peerName(peer).c_str());
  if (w.aborted()) return SystemError("%s: aborted", ctx.c_str());
  if (!side.broken.empty()) return RemoteError("%s: the connection failed earlier: %s", ctx.c_str(), side.broken.c_str());
  if (!side.sock.valid()) {
    Status s = connectTo(peer, side, w);
    if (!s.ok()) return s.addContext(ctx);
  }
  FrameHeader h{tag, 0, size};
  // While the peer's receive buffer is full, keep draining our own incoming traffic:
  // the peer may itself be blocked sending to us.
  std::function<void()> idle = [this] { pumpIfIdle(); };
  Status s;
  if (size <= kCoalesceLimit) {
    std::vector<std::byte> buf(sizeof h + size);
    std::memcpy(buf.data(), &h, sizeof h);
    if (size) std::memcpy(buf.data() + sizeof h, data, size);
    s = side.sock.sendAll(buf.data(), buf.size(), w, "a bootstrap message", &idle);
  } else {
    s = side.sock.sendAll(&h, sizeof h, w, "a bootstrap message header", &idle);
    if (s.ok()) s = side.sock.sendAll(data, size, w, "a bootstrap message", &idle);
  }
  if (!s.ok()) {
    // A frame may be half written: the stream is unusable from now on.
    side.broken = s.message();
    return s.addContext(ctx);
  }
  return OkStatus();
}

// ---- Receiving ----------------------------------------------------------------------

Status TcpBootstrap::takeMessage(int peer, uint32_t tag, void* data, size_t size, std::vector<std::byte>& msg) {
  if (msg.size() != size)
    return InvalidUsage("bootstrap message from %s with tag %u has %zu bytes, the receiver expected %zu",
                        peerName(peer).c_str(), tag, msg.size(), size);
  if (size) std::memcpy(data, msg.data(), size);
  return OkStatus();
}

Status TcpBootstrap::recvImpl(int peer, uint32_t tag, void* data, size_t size) {
  sock::Waiter w = waiter();
  // The first check waits a moment: a message that is already on its way wins.
  Clock::time_point nextWatch = Clock::now() + std::chrono::milliseconds(100);
  int deathSeen = 0;
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    auto it = inbox_.find({peer, tag});
    if (it != inbox_.end() && !it->second.empty()) {
      std::vector<std::byte> msg = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) inbox_.erase(it);
      lk.unlock();
      return takeMessage(peer, tag, data, size, msg);
    }
    if (w.aborted()) return SystemError("rank %d: aborted while waiting for tag %u from %s", rank_, tag, peerName(peer).c_str());
    const std::string& closed = recvClosed_[static_cast<size_t>(peer)];
    if (!closed.empty())
      return RemoteError("rank %d: %s closed the bootstrap connection while we waited for tag %u (%s)", rank_,
                         peerName(peer).c_str(), tag, closed.c_str());
    if (peerWatch_ && Clock::now() >= nextWatch) {
      nextWatch = Clock::now() + std::chrono::milliseconds(100);
      std::string death = peerWatch_(peer);
      // Report a death only when seen twice, a pump apart: a peer may send its last
      // message and exit normally, and that message must still be delivered.
      deathSeen = death.empty() ? 0 : deathSeen + 1;
      if (deathSeen >= 2)
        return RemoteError("rank %d: %s %s while we waited for tag %u from it", rank_, peerName(peer).c_str(),
                           death.c_str(), tag);
    }
    if (w.expired())
      return RemoteError("rank %d: timed out after %d s waiting for tag %u from %s (%s)", rank_, w.timeoutSec, tag,
                         peerName(peer).c_str(),
                         recvSocks_[static_cast<size_t>(peer)].valid() ? "connected, nothing arrived"
                                                                      : "it never connected to us");
    if (readerActive_) {
      cv_.wait_for(lk, std::chrono::milliseconds(100));
      continue;
    }
    readerActive_ = true;
    lk.unlock();
    Status s = pumpOnce(w.sliceMs());
    lk.lock();
    readerActive_ = false;
    cv_.notify_all();
    if (!s.ok()) return s.addContext(format("rank %d waiting for tag %u from %s", rank_, tag, peerName(peer).c_str()));
  }
}

void TcpBootstrap::pumpIfIdle() {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (readerActive_) return;
    readerActive_ = true;
  }
  (void)pumpOnce(0);  // a poll failure resurfaces in the next recv
  std::lock_guard<std::mutex> g(mu_);
  readerActive_ = false;
  cv_.notify_all();
}

Status TcpBootstrap::pumpOnce(int timeoutMs) {
  // Only the reader modifies recvSocks_ and the greeter, so reading them here needs no lock.
  std::vector<pollfd> fds;
  greeter_.pollFds(listener_, &fds);
  const size_t greeterFds = fds.size();
  std::vector<int> who;  // the peer of fds[greeterFds + k]
  for (int p = 0; p < nranks_; ++p) {
    if (!recvSocks_[static_cast<size_t>(p)].valid()) continue;
    fds.push_back({recvSocks_[static_cast<size_t>(p)].fd(), POLLIN, 0});
    who.push_back(p);
  }
  int rc = ::poll(fds.data(), fds.size(), greeter_.sliceMs(timeoutMs));
  if (rc < 0 && errno != EINTR) return ErrnoError(errno, "poll on bootstrap sockets");
  if (rc < 0) return OkStatus();
  for (size_t k = greeterFds; k < fds.size(); ++k)
    if (fds[k].revents != 0) readAvailable(who[k - greeterFds]);
  // Also after a timeout: the greeter drops connections whose greeting is overdue.
  if (aborted_.load(std::memory_order_acquire)) return OkStatus();
  for (auto& g : greeter_.service(listener_, std::span<const pollfd>(fds.data(), greeterFds))) identify(std::move(g));
  return OkStatus();
}

Result<size_t> TcpBootstrap::frameHello(std::span<const std::byte> got) const {
  boot::Hello h;
  std::memcpy(&h, got.data(), sizeof h);
  SNCCL_TRY(boot::checkHello(h, secret_, commHash_, ConnKind::kPeer));
  if (h.fromRank < 0 || h.fromRank >= nranks_ || h.fromRank == rank_)
    return InvalidUsage("claims to be rank %d of %d", h.fromRank, nranks_);
  return got.size();
}

void TcpBootstrap::identify(sock::Greeter::Greeted g) {
  boot::Hello h;
  std::memcpy(&h, g.bytes.data(), sizeof h);
  {
    std::lock_guard<std::mutex> lk(mu_);
    size_t p = static_cast<size_t>(h.fromRank);
    if (!recvSocks_[p].valid() && recvClosed_[p].empty()) {
      recvSocks_[p] = std::move(g.sock);
    }
  }
  if (g.sock.valid()) {
    SN_WARN("bootstrap rank %d: rejected connection from %s: second connection claiming to be rank %d", rank_,
            g.sock.peer().toString().c_str(), h.fromRank);
    return;
  }
  readAvailable(h.fromRank);  // the frames that followed the hello may be waiting already
}

void TcpBootstrap::readAvailable(int peer) {
  const sock::Socket& s = recvSocks_[static_cast<size_t>(peer)];
  Incoming& in = partial_[static_cast<size_t>(peer)];
  for (;;) {
    bool inHeader = in.headerGot < sizeof in.header;
    auto* dst = inHeader ? reinterpret_cast<std::byte*>(&in.header) + in.headerGot : in.payload.data() + in.payloadGot;
    size_t want = inHeader ? sizeof in.header - in.headerGot : in.payload.size() - in.payloadGot;
    bool eof = false;
    Result<size_t> got = want ? s.recvSome(dst, want, &eof) : size_t(0);
    if (!got.ok() || eof) {
      bool clean = eof && in.headerGot == 0;
      markClosed(peer, clean ? "end of stream" : !got.ok() ? got.status().message() : "closed in the middle of a message");
      return;
    }
    if (want && *got == 0) return;  // nothing more for now
    (inHeader ? in.headerGot : in.payloadGot) += *got;
    if (inHeader && in.headerGot == sizeof in.header) {
      if (in.header.size > boot::kMaxMessageSize) {
        markClosed(peer, format("corrupt bootstrap message header (size %llu)", (unsigned long long)in.header.size));
        return;
      }
      in.payload.resize(in.header.size);
    }
    if (in.headerGot == sizeof in.header && in.payloadGot == in.payload.size()) {
      if (in.header.tag == kTagAbort) {
        {
          std::lock_guard<std::mutex> g(mu_);
          peerAborted_[static_cast<size_t>(peer)] = 1;
          // reserved: origin + 1 (0 from a sender that did not say)
          const int origin = int(in.header.reserved) - 1;
          peerAbortOrigin_[static_cast<size_t>(peer)] = origin >= 0 && origin < nranks_ ? origin : peer;
        }
        markClosed(peer, format("rank %d aborted its communicator", peer));
        return;
      }
      (void)deliver(peer, in.header.tag, std::move(in.payload));
      in = Incoming{};
    }
  }
}

void TcpBootstrap::markClosed(int peer, const std::string& reason) {
  std::lock_guard<std::mutex> g(mu_);
  recvClosed_[static_cast<size_t>(peer)] = aborted_.load() ? "aborted" : reason;
  recvSocks_[static_cast<size_t>(peer)].close();
  cv_.notify_all();
}

void TcpBootstrap::abort() {
  aborted_.store(true, std::memory_order_release);
  // mu_ is never held across I/O, so this lock is brief. Shutting the sockets down wakes
  // any poll() at once; the fds stay open until their owners close them under mu_.
  std::lock_guard<std::mutex> g(mu_);
  listener_.shutdown();
  for (const auto& s : recvSocks_) s.shutdown();
  for (const auto& side : send_) side->sock.shutdown();
  cv_.notify_all();
}

void TcpBootstrap::notifyAbort(std::span<const int> peers, std::chrono::milliseconds budget, int origin) {
  auto end = Clock::now() + budget;
  FrameHeader h{kTagAbort, uint32_t(origin >= 0 && origin < nranks_ ? origin + 1 : 0), 0};
  for (int peer : peers) {
    if (peer == rank_ || peer < 0 || peer >= nranks_ || Clock::now() >= end) continue;
    SendSide& side = *send_[static_cast<size_t>(peer)];
    // A sender stuck on this stream holds the lock; abort() will release it instead.
    std::unique_lock<std::mutex> g(side.mu, std::try_to_lock);
    if (!g.owns_lock() || !side.broken.empty()) continue;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    sock::Waiter w = sock::Waiter::after(1).capped(std::min(left, std::chrono::milliseconds(100)));
    if (!side.sock.valid()) {
      Result<sock::Socket> r = sock::Socket::connect(addrs_[static_cast<size_t>(peer)], w);
      if (!r.ok()) continue;
      boot::Hello hello = boot::makeHello(secret_, commHash_, rank_, ConnKind::kPeer);
      if (!r->sendAll(&hello, sizeof hello, w, "the bootstrap hello").ok()) continue;
      std::lock_guard<std::mutex> gm(mu_);
      side.sock = std::move(*r);
    }
    if (!side.sock.sendAll(&h, sizeof h, w, "an abort notice").ok()) side.broken = "abort notice failed";
  }
}

bool TcpBootstrap::peerAborted(int peer, int* origin) {
  if (peer < 0 || peer >= nranks_ || aborted_.load(std::memory_order_acquire)) return false;
  pumpIfIdle();
  std::lock_guard<std::mutex> g(mu_);
  if (origin != nullptr) *origin = peerAbortOrigin_[static_cast<size_t>(peer)];
  return peerAborted_[static_cast<size_t>(peer)] != 0;
}

// ---- Collectives --------------------------------------------------------------------

Status TcpBootstrap::ringAllGather(std::byte* data, size_t size, std::span<const int> ring, int me, uint32_t tag) {
  // n-1 steps: pass along the block received in the previous step. Messages of one tag
  // between two ranks stay in order, so successive calls cannot mix.
  int n = static_cast<int>(ring.size());
  int next = ring[static_cast<size_t>((me + 1) % n)];
  int prev = ring[static_cast<size_t>((me - 1 + n) % n)];
  for (int step = 0; step < n - 1; ++step) {
    size_t sendIdx = static_cast<size_t>((me - step + n) % n);
    size_t recvIdx = static_cast<size_t>((me - step - 1 + n) % n);
    Status s = sendImpl(next, tag, data + sendIdx * size, size);
    if (s.ok()) s = recvImpl(prev, tag, data + recvIdx * size, size);
    if (!s.ok()) return s.addContext(format("ring step %d of %d", step + 1, n - 1));
  }
  return OkStatus();
}

Status TcpBootstrap::allGather(void* data, size_t size) {
  Status s = ringAllGather(static_cast<std::byte*>(data), size, allRanks_, rank_, kTagAllGather);
  return s.ok() ? s : s.addContext("bootstrap allGather");
}

Status TcpBootstrap::barrier() {
  std::vector<std::byte> bytes(static_cast<size_t>(nranks_));
  Status s = ringAllGather(bytes.data(), 1, allRanks_, rank_, kTagBarrier);
  return s.ok() ? s : s.addContext("bootstrap barrier");
}

Result<std::unique_ptr<Bootstrap>> TcpBootstrap::split(std::span<const int> members, int childRank,
                                                        uint64_t childHash, std::span<const std::byte> info,
                                                        const std::atomic<bool>* abortFlag) {
  int n = static_cast<int>(members.size());
  if (n < 1 || childRank < 0 || childRank >= n || members[static_cast<size_t>(childRank)] != rank_)
    return InvalidArgument("bootstrap split: child rank %d of %d does not map to our rank %d", childRank, n, rank_);
  std::vector<bool> seen(static_cast<size_t>(nranks_), false);
  for (int m : members) {
    if (m < 0 || m >= nranks_ || seen[static_cast<size_t>(m)])
      return InvalidArgument("bootstrap split: member %d is out of range or listed twice", m);
    seen[static_cast<size_t>(m)] = true;
  }
  if (info.size() > boot::kMaxInfoSize) return InvalidArgument("bootstrap split: info of %zu bytes", info.size());
  // The child listens on the same interface as the parent.
  sock::Address bindAddr = listener_.peer();
  bindAddr.setPort(0);
  SNCCL_ASSIGN_OR_RETURN(sock::Socket lis, sock::Socket::listen(bindAddr, false));

  size_t entry = sizeof(SplitEntry) + info.size();
  std::vector<std::byte> table(entry * static_cast<size_t>(n));
  SplitEntry mine{childHash, static_cast<uint32_t>(info.size()), 0, lis.peer().toWire()};
  std::memcpy(table.data() + entry * static_cast<size_t>(childRank), &mine, sizeof mine);
  if (!info.empty()) std::memcpy(table.data() + entry * static_cast<size_t>(childRank) + sizeof mine, info.data(), info.size());
  Status s = ringAllGather(table.data(), entry, members, childRank, kTagSplit);
  if (!s.ok()) return s.addContext("bootstrap split (all members must pass the same info size)");

  Config c;
  c.rank = childRank;
  c.nranks = n;
  c.commHash = childHash;
  c.secret = boot::deriveSecret(secret_, childHash);
  c.listener = std::move(lis);
  c.infoSize = info.size();
  c.infos.resize(info.size() * static_cast<size_t>(n));
  c.userAbort = abortFlag;
  for (int k = 0; k < n; ++k) {
    const std::byte* e = table.data() + entry * static_cast<size_t>(k);
    SplitEntry se;
    std::memcpy(&se, e, sizeof se);
    if (se.childHash != childHash)
      return InvalidUsage("bootstrap split: parent rank %d passed child hash %016llx, we passed %016llx",
                          members[static_cast<size_t>(k)], (unsigned long long)se.childHash,
                          (unsigned long long)childHash);
    SNCCL_ASSIGN_OR_RETURN(sock::Address a, sock::Address::fromWire(se.addr));
    c.addrs.push_back(a);
    if (!info.empty()) std::memcpy(c.infos.data() + info.size() * static_cast<size_t>(k), e + sizeof se, info.size());
  }
  SN_INFO(log::kBootstrap, "bootstrap split: parent rank %d -> child rank %d/%d, hash %016llx", rank_, childRank, n,
          (unsigned long long)childHash);
  return std::unique_ptr<Bootstrap>(std::make_unique<TcpBootstrap>(std::move(c)));
}

// ---- Creation -----------------------------------------------------------------------

Result<sock::Socket> listenOnLocalInterface() {
  SNCCL_ASSIGN_OR_RETURN(sock::Interface itf, sock::chooseLocalInterface());
  sock::Address a = itf.addr;
  a.setPort(0);
  return sock::Socket::listen(a, false);
}

int timeoutParam() { return sock::Waiter::fromParams().timeoutSec; }

}  // namespace

Status Bootstrap::createUniqueIdAt(std::string_view hostPort, ncclUniqueId* id) {
  if (id == nullptr) return InvalidArgument("createUniqueId: null id");
  Result<sock::Address> addr = sock::Address::parse(hostPort);
  if (!addr.ok()) return Status(addr.status()).addContext("SNCCL_COMM_ID");
  boot::IdLayout l{};
  std::memcpy(l.magic, boot::kIdMagic, sizeof l.magic);
  // Every rank must derive the same id from the address alone: no randomness here.
  std::string canonical = addr->toString();
  l.secret = boot::secretFromString("snccl-comm-id:" + canonical);
  l.commHash = boot::hashBytes(canonical.data(), canonical.size(), 0x1d);
  l.root = addr->toWire();
  l.flags = boot::kFixedRoot;
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, &l, sizeof l);
  return OkStatus();
}

Status Bootstrap::createUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return InvalidArgument("createUniqueId: null id");
  const std::string& commId = params::getString(params::Id::CommId);
  if (!commId.empty()) return createUniqueIdAt(commId, id);
  boot::IdLayout l{};
  std::memcpy(l.magic, boot::kIdMagic, sizeof l.magic);
  SNCCL_TRY(boot::randomBytes(l.secret.data(), l.secret.size()));
  SNCCL_TRY(boot::randomBytes(&l.commHash, sizeof l.commHash));
  SNCCL_ASSIGN_OR_RETURN(sock::Socket lis, listenOnLocalInterface());
  l.root = lis.peer().toWire();
  std::string where = lis.peer().toString();
  SNCCL_TRY(boot::launchRoot(std::move(lis), l, l.commHash, timeoutParam()));
  std::memset(id->internal, 0, sizeof id->internal);
  std::memcpy(id->internal, &l, sizeof l);
  SN_INFO(log::kBootstrap, "unique id created, root %s", where.c_str());
  return OkStatus();
}

Result<std::unique_ptr<Bootstrap>> Bootstrap::init(const ncclUniqueId& id, int rank, int nranks,
                                                   std::span<const std::byte> info,
                                                   const std::atomic<bool>* abortFlag) {
  if (nranks < 1 || nranks > boot::kMaxRanks || rank < 0 || rank >= nranks)
    return InvalidArgument("bootstrap init: rank %d is not in [0, %d)", rank, nranks);
  if (info.size() > boot::kMaxInfoSize)
    return InvalidArgument("bootstrap init: info of %zu bytes exceeds %u", info.size(), boot::kMaxInfoSize);
  boot::IdLayout l;
  std::memcpy(&l, id.internal, sizeof l);
  if (std::memcmp(l.magic, boot::kIdMagic, sizeof l.magic) != 0)
    return InvalidArgument("invalid ncclUniqueId (bad magic): pass the id ncclGetUniqueId produced");
  SNCCL_ASSIGN_OR_RETURN(sock::Address rootAddr, sock::Address::fromWire(l.root));
  sock::Waiter w = sock::Waiter::fromParams(abortFlag);
  if ((l.flags & boot::kFixedRoot) && rank == 0) {
    // The fixed address may still be in TIME_WAIT from the previous communicator.
    Result<sock::Socket> lis = sock::Socket::listen(rootAddr, true);
    if (!lis.ok()) return Status(lis.status()).addContext("SNCCL_COMM_ID: rank 0 cannot host the bootstrap root");
    uint64_t hash = 0;
    SNCCL_TRY(boot::randomBytes(&hash, sizeof hash));
    SNCCL_TRY(boot::launchRoot(std::move(*lis), l, hash, w.timeoutSec));
  }
  SNCCL_ASSIGN_OR_RETURN(sock::Socket listener, listenOnLocalInterface());
  // The root of an ncclGetUniqueId id listens before the id exists, so a refusal means it
  // is gone; a SNCCL_COMM_ID root starts with rank 0, which may come later than us.
  sock::Waiter rootWait = w;
  if (!(l.flags & boot::kFixedRoot))
    rootWait.refusedLimit = std::chrono::seconds(
        std::clamp<int64_t>(params::getInt(params::Id::RootRefusedTimeout), 0, 365LL * 24 * 3600));
  SNCCL_ASSIGN_OR_RETURN(boot::RankTable t,
                         boot::registerWithRoot(l, rank, nranks, listener.peer(), info, rootWait));
  TcpBootstrap::Config c;
  c.rank = rank;
  c.nranks = nranks;
  c.commHash = t.commHash;
  c.secret = l.secret;
  c.listener = std::move(listener);
  c.addrs = std::move(t.addrs);
  c.infos = std::move(t.infos);
  c.infoSize = info.size();
  c.userAbort = abortFlag;
  SN_INFO(log::kBootstrap, "rank %d/%d bootstrap ready: listening on %s, root %s, hash %016llx", rank, nranks,
          c.listener.peer().toString().c_str(), rootAddr.toString().c_str(), (unsigned long long)c.commHash);
  return std::unique_ptr<Bootstrap>(std::make_unique<TcpBootstrap>(std::move(c)));
}

}  // namespace snccl
