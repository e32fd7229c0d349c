// What the two ends of an IB net connection write into each other's memory, and the
// metadata they exchange over the connection's TCP control socket.
//
// A connection is `nqps` RC queue pairs between a sender and a receiver, and one TCP
// socket (the out-of-band path: setup, goodbye, failure notices). Each end uses 1 to
// kMaxRails local ports (rails, possibly on different devices: SNCCL_IB_RAILS); queue
// pair q is on this end's rail q % (its rails) and the peer's rail q % (the peer's
// rails), so that rail i of one node talks to rail i of the other. Each end owns one
// Region the other end writes into, registered once per rail (each device has its own
// protection domain and keys):
//  - The receiver grants a credit by RDMA-writing a CtsEntry {address, size, a remote key
//    per rail, tag, idx} into fifo[seq % kSlots] of the sender's Region: one posted
//    receive, one credit. Grants, offers and the receiver's rail news travel on the
//    control queue pair: the first queue pair of the first rail not given up (queue pair
//    r is on rail r for r < nrails).
//    The write carries immediate data, so that it consumes one of the zero-length
//    receives the sender keeps posted on the first queue pair of every rail and a sender
//    asleep waiting for a credit gets a completion event.
//    The sender sends message `seq` only once that entry's idx reads seq + 1, so it never
//    writes into a buffer it has not been granted.
//  - The receiver may also offer a second place for a message, where it lands only if it
//    has exactly the offered size (Net::retargetRecv: the executor's output instead of a
//    ring slot): a CtsEntry in offers[seq % kSlots] of the sender's Region, written on
//    the control queue pair before the grant when the offer is known in time, so that a
//    sender that sees the grant sees the offer too. The sender decides once per message,
//    when it starts it, and says in every record of the message which place it wrote
//    (kRecordRetargeted). An offer that comes after the sender started (it read the
//    offer entry before the write landed) is simply not taken; the receiver then
//    copies the message from the grant to the offered place itself.
//  - The sender writes each part of a message with RDMA_WRITE into the granted buffer,
//    then, on the same queue pair, an RDMA_WRITE_WITH_IMM of a DoneRecord into
//    records[slot][part] of the receiver's Region. The receiver learns of the part from
//    the completion that write generates (it consumes one posted zero-length receive; the
//    immediate names the slot and the part), and RC ordering on one queue pair guarantees
//    the part's data is in place by then. No flag travels on another path than its data.
//  - Any rail may fail while another lives on, when both ends have the same rails
//    (ib_conn.cc). The news goes over a live queue pair, not the TCP control socket,
//    which may run over the failed rail's network: the end that sees it first stops the
//    rail's queue pairs (in the error state nothing more lands from them) and, if it is
//    the sender, says so with a small RDMA_WRITE_WITH_IMM (into probeIn) whose immediate is
//    railDownImm(rails). The receiver stops the same rails, takes the records that did
//    land, and writes a RailState into railStates[k] of the sender's Region (k: its k-th
//    report), with immediate railStateImm(k): what it retired and which parts of each
//    message in flight it has. The sender writes the parts it lacks again on the live
//    queue pairs (the data goes to the same place, so a part written twice is harmless)
//    and uses only live queue pairs from then on. A part may therefore arrive on any
//    queue pair. When the control queue pair's rail fails, the receiver writes its
//    grants and offers not yet retired again on the next one: an entry written twice
//    holds the same bytes, and the sender reads an entry only when it starts the message.
// All integers are little-endian (the only byte order snccl builds for).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace snccl::net::ib {

constexpr int kSlots = 64;    // requests in flight per comm, = credits
constexpr int kMaxQps = 16;   // queue pairs per connection: NCCL_IB_QPS_PER_CONNECTION x rails
constexpr int kMaxRails = 4;  // SNCCL_IB_RAILS's upper bound
constexpr size_t kPartAlign = 128;

struct CtsEntry {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey[kMaxRails];  // the buffer's key on each of the receiver's rails
  int32_t tag;
  uint32_t reserved;
  uint64_t idx;  // seq + 1; written last (it is the last field of one RDMA write)
};
static_assert(sizeof(CtsEntry) == 48);

// DoneRecord::flags.
constexpr uint32_t kRecordRetargeted = 1;  // the message went to the buffer offered

struct DoneRecord {
  uint64_t seq;
  uint64_t size;   // the whole message's bytes
  uint32_t imm;    // Net::isend's imm
  uint16_t nparts;
  uint16_t part;
  uint32_t flags;  // kRecord*
  uint32_t reserved;
};
static_assert(sizeof(DoneRecord) == 32);

// What the receiver reports when rails fail: its requests when the failed rails' queue
// pairs stopped taking writes.
struct RailState {
  uint32_t rails;  // a bit per rail given up, all of them so far
  uint32_t reserved;
  uint64_t retired;            // messages the receiver has completed
  uint64_t posted;             // receives it had posted (and granted) then
  uint64_t seq[kSlots];        // the message each slot's live receive is for (UINT64_MAX: none)
  uint32_t partsSeen[kSlots];  // a bit per part of it whose record arrived
};

struct alignas(4096) Region {
  CtsEntry fifo[kSlots];                 // sender: grants written by the receiver; receiver: staging
  CtsEntry offers[kSlots];               // sender: offers written by the receiver; receiver: staging
  DoneRecord records[kSlots][kMaxQps];   // [slot][part]; receiver: written by the sender; sender: staging
  RailState railStates[kMaxRails - 1];   // sender: the receiver's reports; receiver: staging
  uint64_t probeIn;                      // the peer's probe write lands here
  uint64_t probeOut;                     // the source of this end's probe write
};

