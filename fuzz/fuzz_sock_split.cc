// The socket net's split of a message over its data streams (socket_wire.h): the receiver
// computes it from the size in the peer's MSG frame (at most its posted receive) and the
// stream count of the listen handle (at most kMaxStreams), and both ends must derive the
// same parts. For any such input, the parts fit the kMaxStreams-entry array the caller
// gives, use distinct streams starting at seq % nstreams, are aligned, at least kMinPart
// but the last, and tile the message exactly; a message up to kInlineMax has none.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz_check.h"
#include "transport/net/socket/socket_wire.h"

namespace sw = snccl::net::sockwire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 17) return 0;
  uint64_t seq = 0, msgSize = 0;
  std::memcpy(&seq, data, 8);
  std::memcpy(&msgSize, data + 8, 8);
  // Sizes of buffers a process can post: below 2^56 bytes. seq counts a connection's
  // messages from 0 and never nears 2^64, where (seq + part) % nstreams would wrap.
  msgSize &= (uint64_t(1) << 56) - 1;
  seq &= (uint64_t(1) << 62) - 1;
  int nstreams = data[16] % (sw::kMaxStreams + 1);

  sw::Part parts[sw::kMaxStreams + 1];
  std::memset(parts, 0xab, sizeof parts);
  int n = sw::splitMessage(seq, size_t(msgSize), nstreams, parts);
  if (msgSize <= sw::kInlineMax || nstreams == 0) {
    FUZZ_CHECK(n == 0, "%d parts for an inline message of %llu bytes", n, (unsigned long long)msgSize);
    return 0;
  }
  FUZZ_CHECK(n >= 1 && n <= nstreams, "%d parts over %d streams", n, nstreams);
  bool used[sw::kMaxStreams] = {};
  size_t next = 0;
  for (int i = 0; i < n; ++i) {
    const sw::Part& p = parts[i];
    FUZZ_CHECK(p.stream == int((seq + uint64_t(i)) % uint64_t(nstreams)), "part %d on stream %d", i, p.stream);
    FUZZ_CHECK(!used[p.stream], "stream %d used twice", p.stream);
    used[p.stream] = true;
    FUZZ_CHECK(p.offset == next && p.len > 0, "part %d at %zu+%zu, expected offset %zu", i, p.offset, p.len, next);
    if (i + 1 < n) {
      FUZZ_CHECK(p.len % sw::kPartAlign == 0 && p.len >= sw::kMinPart, "part %d of %zu bytes", i, p.len);
    }
    next += p.len;
  }
  FUZZ_CHECK(next == msgSize, "parts cover %zu of %llu bytes", next, (unsigned long long)msgSize);
  return 0;
}
