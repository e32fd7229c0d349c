// Formulas of the cost model, one per (algorithm name, collective); see cost_model.h for
// the unit (a step moves one chunk through a rank) and docs/algorithms.md for a table.
//
// Notation: n ranks, N nodes, L ranks per node, B bytes, c chunk bytes,
// t(c) = lat + c/bw (a dependent hop), s(c) = c/bw (a pipelined step),
// C(x) = ceil(x / c) chunks of a block of x bytes, each of min(c, x) bytes.
#include "collectives/tuning/cost_model.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace snccl::tuning {

const char* linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kLocal: return "local";
    case LinkClass::kShm: return "shm";
    case LinkClass::kNet: return "net";
    case LinkClass::kCount: break;
  }
  return "?";
}

// Host constants, fitted to measurements on a 2-CPU virtual machine:
//  * shm (np=2 processes): a one-hop AllReduce of 8 B to
//    1 KiB takes 1.1-2.3 us, so ~2 us per dependent step; 128 KiB-4 MiB run at 10-12.8
//    GB/s bus bandwidth (in cache), 7 GB/s from 16 MiB on: 10 GB/s per step.
//  * local (threads of one process): the same copies without the shared segment's
//    second copy for large buffers and with cheaper wake-ups: 1 us, 12 GB/s.
//  * net (TCP sockets over loopback / veth between network namespaces): the waiting rank
//    drives its sockets itself, so a small message costs a write and a read on each side
//    plus the kernel's TCP path: 8 B AllReduce over veth 17-24 us, one hop over loopback
//    ~20 us (perf/calibrate, `direct` at 2 ranks on 2 nodes). With reno
//    (SNCCL_SOCKET_CC) and 512 KiB slots (SNCCL_NET_BUFFSIZE) every algorithm moves 1-64
//    MiB at 2.7-3.3 GB/s bus bandwidth between two namespaces (medians of 3
//    rounds per algorithm: 1 MiB 317-387 us, 64 MiB 21-24 ms); with bbr and 128 KiB slots
//    it was 1.5-2 GB/s: 18 us, 3.2 GB/s.
//    perf/calibrate compares these with measurements (docs/algorithms.md).
//  * switchUs: 4 and 8 processes on 2 CPUs: a small
//    AllReduce by recursive doubling takes ~10 us per round at 2 ranks per CPU and ~25 us
//    at 4: about 5 us per rank per CPU and hop.
ModelParams hostDefaults() {
  ModelParams p;
  p.switchUs = 5.0;
  p.channelUs = 1.0;
  p.of(LinkClass::kLocal) = {1.0, 12.0};
  p.of(LinkClass::kShm) = {2.0, 10.0};
  // Two channels over TCP measured 5-20% above one at 1-64 MiB in 6 of 7 interleaved
  // rounds (2 ranks on 2 namespaces): the kernel moves one channel's
  // bytes while the rank serves the other. Four were no better than two.
  p.of(LinkClass::kNet) = {18.0, 3.2, 0.0, 2};
  p.name = "host";
  return p;
}

ModelParams effectiveParams(const CommShape& shape, const ModelParams& params) {
  if (shape.oversub <= 1.0) return params;
  ModelParams p = params;
  for (LinkParams& l : p.link) {
    l.latUs += params.switchUs * shape.oversub;
    l.bwGBps /= shape.oversub;
  }
  return p;
}

