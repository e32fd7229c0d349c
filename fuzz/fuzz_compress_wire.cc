// The compressing net's decoding of a received message (transport/net/compress/wire.h): the
// bytes come from the network. Input: one byte choosing the receive's capacity, one choosing
// a retargeted buffer's size (or none), then the message (header and payload). Whatever the
// bytes, decoding fails or returns a size no larger than the buffer it chose, and writes
// nothing outside that buffer (a failed decoding may leave part of the message in it).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "transport/net/compress/wire.h"

namespace cz = snccl::net::compress;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  constexpr size_t kGuard = 64;
  constexpr char kFill = 0x5a;
  const size_t cap = size_t(data[0]) * 64;
  const bool retarget = data[1] & 1;
  const size_t altSize = size_t(data[1] >> 1) * 33;
  std::vector<char> dst(cap + kGuard, kFill), alt(altSize + kGuard, kFill);
  static cz::Coder coder(cz::CodecConfig{cz::Codec::kLz4, 1});  // decodes every codec
  const cz::DecodeTarget t{dst.data(), cap, retarget ? alt.data() : nullptr, altSize};
  snccl::Result<size_t> r =
      cz::decodeMessage(coder, reinterpret_cast<const char*>(data + 2), size - 2, t);
  // The buffer the header's size chooses.
  cz::WireHeader h{};
  if (size - 2 >= sizeof h) std::memcpy(&h, data + 2, sizeof h);
  const bool toAlt = retarget && size - 2 >= sizeof h && h.rawBytes == altSize;
  if (r.ok()) {
    FUZZ_CHECK(r.value() <= (toAlt ? altSize : cap), "decoded %zu bytes into a buffer of %zu", r.value(),
               toAlt ? altSize : cap);
  }
  // Nothing past the capacity of either buffer, and nothing at all in the one not chosen.
  for (size_t i = cap; i < dst.size(); ++i) FUZZ_CHECK(dst[i] == kFill, "wrote past the receive at %zu", i);
  for (size_t i = altSize; i < alt.size(); ++i) FUZZ_CHECK(alt[i] == kFill, "wrote past the retarget at %zu", i);
  if (!toAlt)
    for (size_t i = 0; i < altSize; ++i) FUZZ_CHECK(alt[i] == kFill, "wrote into the unchosen retarget");
  return 0;
}
