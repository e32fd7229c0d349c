// Socket-net setup: listening, accepting with nonce checks, non-blocking connecting.
#include "transport/net/socket/socket_setup.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "common/log.h"
#include "common/params.h"

namespace snccl::net::socknet {

namespace {

using sockwire::Hello;
using sockwire::HandleWire;

// A connector greets each socket as soon as it is connected.
constexpr std::chrono::milliseconds kGreetingDeadline{5000};

// The any-address of a's family (port 0): a listener for several rails.
sock::Address wildcard(const sock::Address& a) {
  sockaddr_storage ss{};
  ss.ss_family = sa_family_t(a.family());
  return sock::Address(reinterpret_cast<const sockaddr*>(&ss),
                       a.family() == AF_INET6 ? socklen_t(sizeof(sockaddr_in6)) : socklen_t(sizeof(sockaddr_in)));
}

bool retryableConnectErrno(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EAGAIN || err == ECONNABORTED;
}

uint64_t randomNonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// The first line of a /proc file (what it lists), for messages.
std::string procLine(const char* path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line.empty() ? std::string("(unreadable)") : line;
}

}  // namespace

Status checkCongestion(const std::string& name) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fd = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "NET/Socket: socket() to check SNCCL_SOCKET_CC");
  int rc = setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name.data(), socklen_t(name.size()));
  int err = errno;
  ::close(fd);
  if (rc == 0) return OkStatus();
  const std::string available = procLine("/proc/sys/net/ipv4/tcp_available_congestion_control");
  const std::string allowed = procLine("/proc/sys/net/ipv4/tcp_allowed_congestion_control");
  return InvalidArgument("SNCCL_SOCKET_CC=%s: the kernel refuses this TCP congestion control (%s); available: %s; "
                         "allowed without CAP_NET_ADMIN: %s; set SNCCL_SOCKET_CC= (empty) for the system default",
                         name.c_str(), strerror(err), available.c_str(), allowed.c_str());
}

Result<SocketTuning> socketTuningFromParams() {
  SocketTuning t;
  t.timeoutSec = int(std::clamp<int64_t>(params::getInt(params::Id::Timeout), 0, 1 << 30));
  t.congestion = params::getString(params::Id::SocketCc);
  if (t.congestion.empty()) return t;
  Status s = checkCongestion(t.congestion);
  if (s.ok()) return t;
  if (params::isSet(params::Id::SocketCc)) return s;
  SN_WARN("%s; using the system default", s.message().c_str());
  t.congestion.clear();
  return t;
}

Status tuneSocket(int fd, const SocketTuning& t) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // Checked at init (socketTuningFromParams), so a refusal here is not expected; it is
  // still an error rather than a silently slower connection.
  if (!t.congestion.empty() &&
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, t.congestion.data(), socklen_t(t.congestion.size())) != 0)
    return ErrnoError(errno, "NET/Socket: setting TCP congestion control %s (SNCCL_SOCKET_CC)", t.congestion.c_str());
  const int timeoutSec = t.timeoutSec;
  if (timeoutSec > 0) {
    // Half of SNCCL_TIMEOUT: a cut link or a vanished host then fails the connection with
    // a network error (ETIMEDOUT, named as such) before the executor's own deadline turns
    // it into an anonymous timeout. Keepalive probes cover idle connections (a receiver
    // waiting for data has nothing unacknowledged); the kernel answers them for a peer
    // that is merely slow or busy, so only a dead path or host trips this.
    int half = std::max(1, std::min(timeoutSec, 4000000) / 2);
    unsigned ms = unsigned(half) * 1000u;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
    int probe = std::clamp(half / 2, 1, 60);
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &probe, sizeof probe);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &probe, sizeof probe);
  }
  return OkStatus();
}

// ---- Listener ----------------------------------------------------------------------

