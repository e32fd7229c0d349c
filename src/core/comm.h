// The communicator: identity, peers, connections, ordering of operations and error state.
//
// Invariants between ranks: every rank of a communicator issues collectives in the same
// order (NCCL's rule); the k-th collective on every rank carries sequence number k, and
// its signature travels with each message so a mismatch is reported, not silently mixed.
// Connections are created in pairs, lazily, during the first operation that needs them;
// both ends reach that operation, so the handshake cannot wait on a rank that never comes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/kernels/reduce.h"
#include "collectives/schedule.h"
#include "collectives/tuning/selector.h"
#include "common/params.h"
#include "common/status.h"
#include "core/auto_register.h"
#include "core/bootstrap.h"
#include "core/comm_errors.h"
#include "core/comm_ordering.h"
#include "core/comm_stats.h"
#include "core/flight_recorder.h"
#include "core/peer_buffers.h"
#include "core/scratch_pool.h"
#include "snccl/nccl.h"
#include "transport/connection.h"
#include "transport/net/net_device.h"
#include "transport/net/reg_cache.h"
#include "transport/transport.h"

namespace snccl {

struct CommConfig {
  bool blocking = true;
  std::string name;
  int cudaDev = -1;
  int minChannels = 0;  // ncclConfig_t minCTAs / maxCTAs (0: not given); SNCCL_MIN/MAX_NCHANNELS win
  int maxChannels = 0;
};

// Parses a user ncclConfig_t honouring its size and version (older callers keep working)
// (core/comm_create.cc).
Status parseConfig(const ncclConfig_t* user, CommConfig* out);

struct AlgorithmDef;

// A buffer registered with ncclCommRegister: the record lets deregistration be checked,
// netId is its range in ncclComm::regs.net, where net plugins that need registration
// find it (shm and local need none), and sharedId its pages made readable by the node's
// other processes (core/user_pages.h; 0: not shared).
struct Registration {
  void* buff;
  size_t size;
  uint64_t netId;
  uint64_t sharedId;
};

// One connection of a rank in one direction: the peer and the channel (schedule.h).
struct ConnKey {
  int peer = 0;
  int channel = 0;
  auto operator<=>(const ConnKey&) const = default;  // by peer, then channel
};

// What rings that send from or receive into an operation's own memory (the net's:
// Connection::postAt, Connection::planRecvs) need to know about a schedule.
struct ZeroCopyInfo {
  // soleWriter[lane][i]: step i of the lane writes a dst range that no other step of the
  // schedule writes. Its bytes there are final once it ran (a net ring may send them from
  // there), and nothing else lands there while the op runs (a net ring may receive into
  // it ahead of the step). Steps that write nothing have 0.
  std::vector<std::vector<uint8_t>> soleWriter;
  // For each connection of PreparedSchedule::recvs: its kRecv steps into the output that
  // are their range's sole writer, so that a net ring may receive them straight into
  // place; `index` counts the connection's receives in the schedule (one lane uses a
  // connection, so that is also the order they arrive in).
  struct TargetStep {
    uint32_t index;
    uint32_t lane, step;  // sched.lanes[lane].steps[step]
  };
  std::vector<std::vector<TargetStep>> recvTargets;
};

// A schedule plus what the executor derives from it once: the connections it sends on
// and receives from, whether this communicator's connections exist yet, and, for net
// rings, the ZeroCopyInfo (core/prepared_schedule.cc).
struct PreparedSchedule {
  Schedule sched;
  std::vector<ConnKey> sends;
  std::vector<ConnKey> recvs;
  size_t maxRecvCount = 0;  // elements of the largest message any step receives
  size_t totalSteps = 0;    // steps of all lanes (the flight recorder's progress total)
  mutable std::atomic<bool> connected{false};

  // Fills sends/recvs (sorted, unique), maxRecvCount and totalSteps from sched.
  void analyse();
  // Computed on the first call, from any thread: operations on one node never pay for it
  // (send/recv groups build a schedule per call, where it cost ~0.3 us of a 1.3 us
  // exchange between two processes).
  const ZeroCopyInfo& zeroCopy() const;

