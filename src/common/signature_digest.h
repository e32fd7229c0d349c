// The 32-bit digest of an operation signature (core/signature.h), for transports that
// carry 32 bits with a message: a verbs RDMA_WRITE_WITH_IMM's immediate data, or a prefix
// of the payload on a plugin without imm (net.h). Lives here, below core and transport,
// because both compute it.
//
// Layout: bit 31 set | seq mod 2048 (11) | coll (4) | dtype (4) | hash of op and root (6)
// | hash of the count hash (6). 0 stays 0 (point-to-point: unchecked). Two collectives
// that differ in kind or type within 2048 operations always differ; a different op,
// root or count is caught unless its 6-bit hash collides (1 in 64): as with the full
// signature's 15-bit count hash, the check names mismatched calls, it is not a proof.
//
// The receiving end of such a transport hands the executor the digest in "digest form"
// (bit 62 set, bit 63 clear, the digest in the low 32 bits), which no full signature
// has (bit 63 set) and which signatureMatches() compares against the full signature the
// receiver computed for its own operation.
#pragma once

#include <cstdint>

namespace snccl {

constexpr uint64_t kSigDigestForm = uint64_t(1) << 62;

inline uint32_t signatureDigest(uint64_t sig) {
  if (sig == 0) return 0;
  auto hash6 = [](uint64_t x) { return uint32_t((x * 0x9e3779b97f4a7c15ull) >> 58); };
  uint32_t seq = uint32_t(sig >> 39) & 0x7ff;
  uint32_t collType = uint32_t(sig >> 31) & 0xff;  // coll (4) | dtype (4)
  return (uint32_t(1) << 31) | (seq << 20) | (collType << 12) | (hash6((sig >> 15) & 0xffff) << 6) |
         hash6(sig & 0x7fff);
}

inline uint64_t signatureFromDigest(uint32_t digest) { return digest == 0 ? 0 : kSigDigestForm | digest; }
inline bool isDigestForm(uint64_t sig) { return (sig >> 62) == 1; }

// Whether a received signature (full, or in digest form) is the one expected.
inline bool signatureMatches(uint64_t got, uint64_t expected) {
  return got == expected || (isDigestForm(got) && uint32_t(got) == signatureDigest(expected));
}

}  // namespace snccl
