// Operation signatures: 64 bits that travel with every message of a collective so that
// ranks calling different collectives (or the same one with different counts, types,
// ops or roots) get a clear error naming both calls instead of corrupted results.
//
// Layout: bit 63 set | seq (24) | coll (4) | dtype (4) | op (8) | root (8) | count hash (15).
// Point-to-point messages carry 0 (their order is per peer, not per communicator).
// The root field and the count hash can collide; where that could pass a mismatch, the
// arguments are compared exactly (core/call_agreement.h, core/mapped_allreduce.cc).
// Net plugins carry a 32-bit digest of it instead (common/signature_digest.h): a message
// received over them has its signature in digest form, which signatureMatches() accepts.
#pragma once

#include <cstdint>
#include <string>

#include "collectives/schedule.h"
#include "common/signature_digest.h"
#include "common/status.h"
#include "snccl/nccl.h"

struct ncclComm;

namespace snccl {

struct ExecOp;

uint64_t makeSignature(uint64_t seq, CollKind coll, ncclDataType_t dt, int op, int root, size_t count);
std::string describeSignature(uint64_t sig);

// The error for a received message whose size or signature is not what `op` expects.
Status mismatchError(const ncclComm* comm, const ExecOp& op, int peer, uint32_t gotBytes, size_t expectedBytes,
                     uint64_t gotSig);

}  // namespace snccl
