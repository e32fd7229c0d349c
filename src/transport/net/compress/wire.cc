// decodeMessage (wire.h).
#include "transport/net/compress/wire.h"

#include <cstring>

namespace snccl::net::compress {

Result<size_t> decodeMessage(Coder& coder, const char* msg, size_t n, const DecodeTarget& t) {
  WireHeader h{};
  if (n < sizeof h) return RemoteError("NET/compress: a message of %zu bytes has no header", n);
  std::memcpy(&h, msg, sizeof h);
  if (h.magic != kWireMagic)
    return InvalidUsage("NET/compress: a message without the compression header arrived: the sending rank does "
                        "not compress (SNCCL_NET_COMPRESS must be set alike on every rank)");
  const char* payload = msg + sizeof h;
  const size_t len = n - sizeof h;
  void* dst = t.dst;
  size_t cap = t.cap;
  if (t.alt != nullptr && h.rawBytes == t.altSize) {
    dst = t.alt;
    cap = t.altSize;
  }
  if (h.rawBytes > cap)
    return InvalidUsage("NET/compress: a message of %llu bytes arrived for a receive of %zu",
                        (unsigned long long)h.rawBytes, cap);
  const size_t raw = size_t(h.rawBytes);
  if (h.codec == uint8_t(Codec::kRaw)) {
    if (len != raw)
      return RemoteError("NET/compress: a raw message of %zu bytes claims %zu", len, raw);
    if (len > 0) std::memcpy(dst, payload, len);
    return raw;
  }
  if (h.codec != uint8_t(Codec::kLz4) && h.codec != uint8_t(Codec::kZstd))
    return RemoteError("NET/compress: a message names codec %u, which does not exist", unsigned(h.codec));
  if (!coder.decompress(Codec(h.codec), payload, len, dst, raw))
    return RemoteError("NET/compress: a %s message of %zu bytes does not decode to %zu bytes",
                       codecName(Codec(h.codec)), len, raw);
  return raw;
}

}  // namespace snccl::net::compress
