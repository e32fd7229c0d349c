// Non-blocking socket I/O shared by the socket net's connection kinds (socket_conn.h,
// multipath_conn.h), and the Status a failed call becomes.
#pragma once

#include <cstddef>

#include "common/socket.h"
#include "common/status.h"

namespace snccl::net::socknet {

// The error of a failed send or receive. A link-related errno while this node's own
// interface is down is this node's failure, not the peer's: ncclSystemError, which the
// proxy entry reads as "the failure started here" (net_entry.h).
Status socketError(const char* verb, const sock::Socket& s, int err);

// Non-blocking send/recv of up to n bytes: the count moved (0 when the socket would
// block); *eof for a receive that found the stream closed.
Result<size_t> sendSome(const sock::Socket& s, const char* p, size_t n);
Result<size_t> recvSome(const sock::Socket& s, char* p, size_t n, bool* eof);

}  // namespace snccl::net::socknet
