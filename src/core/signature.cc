// Operation signatures and the mismatch error message.
#include "core/signature.h"

#include "collectives/kernels/reduce.h"
#include "core/comm.h"
#include "core/executor.h"

namespace snccl {

uint64_t makeSignature(uint64_t seq, CollKind coll, ncclDataType_t dt, int op, int root, size_t count) {
  uint64_t h = count * 0x9e3779b97f4a7c15ull;
  h ^= h >> 29;
  return (uint64_t(1) << 63) | ((seq & 0xffffff) << 39) | ((uint64_t(coll) & 0xf) << 35) |
         ((uint64_t(dt) & 0xf) << 31) | ((uint64_t(op) & 0xff) << 23) | ((uint64_t(root) & 0xff) << 15) |
         (h & 0x7fff);
}

std::string describeSignature(uint64_t sig) {
  if (sig == 0) return "a point-to-point operation";
  if (isDigestForm(sig)) {
    // What a transport that carries 32 bits brought (common/signature_digest.h).
    auto coll = static_cast<CollKind>((sig >> 16) & 0xf);
    auto dt = static_cast<ncclDataType_t>((sig >> 12) & 0xf);
    return format("collective #%u (mod 2048) %s(%s, op/root hash %02x, count hash %02x)", unsigned((sig >> 20) & 0x7ff),
                  collName(coll), kernels::typeName(dt), unsigned((sig >> 6) & 0x3f), unsigned(sig & 0x3f));
  }
  unsigned seq = unsigned((sig >> 39) & 0xffffff);
  auto coll = static_cast<CollKind>((sig >> 35) & 0xf);
  auto dt = static_cast<ncclDataType_t>((sig >> 31) & 0xf);
  int op = int((sig >> 23) & 0xff);
  int root = int((sig >> 15) & 0xff);
  return format("collective #%u %s(%s, op %d, root %d, count hash %04x)", seq, collName(coll),
                kernels::typeName(dt), op, root, unsigned(sig & 0x7fff));
}

Status mismatchError(const ncclComm* comm, const ExecOp& op, int peer, uint32_t gotBytes, size_t expectedBytes,
                     uint64_t gotSig) {
  if (!signatureMatches(gotSig, op.sig)) {
    // A digest (net plugins carry 32 bits) is compared with the digest of this rank's own
    // signature, which is recomputed from the operation and described in the same form.
    bool digest = isDigestForm(gotSig);
    uint64_t mine = digest ? signatureFromDigest(signatureDigest(op.sig)) : op.sig;
    bool onlyCount = digest ? (gotSig >> 6) == (mine >> 6) : (gotSig >> 15) == (op.sig >> 15);
    return InvalidUsage("rank %d received from rank %d a message of %s while running %s (signature %s)%s",
                        comm->rank, peer, describeSignature(gotSig).c_str(), op.describe().c_str(),
                        describeSignature(mine).c_str(),
                        onlyCount ? ": the ranks passed different counts" : ": ranks called different operations");
  }
  return InvalidUsage("rank %d received a message of %u bytes from rank %d where %zu were expected in %s: "
                      "mismatch in collective sizes or environment settings (SNCCL_BUFFSIZE, SNCCL_STEPS)",
                      comm->rank, gotBytes, peer, expectedBytes, op.describe().c_str());
}

}  // namespace snccl
