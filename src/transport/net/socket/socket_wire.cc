// The message split rule shared by both ends of a socket-net connection, and the checks of
// a peer's handle and greetings.
#include "transport/net/socket/socket_wire.h"

#include <algorithm>

#include "common/status.h"

namespace snccl::net::sockwire {

std::string handleProblem(const HandleWire& w) {
  if (w.magic != kMagic || w.version != kVersion || w.nstreams > kMaxStreams || w.nrails < 1 || w.nrails > kMaxRails)
    return format("not a socket-net handle of version %u (magic %08x, version %u, %u streams, %u rails)", kVersion,
                  w.magic, w.version, w.nstreams, w.nrails);
  if (w.adaptive != 0 && (w.chunkBytes < 4096 || w.chunkBytes > (16u << 20)))
    return format("it asks for %u-byte chunks", w.chunkBytes);
  return {};
}

std::string helloProblem(const Hello& h, uint64_t nonce, int nstreams) {
  if (!helloHasKey(h, nonce)) return "it did not present this listener's key";
  if (h.nstreams != nstreams || h.index > nstreams)
    return format("it announced socket %u of %u, expected %d streams", h.index, h.nstreams, nstreams);
  return {};
}

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
