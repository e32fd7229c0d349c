// The algorithm table. A new algorithm is its file under <family>/ plus one line here.
// The first entry listed for a collective is its fallback: the selector (tuning/) picks
// among all entries per call, and uses the first where the model has no prediction.
#include <cstring>

#include "collectives/algorithm.h"

namespace snccl {

// Generators, one per file under ring/, tree/, hier/, direct/, rd/, mapped/ and p2p/.
Status ringAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status ringBroadcast(const CollArgs&, const ChannelPlan&, Schedule*);
Status ringReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status ringAllGather(const CollArgs&, const ChannelPlan&, Schedule*);
Status ringReduceScatter(const CollArgs&, const ChannelPlan&, Schedule*);
Status treeAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status treeBroadcast(const CollArgs&, const ChannelPlan&, Schedule*);
Status treeReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status hierAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status directAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status rdAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status flatAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status singleAllReduce(const CollArgs&, const ChannelPlan&, Schedule*);
Status p2pAlltoAll(const CollArgs&, const ChannelPlan&, Schedule*);
Status p2pGather(const CollArgs&, const ChannelPlan&, Schedule*);
Status p2pScatter(const CollArgs&, const ChannelPlan&, Schedule*);

namespace {

constexpr AlgorithmDef kAlgorithms[] = {
    {"ring", "ring", CollKind::kAllReduce,
     "ring reduce-scatter then all-gather, pipelined in chunks; bandwidth-optimal", ringAllReduce},
    {"ring", "ring", CollKind::kBroadcast, "pipelined chain from the root along the ring", ringBroadcast},
    {"ring", "ring", CollKind::kReduce, "pipelined chain along the ring, summing into the root", ringReduce},
    {"ring", "ring", CollKind::kAllGather, "each rank's block travels once around the ring, pipelined",
     ringAllGather},
    {"ring", "ring", CollKind::kReduceScatter, "blocks summed along the ring, each ending at its owner",
     ringReduceScatter},
    {"tree", "tree", CollKind::kAllReduce,
     "double binary tree: each half reduced up and broadcast down one of two trees, pipelined", treeAllReduce},
    {"tree", "tree", CollKind::kBroadcast, "pipelined binary tree from the root; log2(n) hops per chunk",
     treeBroadcast},
    {"tree", "tree", CollKind::kReduce, "pipelined binary tree summing into the root; log2(n) hops per chunk",
     treeReduce},
    {"hier", "hierarchical", CollKind::kAllReduce,
     "per node reduce-scatter, ring allreduce across nodes per local rank, all-gather; uneven nodes: as many "
     "rails as the smallest node has ranks",
     hierAllReduce},
    {"direct", "direct", CollKind::kAllReduce,
     "2 ranks: exchange whole inputs, one message latency; 3-8: direct reduce-scatter + all-gather, two; small "
     "messages",
     directAllReduce, 8},
    {"rd", "rd", CollKind::kAllReduce,
     "recursive doubling: log2(n) rounds exchanging whole vectors (non-powers of 2 fold in/out); small messages",
     rdAllReduce},
    {"flat", "direct", CollKind::kAllReduce,
     "every rank sends its whole input to every other and folds the n inputs in rank order: one message "
     "latency for any n, n-1 copies sent per rank; tiny messages, nodes with more ranks than CPUs",
     flatAllReduce, 16},
    {"single", "mapped", CollKind::kAllReduce,
     "single copy: rank r folds block r of every rank's input and writes it into every output, reading and "
     "writing peers' buffers directly (2N bytes touched per rank); ranks of one node that map each other's "
     "buffers, at least SNCCL_SINGLE_COPY_BYTES",
     singleAllReduce, 0, /*readsPeers=*/true},
    {"p2p", "p2p", CollKind::kAlltoAll, "direct send/recv with every peer, one lane per peer and direction",
     p2pAlltoAll},
    {"p2p", "p2p", CollKind::kGather, "every rank sends to the root, which receives on a lane per peer",
     p2pGather},
    {"p2p", "p2p", CollKind::kScatter, "the root sends each rank its block on a lane per peer", p2pScatter},
};

}  // namespace

std::span<const AlgorithmDef> algorithms() { return kAlgorithms; }

const AlgorithmDef* defaultAlgorithm(CollKind coll) {
  for (const AlgorithmDef& a : kAlgorithms) {
    if (a.coll == coll) return &a;
  }
  return nullptr;
}

const AlgorithmDef* findAlgorithm(CollKind coll, const char* name) {
  if (name == nullptr) return nullptr;
  for (const AlgorithmDef& a : kAlgorithms) {
    if (a.coll == coll && std::strcmp(a.name, name) == 0) return &a;
  }
  return nullptr;
}

}  // namespace snccl
