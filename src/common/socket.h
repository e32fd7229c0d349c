// TCP helpers shared by the bootstrap and the socket transport.
//
// Every socket is non-blocking and close-on-exec; every wait is a poll() in slices of at
// most 100 ms so a deadline or an abort flag is noticed promptly. Errors are Status values
// whose message names the remote address and the errno. Interface selection follows
// NCCL_SOCKET_IFNAME syntax: comma-separated prefixes, a leading '^' excludes, a leading
// '=' (after any '^') asks for exact names.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace snccl::sock {

using Clock = std::chrono::steady_clock;

// What a blocking socket call honours: a deadline and up to two abort flags (the
// caller's, e.g. the communicator's, and an object's own). timeoutSec is SNCCL_TIMEOUT
// (or what the caller gave); limitMs is the limit that sets the deadline, which capped()
// may make shorter, and is what messages say was waited. 0 means no deadline.
struct Waiter {
  Clock::time_point deadline = Clock::time_point::max();
  int timeoutSec = 0;
  int64_t limitMs = 0;
  // How long connect() keeps retrying while every attempt is refused (nothing listens);
  // 0: until the deadline. Other failures (unreachable, timed out) retry to the deadline.
  std::chrono::milliseconds refusedLimit{0};
  const std::atomic<bool>* abort1 = nullptr;
  const std::atomic<bool>* abort2 = nullptr;

  // deadline = now + timeoutSec (0: none).
  static Waiter after(int timeoutSec, const std::atomic<bool>* a1 = nullptr,
                      const std::atomic<bool>* a2 = nullptr);
  // now + SNCCL_TIMEOUT.
  static Waiter fromParams(const std::atomic<bool>* a1 = nullptr, const std::atomic<bool>* a2 = nullptr);

  bool aborted() const;
  bool expired() const { return Clock::now() >= deadline; }
  // Milliseconds to the next check: min(maxMs, time to deadline), at least 0.
  int sliceMs(int maxMs = 100) const;
  // The same flags with a deadline that is no later than now + seconds.
  Waiter capped(std::chrono::milliseconds limit) const;
  // The same flags with the deadline moved later by `grace` (no deadline stays none).
  Waiter extended(std::chrono::milliseconds grace) const;
  // "600 s", "5 s", "0.1 s": the limit this waiter was given (limitMs), for messages.
  std::string describeLimit() const;
};

// "600 s", "5 s", "0.1 s" for a limit of ms milliseconds, in messages.
std::string describeMs(int64_t ms);

// A socket address (IPv4 or IPv6) held by value; no pointers, copyable.
class Address {
 public:
  Address() = default;
  Address(const sockaddr* sa, socklen_t len);

  bool valid() const { return len_ > 0; }
  int family() const { return ss_.ss_family; }
  const sockaddr* sa() const { return reinterpret_cast<const sockaddr*>(&ss_); }
  socklen_t len() const { return len_; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isLoopback() const;
  bool isLinkLocal() const;  // fe80::/10; unusable across hosts without a scope
  // "10.0.0.2:4242" or "[fd00::2]:4242".
  std::string toString() const;
  std::string hostString() const;

  // Fixed-size wire form for unique ids and rank tables (host byte order for the
  // family and scope; the address and port stay in network order).
  struct Wire {
    uint16_t family;
    uint16_t portBe;
    uint32_t scopeId;
    uint8_t addr[16];
  };
  Wire toWire() const;
  static Result<Address> fromWire(const Wire& w);

  // Parses "host:port", "[v6]:port" or "v6addr:port" (last colon) and resolves the host.
  // family restricts the lookup (AF_UNSPEC: any, IPv4 preferred).
  static Result<Address> parse(std::string_view hostPort, int family = AF_UNSPEC);

  friend bool operator==(const Address& a, const Address& b);

 private:
  sockaddr_storage ss_{};
  socklen_t len_ = 0;
};

// ---- Interfaces -------------------------------------------------------------------

struct Interface {
  std::string name;
  Address addr;
  bool up = false;
  bool loopback = false;
};

// NCCL_SOCKET_IFNAME-style filter. Pure; an empty spec matches every name.
struct IfnameFilter {
  bool exclude = false;  // leading '^'
  bool exact = false;    // leading '=' (after an optional '^')
  std::vector<std::string> names;

