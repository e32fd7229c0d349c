// Agreement on a rooted collective's arguments (docs/design.md §8.2).
//
// Signatures catch a mismatch only where a rank receives a message: ranks that pass
// different roots to a Broadcast, Reduce, Gather or Scatter may receive nothing from the
// ranks they disagree with (a rank that believes it is the root of a Broadcast receives
// nothing at all), so the call would succeed with different data on each "root", or wait
// for messages nobody sends. Before the data of such a call moves, every rank therefore
// runs a dissemination exchange on channel 0: in round j it sends to rank + 2^j and
// receives from rank - 2^j (mod nranks), ceil(log2 nranks) rounds. Each message carries
// the sender's exact arguments (collective, sequence number, type, op, root, full count)
// and the first disagreement it knows of. After the last round every rank has heard,
// directly or through the others, from every rank, so either every rank saw every
// argument equal or every rank knows a pair of ranks that differ: all of them fail the
// call with ncclInvalidUsage naming both, before any data moved.
//
// The messages go before the op's data messages on each ring, and every rank runs the
// exchange at the same point of the same op, so FIFO order keeps the two apart.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm.h"

namespace snccl {

// The arguments of one rank's call, exactly.
struct CallWire {
  uint64_t count = 0;
  uint32_t seq = 0;  // the low 32 bits of the collective's sequence number
  int32_t root = -1;
  int32_t op = 0;    // ncclRedOp_t, PreMulSum ops as ncclNumOps (their handles are per rank)
  uint8_t coll = 0;  // CollKind
  uint8_t dt = 0;    // ncclDataType_t
  uint16_t pad = 0;
  bool operator==(const CallWire&) const = default;
};

// One message of the exchange.
struct AgreeMsg {
  uint64_t magic = 0;     // kAgreeMagic: told apart from a data message of the same size
  int32_t rankA = -1;     // >= 0: rank rankA passed `a` and rank rankB passed `b`
  int32_t rankB = -1;
  CallWire mine;          // the sender's call
  CallWire a, b;
};
constexpr uint64_t kAgreeMagic = 0x736e63636c616772ull;

// One rank's side of the exchange for the current op.
struct CallAgreement {
  int round = 0;      // the distance of this round is 1 << round
  bool sent = false;  // this round's message is posted
  bool done = true;   // nothing (left) to agree on
  CallWire mine;
  int32_t rankA = -1, rankB = -1;
  CallWire a, b;

  void start(const CallWire& w) {
    round = 0, sent = false, done = false;
    mine = w;
    rankA = rankB = -1;
  }
  AgreeMsg message() const;
  // Takes what rank `peer` sent (this is rank `me`).
  void merge(const AgreeMsg& m, int peer, int me);
  bool differs() const { return rankA >= 0; }
  // "rank 2 passed Broadcast(count 5000, float, root 2) and rank 0 passed Broadcast(...):
  // the ranks passed different roots"; empty when nothing differs.
  std::string describe() const;
};

// The peers of the exchange: sends[j] and recvs[j] are round j's (channel 0).
void agreementPeers(int rank, int nranks, std::vector<ConnKey>* sends, std::vector<ConnKey>* recvs);

}  // namespace snccl
