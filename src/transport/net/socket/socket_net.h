// "Socket": the TCP implementation of the Net interface (host memory only).
//
// One control socket plus SNCCL_SOCKET_NTHREADS x SNCCL_NSOCKS_PERTHREAD data streams per
// connection (NCCL's names are accepted); all I/O is non-blocking and driven by whoever
// calls test() (the proxy thread), so snccl needs no helper threads per socket as NCCL
// does. Interface selection is the bootstrap's: SNCCL_SOCKET_IFNAME / SNCCL_SOCKET_FAMILY.
#pragma once

#include "transport/net/net.h"

namespace snccl::net {

// The process's socket Net (not yet initialised: defaultNet() does that).
Net* socketNet();

// The stream count the parameters ask for, clamped to NCCL's limits (<= 16 threads,
// product <= 64, at least 1); exposed for tests.
int socketStreamsFromParams(int64_t nthreads, int64_t nsocksPerThread);

}  // namespace snccl::net
