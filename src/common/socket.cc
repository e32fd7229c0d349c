// TCP helpers: addresses, interface selection, and deadline/abort-aware socket I/O.
#include "common/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <thread>

#include "common/params.h"

namespace snccl::sock {

namespace {

// The code of a failure caused by our own abort flag: local, not the peer's fault.
Status abortedError(const std::string& what) {
  return SystemError("aborted while %s", what.c_str());
}

Status timeoutError(const Waiter& w, const std::string& what) {
  // A wait on a peer that does not answer in time is the peer's failure (SNCCL_TIMEOUT's
  // documented contract is ncclRemoteError).
  return RemoteError("timed out after %s %s", w.describeLimit().c_str(), what.c_str());
}

std::string errnoText(int err) {
  char buf[128];
  return format("%s (errno %d)", strerror_r(err, buf, sizeof buf), err);
}

bool isPeerLossErrno(int err) {
  return err == EPIPE || err == ECONNRESET || err == ECONNABORTED || err == ETIMEDOUT ||
         err == EHOSTUNREACH || err == ENETUNREACH || err == ENOTCONN;
}

void setNoDelay(int fd) {
  int one = 1;
  // Bootstrap messages are small request/response pairs; Nagle would add 40 ms stalls.
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits for `events` on fd for at most timeoutMs. Returns revents (0 on timeout).
Result<short> pollOne(int fd, short events, int timeoutMs) {
  pollfd p{fd, events, 0};
  int rc = ::poll(&p, 1, timeoutMs);
  if (rc < 0) {
    if (errno == EINTR) return short(0);
    return ErrnoError(errno, "poll on socket %d", fd);
  }
  return rc == 0 ? short(0) : p.revents;
}

bool startsWithAny(std::string_view name, std::initializer_list<std::string_view> prefixes) {
  for (auto p : prefixes)
    if (name.substr(0, p.size()) == p) return true;
  return false;
}

}  // namespace

// ---- Waiter -------------------------------------------------------------------------

Waiter Waiter::after(int timeoutSec, const std::atomic<bool>* a1, const std::atomic<bool>* a2) {
  Waiter w;
  w.timeoutSec = timeoutSec;
  w.limitMs = int64_t(timeoutSec) * 1000;
  if (timeoutSec > 0) w.deadline = Clock::now() + std::chrono::seconds(timeoutSec);
  w.abort1 = a1;
  w.abort2 = a2;
  return w;
}

Waiter Waiter::fromParams(const std::atomic<bool>* a1, const std::atomic<bool>* a2) {
  int64_t t = params::getInt(params::Id::Timeout);
  t = std::clamp<int64_t>(t, 0, 365LL * 24 * 3600);
  return after(static_cast<int>(t), a1, a2);
}

bool Waiter::aborted() const {
  return (abort1 && abort1->load(std::memory_order_acquire)) ||
         (abort2 && abort2->load(std::memory_order_acquire));
}

int Waiter::sliceMs(int maxMs) const {
  if (deadline == Clock::time_point::max()) return maxMs;
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, maxMs));
}

Waiter Waiter::capped(std::chrono::milliseconds limit) const {
  Waiter w = *this;
  auto cap = Clock::now() + limit;
  if (cap < w.deadline) {
    w.deadline = cap;
    w.limitMs = limit.count();
  }
  return w;
}

std::string Waiter::describeLimit() const { return describeMs(limitMs); }

std::string describeMs(int64_t ms) {
  if (ms % 1000 == 0) return format("%lld s", static_cast<long long>(ms / 1000));
  return format("%.1f s", static_cast<double>(ms) / 1000.0);
}

Waiter Waiter::extended(std::chrono::milliseconds grace) const {
  Waiter w = *this;
  if (w.deadline != Clock::time_point::max()) w.deadline += grace;
  return w;
}

// ---- Address ------------------------------------------------------------------------

Address::Address(const sockaddr* sa, socklen_t len) {
  if (sa == nullptr || len == 0 || len > sizeof ss_) return;
  std::memcpy(&ss_, sa, len);
  len_ = len;
}

