// sn_sim's fabric model: a flow-level model of a two-level leaf-spine fabric, for asking
// how much of the NICs' bandwidth a collective's traffic gets when flows hash onto paths
// (ECMP), when switches route adaptively, and when each connection spreads over several
// paths of its own (snccl's multipath sockets). No data moves and no packet is modelled:
// every link has capacity 1 (a NIC's rate), and the flows sharing a link get max-min fair
// rates, as long-lived TCP or RoCE flows roughly do.
//
// Fabric. `nodes` nodes of `rails` NICs each. A leaf switch has radix/2 ports down (NICs)
// and radix/2 up, one to each of radix/2 spines: no oversubscription, and every pair of
// leaves is joined through every spine. Rail-optimised: NIC r of every node hangs off the
// leaves of rail r (radix/2 nodes per leaf); fat tree: a node's NICs sit side by side on
// the leaves in NIC order. A spine here is a plane with a link to every leaf, so large
// fabrics need no third level (real spines have a finite radix; the model does not).
//
// Connections and paths. A connection (one NIC to another) inside a leaf crosses the
// sender's and receiver's NIC links only; between leaves it also crosses the spines, up
// and down:
//  - ECMP: each subflow on one spine, from a hash of the subflow (a fixed random choice);
//  - adaptive: the switches spray the flow's packets over every spine equally (adaptive
//    routing as RoCE fabrics built for AI do it, the receiving NIC restoring the order):
//    the flow puts 1/spines of its rate on each spine's links.
// A connection of `subflows` > 1 under ECMP is snccl's multipath: that many sockets, each
// its own subflow hashed onto its own spine, and the sender's chunk scheduler keeps every
// one busy, so the connection moves the sum of its subflows' rates. Under adaptive routing
// a connection is already spread over every spine; more subflows change nothing.
//
// Traffic.
//  - ring: the flat ring AllReduce over every rank in rank order, one channel per rail:
//    channel c leaves node i from NIC c and enters node i+1 at NIC (c + 1) mod rails,
//    so its inter-node hops cross rails;
//  - hier: the hierarchical AllReduce's inter-node phase: per rail, a ring of the nodes'
//    NICs on that rail (the intra-node phases do not touch the fabric);
//  - alltoall: rail-aligned AllToAll as shift phases (NIC r of node i to NIC r of node
//    i+s), run one after the other; `phases` shifts are sampled (all when there are
//    fewer).
// A ring moves at the rate of its slowest hop: it is a pipeline. So a ring's rate is the
// smallest of its hops' rates, and a hop faster than its ring is capped at the ring's rate,
// leaving the rest to other flows (max-min fairness with demands, iterated until no cap
// changes). An AllToAll phase is measured by its throughput: the sum of its connections'
// rates when all run, over the NICs' sum. With `completion`, by its duration instead: it
// ends when its last connection does, and connections that finish early free their links
// for the rest (event by event, so it costs a rate solve per completion: slow at 1024
// nodes).
//
// Placement. `random` places the logical nodes of the job on random physical nodes (what
// a scheduler gives a job on a shared cluster); `packed`: node i on node i.
//
// Utilisation: what the NICs moved over what they could have moved at their rate (rings:
// the sum of the ring rates over one NIC rate per ring; AllToAll: the phases' throughput,
// or their ideal time over their modelled time with `completion`); 1.0 means every NIC was
// kept busy.
#pragma once

#include <cstdint>
#include <string>

#include "common/status.h"

namespace snccl::sim::fabric {

enum class Topology { kRailOptimized, kFatTree };
enum class Routing { kEcmp, kAdaptive };
enum class Pattern { kRing, kHier, kAllToAll };

struct FabricSpec {
  Topology topology = Topology::kRailOptimized;
  int nodes = 32;
  int rails = 8;   // NICs per node (one per rank)
  int radix = 64;  // leaf ports
};

struct RunSpec {
  Pattern pattern = Pattern::kHier;
  Routing routing = Routing::kEcmp;
  int subflows = 1;  // paths per connection (snccl multipath); 1: one flow
  bool randomPlacement = true;
  uint64_t seed = 1;
  int phases = 16;          // AllToAll: shifts sampled
  bool completion = false;  // AllToAll: the phases' duration, not their throughput
};

struct RunResult {
  double utilisation = 0;
  int connections = 0;  // per ring or phase, over the fabric
  int crossLeaf = 0;    // of those, the ones that cross a spine
};

const char* topologyName(Topology t);
const char* routingName(Routing r);
const char* patternName(Pattern p);

Result<RunResult> run(const FabricSpec& fabric, const RunSpec& spec);

// `sn_sim fabric ...`: the table of utilisation per pattern, routing and node count
// (sn_sim_fabric.cc). argv[0] is "fabric".
int fabricMain(int argc, char** argv);

}  // namespace snccl::sim::fabric
