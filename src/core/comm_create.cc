// Communicator creation: config, init from the peers' table, split and shrink.
//
// Init runs on every rank of the new communicator: the bootstrap allgathers each rank's
// PeerInfo, and every value finishInit derives that the ranks must agree on (ring
// order, node structure, single copy, tuner) comes from that one table or from rank 0.
#include "core/comm.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/cpu_set.h"
#include "common/log.h"
#include "common/params.h"
#include "common/process.h"
#include "common/process_barrier.h"
#include "common/wait.h"
#include "core/flight_dump.h"
#include "core/slot_geometry.h"
#include "topology/affinity.h"
#include "topology/discovery.h"
#include "topology/planner.h"

namespace snccl {

namespace {
constexpr unsigned kConfigMagic = 0xcafebeef;

// Identity and the peers' table from the bootstrap; every rank must run this version.
Status gatherPeers(ncclComm* comm) {
  comm->nranks = comm->bootstrap->nranks();
  comm->rank = comm->bootstrap->rank();
  comm->peers.commHash = comm->bootstrap->commHash();
  comm->peers.info.resize(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) {
    auto blob = comm->bootstrap->peerInfo(r);
    if (blob.size() != sizeof(PeerInfo)) return InternalError("bootstrap returned a %zu-byte peer blob", blob.size());
    std::memcpy(&comm->peers.info[r], blob.data(), sizeof(PeerInfo));
    if (comm->peers.info[r].version != NCCL_VERSION_CODE)
      return InvalidUsage("rank %d runs library version %u, rank %d runs %u", r, comm->peers.info[r].version,
                          comm->rank, unsigned(NCCL_VERSION_CODE));
  }
  return OkStatus();
}

// This rank's place among the ranks of its node (same host hash), by rank.
void placeOnNode(ncclComm* comm) {
  comm->peers.localRanks = 0;
  comm->peers.localRank = 0;
  for (int r = 0; r < comm->nranks; ++r)
    if (comm->peers.info[r].hostHash == comm->peers.info[comm->rank].hostHash) {
      comm->peers.localRank += r < comm->rank;
      ++comm->peers.localRanks;
    }
}

// Waits in connection setup (bootstrap recv) then notice a peer on this host that died
// before sending what we wait for, instead of sitting out SNCCL_TIMEOUT. The bootstrap
// is owned by the comm, so `comm` outlives the watch.
void watchPeers(ncclComm* comm) {
  comm->bootstrap->setPeerWatch([comm](int peer) -> std::string {
    const PeerInfo& p = comm->peers.info[peer];
    pid_t pid = watchablePid(comm->peers.info[comm->rank], p);
    if (pid == 0 || !processGone(pid)) return std::string();
    comm->errors.culprit.store(peer);
    return format("(pid %d, host %s) exited", pid, p.hostname);
  });
}

// Rank 0 plans the ring from the allgathered locations and sends it to every rank, so all
// ranks use one order even if their nodes' topologies differ. A planning failure falls
// back to rank order (logged): the ring is an optimisation, never a requirement.
Status planCommRing(ncclComm* comm) {
  constexpr uint32_t kTagRing = 0x52494e47;  // "RING"
  std::vector<int> ring(comm->nranks);
  for (int r = 0; r < comm->nranks; ++r) ring[r] = r;
  if (comm->nranks <= 2) {
    comm->peers.plan.ring = std::move(ring);
    return OkStatus();
  }
  if (comm->rank == 0) {
    const Result<topo::System>& sys = topo::processSystem();
    std::vector<topo::RankLocation> locs(comm->nranks);
    for (int r = 0; r < comm->nranks; ++r)
      locs[r] = {comm->peers.info[r].hostHash, std::string(), comm->peers.info[r].numa};
    Result<std::vector<int>> planned = sys.ok() ? topo::planRing(sys.value(), locs) : Result<std::vector<int>>(sys.status());
    if (planned.ok() && planned.value().size() == ring.size()) {
      ring = std::move(planned).value();
    } else {
      SN_INFO(log::kGraph, "ring planner unavailable (%s): using rank order",
              planned.ok() ? "wrong size" : planned.status().message().c_str());
    }
    for (int r = 1; r < comm->nranks; ++r)
      SNCCL_TRY(comm->bootstrap->send(r, kTagRing, ring.data(), ring.size() * sizeof(int)));
  } else {
    SNCCL_TRY(comm->bootstrap->recv(0, kTagRing, ring.data(), ring.size() * sizeof(int)));
  }
  std::string order;
  for (int r : ring) order += " " + std::to_string(r);
  SN_INFO(log::kGraph, "Ring 00 :%s", order.c_str());
  comm->peers.plan.ring = std::move(ring);
  return OkStatus();
}

// The NIC the topology planner picks for this rank's inter-node traffic (topo::Plan::
// rankNic), as the net transport matches it against its plugin's devices (net_device.h).
// A local choice: each end of a net connection picks its own device. Empty when the
// topology is unknown or has no NIC.
net::NicHint planNic(const PeerInfo& self) {
  net::NicHint hint;
  const Result<topo::System>& sys = topo::processSystem();
  if (!sys.ok()) return hint;
  const topo::RankLocation loc{self.hostHash, std::string(), self.numa};
  Result<topo::Plan> plan = topo::planChannels(sys.value(), std::span<const topo::RankLocation>(&loc, 1));
  if (!plan.ok() || plan.value().rankNic.empty() || plan.value().rankNic[0] < 0) return hint;
  const topo::Node& nic = sys.value().node(plan.value().rankNic[0]);
  hint.busId = nic.pci.busId;
  for (const topo::NetPort& port : nic.nic.nets)
    if (!port.name.empty()) hint.names.push_back(port.name);
  SN_INFO(log::kGraph | log::kNet, "rank %d: the topology's NIC for inter-node traffic: %s%s%s", self.rank,
          hint.busId.empty() ? "(no bus id)" : hint.busId.c_str(), hint.names.empty() ? "" : " ",
          hint.names.empty() ? "" : hint.names[0].c_str());
  return hint;
}

// The ring order (agreed through rank 0) and each rank's node, for the hierarchical
// algorithms (same on every rank: from the table).
Status planRings(ncclComm* comm) {
  SNCCL_TRY(planCommRing(comm));
  comm->peers.plan.hosts.clear();
  for (const PeerInfo& p : comm->peers.info) comm->peers.plan.hosts.push_back(p.hostHash);
  return OkStatus();
}

// Whether the ranks may map each other's buffers, and from which size AllReduces try.
Status checkSingleCopy(ncclComm* comm) {
  comm->singleCopy.mappable = true;
  for (const PeerInfo& p : comm->peers.info) {
    const PeerInfo& me = comm->peers.info[comm->rank];
    bool sameProcess = p.processToken == me.processToken;
    if (p.hostHash != me.hostHash || (!sameProcess && (p.pidNs == 0 || p.pidNs != me.pidNs)))
      comm->singleCopy.mappable = false;
  }
  comm->singleCopy.minBytes = size_t(comm->peers.info[comm->rank].singleCopyBytes);
  // Automatic registration only helps between processes (threads of one process map any
  // memory). Each rank decides alone: a rank whose buffers are not shared makes the
  // verdict "rings" for that call, on every rank alike.
  bool otherProcess = false;
  for (const PeerInfo& p : comm->peers.info)
    otherProcess = otherProcess || p.processToken != comm->peers.info[comm->rank].processToken;
  const int64_t autoBytes = params::getIntClamped(params::Id::AutoRegister, 0, INT64_MAX);
  if (comm->singleCopy.mappable && otherProcess && comm->singleCopy.minBytes != 0 && autoBytes != 0 &&
      params::getInt(params::Id::ShareRegistered) != 0)
    comm->singleCopy.autoRegs =
        std::make_unique<AutoRegistrations>(std::max(size_t(autoBytes), comm->singleCopy.minBytes));
  // Whether a call takes the single-copy path must be the same on every rank (its
  // messages are not the rings'); a differing threshold would surface later as a
  // confusing size mismatch in the middle of some AllReduce.
  for (const PeerInfo& p : comm->peers.info)
    if (comm->singleCopy.mappable && size_t(p.singleCopyBytes) != comm->singleCopy.minBytes)
      return InvalidUsage("SNCCL_SINGLE_COPY_BYTES differs between ranks of one node: %lld on rank %d, %zu on rank %d; "
                          "set it identically on all ranks (or on none)",
                          (long long)p.singleCopyBytes, p.rank, comm->singleCopy.minBytes, comm->rank);
  // The same for the algorithms SNCCL_ALGO (NCCL_ALGO) allows: the selector picks `single`
  // per call, so a rank that forbids it would run the rings while its peers map buffers.
  const uint64_t algos = comm->peers.info[comm->rank].allReduceAlgos;
  for (const PeerInfo& p : comm->peers.info)
    if (comm->singleCopy.mappable && p.allReduceAlgos != algos)
      return InvalidUsage("SNCCL_ALGO (or NCCL_ALGO) allows different AllReduce algorithms on rank %d and rank %d of "
                          "one node; set it identically on all ranks (or on none)",
                          p.rank, comm->rank);
  return OkStatus();
}

// The connections table (empty), the NIC for inter-node traffic and the slots of each
// connection.
Status planConnections(ncclComm* comm) {
  comm->conns.resize(comm->nranks);
  const bool spansNodes = comm->peers.localRanks < comm->nranks;
  // Ranks on one node use the net only with shm disabled: no topology lookup for them
  // (their channels take the plugin's devices in turn).
  if (spansNodes) {
    comm->conns.nic = planNic(comm->peers.info[comm->rank]);
    comm->conns.incastSenders = int(params::getIntClamped(params::Id::IncastSenders, 0, INT32_MAX));
    comm->conns.incastMinBytes = size_t(params::getIntClamped(params::Id::IncastMinBytes, 0, INT64_MAX));
  }
  SNCCL_ASSIGN_OR_RETURN(const SlotGeometry geometry,
                         slotGeometry(spansNodes, spansNodes ? processNetSlotDefaults() : net::SlotDefaults{}));
  comm->conns.nsteps = geometry.nsteps;
  comm->conns.slotBytes = geometry.slotBytes;
  SN_INFO(log::kInit, "rank %d: %u slots of %u B per connection (%s; ranks %s)", comm->rank, comm->conns.nsteps,
          comm->conns.slotBytes, describe(geometry).c_str(), spansNodes ? "span nodes" : "on one node");
  SN_INFO(log::kInit, "rank %d: rings to ranks on this node publish %s", comm->rank,
          comm->peers.info[comm->rank].processBarrier
              ? "without a full fence where the peer's process is registered too; a rank about to sleep calls "
                "membarrier(2) (SNCCL_MEMBARRIER=1)"
              : (params::getInt(params::Id::Membarrier) != 0
                     ? "with a full fence (this kernel refuses membarrier GLOBAL_EXPEDITED)"
                     : "with a full fence (SNCCL_MEMBARRIER=0)"));
  return OkStatus();
}

// The cost model's inputs, from the peers' table: identical on every rank.
void tune(ncclComm* comm) {
  std::vector<uint64_t> procs;  // which ranks are threads of one process
  // CPUs the ranks of each rank's host can use together: more ranks than CPUs changes the picks
  std::vector<int> cpus;
  std::vector<tuning::ChannelRange> ranges;  // what each rank asks for; all use the agreed one
  std::unordered_map<uint64_t, CpuSet> hostSets;  // the union of each host's ranks' sets
  for (const PeerInfo& p : comm->peers.info) hostSets[p.hostHash] |= p.cpuSet;
  for (const PeerInfo& p : comm->peers.info) {
    procs.push_back(p.processToken);
    const CpuSet& spanned = hostSets[p.hostHash];
    cpus.push_back(cpusSpanned(std::span<const CpuSet>(&spanned, 1), p.cpus));
    ranges.push_back({p.minChannels, p.maxChannels});
  }
  const tuning::ChannelRange channels = tuning::agreeChannels(ranges);
  if (comm->rank == 0)
    for (const tuning::ChannelRange& r : ranges)
      if (r.min != ranges[0].min || r.max != ranges[0].max) {
        SN_WARN("ranks ask for different channel ranges (SNCCL_MIN/MAX_NCHANNELS, minCTAs/maxCTAs); all use %d..%d",
                channels.min, channels.max);
        break;
      }
  comm->tuner = tuning::commTuner(comm->nranks, comm->peers.plan.hosts, procs, cpus, comm->conns.slotBytes,
                                  comm->rank == 0, channels,
                                  comm->singleCopy.mappable ? comm->singleCopy.minBytes : 0);
}

// How long a waiting rank spins, yields, and waits at most.
void setWaitBudgets(ncclComm* comm) {
  comm->timeoutNs = params::getInt(params::Id::Timeout) * 1000000000ll;
  // Threads that must run on this host while a rank waits: the ranks, plus, when peers sit
  // on other nodes, the proxy and doorbell threads that move their bytes. A waiter that
  // spins on the core those need only delays its own message: measured over TCP between
  // two namespaces on 2 CPUs, a 1 ms spin cut busbw to a third and made 8 B take 330 us.
  // Since the executor drives its net rings itself while it waits (net/proxy.h), those
  // threads mostly sleep during an operation; counting them or not measured the same
  // (3 interleaved rounds each, 8 B to 16 MiB), so they stay counted for the cases where
  // they do run (the rank asleep, between operations).
  // The ranks are also counted against the CPUs of their own affinity (common/cpu_set.h):
  // ranks bound to CPUs of their own spin, ranks bound to fewer CPUs than they are do not.
  const PeerInfo& self = comm->peers.info[size_t(comm->rank)];
  size_t index = 0;
  std::vector<CpuSet> sets;  // this node's ranks' sets, in rank order
  for (const PeerInfo& p : comm->peers.info)
    if (p.hostHash == self.hostHash) {
      if (p.rank == comm->rank) index = sets.size();
      sets.push_back(p.cpuSet);
    }
  const CpuShare share = cpuShare(sets, index, self.cpus);
  const bool over = oversubscribed(share, int(sets.size()), self.cpus, comm->tuner.shape.nnodes > 1 ? 2 : 0);
  comm->spinUs = spinBudgetUs(over);
  comm->yieldUs = yieldBudgetUs(over);
  comm->netPollUs = params::getIntClamped(params::Id::NetPollUs, 0, int64_t(1) << 40);
  SN_INFO(log::kInit, "rank %d: shares %d CPU%s with %d rank%s of this node: waits spin %lld us, yield %lld us",
          comm->rank, share.cpus, share.cpus == 1 ? "" : "s", share.ranks - 1, share.ranks == 2 ? "" : "s",
          (long long)comm->spinUs, (long long)comm->yieldUs);
}

// The traffic counters: in SNCCL_STATS_DIR when set and writable, else private.
void openStats(ncclComm* comm) {
  if (params::getInt(params::Id::Stats) == 0) return;
  const std::string& dir = params::getString(params::Id::StatsDir);
  Status st = comm->stats.open(comm->peers.commHash, comm->rank, comm->nranks, dir);
  if (st.ok()) return;
  SN_WARN("rank %d: %s; the traffic counters stay private", comm->rank, st.message().c_str());
  st = comm->stats.open(comm->peers.commHash, comm->rank, comm->nranks, std::string());
  if (!st.ok()) SN_WARN("rank %d: %s; no traffic counters", comm->rank, st.message().c_str());
}

// Everything init derives once the bootstrap is up, in this order: later steps read what
// earlier ones set (planConnections the node placement, tune the slot size and the
// single copy, setWaitBudgets the tuner's node count).
Status finishInit(ncclComm* comm) {
  SNCCL_TRY(gatherPeers(comm));
  placeOnNode(comm);
  watchPeers(comm);
  SNCCL_TRY(planRings(comm));
  SNCCL_TRY(checkSingleCopy(comm));
  SNCCL_TRY(planConnections(comm));
  tune(comm);
  setWaitBudgets(comm);
  openStats(comm);
  flight::registerComm(comm);
  SN_INFO(log::kInit, "comm %p rank %d nRanks %d localRanks %d commHash %016llx - Init COMPLETE", (void*)comm,
          comm->rank, comm->nranks, comm->peers.localRanks, (unsigned long long)comm->peers.commHash);
  return OkStatus();
}

PeerInfo makePeerInfo(int rank, const CommConfig& cfg) {
  PeerInfo info{};
  const tuning::ChannelRange ch =
      tuning::localChannelRange(tuning::processOverrides(), params::isSet(params::Id::MinNchannels),
                                params::isSet(params::Id::MaxNchannels), cfg.minChannels, cfg.maxChannels);
  info.minChannels = ch.min;
  info.maxChannels = ch.max;
  info.version = NCCL_VERSION_CODE;
  info.rank = rank;
  info.hostHash = hostHash();
  info.processToken = processToken();
  info.pid = getpid();
  info.pidNs = pidNamespaceId();
  info.cudaDev = cfg.cudaDev;
  info.numa = topo::currentNumaNode();
  info.cpus = int32_t(std::max(sysconf(_SC_NPROCESSORS_ONLN), 1l));
  info.cpuSet = currentCpuSet();
  info.singleCopyBytes = params::getIntClamped(params::Id::SingleCopyBytes, 0, INT64_MAX);
  const tuning::AlgoSpec& algos = tuning::processOverrides().algo;
  const size_t ar = size_t(CollKind::kAllReduce);
  info.allReduceAlgos = algos.restricted[ar] ? algos.allowed[ar] : ~uint64_t(0);
  info.processBarrier = params::getInt(params::Id::Membarrier) != 0 && registerProcessBarrier();
  gethostname(info.hostname, sizeof info.hostname - 1);
  return info;
}

std::span<const std::byte> asBytes(const PeerInfo& info) {
  return {reinterpret_cast<const std::byte*>(&info), sizeof info};
}

// NCCL prints its banner once per process, at the first communicator.
void printBannerOnce() {
  static std::once_flag once;
  std::call_once(once, [] { log::printVersionBanner("NCCL version 2.28.9+snccl" SNCCL_VERSION_STRING " (host)"); });
}

Status initBody(ncclComm* comm, const ncclUniqueId& id) {
  printBannerOnce();
  PeerInfo info = makePeerInfo(comm->rank, comm->config);
  SNCCL_ASSIGN_OR_RETURN(comm->bootstrap,
                         Bootstrap::init(id, comm->rank, comm->nranks, asBytes(info), &comm->errors.abortFlag));
  return finishInit(comm);
}

void markInitDone(ncclComm* comm, const Status& st) {
  if (st.ok()) {
    comm->errors.state.store(int(CommState::kReady));
  } else {
    commSetError(comm, st);
  }
}

// Runs the child's init: blocking inline, non-blocking in the comm's init thread.
Status runInit(ncclComm* comm, std::function<Status()> body) {
  if (comm->config.blocking) {
    Status st = body();
    markInitDone(comm, st);
    return st;
  }
  comm->initThread = std::thread([comm, body = std::move(body)] {
    Status st = body();
    markInitDone(comm, st);
    if (!st.ok()) SN_WARN("%s", st.message().c_str());
  });
  return Status(ncclInProgress, "");
}

}  // namespace

Status parseConfig(const ncclConfig_t* user, CommConfig* out) {
  int envBlocking = int(params::getInt(params::Id::CommBlocking));
  if (user != nullptr) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    size_t size = user->size;
    if (user->magic != kConfigMagic)
      return InvalidArgument("ncclConfig_t argument not initialized via NCCL_CONFIG_INITIALIZER");
    std::memcpy(&cfg, user, std::min(size, sizeof cfg));
    // Fields newer than the caller's header are not there: back to "undefined".
    if (cfg.version < NCCL_VERSION(2, 14, 0)) cfg.blocking = NCCL_CONFIG_UNDEF_INT;
    if (cfg.blocking != NCCL_CONFIG_UNDEF_INT && cfg.blocking != 0 && cfg.blocking != 1)
      return InvalidArgument("Invalid config blocking attribute value %d", cfg.blocking);
    if (cfg.blocking != NCCL_CONFIG_UNDEF_INT) out->blocking = cfg.blocking == 1;
    if (cfg.version >= NCCL_VERSION(2, 17, 0)) {
      if (cfg.minCTAs != NCCL_CONFIG_UNDEF_INT && cfg.minCTAs <= 0)
        return InvalidArgument("Invalid config minCTAs attribute value %d", cfg.minCTAs);
      if (cfg.maxCTAs != NCCL_CONFIG_UNDEF_INT && cfg.maxCTAs <= 0)
        return InvalidArgument("Invalid config maxCTAs attribute value %d", cfg.maxCTAs);
      if (cfg.minCTAs != NCCL_CONFIG_UNDEF_INT && cfg.maxCTAs != NCCL_CONFIG_UNDEF_INT && cfg.minCTAs > cfg.maxCTAs)
        return InvalidArgument("Invalid config minCTAs %d > maxCTAs %d", cfg.minCTAs, cfg.maxCTAs);
      if (cfg.cgaClusterSize != NCCL_CONFIG_UNDEF_INT && (cfg.cgaClusterSize < 0 || cfg.cgaClusterSize > 8))
        return InvalidArgument("Invalid config cgaClusterSize attribute value %d", cfg.cgaClusterSize);
      if (cfg.minCTAs != NCCL_CONFIG_UNDEF_INT) out->minChannels = cfg.minCTAs;
      if (cfg.maxCTAs != NCCL_CONFIG_UNDEF_INT) out->maxChannels = cfg.maxCTAs;
    }
    if (cfg.splitShare != NCCL_CONFIG_UNDEF_INT && cfg.splitShare != 0 && cfg.splitShare != 1)
      return InvalidArgument("Invalid config splitShare attribute value %d", cfg.splitShare);
    if (cfg.version >= NCCL_VERSION(2, 27, 0) && cfg.CTAPolicy != NCCL_CONFIG_UNDEF_INT &&
        (cfg.CTAPolicy < 0 || cfg.CTAPolicy > 2))
      return InvalidArgument("Invalid config CTAPolicy attribute value %d", cfg.CTAPolicy);
    if (cfg.version >= NCCL_VERSION(2, 27, 0)) {
      if (cfg.collnetEnable != NCCL_CONFIG_UNDEF_INT && cfg.collnetEnable != 0 && cfg.collnetEnable != 1)
        return InvalidArgument("Invalid config collnetEnable attribute value %d", cfg.collnetEnable);
      if (cfg.shrinkShare != NCCL_CONFIG_UNDEF_INT && cfg.shrinkShare != 0 && cfg.shrinkShare != 1)
        return InvalidArgument("Invalid config shrinkShare attribute value %d", cfg.shrinkShare);
      if (cfg.nvlsCTAs != NCCL_CONFIG_UNDEF_INT && cfg.nvlsCTAs <= 0)
        return InvalidArgument("Invalid config nvlsCTAs attribute value %d", cfg.nvlsCTAs);
    }
    if (cfg.version >= NCCL_VERSION(2, 28, 0)) {
      if (cfg.nChannelsPerNetPeer != NCCL_CONFIG_UNDEF_INT && (cfg.nChannelsPerNetPeer < 1 || cfg.nChannelsPerNetPeer > 64))
        return InvalidArgument("Invalid config nChannelsPerNetPeer attribute value %d", cfg.nChannelsPerNetPeer);
      if (cfg.nvlinkCentricSched != NCCL_CONFIG_UNDEF_INT && cfg.nvlinkCentricSched != 0 && cfg.nvlinkCentricSched != 1)
        return InvalidArgument("Invalid config nvlinkCentricSched attribute value %d", cfg.nvlinkCentricSched);
    }
    if (cfg.commName != nullptr) out->name = cfg.commName;
  }
  if (envBlocking == 0 || envBlocking == 1) out->blocking = envBlocking == 1;
  return OkStatus();
}

