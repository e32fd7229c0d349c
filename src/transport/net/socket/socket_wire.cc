// The message split rule shared by both ends of a socket-net connection.
#include "transport/net/socket/socket_wire.h"

#include <algorithm>

namespace snccl::net::sockwire {

int splitMessage(uint64_t seq, size_t size, int nstreams, Part* parts) {
  if (size <= kInlineMax || nstreams <= 0) return 0;
  size_t want = std::clamp<size_t>(size / kMinPart, 1, size_t(nstreams));
  size_t partLen = (size + want - 1) / want;
  partLen = (partLen + kPartAlign - 1) / kPartAlign * kPartAlign;
  int n = 0;
  for (size_t off = 0; off < size; off += partLen, ++n) {
    parts[n].stream = int((seq + uint64_t(n)) % uint64_t(nstreams));
    parts[n].offset = off;
    parts[n].len = std::min(partLen, size - off);
  }
  return n;
}

}  // namespace snccl::net::sockwire
