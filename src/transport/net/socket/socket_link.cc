// Local link state for socket errors: getsockname + getifaddrs, no caching (errors only).
#include "transport/net/socket/socket_link.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "common/socket.h"

namespace snccl::net::socknet {

namespace {

bool sameHost(const sockaddr* a, const sockaddr_storage& b) {
  if (a == nullptr || a->sa_family != b.ss_family) return false;
  if (a->sa_family == AF_INET)
    return std::memcmp(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr,
                       &reinterpret_cast<const sockaddr_in*>(&b)->sin_addr, sizeof(in_addr)) == 0;
  if (a->sa_family == AF_INET6)
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(&b)->sin6_addr, sizeof(in6_addr)) == 0;
  return false;
}

// The phrase for one interface's flags ("" when it is fine).
std::string describeFlags(const char* name, const std::string& addr, unsigned flags) {
  std::string who = std::string("interface ") + name + (addr.empty() ? "" : " (" + addr + ")");
  if ((flags & IFF_UP) == 0) return who + " is down";
  if ((flags & IFF_RUNNING) == 0) return who + " has no carrier (its link is down)";
  return "";
}

std::string hostOf(const sockaddr* sa) {
  socklen_t len = sa->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
  return sock::Address(sa, len).hostString();
}

}  // namespace

std::string localLinkProblem(int fd) {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return "";
  if (local.ss_family != AF_INET && local.ss_family != AF_INET6) return "";
  // Unbound (never connected): there is no local link to judge.
  if (local.ss_family == AF_INET && reinterpret_cast<sockaddr_in*>(&local)->sin_addr.s_addr == htonl(INADDR_ANY))
    return "";
  if (local.ss_family == AF_INET6 && IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr))
    return "";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  bool found = false;
  for (ifaddrs* ifa = list; ifa != nullptr && !found; ifa = ifa->ifa_next) {
    if (!sameHost(ifa->ifa_addr, local)) continue;
    found = true;
    out = describeFlags(ifa->ifa_name, hostOf(ifa->ifa_addr), ifa->ifa_flags);
  }
  freeifaddrs(list);
  // An address that left every interface (removed, or its interface deleted) is as dead
  // as a downed link.
  if (!found) out = "address " + hostOf(reinterpret_cast<const sockaddr*>(&local)) + " is on no interface any more";
  return out;
}

std::string interfaceProblem(const std::string& ifname) {
  ifaddrs* list = nullptr;
  if (ifname.empty() || getifaddrs(&list) != 0) return "";
  std::string out;
  bool found = false;
  // Every address family of the interface carries the same flags; one entry suffices.
  for (ifaddrs* ifa = list; ifa != nullptr && !found; ifa = ifa->ifa_next) {
    if (ifname != ifa->ifa_name) continue;
    found = true;
    out = describeFlags(ifa->ifa_name, "", ifa->ifa_flags);
  }
  freeifaddrs(list);
  if (!found) out = "interface " + ifname + " no longer exists";
  return out;
}

bool linkRelatedErrno(int err) {
  switch (err) {
    case ETIMEDOUT:
    case ENETDOWN:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case EADDRNOTAVAIL:
      return true;
    default:
      return false;
  }
}

}  // namespace snccl::net::socknet
