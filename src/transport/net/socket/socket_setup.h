// Socket-net connection setup: the listener that gathers a connection's sockets and the
// non-blocking connector that opens them.
//
// The receiver listens on one ephemeral port per connection and publishes {address,
// stream count, random nonce} in the handle. The sender opens 1 + nstreams sockets to it;
// each starts with a Hello carrying the nonce and its index. The listener keeps only
// sockets that present its nonce, so a stray or hostile connection to the port is
// dropped instead of being mistaken for a stream. All 1 + nstreams sockets may arrive
// before any has greeted, so the listener holds that many (twice, plus some) pending
// sockets; each must greet within sock::Greeter's deadline. With no streams the connection is the
// control socket alone: the IB net's out-of-band path (ib/ib_conn.h).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "common/greeter.h"
#include "common/socket.h"
#include "transport/net/net.h"
#include "transport/net/socket/socket_wire.h"

namespace snccl::net::socknet {

// What every connection socket of the socket net is set to (tuneSocket).
struct SocketTuning {
  int timeoutSec = 0;       // SNCCL_TIMEOUT; 0: no user timeout, no keepalive
  std::string congestion;   // TCP_CONGESTION name; empty: the system default
};

// SNCCL_TIMEOUT and SNCCL_SOCKET_CC, checked: a congestion control the kernel refuses is
// an error when the user named it, and falls back to the system default (with a warning)
// when it is only the default name.
Result<SocketTuning> socketTuningFromParams();

// Whether this process may set TCP congestion control `name` on a TCP socket; the error
// names what the kernel offers (available) and allows without CAP_NET_ADMIN.
Status checkCongestion(const std::string& name);

// Socket options every connection socket gets: Nagle off; a user timeout of half of
// SNCCL_TIMEOUT plus keepalive probes, so a cut link or a dead host fails the connection
// with a network error (busy or idle) instead of retransmitting for many minutes; the
// congestion control, on both ends (each end's sender is governed by its own socket).
Status tuneSocket(int fd, const SocketTuning& t);

// How a listener's connections spread over this node's interfaces.
struct RailPlan {
  // The rails' addresses (any port), at most sockwire::kMaxRails. With more than one the
  // listener takes connections on every address of its family, and the handle lists them.
  std::vector<sock::Address> rails;
  bool adaptive = false;  // the connection is a MultipathConn
  size_t chunkBytes = 0;  // adaptive: its chunk size
};

class SocketListen : public ListenComm {
 public:
  // bindAddr is rails[0] when the plan names rails.
  static Result<std::unique_ptr<SocketListen>> create(const sock::Address& bindAddr, int nstreams,
                                                      const SocketTuning& tuning, Handle* handle,
                                                      const RailPlan& plan = {});

  // Accepts and sorts what has arrived. Returns the sockets (control first) once the
  // whole connection is there, an empty vector before.
  Result<std::vector<sock::Socket>> tryAccept();
  void pollFds(std::vector<pollfd>* fds) const;
  const sock::Address& address() const { return listener_.peer(); }
  const RailPlan& plan() const { return plan_; }

 private:
  // The greeting of one socket: a Hello with this listener's nonce (sock::Greeter::Framer).
  Result<size_t> frameHello(std::span<const std::byte> got) const;
  Status place(sock::Greeter::Greeted g);

  sock::Socket listener_;
  uint64_t nonce_ = 0;
  int nstreams_ = 0;
  SocketTuning tuning_;
  RailPlan plan_;
  std::unique_ptr<sock::Greeter> greeter_;  // sockets accepted, not yet greeted
  std::vector<sock::Socket> slots_;  // [0] control, [1..] streams
  int have_ = 0;
};

// An in-progress connect. Retries refused connections with a linear back-off until the
// deadline, as the bootstrap does. Socket i goes to the peer's rail i % (its rails), from
// this node's rail i % localRails.size() when there are several (bound before connect).
class Connector {
 public:
  static Result<std::unique_ptr<Connector>> start(const Handle& handle, const SocketTuning& tuning,
                                                  const std::vector<sock::Address>& localRails = {});
  // The connected sockets (control first) once all are open and greeted; empty before.
  Result<std::vector<sock::Socket>> step();
  const sock::Address& target() const { return to_; }
  // What the listener's handle asked for.
  bool adaptive() const { return wire_.adaptive != 0; }
  size_t chunkBytes() const { return wire_.chunkBytes; }
  int rails() const { return int(targets_.size()); }

 private:
  enum class State { kIdle, kConnecting, kGreeting, kDone };
  struct Slot {
    sock::Socket sock;
    State state = State::kIdle;
    size_t helloSent = 0;
    sock::Clock::time_point retryAt{};
    int attempts = 0;
    int lastErr = 0;
  };
  Status stepSlot(int index, Slot& s);
  Status retryLater(Slot& s, int err);

  sock::Address to_;
  std::vector<sock::Address> targets_;  // the peer's rails, with the listener's port
  std::vector<sock::Address> locals_;   // this node's rails to bind to (none: the kernel picks)
  sockwire::HandleWire wire_{};
  SocketTuning tuning_;
  sock::Clock::time_point start_;
  sock::Clock::time_point deadline_;
  std::vector<Slot> slots_;
};

}  // namespace snccl::net::socknet
