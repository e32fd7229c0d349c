// Whether a socket's failure is this node's own: the state of the local interface that
// carries a connection, read fresh from the kernel when an error needs explaining.
//
// A cut cable looks the same on the wire from both ends (nothing is acknowledged any
// more: ETIMEDOUT), so the errno alone would make the rank whose link went down blame its
// peer. The interface's flags tell the two ends apart. They come from getifaddrs (netlink),
// which answers for the caller's network namespace, unlike /sys/class/net, which shows
// the namespace that mounted sysfs.
#pragma once

#include <string>

namespace snccl::net::socknet {

// What is wrong with the interface that holds fd's local address, in a phrase such as
// "interface snet0 (10.77.0.2) is down" or "interface eth1 (192.0.2.7) has no carrier";
// "" when the interface is up and running, or when it cannot be determined.
std::string localLinkProblem(int fd);

// The same for an interface named `ifname` (setup, before any connected socket exists).
std::string interfaceProblem(const std::string& ifname);

// Whether an errno can stem from a link or path failure, so the local link is worth
// checking before the peer is blamed.
bool linkRelatedErrno(int err);

}  // namespace snccl::net::socknet
