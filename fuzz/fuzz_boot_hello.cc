// The first bytes a bootstrap listener reads from whoever connects: a Hello, checked by
// checkHello before anything else is read. Any bytes are checked without a crash; a Hello
// is accepted only when its magic, secret, communicator hash and kind all match, and a
// Hello made by makeHello for the same secret and hash is always accepted.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/bootstrap_wire.h"
#include "fuzz_check.h"

namespace boot = snccl::boot;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The listener reads exactly sizeof(Hello) bytes; a short greeting never reaches the check.
  if (size < sizeof(boot::Hello)) return 0;
  boot::Hello h;
  std::memcpy(&h, data, sizeof h);
  // The expected secret and hash come from the input's tail, so matches are reachable.
  boot::Secret secret{};
  uint64_t commHash = 0x5eed5eed5eed5eedull;
  size_t rest = size - sizeof h;
  if (rest >= secret.size()) std::memcpy(secret.data(), data + sizeof h, secret.size());
  if (rest >= secret.size() + sizeof commHash) std::memcpy(&commHash, data + sizeof h + secret.size(), sizeof commHash);

  for (boot::ConnKind kind : {boot::ConnKind::kRegister, boot::ConnKind::kPeer}) {
    bool ok = boot::checkHello(h, secret, commHash, kind).ok();
    bool match = std::memcmp(h.magic, boot::kHelloMagic, sizeof h.magic) == 0 && h.secret == secret &&
                 h.commHash == commHash && h.kind == static_cast<uint32_t>(kind);
    FUZZ_CHECK(ok == match, "checkHello says %d for a Hello that %s", ok, match ? "matches" : "does not match");
    boot::Hello good = boot::makeHello(secret, commHash, h.fromRank, kind);
    FUZZ_CHECK(boot::checkHello(good, secret, commHash, kind).ok(), "makeHello's own Hello refused");
  }
  return 0;
}