Status commInitRank(ncclComm** out, int nranks, const ncclUniqueId& id, int rank, const CommConfig& cfg) {
  if (nranks < 1) return InvalidArgument("invalid nranks %d (must be >= 1)", nranks);
  if (rank < 0 || rank >= nranks) return InvalidArgument("invalid rank %d (nranks %d)", rank, nranks);
  auto* comm = new ncclComm();
  comm->rank = rank;
  comm->nranks = nranks;
  comm->config = cfg;
  *out = comm;
  Status st = runInit(comm, [comm, id] { return initBody(comm, id); });
  if (!st.ok() && st.code() != ncclInProgress) {
    commFree(comm);
    *out = nullptr;
  }
  return st;
}

namespace {
struct SplitEntry {
  int color;
  int key;
};

Status makeChild(ncclComm* parent, std::vector<int> members, int childRank, uint64_t childHash,
                 const CommConfig& cfg, ncclComm** out) {
  auto* child = new ncclComm();
  child->config = cfg;
  child->rank = childRank;
  child->nranks = int(members.size());
  *out = child;
  Status st = runInit(child, [parent, child, members = std::move(members), childRank, childHash] {
    PeerInfo info = makePeerInfo(childRank, child->config);
    SNCCL_ASSIGN_OR_RETURN(child->bootstrap, parent->bootstrap->split(members, childRank, childHash, asBytes(info),
                                                                      &child->errors.abortFlag));
    return finishInit(child);
  });
  if (!st.ok() && st.code() != ncclInProgress) {
    commFree(child);
    *out = nullptr;
  }
  return st;
}

uint64_t childHashOf(ncclComm* parent, int color) {
  uint64_t h = parent->peers.commHash ^ (uint64_t(uint32_t(color)) * 0x9e3779b97f4a7c15ull);
  h ^= (++parent->splitCount) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}
}  // namespace

