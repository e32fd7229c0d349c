// Lossless codecs of the compressing net (compress_net.h): LZ4 and zstd from the system's
// liblz4 / libzstd, behind one interface, plus the cheap test that decides per message
// whether compressing it is worth the time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"

namespace snccl::net::compress {

enum class Codec : uint8_t { kRaw = 0, kLz4 = 1, kZstd = 2 };
const char* codecName(Codec c);  // "raw", "lz4", "zstd"

struct CodecConfig {
  Codec codec = Codec::kRaw;
  int level = 0;  // lz4: acceleration (>= 1, higher is faster); zstd: level (default 1)
};

// "lz4", "lz4:ACCEL", "zstd", "zstd:LEVEL"; "" or "none": kRaw. InvalidArgument for other
// text, or for a codec this build lacks (liblz4-dev / libzstd-dev were not found).
Result<CodecConfig> parseCodec(const std::string& spec);
// Whether this build has the codec.
bool haveCodec(Codec c);

// The per-connection state of one codec (zstd keeps its contexts between messages).
class Coder {
 public:
  explicit Coder(const CodecConfig& cfg);
  ~Coder();
  Coder(const Coder&) = delete;
  Coder& operator=(const Coder&) = delete;

  const CodecConfig& config() const { return cfg_; }
  // Compresses src[0, n) into dst[0, cap): the compressed size, or 0 when it does not fit
  // (the data does not compress) or the library failed.
  size_t compress(const void* src, size_t n, void* dst, size_t cap);
  // Decompresses exactly `raw` bytes into dst from src[0, n) written by `codec`; false when
  // the bytes are not a valid encoding of exactly that many.
  bool decompress(Codec codec, const void* src, size_t n, void* dst, size_t raw);
  // Whether n bytes at src look compressible: a few 4 KiB samples spread over the message
  // are compressed with LZ4's fastest setting, and the message is worth it when they
  // shrink by at least 1/8. For zstd it is also worth it when the samples' bytes are
  // skewed enough for zstd's entropy coder to save 5% (8-bit quantized values, whose
  // repeats LZ4 cannot find). Costs a few microseconds whatever n is.
  bool worthCompressing(const void* src, size_t n);

 private:
  CodecConfig cfg_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace snccl::net::compress