Result<std::unique_ptr<SocketListen>> SocketListen::create(const sock::Address& bindAddr, int nstreams,
                                                           const SocketTuning& tuning, Handle* handle,
                                                           const RailPlan& plan) {
  if (plan.rails.size() > size_t(sockwire::kMaxRails))
    return InvalidArgument("NET/Socket: %zu rails; at most %d", plan.rails.size(), sockwire::kMaxRails);
  auto l = std::make_unique<SocketListen>();
  l->plan_ = plan;
  const bool multiRail = plan.rails.size() > 1;
  SNCCL_ASSIGN_OR_RETURN(l->listener_, sock::Socket::listen(multiRail ? wildcard(bindAddr) : bindAddr, false));
  l->nonce_ = randomNonce();
  l->nstreams_ = nstreams;
  l->tuning_ = tuning;
  l->slots_.resize(size_t(nstreams) + 1);
  SocketListen* self = l.get();
  l->greeter_ = std::make_unique<sock::Greeter>(
      sock::Greeter::Options{"NET/Socket: listener " + l->listener_.peer().toString(), 2 * (size_t(nstreams) + 1) + 16,
                             kGreetingDeadline},
      sizeof(Hello), [self](std::span<const std::byte> got) { return self->frameHello(got); });
  HandleWire w{};
  w.magic = sockwire::kMagic;
  w.version = sockwire::kVersion;
  w.nstreams = uint16_t(nstreams);
  w.nonce = l->nonce_;
  w.nrails = uint8_t(std::max<size_t>(1, plan.rails.size()));
  w.adaptive = plan.adaptive ? 1 : 0;
  w.chunkBytes = uint32_t(plan.chunkBytes);
  if (multiRail) {
    sock::Address a = plan.rails[0];
    a.setPort(l->listener_.peer().port());
    w.addr = a.toWire();
    for (size_t k = 1; k < plan.rails.size(); ++k) std::memcpy(w.railAddr[k - 1], plan.rails[k].toWire().addr, 16);
  } else {
    w.addr = l->listener_.peer().toWire();
  }
  handle->bytes.assign(sockwire::kHandleBytes, 0);
  std::memcpy(handle->bytes.data(), &w, sizeof w);
  return l;
}

Result<size_t> SocketListen::frameHello(std::span<const std::byte> got) const {
  Hello h;
  std::memcpy(&h, got.data(), sizeof h);
  // A stranger's bytes: the key decides; a wrong socket number is the peer's error (place()).
  if (!sockwire::helloHasKey(h, nonce_)) return InvalidUsage("%s", sockwire::helloProblem(h, nonce_, nstreams_).c_str());
  return got.size();
}

Status SocketListen::place(sock::Greeter::Greeted g) {
  Hello h;
  std::memcpy(&h, g.bytes.data(), sizeof h);
  std::string problem = sockwire::helloProblem(h, nonce_, nstreams_);
  if (problem.empty() && slots_[h.index].valid()) problem = format("it announced socket %u twice", h.index);
  if (!problem.empty())
    return InternalError("NET/Socket: connection from %s: %s", g.sock.peer().toString().c_str(), problem.c_str());
  SNCCL_TRY(tuneSocket(g.sock.fd(), tuning_));
  slots_[h.index] = std::move(g.sock);
  ++have_;
  return OkStatus();
}

Result<std::vector<sock::Socket>> SocketListen::tryAccept() {
  // The proxy polled pollFds() but does not hand back what was ready: try everything.
  for (auto& g : greeter_->service(listener_, {})) SNCCL_TRY(place(std::move(g)));
  if (have_ < nstreams_ + 1) return std::vector<sock::Socket>();
  have_ = 0;
  return std::move(slots_);
}

void SocketListen::pollFds(std::vector<pollfd>* fds) const { greeter_->pollFds(listener_, fds); }

// ---- Connector ---------------------------------------------------------------------

Result<std::unique_ptr<Connector>> Connector::start(const Handle& handle, const SocketTuning& tuning,
                                                    const std::vector<sock::Address>& localRails) {
  const int timeoutSec = tuning.timeoutSec;
  auto c = std::make_unique<Connector>();
  if (handle.bytes.size() != sockwire::kHandleBytes)
    return InternalError("NET/Socket: the peer's listen handle has %zu bytes, not the socket net's %zu (is "
                         "SNCCL_NET_COMPRESS set alike on every rank?)",
                         handle.bytes.size(), sockwire::kHandleBytes);
  std::memcpy(&c->wire_, handle.bytes.data(), sizeof c->wire_);
  const HandleWire& w = c->wire_;
  if (std::string problem = sockwire::handleProblem(w); !problem.empty())
    return InternalError("NET/Socket: the peer's listen handle: %s", problem.c_str());
  SNCCL_ASSIGN_OR_RETURN(c->to_, sock::Address::fromWire(w.addr));
  c->targets_.push_back(c->to_);
  for (int k = 1; k < w.nrails; ++k) {
    sock::Address::Wire rw = w.addr;
    std::memcpy(rw.addr, w.railAddr[k - 1], 16);
    SNCCL_ASSIGN_OR_RETURN(sock::Address a, sock::Address::fromWire(rw));
    c->targets_.push_back(a);
  }
  if (localRails.size() > 1) {
    for (sock::Address a : localRails) {
      if (a.family() != c->to_.family()) continue;
      a.setPort(0);
      c->locals_.push_back(a);
    }
  }
  c->tuning_ = tuning;
  c->start_ = sock::Clock::now();
  c->deadline_ = timeoutSec > 0 ? c->start_ + std::chrono::seconds(timeoutSec) : sock::Clock::time_point::max();
  c->slots_.resize(size_t(w.nstreams) + 1);
  return c;
}