  static IfnameFilter parse(std::string_view spec);
  bool matches(std::string_view ifname) const;
};

// All addresses of all interfaces (getifaddrs order), IPv4 and IPv6 only.
Result<std::vector<Interface>> listInterfaces();

// Picks the interface address to use. With a spec: the first up interface it matches
// with an address of `family` (AF_UNSPEC: any, IPv4 first per interface); IPv6
// link-local addresses are skipped. Without a spec: the first up non-loopback interface
// (docker* and virbr* skipped, as NCCL does), else loopback. Fails with a message that
// lists the interfaces that exist. Pure: the interface list is an argument.
Result<Interface> selectInterface(std::span<const Interface> all, std::string_view spec, int family);

// Several rails: selectInterface's choice first, then, only with a spec, every other up
// interface the spec matches with an address of the same family (one address per
// interface, getifaddrs order), at most maxCount in all.
Result<std::vector<Interface>> selectInterfaces(std::span<const Interface> all, std::string_view spec, int family,
                                                size_t maxCount);

// "AF_INET" / "AF_INET6" (case-insensitive; also "4"/"6", "ipv4"/"ipv6"); "" = AF_UNSPEC.
Result<int> parseFamily(std::string_view text);

// selectInterface over listInterfaces() with SNCCL_SOCKET_IFNAME and SNCCL_SOCKET_FAMILY.
Result<Interface> chooseLocalInterface();
// selectInterfaces over listInterfaces() with the same parameters.
Result<std::vector<Interface>> chooseLocalInterfaces(size_t maxCount);

// ---- Sockets ------------------------------------------------------------------------

// An owned non-blocking TCP socket (listener or connection). Move-only.
class Socket {
 public:
  Socket() = default;
  Socket(int fd, Address peer) : fd_(fd), peer_(peer) {}
  ~Socket() { close(); }
  Socket(Socket&& o) noexcept : fd_(o.fd_), peer_(o.peer_) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  // The remote address (for a listener: the bound address).
  const Address& peer() const { return peer_; }
  Result<Address> localAddress() const;

  // Binds (port 0: ephemeral) and listens. reuseAddr sets SO_REUSEADDR (fixed ports).
  static Result<Socket> listen(const Address& bindAddr, bool reuseAddr);
  // Waits for one incoming connection.
  Result<Socket> accept(const Waiter& w) const;
  // Accepts one pending connection if there is one; an invalid Socket otherwise. On a
  // failure *err (if given) is the errno (EMFILE: this process is out of descriptors).
  Result<Socket> tryAccept(int* err = nullptr) const;

  // Connects with retries (linear back-off: 100 ms x attempt, capped at 1 s) until the
  // deadline while the peer refuses or is unreachable; with w.refusedLimit set, a run of
  // refusals (nothing listens there) longer than that fails sooner. Sets TCP_NODELAY.
  static Result<Socket> connect(const Address& to, const Waiter& w);

  // Sends/receives exactly n bytes. `what` names the payload in timeout messages.
  // `idle`, when given, runs between poll slices while the socket is not writable (the
  // bootstrap drains its incoming connections there so two senders cannot deadlock).
  Status sendAll(const void* data, size_t n, const Waiter& w, const char* what,
                 const std::function<void()>* idle = nullptr) const;
  // A clean EOF before the first byte returns ncclRemoteError with *eof set (if given).
  Status recvAll(void* data, size_t n, const Waiter& w, const char* what, bool* eof = nullptr) const;

  // Reads what is available now, without waiting: returns the byte count (0 when nothing
  // is there yet) and sets *eof when the peer closed its side.
  Result<size_t> recvSome(void* data, size_t n, bool* eof) const;

  // Makes blocked and future I/O on this socket fail; keeps the fd (safe from any thread
  // while the owner does not close it).
  void shutdown() const;
  void close();

 private:
  int fd_ = -1;
  Address peer_;
};

// Waits until fd is readable (or has an error/hang-up). Returns true when ready, false
// on a timeout of timeoutMs; fails on a poll error.
Result<bool> pollReadable(int fd, int timeoutMs);

}  // namespace snccl::sock