CommShape shapeFromHosts(int nranks, std::span<const uint64_t> hosts, std::span<const uint64_t> procs,
                         std::span<const int> cpus) {
  CommShape s;
  s.nranks = std::max(nranks, 1);
  s.minPerNode = s.maxPerNode = s.nranks;
  s.intra = LinkClass::kShm;
  const bool haveHosts = hosts.size() == size_t(s.nranks);
  const bool haveProcs = procs.size() == size_t(s.nranks);
  if (!haveHosts && !haveProcs) {
    if (cpus.size() == size_t(s.nranks) && cpus[0] > 0) s.oversub = std::max(1.0, double(s.nranks) / cpus[0]);
    return s;
  }
  // node of each rank, by first appearance (the same on every rank: same table)
  std::unordered_map<uint64_t, int> nodeOf;
  std::vector<int> node(size_t(s.nranks), 0), size;
  std::vector<uint64_t> proc;  // the process of each node's first rank
  bool oneProcPerNode = haveProcs;
  for (int r = 0; r < s.nranks; ++r) {
    const uint64_t h = haveHosts ? hosts[size_t(r)] : 0;
    auto [it, fresh] = nodeOf.try_emplace(h, int(size.size()));
    if (fresh) {
      size.push_back(0);
      proc.push_back(haveProcs ? procs[size_t(r)] : 0);
    }
    node[size_t(r)] = it->second;
    ++size[size_t(it->second)];
    if (haveProcs && procs[size_t(r)] != proc[size_t(it->second)]) oneProcPerNode = false;
  }
  s.nnodes = int(size.size());
  if (cpus.size() == size_t(s.nranks))
    for (int r = 0; r < s.nranks; ++r)
      if (cpus[size_t(r)] > 0)
        s.oversub = std::max(s.oversub, double(size[size_t(node[size_t(r)])]) / cpus[size_t(r)]);
  s.minPerNode = *std::min_element(size.begin(), size.end());
  s.maxPerNode = *std::max_element(size.begin(), size.end());
  s.intra = oneProcPerNode ? LinkClass::kLocal : LinkClass::kShm;
  return s;
}

CommShape evenShape(int nranks, int nnodes, LinkClass intra) {
  CommShape s;
  s.nranks = std::max(nranks, 1);
  s.nnodes = std::clamp(nnodes, 1, s.nranks);
  s.minPerNode = s.nranks / s.nnodes;
  s.maxPerNode = s.minPerNode + (s.nranks % s.nnodes != 0 ? 1 : 0);
  s.intra = intra;
  return s;
}

