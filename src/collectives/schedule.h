// Schedule IR: what an algorithm produces and the executor runs.
//
// An algorithm is a pure function (CollArgs, ChannelPlan) -> Schedule for ONE rank. A
// Schedule is a set of lanes; each lane is a list of steps run strictly in order, while
// different lanes progress independently (the executor interleaves them so grouped
// send/recv pairs in any order cannot deadlock). Steps address buffers by index into
// Schedule::bufs and by element offset; they never hold pointers, so the symbolic checker
// can run the schedules of thousands of ranks without moving data.
//
// Cross-rank invariants every generator must keep (the checker enforces them):
//  * Between two ranks, messages travel over one FIFO connection per direction and
//    channel. The k-th send step from a to b on channel c (over all of a's lanes, in the
//    order the executor could issue them) is matched by the k-th receiving step of b from
//    a on channel c, with the same count. Lanes of one rank must therefore not share a
//    (peer, channel, direction) connection.
//  * A message carries at most CollArgs::chunkElems elements (one connection slot).
//  * In a reduction, every input element of every rank enters the result exactly once,
//    and exactly one step per output element is marked `final` on the rank that completes
//    it (there the executor applies the op's post-processing, e.g. Avg's divide).
//  * In-place calls alias Input and Output as NCCL defines it; a generator must read an
//    input element before any step overwrites the aliased output element.
//  * A PeerFold step (the single copy) is a rank's only step: every rank of the call runs
//    one, between two barriers, on ranges that do not overlap across ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace snccl {

enum class CollKind : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSendRecv,  // grouped ncclSend/ncclRecv
  kCount
};
const char* collName(CollKind kind);  // "AllReduce", ...

enum class BufRole : uint8_t { kInput, kOutput, kScratch };

struct BufDesc {
  BufRole role;
  size_t elems;  // size in elements; the executor checks user buffers are this large
};

enum class Prim : uint8_t {
  kSend,                // src -> connection(sendPeer)
  kRecv,                // connection(recvPeer) -> dst
  kRecvReduceSend,      // connection(recvPeer) (+) src -> connection(sendPeer)
  kRecvReduceCopy,      // connection(recvPeer) (+) src -> dst
  kRecvReduceCopySend,  // connection(recvPeer) (+) src -> dst and -> connection(sendPeer)
  kRecvCopySend,        // connection(recvPeer) -> dst and -> connection(sendPeer)
  kCopy,                // src -> dst, local
  kLocalReduce,         // dst (+) src -> dst, local (two operands a rank holds itself)
  // src of every rank, folded in rank order (x0 (+) x1 (+) ...), -> dst of every rank: the
  // rank reads its peers' buffers and writes into theirs directly (mapped memory, no
  // connection). The same range on every rank; every rank of the call runs exactly one
  // such step, all of them between two barriers (every rank enters before any reads a
  // peer, none returns before every fold is written: core/mapped_allreduce.cc), so the
  // ranges folded by different ranks must not overlap. count may be 0: a rank with no
  // range still takes part (its buffers are read and written by the others).
  kPeerFold,
};
const char* primName(Prim p);

// What each prim touches: the connection it reads, the one it writes, the local operand
// it reads (src), the local buffer it stores to (dst), and whether it reads dst first.
inline bool primReceives(Prim p) {
  return p != Prim::kSend && p != Prim::kCopy && p != Prim::kLocalReduce && p != Prim::kPeerFold;
}
inline bool primSends(Prim p) {
  return p == Prim::kSend || p == Prim::kRecvReduceSend || p == Prim::kRecvReduceCopySend ||
         p == Prim::kRecvCopySend;
}
inline bool primReadsSrc(Prim p) { return p != Prim::kRecv && p != Prim::kRecvCopySend; }
inline bool primWritesDst(Prim p) { return p != Prim::kSend && p != Prim::kRecvReduceSend; }
inline bool primReadsDst(Prim p) { return p == Prim::kLocalReduce; }

struct BufRef {
  uint16_t buf = 0;   // index into Schedule::bufs
  size_t offset = 0;  // in elements
};

struct Step {
  Prim prim;
  bool final = false;  // this step produces final reduced values (see invariants)
  int32_t sendPeer = -1;
  int32_t recvPeer = -1;
  BufRef src;  // used by kSend, kCopy and the reducing prims
  BufRef dst;  // used by prims that store locally
  size_t count = 0;  // elements; 0 < count <= chunkElems for prims that touch a connection
  // The channel whose connections the step uses: a (peer, channel, direction) is one FIFO
  // connection. Generators emit channel 0; generateSchedule() (channels.h) numbers parts.
  uint8_t channel = 0;
};

struct Lane {
  std::vector<Step> steps;
};

struct Schedule {
  CollKind coll = CollKind::kCount;
  bool reduces = false;  // a reduction: Input operands get the op's pre-scaling (PreMulSum)
  std::vector<BufDesc> bufs;
  std::vector<Lane> lanes;

  void clear() {
    bufs.clear();
    lanes.clear();
  }
};

// Conventional buffer indices of collective schedules (p2p schedules have their own).
constexpr uint16_t kInputBuf = 0;
constexpr uint16_t kOutputBuf = 1;
constexpr uint16_t kScratchBuf = 2;

// How ranks are arranged; later filled by the topology planner.
struct ChannelPlan {
  std::vector<int> ring;  // ring[i] = rank at ring position i; empty = identity order
  // hosts[r] = host hash of rank r (ranks with equal hashes share a node), for the
  // hierarchical algorithms; empty = unknown, all ranks treated as one node.
  std::vector<uint64_t> hosts;
};

struct CollArgs {
  CollKind coll = CollKind::kAllReduce;
  int rank = 0;
  int nranks = 1;
  size_t count = 0;        // NCCL's count argument (per-rank for AllGather/ReduceScatter/AlltoAll)
  int root = 0;            // Broadcast, Reduce, Gather, Scatter
  size_t chunkElems = 0;   // max elements per message (slot bytes / element size), > 0
  bool inPlace = false;    // input and output alias as NCCL defines in-place
  // Channels the data is split across (channels.h); generators themselves see 1.
  int channels = 1;
  // Incast control of AlltoAll and Gather (p2p/incast.h): the most peers a receiving rank
  // lets send to it at once, each after a grant on channel kGrantChannel; 0: no limit.
  int incastSenders = 0;
};

// The most channels one call uses (connections per peer and direction).
inline constexpr int kMaxChannels = 16;

// One grouped point-to-point operation of this rank (ncclSend / ncclRecv).
struct P2POp {
  bool isSend;
  int peer;
  size_t count;  // elements
};

}  // namespace snccl