uint16_t Address::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss_)->sin6_port);
  return 0;
}

void Address::setPort(uint16_t port) {
  if (family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss_)->sin_port = htons(port);
  if (family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss_)->sin6_port = htons(port);
}

bool Address::isLoopback() const {
  if (family() == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&ss_)->sin_addr.s_addr) >> 24) == 127;
  if (family() == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(&ss_)->sin6_addr);
  return false;
}

bool Address::isLinkLocal() const {
  return family() == AF_INET6 &&
         IN6_IS_ADDR_LINKLOCAL(&reinterpret_cast<const sockaddr_in6*>(&ss_)->sin6_addr);
}

std::string Address::hostString() const {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&ss_)->sin_addr, buf, sizeof buf);
    return buf;
  }
  if (family() == AF_INET6) {
    auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss_);
    inet_ntop(AF_INET6, &s6->sin6_addr, buf, sizeof buf);
    std::string s = buf;
    // Appends piece by piece: GCC 12 at -O3 misreports `"%" + to_string()` (-Wrestrict).
    if (s6->sin6_scope_id != 0) {
      s += '%';
      s += std::to_string(s6->sin6_scope_id);
    }
    return s;
  }
  return valid() ? format("<family %d>", family()) : "<no address>";
}

std::string Address::toString() const {
  std::string out;
  if (family() == AF_INET6) out += '[';
  out += hostString();
  if (family() == AF_INET6) out += ']';
  if (family() == AF_INET || family() == AF_INET6) {
    out += ':';
    out += std::to_string(port());
  }
  return out;
}

Address::Wire Address::toWire() const {
  Wire w{};
  w.family = static_cast<uint16_t>(family());
  if (family() == AF_INET) {
    auto* s4 = reinterpret_cast<const sockaddr_in*>(&ss_);
    w.portBe = s4->sin_port;
    std::memcpy(w.addr, &s4->sin_addr, 4);
  } else if (family() == AF_INET6) {
    auto* s6 = reinterpret_cast<const sockaddr_in6*>(&ss_);
    w.portBe = s6->sin6_port;
    w.scopeId = s6->sin6_scope_id;
    std::memcpy(w.addr, &s6->sin6_addr, 16);
  }
  return w;
}

Result<Address> Address::fromWire(const Wire& w) {
  if (w.family == AF_INET) {
    sockaddr_in s4{};
    s4.sin_family = AF_INET;
    s4.sin_port = w.portBe;
    std::memcpy(&s4.sin_addr, w.addr, 4);
    return Address(reinterpret_cast<sockaddr*>(&s4), sizeof s4);
  }
  if (w.family == AF_INET6) {
    sockaddr_in6 s6{};
    s6.sin6_family = AF_INET6;
    s6.sin6_port = w.portBe;
    s6.sin6_scope_id = w.scopeId;
    std::memcpy(&s6.sin6_addr, w.addr, 16);
    return Address(reinterpret_cast<sockaddr*>(&s6), sizeof s6);
  }
  return InvalidArgument("corrupt address: unknown family %u", unsigned(w.family));
}