Status commSplit(ncclComm* parent, int color, int key, ncclComm** out, const CommConfig& cfg) {
  *out = nullptr;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) return InvalidArgument("invalid color %d", color);
  std::vector<SplitEntry> all(parent->nranks);
  all[parent->rank] = {color, key};
  SNCCL_TRY(parent->bootstrap->allGather(all.data(), sizeof(SplitEntry)));
  uint64_t childHash = childHashOf(parent, color);  // every rank advances splitCount
  if (color == NCCL_SPLIT_NOCOLOR) return OkStatus();
  std::vector<int> members;
  for (int r = 0; r < parent->nranks; ++r)
    if (all[r].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  int childRank = int(std::find(members.begin(), members.end(), parent->rank) - members.begin());
  return makeChild(parent, std::move(members), childRank, childHash, cfg, out);
}

Status commShrink(ncclComm* parent, const int* exclude, int excludeCount, ncclComm** out, const CommConfig& cfg,
                  int flags) {
  *out = nullptr;
  std::vector<bool> excluded(parent->nranks, false);
  for (int i = 0; i < excludeCount; ++i) {
    if (exclude[i] < 0 || exclude[i] >= parent->nranks)
      return InvalidArgument("excludeRanksList[%d] = %d is not a rank of the communicator (nranks %d)", i,
                             exclude[i], parent->nranks);
    excluded[exclude[i]] = true;
  }
  if (excluded[parent->rank]) return InvalidArgument("rank %d is in its own exclude list", parent->rank);
  if (flags & NCCL_SHRINK_ABORT) {
    // Stop the parent's in-flight work first; its connections are poisoned for good.
    commSetError(parent, RemoteError("rank %d: communicator shrunk with NCCL_SHRINK_ABORT", parent->rank));
  }
  std::vector<int> members;
  for (int r = 0; r < parent->nranks; ++r)
    if (!excluded[r]) members.push_back(r);
  int childRank = int(std::find(members.begin(), members.end(), parent->rank) - members.begin());
  // Survivors agree on the hash without talking: derive it from the member list.
  uint64_t h = parent->peers.commHash;
  for (int m : members) h = (h ^ uint64_t(m)) * 0x100000001b3ull;
  return makeChild(parent, std::move(members), childRank, h ^ 0x5348524e4bull, cfg, out);
}

}  // namespace snccl
