// Non-blocking socket I/O of the socket net's connections, and the errors it reports.
#include "transport/net/socket/socket_io.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "transport/net/socket/socket_link.h"

namespace snccl::net::socknet {

namespace {

// What a socket errno means on the network, for the messages survivors see (when this
// node's own link looked fine).
const char* networkCause(int err) {
  switch (err) {
    case ETIMEDOUT:
      return "the peer stopped acknowledging data for SNCCL_TIMEOUT/2 seconds: its link is down, the path between "
             "the nodes is cut, or its host is gone";
    case ECONNRESET:
    case EPIPE:
      return "the peer reset the connection: its process died or closed the socket";
    case ENETDOWN:
    case ENETUNREACH:
      return "this node has no route to the peer: a route or a link on the path is down";
    case EHOSTUNREACH:
    case EHOSTDOWN:
      return "the peer's host is unreachable: link down or path cut";
    default:
      return "socket error";
  }
}

}  // namespace

Status socketError(const char* verb, const sock::Socket& s, int err) {
  std::string peer = s.peer().toString();
  if (linkRelatedErrno(err)) {
    std::string local = localLinkProblem(s.fd());
    if (!local.empty())
      return SystemError("%s %s failed: %s (errno %d): this node's network link is down: %s", verb, peer.c_str(),
                         strerror(err), err, local.c_str());
  }
  return RemoteError("%s %s failed: %s (errno %d): %s", verb, peer.c_str(), strerror(err), err, networkCause(err));
}

Result<size_t> sendSome(const sock::Socket& s, const char* p, size_t n) {
  for (;;) {
    ssize_t k = ::send(s.fd(), p, n, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (k >= 0) return size_t(k);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t(0);
    return socketError("send to", s, errno);
  }
}

Result<size_t> recvSome(const sock::Socket& s, char* p, size_t n, bool* eof) {
  *eof = false;
  for (;;) {
    ssize_t k = ::recv(s.fd(), p, n, MSG_DONTWAIT);
    if (k > 0) return size_t(k);
    if (k == 0) {
      *eof = true;
      return size_t(0);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t(0);
    return socketError("receive from", s, errno);
  }
}

}  // namespace snccl::net::socknet