 private:
  // Not std::call_once: glibc's pthread_once wakes futex waiters after every first call,
  // a system call per send/recv group over the network (each builds its own schedule).
  mutable std::mutex zeroCopyMu_;
  mutable std::atomic<bool> zeroCopyDone_{false};
  mutable ZeroCopyInfo zeroCopy_;
};

struct ScheduleCacheEntry {
  CollArgs args;
  const AlgorithmDef* alg = nullptr;
  std::shared_ptr<const PreparedSchedule> prep;
};

class CommRunner;

// A user-created PreMulSum operator (ncclRedOpCreatePreMulSum).
struct PreMulOp {
  bool live = false;
  ncclDataType_t dt = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  unsigned char value[8] = {};   // ScalarHostImmediate: read at creation
  const void* ptr = nullptr;     // ScalarDevice: read when the operation runs
};

// Who the ranks are and how they are laid out; set once at init, read-only afterwards.
struct CommPeers {
  std::vector<PeerInfo> info;  // by rank, from the bootstrap's allgather
  uint64_t commHash = 0;
  int localRanks = 1;  // ranks on this node (same host hash)
  int localRank = 0;   // this rank's index among them (by rank)
  ChannelPlan plan;    // ring order chosen by the topology planner at creation
};

// Connections by channel and peer (index channel * nranks + peer), sized for
// kMaxChannels at init and created lazily; touched only by the thread that currently
// executes this communicator's operations (see CommOrdering).
struct CommConnections {
  std::vector<std::unique_ptr<Connection>> send;
  std::vector<std::unique_ptr<Connection>> recv;
  uint32_t nsteps = 8;
  uint32_t slotBytes = 0;
  // The NIC the planner picks for this rank (net/net_device.h), set at init.
  net::NicHint nic;
  // Incast control of AlltoAll and Gather (collectives/p2p/incast.h): the most senders a
  // rank grants at once for blocks of at least incastMinBytes; 0 unless ranks span nodes.
  int incastSenders = 0;
  size_t incastMinBytes = 0;
  // Some receive connection takes plans (Connection::planRecvs: the net's); until then the
  // executor skips planning, which costs a lookup per connection and operation.
  std::atomic<bool> plansRecvs{false};
  // Channel 0 to and from the peers of the argument agreement of rooted collectives
  // (core/call_agreement.h) exists; belongs to the thread that executes the operations.
  bool agreementConnected = false;

  // Sizes the table for nranks ranks (at init, before any connection exists).
  void resize(int nranks) {
    nranks_ = size_t(nranks);
    send.resize(nranks_ * kMaxChannels);
    recv.resize(nranks_ * kMaxChannels);
  }
  std::unique_ptr<Connection>& sendOf(ConnKey k) { return send[index(k)]; }
  std::unique_ptr<Connection>& recvOf(ConnKey k) { return recv[index(k)]; }
  size_t index(ConnKey k) const { return size_t(k.channel) * nranks_ + size_t(k.peer); }

 private:
  size_t nranks_ = 0;
};

// Single-copy AllReduce (core/mapped_allreduce.cc): every rank is on this node and can
// name the others' processes (one PID namespace, or one process), so that it may map
// their buffers; AllReduces of at least minBytes (0: never) try it. mappable and
// minBytes are the same on every rank (from the peers' table and
// SNCCL_SINGLE_COPY_BYTES, which must match), set at init; the rest belongs to the
// thread that executes the communicator's operations.
struct CommSingleCopy {
  bool mappable = false;
  size_t minBytes = 0;
  bool connected = false;  // channel 0 to and from every peer exists
  int verdict = -1;        // the last one (1 single copy, 0 rings), logged on change
  PeerBuffers peerBuffers;
  // Recurring malloc'd buffers registered by the communicator itself (SNCCL_AUTO_REGISTER);
  // null when off or when every rank is a thread of this process.
  std::unique_ptr<AutoRegistrations> autoRegs;
};

// Buffers registered with ncclCommRegister (core/comm.cc).
struct CommRegistrations {
  CommRegistrations() = default;
  CommRegistrations(const CommRegistrations&) = delete;
  CommRegistrations& operator=(const CommRegistrations&) = delete;
  // Registrations the user did not remove end with the communicator: their shared pages
  // become private again (the net's go with `net`).
  ~CommRegistrations();

  // Records [buff, buff + size) and adds it to `net`; with `share`, also moves its whole
  // pages onto a memory file the node's processes can map (core/user_pages.h). The
  // record is the user's handle.
  Registration* add(void* buff, size_t size, bool share);
  // Removes a record add() returned, from `net` too, and makes its pages private again
  // when no other registration shares them; false if `handle` is none (or was removed
  // already).
  bool remove(const void* handle);

  // The registered ranges the net connections may send from and receive into in place
  // (net/reg_cache.h): shared with them, as a connection's proxy entry may outlive the
  // communicator's last reference to it by a flush.
  std::shared_ptr<net::RegCache> net = std::make_shared<net::RegCache>();

 private:
  std::mutex mutex_;  // guards list_
  std::vector<std::unique_ptr<Registration>> list_;
};

// User reduction operators (ncclRedOpCreatePreMulSum): slot i is ncclRedOp_t(ncclNumOps
// + i). Slots are reused once destroyed and never removed, so an index that was valid
// stays in range (core/comm.cc).
struct CommRedOps {
  // Stores `op` in the first free slot and returns its index.
  size_t add(const PreMulOp& op);
  // Frees slot idx; false if it holds no live operator.
  bool remove(size_t idx);
  // The live operator in slot idx, or nullopt.
  std::optional<PreMulOp> find(size_t idx);
  // Slot idx as it is, live or not; idx must have been returned by add().
  PreMulOp at(size_t idx);

