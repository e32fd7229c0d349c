// What the compressing net (compress_net.h) puts on the wire: a 16-byte header before every
// message, and the decoding of a received message, which reads bytes from the network (a
// fuzz harness, fuzz/fuzz_compress_wire.cc, runs it on arbitrary input).
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/status.h"
#include "transport/net/compress/codec.h"

namespace snccl::net::compress {

struct WireHeader {
  uint32_t magic;
  uint8_t codec;  // Codec
  uint8_t pad[3];
  uint64_t rawBytes;  // the message's size before encoding
};
static_assert(sizeof(WireHeader) == 16);
inline constexpr uint32_t kWireMagic = 0x5a434e53;  // "SNCZ"

// Where a received message may go: `dst` (capacity `cap`), or `alt` when the message has
// exactly `altSize` bytes (a retargeted receive; alt null: none).
struct DecodeTarget {
  void* dst = nullptr;
  size_t cap = 0;
  void* alt = nullptr;
  size_t altSize = 0;
};

// Decodes the `n` received bytes at `msg` (header, then payload) into the target; returns the
// message's original size. InvalidUsage for a message without the header (the sender does
// not compress) or larger than its receive; RemoteError for bytes that do not decode to the
// size the header claims. Never writes outside the chosen buffer; after a decoding error it
// may hold part of the message.
Result<size_t> decodeMessage(Coder& coder, const char* msg, size_t n, const DecodeTarget& t);

}  // namespace snccl::net::compress
