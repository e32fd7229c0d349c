// LZ4 and zstd behind Coder (codec.h).
#include "transport/net/compress/codec.h"

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#if SNCCL_HAVE_LZ4
#include <lz4.h>
#endif
#if SNCCL_HAVE_ZSTD
#include <zstd.h>
#endif

namespace snccl::net::compress {

namespace {
constexpr size_t kSample = 4096;
constexpr int kSamples = 3;
// zstd entropy-codes what LZ matching leaves (Huffman, order 0), so for it a sample whose
// bytes carry at most this many bits each is worth compressing even when LZ4 finds no
// repeats: 7.6 bits is a 5% saving. Uniform random bytes measure about 7.98 on 12 KiB of
// samples; 8-bit quantized gradients about 7.4.
constexpr double kZstdBitsPerByte = 7.6;

// The order-0 entropy of the bytes counted in `hist` (bits per byte).
double entropyBits(const std::array<uint32_t, 256>& hist, size_t n) {
  double bits = 0;
  for (uint32_t c : hist)
    if (c != 0) bits -= double(c) * std::log2(double(c) / double(n));
  return n == 0 ? 0 : bits / double(n);
}
}  // namespace

const char* codecName(Codec c) {
  switch (c) {
    case Codec::kLz4:
      return "lz4";
    case Codec::kZstd:
      return "zstd";
    default:
      return "raw";
  }
}

bool haveCodec(Codec c) {
  switch (c) {
    case Codec::kRaw:
      return true;
    case Codec::kLz4:
      return SNCCL_HAVE_LZ4 != 0;
    case Codec::kZstd:
      return SNCCL_HAVE_ZSTD != 0;
  }
  return false;
}

Result<CodecConfig> parseCodec(const std::string& spec) {
  CodecConfig cfg;
  if (spec.empty() || spec == "none" || spec == "0") return cfg;
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  if (name == "lz4") {
    cfg.codec = Codec::kLz4;
    cfg.level = 1;
  } else if (name == "zstd") {
    cfg.codec = Codec::kZstd;
    cfg.level = 1;
  } else {
    return InvalidArgument("SNCCL_NET_COMPRESS=%s: expected none, lz4[:acceleration] or zstd[:level]", spec.c_str());
  }
  if (colon != std::string::npos) {
    char* end = nullptr;
    const long v = std::strtol(spec.c_str() + colon + 1, &end, 10);
    if (end == spec.c_str() + colon + 1 || *end != '\0' || v < 1 || v > 22)
      return InvalidArgument("SNCCL_NET_COMPRESS=%s: the number after ':' must be 1..22", spec.c_str());
    cfg.level = int(v);
  }
  if (!haveCodec(cfg.codec))
    return InvalidArgument(
        "SNCCL_NET_COMPRESS=%s: this build of snccl has no %s (its development package was not "
        "found when it was built)",
        spec.c_str(), codecName(cfg.codec));
  return cfg;
}

struct Coder::Impl {
#if SNCCL_HAVE_ZSTD
  ZSTD_CCtx* cctx = nullptr;
  ZSTD_DCtx* dctx = nullptr;
#endif
  std::vector<char> sampleOut;
};

Coder::Coder(const CodecConfig& cfg) : cfg_(cfg), impl_(std::make_unique<Impl>()) {}

Coder::~Coder() {
#if SNCCL_HAVE_ZSTD
  ZSTD_freeCCtx(impl_->cctx);
  ZSTD_freeDCtx(impl_->dctx);
#endif
}

size_t Coder::compress(const void* src, size_t n, void* dst, size_t cap) {
  switch (cfg_.codec) {
#if SNCCL_HAVE_LZ4
    case Codec::kLz4: {
      if (n > size_t(LZ4_MAX_INPUT_SIZE) || cap > size_t(INT32_MAX)) return 0;
      const int got =
          LZ4_compress_fast(static_cast<const char*>(src), static_cast<char*>(dst), int(n), int(cap), cfg_.level);
      return got > 0 ? size_t(got) : 0;
    }
#endif
#if SNCCL_HAVE_ZSTD
    case Codec::kZstd: {
      if (impl_->cctx == nullptr && (impl_->cctx = ZSTD_createCCtx()) == nullptr) return 0;
      const size_t got = ZSTD_compressCCtx(impl_->cctx, dst, cap, src, n, cfg_.level);
      return ZSTD_isError(got) ? 0 : got;
    }
#endif
    default:
      return 0;
  }
}

bool Coder::decompress(Codec codec, const void* src, size_t n, void* dst, size_t raw) {
  switch (codec) {
#if SNCCL_HAVE_LZ4
    case Codec::kLz4:
      if (n > size_t(INT32_MAX) || raw > size_t(INT32_MAX)) return false;
      return LZ4_decompress_safe(static_cast<const char*>(src), static_cast<char*>(dst), int(n), int(raw)) == int(raw);
#endif
#if SNCCL_HAVE_ZSTD
    case Codec::kZstd: {
      if (impl_->dctx == nullptr && (impl_->dctx = ZSTD_createDCtx()) == nullptr) return false;
      const size_t got = ZSTD_decompressDCtx(impl_->dctx, dst, raw, src, n);
      return !ZSTD_isError(got) && got == raw;
    }
#endif
    default:
      return false;
  }
}

bool Coder::worthCompressing(const void* src, size_t n) {
  if (n <= kSample * kSamples) return true;  // small: compressing it all costs no more
  const auto* bytes = static_cast<const char*>(src);
  const size_t stride = (n - kSample) / (kSamples - 1);
#if SNCCL_HAVE_LZ4
  std::vector<char>& out = impl_->sampleOut;
  out.resize(size_t(LZ4_compressBound(int(kSample))));
  size_t in = 0, got = 0;
  for (int s = 0; s < kSamples; ++s) {
    const int c = LZ4_compress_fast(bytes + stride * size_t(s), out.data(), int(kSample), int(out.size()),
                                    /*acceleration=*/8);
    in += kSample;
    got += c > 0 ? size_t(c) : kSample;
  }
  if (got * 8 <= in * 7) return true;
  if (cfg_.codec != Codec::kZstd) return false;
#else
  if (cfg_.codec != Codec::kZstd) return true;  // no cheap probe: the codec decides by the size it reaches
#endif
  std::array<uint32_t, 256> hist{};
  for (int s = 0; s < kSamples; ++s) {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes + stride * size_t(s));
    for (size_t i = 0; i < kSample; ++i) ++hist[p[i]];
  }
  return entropyBits(hist, kSample * kSamples) <= kZstdBitsPerByte;
}

}  // namespace snccl::net::compress