Status Connector::retryLater(Slot& s, int err) {
  const sock::Address to = s.sock.peer();
  s.sock.close();
  s.state = State::kIdle;
  s.lastErr = err;
  if (!retryableConnectErrno(err))
    return ErrnoError(err, "NET/Socket: connect to %s failed", to.toString().c_str());
  ++s.attempts;
  // Linear back-off, as the bootstrap: the peer most likely is reachable in a moment.
  s.retryAt = sock::Clock::now() + std::chrono::milliseconds(std::min(100 * s.attempts, 1000));
  return OkStatus();
}

Status Connector::stepSlot(int index, Slot& s) {
  const sock::Address& to = targets_[size_t(index) % targets_.size()];
  if (s.state == State::kIdle) {
    if (sock::Clock::now() < s.retryAt) return OkStatus();
    int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ErrnoError(errno, "NET/Socket: socket() to connect to %s", to.toString().c_str());
    s.sock = sock::Socket(fd, to);
    SNCCL_TRY(tuneSocket(fd, tuning_));
    if (!locals_.empty()) {
      const sock::Address& from = locals_[size_t(index) % locals_.size()];
      if (::bind(fd, from.sa(), from.len()) != 0)
        return ErrnoError(errno, "NET/Socket: binding a socket to rail %s to connect to %s", from.toString().c_str(),
                          to.toString().c_str());
    }
    if (::connect(fd, to.sa(), to.len()) == 0) {
      s.state = State::kGreeting;
    } else if (errno == EINPROGRESS || errno == EINTR) {
      s.state = State::kConnecting;
    } else {
      return retryLater(s, errno);
    }
  }
  if (s.state == State::kConnecting) {
    pollfd p{s.sock.fd(), POLLOUT, 0};
    if (::poll(&p, 1, 0) <= 0) return OkStatus();
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(s.sock.fd(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) return retryLater(s, err);
    s.state = State::kGreeting;
  }
  if (s.state == State::kGreeting) {
    Hello h{};
    h.magic = sockwire::kMagic;
    h.version = sockwire::kVersion;
    h.index = uint16_t(index);
    h.nonce = wire_.nonce;
    h.nstreams = wire_.nstreams;
    while (s.helloSent < sizeof h) {
      ssize_t k = ::send(s.sock.fd(), reinterpret_cast<const char*>(&h) + s.helloSent, sizeof h - s.helloSent,
                         MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) {
        s.helloSent += size_t(k);
      } else if (k < 0 && errno == EINTR) {
        continue;
      } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return OkStatus();
      } else {
        // The peer vanished after accepting: start this socket over.
        s.helloSent = 0;
        return retryLater(s, k < 0 ? errno : ECONNRESET);
      }
    }
    s.state = State::kDone;
  }
  return OkStatus();
}

Result<std::vector<sock::Socket>> Connector::step() {
  bool all = true;
  for (size_t i = 0; i < slots_.size(); ++i) {
    SNCCL_TRY(stepSlot(int(i), slots_[i]));
    all = all && slots_[i].state == State::kDone;
  }
  if (all) {
    std::vector<sock::Socket> out;
    for (Slot& s : slots_) out.push_back(std::move(s.sock));
    return out;
  }
  if (sock::Clock::now() >= deadline_) {
    int err = 0;
    for (const Slot& s : slots_) err = s.lastErr != 0 ? s.lastErr : err;
    return RemoteError("NET/Socket: could not connect to %s within %d s (SNCCL_TIMEOUT); last error: %s",
                       to_.toString().c_str(), tuning_.timeoutSec, err != 0 ? strerror(err) : "none (still connecting)");
  }
  return std::vector<sock::Socket>();
}

}  // namespace snccl::net::socknet
