// Accepting connections whose first bytes (a greeting) must show that they belong, without
// letting strangers stall the acceptor or exhaust its descriptors.
//
// The owner of a listener adds the descriptors of pollFds() to its poll set and calls
// service() after each poll. service() accepts what waits in the backlog, reads whatever
// greeting bytes have arrived on every pending connection without waiting for more, and
// returns the connections whose greeting is complete; so a client that sends one byte and
// stops delays nobody but itself. A real client sends its greeting right after connect,
// so it usually completes in the same service() that accepts it.
//
// Bounds: each pending connection has its own deadline (counted from its accept); at most
// maxPending are held, the oldest dropped first. When accept fails (EMFILE or ENFILE: out
// of descriptors) the listener rests for restAfterAcceptError instead of being polled
// again at once, and half of the pending connections are dropped to free descriptors,
// lowering the cap to what fitted. Every warning goes through a WarnLimiter.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/socket.h"
#include "common/status.h"

namespace snccl::sock {

class Greeter {
 public:
  struct Options {
    std::string who;  // names the listener in warnings: "bootstrap root on 10.0.0.1:4242"
    size_t maxPending = 64;
    std::chrono::milliseconds deadline{5000};
    std::chrono::milliseconds restAfterAcceptError{100};
  };
  // Given the greeting bytes read so far (exactly as many as the last answer asked for),
  // the greeting's total size: more to read on, the same size when it is complete. An
  // error rejects the connection; its message is the warning's reason.
  using Framer = std::function<Result<size_t>(std::span<const std::byte> got)>;
  struct Greeted {
    Socket sock;
    std::vector<std::byte> bytes;
  };
  struct Stats {
    uint64_t accepted = 0, greeted = 0, rejected = 0, closed = 0, expired = 0, evicted = 0, acceptErrors = 0;
  };

  Greeter(Options o, size_t firstBytes, Framer framer);

  // Appends the listener (unless it rests or is closed) and the pending connections.
  void pollFds(const Socket& listener, std::vector<pollfd>* fds, Clock::time_point now = Clock::now()) const;
  // `polled` is what pollFds appended, after the poll (empty: try everything). Never blocks.
  std::vector<Greeted> service(const Socket& listener, std::span<const pollfd> polled,
                               Clock::time_point now = Clock::now());
  // A poll timeout that wakes for the next deadline or the end of a rest: <= maxMs.
  int sliceMs(int maxMs, Clock::time_point now = Clock::now()) const;
  size_t pending() const { return pending_.size(); }
  size_t cap() const { return cap_; }
  const Stats& stats() const { return stats_; }
  void clear() { pending_.clear(); }

 private:
  struct Pending {
    Socket sock;
    std::vector<std::byte> buf;
    size_t got = 0;
    Clock::time_point deadline;
  };
  void acceptAll(const Socket& listener, Clock::time_point now, std::vector<Greeted>* out);
  void onAcceptError(int err, const std::string& why, Clock::time_point now);
  // Reads what has arrived; true when the connection is finished with (greeted, rejected
  // or closed) and leaves the pending list.
  bool readSome(Pending& p, std::vector<Greeted>* out);
  void evictOldest(const char* why);

  Options opt_;
  size_t firstBytes_;
  Framer framer_;
  size_t cap_;
  std::deque<Pending> pending_;
  Clock::time_point restUntil_{};
  Stats stats_;
  log::WarnLimiter dropWarn_;
  log::WarnLimiter acceptWarn_;
};

}  // namespace snccl::sock
