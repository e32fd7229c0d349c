// The socket net's checks of what a peer presents before a connection exists
// (transport/net/socket/socket_wire.h): the listen handle a sender receives through the
// bootstrap, and the greeting every socket opens with at the listener. An accepted handle
// has a stream and rail count a connector can use; an accepted greeting carries the
// listener's key and names one of its sockets; and the handle and greetings the socket net
// itself writes are accepted.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fuzz_check.h"
#include "transport/net/socket/socket_wire.h"

namespace sw = snccl::net::sockwire;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < sizeof(sw::HandleWire) + sizeof(sw::Hello) + 1) return 0;
  sw::HandleWire w;
  std::memcpy(&w, data, sizeof w);
  if (sw::handleProblem(w).empty()) {
    FUZZ_CHECK(w.magic == sw::kMagic && w.version == sw::kVersion, "accepted a foreign handle");
    FUZZ_CHECK(w.nstreams <= sw::kMaxStreams && w.nrails >= 1 && w.nrails <= sw::kMaxRails,
               "accepted %u streams over %u rails", unsigned(w.nstreams), unsigned(w.nrails));
    FUZZ_CHECK(w.adaptive == 0 || (w.chunkBytes >= 4096 && w.chunkBytes <= (16u << 20)), "accepted %u-byte chunks",
               w.chunkBytes);
  }
  sw::Hello h;
  std::memcpy(&h, data + sizeof w, sizeof h);
  const int nstreams = data[sizeof w + sizeof h] % (sw::kMaxStreams + 1);
  if (sw::helloProblem(h, w.nonce, nstreams).empty()) {
    FUZZ_CHECK(h.magic == sw::kMagic && h.version == sw::kVersion && h.nonce == w.nonce, "accepted a stranger");
    FUZZ_CHECK(h.nstreams == nstreams && h.index <= nstreams, "accepted socket %u of %u at a listener of %d streams",
               unsigned(h.index), unsigned(h.nstreams), nstreams);
  }

  // What the socket net writes (socket_setup.cc) passes.
  sw::HandleWire own{};
  own.magic = sw::kMagic;
  own.version = sw::kVersion;
  own.nstreams = uint16_t(nstreams);
  own.nonce = w.nonce;
  own.nrails = uint8_t(1 + data[0] % sw::kMaxRails);
  own.adaptive = data[1] & 1;
  own.chunkBytes = uint32_t(4096) << (data[2] % 13);
  FUZZ_CHECK(sw::handleProblem(own).empty(), "the net's own handle refused: %s", sw::handleProblem(own).c_str());
  for (int index = 0; index <= nstreams; ++index) {
    const sw::Hello mine{sw::kMagic, sw::kVersion, uint16_t(index), w.nonce, uint16_t(nstreams), {}};
    FUZZ_CHECK(sw::helloProblem(mine, w.nonce, nstreams).empty(), "the net's own greeting %d refused", index);
  }
  return 0;
}
