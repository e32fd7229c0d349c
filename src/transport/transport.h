// The transport registry: how a Connection between two ranks is built.
//
// For every (sender, receiver) pair the first registered transport whose canConnect()
// accepts the pair is used (order: local, shm, then network transports). Setup is a
// two-message handshake over the bootstrap: the receiver creates the ring and sends a
// ConnBlob describing it; the sender attaches to it.
//
// A new transport is one folder plus one line in registry.cc. What it implements:
// 1. A TransportDef (below): canConnect, createRecv, connectSend.
// 2. The ring's memory, seen by both ends: connCtrlBytes() of control block, initialised
//    by the creator with initConnCtrl(), then nsteps x slotBytes of slots (ring.h).
// 3. A ConnMemory (connection.h) that owns that memory: its destructor frees it;
//    failureDetail() if the transport can say why it failed a ring.
// 4. For the executor's end, the Connection that createRecv/connectSend return, with the
//    RingConfig both ends of the ring agree on (inline messages and light publishing:
//    only when both ends are executors).
// 5. Only if the ring's far end is not the peer's executor but a helper that moves the
//    bytes elsewhere (the net proxy thread): that helper plays its end with Ring (ring.h),
//    never with ConnCtrl's fields directly, and ConnMemory::caps() may offer Drivable (the
//    executor may drive the helper while it waits), ZeroCopySend (the helper sends from
//    the user's memory) and ZeroCopyRecv (it receives into it). A transport without
//    them gets the plain ring; the executor asks nothing else of a transport.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/cpu_set.h"
#include "common/status.h"
#include "transport/connection.h"
#include "transport/rail_tally.h"

namespace snccl {

namespace net {
class RegCache;
struct NicHint;
}

// What every rank tells the others at init. Fixed size: it travels in the bootstrap's
// table of equal-sized blocks, one per rank. Endpoint data of variable length (a net
// plugin's listen handle or worker address) is not here but travels per connection, in
// ConnBlob::payload.
struct PeerInfo {
  uint32_t version;       // NCCL_VERSION_CODE of the library
  int32_t rank;
  uint64_t hostHash;      // ranks with equal hostHash share a node (SNCCL_HOSTID overrides)
  uint64_t processToken;  // random per process: equal tokens = same address space
  int32_t pid;
  int32_t cudaDev;
  uint64_t pidNs;         // PID namespace (pidNamespaceId()): pids compare only within one
  int32_t numa;           // NUMA node the rank runs on (-1 unknown): input of the ring planner
  int32_t cpus;           // online CPUs of the host
  CpuSet cpuSet;          // CPUs the rank's thread may run on at init (all when unknown): with
                          // its node's others, the cost model's oversubscription and the spin budget
  int32_t minChannels;    // channel range this rank asks for (tuning::localChannelRange);
  int32_t maxChannels;    // the communicator uses the ranks' agreed one (agreeChannels)
  int64_t singleCopyBytes;  // SNCCL_SINGLE_COPY_BYTES: must agree on a mappable communicator
  uint64_t allReduceAlgos;   // the AllReduce algorithms SNCCL_ALGO allows (~0: all); must agree
                             // on a mappable communicator, where it decides the single copy
  int32_t processBarrier;   // registered for processBarrier() and SNCCL_MEMBARRIER allows it: a ring
                            // between two such ranks publishes without a full fence (ring.h)
  char hostname[64];
};

struct ConnRequest {
  uint64_t commHash;
  int rank;  // this rank
  int peer;  // the other end
  int channel;  // which of the connections between the two (schedule.h), for messages
  uint32_t nsteps;
  uint32_t slotBytes;
  const PeerInfo* self;
  const PeerInfo* remote;
  // The communicator's registered memory (net/reg_cache.h), for transports whose plugin
  // needs registration; null: none.
  std::shared_ptr<net::RegCache> regs = nullptr;
  // The NIC the topology planner picked for this rank (net/net_device.h); null: none.
  const net::NicHint* nic = nullptr;
  // The peer's per-rail traffic counters (rail_tally.h); empty: none.
  RailTally rails{};
};

// Whether the ring between the two ranks of `req` publishes without a full fence
// (ring.h, "light publishing"): only when both processes are registered for
// processBarrier(). Both ends compute it from the same two PeerInfos, so they agree.
inline bool lightPublish(const ConnRequest& req) { return req.self->processBarrier && req.remote->processBarrier; }

// Receiver -> sender description of a ring (a shm name, a pointer in this process, a net
// plugin's listen handle, ...). The fixed fields hold what the node-local transports need;
// `payload` holds bytes of any length (a net plugin's handle: a UCX worker address is
// larger than any fixed field would be). commConnect sends the fixed fields with the
// payload's length, then the payload, over the bootstrap.
struct ConnBlob {
  char transport[16] = {};
  uint64_t words[4] = {};
  char name[96] = {};
  int32_t channel = 0;  // set by commConnect; the sender checks it names the connection it expects
  std::vector<unsigned char> payload;
};
// The largest ConnBlob::payload commConnect accepts (a sanity bound, not a format limit).
constexpr size_t kMaxConnPayload = size_t(1) << 20;

struct TransportDef {
  const char* name;
  const char* help;
  bool (*canConnect)(const PeerInfo& self, const PeerInfo& peer);
  // Receiver side: creates the ring and describes it in *blob.
  Result<std::unique_ptr<Connection>> (*createRecv)(const ConnRequest& req, ConnBlob* blob);
  // Sender side: attaches to the ring the receiver described.
  Result<std::unique_ptr<Connection>> (*connectSend)(const ConnRequest& req, const ConnBlob& blob);
};

std::span<const TransportDef> transports();
// First transport that can connect the pair, or an error saying why none can.
Result<const TransportDef*> selectTransport(const PeerInfo& self, const PeerInfo& peer);
const TransportDef* findTransport(const char* name);

// Identity of this process and host, computed once.
uint64_t processToken();
uint64_t hostHash();  // SNCCL_HOSTID if set, else hostname + boot id

// The pid under which this process can watch `peer` for liveness, or 0 when it cannot
// (another host, or another PID namespace, where the number means a different process).
int32_t watchablePid(const PeerInfo& self, const PeerInfo& peer);

}  // namespace snccl