// The imm of a record write (and of a credit, part 0): the slot, the part and 16 bits of
// the sequence number, so that a completion is matched to the request and the record it
// belongs to and a stale one is caught.
static_assert(kSlots <= 256 && kMaxQps <= 256);
inline uint32_t packImm(uint64_t seq, int part = 0) {
  return uint32_t(seq % kSlots) | uint32_t(part) << 8 | uint32_t((seq & 0xffff) << 16);
}
inline int immSlot(uint32_t imm) { return int(imm & 0xff); }
inline int immPart(uint32_t imm) { return int((imm >> 8) & 0xff); }
inline uint16_t immSeq16(uint32_t imm) { return uint16_t(imm >> 16); }
// Rail news (the failover above) uses a slot no request has; the part field says which.
constexpr int kNewsSlot = 0xff;
constexpr int kNewsRailDown = 1;   // sender to receiver: the rails in the upper bits failed
constexpr int kNewsRailState = 2;  // receiver to sender: railStates[upper bits] is written
static_assert(kSlots < kNewsSlot);
inline uint32_t railDownImm(uint32_t rails) { return uint32_t(kNewsSlot) | uint32_t(kNewsRailDown) << 8 | rails << 16; }
inline uint32_t railStateImm(int k) { return uint32_t(kNewsSlot) | uint32_t(kNewsRailState) << 8 | uint32_t(k) << 16; }

constexpr uint32_t kMetaMagic = 0x736e4962;  // "sNIb"
constexpr uint16_t kMetaVersion = 5;

// One rail (local port) of an end, as the peer needs it to reach it.
struct RailMeta {
  uint8_t ethernet;
  uint8_t mtu;  // ibv_mtu
  uint16_t lid;
  uint32_t gidIndex;
  uint8_t gid[16];
  uint32_t regionRkey;  // the end's Region on this rail's device
  uint16_t port;
  uint16_t reserved;
  char dev[64];
};

// One end's connection metadata, sent once each way over the control socket.
struct Meta {
  uint32_t magic;
  uint16_t version;
  uint16_t nqps;
  uint16_t nrails;
  uint8_t tc;
  uint8_t sl;
  uint32_t reserved;
  uint64_t regionAddr;
  uint64_t probeValue;  // what this end's probe writes into the peer's probeIn
  RailMeta rails[kMaxRails];
  uint32_t qpn[kMaxQps];
};

// The rail queue pair q uses at an end with `nrails` rails.
inline int qpRail(int q, int nrails) { return q % nrails; }

// The checks of what the peer wrote, which this end cannot trust (ib_wire.cc).
// Its metadata: "" when it can be a peer's (magic, version, 1..kMaxQps queue pairs,
// 1..kMaxRails rails); the device names are NUL-terminated in place either way.
std::string metaProblem(Meta* m);

// How the sender cuts a message of `size` bytes over `nqps` queue pairs: messages from
// `splitBytes` up (and not empty) are cut into at most nqps parts of `*chunk` bytes
// (kPartAlign-aligned, the last shorter), one per queue pair; smaller ones travel whole.
// Returns the parts.
int splitParts(size_t size, int nqps, size_t splitBytes, size_t* chunk);
// The queue pair (of `nqps` live ones, in order) part `part` of message `seq` goes on:
// the part's index when cut, else the message's turn (seq mod nqps), so that small
// messages spread over the pairs.
inline int partQp(uint64_t seq, int part, int nparts, int nqps) {
  return nparts == 1 ? int(seq % uint64_t(nqps)) : part;
}

// The receiver's check of a record whose immediate named part `part`, for the receive of
// message `seq` posted for `posted` bytes on a connection of `nqps` queue pairs; `offered`:
// the exact size of the place offered for it (kNoOffer: none); `first`: the first
// record of the same message that arrived (null: this is the first), `partsSeen` a bit
// for each part whose record arrived. "" when the sender could have written it: its
// message, at most `posted` bytes (written at the offer: exactly its size, and only if one
// was offered), the part the immediate names, at most nqps parts, not seen before, with
// the same size, part count, imm and flags as the first record.
constexpr size_t kNoOffer = SIZE_MAX;
std::string recordProblem(const DoneRecord& rec, uint64_t seq, int part, int nqps, size_t posted, size_t offered,
                          const DoneRecord* first, uint32_t partsSeen);

// What a receive completion for a part that already arrived means. Reliable connections
// deliver each write once; Soft-RoCE (rdma_rxe, at least in Linux 6.1) sometimes delivers
// a write with immediate twice after it retransmits, which tests/rdma/verbs_once.cc shows
// with plain libibverbs. The connection fails rather than trust a device that does.
inline constexpr const char* kDeliveredTwice =
    "the RDMA device delivered a write twice, which a reliable connection never does (Soft-RoCE does when it "
    "retransmits: a longer NCCL_IB_TIMEOUT makes that rarer)";

// Control-socket frames after setup.
enum class Ctl : uint32_t { kReady = 1, kBye = 2, kAbort = 3 };
struct CtlFrame {
  uint32_t type;  // Ctl
  uint32_t code;  // kAbort: the abort code (net.h closeSend)
};
static_assert(sizeof(CtlFrame) == 8);

// The listen handle: the TCP control socket's handle (socket net layout) behind this head.
constexpr uint32_t kHandleMagic = 0x736e4968;  // "sNIh"
struct HandleHead {
  uint32_t magic;
  uint16_t version;
  uint16_t reserved;
};

}  // namespace snccl::net::ib