 private:
  std::mutex mutex_;  // guards preMul_
  std::vector<PreMulOp> preMul_;
};

// What operations reuse between calls.
struct CommCaches {
  // Out of line, where CommRunner is complete.
  explicit CommCaches(std::shared_ptr<net::RegCache> regs);
  ~CommCaches();

  // Recently generated schedules, reused by identical calls (training loops and
  // benchmarks repeat the same shapes); guarded by scheduleMutex.
  std::mutex scheduleMutex;
  std::vector<ScheduleCacheEntry> schedules;
  size_t next = 0;  // the entry a full cache replaces next
  // Scratch and staging memory of operations, reused (declared before anything that
  // holds leases from it, so it is destroyed after them).
  ScratchPool scratchPool;
  // Reused by blocking calls outside groups, so a small call allocates nothing.
  std::unique_ptr<CommRunner> soloRunner;
};

}  // namespace snccl

// Members are destroyed in reverse order: the caches (and the leases their runner holds)
// before the registrations and connections they use, the connections before the
// bootstrap.
struct ncclComm {
  uint64_t magic = kMagic;
  static constexpr uint64_t kMagic = 0x736e63636c636f6dull;  // "snccl com"

  int rank = 0;
  int nranks = 0;
  // The last thread whose placement commPlaceThread() settled (SNCCL_PIN_RANKS): another
  // thread running this communicator's operations is looked at once more.
  std::atomic<std::thread::id> placedThread{};
  snccl::CommConfig config;
  std::unique_ptr<snccl::Bootstrap> bootstrap;
  snccl::CommPeers peers;
  // Cost-model inputs (node structure, slot size, SNCCL_ALGO/PROTO), identical on every
  // rank, set once at init; the selector reads them per call. tuneLog: last decisions.
  snccl::tuning::Tuner tuner;
  snccl::tuning::DecisionLog tuneLog;
  // Traffic per peer, live (core/comm_stats.h); set up at init. Declared before the
  // connections, which add to its rail counters until they are released.
  snccl::stats::CommStats stats;
  snccl::CommConnections conns;
  snccl::CommSingleCopy singleCopy;
  int64_t timeoutNs = 0;  // 0: no limit
  int64_t spinUs = 0;
  int64_t yieldUs = 0;  // see yieldBudgetUs()
  int64_t netPollUs = 0;  // SNCCL_NET_POLL_US (CommRunner::pollExtensionNs)

  snccl::CommErrors errors;
  // The last operations, for post-mortems (core/flight_recorder.h, core/flight_dump.h).
  snccl::flight::Recorder flight{size_t(snccl::params::getInt(snccl::params::Id::FlightRecorder))};
  std::thread initThread;  // non-blocking init
  snccl::CommOrdering ordering;
  snccl::CommRegistrations regs;
  snccl::CommRedOps redOps;
  snccl::CommCaches caches{regs.net};
  uint64_t splitCount = 0;  // commSplit calls so far (every rank makes each): child hashes
};

namespace snccl {

// Creation (core/comm_create.cc).

// Creates the communicator object for a rank and runs (or starts, when non-blocking) init.
Status commInitRank(ncclComm** out, int nranks, const ncclUniqueId& id, int rank, const CommConfig& cfg);
// Derives a child communicator over `members` (child rank i = parent rank members[i]).
Status commSplit(ncclComm* parent, int color, int key, ncclComm** out, const CommConfig& cfg);
Status commShrink(ncclComm* parent, const int* exclude, int excludeCount, ncclComm** out, const CommConfig& cfg,
                  int flags);

// Runtime (core/comm.cc).

// Waits for outstanding operations, then a barrier with the peers.
Status commFinalize(ncclComm* comm);
// Frees local resources; never waits on peers.
void commFree(ncclComm* comm);
// Stops in-flight operations, poisons connections so peers fail fast, frees. Never waits on peers.
void commAbort(ncclComm* comm);

// Checks a handle from the user: non-null, ours, initialised (waits for a non-blocking
// init to finish) and not failed.
Status checkComm(ncclComm* comm, bool requireReady = true);

// Records a fatal error on the communicator (first one wins) and poisons its connections.
void commSetError(ncclComm* comm, const Status& status);

// Called by the thread about to run `comm`'s operations: pins it when SNCCL_PIN_RANKS=1
// asks (topology/rank_pinning.h), the first time it runs them. One comparison after that.
void commPlaceThread(ncclComm* comm);

// Ensures the send connections `sends` and the receive connections `recvs` exist
// (handshake over the bootstrap; both ends call it during the same operation, each list
// sorted so that the connections between two ranks are made in the same order at both).
Status commConnect(ncclComm* comm, const std::vector<ConnKey>& sends, const std::vector<ConnKey>& recvs);

}  // namespace snccl