Result<Address> Address::parse(std::string_view hostPort, int family) {
  std::string_view host, portText;
  if (!hostPort.empty() && hostPort.front() == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string_view::npos || close + 1 >= hostPort.size() || hostPort[close + 1] != ':')
      return InvalidArgument("cannot parse address \"%.*s\": expected [ipv6]:port", int(hostPort.size()),
                             hostPort.data());
    host = hostPort.substr(1, close - 1);
    portText = hostPort.substr(close + 2);
  } else {
    size_t colon = hostPort.rfind(':');
    if (colon == std::string_view::npos)
      return InvalidArgument("cannot parse address \"%.*s\": expected host:port", int(hostPort.size()),
                             hostPort.data());
    host = hostPort.substr(0, colon);
    portText = hostPort.substr(colon + 1);
  }
  unsigned port = 0;
  auto [end, ec] = std::from_chars(portText.data(), portText.data() + portText.size(), port);
  if (ec != std::errc() || end != portText.data() + portText.size() || port == 0 || port > 65535 || host.empty())
    return InvalidArgument("cannot parse address \"%.*s\": bad host or port (1..65535)", int(hostPort.size()),
                           hostPort.data());

  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string hostStr(host);
  int rc = getaddrinfo(hostStr.c_str(), nullptr, &hints, &res);
  if (rc != 0) return SystemError("cannot resolve \"%s\": %s", hostStr.c_str(), gai_strerror(rc));
  // Prefer IPv4 when both families resolve: it is what peers most likely listen on.
  const addrinfo* pick = nullptr;
  for (const addrinfo* ai = res; ai; ai = ai->ai_next) {
    if (ai->ai_family != AF_INET && ai->ai_family != AF_INET6) continue;
    if (!pick || (pick->ai_family != AF_INET && ai->ai_family == AF_INET)) pick = ai;
  }
  Address out = pick ? Address(pick->ai_addr, pick->ai_addrlen) : Address();
  freeaddrinfo(res);
  if (!out.valid()) return SystemError("\"%s\" has no IPv4/IPv6 address", hostStr.c_str());
  out.setPort(static_cast<uint16_t>(port));
  return out;
}

bool operator==(const Address& a, const Address& b) {
  return a.len_ == b.len_ && std::memcmp(&a.ss_, &b.ss_, a.len_) == 0;
}

// ---- Interfaces ---------------------------------------------------------------------

IfnameFilter IfnameFilter::parse(std::string_view spec) {
  IfnameFilter f;
  if (!spec.empty() && spec.front() == '^') {
    f.exclude = true;
    spec.remove_prefix(1);
  }
  if (!spec.empty() && spec.front() == '=') {
    f.exact = true;
    spec.remove_prefix(1);
  }
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = spec.substr(0, comma);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) f.names.emplace_back(item);
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return f;
}

bool IfnameFilter::matches(std::string_view ifname) const {
  if (names.empty()) return true;  // an empty list (or "^" alone) filters nothing
  bool hit = false;
  for (const auto& n : names) {
    hit = exact ? ifname == n : ifname.substr(0, n.size()) == n;
    if (hit) break;
  }
  return exclude ? !hit : hit;
}

Result<std::vector<Interface>> listInterfaces() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return ErrnoError(errno, "getifaddrs");
  std::vector<Interface> out;
  for (ifaddrs* ifa = list; ifa; ifa = ifa->ifa_next) {
    if (!ifa->ifa_addr) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    Interface i;
    i.name = ifa->ifa_name;
    i.addr = Address(ifa->ifa_addr, fam == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
    i.up = (ifa->ifa_flags & IFF_UP) != 0;
    i.loopback = (ifa->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(i));
  }
  freeifaddrs(list);
  return out;
}

namespace {

// "lo (127.0.0.1, ::1, up), eth0 (192.0.2.2, down)" for error messages.
std::string describeInterfaces(std::span<const Interface> all) {
  std::vector<std::string> names;
  std::vector<std::string> details;
  for (const auto& i : all) {
    auto it = std::find(names.begin(), names.end(), i.name);
    std::string a = i.addr.hostString();
    if (it == names.end()) {
      names.push_back(i.name);
      details.push_back(a + (i.up ? "" : ", down"));
    } else {
      details[it - names.begin()] = a + ", " + details[it - names.begin()];
    }
  }
  std::string s;
  for (size_t k = 0; k < names.size(); ++k) s += (k ? ", " : "") + names[k] + " (" + details[k] + ")";
  return s.empty() ? "none" : s;
}

const char* familyName(int family) {
  return family == AF_INET ? "IPv4" : family == AF_INET6 ? "IPv6" : "IPv4/IPv6";
}

}  // namespace

