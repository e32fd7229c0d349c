// Two ends of one connection of a Net, both driven by the test thread (the Net API is
// non-blocking), and waiting for a request with a bound.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>

#include "transport/net/net.h"

namespace snccl::net {

struct Pair {
  SendComm* send = nullptr;
  RecvComm* recv = nullptr;
};

// listen on `rx`, connect from `tx` (the same net, or another setting of it), both driven
// here until both are up, or until connect fails (returned). `handle`, when given, gets
// the listen handle the connection was made with.
inline Status connectPair(Net* rx, Net* tx, Pair* p, Handle* handle = nullptr) {
  Handle h{};
  ListenComm* l = nullptr;
  SNCCL_TRY(rx->listen(0, &h, &l));
  if (handle != nullptr) *handle = h;
  Handle ch = h;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Status st;
  while ((p->send == nullptr || p->recv == nullptr) && std::chrono::steady_clock::now() < deadline) {
    if (p->send == nullptr) {
      st = tx->connect(0, &ch, &p->send);
      if (!st.ok()) break;
    }
    if (p->recv == nullptr) {
      st = rx->accept(l, &p->recv);
      if (!st.ok()) break;
    }
  }
  EXPECT_TRUE(rx->closeListen(l).ok());
  return st;
}

inline void closePair(Net* rx, Net* tx, Pair& p) {
  if (p.recv != nullptr) {
    EXPECT_TRUE(rx->closeRecv(p.recv, 0).ok());
  }
  if (p.send != nullptr) {
    EXPECT_TRUE(tx->closeSend(p.send, 0).ok());
  }
  p = Pair{};
}

inline Status wait(Net* net, Request* r, size_t* size = nullptr, uint32_t* imm = nullptr,
                   const std::function<void()>& other = {}) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    bool done = false;
    Status s = net->test(r, &done, size, imm);
    if (!s.ok() || done) return s;
    if (other) other();
  }
  return RemoteError("request did not complete within 20 s");
}

}  // namespace snccl::net
