// The cost model: the predicted time of one call of a registered algorithm, from a
// latency and a bandwidth per link class (threads of one process, processes of one node,
// nodes over the network) and the communicator's node structure.
//
// Unit of work: a *step* of a schedule (schedule.h) moves one chunk of c bytes through a
// rank (copy into a slot, or receive, reduce and forward). A rank runs its steps one after
// the other (the host executor is one thread per rank), so a step costs the rank c / bw;
// a message that another rank waits for arrives `lat` after the step that sent it. With
// C chunks per block the formulas (cost_model.cc, docs/algorithms.md) are of the form
//     time = hops x (lat + c/bw)  +  pipelined steps x c/bw
// where `hops` are the dependent messages of the critical path. Ring steps all depend on
// the previous rank's step, so every ring step pays the latency.
//
// Cross-rank invariant: predictions depend only on their arguments (node structure from
// ChannelPlan::hosts, sizes, parameters), which are identical on every rank of a
// communicator, so every rank predicts the same numbers and picks the same algorithm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "collectives/schedule.h"

namespace snccl::tuning {

// kLocal: ranks that are threads of one process (direct pointers); kShm: processes of one
// node (shared memory; in sn_sim presets: the scale-up fabric, NVLink or UB); kNet: ranks
// on different nodes.
enum class LinkClass : uint8_t { kLocal, kShm, kNet, kCount };
const char* linkClassName(LinkClass c);  // "local", "shm", "net"

struct LinkParams {
  double latUs = 1.0;   // from a step's end on the sender to the message's arrival
  double bwGBps = 1.0;  // bytes a rank moves per second through one step, 1e9 B/s
  // What one channel can move per second (0: one channel can fill bwGBps). On a GPU a
  // channel is one thread block, far below an NVLink's rate.
  double chanBwGBps = 0;
  // How many channels make progress side by side on this link. 1 where the rank's one
  // executor thread copies every byte itself (local, shm): its channels take turns, so
  // more only cost (on shm, 1, 2 and 4 channels give the same busbw within
  // noise). Above 1 where bytes move off that thread (the kernel's TCP stack, a NIC, a
  // GPU's thread blocks): one channel's message latency is hidden behind another's.
  int overlapChannels = 1;
};

struct ModelParams {
  LinkParams link[static_cast<int>(LinkClass::kCount)];
  // Extra latency of a dependent hop per rank per CPU when a node runs more ranks than it
  // has CPUs (CommShape::oversub > 1): the sender of the awaited message must first get a
  // core (effectiveParams).
  double switchUs = 0;
  // Cost of each channel beyond the first (more lanes and connections to serve).
  double channelUs = 0;
  const char* name = "host";  // printed in tables
  const LinkParams& of(LinkClass c) const { return link[static_cast<int>(c)]; }
  LinkParams& of(LinkClass c) { return link[static_cast<int>(c)]; }
};

// The calibrated constants for host memory on this kind of machine (cost_model.cc says
// where they come from). The one place those numbers live.
ModelParams hostDefaults();

// What the model needs to know about a communicator. Derived once at init.
struct CommShape {
  int nranks = 1;
  int nnodes = 1;
  int minPerNode = 1, maxPerNode = 1;  // ranks per node
  LinkClass intra = LinkClass::kShm;   // between ranks of one node (the slowest pair)
  LinkClass inter = LinkClass::kNet;   // between nodes
  // Ranks per CPU on the busiest node (1 when every rank has a core or CPUs are unknown).
  // Above 1, ranks take turns on the cores: see effectiveParams.
  double oversub = 1.0;
  // The ranks map each other's buffers (one node, one process or one PID namespace:
  // CommSingleCopy::mappable), and AllReduces of at least this many bytes may run the single
  // copy ("single", Prim::kPeerFold); 0: never (SNCCL_SINGLE_COPY_BYTES=0, or not mappable).
  size_t singleCopyBytes = 0;
  bool uniform() const { return minPerNode == maxPerNode; }
  // The link class a flat algorithm (ring, tree over all ranks) is limited by.
  LinkClass worst() const { return nnodes > 1 ? inter : intra; }
};

// hosts[r]: node identity of rank r (empty: one node); procs[r]: process identity
// (empty or all different: processes). Ranks of a node that all share one process talk
// over kLocal, otherwise kShm. cpus[r]: online CPUs of rank r's host (empty: unknown),
// for CommShape::oversub.
CommShape shapeFromHosts(int nranks, std::span<const uint64_t> hosts, std::span<const uint64_t> procs,
                         std::span<const int> cpus = {});

// The link parameters as an oversubscribed shape sees them: with k = oversub > 1 ranks per
// CPU, a dependent hop waits about k x switchUs more (the sender must be scheduled) and a
// rank moves bytes at 1/k of the link's rate (it has a core a 1/k of the time). Identity
// when oversub <= 1.
ModelParams effectiveParams(const CommShape& shape, const ModelParams& params);
// nranks spread over nnodes nodes in contiguous blocks (the first nranks % nnodes nodes
// get one rank more), with the given intra-node class. For sn_info and sn_sim.
CommShape evenShape(int nranks, int nnodes, LinkClass intra);

// Predicted microseconds of algorithm `name` (AlgorithmDef::name) for `coll` moving
// `bytes` (NCCL's count x element size: per rank for AllGather, ReduceScatter, AlltoAll,
// Gather and Scatter) in chunks of at most `chunkBytes`, split over `channels` channels.
// Negative when the model has no formula for that algorithm or it does not apply to the
// shape (e.g. direct across nodes).
//
// Channels: k = min(channels, overlapChannels of the link the shape is limited by,
// CommShape::worst()) of them run side by side, each with bytes / k and the same formula
// at min(chanBwGBps, bwGBps / k) per link (they share what the rank can move); every
// channel beyond the first adds channelUs. So channels pay off where one cannot fill a
// link (chanBwGBps < bwGBps) or where their hops' latencies overlap (the network); with
// k = 1 (one node of host ranks) they only cost and the model keeps 1.
double predictUs(std::string_view name, CollKind coll, const CommShape& shape, size_t bytes, size_t chunkBytes,
                 const ModelParams& params, int channels = 1);

// Whether the single-copy AllReduce applies to `bytes` on this shape: one node of at least
// 2 ranks that map each other's buffers, at or above shape.singleCopyBytes. Where it does
// not, predictUs("single", ...) is negative and the selector does not offer it.
bool singleCopyApplies(const CommShape& shape, size_t bytes);
// SNCCL_SINGLE_COPY_BYTES's default: from this size on the single copy was measured
// faster than the rings on the build VMs, and its formula predicts it faster on every
// one-node shape. A threshold set below it is the user's own crossover and the selector
// honours it (selector.h).
constexpr size_t kSingleCopyDefaultBytes = size_t(128) << 10;

// True when the model has a formula for (name, coll).
bool hasFormula(std::string_view name, CollKind coll);

}  // namespace snccl::tuning