Result<Interface> selectInterface(std::span<const Interface> all, std::string_view spec, int family) {
  auto usable = [&](const Interface& i, int fam) {
    return i.up && i.addr.family() == fam && !i.addr.isLinkLocal();
  };
  std::vector<int> families;
  if (family == AF_UNSPEC) families = {AF_INET, AF_INET6};
  else families = {family};

  if (!spec.empty()) {
    IfnameFilter f = IfnameFilter::parse(spec);
    for (int fam : families)
      for (const auto& i : all)
        if (usable(i, fam) && f.matches(i.name)) return i;
    return InvalidUsage("interface filter \"%.*s\" matches no up interface with an %s address; interfaces: %s",
                        int(spec.size()), spec.data(), familyName(family), describeInterfaces(all).c_str());
  }
  // Default: a real network interface first (bridges for containers/VMs are not reachable
  // from other hosts), then loopback so a single host still works.
  for (int fam : families)
    for (const auto& i : all)
      if (usable(i, fam) && !i.loopback && !startsWithAny(i.name, {"docker", "virbr"})) return i;
  for (int fam : families)
    for (const auto& i : all)
      if (usable(i, fam) && i.loopback) return i;
  return InvalidUsage("no up interface with an %s address; interfaces: %s", familyName(family),
                      describeInterfaces(all).c_str());
}

Result<std::vector<Interface>> selectInterfaces(std::span<const Interface> all, std::string_view spec, int family,
                                                size_t maxCount) {
  SNCCL_ASSIGN_OR_RETURN(Interface first, selectInterface(all, spec, family));
  std::vector<Interface> out{first};
  if (spec.empty()) return out;
  IfnameFilter f = IfnameFilter::parse(spec);
  for (const Interface& i : all) {
    if (out.size() >= maxCount) break;
    if (!i.up || i.addr.family() != first.addr.family() || i.addr.isLinkLocal() || !f.matches(i.name)) continue;
    bool seen = std::any_of(out.begin(), out.end(), [&](const Interface& o) { return o.name == i.name; });
    if (!seen) out.push_back(i);
  }
  return out;
}

Result<int> parseFamily(std::string_view text) {
  std::string t;
  for (char c : text) t += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (t.empty()) return AF_UNSPEC;
  if (t == "AF_INET" || t == "4" || t == "IPV4" || t == "INET") return AF_INET;
  if (t == "AF_INET6" || t == "6" || t == "IPV6" || t == "INET6") return AF_INET6;
  return InvalidUsage("SNCCL_SOCKET_FAMILY=\"%.*s\" is not AF_INET or AF_INET6", int(text.size()), text.data());
}

Result<Interface> chooseLocalInterface() {
  SNCCL_ASSIGN_OR_RETURN(int family, parseFamily(params::getString(params::Id::SocketFamily)));
  SNCCL_ASSIGN_OR_RETURN(auto all, listInterfaces());
  const std::string& spec = params::getString(params::Id::SocketIfname);
  Result<Interface> r = selectInterface(all, spec, family);
  if (!r.ok() && !spec.empty()) {
    Status s = r.status();
    return s.addContext("SNCCL_SOCKET_IFNAME");
  }
  return r;
}

Result<std::vector<Interface>> chooseLocalInterfaces(size_t maxCount) {
  SNCCL_ASSIGN_OR_RETURN(int family, parseFamily(params::getString(params::Id::SocketFamily)));
  SNCCL_ASSIGN_OR_RETURN(auto all, listInterfaces());
  const std::string& spec = params::getString(params::Id::SocketIfname);
  Result<std::vector<Interface>> r = selectInterfaces(all, spec, family, maxCount);
  if (!r.ok() && !spec.empty()) {
    Status s = r.status();
    return s.addContext("SNCCL_SOCKET_IFNAME");
  }
  return r;
}

// ---- Socket -------------------------------------------------------------------------

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    peer_ = o.peer_;
    o.fd_ = -1;
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

Result<Address> Socket::localAddress() const {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd_, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return ErrnoError(errno, "getsockname");
  return Address(reinterpret_cast<sockaddr*>(&ss), len);
}

