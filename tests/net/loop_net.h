// The process's socket Net on loopback, for tests that drive the Net interface directly.
// Its parameters are read once, by the first call (init), so a test binary picks its
// stream count there and every later call returns the same Net.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "transport/net/socket/socket_net.h"

namespace snccl::net {

// nsocksPerThread 0 keeps the default (one data stream per connection). Every call in a
// binary must pass the same value: only the first one is applied.
inline Net* loopNet(int nsocksPerThread = 0) {
  static const int first = nsocksPerThread;
  EXPECT_EQ(nsocksPerThread, first) << "loopNet: the socket Net was set up with another stream count";
  static Net* net = [nsocksPerThread] {
    setenv("SNCCL_SOCKET_IFNAME", "=lo", 1);
    setenv("SNCCL_TIMEOUT", "20", 1);
    if (nsocksPerThread > 0) setenv("SNCCL_NSOCKS_PERTHREAD", std::to_string(nsocksPerThread).c_str(), 1);
    Net* n = socketNet();
    Status s = n->init();
    EXPECT_TRUE(s.ok()) << s.message();
    return n;
  }();
  return net;
}

}  // namespace snccl::net
