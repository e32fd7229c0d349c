// The socket net's connections as a hostile peer sees them: a Conn (static routing: a
// control socket of CTS/MSG/BYE/ABORT frames plus data streams) or a MultipathConn
// (adaptive: paths of CHUNK/CTS/ACK/PING/PONG/DROP/BYE/ABORT records), either end, over
// socketpairs whose far ends write the input's bytes. Whatever arrives: no read or write
// outside the posted buffers (AddressSanitizer), a receive completes with at most the bytes
// it was posted for, and a failure is a Status, never a crash or a hang.
//
// Input: byte 0 picks the kind and end; then segments of [socket index][16-bit length,
// little-endian][bytes], each written to that socket's far end before the connection runs.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz_check.h"
#include "transport/net/socket/multipath_conn.h"
#include "transport/net/socket/socket_conn.h"

namespace sn = snccl::net::socknet;

namespace {

constexpr size_t kPosted = 300 * 1024;  // each receive's buffer: more than one chunk or stream part
constexpr int kSockets = 3;

template <class C, class R>
void drive(C& conn, bool sender, const std::vector<int>& far, const uint8_t* data, size_t size) {
  // Two receives posted, or one send waiting for a credit (retried as records arrive).
  std::vector<std::unique_ptr<char[]>> bufs;
  std::vector<R*> reqs;
  auto post = [&] {
    if (reqs.size() >= 2) return;
    bufs.push_back(std::make_unique<char[]>(kPosted));
    auto r = sender ? conn.isend(bufs.back().get(), kPosted / 2, 0, 5) : conn.irecv(bufs.back().get(), kPosted, 0);
    if (r.ok() && r.value() != nullptr) {
      reqs.push_back(r.value());
    } else {
      bufs.pop_back();
    }
  };
  post();
  post();
  while (size >= 3) {
    const int s = data[0] % int(far.size());
    const size_t len = std::min<size_t>(size - 3, size_t(data[1]) | size_t(data[2]) << 8);
    // A full socket drops the rest, a closed one all of it: also what a peer can see.
    (void)!send(far[size_t(s)], data + 3, len, MSG_NOSIGNAL);
    data += 3 + len;
    size -= 3 + len;
    for (int pass = 0; pass < 4; ++pass) {
      post();
      for (size_t i = 0; i < reqs.size(); ++i) {
        bool done = false;
        size_t got = 0;
        uint32_t imm = 0;
        snccl::Status st = conn.test(reqs[i], &done, &got, &imm);
        if (!st.ok()) return;  // the connection failed: what a bad peer must get
        if (!done) break;      // requests complete in order
        FUZZ_CHECK(got <= (sender ? kPosted / 2 : kPosted), "a request completed with %zu bytes", got);
        reqs.erase(reqs.begin() + std::ptrdiff_t(i));
        --i;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const int mode = data[0] % 4;
  const bool sender = mode % 2 == 1, multipath = mode >= 2;
  std::vector<snccl::sock::Socket> socks;
  std::vector<int> far;
  for (int i = 0; i < (multipath ? 2 : kSockets); ++i) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return 0;
    socks.emplace_back(sv[0], snccl::sock::Address());
    far.push_back(sv[1]);
  }
  if (multipath) {
    sn::MultipathConfig cfg;
    cfg.chunkBytes = 64 * 1024;
    cfg.stallMs = 100;
    sn::MultipathConn conn(sender, std::move(socks), "fuzz", cfg);
    drive<sn::MultipathConn, sn::MpRequest>(conn, sender, far, data + 1, size - 1);
    conn.close(0, 0);
  } else {
    sn::Conn conn(sender, std::move(socks), "fuzz");
    drive<sn::Conn, sn::SockRequest>(conn, sender, far, data + 1, size - 1);
    conn.close(0, 0);
  }
  for (int fd : far) close(fd);
  return 0;
}