Result<Socket> Socket::listen(const Address& bindAddr, bool reuseAddr) {
  int fd = ::socket(bindAddr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError(errno, "socket() for a listener on %s", bindAddr.toString().c_str());
  Socket s(fd, bindAddr);
  int one = 1;
  if (reuseAddr && setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0)
    return ErrnoError(errno, "SO_REUSEADDR on %s", bindAddr.toString().c_str());
  if (::bind(fd, bindAddr.sa(), bindAddr.len()) != 0)
    return ErrnoError(errno, "bind to %s", bindAddr.toString().c_str());
  if (::listen(fd, SOMAXCONN) != 0) return ErrnoError(errno, "listen on %s", bindAddr.toString().c_str());
  SNCCL_ASSIGN_OR_RETURN(s.peer_, s.localAddress());
  return s;
}

Result<Socket> Socket::tryAccept(int* errOut) const {
  if (errOut) *errOut = 0;
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      setNoDelay(fd);
      return Socket(fd, Address(reinterpret_cast<sockaddr*>(&ss), len));
    }
    // A connection reset before we accepted it is not our problem; look for the next.
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return Socket();
    if (errOut) *errOut = errno;
    return ErrnoError(errno, "accept on %s", peer_.toString().c_str());
  }
}

Result<Socket> Socket::accept(const Waiter& w) const {
  for (;;) {
    SNCCL_ASSIGN_OR_RETURN(Socket s, tryAccept());
    if (s.valid()) return s;
    std::string what = "waiting for a connection on " + peer_.toString();
    if (w.aborted()) return abortedError(what);
    if (w.expired()) return timeoutError(w, what);
    SNCCL_TRY(pollOne(fd_, POLLIN, w.sliceMs()).status());
  }
}

namespace {

bool isRetryableConnectErrno(int err) {
  return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH ||
         err == ECONNRESET || err == EAGAIN || err == EADDRNOTAVAIL || err == EINTR;
}

// One non-blocking connect attempt; returns the fd or -errno.
int connectOnce(const Address& to, const Waiter& w) {
  int fd = ::socket(to.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  int err = ::connect(fd, to.sa(), to.len()) == 0 ? 0 : errno;
  while (err == EINPROGRESS) {
    if (w.aborted() || w.expired()) {
      err = ETIMEDOUT;
      break;
    }
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, w.sliceMs()) <= 0) continue;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  }
  if (err != 0) {
    ::close(fd);
    return -err;
  }
  setNoDelay(fd);
  return fd;
}

}  // namespace

Result<Socket> Socket::connect(const Address& to, const Waiter& w) {
  auto start = Clock::now();
  Clock::time_point refusedSince = Clock::time_point::max();  // start of the current run of refusals
  for (int attempt = 1;; ++attempt) {
    std::string what = "connecting to " + to.toString();
    if (w.aborted()) return abortedError(what);
    int fd = connectOnce(to, w);
    if (fd >= 0) return Socket(fd, to);
    int err = -fd;
    if (w.aborted()) return abortedError(what);
    auto now = Clock::now();
    double secs = std::chrono::duration<double>(now - start).count();
    if (!isRetryableConnectErrno(err))
      return ErrnoError(err, "connect to %s failed", to.toString().c_str());
    if (err != ECONNREFUSED) refusedSince = Clock::time_point::max();
    else if (refusedSince == Clock::time_point::max()) refusedSince = now;
    if (w.refusedLimit.count() > 0 && refusedSince != Clock::time_point::max() &&
        now - refusedSince >= w.refusedLimit)
      return RemoteError("nothing listens at %s: every connection was refused for %.1f s (%d attempts); the "
                         "process that listened there has exited or has not started",
                         to.toString().c_str(), std::chrono::duration<double>(now - refusedSince).count(), attempt);
    if (w.expired())
      return RemoteError("could not connect to %s: %d attempts over %.1f s (limit %s), last error %s",
                         to.toString().c_str(), attempt, secs, w.describeLimit().c_str(), errnoText(err).c_str());
    // Linear back-off: the peer is most likely still starting up.
    auto until = Clock::now() + std::chrono::milliseconds(std::min(100 * attempt, 1000));
    while (Clock::now() < until && !w.aborted() && !w.expired())
      std::this_thread::sleep_for(std::chrono::milliseconds(std::max(1, std::min(10, w.sliceMs()))));
  }
}