namespace {

struct Ctx {
  const CommShape& sh;
  size_t bytes;
  size_t chunk;
  const ModelParams& p;
};

double ceilDiv(double a, double b) { return std::ceil(a / b); }
int log2Ceil(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

// A block of x bytes cut into chunks: how many, and the size of one.
struct Chunks {
  double count, bytes;
};
Chunks chunksOf(double x, size_t chunk) {
  if (x <= 0) return {0, 0};
  const double c = std::min(x, double(chunk));
  return {ceilDiv(x, c), c};
}

double hop(const LinkParams& l, double c) { return l.latUs + c / (l.bwGBps * 1e3); }  // us; GB/s = 1e3 B/us
double step(const LinkParams& l, double c) { return c / (l.bwGBps * 1e3); }

// Latency of one ring hop on average: the ring crosses a node boundary N times in n hops
// (as NCCL's (nsteps - nInter) x intraLat + nInter x interLat).
double ringHopLat(const Ctx& x) {
  const double inter = x.sh.nnodes > 1 ? double(x.sh.nnodes) / x.sh.nranks : 0.0;
  return inter * x.p.of(x.sh.inter).latUs + (1 - inter) * x.p.of(x.sh.intra).latUs;
}

// Ring AllReduce: per chunk index, 2(n-1) dependent steps around the ring; the copy time
// of a step is set by the slowest link (the ring moves in lockstep).
double ringAllReduce(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const Chunks k = chunksOf(double(x.bytes) / n, x.chunk);
  return 2.0 * (n - 1) * k.count * (ringHopLat(x) + step(x.p.of(x.sh.worst()), k.bytes));
}

// Ring AllGather / ReduceScatter of a per-rank block of B bytes: n-1 dependent steps.
double ringGatherLike(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  return double(n - 1) * k.count * (ringHopLat(x) + step(x.p.of(x.sh.worst()), k.bytes));
}

// Ring Broadcast / Reduce: a chain of n-1 hops, chunks pipelined one step apart.
double ringChain(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  const LinkParams& l = x.p.of(x.sh.worst());
  return (n - 1) * (ringHopLat(x) + step(l, k.bytes)) + std::max(0.0, k.count - 1) * step(l, k.bytes);
}

// Tree Broadcast / Reduce: depth ceil(log2 n); an inner rank handles each chunk twice.
double treeRooted(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  const LinkParams& l = x.p.of(x.sh.worst());
  return log2Ceil(n) * hop(l, k.bytes) + 2.0 * std::max(0.0, k.count - 1) * step(l, k.bytes);
}

// Double binary tree AllReduce (tree/allreduce.cc): both trees share one lane per rank
// and follow a tick timeline; a chunk enters each tree every other tick and the last one
// leaves 2 x depth ticks later, so the call takes 2C + 2 depth ticks (C chunks per half).
// Every tick waits for a message of the previous one (a latency) and a rank that is inner
// in one tree and a leaf in the other runs about 6 steps per 2 ticks (2 up and 2 down as
// an inner node, 1 up and 1 down as a leaf): 3 steps per tick. sn_sim's simulation of the
// generated schedules agrees within tens of percent on one node (docs/algorithms.md).
double treeAllReduce(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const Chunks k = chunksOf(double(x.bytes) / 2, x.chunk);
  const LinkParams& l = x.p.of(x.sh.worst());
  return (2.0 * k.count + 2.0 * log2Ceil(n)) * (l.latUs + 3.0 * step(l, k.bytes));
}

// Hierarchical AllReduce: ring reduce-scatter inside the node (L-1 steps per chunk), ring
// AllReduce of 1/L of the data across the N nodes per rail (2(N-1)), ring all-gather
// inside the node (L-1). Uneven nodes: the largest node sets the local phases and the
// smallest the rail block (its ranks carry B / minPerNode each).
double hierAllReduce(const Ctx& x) {
  const int N = x.sh.nnodes, L = x.sh.maxPerNode, Lmin = x.sh.minPerNode;
  if (x.sh.nranks == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  double t = 0;
  if (L > 1) {
    const Chunks k = chunksOf(double(x.bytes) / L, x.chunk);
    t += 2.0 * (L - 1) * k.count * hop(x.p.of(x.sh.intra), k.bytes);
  }
  if (N > 1) {
    const Chunks k = chunksOf(double(x.bytes) / Lmin / N, x.chunk);
    t += 2.0 * (N - 1) * k.count * hop(x.p.of(x.sh.inter), k.bytes);
  }
  return t;
}

// Latencies one all-to-all exchange costs (every rank waits for every other; flat has one,
// direct two): one, but on a node with more ranks than CPUs every rank must be scheduled
// twice (to send, then to fold), measured as one latency at 2 ranks per CPU and two at 4
// (flatAllReduce below).
double exchangeLatencies(const CommShape& sh) { return std::max(1.0, sh.oversub / 2.0); }

// Direct AllReduce (direct/allreduce.cc; registered for at most 8 ranks; modelled inside
// one node, or 2 ranks anywhere). 2 ranks: each sends its whole input to the other and
// reduces: one latency and one step's copy per chunk (perf/calibrate measures the 2-rank
// direct at or above the ring's busbw for large sizes, as this predicts). n >= 3: a direct reduce-scatter (send block b
// to its owner, the owner reduces n-1 blocks) then a direct all-gather: two latencies,
// 4(n-1) steps per chunk of a B/n block.
double directAllReduce(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n > 8 || (n > 2 && x.sh.nnodes > 1)) return -1;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const LinkParams& l = x.p.of(x.sh.worst());
  // One lane per rank that sends a chunk, then receives the peers' chunk: every chunk
  // waits for a message, so the latency is paid per chunk.
  if (n == 2) {  // both ranks copy into the slot at once; the receive-reduce is the cost
    const Chunks k = chunksOf(double(x.bytes), x.chunk);
    return k.count * (l.latUs + step(l, k.bytes));
  }
  const Chunks k = chunksOf(double(x.bytes) / n, x.chunk);
  // Two exchanges, each costing what the flat AllReduce's one does on an oversubscribed
  // node (every rank scheduled to send, then to receive): measured 16-22 us at 4 processes
  // on 2 CPUs and 53-87 us at 8 (8 B to 2 KiB), against the 2(n-1)
  // latencies (one per sender) a per-sender model charges, 308 us at 8.
  const double hops = 2.0 * exchangeLatencies(x.sh);
  return k.count * (hops * l.latUs + 4.0 * (n - 1) * step(l, k.bytes));
}

// Recursive doubling: log2(p) rounds (p the largest power of two <= n) exchanging the
// whole vector (a send and a receive-reduce per chunk, each chunk waiting for the
// partner's: a latency per chunk), plus a fold-in and a fold-out
// round when n is not a power of two. Round k pairs ranks 2^k apart in ring order: inside
// a node while 2^k < ranks per node (uniform nodes), across nodes after.
double rdAllReduce(const Ctx& x) {
  const int n = x.sh.nranks;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  int lg = 0;
  while ((2 << lg) <= n) ++lg;
  const int p = 1 << lg;
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  auto round = [&](LinkClass c) {  // per chunk: send, then receive-reduce the partner's
    const LinkParams& l = x.p.of(c);
    return k.count * (l.latUs + 2.0 * step(l, k.bytes));
  };
  const int L = x.sh.uniform() ? x.sh.minPerNode : 1;
  double t = 0;
  for (int r = 0; r < lg; ++r) t += round(x.sh.nnodes > 1 && (1 << r) >= L ? x.sh.inter : x.sh.intra);
  if (p != n) t += 2.0 * round(x.sh.worst());
  return t;
}

// Flat AllReduce (direct/allreduce_flat.cc; one node): per chunk every rank sends it to
// the n-1 others and folds the n-1 it receives: one latency and 2(n-1) steps. On a node
// with more ranks than CPUs the one exchange still needs every rank scheduled twice (to
// send, then to fold): measured 4 and 8 processes on 2 CPUs (8 B
// to 2 KiB, medians of 3), 11-13 us and 40-50 us, one latency at 2 ranks per CPU and
// two at 4; recursive doubling took 19-20 and 71-85 us there (its log2(n) latencies).
double flatAllReduce(const Ctx& x) {
  const int n = x.sh.nranks;
  if (x.sh.nnodes > 1) return -1;
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  const LinkParams& l = x.p.of(x.sh.worst());
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  return k.count * (exchangeLatencies(x.sh) * l.latUs + 2.0 * (n - 1) * step(l, k.bytes));
}

// What a rank touches per byte of data through the ring AllReduce at 2 ranks, where the
// link constants were measured: every byte is copied into a slot by its sender and out of
// it, with the receiver's own operand, by its receiver (core/mapped_allreduce.cc), about
// 4.5 bytes read or written, in the B/bw the ring formula charges for B bytes.
constexpr double kRingTouchedPerByte = 4.5;

// Single-copy AllReduce (mapped/allreduce_single.cc): three rounds of small messages with
// every peer (describe, verdict, done: core/mapped_allreduce.cc), each costing what the
// flat AllReduce's one exchange does, then rank r folds block r of all n inputs and writes
// it into all n outputs: 2B bytes touched per rank whatever n (B read, B written), at the
// rate the ring touches them, 2B / (4.5 bw). Against the ring's ~2B/bw and the 2-rank
// direct's lat + B/bw, it wins from tens of KiB (shm: ~70 KiB at 2 ranks), below
// SNCCL_SINGLE_COPY_BYTES's default (kSingleCopyDefaultBytes).
double singleAllReduce(const Ctx& x) {
  if (!singleCopyApplies(x.sh, x.bytes)) return -1;
  const LinkParams& l = x.p.of(x.sh.intra);
  return 3.0 * exchangeLatencies(x.sh) * l.latUs + 2.0 * double(x.bytes) / (kRingTouchedPerByte * l.bwGBps * 1e3);
}

// p2p AlltoAll: every rank sends and receives n-1 blocks of B bytes, independently.
double p2pAlltoAll(const Ctx& x) {
  const int n = x.sh.nranks;
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  const LinkParams& l = x.p.of(x.sh.worst());
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  return l.latUs + 2.0 * (n - 1) * k.count * step(l, k.bytes);
}

// p2p Gather / Scatter: the root handles n-1 blocks.
double p2pRooted(const Ctx& x) {
  const int n = x.sh.nranks;
  const Chunks k = chunksOf(double(x.bytes), x.chunk);
  const LinkParams& l = x.p.of(x.sh.worst());
  if (n == 1) return step(x.p.of(LinkClass::kLocal), double(x.bytes));
  return l.latUs + double(n - 1) * k.count * step(l, k.bytes);
}

struct Formula {
  const char* name;
  CollKind coll;
  double (*fn)(const Ctx&);
};

constexpr Formula kFormulas[] = {
    {"ring", CollKind::kAllReduce, ringAllReduce},
    {"ring", CollKind::kAllGather, ringGatherLike},
    {"ring", CollKind::kReduceScatter, ringGatherLike},
    {"ring", CollKind::kBroadcast, ringChain},
    {"ring", CollKind::kReduce, ringChain},
    {"tree", CollKind::kAllReduce, treeAllReduce},
    {"tree", CollKind::kBroadcast, treeRooted},
    {"tree", CollKind::kReduce, treeRooted},
    {"hier", CollKind::kAllReduce, hierAllReduce},
    {"direct", CollKind::kAllReduce, directAllReduce},
    {"rd", CollKind::kAllReduce, rdAllReduce},
    {"flat", CollKind::kAllReduce, flatAllReduce},
    {"single", CollKind::kAllReduce, singleAllReduce},
    {"p2p", CollKind::kAlltoAll, p2pAlltoAll},
    {"p2p", CollKind::kGather, p2pRooted},
    {"p2p", CollKind::kScatter, p2pRooted},
};

const Formula* findFormula(std::string_view name, CollKind coll) {
  for (const Formula& f : kFormulas)
    if (f.coll == coll && name == f.name) return &f;
  return nullptr;
}

}  // namespace

bool hasFormula(std::string_view name, CollKind coll) { return findFormula(name, coll) != nullptr; }

bool singleCopyApplies(const CommShape& shape, size_t bytes) {
  return shape.nnodes == 1 && shape.nranks > 1 && shape.singleCopyBytes > 0 && bytes >= shape.singleCopyBytes;
}

double predictUs(std::string_view name, CollKind coll, const CommShape& shape, size_t bytes, size_t chunkBytes,
                 const ModelParams& params, int channels) {
  const Formula* f = findFormula(name, coll);
  if (f == nullptr || chunkBytes == 0 || channels < 1) return -1;
  if (f->fn == singleAllReduce && (channels != 1 || !singleCopyApplies(shape, bytes))) return -1;  // never split
  if (bytes == 0) return 0;
  ModelParams eff = shape.oversub > 1.0 ? effectiveParams(shape, params) : params;
  const int side = std::min(channels, std::max(1, eff.of(shape.worst()).overlapChannels));
  // Each of the `side` channels gets its share of the link, at most what one channel moves
  // (so one channel alone is held to chanBwGBps too).
  for (LinkParams& l : eff.link) {
    const double one = l.chanBwGBps > 0 ? l.chanBwGBps : l.bwGBps;
    l.bwGBps = std::min(one, l.bwGBps / side);
  }
  const double us = f->fn(Ctx{shape, size_t(std::ceil(double(bytes) / side)), chunkBytes, eff});
  return us < 0 ? us : us + (channels - 1) * eff.channelUs;  // negative: does not apply
}

}  // namespace snccl::tuning
