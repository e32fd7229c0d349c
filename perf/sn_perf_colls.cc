// The collectives of the sn_*_perf tools (see sn_perf_colls.h). Counts, factors and
// in-place layouts follow nccl-tests 2.19 so that rows line up with its tables.
#include "sn_perf_colls.h"

#include <cstring>

namespace snperf {

namespace {

size_t typeSizeOf(ncclDataType_t dt) { return size_t(typeDesc(dt).size); }
const char* at(const void* base, size_t elems, ncclDataType_t dt) {
  return static_cast<const char*>(base) + elems * typeSizeOf(dt);
}
char* at(void* base, size_t elems, ncclDataType_t dt) { return static_cast<char*>(base) + elems * typeSizeOf(dt); }

double one(int) { return 1.0; }
double ranks(int n) { return double(n); }
double ranksMinusOne(int n) { return double(n - 1); }
double ringShare(int n) { return double(n - 1) / n; }
double allReduceShare(int n) { return 2.0 * (n - 1) / n; }
int oneStep(int) { return 1; }

// Whole-buffer collectives: the size is the count.
Counts flatCounts(size_t bytes, size_t ts, int) {
  size_t c = bytes / ts;
  return {c, c, c, 0, 0};
}
// Per-rank blocks, the send side holding all n of them (ReduceScatter, Scatter).
Counts splitCounts(size_t bytes, size_t ts, int n) {
  size_t pc = bytes / (size_t(n) * ts);
  return {pc * n, pc, pc, 0, pc};
}
// Per-rank blocks, the receive side holding all n (Gather).
Counts joinCounts(size_t bytes, size_t ts, int n) {
  size_t pc = bytes / (size_t(n) * ts);
  return {pc, pc * n, pc, pc, 0};
}
// AllGather (and hypercube): per-rank blocks rounded down to 16 bytes, as nccl-tests does.
Counts gatherAllCounts(size_t bytes, size_t ts, int n) {
  size_t pc = (bytes / size_t(n)) / 16 * 16 / ts;
  return {pc, pc * n, pc, pc, 0};
}
Counts allToAllCounts(size_t bytes, size_t ts, int n) {
  size_t pc = bytes / (size_t(n) * ts);
  return {pc * n, pc * n, pc, 0, 0};
}

void reducedAll(int, int, int, const Counts& c, std::vector<OutBlock>* out) { out->push_back({0, c.recv, -1, 0}); }
void reducedAtRoot(int rank, int, int root, const Counts& c, std::vector<OutBlock>* out) {
  if (rank == root) out->push_back({0, c.recv, -1, 0});
}
void reducedBlock(int rank, int, int, const Counts& c, std::vector<OutBlock>* out) {
  out->push_back({0, c.param, -1, size_t(rank) * c.param});
}
void everyBlock(int, int n, int, const Counts& c, std::vector<OutBlock>* out) {
  for (int b = 0; b < n; ++b) out->push_back({size_t(b) * c.param, c.param, b, 0});
}
void everyBlockAtRoot(int rank, int n, int root, const Counts& c, std::vector<OutBlock>* out) {
  if (rank == root) everyBlock(rank, n, root, c, out);
}
void rootsBuffer(int, int, int root, const Counts& c, std::vector<OutBlock>* out) {
  out->push_back({0, c.recv, root, 0});
}
void rootsBlock(int rank, int, int root, const Counts& c, std::vector<OutBlock>* out) {
  out->push_back({0, c.param, root, size_t(rank) * c.param});
}
void blockFromEach(int rank, int n, int, const Counts& c, std::vector<OutBlock>* out) {
  for (int b = 0; b < n; ++b) out->push_back({size_t(b) * c.param, c.param, b, size_t(rank) * c.param});
}
void fromPrevious(int rank, int n, int, const Counts& c, std::vector<OutBlock>* out) {
  out->push_back({0, c.recv, (rank - 1 + n) % n, 0});
}

ncclResult_t issueAllReduce(const IssueArgs& a) {
  return ncclAllReduce(a.send, a.recv, a.count, a.dt, a.op, a.comm, a.stream);
}
ncclResult_t issueAllGather(const IssueArgs& a) { return ncclAllGather(a.send, a.recv, a.count, a.dt, a.comm, a.stream); }
ncclResult_t issueReduceScatter(const IssueArgs& a) {
  return ncclReduceScatter(a.send, a.recv, a.count, a.dt, a.op, a.comm, a.stream);
}
ncclResult_t issueBroadcast(const IssueArgs& a) {
  return ncclBroadcast(a.send, a.recv, a.count, a.dt, a.root, a.comm, a.stream);
}
ncclResult_t issueReduce(const IssueArgs& a) {
  return ncclReduce(a.send, a.recv, a.count, a.dt, a.op, a.root, a.comm, a.stream);
}
ncclResult_t issueAlltoAll(const IssueArgs& a) { return ncclAlltoAll(a.send, a.recv, a.count, a.dt, a.comm, a.stream); }
ncclResult_t issueGather(const IssueArgs& a) {
  return ncclGather(a.send, a.recv, a.count, a.dt, a.root, a.comm, a.stream);
}
ncclResult_t issueScatter(const IssueArgs& a) {
  return ncclScatter(a.send, a.recv, a.count, a.dt, a.root, a.comm, a.stream);
}

// A ring shift: every rank sends to the next and receives from the previous (the caller's
// group pairs the two calls, so no rank waits on an unposted receive).
ncclResult_t issueSendRecv(const IssueArgs& a) {
  ncclResult_t r = ncclSend(a.send, a.count, a.dt, (a.rank + 1) % a.nranks, a.comm, a.stream);
  if (r != ncclSuccess) return r;
  return ncclRecv(a.recv, a.count, a.dt, (a.rank - 1 + a.nranks) % a.nranks, a.comm, a.stream);
}

int hypercubeSteps(int n) {
  int s = 0;
  while ((1 << s) < n) ++s;
  return s > 0 ? s : 1;
}

// An AllGather along the dimensions of a hypercube: in step k each rank swaps, with the
// rank whose number differs in bit k, the 2^k blocks it has gathered so far. Later steps
// send what earlier ones received, hence one group per step.
ncclResult_t issueHypercube(const IssueArgs& a) {
  const size_t own = size_t(a.rank) * a.count;
  if (a.step == 0 && at(a.recv, own, a.dt) != a.send)
    std::memcpy(at(a.recv, own, a.dt), a.send, a.count * typeSizeOf(a.dt));  // out of place
  const int mask = 1 << a.step;
  if (mask >= a.nranks) return ncclSuccess;  // a single rank: nothing to exchange
  const int peer = a.rank ^ mask;
  const size_t mine = size_t(a.rank & ~(mask - 1)) * a.count, theirs = size_t(peer & ~(mask - 1)) * a.count;
  const void* src = a.step == 0 ? a.send : at(static_cast<const void*>(a.recv), mine, a.dt);
  ncclResult_t r = ncclSend(src, size_t(mask) * a.count, a.dt, peer, a.comm, a.stream);
  if (r != ncclSuccess) return r;
  return ncclRecv(at(a.recv, theirs, a.dt), size_t(mask) * a.count, a.dt, peer, a.comm, a.stream);
}

const CollDesc kAllReduce{"allreduce", true, false, false, flatCounts, one, allReduceShare, oneStep,
                          issueAllReduce, reducedAll};
const CollDesc kAllGather{"allgather", false, false, false, gatherAllCounts, ranks, ringShare, oneStep,
                          issueAllGather, everyBlock};
const CollDesc kReduceScatter{"reducescatter", true, false, false, splitCounts, ranks, ringShare, oneStep,
                              issueReduceScatter, reducedBlock};
const CollDesc kBroadcast{"broadcast", false, true, false, flatCounts, one, one, oneStep,
                          issueBroadcast, rootsBuffer};
const CollDesc kReduce{"reduce", true, true, false, flatCounts, one, one, oneStep, issueReduce, reducedAtRoot};
const CollDesc kAlltoAll{"alltoall", false, false, false, allToAllCounts, ranks, ringShare, oneStep,
                         issueAlltoAll, blockFromEach};
const CollDesc kGather{"gather", false, true, false, joinCounts, ranks, ringShare, oneStep, issueGather,
                       everyBlockAtRoot};
const CollDesc kScatter{"scatter", false, true, false, splitCounts, ranks, ringShare, oneStep, issueScatter,
                        rootsBlock};
const CollDesc kSendRecv{"sendrecv", false, false, false, flatCounts, one, one, oneStep, issueSendRecv,
                         fromPrevious};
const CollDesc kHypercube{"hypercube", false, false, true, gatherAllCounts, ranksMinusOne, one, hypercubeSteps,
                          issueHypercube, everyBlock};

}  // namespace

const std::vector<const CollDesc*>& allColls() {
  static const std::vector<const CollDesc*> kAll{&kAllReduce, &kAllGather, &kReduceScatter, &kBroadcast,
                                                 &kReduce,    &kAlltoAll,  &kGather,        &kScatter,
                                                 &kSendRecv,  &kHypercube};
  return kAll;
}

const CollDesc* findColl(const char* name) {
  for (const CollDesc* c : allColls())
    if (std::strcmp(c->name, name) == 0) return c;
  return nullptr;
}

}  // namespace snperf