Status Socket::sendAll(const void* data, size_t n, const Waiter& w, const char* what,
                       const std::function<void()>* idle) const {
  auto* p = static_cast<const char*>(data);
  if (w.aborted()) return abortedError(format("sending %s to %s", what, peer_.toString().c_str()));
  while (n > 0) {
    ssize_t k = ::send(fd_, p, n, MSG_NOSIGNAL);
    if (k > 0) {
      p += k;
      n -= static_cast<size_t>(k);
      continue;
    }
    int err = k < 0 ? errno : EPIPE;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      if (isPeerLossErrno(err))
        return RemoteError("connection to %s lost while sending %s: %s", peer_.toString().c_str(), what,
                           errnoText(err).c_str());
      return ErrnoError(err, "send of %s to %s", what, peer_.toString().c_str());
    }
    std::string desc = format("sending %s to %s", what, peer_.toString().c_str());
    if (w.aborted()) return abortedError(desc);
    if (w.expired()) return timeoutError(w, desc);
    if (idle) (*idle)();
    // With an idle hook, wake often so incoming traffic keeps flowing while we wait.
    SNCCL_TRY(pollOne(fd_, POLLOUT, idle ? std::min(5, w.sliceMs()) : w.sliceMs()).status());
  }
  return OkStatus();
}

Status Socket::recvAll(void* data, size_t n, const Waiter& w, const char* what, bool* eof) const {
  auto* p = static_cast<char*>(data);
  size_t got = 0;
  if (eof) *eof = false;
  while (got < n) {
    ssize_t k = ::recv(fd_, p + got, n - got, 0);
    if (k > 0) {
      got += static_cast<size_t>(k);
      continue;
    }
    if (k == 0) {
      if (got == 0 && eof) *eof = true;
      if (got == 0)
        return RemoteError("%s closed the connection while we waited for %s", peer_.toString().c_str(), what);
      return RemoteError("%s closed the connection in the middle of %s (%zu of %zu bytes)",
                         peer_.toString().c_str(), what, got, n);
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err != EAGAIN && err != EWOULDBLOCK) {
      if (isPeerLossErrno(err))
        return RemoteError("connection to %s lost while receiving %s: %s", peer_.toString().c_str(), what,
                           errnoText(err).c_str());
      return ErrnoError(err, "recv of %s from %s", what, peer_.toString().c_str());
    }
    std::string desc = format("waiting for %s from %s", what, peer_.toString().c_str());
    if (w.aborted()) return abortedError(desc);
    if (w.expired()) return timeoutError(w, desc);
    SNCCL_TRY(pollOne(fd_, POLLIN, w.sliceMs()).status());
  }
  return OkStatus();
}

Result<size_t> Socket::recvSome(void* data, size_t n, bool* eof) const {
  *eof = false;
  for (;;) {
    ssize_t k = ::recv(fd_, data, n, MSG_DONTWAIT);
    if (k > 0) return static_cast<size_t>(k);
    if (k == 0) {
      *eof = n > 0;
      return size_t(0);
    }
    int err = errno;
    if (err == EINTR) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return size_t(0);
    if (isPeerLossErrno(err))
      return RemoteError("connection to %s lost: %s", peer_.toString().c_str(), errnoText(err).c_str());
    return ErrnoError(err, "recv from %s", peer_.toString().c_str());
  }
}

Result<bool> pollReadable(int fd, int timeoutMs) {
  SNCCL_ASSIGN_OR_RETURN(short ev, pollOne(fd, POLLIN, timeoutMs));
  return ev != 0;
}

}  // namespace snccl::sock
